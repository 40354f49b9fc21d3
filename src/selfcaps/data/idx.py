"""Reader for the IDX format of MNIST and Fashion-MNIST (LeCun et al.).

An IDX file is: two zero bytes; one byte giving the element type (``0x08``
uint8, ``0x09`` int8, ``0x0B`` int16, ``0x0C`` int32, ``0x0D`` float32, ``0x0E``
float64); one byte giving the number of dimensions ``d``; ``d`` big-endian
uint32 sizes; then the elements, big-endian, row-major. Files may be gzipped
(``.gz``, as distributed).
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np

from selfcaps.data._io import expect_eof, open_binary, read_exact
from selfcaps.data.errors import CorruptDatasetError

__all__ = ["IDX_DTYPES", "read_idx"]

IDX_DTYPES: dict[int, str] = {
    0x08: "u1",
    0x09: "i1",
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (optionally ``.gz``) into a native-endian numpy array.

    The magic number, the dimensions and the file length are all checked: the
    data must be exactly ``prod(dims) * itemsize`` bytes.

    Args:
        path: The file.

    Returns:
        The array, shaped by the file's dimensions.

    Raises:
        CorruptDatasetError: Bad magic number, unknown type code, truncated or
            over-long file, or invalid gzip data.

    Examples:
        >>> import tempfile, os
        >>> f = os.path.join(tempfile.mkdtemp(), "labels-idx1-ubyte")
        >>> _ = open(f, "wb").write(bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 2, 1]))
        >>> read_idx(f)
        array([7, 2, 1], dtype=uint8)
    """
    path = Path(path)
    with open_binary(path) as stream:
        magic = read_exact(stream, 4, path, "the IDX magic number")
        code, ndim = magic[2], magic[3]
        if magic[:2] != b"\0\0" or code not in IDX_DTYPES or ndim == 0:
            raise CorruptDatasetError(
                path,
                f"bad IDX magic number 0x{magic.hex()}: expected 0x0000TTDD with type code TT in "
                f"{{{', '.join(f'{c:02x}' for c in IDX_DTYPES)}}} and DD >= 1 dimensions",
            )
        dims = struct.unpack(f">{ndim}I", read_exact(stream, 4 * ndim, path, "the IDX dimensions"))
        dtype = np.dtype(IDX_DTYPES[code])
        header, body = 4 + 4 * ndim, math.prod(dims) * dtype.itemsize
        if path.suffix != ".gz" and (size := path.stat().st_size) != header + body:
            raise CorruptDatasetError(
                path,
                f"wrong size: dimensions {dims} of {dtype} need {header} + {body} = "
                f"{header + body} bytes, the file has {size}",
            )
        data = read_exact(stream, body, path, f"data for dimensions {dims} of {dtype}")
        expect_eof(stream, path, header + body)
    return np.frombuffer(data, dtype).reshape(dims).astype(dtype.newbyteorder("="), copy=False)
