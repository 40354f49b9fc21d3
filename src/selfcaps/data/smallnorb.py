"""smallNORB (LeCun et al., 2004) from the official binary matrix files.

Files, under ``root/smallNORB/`` (plain or ``.gz``, as distributed)::

    smallnorb-5x46789x9x18x6x2x96x96-training-{dat,cat,info}.mat
    smallnorb-5x01235x9x18x6x2x96x96-testing-{dat,cat,info}.mat

(the training files hold object instances 4, 6, 7, 8, 9; the test files 0, 1, 2, 3, 5).

**Binary matrix format.** Little-endian: an int32 magic number giving the element
type (``0x1E3D4C55`` uint8, ``0x1E3D4C54`` int32, ``0x1E3D4C56`` int16,
``0x1E3D4C51`` float32, ``0x1E3D4C53`` float64), an int32 number of dimensions
``d``, then ``max(3, d)`` int32 sizes (only the first ``d`` count), then the data.
``dat`` is uint8 ``(N, 2, 96, 96)`` (stereo pairs), ``cat`` int32 ``(N,)`` (5
classes), ``info`` int32 ``(N, 4)``: instance (0..9), elevation ``e`` (0..8, i.e.
``30 + 5 e`` degrees), azimuth ``a`` (0, 2, .., 34, i.e. ``10 a`` degrees), lighting (0..5).

selfcaps keeps the **left view** only (1 channel) and resizes it to ``size`` x ``size``
(default **48**, with antialiasing, as Hinton et al. 2018 and most capsule papers
do before cropping 32x32 patches; ``size=96`` keeps the original).

**Novel-viewpoint splits** (Hinton et al. 2018, Sec. 5.2; MCAE paper, Table 4):

* ``viewpoint="azimuth"``: train on azimuths {300, 320, 340, 0, 20, 40} degrees,
  test on 60 .. 280;
* ``viewpoint="elevation"``: train on elevations {30, 35, 40}, test on 45 .. 70.

With ``pool="official"`` (default, Hinton et al.'s protocol: "train on one third of
the training data ... test on two thirds of the test data") the training views come
from the official training file and the test views from the official test file (new
viewpoints *and* new instances). With ``pool="union"`` (datasets
``smallnorb_azimuth_union`` / ``smallnorb_elevation_union``) both splits are drawn from
the union of the two files, so familiar and novel views cover all ten instances and
only the viewpoint changes between train and test.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor
from torchvision.transforms.v2 import functional as TF

from selfcaps.data._io import as_labels, expect_eof, open_binary, read_exact
from selfcaps.data.dataset import FileDataset, Transform
from selfcaps.data.errors import CorruptDatasetError
from selfcaps.data.layouts import smallnorb_files, smallnorb_parts

__all__ = [
    "AZIMUTH_TRAIN_DEG",
    "ELEVATION_TRAIN_DEG",
    "NORB_DTYPES",
    "SMALLNORB_CLASSES",
    "SmallNORB",
    "read_norb_matrix",
]

NORB_DTYPES: dict[int, str] = {
    0x1E3D4C51: "<f4",
    0x1E3D4C53: "<f8",
    0x1E3D4C54: "<i4",
    0x1E3D4C55: "u1",
    0x1E3D4C56: "<i2",
}
SMALLNORB_CLASSES = ["animal", "human", "airplane", "truck", "car"]
AZIMUTH_TRAIN_DEG = (300, 320, 340, 0, 20, 40)
ELEVATION_TRAIN_DEG = (30, 35, 40)
_RESIZE_CHUNK = 2048


def read_norb_matrix(path: str | Path, mmap: bool = False) -> np.ndarray:
    """Read a NORB binary matrix file (optionally ``.gz``).

    Args:
        path: The file.
        mmap: For an uncompressed file, memory-map the data instead of reading it.

    Returns:
        The array (native byte order; read-only if memory-mapped).

    Raises:
        CorruptDatasetError: Unknown magic number, bad dimensions, or a file length
            that does not match the header.

    Examples:
        >>> import tempfile, os
        >>> f = os.path.join(tempfile.mkdtemp(), "cat.mat")
        >>> header = struct.pack("<5i", 0x1E3D4C54, 1, 2, 1, 1)  # int32, 1-D, dims (2, 1, 1)
        >>> _ = open(f, "wb").write(header + struct.pack("<2i", 4, 0))
        >>> read_norb_matrix(f)
        array([4, 0], dtype=int32)
    """
    path = Path(path)
    with open_binary(path) as stream:
        magic, ndim = struct.unpack("<2i", read_exact(stream, 8, path, "the matrix header"))
        if magic not in NORB_DTYPES:
            known = ", ".join(f"0x{m:08X}" for m in NORB_DTYPES)
            raise CorruptDatasetError(
                path, f"bad magic number 0x{magic & 0xFFFFFFFF:08X} (expected one of {known})"
            )
        if not 1 <= ndim <= 8:
            raise CorruptDatasetError(path, f"bad number of dimensions {ndim} (expected 1..8)")
        stored = max(3, ndim)
        dims = struct.unpack(
            f"<{stored}i", read_exact(stream, 4 * stored, path, "the matrix dimensions")
        )
        shape = dims[:ndim]
        if any(d < 0 for d in shape):
            raise CorruptDatasetError(path, f"negative dimension in {shape}")
        dtype = np.dtype(NORB_DTYPES[magic])
        header, body = 8 + 4 * stored, math.prod(shape) * dtype.itemsize
        compressed = path.suffix == ".gz"
        if not compressed and (size := path.stat().st_size) != header + body:
            raise CorruptDatasetError(
                path,
                f"wrong size: dimensions {shape} of {dtype} need {header} + {body} = "
                f"{header + body} bytes, the file has {size}",
            )
        if mmap and not compressed:
            return np.memmap(path, dtype, mode="r", offset=header, shape=shape)
        data = read_exact(stream, body, path, f"data for dimensions {shape} of {dtype}")
        expect_eof(stream, path, header + body)
    return np.frombuffer(data, dtype).reshape(shape).astype(dtype.newbyteorder("="), copy=False)


def _check_info(info: np.ndarray, path: Path) -> None:
    """Instance 0..9, elevation 0..8, azimuth even 0..34, lighting 0..5."""
    limits = {"instance": 9, "elevation": 8, "azimuth": 34, "lighting": 5}
    for col, (name, top) in enumerate(limits.items()):
        values = info[:, col]
        if values.size and (values.min() < 0 or values.max() > top):
            raise CorruptDatasetError(
                path, f"{name} column must lie in 0..{top}, got {values.min()}..{values.max()}"
            )
    if (info[:, 2] % 2).any():
        raise CorruptDatasetError(path, "azimuth column must be even (0, 2, .., 34)")


class SmallNORB(FileDataset):
    """smallNORB (24,300 train / 24,300 test, left view, 1 x size x size, 5 classes).

    See the module docstring for files, format and the novel-viewpoint splits.

    Args:
        root: Data root; files are read from ``root/smallNORB/`` (or ``root/smallnorb/``).
        train: Training split if true, else the test split.
        transform: Applied to each uint8 ``(1, size, size)`` image.
        download: Must be false: selfcaps never downloads.
        size: Side length after resizing (96 keeps the original resolution).
        viewpoint: ``None`` (official split), ``"azimuth"`` or ``"elevation"``.
        pool: For viewpoint splits, ``"union"`` or ``"official"`` (module docstring).
        root_source: Where ``root`` came from, for error messages.

    Attributes:
        info: ``(N, 4)`` long: instance, elevation index, azimuth index, lighting.
    """

    def __init__(
        self,
        root: str | Path | None = None,
        train: bool = True,
        transform: Transform | None = None,
        download: bool = False,
        size: int = 48,
        viewpoint: Literal["azimuth", "elevation"] | None = None,
        pool: Literal["union", "official"] = "official",
        root_source: str | None = None,
    ) -> None:
        if viewpoint not in (None, "azimuth", "elevation") or pool not in ("union", "official"):
            raise ValueError(
                "viewpoint must be None, 'azimuth' or 'elevation' and pool 'union' or "
                f"'official', got {viewpoint!r} and {pool!r}"
            )
        self.name = "smallnorb" if viewpoint is None else f"smallnorb_{viewpoint}"
        if viewpoint is not None and pool == "union":
            self.name += "_union"
        self.size, self.viewpoint, self.pool = size, viewpoint, pool
        super().__init__(root, train, transform, download, root_source)

    def _parts(self) -> list[str]:
        """Which official files this split reads: its own, or both for a union pool."""
        return smallnorb_parts(self.split, self.viewpoint, self.pool)

    def wanted_files(self) -> dict[str, list[Path]]:
        """``dat``, ``cat`` and ``info`` of each part, plain or ``.gz``."""
        return smallnorb_files(self.root, self.split, self.viewpoint, self.pool)

    def read(self, files: dict[str, Path]) -> tuple[Tensor, Tensor, Sequence[str]]:
        """Read the parts, then keep the split's viewpoints; sets ``self.info``."""
        loaded = [self._read_part(files, part) for part in self._parts()]
        data = torch.cat([p[0] for p in loaded])
        targets = torch.cat([p[1] for p in loaded])
        self.info = torch.cat([p[2] for p in loaded])
        if self.viewpoint is not None:
            familiar = self._familiar()
            keep = familiar if self.split == "train" else ~familiar
            data, targets, self.info = data[keep], targets[keep], self.info[keep]
        return data, targets, SMALLNORB_CLASSES

    def _familiar(self) -> Tensor:
        """Mask of the training viewpoints (azimuth or elevation)."""
        if self.viewpoint == "azimuth":
            return torch.isin(self.info[:, 2] * 10, torch.tensor(AZIMUTH_TRAIN_DEG))
        return torch.isin(30 + 5 * self.info[:, 1], torch.tensor(ELEVATION_TRAIN_DEG))

    def _read_part(self, files: dict[str, Path], part: str) -> tuple[Tensor, Tensor, Tensor]:
        dat_path, cat_path, info_path = (files[f"{part}-{k}"] for k in ("dat", "cat", "info"))
        dat = read_norb_matrix(dat_path, mmap=True)
        if dat.dtype != np.uint8 or dat.ndim != 4 or dat.shape[1] != 2:
            raise CorruptDatasetError(
                dat_path, f"expected uint8 stereo pairs (N, 2, H, W), got {dat.dtype} {dat.shape}"
            )
        n = dat.shape[0]
        cat = read_norb_matrix(cat_path)
        if cat.shape != (n,):
            raise CorruptDatasetError(
                cat_path, f"expected {n} labels (one per image pair), got shape {cat.shape}"
            )
        info = read_norb_matrix(info_path)
        if info.shape != (n, 4) or info.dtype.kind != "i":
            raise CorruptDatasetError(
                info_path, f"expected int (N={n}, 4) info, got {info.dtype} {info.shape}"
            )
        _check_info(info, info_path)
        labels = as_labels(cat, cat_path, len(SMALLNORB_CLASSES))
        images = torch.empty(n, 1, self.size, self.size, dtype=torch.uint8)
        for s in range(0, n, _RESIZE_CHUNK):
            left = torch.from_numpy(np.array(dat[s : s + _RESIZE_CHUNK, 0:1]))
            images[s : s + len(left)] = TF.resize(left, [self.size, self.size], antialias=True)
        return images, labels, torch.from_numpy(info.astype(np.int64))

    def extra_repr(self) -> str:
        """Adds size, viewpoint and pool."""
        view = f", viewpoint: {self.viewpoint} (pool: {self.pool})" if self.viewpoint else ""
        return f"{super().extra_repr()}, size: {self.size}{view}"
