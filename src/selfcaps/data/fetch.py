"""Fetching a dataset's official files with torchvision's own downloaders (``selfcaps data get``).

This is the only place where selfcaps downloads anything, and only when asked to. Each
fetchable dataset is fetched by its torchvision class with ``download=True``: torchvision's
mirrors, its progress bar (on stderr) and its md5 checksums; the files land where the
selfcaps loaders read them (:mod:`selfcaps.data.layouts`: torchvision's layout).

The download runs in a temporary folder inside the data root; only once every file has
arrived and passed its checksum are the files moved into place. A failed download leaves
nothing behind. Importing this module imports neither torch nor torchvision.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selfcaps._names import unknown_name_error

__all__ = [
    "FETCHABLE",
    "FetchError",
    "FetchSource",
    "check_fetchable",
    "fetch_command",
    "fetch_dataset",
    "urls_of",
]


@dataclass(frozen=True)
class FetchSource:
    """How torchvision fetches one dataset.

    Attributes:
        torchvision_class: Name of the class in ``torchvision.datasets``.
        calls: Keyword arguments of each construction with ``download=True`` (one per
            file set: SVHN downloads each split separately).
        size: Rough download size, for the user.
    """

    torchvision_class: str
    calls: tuple[dict[str, Any], ...]
    size: str


#: selfcaps dataset name -> how torchvision fetches it.
FETCHABLE: dict[str, FetchSource] = {
    "mnist": FetchSource("MNIST", ({"train": True},), "12 MB"),
    "fashion_mnist": FetchSource("FashionMNIST", ({"train": True},), "30 MB"),
    "cifar10": FetchSource("CIFAR10", ({"train": True},), "163 MB"),
    "cifar100": FetchSource("CIFAR100", ({"train": True},), "161 MB"),
    "svhn": FetchSource("SVHN", ({"split": "train"}, {"split": "test"}), "246 MB"),
}

#: Files torchvision leaves after extracting them (not read by selfcaps: not kept).
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")


class FetchError(OSError):
    """A download failed or a file failed its checksum; nothing was left in the data root."""


def check_fetchable(name: str) -> None:
    """Raise ``ValueError`` naming the fetchable datasets (and the closest) if ``name`` is not one.

    Examples:
        >>> check_fetchable("cifar")
        Traceback (most recent call last):
        ...
        ValueError: unknown dataset to fetch 'cifar'. Did you mean 'cifar10'? Valid choices: ...
    """
    if name not in FETCHABLE:
        raise unknown_name_error("dataset to fetch", name, list(FETCHABLE))


def fetch_command(name: str) -> str:
    """The command that fetches a dataset, as a user types it.

    Examples:
        >>> fetch_command("mnist")
        'selfcaps data get mnist --root DIR'
    """
    return f"selfcaps data get {name} --root DIR"


def _torchvision_class(name: str) -> type:
    import torchvision.datasets

    return getattr(torchvision.datasets, FETCHABLE[name].torchvision_class)


def urls_of(cls: type, call: dict[str, Any] | None = None) -> list[str]:
    """The URLs a torchvision dataset class downloads from (as its class attributes say).

    Args:
        cls: ``torchvision.datasets.MNIST``, ``CIFAR10``, ``SVHN``, ...
        call: The construction's keyword arguments (SVHN: its ``split``).

    Returns:
        Every URL, each mirror of each file for the MNIST family.
    """
    if hasattr(cls, "mirrors"):
        return [f"{m}{filename}" for filename, _ in cls.resources for m in cls.mirrors]
    if hasattr(cls, "split_list"):
        return [cls.split_list[(call or {}).get("split", "train")][0]]
    return [cls.url]


def _move_into(staging: Path, root: Path) -> list[Path]:
    """Move every file under ``staging`` to the same place under ``root`` (archives dropped)."""
    moved = []
    for path in sorted(staging.rglob("*")):
        if not path.is_file() or path.name.endswith(_ARCHIVE_SUFFIXES):
            continue
        target = root / path.relative_to(staging)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
        moved.append(target)
    return moved


def fetch_dataset(
    name: str, root: str | Path, construct: Callable[..., Any] | None = None
) -> list[Path]:
    """Download a dataset's official files into ``root`` with torchvision, checksums checked.

    Args:
        name: A name from :data:`FETCHABLE`.
        root: The data root to fill (created if missing).
        construct: The torchvision class to call (default: the one :data:`FETCHABLE` names).

    Returns:
        The files written under ``root``.

    Raises:
        ValueError: Unknown name (the message lists the fetchable ones).
        FetchError: A download failed or a file did not match its checksum; the message
            names the URLs, and nothing was written under ``root``.
    """
    check_fetchable(name)
    cls = construct or _torchvision_class(name)
    root = Path(root).expanduser().absolute()
    created = [d for d in (root, *root.parents) if not d.exists()]  # innermost first
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".selfcaps-get-{name}-", dir=root))
    try:
        for call in FETCHABLE[name].calls:
            try:
                cls(str(staging), download=True, **call)
            except (OSError, RuntimeError) as err:
                shutil.rmtree(staging, ignore_errors=True)
                for folder in created:  # the folders this call made, if still empty
                    if folder.is_dir() and not any(folder.iterdir()):
                        folder.rmdir()
                urls = "\n".join(f"  {u}" for u in urls_of(cls, call))
                raise FetchError(
                    f"could not fetch {name}: {type(err).__name__}: {str(err).strip()}\n"
                    f"Its files come from:\n{urls}\nNothing was written under {root} (the partial "
                    "download was removed). Check the network connection and run the command again."
                ) from err
        return _move_into(staging, root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
