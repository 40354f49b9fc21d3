"""Helpers shared by the format readers: bounded binary reads, ``.mat`` files, value checks.

Everything here raises :class:`~selfcaps.data.errors.CorruptDatasetError` naming
the file when the bytes are not what the format promises.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from torch import Tensor

from selfcaps.data._matv5 import check_mat5
from selfcaps.data.errors import CorruptDatasetError, corrupt_on_error

__all__ = [
    "as_labels",
    "as_uint8_pixels",
    "expect_eof",
    "load_mat",
    "mat_variable",
    "open_binary",
    "read_exact",
]

_CHUNK = 1 << 24


def open_binary(path: Path) -> IO[bytes]:
    """Open a file for reading bytes, decompressing it on the fly if its name ends in ``.gz``."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def read_exact(stream: IO[bytes], n: int, path: Path, what: str) -> bytearray:
    """Read exactly ``n`` bytes, in chunks (a lying header cannot make us allocate more).

    Args:
        stream: Open binary stream.
        n: Bytes wanted.
        path: The file (for errors).
        what: What the bytes are, e.g. ``"the image data"`` (for errors).

    Returns:
        ``n`` bytes (mutable, so ``np.frombuffer`` gives a writable array without a copy).

    Raises:
        CorruptDatasetError: If the file ends early, or is not valid gzip.
    """
    buf = bytearray()
    with corrupt_on_error(path, f"cannot read {what}"):
        while len(buf) < n:
            chunk = stream.read(min(_CHUNK, n - len(buf)))
            if not chunk:
                break
            buf += chunk
    if len(buf) != n:
        raise CorruptDatasetError(
            path, f"truncated: expected {n} bytes of {what}, the file ends after {len(buf)}"
        )
    return buf


def expect_eof(stream: IO[bytes], path: Path, expected_size: int) -> None:
    """Fail if anything follows the ``expected_size`` bytes already read."""
    with corrupt_on_error(path, "cannot read past the data"):
        extra = len(stream.read(_CHUNK))
    if extra:
        raise CorruptDatasetError(
            path,
            f"expected {expected_size} bytes in all (header + data), found at least "
            f"{extra} more: the header's dimensions do not match the file",
        )


def load_mat(path: Path, **kwargs: Any) -> dict[str, Any]:
    """``scipy.io.loadmat`` with every failure reported as a corrupt file.

    v5/v7 files are first checked by :func:`~selfcaps.data._matv5.check_mat5`, because
    scipy's reader can crash the interpreter on some damaged files.

    Args:
        path: A MATLAB v4/v5/v7 ``.mat`` file (v7.3 is HDF5 and is refused).
        **kwargs: Passed to ``loadmat``.

    Returns:
        The variables.
    """
    from scipy.io import loadmat
    from scipy.io.matlab import matfile_version

    with corrupt_on_error(path, "cannot read MATLAB file"):
        if matfile_version(path)[0] == 1:  # v5/v7: guard scipy's reader against crashing
            check_mat5(path)
        return loadmat(path, **kwargs)


def mat_variable(mat: dict[str, Any], name: str, path: Path) -> Any:
    """``mat[name]``, or a clear error naming the variables the file does have."""
    if name not in mat:
        have = sorted(k for k in mat if not k.startswith("__"))
        raise CorruptDatasetError(path, f"no variable {name!r} in this .mat file (it has {have})")
    return mat[name]


def as_uint8_pixels(values: Any, path: Path, what: str = "pixels") -> np.ndarray:
    """Validate pixel values in ``0..255`` and return them as ``uint8``.

    ``uint8`` passes through; other real dtypes are accepted when every value is a
    finite integer in ``0..255`` (e.g. MATLAB doubles); NaN, fractions or out-of-range
    values are errors, never silently converted.

    Args:
        values: Array-like.
        path: The file (for errors).
        what: What the values are (for errors).

    Returns:
        A ``uint8`` array of the same shape.
    """
    arr = np.asarray(values)
    if arr.dtype == np.uint8:
        return arr
    if arr.dtype.kind not in "iuf":
        raise CorruptDatasetError(path, f"{what} must be numbers, got dtype {arr.dtype}")
    bad = ~np.isfinite(arr) | (arr < 0) | (arr > 255) | (arr != np.round(arr))
    if arr.size and bad.any():
        first = arr.reshape(-1)[np.flatnonzero(bad.reshape(-1))[0]].item()
        raise CorruptDatasetError(
            path,
            f"{what} must be integers in 0..255, found {first} ({int(bad.sum())} bad values)",
        )
    return arr.astype(np.uint8)


def as_labels(values: Any, path: Path, num_classes: int, what: str = "labels") -> Tensor:
    """Validate integer labels in ``[0, num_classes)`` and return a ``torch.long`` vector.

    Args:
        values: Array-like, flattened.
        path: The file (for errors).
        num_classes: Labels must be smaller.
        what: What the values are (for errors).

    Returns:
        ``torch.long`` tensor ``(N,)``.
    """
    arr = np.asarray(values).reshape(-1)
    if arr.size and arr.dtype.kind not in "iuf":
        raise CorruptDatasetError(path, f"{what} must be integers, got dtype {arr.dtype}")
    if arr.size:
        bad = ~np.isfinite(arr) | (arr < 0) | (arr >= num_classes) | (arr != np.round(arr))
        if bad.any():
            first = arr[np.flatnonzero(bad)[0]].item()
            raise CorruptDatasetError(
                path,
                f"{what} must be integers in 0..{num_classes - 1}, found {first} "
                f"({int(bad.sum())} bad values)",
            )
    return torch.from_numpy(arr.astype(np.int64))
