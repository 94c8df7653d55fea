"""Arrays aligned for training to adopt (`sgh.data.aligned`), and the splits that are."""

import numpy as np
import pytest

from sgh.cli.resources import BUNDLED_DATA_DIR
from sgh.config import FileDatasetConfig, SyntheticDatasetConfig
from sgh.data import load_split
from sgh.data.aligned import ALIGNMENT, aligned_empty, aligned_rows, is_aligned
from sgh.data.streamed_features import without_rows


@pytest.mark.parametrize("shape", [(1, 1), (7, 5), (1000, 784)])
def test_aligned_empty_starts_on_the_boundary_whatever_the_size(shape):
    for _ in range(5):  # numpy's own buffers land at various offsets
        array = aligned_empty(shape)
        assert array.shape == shape and array.dtype == np.float32
        assert array.ctypes.data % ALIGNMENT == 0 and array.flags.c_contiguous
        assert array.flags.writeable


def test_aligned_rows_are_the_rows():
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    ids = np.array([7, 0, 3])
    rows = aligned_rows(x, ids)
    np.testing.assert_array_equal(rows, x[ids])
    assert is_aligned(rows)
    kept = without_rows(x, np.array([1, 2]))
    np.testing.assert_array_equal(kept, np.delete(x, [1, 2], axis=0))
    assert is_aligned(kept)


def test_every_in_memory_training_set_is_aligned():
    mnist = load_split(FileDatasetConfig(name="mnist",
                                         path=str(BUNDLED_DATA_DIR / "mnist" / "mnist.npz")))
    synthetic = load_split(SyntheticDatasetConfig(n_train=600, n_test=100, n_queries=30))
    validation = load_split(SyntheticDatasetConfig(n_train=600, n_test=100, n_queries=30,
                                                   split="validation"))
    for split in (mnist, synthetic, validation):
        assert is_aligned(split.train) and split.train.flags.c_contiguous, split.name
