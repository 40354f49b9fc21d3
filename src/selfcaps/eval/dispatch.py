"""Ops and host synchronisations of a piece of code, counted at PyTorch's dispatcher.

On an accelerator a training step costs at least one kernel launch per operator it runs
(about 5-20 µs of host time each, whatever the tensor's size), and every read of a device
value on the host (``.item()``, ``bool(tensor)``, ``.tolist()``, a boolean-mask index,
``nonzero``) stalls the host until the device has caught up. Both can be counted on a CPU,
where the same Python code runs the same operators: :class:`DispatchTally` is a
``TorchDispatchMode`` that counts

* **ops**: every operator that reaches the dispatcher except those that run no kernel on a
  GPU: views (``view``, ``transpose``, ``expand``, slicing), the metadata-only
  ``detach``/``alias``, uninitialised allocations (``empty``, ``empty_like``,
  ``empty_strided``, ``new_empty``: the caching allocator hands out memory without a kernel;
  a CPU batch norm asks for an empty "reserve" tensor that cuDNN's allocates inside its own
  op) and the profiler's ``record_function`` markers (host bookkeeping, e.g. Lightning's step
  sections); on a GPU each counted op is about one kernel launch (a fused or a decomposed op
  may be more or fewer);
* **syncs**: operators whose result the host must read before it can go on
  (``aten._local_scalar_dense`` behind ``.item()``/``bool()``/``float()``, ``nonzero``,
  ``masked_select``, ``unique``, boolean-mask ``index``, ``repeat_interleave`` without an
  output size), plus ``Tensor.tolist()`` and ``Tensor.numpy()``, which read memory without
  an operator on a CPU and so are counted by wrapping them while the tally is open. Each
  sync records the line of selfcaps (or the caller's) code that caused it.

The tally has **phases** (:meth:`DispatchTally.phase`): the benchmarks split a training
step into load, augment, forward, backward and optimiser this way.

Examples:
    >>> import torch
    >>> x = torch.randn(4, 3)
    >>> with DispatchTally() as t:
    ...     y = (x * 2).sum()
    ...     z = y.item()
    ...     w = x.t().contiguous()  # a view (free) and a copy (one op)
    >>> t.ops, t.syncs
    (4, 1)
"""

from __future__ import annotations

import traceback
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["SYNC_OPS", "DispatchTally"]

#: Operators that read a device value on the host (their output size or value depends on data).
SYNC_OPS = frozenset(
    {
        "aten._local_scalar_dense",
        "aten.nonzero",
        "aten.nonzero_static",
        "aten.masked_select",
        "aten._unique",
        "aten._unique2",
        "aten.unique_dim",
        "aten.unique_consecutive",
        "aten.equal",
        "aten.is_nonzero",
    }
)

#: Operators that run no kernel on a GPU: metadata only, or memory left uninitialised.
_FREE = frozenset(
    {
        "aten.detach",
        "aten.alias",
        "aten.lift_fresh",
        "aten._unsafe_view",
        "aten.empty",
        "aten.empty_like",
        "aten.empty_strided",
        "aten.new_empty",
        "aten.new_empty_strided",
    }
)

#: Namespaces whose operators are host bookkeeping (``torch.profiler.record_function``).
_FREE_NAMESPACES = ("profiler.",)

_SELF = str(Path(__file__).resolve())
_TORCH = str(Path(torch.__file__).resolve().parent)


def _is_bool_index(func: Any, args: Sequence[Any]) -> bool:
    """``aten.index.Tensor`` with a boolean mask: its output size depends on the mask's values."""
    if str(func._overloadpacket) not in ("aten.index", "aten.index_put", "aten.index_put_"):
        return False
    indices = args[1] if len(args) > 1 else ()
    return any(
        isinstance(i, Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ()
    )


def _is_sync(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    name = str(func._overloadpacket)
    if name in SYNC_OPS:
        return True
    if name == "aten.repeat_interleave" and kwargs.get("output_size") is None:
        return isinstance(args[0], Tensor) and (len(args) < 2 or isinstance(args[1], Tensor))
    return _is_bool_index(func, args)


def _caller_line() -> str:
    """``file:line`` of the innermost frame of selfcaps, else of the innermost frame outside torch.

    A sync inside a library (Lightning's loop, torch's optimisers) is reported at that
    library's line, with the selfcaps line that called into it after ``<-``.
    """
    frames = [
        f
        for f in reversed(traceback.extract_stack()[:-1])
        if f.filename[:1] != "<"
        and str(Path(f.filename).resolve()) != _SELF
        and "_dynamo" not in Path(f.filename).parts
    ]
    ours = next((f for f in frames if "selfcaps" in Path(f.filename).parts), None)
    first = next((f for f in frames if not f.filename.startswith(_TORCH)), None)
    inner = frames[0] if frames else None
    if ours is not None and first is ours:
        return f"{_short(ours.filename)}:{ours.lineno}"
    shown = first or inner
    if shown is None:
        return "<torch>"
    where = f"{_short(shown.filename)}:{shown.lineno}"
    if inner is not None and inner is not shown and inner.filename.startswith(_TORCH):
        where = f"{_short(inner.filename)}:{inner.lineno} <- {where}"
    if ours is None or ours is shown:
        return where
    return f"{where} <- {_short(ours.filename)}:{ours.lineno}"


def _short(path: str) -> str:
    """A path from ``selfcaps/`` (or the last two parts) for reports."""
    parts = Path(path).parts
    if "selfcaps" in parts:
        i = len(parts) - 1 - parts[::-1].index("selfcaps")
        return "/".join(parts[i:])
    return "/".join(parts[-2:])


class DispatchTally(TorchDispatchMode):
    """Count ops and host syncs by phase while open (see the module docstring).

    Args:
        phase: The initial phase's name.
        where: Record the source line of every sync (a stack walk per sync).

    Attributes:
        ops_by_phase: ``Counter`` phase -> ops.
        syncs_by_phase: ``Counter`` phase -> syncs.
        sync_sites: ``Counter`` ``(phase, "file:line op")`` -> syncs.
        op_names: ``Counter`` op name -> calls, all phases.
    """

    def __init__(self, phase: str = "all", where: bool = True) -> None:
        super().__init__()
        self.current = phase
        self.where = where
        self.ops_by_phase: Counter[str] = Counter()
        self.syncs_by_phase: Counter[str] = Counter()
        self.sync_sites: Counter[tuple[str, str]] = Counter()
        self.op_names: Counter[str] = Counter()
        self._saved: dict[str, Any] = {}

    # ------------------------------------------------------------------ totals
    @property
    def ops(self) -> int:
        """Ops in every phase."""
        return sum(self.ops_by_phase.values())

    @property
    def syncs(self) -> int:
        """Host syncs in every phase."""
        return sum(self.syncs_by_phase.values())

    def reset(self) -> None:
        """Forget everything counted so far (after warm-up steps, say)."""
        for c in (self.ops_by_phase, self.syncs_by_phase, self.sync_sites, self.op_names):
            c.clear()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Count what runs inside under phase ``name``."""
        before, self.current = self.current, name
        try:
            yield
        finally:
            self.current = before

    # ------------------------------------------------------------------ counting
    def record_sync(self, what: str) -> None:
        """Count one host sync in the current phase, with the line that caused it."""
        self.syncs_by_phase[self.current] += 1
        if self.where:
            self.sync_sites[(self.current, f"{_caller_line()} {what}")] += 1

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """Run ``func``; count it as an op unless it is a view, and as a sync if it reads."""
        kwargs = kwargs or {}
        name = str(func._overloadpacket)
        if not func.is_view and name not in _FREE and not name.startswith(_FREE_NAMESPACES):
            self.ops_by_phase[self.current] += 1
            self.op_names[name] += 1
        if _is_sync(func, args, kwargs):
            self.record_sync(name.removeprefix("aten."))
        return func(*args, **kwargs)

    # tolist()/numpy() read a CPU tensor's memory without an operator: wrap them while open.
    def __enter__(self) -> DispatchTally:
        tally = self
        for meth in ("tolist", "numpy"):
            original = getattr(torch.Tensor, meth)
            self._saved[meth] = original

            def wrapped(t: Tensor, *a: Any, _o: Any = original, _m: str = meth, **k: Any) -> Any:
                tally.record_sync(_m)
                return _o(t, *a, **k)

            setattr(torch.Tensor, meth, wrapped)
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        for meth, original in self._saved.items():
            setattr(torch.Tensor, meth, original)
        self._saved.clear()

    # ------------------------------------------------------------------ reports
    def per_step(self, steps: int) -> dict[str, float]:
        """Ops per step by phase (and ``total``) after ``steps`` counted steps."""
        out = {k: v / steps for k, v in self.ops_by_phase.items()}
        out["total"] = self.ops / steps
        return out

    def sites(self, steps: int = 1, top: int = 10) -> list[tuple[str, str, float]]:
        """The lines that caused syncs: ``(phase, "file:line op", syncs per step)``, most first."""
        return [(p, s, n / steps) for (p, s), n in self.sync_sites.most_common(top)]
