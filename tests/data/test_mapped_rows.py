"""Row gathers through a memory map (`sgh.data.mapped_rows`, dataset.stream_reader=mmap): the
rows the positioned reads give, for every format with a row stride, in any order; the others
keep their own reads. (A file cut or rewritten while mapped: tests/data/test_streaming.py,
beside the positioned reads' behaviour it must match.)"""

import os
import threading

import h5py
import numpy as np

from sgh.data.mapped_rows import mapped_rows
from sgh.data.vector_files import open_vectors
from tests.helpers_vector_files import write_texmex

RNG = np.random.default_rng(3)
FLOATS = RNG.normal(size=(700, 9)).astype(np.float32)
ROWS = np.concatenate([RNG.integers(0, 700, 300), [699, 0, 0, 5, 4, 699]])  # any order, repeats


def test_gathers_equal_positioned_reads_for_every_strided_format(tmp_path):
    np.save(tmp_path / "c.npy", FLOATS.astype(np.float64))
    paths = [write_texmex(tmp_path / "x.fvecs", FLOATS),
             write_texmex(tmp_path / "x.bvecs", (FLOATS * 20 + 128).astype(np.uint8)),
             write_texmex(tmp_path / "x.ivecs", (FLOATS * 1000).astype(np.int32)),
             tmp_path / "c.npy"]
    for path in paths:
        vectors = open_vectors(path)
        unique, inverse = np.unique(ROWS, return_inverse=True)
        gathered = mapped_rows(vectors).take(ROWS)
        assert gathered.dtype == vectors.dtype and gathered.flags.c_contiguous, path
        np.testing.assert_array_equal(gathered, vectors.take(unique)[inverse], err_msg=str(path))
        assert mapped_rows(vectors).take(ROWS[:0]).shape == (0, 9)


def test_formats_without_a_row_stride_are_not_mapped(tmp_path):
    np.save(tmp_path / "f.npy", np.asfortranarray(FLOATS))
    with h5py.File(tmp_path / "x.hdf5", "w") as file:
        file["train"] = FLOATS
    assert mapped_rows(open_vectors(tmp_path / "f.npy")) is None
    assert mapped_rows(open_vectors(tmp_path / "x.hdf5", "train")) is None


def test_concurrent_first_gathers_read_the_same_rows(tmp_path):
    # tf.data gathers on several threads: the first gathers race to map the file (a lock
    # lets one map it).
    rows = mapped_rows(open_vectors(write_texmex(tmp_path / "x.fvecs", FLOATS)))
    results = [None] * 8

    def gather(slot):
        results[slot] = rows.take(ROWS)

    threads = [threading.Thread(target=gather, args=(slot,)) for slot in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        np.testing.assert_array_equal(result, FLOATS[ROWS])


def test_a_file_replaced_by_another_is_read_as_it_was_mapped(tmp_path):
    # Renaming a new file over the old one leaves the mapped original intact (the map holds
    # it), so a run reads one version of its training set throughout.
    path = write_texmex(tmp_path / "x.fvecs", FLOATS)
    rows = mapped_rows(open_vectors(path))
    rows.take(ROWS[:1])
    os.replace(write_texmex(tmp_path / "new.fvecs", FLOATS[:100] + 1), path)
    np.testing.assert_array_equal(rows.take(ROWS), FLOATS[ROWS])
