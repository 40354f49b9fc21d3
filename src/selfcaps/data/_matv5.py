"""A structural check of MATLAB v5 ``.mat`` files, run before ``scipy.io.loadmat``.

scipy's v5 reader (1.17) trusts the data-type code of each element tag: an
invalid code indexes past a C array and **crashes the interpreter** (segfault;
see scipy PR #25349) instead of raising. A damaged download must not kill a
training run, so :func:`check_mat5` walks the file's element tree first,
without reading any array data, and raises
:class:`~selfcaps.data.errors.CorruptDatasetError` if

* an element's type code is not one that scipy can decode where it stands,
* an element claims more bytes than its parent (or the file) holds,
* a numeric array's data size disagrees with its dimensions,
* a zlib-compressed element (MATLAB's default since v7) does not inflate.

Compressed elements are inflated as a stream (bounded memory) and discarded.
Only the structure is checked; values are checked by the dataset readers.
"""

from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path
from typing import IO

from selfcaps.data.errors import CorruptDatasetError

__all__ = ["check_mat5"]

MI_MATRIX, MI_COMPRESSED = 14, 15
#: Type codes scipy decodes as numeric/char data -> bytes per element
#: (scipy has no decoder for 0, 8, 10, 11, 14, 15, 19 and above).
NUMERIC_TYPES = {1: 1, 2: 1, 3: 2, 4: 2, 5: 4, 6: 4, 7: 4, 9: 8, 12: 8, 13: 8, 16: 1, 17: 2, 18: 4}
CELL, STRUCT, OBJECT, CHAR, SPARSE = 1, 2, 3, 4, 5
NUMERIC_CLASSES = range(6, 16)  # double, single, int8 .. uint64
_CHUNK = 1 << 20


class _Stream:
    """Sequential reads and skips over a file region or an inflating zlib stream."""

    def __init__(self, f: IO[bytes], size: int, path: Path, compressed: bool = False) -> None:
        self.f, self.left, self.path = f, size, path
        self.inflate = zlib.decompressobj() if compressed else None
        self.buf = bytearray()
        self.pos = 0  # bytes consumed from this stream

    def _raw(self, n: int) -> bytes:
        data = self.f.read(min(n, self.left))
        self.left -= len(data)
        return data

    def read(self, n: int) -> bytes:
        while len(self.buf) < n:
            more = self._raw(n - len(self.buf)) if self.inflate is None else self._inflate_some()
            if not more:
                break
            self.buf += more
        out = bytes(self.buf[:n])
        del self.buf[:n]
        self.pos += len(out)
        return out

    def _inflate_some(self) -> bytes:
        """The next piece of inflated data (at most one chunk); ``b""`` at the end."""
        inflate = self.inflate
        if inflate is None:
            return b""
        try:
            while not inflate.eof:
                tail = inflate.unconsumed_tail or self._raw(_CHUNK)
                if not tail:
                    return inflate.flush()
                more = inflate.decompress(tail, _CHUNK)
                if more:
                    return more
        except zlib.error as exc:
            raise CorruptDatasetError(
                self.path, f"compressed element does not inflate: {exc}"
            ) from exc
        return b""

    def skip(self, n: int) -> None:
        if self.inflate is None and not self.buf:
            if n > self.left:
                self.truncated(n, self.left)
            self.f.seek(n, 1)
            self.left -= n
            self.pos += n
            return
        while n > 0:
            got = len(self.read(min(n, _CHUNK)))
            if got == 0:
                self.truncated(n, 0)
            n -= got

    def exhausted(self) -> bool:
        return not self.read_ahead()

    def read_ahead(self) -> bytes:
        data = self.read(1)
        if data:
            self.buf[:0] = data
            self.pos -= 1
        return data

    def truncated(self, wanted: int, have: int) -> None:
        raise CorruptDatasetError(
            self.path, f"truncated: an element needs {wanted} more bytes, {have} left"
        )


class _Walker:
    def __init__(self, path: Path, endian: str) -> None:
        self.path, self.endian = path, endian

    def fail(self, problem: str) -> None:
        raise CorruptDatasetError(self.path, f"not a valid MATLAB v5 file: {problem}")

    def tag(self, s: _Stream) -> tuple[int, int, bytes | None]:
        """``(type code, byte count, data)``; data only for a small element (all in 8 bytes)."""
        raw = s.read(8)
        if len(raw) < 8:
            self.fail(f"truncated element tag at byte {s.pos}")
        word, count = struct.unpack(f"{self.endian}II", raw)
        if word >> 16:  # small element: type and size in the first 4 bytes, data in the next 4
            mdtype, count = word & 0xFFFF, word >> 16
            if count > 4:
                self.fail(f"small element claims {count} bytes (at most 4)")
            return mdtype, count, raw[4 : 4 + count]
        return word, count, None

    def numeric(self, s: _Stream) -> tuple[int, int, bytes | None]:
        """Read one numeric element: ``(type code, byte count, data if at most 64 bytes)``."""
        mdtype, count, small = self.tag(s)
        if mdtype not in NUMERIC_TYPES:
            self.fail(f"element type {mdtype} where numeric data is expected (byte {s.pos - 8})")
        if small is not None:
            return mdtype, count, small
        if count > 64:
            s.skip(count + (-count % 8))
            return mdtype, count, None
        data = s.read(count)
        if len(data) < count:
            s.truncated(count, len(data))
        s.skip(-count % 8)
        return mdtype, count, data

    def elements(self, s: _Stream) -> None:
        """Top level (or inside a compressed element): a sequence of matrices."""
        while not s.exhausted():
            mdtype, count, small = self.tag(s)
            if mdtype == MI_COMPRESSED and small is None and s.inflate is None:
                if count > s.left:
                    s.truncated(count, s.left)
                start = s.f.tell()
                self.elements(_Stream(s.f, count, self.path, compressed=True))
                s.f.seek(start + count)
                s.left -= count
                s.pos += count
            elif mdtype == MI_MATRIX and small is None:
                self.matrix(s, count)
            else:
                self.fail(f"top-level element of type {mdtype} (expected a matrix)")

    def matrix(self, s: _Stream, count: int) -> None:
        end = s.pos + count
        if count == 0:
            return
        _, _, flags = self.numeric(s)
        _, _, dims_raw = self.numeric(s)
        self.numeric(s)  # the name
        if flags is None or len(flags) < 4 or dims_raw is None or len(dims_raw) % 4:
            self.fail("malformed array flags or dimensions")
        cls = struct.unpack(f"{self.endian}I", flags[:4])[0] & 0xFF
        dims = struct.unpack(f"{self.endian}{len(dims_raw) // 4}i", dims_raw)
        if any(d < 0 for d in dims):
            self.fail(f"negative dimension in {dims}")
        if cls in (CELL, STRUCT, OBJECT):
            if cls == OBJECT:
                self.numeric(s)  # class name
            if cls in (STRUCT, OBJECT):
                self.numeric(s)  # field name length
                self.numeric(s)  # field names
            while s.pos < end:
                mdtype, sub, small = self.tag(s)
                if mdtype != MI_MATRIX or small is not None:
                    self.fail(f"element type {mdtype} where a cell or field matrix is expected")
                self.matrix(s, sub)
        elif cls in (CHAR, SPARSE) or cls in NUMERIC_CLASSES:
            while s.pos < end:
                mdtype, size, _ = self.numeric(s)
                expected = math.prod(dims) * NUMERIC_TYPES[mdtype]
                if cls in NUMERIC_CLASSES and size != expected:
                    self.fail(f"{size} bytes of data for dimensions {dims} of type {mdtype}")
        else:
            self.fail(f"unsupported array class {cls} (function handles and objects are not data)")
        if s.pos != end:
            self.fail(f"matrix contents end at byte {s.pos}, its tag says {end}")


def check_mat5(path: str | Path) -> None:
    """Check the element structure of a MATLAB v5/v7 ``.mat`` file (see the module docstring).

    Args:
        path: The file (its 128-byte header must say version 5).

    Raises:
        CorruptDatasetError: Naming the file and the first structural problem found.
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        header = f.read(128)
        if len(header) < 128:
            raise CorruptDatasetError(
                path, f"truncated: a MATLAB v5 header is 128 bytes, the file has {size}"
            )
        endian = "<" if header[126:128] == b"IM" else ">"
        walker = _Walker(path, endian)
        walker.elements(_Stream(f, size - 128, path))
