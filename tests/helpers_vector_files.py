"""Writing texmex vector files in tests (numpy only): the format the readers must parse."""

from pathlib import Path

import numpy as np

TEXMEX_DTYPES = {".fvecs": np.float32, ".bvecs": np.uint8, ".ivecs": np.int32}


def write_texmex(path, array, dims=None):
    """Write rows as texmex vectors: int32 dimension then the values (little-endian).

    `dims` overrides each row's declared dimension (to write inconsistent files).
    """
    array = np.asarray(array)
    dims = np.full(len(array), array.shape[1], np.int32) if dims is None else dims
    values = array.astype(TEXMEX_DTYPES[Path(path).suffix]).reshape(len(array), -1)
    rows = [np.asarray(d, "<i4").tobytes() + v.astype(v.dtype.newbyteorder("<")).tobytes()
            for d, v in zip(dims, values, strict=True)]
    Path(path).write_bytes(b"".join(rows))
    return Path(path)
