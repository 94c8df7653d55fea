"""Out-of-core datasets: streamed features read like the loaded ones, and a streamed run trains,
selects and scores exactly like an in-memory run (bit-identical codes), resumes exactly, and
refuses what it cannot stream with one line. Both row readers (dataset.stream_reader: a memory
map, positioned reads) give the same rows, the same runs and the same errors."""

import logging

import numpy as np
import pytest
import scipy.io
from omegaconf import OmegaConf

import sgh.data.neighbours
from sgh.artifacts.ground_truth_cache import features_digest
from sgh.data.feature_conversion import read_float32
from sgh.data.feature_statistics import feature_statistics
from sgh.data.mapped_rows import MappedRows
from sgh.data.neighbours import euclidean_neighbours, exact_neighbours
from sgh.data.streamed_features import (
    StreamedFeatures,
    choose_streaming,
    iter_chunks,
    take_rows,
    without_rows,
)
from sgh.data.vector_files import open_vectors
from sgh.errors import UserInputError
from sgh.pipeline import run
from tests.helpers import compose_config, quick
from tests.helpers_vector_files import write_texmex

RNG = np.random.default_rng(0)
UINT8 = RNG.integers(0, 256, (1000, 12)).astype(np.uint8)
FLOATS = RNG.normal(3.0, 2.0, (1000, 12)).astype(np.float32)
READERS = ["mmap", "pread"]


def _files(folder):
    """The same rows in every streamable format (and the .npz/.mat ones for `take`)."""
    paths = {".bvecs": write_texmex(folder / "x.bvecs", UINT8),
             ".fvecs": write_texmex(folder / "x.fvecs", FLOATS),
             ".ivecs": write_texmex(folder / "x.ivecs", UINT8.astype(np.int32))}
    np.save(folder / "c.npy", FLOATS)
    np.save(folder / "f.npy", np.asfortranarray(FLOATS.astype(np.float64)))
    np.savez(folder / "x.npz", x=FLOATS)
    scipy.io.savemat(folder / "x.mat", {"x": FLOATS})
    return [*paths.values(), folder / "c.npy", folder / "f.npy", folder / "x.npz",
            folder / "x.mat"]


def test_take_reads_the_rows_that_reading_everything_would(tmp_path):
    ids = np.unique(np.concatenate([RNG.integers(0, 1000, 200), np.arange(40, 90), [0, 999]]))
    for path in _files(tmp_path):
        vectors = open_vectors(path)
        whole = vectors.read(0, len(vectors))
        np.testing.assert_array_equal(vectors.take(ids), whole[ids], err_msg=str(path))
        assert vectors.take(ids[:0]).shape == (0, whole.shape[1])


def test_the_compiled_and_the_python_reads_agree(tmp_path, monkeypatch):
    from sgh.data import positioned_reads

    vectors = open_vectors(write_texmex(tmp_path / "x.bvecs", UINT8))
    ids = np.unique(RNG.integers(0, 1000, 300))
    compiled = vectors.take(ids)
    monkeypatch.setattr(positioned_reads, "_PREAD", None)  # as on a C library without pread
    np.testing.assert_array_equal(vectors.take(ids), compiled)
    np.testing.assert_array_equal(compiled, UINT8[ids])


def test_a_file_truncated_after_opening_is_reported(tmp_path):
    path = write_texmex(tmp_path / "x.bvecs", UINT8)
    vectors = open_vectors(path)
    path.write_bytes(path.read_bytes()[: 500 * 16])  # another process cut it to 500 rows
    with pytest.raises(UserInputError, match=r"x\.bvecs is truncated \(expected 32 bytes at "
                                             r"offset 9600, found 0\)"):
        vectors.take(np.array([3, 600, 601]))  # rows 600-601: one read


@pytest.mark.parametrize("reader", READERS)
def test_streamed_features_equal_the_loaded_ones(tmp_path, reader):
    for path in _files(tmp_path)[:5]:
        loaded, _ = read_float32(open_vectors(path))
        streamed = StreamedFeatures(open_vectors(path), reader=reader)
        hidden = np.sort(RNG.choice(1000, 37, replace=False))
        cases = [(streamed, loaded),
                 (without_rows(streamed, hidden), without_rows(loaded, hidden))]
        for got, want in cases:
            assert got.shape == want.shape and len(got) == len(want)
            ids = RNG.integers(0, len(want), 300)  # any order, repeats
            np.testing.assert_array_equal(take_rows(got, ids), want[ids])
            np.testing.assert_array_equal(got.read(100, 700), want[100:700])
            np.testing.assert_array_equal(got.load(), want)
            starts = [start for start, _ in iter_chunks(got, 128)]
            assert starts == [start for start, _ in iter_chunks(want, 128)]
            np.testing.assert_array_equal(
                np.concatenate([rows for _, rows in iter_chunks(got, 128)]), want)
        # Hiding more rows of a view hides rows of that view, as np.delete would.
        twice = without_rows(cases[1][0], [0, 5])
        np.testing.assert_array_equal(twice.load(), np.delete(cases[1][1], [0, 5], axis=0))


def test_statistics_and_digest_are_the_same_streamed_or_loaded(tmp_path):
    path = write_texmex(tmp_path / "x.fvecs", FLOATS)
    streamed, (loaded, _) = StreamedFeatures(open_vectors(path)), read_float32(open_vectors(path))
    from_disk, in_memory = feature_statistics(streamed), feature_statistics(loaded)
    assert from_disk.count == in_memory.count == 1000
    np.testing.assert_array_equal(from_disk.mean, in_memory.mean)
    np.testing.assert_array_equal(from_disk.squared_deviations, in_memory.squared_deviations)
    # ...and they are the mean and variance (the chunked merge is exact up to rounding).
    np.testing.assert_allclose(in_memory.mean, FLOATS.mean(0, dtype=np.float64), rtol=1e-12)
    np.testing.assert_allclose(in_memory.variance, FLOATS.var(0, dtype=np.float64), rtol=1e-10)
    query = FLOATS[:5]
    assert features_digest(query, streamed) == features_digest(query, loaded)


def test_neighbours_over_database_chunks_are_exact_with_ties(monkeypatch):
    rng = np.random.default_rng(1)
    for chunk_rows in (1, 7, 300, 5000):
        database = rng.integers(0, 4, (900, 6)).astype(np.float32)  # many tied distances
        query = rng.integers(0, 4, (40, 6)).astype(np.float32)
        for k in (1, 10, 33):
            whole = euclidean_neighbours(query, database, k)
            with monkeypatch.context() as patch:  # chunks of 8 bytes x 6 features x chunk_rows
                patch.setattr(sgh.data.neighbours, "_DATABASE_CHUNK_BYTES", 8 * 6 * chunk_rows)
                np.testing.assert_array_equal(exact_neighbours(query, database, k), whole)


@pytest.mark.parametrize("reader", READERS)
def test_a_nan_row_is_named_by_its_position_in_the_file(tmp_path, reader):
    floats = FLOATS.copy()
    floats[613, 4] = floats[900, 2] = np.nan
    streamed = StreamedFeatures(open_vectors(write_texmex(tmp_path / "x.fvecs", floats)),
                                reader=reader)
    with pytest.raises(UserInputError, match=r"x\.fvecs has 1 NaN/Inf values \(first at row "
                                             r"613, column 4"):
        streamed.take([900, 3, 613, 800])  # the first in file order, whatever the order asked
    with pytest.raises(UserInputError, match="row 613, column 4"):
        feature_statistics(streamed)


@pytest.mark.parametrize("reader", READERS)
def test_a_file_cut_while_streamed_is_reported_in_one_line(tmp_path, reader):
    # The memory map checks the file's size before every gather, so a file cut after it was
    # mapped gives the positioned reads' line, not a SIGBUS (sgh/data/mapped_rows.py).
    path = write_texmex(tmp_path / "x.bvecs", UINT8)
    read_before = StreamedFeatures(open_vectors(path), reader=reader)
    read_before.take([3, 600])  # mapped now (mmap)
    unread = StreamedFeatures(open_vectors(path), reader=reader)
    path.write_bytes(path.read_bytes()[: 500 * 16])  # another process cut it to 500 rows
    for streamed in (read_before, unread):
        with pytest.raises(UserInputError, match=r"x\.bvecs is truncated \(expected 32 bytes "
                                                 r"at offset 9600, found 0\)$") as error:
            streamed.take([601, 3, 600, 601])  # rows 600-601: the first short run
        assert "\n" not in str(error.value)
        # The rows still there are read.
        np.testing.assert_array_equal(streamed.take([499, 3]) * 255, UINT8[[499, 3]])


@pytest.mark.parametrize("reader", READERS)
def test_a_file_rewritten_while_streamed_is_read_as_it_is_now(tmp_path, reader):
    path = write_texmex(tmp_path / "x.bvecs", UINT8)
    streamed = StreamedFeatures(open_vectors(path), reader=reader)
    streamed.take([7, 600])  # mapped now (mmap)
    changed, dims = UINT8.copy(), np.full(1000, 12)
    changed[7], dims[600], dims[700] = 0, 11, 13
    write_texmex(path, changed, dims)  # in place, the same size
    np.testing.assert_array_equal(streamed.take([7]), np.zeros((1, 12)))
    with pytest.raises(UserInputError, match=r"x\.bvecs: row 600 declares dimension 11 but the "
                                             r"first row declares 12; every row") as error:
        streamed.take([700, 5, 600])  # the first in file order, whatever the order asked
    assert "\n" not in str(error.value)


def test_auto_streams_large_single_array_files_only(tmp_path, monkeypatch):
    bvecs = open_vectors(write_texmex(tmp_path / "x.bvecs", UINT8))
    np.savez(tmp_path / "x.npz", x=UINT8)
    npz = open_vectors(tmp_path / "x.npz")
    assert not choose_streaming("auto", [bvecs])
    assert choose_streaming("always", [bvecs]) and not choose_streaming("never", [bvecs])
    monkeypatch.setattr("sgh.data.streamed_features.STREAM_ABOVE_BYTES", 1000)
    assert choose_streaming("auto", [bvecs]) and not choose_streaming("auto", [npz])
    with pytest.raises(UserInputError, match=r"dataset.streaming=always: .*x.npz.* cannot be "
                                             "streamed"):
        choose_streaming("always", [bvecs, npz])


# ---- end to end --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ann_files(tmp_path_factory):
    """A texmex dataset (uint8, like SIFT-1B) with a separate learn set and no ground truth."""
    folder = tmp_path_factory.mktemp("ann")
    rng = np.random.default_rng(2)
    centres = rng.integers(0, 256, (20, 16))
    def draw(n):
        return np.clip(centres[rng.integers(0, 20, n)] + rng.normal(0, 20, (n, 16)), 0, 255)
    write_texmex(folder / "toy_base.bvecs", draw(3000))
    write_texmex(folder / "toy_learn.bvecs", draw(2500))
    write_texmex(folder / "toy_query.bvecs", draw(50))
    return folder


QUICK = quick("dataset=file", "trainer.steps=300", "trainer.batch_size=64",
              "trainer.steps_per_call=50", "trainer.checkpoint_every=100", "model.bits=16",
              "validation.every=100", "validation.queries=100", "validation.database=500")


def _config(folder, *overrides):
    return compose_config(*QUICK, f"dataset.path={folder / 'toy_base.bvecs'}", *overrides)


@pytest.fixture(scope="module")
def in_memory_run(ann_files, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("in_memory")
    return run_dir, run(_config(ann_files, "dataset.streaming=never"), run_dir)


def _assert_same_run(run_dir, metrics, reference):
    reference_dir, reference_metrics = reference
    with np.load(run_dir / "codes.npz") as got, np.load(reference_dir / "codes.npz") as want:
        assert sorted(got.files) == sorted(want.files)
        for key in want.files:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    # The ground truth's source differs (computed, then read from the cache), not its file:
    # the streamed database hashes to the same digest.
    assert metrics["groundtruth"].split()[-1] == reference_metrics["groundtruth"].split()[-1]
    differ = {"train_seconds", "ms_per_step", "validation_seconds", "eval_seconds",
              "groundtruth", "steps_this_process"}
    assert {k: v for k, v in metrics.items() if k not in differ} == {
        k: v for k, v in reference_metrics.items() if k not in differ}


@pytest.mark.parametrize("reader", READERS)
def test_a_streamed_run_equals_the_in_memory_run(ann_files, in_memory_run, tmp_path, caplog,
                                                 monkeypatch, reader):
    mapped_gathers, gather = [], MappedRows.take

    def counted_gather(self, rows):
        mapped_gathers.append(len(rows))
        return gather(self, rows)

    monkeypatch.setattr(MappedRows, "take", counted_gather)
    with caplog.at_level(logging.INFO, logger="sgh"):
        metrics = run(_config(ann_files, "dataset.streaming=always",
                              f"dataset.stream_reader={reader}"), tmp_path)
    # The setting reaches the reader: batches (300 steps x 64 rows) through the map, or none.
    assert (sum(mapped_gathers) >= 300 * 64) == (reader == "mmap")
    assert "streaming 2400 training items from" in caplog.text  # learn minus 100 held out
    assert "MiB of batches in memory at most" in caplog.text
    # Same statistics, batches, validation items and ground truth: the same codes bit for bit.
    _assert_same_run(tmp_path, metrics, in_memory_run)
    assert metrics["n_train"] == 2400 and metrics["best_step"] > 0


@pytest.mark.slow  # 5-10 s: a whole training run
def test_a_streamed_run_resumes_exactly(ann_files, in_memory_run, tmp_path):
    # Stopped after 100 steps (its checkpoint stands for a killed run's), resumed to 300: the
    # batches continue from the step, not from a reader's position.
    config = _config(ann_files, "dataset.streaming=always")
    config.trainer.steps = 100
    run(config, tmp_path)
    (tmp_path / "codes.npz").unlink()
    saved = OmegaConf.load(tmp_path / "config.yaml")
    saved.trainer.steps = 300  # the run directory's config, as if it had been 300 all along
    OmegaConf.save(saved, tmp_path / "config.yaml")
    metrics = run(_config(ann_files, "dataset.streaming=always"), tmp_path)
    _assert_same_run(tmp_path, metrics, in_memory_run)


def test_baselines_train_on_streamed_data(ann_files, tmp_path):
    metrics = {}
    for streaming in ("always", "never"):
        metrics[streaming] = run(_config(ann_files, "model=itq", f"dataset.streaming={streaming}"),
                                 tmp_path / streaming)
    for key in ("map", "recall10@100"):
        assert metrics["always"].get(key) == metrics["never"].get(key)
    with np.load(tmp_path / "always" / "codes.npz") as a, \
            np.load(tmp_path / "never" / "codes.npz") as b:
        np.testing.assert_array_equal(a["database"], b["database"])


def test_what_cannot_be_streamed_is_refused_in_one_line(ann_files, tmp_path):
    np.savez(tmp_path / "pooled.npz", X=FLOATS, y=np.arange(1000) % 3)
    cases = {
        f"dataset.path={tmp_path / 'pooled.npz'}": "holds named arrays, which are read whole",
        "dataset.split=validation": "dataset.split=validation reorders the training set",
        "dataset.streaming=sometimes": "dataset.streaming='sometimes' is not known; accepted: "
                                       "auto, always, never",
        "dataset.stream_reader=memmap": "dataset.stream_reader='memmap' is not known; "
                                        "accepted: mmap, pread",
    }
    for override, message in cases.items():
        config = _config(ann_files, "dataset.streaming=always", override)
        with pytest.raises(UserInputError, match=message.replace("(", r"\(")) as error:
            run(config, tmp_path / "run")
        assert "\n" not in str(error.value)
    assert not (tmp_path / "run" / "checkpoints").exists()



def test_validation_draws_beyond_the_permutation_limit(monkeypatch):
    # Past PERMUTATION_LIMIT items the validation split is drawn without permuting them all
    # (SIFT-1B); the draw is still disjoint, sorted, and of the asked size.
    from sgh.training import holdout as validation

    monkeypatch.setattr(validation, "PERMUTATION_LIMIT", 100)
    for n, queries, database in ((1000, 100, 300), (1000, 100, 5000), (10**9, 1000, 10000)):
        held_out, sample = validation._draw(n, queries, database)
        assert len(np.unique(held_out)) == queries
        assert len(sample) == min(database, n - queries)
        assert np.all(np.diff(sample) > 0) and sample[-1] < n
        assert not np.intersect1d(held_out, sample).size
