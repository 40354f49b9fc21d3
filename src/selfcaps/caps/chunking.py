"""How much of a batch a hot loop takes at once: cache-sized chunks on a CPU, else whole batches.

Some capsule kernels (:mod:`selfcaps.caps.fused_routing`, :mod:`selfcaps.caps.fused_self_routing`)
repeat several passes over a vote tensor per routing iteration. On a CPU those passes are
fastest when the votes of one chunk of the batch fit in the cache (about 4 MB), so the batch
is cut into chunks there. On an accelerator each chunk costs its own kernel launches (about
110 ops a chunk for dense routing) and the votes of a whole batch fit in device memory, so
the whole batch is one chunk: the number of ops per training step then does not grow with
the batch size.

:func:`batch_chunk` decides; :func:`sized_for` overrides the decision, which the benchmarks
use to count on a CPU the ops a GPU would launch (``sized_for("accelerator")``), and the
tests use to compare both paths.

Examples:
    >>> import torch
    >>> batch_chunk(torch.device("cpu"), per_sample=1 << 18, batch=64)  # 4 samples fill 4 MB
    4
    >>> with sized_for("accelerator"):
    ...     batch_chunk(torch.device("cpu"), per_sample=1 << 18, batch=64)
    64
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import torch

__all__ = ["CPU_CHUNK_ELEMENTS", "Sizing", "batch_chunk", "cpu_path", "sized_for", "sizing"]

#: Elements of a chunk's largest temporary on a CPU: 4 MB in float32.
CPU_CHUNK_ELEMENTS = 1 << 20

Sizing = Literal["device", "cpu", "accelerator"]
#: The sizing in force. A plain module attribute, not a ``contextvars.ContextVar``:
#: ``torch.compile`` reads it as a constant and guards on it (so a step compiled under one
#: sizing recompiles under another), whereas torch 2.11's Dynamo cannot trace
#: ``ContextVar.get`` (2.14's can) and broke the graph at every hot loop (7 breaks in CoCa's
#: loss, 26 in MCAE's). It is process-wide: :func:`sized_for` in one thread sizes the loops
#: of every thread.
_SIZING: Sizing = "device"


def sizing() -> Sizing:
    """The sizing in force: ``device`` (by the tensor's device), ``cpu`` or ``accelerator``."""
    return _SIZING


@contextmanager
def sized_for(kind: Sizing) -> Iterator[None]:
    """Size hot loops for ``kind`` whatever the tensors' device (``device``: by the device).

    Results do not depend on it (the chunked and the whole-batch paths compute the same
    values, up to float rounding order); only the number of ops and the memory do.
    """
    global _SIZING
    if kind not in ("device", "cpu", "accelerator"):
        raise ValueError(f"sizing must be 'device', 'cpu' or 'accelerator', got {kind!r}")
    previous, _SIZING = _SIZING, kind
    try:
        yield
    finally:
        _SIZING = previous


def cpu_path(t: torch.Tensor) -> bool:
    """Whether code on ``t`` takes its CPU path (``t`` on a CPU, unless sized for an accelerator).

    On the CPU path a hot loop may chunk for the cache and read a value on the host (which
    costs nothing there); the accelerator path is branch-free and reads nothing. Both compute
    the same values up to float rounding; the CPU path is the one the registry's numbers ran.
    """
    return _cpu(t.device)


def _cpu(device: torch.device) -> bool:
    kind = sizing()
    return device.type == "cpu" if kind == "device" else kind == "cpu"


def batch_chunk(
    device: torch.device, per_sample: int, batch: int, budget: int = CPU_CHUNK_ELEMENTS
) -> int:
    """Samples per chunk: whole batches on an accelerator, ``budget`` elements on a CPU.

    Args:
        device: The tensors' device.
        per_sample: Elements of the chunk's largest temporary per sample.
        batch: The batch size.
        budget: Elements a CPU chunk may hold.

    Returns:
        A chunk size in ``[1, batch]``.
    """
    if not _cpu(device):
        return max(1, batch)
    return max(1, min(batch, budget // max(per_sample, 1)))
