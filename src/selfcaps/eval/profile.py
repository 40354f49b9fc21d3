"""Parameter and FLOP counts of a model, with a per-module breakdown.

**FLOP policy.** FLOPs come from ``torch.utils.flop_counter.FlopCounterMode``:
matrix products and convolutions (``mm``, ``addmm``, ``bmm``, ``baddbmm``,
convolutions, attention kernels; ``nn.Linear``, ``einsum`` and ``matmul``
decompose into these), counted as 2 FLOPs per multiply-add. Element-wise ops and
reductions — squash, softmax, exp, norms, activations, normalisation layers, the
agreement updates of routing — are **not** counted: there is no agreed FLOP cost
for ``exp`` or ``sqrt``, and in the networks of this library they are a small
part of the work. So that the omission is visible rather than silent,
:func:`profile_model` also reports the number of output elements of the ops
without a formula (a rough scale of that work, not FLOPs), and
:func:`format_profile` says so in its output.

**Grouped convolutions.** ``torch.utils.flop_counter`` counts a grouped convolution's
forward correctly (its weight is ``(out, in/groups, k, k)``) but the input gradient of its
backward as if the convolution were dense: ``groups`` times too many (a depthwise layer of 256
channels, 256 times). :func:`flop_counter` replaces that formula: each gradient of a
convolution costs what its forward costs, grouped or not.

Counts are per forward pass at the given input shape; FLOPs per image are the
total divided by the batch size, so batch 1 and batch ``N`` agree whenever the
network treats samples independently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Container, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode, conv_flop_count

from selfcaps.eval._modes import eval_mode, modules_of

__all__ = [
    "FLOP_POLICY",
    "count_flops",
    "count_parameters",
    "flop_counter",
    "flops_by_kind",
    "format_profile",
    "profile_model",
]

FLOP_POLICY = (
    "FLOPs count matmul/linear/conv/bmm/einsum/attention ops only (2 per multiply-add, "
    "torch.utils.flop_counter); element-wise ops and reductions such as squash, softmax, "
    "norms and activations are NOT counted."
)


def _conv_backward_flop(
    grad_out_shape: Sequence[int],
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    _bias: Any,
    _stride: Any,
    _padding: Any,
    _dilation: Any,
    transposed: bool,
    _output_padding: Any,
    _groups: int,
    output_mask: Sequence[bool],
    out_shape: Any = None,
    **kwargs: Any,
) -> int:
    """FLOPs of a convolution's backward: each gradient asked for costs one forward.

    The input gradient is a (transposed) convolution of the output gradient with the same
    grouped weight, the weight gradient a convolution of the input with the output
    gradient restricted to each group: both take the forward's multiply-adds.
    """
    forward = conv_flop_count(list(x_shape), list(w_shape), list(grad_out_shape), transposed)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


def flop_counter() -> FlopCounterMode:
    """A ``FlopCounterMode`` (no display) whose convolution backward counts groups correctly.

    Examples:
        >>> conv = nn.Conv2d(8, 8, 3, groups=8, padding=1, bias=False)  # depthwise
        >>> x = torch.randn(1, 8, 4, 4, requires_grad=True)
        >>> with flop_counter() as fc:
        ...     conv(x).sum().backward()
        >>> fc.get_total_flops() == 3 * 2 * 8 * 9 * 16  # forward, input and weight gradients
        True
    """
    return FlopCounterMode(
        display=False, custom_mapping={torch.ops.aten.convolution_backward: _conv_backward_flop}
    )


def flops_by_kind(counter: FlopCounterMode) -> dict[str, int]:
    """A counter's FLOPs split into convolutions and matrix products.

    ``conv``: convolutions, forward and backward; ``matmul``: the rest (``mm``, ``bmm``,
    ``addmm``, attention, ...). The two can run at different peaks: on an NVIDIA GPU PyTorch
    lets cuDNN run float32 convolutions in TF32 by default but not cuBLAS's matrix products
    (:mod:`selfcaps.engine.tf32`).

    Examples:
        >>> conv, fc = nn.Conv2d(2, 4, 3, bias=False), nn.Linear(4, 3, bias=False)
        >>> with flop_counter() as counter:
        ...     _ = fc(conv(torch.ones(1, 2, 3, 3)).flatten(1))
        >>> flops_by_kind(counter)  # 2 x 4 outputs x 18 multiply-adds; 2 x 3 x 4
        {'conv': 144, 'matmul': 24}
    """
    ops = counter.get_flop_counts().get("Global", {})
    conv = sum(n for op, n in ops.items() if "conv" in str(op))
    return {"conv": int(conv), "matmul": int(sum(ops.values()) - conv)}


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters (shared parameters once).

    Args:
        model: The module.
        trainable_only: Count only parameters with ``requires_grad``.

    Returns:
        The count.

    Examples:
        >>> count_parameters(nn.Linear(10, 20))
        220
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


_NO_ARITHMETIC = frozenset(
    f"aten.{op}"
    for op in (  # noqa: SIM905 (a word list reads better than 29 lines of quotes)
        "clone copy_ _to_copy detach alias lift_fresh _unsafe_view cat stack repeat "
        "constant_pad_nd index index_select gather empty empty_like empty_strided "
        "zeros zeros_like ones ones_like full full_like new_empty new_zeros new_ones "
        "new_full fill_ zero_"
    ).split()
)
"""Data movement and tensor creation: ops without arithmetic, left out of the uncounted tally."""


class _UncountedOps(TorchDispatchMode):
    """Output elements of the ops with arithmetic that the FLOP counter has no formula for.

    Views, copies and tensor creation (:data:`_NO_ARITHMETIC`) are skipped.
    """

    def __init__(self, counted: Container[Any]) -> None:
        super().__init__()
        self.counted = counted
        self.elements: Counter[str] = Counter()

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """Run ``func`` and count its output elements if it does arithmetic the counter misses."""
        out = func(*args, **(kwargs or {}))
        name = str(func._overloadpacket)
        if (
            func._overloadpacket not in self.counted
            and not func.is_view
            and name not in _NO_ARITHMETIC
        ):
            n = sum(t.numel() for t in tree_leaves(out) if isinstance(t, Tensor))
            if n:
                self.elements[name] += n
        return out


def _measure(
    fn: Callable[..., Any], example_input: Tensor | Sequence[Tensor]
) -> tuple[FlopCounterMode, Counter[str]]:
    """Run ``fn`` once without gradients, its modules in eval mode, under both counters."""
    args = (example_input,) if isinstance(example_input, Tensor) else tuple(example_input)
    counter = flop_counter()
    # The tally is entered first (outer), so it sees the ops that actually run after
    # the FLOP counter has decomposed what it could into ops it counts.
    uncounted = _UncountedOps(counter.flop_registry)
    with torch.no_grad(), eval_mode(modules_of(fn)), uncounted, counter:
        fn(*args)
    return counter, uncounted.elements


def count_flops(
    model_or_fn: nn.Module | Callable[..., Any], example_input: Tensor | Sequence[Tensor]
) -> int:
    """FLOPs of one forward pass (see the module docstring for what is counted).

    Args:
        model_or_fn: A module or any callable (a module behind it is put in eval mode).
        example_input: The input tensor, or a sequence of positional inputs.

    Returns:
        Total FLOPs, 2 per multiply-add.

    Examples:
        >>> count_flops(nn.Linear(10, 20), torch.randn(3, 10))  # 2 * 3 * 10 * 20
        1200
    """
    counter, _ = _measure(model_or_fn, example_input)
    return counter.get_total_flops()


def _own_flops(inclusive: dict[str, int]) -> dict[str, int]:
    """FLOPs of each tracked module excluding its tracked submodules.

    Each module's FLOPs are taken from its nearest tracked ancestor, which need not
    be its parent: containers such as ``nn.ModuleList`` are never called, so never tracked.

    Examples:
        >>> _own_flops({"net": 10, "net.blocks.0": 3, "net.blocks.1": 4, "net.blocks.1.a": 1})
        {'net': 3, 'net.blocks.0': 3, 'net.blocks.1': 3, 'net.blocks.1.a': 1}
    """
    own = dict(inclusive)
    for name, flops in inclusive.items():
        ancestor = name.rpartition(".")[0]
        while ancestor and ancestor not in own:
            ancestor = ancestor.rpartition(".")[0]
        if ancestor in own and ancestor != name:
            own[ancestor] -= flops
    return own


def profile_model(model: nn.Module, input_shape: Sequence[int], top: int = 10) -> dict[str, Any]:
    """Parameters, forward FLOPs and the modules where the FLOPs are spent.

    The input is random, on the device and in the dtype of the model's first
    parameter; the model runs once in eval mode without gradients.

    Args:
        model: The network.
        input_shape: Input shape including the batch dimension, e.g. ``(1, 3, 32, 32)``.
        top: Number of modules in the breakdown.

    Returns:
        ``params``, ``trainable_params``, ``input_shape``, ``flops`` (the whole
        batch), ``flops_per_image``, ``modules`` (up to ``top`` dicts ``name``,
        ``type``, ``flops``, ``share`` in percent, by FLOPs in the module's own
        code, excluding its submodules, so shares do not overlap),
        ``uncounted_elements`` and ``uncounted_ops`` (output elements of ops
        without a FLOP formula, by op) and ``flop_policy``.

    Examples:
        >>> net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16, 2))
        >>> p = profile_model(net, (2, 1, 4, 4))
        >>> p["params"], p["flops"], p["flops_per_image"]
        (74, 704, 352.0)
        >>> [(m["name"], m["type"], m["flops"]) for m in p["modules"]]
        [('Sequential.0', 'Conv2d', 576), ('Sequential.3', 'Linear', 128)]
    """
    reference = next(iter(model.parameters()), torch.empty(0))
    x = torch.randn(*input_shape, device=reference.device, dtype=reference.dtype)
    counter, uncounted = _measure(model, x)
    total = counter.get_total_flops()
    inclusive = {
        name: sum(ops.values())
        for name, ops in counter.get_flop_counts().items()
        if name != "Global"
    }
    root = type(model).__name__
    types = {
        root + (f".{name}" if name else ""): type(m).__name__ for name, m in model.named_modules()
    }
    own = sorted(_own_flops(inclusive).items(), key=lambda item: -item[1])
    return {
        "params": count_parameters(model),
        "trainable_params": count_parameters(model, trainable_only=True),
        "input_shape": tuple(input_shape),
        "flops": total,
        "flops_per_image": total / input_shape[0],
        "modules": [
            {
                "name": name,
                "type": types.get(name, "?"),
                "flops": flops,
                "share": 100.0 * flops / total,
            }
            for name, flops in own[:top]
            if flops > 0
        ],
        "uncounted_elements": sum(uncounted.values()),
        "uncounted_ops": dict(uncounted.most_common()),
        "flop_policy": FLOP_POLICY,
    }


def _si(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:g}"


def format_profile(profile: dict[str, Any], max_ops: int = 5) -> str:
    """A plain-text report of :func:`profile_model`'s result.

    Args:
        profile: The dict returned by :func:`profile_model`.
        max_ops: Number of uncounted ops named.

    Returns:
        Lines of text, ending with what the FLOP count leaves out.

    Examples:
        >>> net = nn.Sequential(nn.Linear(8, 4), nn.Softmax(dim=1))
        >>> print(format_profile(profile_model(net, (1, 8))))  # doctest: +NORMALIZE_WHITESPACE
        input 1x8: 36 parameters (36 trainable), 64 FLOPs forward, 64 FLOPs per image
        module          type      FLOPs  share
        Sequential.0    Linear       64  100.0%
        not counted: 4 output elements of ops without a FLOP formula (aten._softmax 4)
        FLOPs count matmul/linear/conv/bmm/einsum/attention ops only (2 per multiply-add,
        torch.utils.flop_counter); element-wise ops and reductions such as squash, softmax,
        norms and activations are NOT counted.
    """
    p = profile
    shape = "x".join(str(s) for s in p["input_shape"])
    lines = [
        f"input {shape}: {p['params']:,} parameters ({p['trainable_params']:,} trainable), "
        f"{_si(p['flops'])} FLOPs forward, {_si(p['flops_per_image'])} FLOPs per image",
    ]
    if p["modules"]:
        width = max(len(m["name"]) for m in p["modules"]) + 4
        lines.append(f"{'module':<{width}}{'type':<10}{'FLOPs':>9}  share")
        lines += [
            f"{m['name']:<{width}}{m['type']:<10}{_si(m['flops']):>9}  {m['share']:5.1f}%"
            for m in p["modules"]
        ]
    ops = ", ".join(f"{op} {_si(n)}" for op, n in list(p["uncounted_ops"].items())[:max_ops])
    lines.append(
        f"not counted: {_si(p['uncounted_elements'])} output elements of ops without a "
        f"FLOP formula ({ops or 'none'})"
    )
    lines.append(p["flop_policy"])
    return "\n".join(lines)
