"""A restricted unpickler for dataset pickles (CIFAR batches).

``pickle.load`` runs whatever a file tells it to: a downloaded "dataset" can
execute code on the machine that opens it. :func:`load_dataset_pickle` only
lets a pickle build the few things a CIFAR batch is made of (dicts, lists,
bytes, strings, numbers and numpy arrays) and refuses every other class or
function with :class:`~selfcaps.data.errors.UnsafePickleError`, naming the file.
"""

from __future__ import annotations

import codecs
import importlib
import io
import pickle
from pathlib import Path
from typing import Any

from selfcaps.data.errors import UnsafePickleError, corrupt_on_error

__all__ = ["DatasetUnpickler", "load_dataset_pickle"]

# (module, name) -> (numpy submodule, attribute). Old pickles name ``numpy.core``,
# numpy >= 2 pickles name ``numpy._core``; both mean the same functions.
_NUMPY_ALLOWED = {
    ("numpy", "ndarray"): ("numpy", "ndarray"),
    ("numpy", "dtype"): ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"): ("multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"): ("multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"): ("numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"): ("numeric", "_frombuffer"),
}


def _numpy_attr(submodule: str, name: str) -> Any:
    if submodule == "numpy":
        return getattr(importlib.import_module("numpy"), name)
    try:
        module = importlib.import_module(f"numpy._core.{submodule}")
    except ImportError:  # numpy < 2
        module = importlib.import_module(f"numpy.core.{submodule}")
    return getattr(module, name)


class DatasetUnpickler(pickle.Unpickler):
    """An unpickler that builds only dicts, lists, bytes, strings, numbers and numpy arrays.

    Args:
        file: Binary stream.
        path: The file's path (named in errors).
    """

    def __init__(self, file: io.BufferedIOBase | io.BytesIO, path: Path) -> None:
        super().__init__(file, encoding="bytes")
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        """Resolve only numpy array reconstruction and latin-1 string encoding; refuse the rest."""
        if (module, name) in _NUMPY_ALLOWED:
            return _numpy_attr(*_NUMPY_ALLOWED[module, name])
        if (module, name) == ("_codecs", "encode"):  # how protocol 2 stores bytes
            return self._latin1_encode
        raise UnsafePickleError(
            self.path,
            f"refusing to unpickle {module}.{name}: a dataset pickle holds only dicts, lists, "
            "strings, numbers and numpy arrays. This file is not a CIFAR batch or has been "
            "tampered with; do not open it with pickle.load.",
        )

    def _latin1_encode(self, text: str, encoding: str = "utf-8") -> bytes:
        if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
            raise UnsafePickleError(
                self.path, f"refusing _codecs.encode with encoding {encoding!r}"
            )
        return codecs.encode(text, "latin1")


def load_dataset_pickle(path: str | Path) -> Any:
    """Unpickle a dataset file with :class:`DatasetUnpickler` (``encoding="bytes"``).

    The whole file is read first, so a lying length field cannot make the
    unpickler wait on or over-read the file.

    Args:
        path: The pickle.

    Returns:
        The unpickled object.

    Raises:
        UnsafePickleError: The pickle asks for anything but the allowed types.
        CorruptDatasetError: It is not a valid pickle.
    """
    path = Path(path)
    raw = path.read_bytes()
    with corrupt_on_error(path, "cannot unpickle"):
        return DatasetUnpickler(io.BytesIO(raw), path).load()
