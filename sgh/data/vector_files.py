"""Reading a 2-D array of vectors from a user's file, lazily and row range by row range
(`ACCEPTED_SUFFIXES`; docs/guide/data.md, "File formats").

`.npy` and texmex files are read by positioned reads of the rows asked (a memory map kept alive
would count its pages in RSS); `.npz` and v4/v5 `.mat` files whole, on the first `read`; HDF5
and v7.3 `.mat` files by `sgh.data.hdf5_files`. Everything wrong with a file is one
`UserInputError` line naming it (and the key) and saying what is accepted; object (pickled)
arrays are refused and never unpickled.
"""

from __future__ import annotations

import errno
import math
import os
import stat
import tokenize
import zipfile
import zlib
from pathlib import Path

import numpy as np

from sgh.data.hdf5_files import HDF5_SUFFIXES, open_hdf5_vectors, variable_names
from sgh.data.mat5_structure import MalformedMat, check_mat5_structure
from sgh.data.vector_file import MAT_MATRIX, MAT_NUMERIC_CLASSES, VectorFile
from sgh.errors import UserInputError, one_line

ACCEPTED_SUFFIXES = (".npy", ".npz", ".fvecs", ".bvecs", ".ivecs", ".mat", ".hdf5", ".h5")
# Formats of several named arrays, where `key` chooses one.
KEYED_SUFFIXES = (".npz", ".mat", ".hdf5", ".h5")
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
TEXMEX_VALUE_TYPES = {".fvecs": np.dtype("<f4"), ".bvecs": np.dtype("u1"),
                      ".ivecs": np.dtype("<i4")}
# Everything numpy's .npy/.npz readers raise on malformed bytes: the header is a Python literal
# (tokenize, ast), the archive a zip (zipfile, zlib; a flipped bit can make zipfile see
# encryption, RuntimeError, or an unknown compression).
MALFORMED_FILE_ERRORS = (ValueError, SyntaxError, TypeError, KeyError, EOFError, OSError,
                         OverflowError, tokenize.TokenError, zipfile.BadZipFile, zlib.error,
                         NotImplementedError, RuntimeError)


def _positioned_read(path: Path, dtype: np.dtype, offset: int, count: int):
    """`count` items of `dtype` at byte `offset`, or a one-line error if the file is short."""
    values = np.fromfile(path, dtype=dtype, count=count, offset=offset)
    if len(values) != count:
        raise UserInputError(f"{path} is truncated (expected {count * dtype.itemsize} bytes at "
                             f"offset {offset}, found {len(values) * dtype.itemsize})")
    return values


def _npy_header(handle) -> tuple:
    """(shape, fortran_order, dtype) of the .npy array whose bytes start at `handle`."""
    version = np.lib.format.read_magic(handle)
    # Version 3.0 differs from 2.0 only by a UTF-8 header, for structured dtypes (refused).
    return (np.lib.format.read_array_header_1_0 if version == (1, 0)
            else np.lib.format.read_array_header_2_0)(handle)


class NpyVectors(VectorFile):
    def __init__(self, path: Path):
        try:
            with open(path, "rb") as handle:
                shape, self.fortran_order, dtype = _npy_header(handle)
                self.data_offset = handle.tell()
        except MALFORMED_FILE_ERRORS as error:
            raise UserInputError(f"{path}: not a valid .npy file ({one_line(error)})") from None
        super().__init__(path, None, shape, dtype)
        expected = self.data_offset + math.prod(self.shape) * self.dtype.itemsize
        if os.path.getsize(path) < expected:
            raise UserInputError(f"{path}: truncated .npy file ({os.path.getsize(path)} bytes; "
                                 f"its header says shape {self.shape} {self.dtype}, "
                                 f"{expected} bytes)")

    def stride_layout(self):
        if self.fortran_order:
            return None
        return self.data_offset, np.dtype((self.dtype, (self.shape[1],)))

    def _take_unstrided(self, rows):
        mapped = np.memmap(self.path, self.dtype, "r", self.data_offset, self.shape, order="F")
        taken = np.array(mapped[rows], order="C")
        del mapped  # unmaps now: the copy is all that stays resident
        return taken

    def _read(self, start, stop):
        if self.fortran_order:  # a row range is strided
            return self._take_unstrided(slice(start, stop))
        d = self.shape[1]
        offset = self.data_offset + start * d * self.dtype.itemsize
        return _positioned_read(self.path, self.dtype, offset, (stop - start) * d).reshape(-1, d)


class TexmexVectors(VectorFile):
    def __init__(self, path: Path):
        values = TEXMEX_VALUE_TYPES[path.suffix.lower()]
        size = os.path.getsize(path)
        if size == 0:
            raise UserInputError(f"{path}: is empty; expected at least one vector")
        if size < 4:
            raise UserInputError(f"{path}: truncated ({size} bytes; a row starts with a 4-byte "
                                 "dimension)")
        dim = int(_positioned_read(path, np.dtype("<i4"), 0, 1)[0])
        row_bytes = 4 + dim * values.itemsize
        if dim <= 0 or row_bytes > size:
            raise UserInputError(f"{path}: the first row declares dimension {dim}, impossible "
                                 f"for a {size}-byte file; the file is corrupt or not "
                                 f"{path.suffix}")
        if size % row_bytes:
            raise UserInputError(
                f"{path}: {size} bytes is not a multiple of the row size 4 + {dim} x "
                f"{values.itemsize} = {row_bytes} bytes; the file is truncated or corrupt")
        self.row_type = np.dtype([("dim", "<i4"), ("values", values, (dim,))])
        super().__init__(path, None, (size // row_bytes, dim), values)
        self.read(len(self) - 1, len(self))  # checks the last row's dimension early

    def stride_layout(self):
        return 0, self.row_type

    def from_records(self, records, rows):
        wrong = np.nonzero(records["dim"] != self.shape[1])[0]
        if len(wrong):
            raise UserInputError(
                f"{self.path}: row {rows[wrong[0]]} declares dimension "
                f"{records['dim'][wrong[0]]} but the first row declares {self.shape[1]}; every "
                f"row of a {self.path.suffix} file must have the same dimension")
        return np.ascontiguousarray(records["values"])

    def _read(self, start, stop):
        records = _positioned_read(self.path, self.row_type, start * self.row_type.itemsize,
                                   stop - start)
        return self.from_records(records, np.arange(start, stop))


def list_keys(path: Path) -> list[str]:
    """The names of the arrays in a `.npz`, `.mat` or HDF5 file, from its directory or headers."""
    suffix = path.suffix.lower()
    if suffix in HDF5_SUFFIXES or (suffix == ".mat" and is_mat_v73(path)):
        return variable_names(path, matlab=suffix == ".mat")
    if suffix == ".mat":
        return [name for name, _, _ in _whosmat(path)]
    try:
        with zipfile.ZipFile(path) as archive:
            return [name[: -len(".npy")] for name in archive.namelist() if name.endswith(".npy")]
    except MALFORMED_FILE_ERRORS as error:
        raise UserInputError(f"{path}: corrupt or truncated .npz file ({one_line(error)})"
                             ) from None


def _only_key(path: Path, keys: list[str], key: str | None) -> str:
    found = ", ".join(keys) or "none"
    if key is None:
        if len(keys) == 1:
            return keys[0]
        raise UserInputError(f"{path}: holds several arrays ({found}); name one with a key")
    if key not in keys:
        raise UserInputError(f"{path}: has no key {key!r}; keys found: {found}")
    return key


class WholeArrayVectors(VectorFile):
    """`.npz` and v4/v5 `.mat`: the array is read whole on the first `read` and kept."""

    _array: np.ndarray | None = None

    def _read(self, start, stop):
        if self._array is None:
            array = self._load()
            if (array.dtype.newbyteorder("=") != self.dtype.newbyteorder("=")
                    or array.shape != self.shape):
                raise UserInputError(f"{self.where} holds {array.shape} {array.dtype} although "
                                     f"its header says {self.shape} {self.dtype}; corrupt file")
            self._array = array
        return self._array[start:stop]

    def _load(self) -> np.ndarray:
        raise NotImplementedError


class NpzVectors(WholeArrayVectors):
    def __init__(self, path: Path, key: str | None):
        key = _only_key(path, list_keys(path), key)
        try:
            with zipfile.ZipFile(path) as archive, archive.open(key + ".npy") as member:
                shape, _, dtype = _npy_header(member)
        except MALFORMED_FILE_ERRORS as error:
            raise UserInputError(f"{path}: corrupt or truncated .npz file ({one_line(error)})"
                                 ) from None
        super().__init__(path, key, shape, dtype)

    def _load(self):
        try:
            with zipfile.ZipFile(self.path) as archive, archive.open(self.key + ".npy") as member:
                return np.lib.format.read_array(member, allow_pickle=False)
        except MALFORMED_FILE_ERRORS as error:
            raise UserInputError(f"{self.where} is corrupt or truncated in the .npz file "
                                 f"({one_line(error)})") from None


class MatVectors(WholeArrayVectors):
    def __init__(self, path: Path, key: str | None):
        variables = {name: (shape, kind) for name, shape, kind in _whosmat(path)}
        key = _only_key(path, list(variables), key)
        shape, kind = variables[key]
        if kind not in MAT_NUMERIC_CLASSES:
            raise UserInputError(f"{path}: key {key!r} is a MATLAB {kind} array; "
                                 f"expected {MAT_MATRIX}")
        dtype = np.dtype("bool" if kind == "logical"
                         else {"double": "float64", "single": "float32"}.get(kind, kind))
        super().__init__(path, key, shape, dtype)

    def _load(self):
        return read_mat_arrays(self.path, [self.key])[self.key]


def is_mat_v73(path: Path) -> bool:
    """Whether a `.mat` file is MATLAB v7.3 (its text says 7.3, or its version field 0x0200)
    or plain HDF5 named `.mat`, rather than v4/v5."""
    with open(path, "rb") as handle:
        head = handle.read(128)
    version_73 = (len(head) == 128 and head[126:128] in (b"IM", b"MI")
                  and head[124:126] in (b"\x00\x02", b"\x02\x00"))
    return head.startswith((b"MATLAB 7.3", HDF5_SIGNATURE)) or version_73


def _check_mat_file(path: Path) -> set[str]:
    """Refuse a v4/v5 file that would crash scipy's reader; return its complex variables' names."""
    with open(path, "rb") as handle:
        # A v4 file by scipy's rule: a zero byte in its first four (its type word). v4 has no
        # compiled reader to crash; scipy reports its errors.
        head = handle.read(4)
        if len(head) < 4 or 0 in head:
            return set()
        handle.seek(0)
        try:
            return check_mat5_structure(handle)
        except MalformedMat as error:
            raise UserInputError(f"{path}: corrupt or unreadable .mat file ({error})") from None


def _whosmat(path: Path) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, MATLAB class) of each variable, from the headers (scipy.io.whosmat)."""
    import scipy.io

    _check_mat_file(path)
    try:
        variables = scipy.io.whosmat(path)
    # scipy's MAT parser raises many types on arbitrary bytes (struct.error, zlib.error,
    # UnicodeDecodeError, MatReadError, ...): at this boundary each means "corrupt file".
    except Exception as error:  # noqa: BLE001
        raise UserInputError(f"{path}: corrupt or unreadable .mat file ({one_line(error)})"
                             ) from None
    return [(name, shape, kind) for name, shape, kind in variables if not name.startswith("__")]


def read_mat_arrays(path: Path, names: list[str]) -> dict[str, np.ndarray]:
    """The variables `names` of a MATLAB file as arrays in their MATLAB class (`mat_dtype=True`;
    vectors come back as (1, n) or (n, 1)); no other variable is read, nor refused."""
    if is_mat_v73(path):
        opened = [open_hdf5_vectors(path, name, matlab=True) for name in names]
        return {vectors.key: vectors.read(0, len(vectors)) for vectors in opened}
    import scipy.io

    # The structure of every variable is checked (a broken one would crash scipy).
    complex_names = _check_mat_file(path) & set(names)
    if complex_names:
        raise UserInputError(f"{path}: key {sorted(complex_names)[0]!r} holds complex values; "
                             "expected real numbers (save real(X) or abs(X))")
    try:
        variables = scipy.io.loadmat(path, variable_names=names, mat_dtype=True)
    except Exception as error:  # noqa: BLE001  (see _whosmat)
        raise UserInputError(f"{path}: corrupt or unreadable .mat file ({one_line(error)})"
                             ) from None
    return {name: value for name, value in variables.items() if not name.startswith("__")}


_SPECIAL_FILES = {stat.S_IFIFO: "a named pipe (FIFO)", stat.S_IFCHR: "a character device",
                  stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def refuse_special_file(path, setting: str | None = None, expected: str | None = None) -> None:
    """Refuse, before anything opens it, a special file (a FIFO, a device, a socket: reading one
    can block forever or never end) or a loop of symbolic links; a missing path is left to the
    caller. `setting` names the key that chose the path, `expected` what is accepted."""
    named = f"{setting}={path}" if setting else f"{path}"
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UserInputError(f"{named}: a loop of symbolic links (following them never "
                                 "reaches a file); point it at a file") from None
        return  # missing, or not reachable: the caller says so in its own words
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    kind = _SPECIAL_FILES.get(stat.S_IFMT(mode), "a special file")
    expected = expected or f"a regular file ({', '.join(ACCEPTED_SUFFIXES)})"
    raise UserInputError(f"{named}: is {kind}, not a regular file, and is not read (it could "
                         f"block or never end); expected {expected}")


def open_vectors(path, key: str | None = None) -> VectorFile:
    """Open a vector file of any `ACCEPTED_SUFFIXES` format; `key` names the array in `.npz`,
    `.mat` and HDF5 files (optional when the file holds exactly one)."""
    path = Path(path).expanduser()
    suffix = path.suffix.lower()
    refuse_special_file(path)
    if not path.exists():
        raise UserInputError(f"{path}: no such file")
    if path.is_dir():
        raise UserInputError(f"{path}: is a directory; expected a file "
                             f"({', '.join(ACCEPTED_SUFFIXES)})")
    if suffix not in ACCEPTED_SUFFIXES:
        raise UserInputError(f"{path}: unknown extension {path.suffix!r}; accepted: "
                             f"{', '.join(ACCEPTED_SUFFIXES)}")
    if key is not None and suffix not in KEYED_SUFFIXES:
        raise UserInputError(f"{path}: a key ({key!r}) was given but {suffix} files hold one "
                             f"array; keys apply to {', '.join(KEYED_SUFFIXES)} files")
    try:
        if suffix == ".npy":
            return NpyVectors(path)
        if suffix == ".npz":
            return NpzVectors(path, key)
        if suffix in HDF5_SUFFIXES or (suffix == ".mat" and is_mat_v73(path)):
            return open_hdf5_vectors(path, key, matlab=suffix == ".mat")
        if suffix == ".mat":
            return MatVectors(path, key)
        return TexmexVectors(path)
    except PermissionError:
        raise UserInputError(f"{path}: permission denied") from None
