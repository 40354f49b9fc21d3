"""Folders of PNG/JPEG images, one subfolder per class (torchvision's ImageFolder layout).

``decode_image_folder`` decodes a whole ``<dir>/<class>/*.{png,jpg,jpeg}`` tree
with Pillow into one uint8 ``(N, 3, H, W)`` array (RGB) and caches the result
(see :mod:`selfcaps.data.cache`), keyed by the folder's path, file count, total
size and newest mtime. :class:`ImageFolderDataset` reads a dataset laid out as
``<root>/train/<class>/...`` and ``<root>/test/...`` or ``<root>/val/...``
(Imagenette / Imagewoof).

Classes are the sorted subfolder names of ``train/``; files are taken in sorted
order within each class. Hidden files and other extensions are ignored.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from selfcaps.data.cache import cached_arrays, files_fingerprint
from selfcaps.data.dataset import ImageDataset, Transform
from selfcaps.data.errors import CorruptDatasetError, DownloadNotSupportedError, corrupt_on_error
from selfcaps.data.layouts import (
    IMAGEFOLDER_PREFIX,
    image_folder_tried,
    locate_image_folder,
    split_folder,
)
from selfcaps.data.paths import resolve_root

__all__ = [
    "IMAGE_EXTENSIONS",
    "ImageFolderDataset",
    "ImageSize",
    "decode_image",
    "decode_image_folder",
    "list_classes",
    "split_folder",
]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg")
#: ``None`` keeps the images' own size; ``s`` resizes the shorter side to ``s`` and
#: centre-crops ``s x s``; ``(H, W)`` resizes to exactly that (aspect not kept).
ImageSize = int | tuple[int, int] | None
_DECODER_VERSION = 1


def list_classes(directory: Path) -> list[str]:
    """Sorted names of the non-hidden subfolders of ``directory``."""
    return sorted(
        e.name for e in os.scandir(directory) if e.is_dir() and not e.name.startswith(".")
    )


def _list_images(directory: Path, classes: list[str]) -> list[tuple[os.DirEntry[str], int]]:
    """``(file, label)`` for every image, classes in the given order, files sorted by name."""
    samples: list[tuple[os.DirEntry[str], int]] = []
    for label, name in enumerate(classes):
        folder = directory / name
        if not folder.is_dir():
            continue  # a class absent from this split (e.g. test) is allowed
        entries = sorted(
            (
                e
                for e in os.scandir(folder)
                if e.is_file()
                and not e.name.startswith(".")
                and e.name.lower().endswith(IMAGE_EXTENSIONS)
            ),
            key=lambda e: e.name,
        )
        if not entries:
            raise CorruptDatasetError(
                folder, f"class folder has no {'/'.join(IMAGE_EXTENSIONS)} images"
            )
        samples.extend((e, label) for e in entries)
    return samples


def decode_image(path: str | Path, image_size: ImageSize = None) -> np.ndarray:
    """Decode one PNG or JPEG file to an RGB uint8 array ``(H, W, 3)``.

    Args:
        path: The file.
        image_size: See :data:`ImageSize`.

    Returns:
        The pixels.

    Raises:
        CorruptDatasetError: If Pillow cannot decode the file as PNG or JPEG.
    """
    with (
        corrupt_on_error(path, "cannot decode image"),
        Image.open(path, formats=("PNG", "JPEG")) as im,
    ):
        if image_size is not None:
            h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
            im.draft("RGB", (w, h))  # JPEG: decode at a reduced scale >= the target
        rgb = im.convert("RGB")
        if isinstance(image_size, int):
            scale = image_size / min(rgb.size)
            w, h = (max(image_size, round(d * scale)) for d in rgb.size)
            left, top = (w - image_size) // 2, (h - image_size) // 2
            rgb = rgb.resize((w, h), Image.Resampling.BILINEAR)
            rgb = rgb.crop((left, top, left + image_size, top + image_size))
        elif image_size is not None:
            rgb = rgb.resize((image_size[1], image_size[0]), Image.Resampling.BILINEAR)
        return np.asarray(rgb)


def _decode_all(
    samples: list[tuple[os.DirEntry[str], int]], image_size: ImageSize
) -> dict[str, np.ndarray]:
    first = decode_image(samples[0][0].path, image_size)
    data = np.empty((len(samples), *first.shape), dtype=np.uint8)
    data[0] = first
    for i, (entry, _) in enumerate(samples[1:], start=1):
        img = decode_image(entry.path, image_size)
        if img.shape != first.shape:
            raise ValueError(
                f"images differ in size: {samples[0][0].path} is {first.shape[1]}x{first.shape[0]}"
                f", {entry.path} is {img.shape[1]}x{img.shape[0]} (W x H); pass image_size=... "
                "(e.g. image_size=160) to resize them while loading"
            )
        data[i] = img
    targets = np.array([label for _, label in samples], dtype=np.int64)
    return {"data": np.ascontiguousarray(data.transpose(0, 3, 1, 2)), "targets": targets}


def decode_image_folder(
    directory: str | Path,
    classes: list[str] | None = None,
    image_size: ImageSize = None,
    cache: bool = True,
) -> tuple[Tensor, Tensor, list[str]]:
    """Decode every image of a ``<directory>/<class>/<file>`` tree, with an on-disk cache.

    Args:
        directory: The tree.
        classes: Class names fixing the label order (e.g. those of the training
            split); default: the tree's own sorted subfolders. Subfolders not listed
            are an error; listed classes may be absent.
        image_size: See :data:`ImageSize`.
        cache: Reuse / write the decoded arrays in the cache directory.

    Returns:
        ``(data uint8 (N, 3, H, W), targets long (N,), classes)``.

    Raises:
        CorruptDatasetError: An image cannot be decoded, a class folder is empty,
            the tree has no class folders, or a class is not in ``classes``.
        ValueError: Images differ in size and ``image_size`` is ``None``.
    """
    directory = Path(directory).absolute()
    own = list_classes(directory)
    classes = own if classes is None else list(classes)
    if not own:
        raise CorruptDatasetError(directory, "no class subfolders (expected <class>/<image files>)")
    if unknown := sorted(set(own) - set(classes)):
        raise CorruptDatasetError(
            directory, f"class folders {unknown} are not among the classes {classes}"
        )
    samples = _list_images(directory, classes)
    key = {
        **files_fingerprint(directory, [entry.stat() for entry, _ in samples]),
        "classes": classes,
        "image_size": image_size,
        "decoder": _DECODER_VERSION,
    }
    arrays = cached_arrays("imagefolder", key, lambda: _decode_all(samples, image_size), cache)
    return torch.from_numpy(arrays["data"]), torch.from_numpy(arrays["targets"]), classes


class ImageFolderDataset(ImageDataset):
    """A dataset stored as ``<root>/{train,test|val}/<class>/*.{png,jpg,jpeg}``, RGB.

    ``test`` reads ``test/`` if it exists, else ``val/`` (Imagenette and Imagewoof
    ship ``train/`` and ``val/`` only and report results on ``val/``). ``val`` reads
    ``val/`` only when ``test/`` also exists (an official validation split).

    Args:
        root: The folder holding ``train/`` and ``test/`` (or ``val/``).
        split: ``"train"``, ``"test"`` or ``"val"``.
        transform: Applied to each uint8 ``(3, H, W)`` image.
        download: Must be false: selfcaps never downloads.
        image_size: See :data:`ImageSize`; ``None`` requires all images to have one size.
        cache: Cache the decoded arrays on disk.
        root_source: Where ``root`` came from, for error messages.
    """

    name = "imagefolder"

    def __init__(
        self,
        root: str | Path,
        split: str = "train",
        transform: Transform | None = None,
        download: bool = False,
        image_size: ImageSize = None,
        cache: bool = True,
        root_source: str | None = None,
    ) -> None:
        self.root, self.root_source = resolve_root(root, root_source)
        self.split = split
        label = f"{IMAGEFOLDER_PREFIX}{root}"
        if download:
            raise DownloadNotSupportedError(label, image_folder_tried(self.root, split))
        if split == "val" and (self.root / "val").is_dir() and not (self.root / "test").is_dir():
            raise ValueError(
                f"{self.root} has no official validation split: without test/, val/ is its test "
                "split. Carve a validation split from train/ with get_dataset(..., split='val')."
            )
        folder = locate_image_folder(label, self.root, self.root_source, split)
        classes = list_classes(self.root / "train")
        data, targets, classes = decode_image_folder(folder, classes, image_size, cache)
        super().__init__(data, targets, classes, transform)
