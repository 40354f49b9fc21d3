"""Errors of the data layer: each one names the dataset or file and what is wrong.

* :class:`DatasetNotFoundError` (a ``FileNotFoundError``): the files are not
  there. The message lists every path that was tried, the data root and where
  that root came from (argument, ``--data-root``, ``SELFCAPS_DATA`` or the default).
* :class:`CorruptDatasetError` (a ``ValueError``): a file is there but cannot be
  what it claims (bad magic number, truncated, wrong shape, undecodable image).
* :class:`UnsafePickleError`: a pickle asked for something a dataset file never
  needs (a :class:`CorruptDatasetError`, so code catching corrupt files catches it).
* :class:`DownloadNotSupportedError`: ``download=True`` was passed; loading never
  downloads (``selfcaps data get`` does, when asked: :mod:`selfcaps.data.fetch`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "CorruptDatasetError",
    "DatasetNotFoundError",
    "DownloadNotSupportedError",
    "UnsafePickleError",
    "corrupt_on_error",
]


def where_to_get(dataset: str) -> str:
    """The last line of a not-found message: how to get the files of ``dataset``.

    Examples:
        >>> print(where_to_get("mnist"))  # doctest: +NORMALIZE_WHITESPACE
        To fetch them: `selfcaps data get mnist --root DIR`, then pass --data-root DIR (root=DIR
        in Python) or set SELFCAPS_DATA=DIR; or copy the official files to the paths above.
    """
    from selfcaps.data.fetch import FETCHABLE, fetch_command

    if dataset in FETCHABLE:
        return (
            f"To fetch them: `{fetch_command(dataset)}`, then pass --data-root DIR (root=DIR in "
            "Python) or set SELFCAPS_DATA=DIR; or copy the official files to the paths above."
        )
    return (
        "selfcaps cannot fetch this dataset (docs/datasets.md says where to get it): copy the "
        "official files to the paths above, or point --data-root (root=... in Python) or the "
        "SELFCAPS_DATA environment variable at a directory that has them."
    )


def _bullets(paths: Sequence[str | Path]) -> str:
    return "\n".join(f"  {p}" for p in paths)


class DatasetNotFoundError(FileNotFoundError):
    """The files of a dataset are missing.

    Attributes:
        dataset: The dataset's name.
        looked_for: Every path (file or directory) that was tried.
        root: The data root that was used.
        root_source: Where the root came from.
        also: A further way forward, on the message's last line (e.g. the embedded
            dataset a run can train on instead), or ``""``.
    """

    def __init__(
        self,
        dataset: str,
        looked_for: Sequence[str | Path],
        root: str | Path,
        root_source: str,
        also: str = "",
    ) -> None:
        self.dataset = dataset
        self.looked_for = [str(p) for p in looked_for]
        self.root = str(root)
        self.root_source = root_source
        self.also = also
        super().__init__(
            f"dataset {dataset!r} not found under data root {root} (root from {root_source}).\n"
            f"Looked for:\n{_bullets(self.looked_for)}\n{where_to_get(dataset)}"
            + (f"\n{also}" if also else "")
        )

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:  # picklable across processes
        return type(self), (self.dataset, self.looked_for, self.root, self.root_source, self.also)


class CorruptDatasetError(ValueError):
    """A dataset file exists but its contents are not what its format promises.

    Attributes:
        path: The offending file.
        problem: What is wrong with it.
    """

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:  # picklable across processes
        return type(self), (self.path, self.problem)


class UnsafePickleError(CorruptDatasetError):
    """A pickle tried to load a class or function that a dataset file never contains."""


class DownloadNotSupportedError(RuntimeError):
    """``download=True`` was requested; selfcaps works offline.

    Attributes:
        dataset: The dataset's name.
        expected: Where its files are expected.
    """

    def __init__(self, dataset: str, expected: Sequence[str | Path]) -> None:
        self.dataset = dataset
        self.expected = [str(p) for p in expected]
        super().__init__(
            f"download=True is not supported for dataset {dataset!r}: loading never "
            f"downloads. Put its files here instead:\n{_bullets(self.expected)}\n"
            f"then pass download=False (the default). {where_to_get(dataset)}"
        )

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:  # picklable across processes
        return type(self), (self.dataset, self.expected)


@contextmanager
def corrupt_on_error(path: str | Path, what: str) -> Iterator[None]:
    """Turn any exception raised by a third-party decoder into a :class:`CorruptDatasetError`.

    Decoders of untrusted bytes (``pickle``, ``scipy.io.loadmat``, Pillow, ``gzip``)
    raise dozens of exception types on malformed input; inside this block they
    all become one error that names the file. Our own errors pass through unchanged.

    Args:
        path: The file being decoded.
        what: What was being done, e.g. ``"cannot decode PNG"``.

    Examples:
        >>> with corrupt_on_error("x.bin", "cannot parse"):
        ...     {}["size"]
        Traceback (most recent call last):
        ...
        selfcaps.data.errors.CorruptDatasetError: x.bin: cannot parse: KeyError: 'size'
    """
    try:
        yield
    except CorruptDatasetError:
        raise
    except Exception as exc:
        raise CorruptDatasetError(path, f"{what}: {type(exc).__name__}: {exc}") from exc
