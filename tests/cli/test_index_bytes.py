"""`sgh-index build ... mode=bytes`: a byte-decoder index of a run, over a vector file or the
run's own dataset, searched from the command line as `SGHIndex` searches in Python; settings it
cannot serve one line and exit status 2."""


import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from sgh.scores.score_set import ScoreSet
from sgh.search.sgh_index import SGHIndex
from tests.cli.test_index import run_and_vectors  # noqa: F401  (the ITQ run and its vectors)
from tests.helpers import one_error_line


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    """BLAS on one thread: the byte decoder's least-squares solves are small, and threads only
    fight each other (and take seconds) on a busy machine of two cores."""
    with threadpool_limits(1):
        yield


def test_built_over_a_file_with_the_byte_decoder_and_searched_as_in_python(
        command_here, run_and_vectors):  # noqa: F811
    run_dir, place = run_and_vectors
    built = command_here("index", ["build", f"run={run_dir}", f"input={place / 'base.npy'}",
                                   "batch_size=256", "mode=bytes",
                                   f"out={place / 'bytes'}"], place)
    assert built.returncode == 0, built.stderr
    assert "[sgh] added 700/700 vectors" in built.stderr
    assert "mode='bytes', encoding=" in built.stdout
    searched = command_here("index", ["search", f"index={place / 'bytes'}", "k=7",
                                      f"input={place / 'queries.npy'}",
                                      f"out={place / 'bytes.npz'}"], place)
    assert searched.returncode == 0, searched.stderr
    assert "mode='bytes', encoding=" in searched.stdout

    # In Python: the decoder fitted on the file's vectors, which are then added.
    base = np.load(place / "base.npy")
    expected = SGHIndex(ScoreSet.load(run_dir / "asymmetric.npz"), mode="bytes")
    expected.train(base)
    expected.add(base)
    loaded = SGHIndex.load(place / "bytes")
    assert loaded.mode == "bytes" and loaded.ntotal == 700
    assert loaded.byte_decoder.fingerprint == expected.byte_decoder.fingerprint
    np.testing.assert_array_equal(loaded.encode(base), expected.encode(base))
    D, I = expected.search(np.load(place / "queries.npy"), 7)
    with np.load(place / "bytes.npz") as results:
        np.testing.assert_array_equal(results["I"], I)
        np.testing.assert_array_equal(results["D"], D)

    refused = command_here("index", ["search", f"index={place / 'bytes'}", "mode=hamming",
                                     f"input={place / 'queries.npy'}",
                                     f"out={place / 'hamming.npz'}"], place)
    line = one_error_line(refused, "sgh-index", "mode='hamming': the index's codes are the "
                                                "byte decoder's")
    assert line.endswith("; build another index with mode='hamming'"), line
    assert not (place / "hamming.npz").exists()


def test_built_with_inverted_lists_and_probed_from_the_command_line(
        command_here, run_and_vectors, tmp_path):  # noqa: F811
    run_dir, place = run_and_vectors
    built = command_here("index", ["build", f"run={run_dir}", f"input={place / 'base.npy'}",
                                   "mode=bytes", "nlist=6", f"out={tmp_path / 'listed'}"],
                         place)
    assert built.returncode == 0, built.stderr
    assert "mode='bytes'" in built.stdout and "nlist=6" in built.stdout
    loaded = SGHIndex.load(tmp_path / "listed")
    queries = np.load(place / "queries.npy")
    for nprobe in (2, 6):
        searched = command_here("index", ["search", f"index={tmp_path / 'listed'}", "k=7",
                                          f"nprobe={nprobe}", f"input={place / 'queries.npy'}",
                                          f"out={tmp_path / f'{nprobe}.npz'}"], place)
        assert searched.returncode == 0, searched.stderr
        loaded.nprobe = nprobe
        D, I = loaded.search(queries, 7)
        with np.load(tmp_path / f"{nprobe}.npz") as results:
            np.testing.assert_array_equal(results["I"], I)
            np.testing.assert_array_equal(results["D"], D)


def test_built_from_the_runs_own_dataset_with_the_byte_decoder(
        command_here, run_and_vectors, tmp_path):  # noqa: F811
    run_dir, place = run_and_vectors
    built = command_here("index", ["build", f"run={run_dir}", "mode=bytes",
                                   f"out={tmp_path / 'own'}"], place)
    assert built.returncode == 0, built.stderr
    loaded = SGHIndex.load(tmp_path / "own")
    expected = SGHIndex.from_run(run_dir, mode="bytes")  # fitted on the run's training split
    assert loaded.mode == "bytes" and loaded.ntotal == expected.ntotal > 0
    assert loaded.byte_decoder.fingerprint == expected.byte_decoder.fingerprint
    queries = np.load(place / "queries.npy")
    for got, want in zip(loaded.search(queries, 9), expected.search(queries, 9), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("settings, message", [
    (["mode=nonsense"], "mode=nonsense is not known; accepted: hamming, scan, two_stage, bytes"),
    # The key's former spelling: one line naming the mode.
    (["decoder=bytes"], "decoder=bytes: the configuration has no key 'decoder' any more; the "
                        "byte decoder's index is mode=bytes"),
    (["mode=two_stage", "decoder=bytes"], "decoder=bytes: the configuration has no key "
                                          "'decoder' any more"),
    (["mode=bytes", "encoding=icm99"], "encoding='icm99' is not known"),
    (["encoding=flip4"], "encoding='flip4' says how far the byte decoder's codes go; an index "
                         "of the modes hamming, scan and two_stage stores the encoder's own "
                         "codes: accepted: mode='bytes', or no encoding"),
])
@pytest.mark.parametrize("with_input", [False, True])
def test_settings_the_byte_decoder_cannot_serve_are_one_line_and_exit_2(
        command_here, run_and_vectors, tmp_path, settings, message, with_input):  # noqa: F811
    run_dir, place = run_and_vectors
    given = [f"input={place / 'base.npy'}"] if with_input else []
    result = command_here("index", ["build", f"run={run_dir}", *given, *settings,
                                    f"out={tmp_path / 'index'}"], tmp_path)
    one_error_line(result, "sgh-index", message)
    assert not (tmp_path / "index").exists()
