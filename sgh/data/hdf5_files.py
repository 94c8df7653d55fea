"""HDF5 files, read with h5py: datasets of `.hdf5`, `.h5` files and MATLAB v7.3 `.mat` variables
(HDF5 after a 512-byte header, stored column-major: read transposed). The file is opened for each
read: no handle is kept between reads, nor across a fork.

Everything the HDF5 library reports is one `UserInputError` line naming the file (and dataset).
Types are checked before any data is read: only integers, floats and booleans are read; links to
other files are refused. Not caught: a damaged global heap under a variable-length string
attribute (ann-benchmarks' `distance`) can make the library loop forever.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sgh.data.vector_file import MAT_MATRIX, MAT_NUMERIC_CLASSES, VectorFile, _where
from sgh.errors import UserInputError, one_line

HDF5_SUFFIXES = (".hdf5", ".h5")
_ANN_FILE = ("an ann-benchmarks HDF5 file: train (the database and training set), test (the "
             "queries), optional neighbors (test x K ids into train, 0-based) and distances")
_MAT_FILE = "a MATLAB v7.3 .mat file (save(..., '-v7.3'))"
# take(): rows this close are read as one range (reading the rows between costs less than
# another call), of at most _MAX_SPAN_BYTES.
_MERGE_GAP_BYTES = 1 << 16
_MAX_SPAN_BYTES = 1 << 23


def _h5py():
    import h5py  # here, not at the top: `import sgh.data` stays light without HDF5 files

    return h5py


@contextlib.contextmanager
def _hdf5_errors(where: str, what: str, advice: str = "") -> Iterator[None]:
    """Any error of the HDF5 library inside becomes one line: `WHERE: WHAT (reason); ADVICE`."""
    try:
        yield
    except UserInputError:
        raise
    # h5py raises OSError, KeyError, RuntimeError, ... on damaged bytes: each means a damaged file.
    except Exception as error:  # noqa: BLE001
        advice = f"; {advice}" if advice else ""
        raise UserInputError(f"{where}: {what} ({one_line(error)}){advice}") from None


@contextlib.contextmanager
def _opened(path: Path, expected: str):
    """The file opened read-only (and closed after); a file HDF5 cannot open is one line."""
    h5py = _h5py()
    with _hdf5_errors(str(path), "corrupt, truncated or not an HDF5 file", f"expected {expected}"):
        # No lock: the file is only read, and locks fail on some network and read-only systems.
        file = h5py.File(path, "r", locking=False)
    with file:  # closes it
        yield file


def _member_names(file, path: Path, skip_matlab_internals: bool = False) -> list[str]:
    with _hdf5_errors(str(path), "corrupt HDF5 file: its root group cannot be listed"):
        names = sorted(str(name) for name in file.keys())
    if skip_matlab_internals:  # #refs# (cell contents) and #subsystem# (objects)
        names = [name for name in names if not name.startswith("#")]
    return names


def _member(file, path: Path, key: str):
    """The object at `key`: refuses a missing key and links into other files."""
    h5py = _h5py()
    where = _where(path, key)
    with _hdf5_errors(where, "is corrupt in the HDF5 file"):
        link = file.get(key, getlink=True)
        if link is None:
            found = ", ".join(_member_names(file, path)) or "none"
            raise UserInputError(f"{path}: has no dataset {key!r}; datasets found: {found}")
        if isinstance(link, h5py.ExternalLink):
            raise UserInputError(f"{where} links to another file ({link.filename}); expected "
                                 "the data in this file")
        member = file[key]
        if isinstance(member, h5py.Dataset) and member.is_virtual:
            raise UserInputError(f"{where} is a virtual dataset (its data lives in other "
                                 "files); expected the data in this file")
    return member


def _string_attribute(member, name: str, where: str) -> str | None:
    """The attribute `name` as text, None if absent; refused unless it is one string."""
    h5py = _h5py()
    with _hdf5_errors(where, f"has a corrupt attribute {name}"):
        if name not in member.attrs:
            return None
        attribute = h5py.h5a.open(member.id, name.encode())
        kind, points = attribute.get_type(), attribute.get_space().get_simple_extent_npoints()
        # Read only a string: converting damaged attributes of other types can crash HDF5.
        if not isinstance(kind, h5py.h5t.TypeStringID) or points != 1 or (
                not kind.is_variable_str() and kind.get_size() > 1024):
            raise UserInputError(f"{where}: attribute {name} is not a short text; expected a "
                                 "string such as 'euclidean'")
        value = member.attrs[name]
    if isinstance(value, np.ndarray):
        value = value.reshape(-1)[0]
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).strip("\0 ").strip()


def _numbers(member, where: str) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of `member` if it is a dataset of integers, floats or booleans, else
    refused (saying what it is) before any of its data is read."""
    h5py = _h5py()
    if not isinstance(member, h5py.Dataset):
        raise UserInputError(f"{where} is an HDF5 group, not a dataset; expected a 2-D numeric "
                             "array (items x features)")
    with _hdf5_errors(where, "is corrupt in the HDF5 file"):
        kind = member.id.get_type()
        type_class = kind.get_class()
        numeric = type_class in (h5py.h5t.INTEGER, h5py.h5t.FLOAT) or (
            type_class == h5py.h5t.ENUM and member.dtype == np.bool_)  # h5py's booleans
        complex_numbers = type_class == h5py.h5t.COMPOUND and sorted(
            kind.get_member_name(i) for i in range(kind.get_nmembers())) in (
                [b"i", b"r"], [b"imag", b"real"])
        shape = member.shape
        if shape is None:
            raise UserInputError(f"{where} has no data (an empty dataspace); expected a "
                                 "non-empty 2-D array (items x features)")
        dtype = member.dtype if numeric else None
    if complex_numbers:
        raise UserInputError(f"{where} holds complex values; expected real numbers (save "
                             "real(X) or abs(X))")
    if not numeric:
        names = {h5py.h5t.STRING: "strings", h5py.h5t.VLEN: "variable-length sequences",
                 h5py.h5t.REFERENCE: "object references", h5py.h5t.COMPOUND: "records",
                 h5py.h5t.OPAQUE: "opaque bytes", h5py.h5t.ARRAY: "array elements",
                 h5py.h5t.ENUM: "enumerated values", h5py.h5t.BITFIELD: "bit fields"}
        raise UserInputError(f"{where} holds {names.get(type_class, 'non-numeric values')}; "
                             "expected integer, boolean or floating-point features")
    return shape, dtype


class Hdf5Vectors(VectorFile):
    """A 2-D numeric dataset (`key`) of an HDF5 file, read by row ranges and rows; `matlab`: a
    MATLAB v7.3 variable (transposed, checked by its `MATLAB_class`)."""

    def __init__(self, path: Path, key: str, matlab: bool = False):
        self.matlab = matlab
        self._expected = _MAT_FILE if matlab else _ANN_FILE
        self._logical = False
        where = _where(path, key)
        with _opened(path, self._expected) as file:
            member = _member(file, path, key)
            if matlab:
                shape, dtype, self._stored = self._matlab_layout(member, where)
            else:
                shape, dtype = self._stored = _numbers(member, where)
        super().__init__(path, key, shape, dtype)

    def _matlab_layout(self, member, where: str):
        """(shape as MATLAB has it, dtype, (shape, dtype) as stored); refuses non-numeric ones."""
        h5py = _h5py()
        matlab_class = _string_attribute(member, "MATLAB_class", where)
        if isinstance(member, h5py.Group):  # structs, sparse matrices, objects
            with _hdf5_errors(where, "is corrupt in the HDF5 file"):
                sparse = "MATLAB_sparse" in member.attrs
            kind = "sparse" if sparse else (matlab_class or "struct")
            raise UserInputError(f"{where} is a MATLAB {kind} array; expected {MAT_MATRIX}")
        if matlab_class is not None and matlab_class not in MAT_NUMERIC_CLASSES:
            raise UserInputError(f"{where} is a MATLAB {matlab_class} array; expected {MAT_MATRIX}")
        stored = _numbers(member, where)
        with _hdf5_errors(where, "is corrupt in the HDF5 file"):
            empty = "MATLAB_empty" in member.attrs
            if empty:  # MATLAB stores an empty array's dimensions as its data
                dims = np.asarray(member[()]).reshape(-1) if member.size <= 32 else [0]
                return tuple(int(side) for side in dims), np.dtype(np.float64), stored
        self._logical = matlab_class == "logical"  # stored as uint8
        dtype = np.dtype(np.bool_) if self._logical else stored[1]
        return tuple(reversed(stored[0])), dtype, stored

    @contextlib.contextmanager
    def _dataset(self):
        """The dataset, open for one read; damage found while reading is one line."""
        with _opened(self.path, self._expected) as file:
            member = _member(file, self.path, self.key)
            with _hdf5_errors(self.where, "is corrupt or unreadable in the HDF5 file"):
                if (member.shape, member.dtype) != self._stored:
                    raise UserInputError(f"{self.where} changed since it was opened (now "
                                         f"{member.shape} {member.dtype}); restore the file")
                yield member

    def _rows(self, member, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) as MATLAB has them (transposed, logical as bool) if `matlab`."""
        if not self.matlab:
            return member[start:stop]
        rows = np.ascontiguousarray(member[:, start:stop].T)
        return rows.astype(np.bool_) if self._logical else rows

    def _read(self, start, stop):
        with self._dataset() as member:
            return self._rows(member, start, stop)

    def _take_unstrided(self, rows):
        # h5py's fancy indexing is slow: read sorted distinct rows as ranges instead.
        unique, inverse = np.unique(rows, return_inverse=True)
        if unique[0] < 0 or unique[-1] >= len(self):  # `take` checks sorted rows only
            raise ValueError(f"rows outside 0..{len(self)}")
        row_bytes = self.shape[1] * self.dtype.itemsize
        gap = max(1, _MERGE_GAP_BYTES // row_bytes)
        span = max(1, _MAX_SPAN_BYTES // row_bytes)
        taken = np.empty((len(unique), self.shape[1]), self.dtype)
        with self._dataset() as member:
            for first, last in _ranges(unique, gap, span):
                block = self._rows(member, int(unique[first]), int(unique[last - 1]) + 1)
                taken[first:last] = block[unique[first:last] - unique[first]]
        return taken[inverse.reshape(-1)]


def _ranges(rows: np.ndarray, gap: int, span: int) -> list[tuple[int, int]]:
    """[first, last) positions of sorted `rows` read together: neighbours at most `gap` apart,
    each range at most `span` rows long."""
    breaks = np.flatnonzero(np.diff(rows) > gap) + 1
    ranges = []
    for first, last in zip(np.r_[0, breaks], np.r_[breaks, len(rows)], strict=True):
        parts = (rows[first:last] - rows[first]) // span
        cuts = first + np.flatnonzero(np.diff(parts)) + 1
        ranges += list(zip(np.r_[first, cuts], np.r_[cuts, last], strict=True))
    return [(int(first), int(last)) for first, last in ranges]


def variable_names(path: Path, matlab: bool = False) -> list[str]:
    """The arrays at the root of an HDF5 file (MATLAB: its variables), sorted."""
    with _opened(path, _MAT_FILE if matlab else _ANN_FILE) as file:
        return _member_names(file, path, skip_matlab_internals=matlab)


def open_hdf5_vectors(path: Path, key: str | None, matlab: bool = False) -> Hdf5Vectors:
    """The dataset `key` of an HDF5 file (or MATLAB v7.3 variable), optional if it holds one."""
    if key is None:
        names = variable_names(path, matlab)
        if not names:
            raise UserInputError(f"{path}: holds no arrays; expected "
                                 f"{_MAT_FILE if matlab else 'an HDF5 file of 2-D arrays'}")
        if len(names) > 1:
            raise UserInputError(f"{path}: holds several arrays ({', '.join(names)}); name one "
                                 "with a key")
        key = names[0]
    return Hdf5Vectors(path, key, matlab)
