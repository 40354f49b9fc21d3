"""TF32 for float32 convolutions and matrix products on NVIDIA GPUs: one run setting.

On NVIDIA GPUs since Ampere, cuDNN and cuBLAS can run float32 convolutions and matrix
products on the tensor cores in TF32, with float32's range but 10 mantissa bits instead of 23
(products rounded to about 3 decimal digits, sums in float32). PyTorch's defaults differ by
op: convolutions may use TF32 (``torch.backends.cudnn.allow_tf32 = True``), matrix products
may not (``torch.backends.cuda.matmul.allow_tf32 = False``). A ``32-true`` run on such a GPU
therefore computes its convolutions in TF32 unless told otherwise, and its record should say
so. The flags act only on CUDA kernels: a run on a CPU computes the same numbers whatever
they are.

The setting is ``trainer.tf32``: ``null`` leaves PyTorch's flags as they stand, ``true``
allows TF32 for both kinds of op, ``false`` for neither (IEEE float32 throughout). The flags
are set through the APIs Lightning itself reads (``allow_tf32``), not PyTorch's newer
``fp32_precision`` ones: PyTorch refuses to read one kind of flag once the other has been set.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["tf32", "tf32_state"]


def _read(flag: str) -> bool | None:
    """One TF32 flag (``None`` where PyTorch refuses to read it: new and old APIs mixed)."""
    owner = torch.backends.cudnn if flag == "conv" else torch.backends.cuda.matmul
    try:
        return bool(owner.allow_tf32)
    except RuntimeError:
        return None


def tf32_state() -> dict[str, bool | None]:
    """Whether float32 convolutions and matrix products on an NVIDIA GPU may use TF32 now.

    ``conv``: cuDNN's convolutions; ``matmul``: cuBLAS's matrix products.

    Examples:
        >>> with tf32(False):
        ...     tf32_state()
        {'conv': False, 'matmul': False}
    """
    return {"conv": _read("conv"), "matmul": _read("matmul")}


@contextmanager
def tf32(allow: bool | None) -> Iterator[None]:
    """Float32 convolutions and matrix products on an NVIDIA GPU in TF32 inside, or not.

    ``True``: both may use TF32; ``False``: neither; ``None``: the flags as they stand
    (PyTorch's defaults: convolutions yes, matrix products no). The flags are restored on exit.

    Args:
        allow: ``trainer.tf32``.
    """
    if allow is None:
        yield
        return
    conv, matmul = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = bool(allow)
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = conv, matmul
