"""A structural check of MATLAB v5 files, run before scipy parses them.

scipy's compiled MAT-v5 reader trusts each element's data-type code: an unknown code (one flipped
byte) crashes the process with a segmentation fault instead of raising. So every data element
of a v5 file is walked first (the MAT-File Format's "Data Element Format"): each tag must have a
known type and a size that fits inside its parent, and its data must match the matrix's flags
and dimensions (a complex flag without an imaginary part also crashes scipy).

Layout: a 128-byte header (at byte 124 the version and the endian indicator `IM` / `MI`), then
data elements. A tag is two uint32 (type, byte count), then the data padded to 8 bytes; a
"small" element packs (byte count << 16 | type) in one uint32 and at most 4 data bytes in the
next. `miMATRIX` elements hold sub-elements (array flags, dimensions, name, data);
`miCOMPRESSED` elements are unpadded zlib streams of one element.
"""

from __future__ import annotations

import math
import struct
import zlib
from typing import BinaryIO

HEADER_BYTES = 128
MI_INT32, MI_UINT32, MI_MATRIX, MI_COMPRESSED = 5, 6, 14, 15
# miINT8 .. miUTF32 (8, 10 and 11 are reserved).
KNOWN_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 9, 12, 13, 14, 15, 16, 17, 18})
# Bytes per value of the numeric data types (miINT8 ... miUINT64).
VALUE_BYTES = {1: 1, 2: 1, 3: 2, 4: 2, 5: 4, 6: 4, 7: 4, 9: 8, 12: 8, 13: 8}
# Array classes: 1 cell, 2 struct, 3 object, 4 char, 5 sparse, 6 double ... 15 uint64,
# 16 function handle, 17 opaque; in the flags word's low byte, complex in bit 11.
CELL_CLASS, STRUCT_CLASS, OBJECT_CLASS, CHAR_CLASS, SPARSE_CLASS = 1, 2, 3, 4, 5
NUMERIC_CLASSES = range(6, 16)
LAST_CLASS = 17
COMPLEX_FLAG = 0x800
MAX_NESTING = 64  # cells of cells of ...: deeper than any real file, shallower than recursion


class MalformedMat(Exception):
    """The structure is broken; the message says where."""


def check_mat5_structure(handle: BinaryIO) -> set[str]:
    """Walk every data element of an open v5 file, raising MalformedMat if one is broken; return
    the complex variables' names (scipy's `mat_dtype=True` would drop their imaginary part)."""
    header = handle.read(HEADER_BYTES)
    if len(header) < HEADER_BYTES:
        raise MalformedMat(f"{len(header)} bytes, shorter than the {HEADER_BYTES}-byte header")
    order = {b"IM": "<", b"MI": ">"}.get(header[126:128])
    if order is None:
        raise MalformedMat(f"endian indicator {header[126:128]!r}, expected b'IM' or b'MI'")
    position, complex_names = HEADER_BYTES, set()
    while True:
        tag = handle.read(8)
        if not tag:
            return complex_names
        if len(tag) < 8:
            raise MalformedMat(f"truncated tag at byte {position}")
        kind, size, small = _tag(tag, order, position)
        if small:
            raise MalformedMat(f"byte {position}: a top-level element must be a matrix")
        payload = handle.read(size)
        if len(payload) < size:
            raise MalformedMat(f"element at byte {position} needs {size} bytes, "
                               f"{len(payload)} remain")
        name, is_complex = _check_payload(kind, payload, order, position, 0) or ("", False)
        if is_complex:
            complex_names.add(name)
        position += 8 + size


def _tag(tag: bytes, order: str, position: int) -> tuple[int, int, bool]:
    first, second = struct.unpack(order + "II", tag[:8])
    small = first >> 16
    kind, size = (first & 0xFFFF, small) if small else (first, second)
    if kind not in KNOWN_TYPES:
        raise MalformedMat(f"unknown data type {kind} at byte {position}")
    if small and size > 4:
        raise MalformedMat(f"small element of {size} bytes at byte {position}")
    return kind, size, bool(small)


def _check_payload(kind: int, payload: bytes, order: str, position: int,
                   depth: int) -> tuple[str, bool] | None:
    """Check one element; for a matrix (or a compressed one) return its (name, complex)."""
    if depth > MAX_NESTING:
        raise MalformedMat(f"elements nested deeper than {MAX_NESTING} at byte {position}")
    if kind == MI_COMPRESSED:
        try:
            inner = zlib.decompress(payload)
        except zlib.error as error:
            raise MalformedMat(f"compressed element at byte {position}: {error}") from None
        matrices = _elements(inner, order, position, depth + 1, padded=False)
        return matrices[0][2] if len(matrices) == 1 else None
    if kind == MI_MATRIX and payload:  # an empty matrix element is a valid empty array
        return _check_matrix(_elements(payload, order, position, depth + 1, padded=True),
                             order, position)
    return None


def _elements(data: bytes, order: str, base: int, depth: int,
              padded: bool) -> list[tuple[int, bytes, tuple[str, bool] | None]]:
    """The (type, payload, what `_check_payload` said) elements inside a matrix (`padded` to 8
    bytes) or a decompressed stream, each checked recursively."""
    elements, offset = [], 0
    while offset < len(data):
        if len(data) - offset < 8:
            raise MalformedMat(f"truncated tag inside the element at byte {base}")
        kind, size, small = _tag(data[offset:offset + 8], order, base + offset)
        start = offset + (4 if small else 8)
        if start + size > len(data):
            raise MalformedMat(f"element at byte {base + offset} needs {size} bytes, "
                               f"{len(data) - start} remain")
        payload = data[start:start + size]
        elements.append((kind, payload, _check_payload(kind, payload, order, base + offset,
                                                       depth)))
        offset = offset + 8 if small else start + (-(-size // 8) * 8 if padded else size)
    return elements


def _check_matrix(elements: list, order: str, position: int) -> tuple[str, bool]:
    """A matrix's array flags and dimensions, and the data parts its class implies; return its
    (name, complex)."""
    if len(elements) < 3 or elements[0][0] != MI_UINT32 or len(elements[0][1]) != 8:
        raise MalformedMat(f"matrix at byte {position} lacks its array flags, dimensions or name")
    flags = struct.unpack(order + "I", elements[0][1][:4])[0]
    matlab_class, complex_flag = flags & 0xFF, bool(flags & COMPLEX_FLAG)
    if not 1 <= matlab_class <= LAST_CLASS:
        raise MalformedMat(f"matrix at byte {position} has unknown class {matlab_class}")
    dims_kind, dims_bytes, _ = elements[1]
    if dims_kind != MI_INT32 or len(dims_bytes) < 8 or len(dims_bytes) % 4:
        raise MalformedMat(f"matrix at byte {position} has malformed dimensions")
    dims = struct.unpack(f"{order}{len(dims_bytes) // 4}i", dims_bytes)
    if min(dims) < 0:
        raise MalformedMat(f"matrix at byte {position} has negative dimensions {dims}")
    count, data = math.prod(dims), elements[3:]
    if matlab_class in NUMERIC_CLASSES:
        _expect_parts(data, 1 + complex_flag, position, "numeric")
        for kind, payload, _ in data:
            _expect_values(kind, payload, count, position)
    elif matlab_class == CHAR_CLASS:
        _expect_parts(data, 1, position, "char")
        if data[0][0] in VALUE_BYTES:  # fixed width (UTF-8 is variable)
            _expect_values(data[0][0], data[0][1], count, position)
    elif matlab_class == SPARSE_CLASS:
        _expect_parts(data, 3 + complex_flag, position, "sparse")
        if data[0][0] != MI_INT32 or data[1][0] != MI_INT32:
            raise MalformedMat(f"sparse matrix at byte {position} has non-int32 indices")
        if len(dims) != 2 or len(data[1][1]) != 4 * (dims[1] + 1):
            raise MalformedMat(f"sparse matrix at byte {position} has a column index of "
                               f"{len(data[1][1])} bytes for shape {dims}")
    elif matlab_class == CELL_CLASS:
        _expect_parts(data, count, position, "cell")
        _expect_matrices(data, position)
    elif matlab_class in (STRUCT_CLASS, OBJECT_CLASS):
        fields = data[1:] if matlab_class == OBJECT_CLASS else data  # objects: class name first
        if len(fields) < 2 or fields[0][0] != MI_INT32 or len(fields[0][1]) != 4:
            raise MalformedMat(f"struct at byte {position} lacks its field name length")
        name_length = struct.unpack(order + "i", fields[0][1])[0]
        if name_length <= 0 or len(fields[1][1]) % name_length:
            raise MalformedMat(f"struct at byte {position} has field names of {name_length} "
                               f"bytes in {len(fields[1][1])}")
        _expect_parts(fields[2:], count * (len(fields[1][1]) // name_length), position, "struct")
        _expect_matrices(fields[2:], position)
    return elements[2][1].decode("latin-1"), complex_flag


def _expect_parts(data: list, expected: int, position: int, what: str) -> None:
    if len(data) != expected:
        raise MalformedMat(f"{what} matrix at byte {position} has {len(data)} data parts; its "
                           f"flags and dimensions say {expected}")


def _expect_values(kind: int, payload: bytes, count: int, position: int) -> None:
    if kind not in VALUE_BYTES or len(payload) != count * VALUE_BYTES[kind]:
        raise MalformedMat(f"matrix at byte {position} of {count} values has {len(payload)} "
                           f"bytes of data type {kind}")


def _expect_matrices(data: list, position: int) -> None:
    if any(kind != MI_MATRIX for kind, _, _ in data):
        raise MalformedMat(f"cell or struct at byte {position} holds an element that is not a "
                           "matrix")
