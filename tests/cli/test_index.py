"""`sgh-index build` and `search`: an index of a run over a vector file, queried from a file,
with the results of `SGHIndex` in Python; every mistake one line and exit status 2."""


import re

import numpy as np
import pytest

from sgh.config import (
    BaselineConfig,
    Config,
    EvalConfig,
    IndexBuildConfig,
    SyntheticDatasetConfig,
)
from sgh.search.sgh_index import SGHIndex
from tests.helpers import compose_config, one_error_line, trained


@pytest.fixture(scope="module")
def run_and_vectors(tmp_path_factory):
    place = tmp_path_factory.mktemp("index")
    config = Config(dataset=SyntheticDatasetConfig(dim=16), model=BaselineConfig(name="itq",
                    bits=16), eval=EvalConfig())
    run_dir, _ = trained(place / "run", config)
    rng = np.random.default_rng(0)
    np.save(place / "base.npy", rng.standard_normal((700, 16)).astype(np.float32))
    np.save(place / "queries.npy", rng.standard_normal((30, 16)).astype(np.float32))
    return run_dir, place


def test_built_over_a_file_and_searched_from_one_as_in_python(command_here, run_and_vectors):
    run_dir, place = run_and_vectors
    built = command_here("index", ["build", f"run={run_dir}", f"input={place / 'base.npy'}",
                                   "batch_size=256", f"out={place / 'flat'}"], place)
    assert built.returncode == 0, built.stderr
    assert "[sgh] added 700/700 vectors" in built.stderr
    searched = command_here("index", ["search", f"index={place / 'flat'}", "k=7",
                                      f"input={place / 'queries.npy'}", "batch_size=8",
                                      f"out={place / 'results.npz'}"], place)
    assert searched.returncode == 0, searched.stderr
    expected = SGHIndex.from_run(run_dir)
    expected.remove_ids(np.arange(expected.ntotal))
    expected.add(np.load(place / "base.npy"), ids=np.arange(700))
    D, I = expected.search(np.load(place / "queries.npy"), 7)
    with np.load(place / "results.npz") as results:
        np.testing.assert_array_equal(results["I"], I)
        np.testing.assert_array_equal(results["D"], D)
    again = command_here("index", ["search", f"index={place / 'flat'}", "mode=hamming",
                                   f"input={place / 'queries.npy'}",
                                   f"out={place / 'results.npz'}"], place)  # its own: replaced
    assert again.returncode == 0, again.stderr

    lists = command_here("index", ["build", f"run={run_dir}", "nlist=4",
                                   f"out={place / 'lists'}"], place)  # the run's own database
    assert lists.returncode == 0, lists.stderr
    assert SGHIndex.load(place / "lists").nlist == 4


@pytest.mark.parametrize("arguments, message", [
    ([], "the first word is the action, build or search; usage: sgh-index build run=RUN_DIR"),
    (["find"], "the first word is the action, build or search, not 'find'; usage: "),
    (["run=R", "out=O"], "build or search, not 'run=R'; usage: "),
    (["search", "index=I", "input=Q.npy"], "out is missing (it has no default); add out=VALUE"),
    (["build", "run=R", "out=O", "nprobe=3"], "nprobe=3: the configuration has no key 'nprobe'; "
                                              "accepted keys: run, out, input, key, nlist, mode"),
    (["search", "index=I", "input=Q", "out=R.npz", "nprob=3"],
     "nprob=3: the configuration has no key 'nprob'; accepted keys: index, input, key, out, k"),
    (["search", "index=I", "input=Q", "out=R.npz", "k=ten"],
     "k=ten: Value 'ten' of type 'str' could not be converted to Integer"),
    (["build", "run=R", "out=O", "nlist=abc"],
     "nlist=abc: Value 'abc' of type 'str' could not be converted to Integer"),
    (["search", "index=I", "input=Q", "out=R.npz", "k=0"],
     "k=0 is impossible; accepted: an integer >= 1"),
    (["search", "index=I", "input=Q", "out=R.npz", "mode=fast"],
     "mode=fast is not known; accepted: hamming, scan, two_stage, bytes"),
    (["search", "index=I", "input=Q", "out=R.json"], "the results are an .npz"),
    (["build", "-m", "run=R", "nlist=2,4", "out=O"], "out=O would be written by more than one "
                                                      "job of this sweep"),
])
def test_bad_arguments_are_one_line_and_exit_2(command_here, tmp_path, arguments, message):
    one_error_line(command_here("index", arguments, tmp_path), "sgh-index", message)


@pytest.mark.parametrize("arguments", [["--help"], ["build", "--help"], ["search", "--help"]])
def test_help_gives_the_usage_and_each_action_its_keys(command_here, tmp_path, arguments):
    result = command_here("index", arguments, tmp_path)
    assert result.returncode == 0 and result.stderr == ""
    action = "search" if arguments[0] == "search" else "build"  # --help: the build's
    assert result.stdout.startswith(f"sgh-index {action}: ")
    assert f"Usage: sgh-index {action} " in result.stdout and "search.md" in result.stdout
    if action == "build":  # and the search's usage
        assert "sgh-index search index=INDEX_DIR input=FILE out=RESULTS.npz" in result.stdout
        assert "\nrun: ???\nout: ???\ninput: null\n" in result.stdout
    else:
        assert "\nk: 100\nmode: null\nnprobe: null\n" in result.stdout


def test_a_sweep_builds_an_index_a_job(command_here, run_and_vectors, tmp_path):
    run_dir, place = run_and_vectors
    swept = command_here("index", ["build", "-m", f"run={run_dir}", "nlist=2,4",
                                   f"out={tmp_path}/lists_${{nlist}}",
                                   f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    assert swept.returncode == 0, swept.stderr
    assert [SGHIndex.load(tmp_path / f"lists_{n}").nlist for n in (2, 4)] == [2, 4]


def test_nothing_of_the_users_is_replaced(command_here, run_and_vectors, tmp_path):
    run_dir, place = run_and_vectors
    mine = tmp_path / "mine.npz"
    np.savez(mine, keep=np.arange(3))
    result = command_here("index", ["search", f"index={place / 'flat'}", f"out={mine}",
                                    f"input={place / 'queries.npy'}"], tmp_path)
    assert result.returncode == 2 and "is not results of sgh-index search" in result.stderr
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "notes.txt").write_text("keep")
    result = command_here("index", ["build", f"run={run_dir}", f"out={tmp_path / 'folder'}"],
                          tmp_path)
    assert result.returncode == 2 and "holds files that are not a saved SGHIndex" in result.stderr
    result = command_here("index", ["build", f"run={run_dir}", f"out={run_dir / 'codes.npz'}"],
                          tmp_path)
    assert result.returncode == 2
    assert np.load(mine)["keep"].tolist() == [0, 1, 2]
    assert (tmp_path / "folder" / "notes.txt").read_text() == "keep"
    wrong = command_here("index", ["search", f"index={place / 'flat'}", f"out={tmp_path / 'r.npz'}",
                                   f"input={run_dir / 'codes.npz'}", "key=database"], tmp_path)
    assert wrong.returncode == 2 and "features per vector but the model takes 16" in wrong.stderr


def test_vectors_stored_unlike_the_training_features_are_refused_unless_their_scale_is_said(
        command_here, run_and_vectors, tmp_path):
    """As sgh-encode: uint8 would be divided by 255, 255 times off a model of float features;
    the index keeps the run's conversion, so its searches are checked too."""
    run_dir, place = run_and_vectors
    rng = np.random.default_rng(1)
    np.save(tmp_path / "base.npy", rng.integers(0, 4, (300, 16), dtype=np.uint8))
    np.save(tmp_path / "queries.npy", rng.integers(0, 4, (5, 16), dtype=np.uint8))
    build = ["build", f"run={run_dir}", f"input={tmp_path / 'base.npy'}",
             f"out={tmp_path / 'index'}"]
    refused = command_here("index", build, tmp_path)
    assert refused.returncode == 2 and not (tmp_path / "index").exists()
    assert "base.npy is uint8 (converted as 'uint8 / 255') but run=" in refused.stderr
    assert "accepted: input_scale=none" in refused.stderr
    assert command_here("index", [*build, "input_scale=none"], tmp_path).returncode == 0

    search = ["search", f"index={tmp_path / 'index'}", f"input={tmp_path / 'queries.npy'}",
              f"out={tmp_path / 'results.npz'}", "k=5"]
    refused = command_here("index", search, tmp_path)
    assert refused.returncode == 2 and f"index={tmp_path / 'index'} was trained" in refused.stderr
    assert command_here("index", [*search, "input_scale=none"], tmp_path).returncode == 0
    index = SGHIndex.load(tmp_path / "index")
    D, I = index.search(np.load(tmp_path / "queries.npy").astype(np.float32), 5)
    with np.load(tmp_path / "results.npz") as results:
        np.testing.assert_array_equal(results["I"], I)
    bad = command_here("index", [*search, "input_scale=pixels"], tmp_path)
    assert bad.returncode == 2 and "input_scale='pixels' is not known; accepted: auto, none, " \
                                   "uint8" in bad.stderr


def test_an_input_scale_the_values_contradict_is_refused(command_here, run_and_vectors,
                                                         tmp_path):
    """input_scale= was taken at its word: uint8 on values that are no uint8 levels (already
    divided, or not pixels), none on 0..255 values for a run that saw uint8 / 255."""
    run_dir, place = run_and_vectors
    refused = command_here("index", ["build", f"run={run_dir}", f"input={place / 'base.npy'}",
                                     "input_scale=uint8", f"out={tmp_path / 'index'}"], tmp_path)
    one_error_line(refused, "sgh-index", "base.npy holds 0.12573 at row 0, column 0")
    assert "but input_scale=uint8 says its values are uint8 levels (whole numbers 0..255" \
        in refused.stderr and not (tmp_path / "index").exists()

    rng = np.random.default_rng(2)
    np.savez(tmp_path / "pixels.npz", X_train=rng.integers(0, 256, (400, 16), dtype=np.uint8),
             y_train=rng.integers(0, 3, 400), X_test=rng.integers(0, 256, (40, 16), np.uint8),
             y_test=rng.integers(0, 3, 40))
    pixels_run, _ = trained(tmp_path / "run", compose_config(
        "dataset=file", f"dataset.path={tmp_path / 'pixels.npz'}", "model=itq",
        "model.bits=8"))
    np.save(tmp_path / "raw.npy", rng.integers(0, 256, (50, 16), dtype=np.uint8))
    build = ["build", f"run={pixels_run}", f"input={tmp_path / 'raw.npy'}",
             f"out={tmp_path / 'pixels_index'}"]
    refused = command_here("index", [*build, "input_scale=none"], tmp_path)
    one_error_line(refused, "sgh-index", "raw.npy has values outside [0, 1]")
    assert "input_scale=none takes them as they are; accepted: input_scale=uint8" \
        in refused.stderr
    assert command_here("index", build, tmp_path).returncode == 0  # auto: divided by 255


def test_search_with_ground_truth_prints_and_writes_its_recall(command_here, run_and_vectors,
                                                               tmp_path):
    """A command-line user reaches the recall of the index they built: build, then search with
    groundtruth= (.npy or .ivecs of each query's nearest ids)."""
    run_dir, place = run_and_vectors
    built = command_here("index", ["build", f"run={run_dir}", f"input={place / 'base.npy'}",
                                   f"out={tmp_path / 'flat'}"], place)
    assert built.returncode == 0, built.stderr
    base, queries = np.load(place / "base.npy"), np.load(place / "queries.npy")
    distances = ((queries[:, None, :].astype(np.float64) - base[None]) ** 2).sum(axis=2)
    truth = np.argsort(distances, axis=1, kind="stable")[:, :20].astype(np.int32)
    np.save(tmp_path / "truth.npy", truth)
    ivecs = np.concatenate([np.full((len(truth), 1), 20, np.int32), truth], axis=1)
    ivecs.tofile(tmp_path / "truth.ivecs")
    for name in ("truth.npy", "truth.ivecs"):
        searched = command_here("index", [
            "search", f"index={tmp_path / 'flat'}", f"input={place / 'queries.npy'}", "k=50",
            f"groundtruth={tmp_path / name}", f"out={tmp_path / 'results.npz'}"], place)
        assert searched.returncode == 0, searched.stderr
        with np.load(tmp_path / "results.npz") as results:
            I = results["I"]
            expected = {n: float((I[:, :n, None] == truth[:, None, :10]).any(axis=1).mean())
                        for n in (1, 10, 50)}
            assert {n: float(results[f"recall10@{n}"]) for n in (1, 10, 50)} == expected
            assert "ids as returned" in str(results["recall_convention"])
        line = next(line for line in searched.stdout.splitlines() if "Recall10@1/@10/@50" in line)
        assert f"{expected[50]:.4f}" in line and "first 10 ground-truth ids" in line


@pytest.mark.parametrize("truth, message", [
    (np.tile(np.arange(10, dtype=np.int32), (29, 1)), "expected integer ids of shape (30, K)"),
    (np.tile(np.arange(5, dtype=np.int32), (30, 1)), "holds 5 neighbours per query; accepted: "
                                                      "at least 10"),
    (np.tile(np.arange(-1, 9, dtype=np.int32), (30, 1)), "has ids outside 0..699"),
    (np.tile(np.arange(691, 701, dtype=np.int32), (30, 1)), "has ids outside 0..699"),
    (np.tile(np.arange(10) + 0.5, (30, 1)), "truth.npy"),  # not whole numbers
    (np.zeros((30, 10), np.int32), "lists the id 0 more than once"),
])
def test_a_ground_truth_unlike_the_queries_is_one_line_and_writes_nothing(
        command_here, run_and_vectors, tmp_path, truth, message):
    run_dir, place = run_and_vectors
    built = command_here("index", ["build", f"run={run_dir}", f"input={place / 'base.npy'}",
                                   f"out={tmp_path / 'flat'}"], place)
    assert built.returncode == 0, built.stderr
    np.save(tmp_path / "truth.npy", truth)
    searched = command_here("index", [
        "search", f"index={tmp_path / 'flat'}", f"input={place / 'queries.npy'}",
        f"groundtruth={tmp_path / 'truth.npy'}", f"out={tmp_path / 'results.npz'}"], place)
    one_error_line(searched, "sgh-index", message)
    assert not (tmp_path / "results.npz").exists()


def test_nprobe_on_an_index_without_lists_is_one_line(command_here, run_and_vectors, tmp_path):
    run_dir, place = run_and_vectors
    built = command_here("index", ["build", f"run={run_dir}", f"out={tmp_path / 'flat'}"], place)
    assert built.returncode == 0, built.stderr
    searched = command_here("index", ["search", f"index={tmp_path / 'flat'}", "nprobe=8",
                                      f"input={place / 'queries.npy'}",
                                      f"out={tmp_path / 'results.npz'}"], place)
    one_error_line(searched, "sgh-index", "nprobe=8: the index has no inverted lists")
    assert not (tmp_path / "results.npz").exists()
    # The encoder's codes are never searched as a byte decoder's: that is another index.
    searched = command_here("index", ["search", f"index={tmp_path / 'flat'}", "mode=bytes",
                                      f"input={place / 'queries.npy'}",
                                      f"out={tmp_path / 'results.npz'}"], place)
    line = one_error_line(searched, "sgh-index", "mode='bytes': the index's codes are the "
                                                 "encoder's signs")
    assert line.endswith("; build another index with mode='bytes'"), line
    assert not (tmp_path / "results.npz").exists()



def test_a_build_says_what_it_is_doing_before_each_long_step(command_here, run_and_vectors,
                                                             tmp_path):
    run_dir, place = run_and_vectors
    built = command_here("index", ["build", f"run={run_dir}", f"input={place / 'base.npy'}",
                                   "mode=bytes", "nlist=4", f"out={tmp_path / 'lists'}"],
                         place)
    assert built.returncode == 0, built.stderr
    lines = built.stderr.splitlines()
    training = next(n for n, line in enumerate(lines) if line.startswith("[sgh] training on"))
    assert "k-means of 4 lists and the byte decoder's tables" in lines[training]
    assert lines[training + 1].startswith("[sgh] trained in ")
    assert lines[-2].startswith("[sgh] added 700/700 vectors")
    # nprobe chosen on rows of the input (its training sample) and their exact neighbours in it.
    assert re.fullmatch(r"\[sgh\] nprobe=(\d) of 4 lists, chosen on 700 validation queries \(the "
                        r"fewest within 0.005 of the best Recall10@100; nprobe 1: 0\.\d{4}, "
                        r"nprobe 2: 0\.\d{4}, nprobe 4: 0\.\d{4}\)", lines[-1])
    assert SGHIndex.load(tmp_path / "lists").nprobe == int(lines[-1].split("=")[1].split()[0])


def test_the_training_sample_holds_copies_of_its_rows_not_the_batches(monkeypatch):
    # A strided view of each batch kept every batch of the file alive until the sample was
    # joined: 2.6 GB at 10 million rows. A batch must be free once the one after it is read
    # (the caller's loop holds the last one while the next is read).
    import gc
    import weakref

    import sgh.cli.index as command

    released = []

    def batches(settings, index, where):
        held = [None, None]  # weak references to the last two batches
        for start in range(0, 5000, 1000):
            gc.collect()
            released.append(held[0] is None or held[0]() is None)
            rows = np.full((1000, 4), float(start), np.float32)
            held = [held[1], weakref.ref(rows)]
            yield start, 5000, rows
            del rows

    monkeypatch.setattr(command, "_batches", batches)
    index = type("Lists", (), {"codes_by_bytes": False, "nlist": 4})()
    sample = command._training_sample(IndexBuildConfig(input="x", run="r"), index)
    assert released == [True] * 5
    assert sample.shape == (1024, 4) and sample[0, 0] == 0 and sample[-1, 0] == 4000
