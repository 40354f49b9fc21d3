r"""Self-routing without materialising the votes: for wide fully connected layers.

This computes exactly what :func:`selfcaps.caps.routing.self_routing` computes
on the votes of :func:`selfcaps.caps.layers.child_votes` (Hahn et al. 2019; MCAE
paper eqs. 1-3), the routing of :class:`selfcaps.caps.SelfRoutingDense`, but
never allocates the ``(B, N, M, D)`` vote tensor or any gradient of that size.
For MCAE's global decoder layer (``N = 512`` children, ``M = 64`` parents at the
``quick`` sizes) the votes are 134 MB per batch of 128, and the readable path
spends most of a pretraining step copying them between layouts.

The weighted sum of eq. 3 is rearranged so that the per-child weights come
first:

.. math::
    \sum_i c_{ij} a_i \hat u_{j|i}
      = \sum_i c_{ij} a_i W_{ij}^\top u_i
      = \sum_{(i, k)} \underbrace{c_{ij} a_i u_{ik}}_{Y_j[(i, k)]} W_{ij}[k, :]

so that for each parent ``j`` it is one matrix product ``Y_j W_j`` of the
``(B, N * C)`` weighted inputs with the ``(N * C, D)`` matrices of that parent.
On a CPU, parents are processed one at a time and the batch in chunks whose ``Y``
fits in the cache; the backward pass recomputes ``Y`` per chunk (as in activation
checkpointing) and needs only one more chunk-sized product, ``H_j = g_j W_j^\top``,
from which the gradients of the inputs and of the coupling-weighted activations
follow by element-wise sums. On an accelerator (:mod:`selfcaps.caps.chunking`) all
parents and the whole batch go through one batched product each way (``Y`` of every
parent at once, ``(M, N*C, B)``), in groups of parents only where that tensor would
exceed :data:`ACCELERATOR_ELEMENTS`: a few dozen kernels a call instead of a few per
parent. Only the inputs are saved for backward.

The softmax of eq. 1, the products :math:`c_{ij} a_i` and the normalisations of
eqs. 2-3 are left to autograd: they act on ``(B, N, M)`` tensors, ``D`` times
smaller than the votes. Correctness is tested against the readable path and by
float64 ``gradcheck`` (``tests/caps/test_fused_self_routing.py``). Double
backward is not supported.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from selfcaps.caps.chunking import batch_chunk, cpu_path
from selfcaps.caps.fused_routing import _buffers

__all__ = ["ACCELERATOR_ELEMENTS", "fused_self_routing", "weighted_vote_sum"]

_CHUNK_ELEMENTS = 1 << 19  # elements of Y per chunk on a CPU: 2 MB in float32
#: Elements of ``Y`` (all parents' weighted inputs) per group on an accelerator: 1 GiB in float32.
ACCELERATOR_ELEMENTS = 1 << 28


def _parent_groups(M: int, per_parent: int) -> list[slice]:
    """Groups of parents whose ``Y`` holds at most :data:`ACCELERATOR_ELEMENTS` elements."""
    size = max(1, min(M, ACCELERATOR_ELEMENTS // max(per_parent, 1)))
    return [slice(j, min(M, j + size)) for j in range(0, M, size)]


def _forward_batched(u: Tensor, w: Tensor, ca: Tensor, D: int) -> Tensor:
    """``out (M, D, B)`` with one product per parent group: ``W_g^T Y_g``."""
    N, C, B = u.shape
    M = ca.shape[1]
    w3 = w.view(N * C, M, D)
    out = u.new_empty(M, D, B)
    for g in _parent_groups(M, N * C * B):
        y = ca[:, g].permute(1, 0, 2).unsqueeze(2) * u  # (m, N, C, B)
        torch.bmm(w3[:, g].permute(1, 2, 0), y.reshape(-1, N * C, B), out=out[g])
    return out


def _backward_batched(
    u: Tensor, w: Tensor, ca: Tensor, grad: Tensor, needs: tuple[bool, bool, bool]
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """Gradients of :func:`_forward_batched` with respect to ``u``, ``w`` and ``ca``."""
    N, C, B = u.shape
    M, D = grad.shape[:2]
    w3 = w.view(N * C, M, D)
    grad_u = torch.zeros_like(u) if needs[0] else None
    grad_w = torch.empty_like(w3) if needs[1] else None
    grad_ca = torch.empty_like(ca) if needs[2] else None
    for g in _parent_groups(M, N * C * B):
        c = ca[:, g].permute(1, 0, 2).unsqueeze(2)  # (m, N, 1, B)
        m = c.shape[0]
        if grad_w is not None:  # dW_j = Y_j g_j^T
            y = (c * u).reshape(m, N * C, B)
            grad_w[:, g] = torch.bmm(y, grad[g].transpose(1, 2)).permute(1, 0, 2)
        if grad_u is None and grad_ca is None:
            continue
        h = torch.bmm(w3[:, g].permute(1, 0, 2), grad[g]).view(m, N, C, B)  # H_j = W_j g_j
        if grad_u is not None:
            grad_u += (c * h).sum(0)
        if grad_ca is not None:
            grad_ca[:, g] = (h * u).sum(2).permute(1, 0, 2)
    return grad_u, (grad_w.view(N, C, M * D) if grad_w is not None else None), grad_ca


class _WeightedVoteSum(torch.autograd.Function):
    """``P[j, :, b] = sum_i ca[i, j, b] * (W_ij^T u[i, :, b])`` without the votes.

    All tensors keep the batch last, so that the element-wise products run along
    contiguous memory and every product is a wide matrix product: ``u (N, C, B)``,
    ``ca (N, M, B)`` and, per parent ``j`` and batch chunk, ``Y_j (N*C, b)`` with
    ``Y_j[(i, k), b] = ca[i, j, b] u[i, k, b]``. The matrices of parent ``j``,
    ``W_j = weight.view(N*C, M*D)[:, j*D:(j+1)*D]``, are strided views that the
    matrix products read in place: the weight (67M values at the ``paper`` sizes)
    is never copied or transposed.
    """

    @staticmethod
    def forward(ctx: Any, u: Tensor, weight: Tensor, ca: Tensor) -> Tensor:  # type: ignore[override]
        N, C, B = u.shape
        M = ca.shape[1]
        D = weight.shape[-1] // M
        w = weight.view(N * C, M * D)
        ctx.save_for_backward(u, weight, ca)
        if not cpu_path(u):  # an accelerator: every parent, the whole batch
            return _forward_batched(u, w, ca, D)
        out = u.new_empty(M, D, B)
        ws, bc = _buffers(u), batch_chunk(u.device, N * C, B, _CHUNK_ELEMENTS)
        for b in range(0, B, bc):
            nb = min(bc, B - b)
            u_b, y, o = u[:, :, b : b + nb], ws.get("y", N, C, nb), ws.get("o", D, nb)
            for j in range(M):
                torch.mul(ca[:, j, b : b + nb].unsqueeze(1), u_b, out=y)
                w_j = w[:, j * D : (j + 1) * D]  # (N*C, D)
                out[j, :, b : b + nb] = torch.mm(w_j.t(), y.view(N * C, nb), out=o)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        u, weight, ca = ctx.saved_tensors
        N, C, B = u.shape
        M = ca.shape[1]
        D = weight.shape[-1] // M
        need_u, need_w, need_ca = ctx.needs_input_grad
        w = weight.view(N * C, M * D)
        grad = grad.contiguous()
        if not cpu_path(u):  # an accelerator: every parent, the whole batch
            return _backward_batched(u, w, ca, grad, (need_u, need_w, need_ca))
        grad_u = torch.zeros_like(u) if need_u else None
        grad_w = torch.zeros_like(weight) if need_w else None
        grad_w2 = grad_w.view(N * C, M * D) if grad_w is not None else None
        grad_ca = torch.empty_like(ca) if need_ca else None
        ws, bc = _buffers(u), batch_chunk(u.device, N * C, B, _CHUNK_ELEMENTS)
        for b in range(0, B, bc):
            nb = min(bc, B - b)
            u_b, y, h = u[:, :, b : b + nb], ws.get("y", N, C, nb), ws.get("h", N, C, nb)
            for j in range(M):
                c_j, g_j = ca[:, j, b : b + nb].unsqueeze(1), grad[j, :, b : b + nb]
                cols = slice(j * D, (j + 1) * D)
                if grad_w2 is not None:  # dW_j += Y_j g_j^T
                    torch.mul(c_j, u_b, out=y)
                    grad_w2[:, cols].addmm_(y.view(N * C, nb), g_j.t())
                if grad_u is None and grad_ca is None:
                    continue
                torch.mm(w[:, cols], g_j, out=h.view(N * C, nb))  # H_j = W_j g_j
                if grad_u is not None:
                    grad_u[:, :, b : b + nb].addcmul_(c_j, h)
                if grad_ca is not None:
                    grad_ca[:, j, b : b + nb] = h.mul_(u_b).sum(dim=1)
        return grad_u, grad_w, grad_ca


def weighted_vote_sum(u: Tensor, weight: Tensor, ca: Tensor) -> Tensor:
    r"""The numerator of eq. 3, :math:`\sum_i ca_{ij} \hat u_{j|i}`, without the votes.

    In batch-last layouts: equal to ``torch.einsum("nmb,nmdb->mdb", ca, votes)`` with
    ``votes[i, j, :, b] = W_ij^T u[i, :, b]``, i.e. ``child_votes`` up to layout.

    Args:
        u: Child poses ``(N, C, B)``.
        weight: Pose matrices ``(N, C, M * D)`` (the layout of ``SelfRoutingDense``).
        ca: Coupling coefficients times child activations ``(N, M, B)``.

    Returns:
        ``(M, D, B)``, in the widest dtype of the three (autocast is off inside).
    """
    N, C, B = u.shape
    if weight.shape[:2] != (N, C) or ca.shape[::2] != (N, B) or weight.shape[2] % ca.shape[1]:
        raise ValueError(
            f"shape mismatch: u {tuple(u.shape)} (N, C, B), weight {tuple(weight.shape)} "
            f"(N, C, M*D), ca {tuple(ca.shape)} (N, M, B)"
        )
    # One dtype throughout (the products write into buffers): under autocast the poses may
    # come in bfloat16 and the weight in float32; the sum then runs in float32.
    dtype = torch.promote_types(torch.promote_types(u.dtype, weight.dtype), ca.dtype)
    with torch.autocast(u.device.type, enabled=False):
        return _WeightedVoteSum.apply(
            u.to(dtype).contiguous(), weight.to(dtype).contiguous(), ca.to(dtype).contiguous()
        )


def fused_self_routing(
    pose: Tensor,
    act: Tensor,
    weight_pose: Tensor,
    weight_route: Tensor,
    bias_route: Tensor,
    eps: float = 1e-8,
) -> tuple[Tensor, Tensor]:
    r"""Self-routing of ``N`` children to ``M`` parents (eqs. 1-3), the votes never stored.

    Equal to ``self_routing(child_votes(pose, weight_pose, M), act, logits, eps)[:2]``
    with ``logits = pose_i W^{route}_i + b_i`` (see module docstring):

    .. math::
        c_{ij} = \operatorname{softmax}_j(W^{route}_i u_i + b_i)_j, \quad
        a_j = \frac{\sum_i c_{ij} a_i}{\sum_i a_i}, \quad
        v_j = \frac{\sum_i c_{ij} a_i W_{ij}^\top u_i}{\sum_i c_{ij} a_i}

    with ``eps`` added to both denominators.

    Args:
        pose: Child poses ``(B, N, C)``.
        act: Child activations ``(B, N)``.
        weight_pose: ``(N, C, M * D)``.
        weight_route: ``(N, C, M)``.
        bias_route: ``(N, M)``.
        eps: Epsilon of the divisions.

    Returns:
        Parent poses ``(B, M, D)`` and activations ``(B, M)``.

    Examples:
        >>> u, a = torch.randn(2, 6, 4), torch.rand(2, 6)
        >>> v, a_out = fused_self_routing(u, a, torch.randn(6, 4, 3 * 5),
        ...                               torch.randn(6, 4, 3), torch.zeros(6, 3))
        >>> v.shape, a_out.shape
        (torch.Size([2, 3, 5]), torch.Size([2, 3]))
    """
    ut = pose.permute(1, 2, 0).contiguous()  # (N, C, B)
    logits = torch.bmm(weight_route.transpose(1, 2), ut) + bias_route.unsqueeze(-1)  # (N, M, B)
    ca = torch.softmax(logits, dim=1) * act.t().unsqueeze(1)  # eq. 1 times a_i, (N, M, B)
    ca_sum = ca.sum(dim=0)  # (M, B)
    a_out = ca_sum / (act.sum(dim=1) + eps)  # eq. 2
    v = weighted_vote_sum(ut, weight_pose, ca) / (ca_sum.unsqueeze(1) + eps)  # eq. 3
    return v.permute(2, 0, 1), a_out.t()
