"""Fused votes + dynamic routing for fully connected capsule layers.

This computes exactly what ``dynamic_routing(child_votes(u, W, M), ...)`` does
(see :func:`selfcaps.caps.routing.dynamic_routing` for the mathematics, Sabour
et al. 2017 eqs. 1-3), but faster and in a fraction of the memory:

* On a CPU the batch is processed in chunks whose votes fit in the cache (about
  4 MB each), so the repeated passes of the routing iterations read cached data
  and no batch-sized vote tensor (42 MB for CoCa at batch 128) is ever
  allocated; on an accelerator the whole batch is one chunk, so the kernels
  launched per call do not grow with the batch (:mod:`selfcaps.caps.chunking`).
  Nothing but the inputs is saved for backward: the chunk's votes
  are recomputed there (one GEMM), as in activation checkpointing.
* The votes are held in two layouts, ``(B*M, N, D)`` and ``(B*M, D, N)``, so
  that every contraction of the routing and of its backward is a row-vector
  times matrix product, the fast orientation of ``torch.bmm``.
* The backward pass is written by hand: the gradient with respect to the votes
  is assembled once per chunk as one batched outer product of the per-iteration
  coefficients and vector gradients, instead of one vote-sized tensor per use.

Its correctness is checked against the readable autograd implementation and by
float64 ``gradcheck`` in ``tests/caps/test_layers.py``
(``test_fused_equals_readable_routing_values_and_gradients``, ``test_fused_gradcheck``).
Double backward is not supported.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from selfcaps.caps.chunking import CPU_CHUNK_ELEMENTS, batch_chunk, cpu_path
from selfcaps.caps.functional import SQUASH_EPS, squash, unit_vector
from selfcaps.caps.routing import Agreement, Normalize

__all__ = ["bf16_vote_inputs", "fused_dense_routing"]


#: Votes per chunk on a CPU: 4 MB in float32.
_CHUNK_ELEMENTS = CPU_CHUNK_ELEMENTS

#: ``torch.bmm(a, b, out_dtype=torch.float32)`` exists (recent torch; CUDA only): a bfloat16
#: GEMM with a float32 result. Detected from the operator's overloads, not from a version.
_BMM_OUT_DTYPE = "dtype" in torch.ops.aten.bmm.overloads()


class _RoundToBF16(torch.autograd.Function):
    """Round to the nearest bfloat16 value, kept in the input's dtype; gradients pass unchanged."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:  # type: ignore[override]
        return x.to(torch.bfloat16).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:  # type: ignore[override]
        return grad


def bf16_vote_inputs(x: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    """Child poses and transformation matrices rounded to bfloat16 values, kept in their dtype.

    The inputs of the vote product when the votes are computed from bfloat16 inputs
    (:func:`selfcaps.caps.layers.votes_in_bf16`): every element rounded to the nearest
    bfloat16 (8 significant bits, relative error at most ``2^-8``). The gradient passes
    through unchanged (straight-through): the rounding counts as the identity. Tensors in a
    low precision already (``float16``, ``bfloat16``) are returned as they are.

    Args:
        x: Child poses ``(B, N, Din)``.
        weight: ``(N, Din, M * Dout)``.

    Returns:
        ``(x, weight)`` rounded.
    """
    if x.dtype not in (torch.float32, torch.float64):
        return x, weight
    return _RoundToBF16.apply(x), _RoundToBF16.apply(weight.to(x.dtype))


def _chunk_size(x: Tensor, n_children: int, out_caps: int, out_dim: int) -> int:
    """Samples per chunk: votes of about 4 MB on a CPU, the whole batch on an accelerator."""
    return batch_chunk(x.device, n_children * out_caps * out_dim, x.shape[0], _CHUNK_ELEMENTS)


def _vjp(fn: Any, x: Tensor, grad: Tensor) -> Tensor:
    """Vector-Jacobian product of an element-wise capsule map on a small tensor.

    ``torch.func.vjp``: the same backward ops as ``torch.autograd.grad`` (equal results),
    and ``torch.compile`` traces it without a graph break.
    """
    _, pull = torch.func.vjp(fn, x.detach())
    return pull(grad)[0]


class _Workspace:
    """Chunk-sized scratch buffers, kept per thread, device and dtype and reused across calls.

    Allocating fresh multi-megabyte tensors per chunk costs page faults every
    time the allocator has returned memory to the system (after any large
    free elsewhere in a training step). Buffers never escape a call: outputs
    and gradients are separate tensors. The cache holds a few chunk-sized
    buffers (about 20 MB for CoCa's class capsules).
    """

    _local = threading.local()

    def __init__(self, ref: Tensor) -> None:
        cache = getattr(self._local, "bufs", None)
        if cache is None:
            cache = self._local.bufs = {}
        self.ref = ref
        self.bufs = cache.setdefault((ref.device, ref.dtype), {})

    def get(self, name: str, *shape: int) -> Tensor:
        numel = math.prod(shape)
        buf = self.bufs.get(name)
        if buf is None or buf.numel() < numel:
            buf = self.bufs[name] = self.ref.new_empty(numel)
        return buf[:numel].view(*shape)


class _Fresh:
    """Freshly allocated chunk buffers: in inference mode, and on an accelerator.

    Cached buffers created in inference mode would be inference tensors, which a later
    training step may not write to. On an accelerator the device's caching allocator
    already reuses memory, and a cache kept here would be a side effect that
    ``torch.compile`` cannot trace (a graph break).
    """

    def __init__(self, ref: Tensor) -> None:
        self.ref = ref

    def get(self, name: str, *shape: int) -> Tensor:
        return self.ref.new_empty(shape)


def _buffers(ref: Tensor) -> _Workspace | _Fresh:
    """Reused scratch buffers on the CPU path; fresh ones on an accelerator or in inference mode."""
    # The device first: torch.compile cannot trace is_inference_mode_enabled (a graph break).
    fresh = not cpu_path(ref) or torch.is_inference_mode_enabled()
    return _Fresh(ref) if fresh else _Workspace(ref)


class _Votes:
    """A chunk's votes in two layouts, ``u`` ``(K, N, D)`` and ``uT`` ``(K, D, N)``; ``K = b*M``."""

    def __init__(
        self,
        x: Tensor,
        weight: Tensor,
        out_caps: int,
        agreement: Agreement,
        ws: _Workspace | _Fresh,
        native_bf16: bool = False,
    ) -> None:
        b, N, Din = x.shape
        MD = weight.shape[-1]
        D = MD // out_caps
        K = b * out_caps
        xt = ws.get("x", N, b, Din).copy_(x.transpose(0, 1))
        if native_bf16:  # inputs already bfloat16 values (bf16_vote_inputs): exact casts
            bf16 = torch.bfloat16
            votes = torch.bmm(xt.to(bf16), weight.to(bf16), out_dtype=torch.float32)
        else:
            votes = torch.bmm(xt, weight, out=ws.get("votes", N, b, MD))
        self.u = ws.get("u", K, N, D).copy_(votes.view(N, K, D).transpose(0, 1))
        self.uT = ws.get("uT", K, D, N).copy_(self.u.transpose(1, 2))
        self.b, self.M, self.N, self.D = b, out_caps, N, D
        # Inverse vote norms for the cosine agreement, (K, 1, N).
        self.inv_norm = (
            torch.rsqrt(self.uT.pow(2).sum(1, keepdim=True) + SQUASH_EPS)
            if agreement == "cosine"
            else None
        )


class _Trace:
    """What the forward iterations leave for the backward pass."""

    def __init__(self) -> None:
        self.c: list[Tensor] = []  # coupling coefficients, (b, M, N)
        self.s: list[Tensor] = []  # total inputs, (K, D)
        self.v: list[Tensor] = []  # parent poses, (K, D)
        self.agree: list[Tensor] = []  # agreements, (K, 1, N)


def _route(vt: _Votes, iters: int, agreement: Agreement, softmax_dim: int) -> tuple[Tensor, _Trace]:
    K, N, D = vt.u.shape
    logits = vt.u.new_zeros(vt.b, vt.M, N)
    tr = _Trace()
    for it in range(iters):
        c = torch.softmax(logits, dim=softmax_dim)
        s = torch.bmm(c.view(K, 1, N), vt.u).view(K, D)
        v = squash(s)
        tr.c.append(c), tr.s.append(s), tr.v.append(v)
        if it == iters - 1:
            break
        if agreement == "dot":
            a = torch.bmm(v.view(K, 1, D), vt.uT)
        else:
            a = torch.bmm(unit_vector(v).view(K, 1, D), vt.uT) * vt.inv_norm
        tr.agree.append(a)
        logits = logits + a.view(vt.b, vt.M, N)
    return v, tr


def _route_backward(
    vt: _Votes,
    grad_v: Tensor,
    tr: _Trace,
    agreement: Agreement,
    softmax_dim: int,
    detach_intermediate: bool,
    ws: _Workspace | _Fresh,
) -> Tensor:
    """Gradient of the routing with respect to the votes, in layout ``(K, D, N)``."""
    K, N, D = vt.u.shape
    iters = len(tr.c)
    coef: list[Tensor] = []  # (K, 1, N) fields
    vecs: list[Tensor] = []  # (K, D, 1) vectors; grad_uT = sum_t vecs[t] @ coef[t]
    scale_field: Tensor | None = None  # cosine: extra term scale_field * u
    g_logits: Tensor | None = None  # gradient w.r.t. the logits entering the current iteration
    for t in reversed(range(iters)):
        if t == iters - 1:
            g_v = grad_v
        else:
            # logits_{t+1} = logits_t + a_t(u, v_t): gradient g_logits flows to v_t and to u.
            g_a = g_logits.view(K, 1, N)
            if agreement == "dot":
                g_v = torch.bmm(g_a, vt.u).view(K, D)
                coef.append(g_a), vecs.append(tr.v[t].view(K, D, 1))
            else:
                g_a_scaled = g_a * vt.inv_norm
                g_vhat = torch.bmm(g_a_scaled, vt.u).view(K, D)
                g_v = _vjp(unit_vector, tr.v[t], g_vhat)
                coef.append(g_a_scaled), vecs.append(unit_vector(tr.v[t]).view(K, D, 1))
                # d a / d u = v_hat / |u| - a u / |u|^2
                term = -g_a * tr.agree[t] * vt.inv_norm.pow(2)
                scale_field = term if scale_field is None else scale_field + term
        g_s = _vjp(squash, tr.s[t], g_v)
        coef.append(tr.c[t].view(K, 1, N)), vecs.append(g_s.view(K, D, 1))
        if t == 0 or detach_intermediate:
            break
        g_c = torch.bmm(g_s.view(K, 1, D), vt.uT).view(vt.b, vt.M, N)
        c = tr.c[t]
        g_l = c * (g_c - (g_c * c).sum(softmax_dim, keepdim=True))
        g_logits = g_l if g_logits is None else g_logits + g_l
    grad_uT = torch.bmm(torch.cat(vecs, 2), torch.cat(coef, 1), out=ws.get("grad_uT", K, D, N))
    if scale_field is not None:
        grad_uT = grad_uT + scale_field * vt.uT
    return grad_uT


class _FusedDenseRouting(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: Tensor,
        weight: Tensor,
        out_caps: int,
        iters: int,
        agreement: Agreement,
        normalize: Normalize,
        detach_intermediate: bool,
        native_bf16: bool,
    ) -> tuple[Tensor, Tensor]:
        B, N, _ = x.shape
        D = weight.shape[-1] // out_caps
        softmax_dim = 1 if normalize == "parents" else 2
        chunk = _chunk_size(x, N, out_caps, D)
        v_out = x.new_empty(B, out_caps, D)
        c_out = x.new_empty(B, out_caps, N)
        ws = _buffers(x)
        for i in range(0, B, chunk):
            vt = _Votes(x[i : i + chunk], weight, out_caps, agreement, ws, native_bf16)
            v, tr = _route(vt, iters, agreement, softmax_dim)
            v_out[i : i + chunk] = v.view(vt.b, out_caps, D)
            c_out[i : i + chunk] = tr.c[-1]
        ctx.save_for_backward(x, weight)
        ctx.config = (
            out_caps,
            iters,
            agreement,
            softmax_dim,
            detach_intermediate,
            chunk,
            native_bf16,
        )
        ctx.mark_non_differentiable(c_out)
        return v_out, c_out.transpose(1, 2)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_v: Tensor, _grad_c: Tensor) -> tuple[Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        out_caps, iters, agreement, softmax_dim, detach_intermediate, chunk, native = ctx.config
        B, N, _ = x.shape
        grad_x = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None
        ws = _buffers(x)
        for i in range(0, B, chunk):
            xc = x[i : i + chunk]
            vt = _Votes(xc, weight, out_caps, agreement, ws, native)
            _, tr = _route(vt, iters, agreement, softmax_dim)
            g = grad_v[i : i + chunk].reshape(-1, vt.D)
            grad_uT = _route_backward(vt, g, tr, agreement, softmax_dim, detach_intermediate, ws)
            # (K, D, N) -> (N, b, M*D), the layout of the votes GEMM.
            grad_votes = ws.get("grad_votes", N, vt.b, weight.shape[-1])
            grad_votes.view(N, -1).copy_(grad_uT.view(-1, N).t())
            if grad_x is not None:
                grad_x[i : i + chunk] = torch.bmm(grad_votes, weight.transpose(1, 2)).transpose(
                    0, 1
                )
            if grad_w is not None:
                grad_w.baddbmm_(xc.transpose(0, 1).transpose(1, 2), grad_votes)
        return grad_x, grad_w, None, None, None, None, None, None


def _autocast_dtype(device: str) -> torch.dtype | None:
    """The dtype autocast casts to on ``device`` now, or ``None`` when it is off.

    ``torch.get_autocast_dtype(device)`` exists from torch 2.4; older releases (we support
    2.2) name the CPU and CUDA variants separately.
    """
    if hasattr(torch, "get_autocast_dtype"):
        return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    if device == "cpu":
        on, dtype = torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()
    else:
        on, dtype = torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype()
    return dtype if on else None


def fused_dense_routing(
    x: Tensor,
    weight: Tensor,
    out_caps: int,
    iters: int = 3,
    agreement: Agreement = "dot",
    normalize: Normalize = "parents",
    detach_intermediate: bool = False,
    float32_under_autocast: bool = True,
    votes_bf16: bool = False,
) -> tuple[Tensor, Tensor]:
    """Votes ``u_hat_{j|i} = W_ij u_i`` and dynamic routing, fused (see module docstring).

    Equal to ``dynamic_routing(child_votes(x, weight, out_caps), iters, agreement,
    detach_intermediate, normalize)``.

    Args:
        x: Child poses ``(B, N, Din)``.
        weight: ``(N, Din, out_caps * Dout)`` (the layout of :class:`DenseCaps`).
        out_caps: Parents ``M``.
        iters: Routing iterations (>= 1).
        agreement: ``"dot"`` or ``"cosine"``.
        normalize: ``"parents"`` or ``"children"``.
        detach_intermediate: Gradients through the last iteration only.
        float32_under_autocast: Under autocast (or with bfloat16/float16 poses), route in
            float32 and return poses in the input's dtype (the default). ``False``: route in
            autocast's dtype (or the poses'), votes, routing iterations and gradients
            included, which is faster on a CPU with native bfloat16 and less exact
            (``trainer.routing_precision: autocast``, docs/benchmarks.md).
        votes_bf16: Compute the votes from bfloat16 inputs with float32 accumulation and a
            float32 result; the routing stays in float32 (float64 inputs: float64 throughout,
            rounded inputs only). :func:`selfcaps.caps.layers.votes_in_bf16` says what is
            rounded. Nothing changes when the routing runs in a low precision.

    Returns:
        ``(v, c)``: parent poses ``(B, M, Dout)`` and final coupling coefficients
        ``(B, N, M)`` (not differentiable).

    Examples:
        >>> x, w = torch.randn(4, 32, 8), torch.randn(32, 8, 10 * 16)
        >>> v, c = fused_dense_routing(x, w, out_caps=10)
        >>> v.shape, c.shape
        (torch.Size([4, 10, 16]), torch.Size([4, 32, 10]))
    """
    if x.dim() != 3 or weight.dim() != 3 or x.shape[1:] != weight.shape[:2]:
        raise ValueError(
            f"expected x (B, N, Din) and weight (N, Din, M*Dout) with matching N, Din; "
            f"got x {tuple(x.shape)}, weight {tuple(weight.shape)}"
        )
    if weight.shape[-1] % out_caps:
        raise ValueError(
            f"weight's last dim {weight.shape[-1]} is not a multiple of out_caps={out_caps}"
        )
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    if agreement not in ("dot", "cosine"):
        raise ValueError(f"agreement must be 'dot' or 'cosine', got {agreement!r}")
    if normalize not in ("parents", "children"):
        raise ValueError(f"normalize must be 'parents' or 'children', got {normalize!r}")
    dtype, device = x.dtype, x.device.type
    low = (torch.float16, torch.bfloat16)
    if float32_under_autocast:
        if dtype in low:
            x, weight = x.float(), weight.float()
    else:  # route in the low precision autocast chose (or the poses')
        autocast_dtype = _autocast_dtype(device)
        if dtype not in low and autocast_dtype is not None:
            x = x.to(autocast_dtype)
        weight = weight.to(x.dtype)
    native_bf16 = False
    if votes_bf16 and x.dtype not in low:
        x, weight = bf16_vote_inputs(x, weight)
        native_bf16 = _BMM_OUT_DTYPE and x.dtype == torch.float32 and device == "cuda"
    # Autocast off inside: it would cast the votes' and the routing's products to its dtype.
    with torch.autocast(device, enabled=False):
        v, c = _FusedDenseRouting.apply(
            x, weight, out_caps, iters, agreement, normalize, detach_intermediate, native_bf16
        )
    return (v.to(dtype), c) if float32_under_autocast else (v, c)
