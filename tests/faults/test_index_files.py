"""Faults of `SGHIndex` and `sgh-index` files: a damaged index.npz, a user's folder at `out=`,
two writers of one new `out=`, builds killed or interrupted, codes and scores of two models,
and a run's dataset changed since the run. Each is refused in one line naming the file or key
(exit status 2 from the command), and nothing the user wrote is replaced."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from sgh import ITQ
from sgh.config import (
    BaselineConfig,
    Config,
    EvalConfig,
    SyntheticDatasetConfig,
    TrainerConfig,
)
from sgh.errors import UserInputError
from sgh.search.sgh_index import SGHIndex
from tests.cli import conftest as cli_commands
from tests.helpers import compose_config, files_below, labelled_arrays, one_error_line, trained

command_here = cli_commands.command_here


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A model's index with inverted lists and one with a byte decoder, saved."""
    place = tmp_path_factory.mktemp("saved")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1500, 16)).astype(np.float32)
    hasher = ITQ(n_bits=16, random_state=0).fit(x)
    listed, tables = SGHIndex(hasher, nlist=4), SGHIndex(hasher, mode="bytes")
    for index in (listed, tables):
        index.train(x)
        index.add(x)
    return {"lists": listed.save(place / "lists"), "bytes": tables.save(place / "bytes")}, x


def _edited(source, target, change):
    """A copy of the saved index at `source` whose index.npz `change(arrays)` rewrote."""
    target.mkdir()
    for entry in source.iterdir():
        (target / entry.name).write_bytes(entry.read_bytes())
    with np.load(source / "index.npz", allow_pickle=False) as stored:
        arrays = dict(stored)
    change(arrays)
    with open(target / "index.npz", "wb") as file:
        np.savez(file, **arrays)
    return target


def _set(key, value):
    return lambda arrays: arrays.__setitem__(key, value(arrays[key]) if callable(value) else value)


def _nan_centroid(centroids):
    centroids = centroids.copy()
    centroids[1, 3] = np.nan
    return centroids


@pytest.mark.parametrize("kind, change, message", [
    ("lists", _set("centroids", _nan_centroid), "key 'centroids' has shape (4, 16) and NaN or "
                                                "infinite values; expected (4, 16) finite floats"),
    ("lists", _set("centroids", lambda c: c[:2]), "key 'centroids' has shape (2, 16); expected"),
    ("lists", _set("lists", lambda lists: np.where(lists == lists.max(), 9, lists)),
     "key 'lists' holds 1500 lists for 1500 codes, in 0..9; expected one list in 0..3"),
    ("lists", _set("lists", lambda lists: lists[::-1].copy()), "in list order"),
    ("lists", _set("mode", np.str_("bytes")), "key 'mode' is 'bytes' and the file lacks a "
                                              "byte decoder's tables"),
    ("bytes", _set("mode", np.str_("scan")), "key 'mode' is 'scan' and the file holds a "
                                             "byte decoder's tables"),
    # The flag of an index saved before the byte decoder was a mode is read as that mode.
    ("lists", lambda arrays: arrays.__setitem__("decoder", np.str_("bytes")),
     "key 'mode' is 'bytes' and the file lacks a byte decoder's tables"),
    ("lists", lambda arrays: arrays.pop("ids"), "key 'ids' is missing"),
    ("lists", lambda arrays: arrays.pop("centroids"), "key 'centroids' is missing"),
    ("lists", _set("nlist", np.str_("four")), "key 'nlist' has dtype <U4 and shape ()"),
    ("lists", _set("ids", lambda ids: ids.astype(np.float64)), "key 'ids' has dtype float64"),
    ("lists", _set("ids", lambda ids: np.where(ids == 7, -1, ids)), "ids must not be -1"),
    ("lists", _set("ids", lambda ids: ids[:-1]), "ids must be a 1-D integer array, one id per "
                                                 "code (1500)"),
    ("lists", _set("nprobe", np.int64(0)), "key 'nprobe' is 0; expected an integer >= 1"),
    ("lists", _set("mode", np.str_("fast")), "mode='fast' is not known; accepted: hamming"),
    ("lists", _set("mode", np.str_("hamming")), "mode='hamming' scans every code"),
    ("lists", _set("codes", lambda codes: codes[:, :1].copy()), "codes"),
    ("bytes", _set("byte_decoder.tables", lambda t: t[:1]), "byte_decoder.tables"),
    ("bytes", _set("byte_decoder.bits", np.int64(24)), "byte_decoder."),
])
def test_a_damaged_saved_index_is_refused_in_one_line_naming_the_key(saved, tmp_path, kind,
                                                                     change, message):
    """Such files loaded and answered (NaN centroids, lists beyond nlist, a mode that named the
    other kind of codes), or raised KeyError, TypeError, IndexError."""
    damaged = _edited(saved[0][kind], tmp_path / "damaged", change)
    with pytest.raises(UserInputError) as refusal:
        SGHIndex.load(damaged)
    line = str(refusal.value)
    assert line.startswith(f"{damaged / 'index.npz'}: ") and "\n" not in line, line
    assert message in line, line


def test_a_byte_decoder_index_saved_before_bytes_was_a_mode_loads_as_mode_bytes(saved, tmp_path):
    """Such a file says decoder='bytes' beside mode 'scan'; saved again, it says mode 'bytes'."""
    def as_before(arrays):
        arrays.update(mode=np.str_("scan"), decoder=np.str_("bytes"))

    old = _edited(saved[0]["bytes"], tmp_path / "old", as_before)
    index, current = SGHIndex.load(old), SGHIndex.load(saved[0]["bytes"])
    assert index.mode == "bytes" and index.encoding == current.encoding
    queries = saved[1][:20]
    np.testing.assert_array_equal(index.search(queries, 10)[1], current.search(queries, 10)[1])
    with np.load(index.save(tmp_path / "again") / "index.npz") as arrays:
        assert str(arrays["mode"]) == "bytes" and "decoder" not in arrays.files


def test_a_folder_that_merely_holds_files_named_like_an_index_is_never_replaced(
        saved, tmp_path, command_here):
    """The check read names, not a mark: save and sgh-index build replaced such a folder."""
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("index.npz", "scores.npz", "codes.faiss"):
        (mine / name).write_text(f"my own {name}")
    before = files_below(mine)
    index = SGHIndex.load(saved[0]["lists"])
    with pytest.raises(UserInputError, match="holds files that are not a saved SGHIndex .*no "
                                             ".sgh-index, the mark of one, is there"):
        index.save(mine)
    assert files_below(mine) == before
    index.save(saved[0]["lists"])  # its own: replaced
    assert (saved[0]["lists"] / ".sgh-index").is_file()


def test_two_writers_of_one_new_out_one_wins_and_the_other_says_so(saved, tmp_path,
                                                                     monkeypatch):
    """The second rename onto the first writer's new directory raised OSError: Directory not
    empty. The other writer's index stays whole; this one's is dropped, nothing left over."""
    first, second = SGHIndex.load(saved[0]["lists"]), SGHIndex.load(saved[0]["bytes"])
    target, rename = tmp_path / "index", os.replace

    def the_other_writer_finishes_first(source, destination):
        monkeypatch.setattr(os, "replace", rename)
        second.save(target)
        return rename(source, destination)

    monkeypatch.setattr(os, "replace", the_other_writer_finishes_first)
    with pytest.raises(UserInputError, match=f"^{target} was written by another process while "
                                             "this one was writing it"):
        first.save(target)
    assert SGHIndex.load(target).mode == "bytes"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["index"]


@pytest.fixture(scope="module")
def run_and_base(tmp_path_factory):
    place = tmp_path_factory.mktemp("run")
    config = Config(dataset=SyntheticDatasetConfig(dim=16), model=BaselineConfig(name="itq",
                    bits=16), eval=EvalConfig())
    run_dir, _ = trained(place / "run", config)
    np.save(place / "base.npy", np.random.default_rng(0).standard_normal((20000, 16),
                                                                        dtype=np.float32))
    return run_dir, place / "base.npy"


def _build(run_dir, base, out, *extra):
    return subprocess.Popen([sys.executable, "-m", "sgh.cli.index", "build", f"run={run_dir}",
                             f"input={base}", f"out={out}", *extra],
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_builds_racing_to_one_new_out_end_in_one_index_and_never_a_traceback(
        run_and_base, tmp_path):
    run_dir, base = run_and_base
    out = tmp_path / "index"
    builds = [_build(run_dir, base, out, "batch_size=5000") for _ in range(2)]
    results = [(build.wait(timeout=300), build.stderr.read()) for build in builds]
    for build in builds:
        build.stdout.close()
        build.stderr.close()
    for code, stderr in results:
        assert "Traceback" not in stderr and code in (0, 2), stderr
        if code == 2:
            assert stderr.strip().splitlines()[-1].startswith(
                f"sgh-index: error: {out} was written by another process"), stderr
    assert 0 in [code for code, _ in results]
    assert SGHIndex.load(out).ntotal == 20000
    assert sorted(path.name for path in tmp_path.iterdir()) == ["index"]


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_a_build_killed_or_interrupted_leaves_no_index_and_the_next_one_builds(
        run_and_base, tmp_path, how):
    run_dir, base = run_and_base
    out = tmp_path / "index"
    build = _build(run_dir, base, out, "batch_size=1")
    for line in build.stderr:  # the first vectors added: the build is under way
        if line.startswith("[sgh] added"):
            break
    build.send_signal(how)
    _, stderr = build.communicate(timeout=120)
    if how == signal.SIGINT:
        assert build.returncode == 130 and "Traceback" not in stderr
        assert stderr.strip().splitlines()[-1] == ("sgh-index: interrupted; nothing was left "
                                                   "half-written: run the same command again")
    assert not out.exists() and list(tmp_path.iterdir()) == []
    again = _build(run_dir, base, out, "batch_size=10000")
    assert again.wait(timeout=300) == 0, again.communicate()[1]
    again.communicate()
    assert SGHIndex.load(out).ntotal == 20000


def test_build_input_with_fewer_vectors_than_lists_is_one_line(run_and_base, tmp_path,
                                                              command_here):
    run_dir, _ = run_and_base
    np.save(tmp_path / "three.npy", np.ones((3, 16), np.float32))
    result = command_here("index", ["build", f"run={run_dir}", f"input={tmp_path / 'three.npy'}",
                                    "nlist=8", f"out={tmp_path / 'index'}"], tmp_path)
    one_error_line(result, "sgh-index", "three.npy has 3 vectors for nlist=8 lists; accepted: "
                                        "nlist <= 3")
    assert not (tmp_path / "index").exists()


def test_codes_of_another_model_are_never_added(run_and_base, tmp_path):
    """add_codes took another model's sgh-encode output: a .npy carries no fingerprint, its
    record beside it does (written_by: sgh-encode, fingerprint)."""
    run_dir, base = run_and_base
    index = SGHIndex.from_run(run_dir)
    codes = index.encode(np.load(base)[:50])

    def encoded(name, fingerprint):
        np.save(tmp_path / name, codes)
        (tmp_path / f"{name}.json").write_text(json.dumps(
            {"written_by": "sgh-encode", "codes": name, "shape": list(codes.shape),
             "bits": 16, "fingerprint": fingerprint}))
        return tmp_path / name

    other = ITQ(n_bits=16, random_state=1).fit(np.load(base)[:2000])
    for path, message in [
            (encoded("other.npy", SGHIndex(other).fingerprint),
             f"come from model {SGHIndex(other).fingerprint}, this index's is "
             f"{index.fingerprint}"),
            (encoded("unnamed.npy", None), "name no model"),
    ]:
        with pytest.raises(UserInputError, match=f"{path}: its record .* says these codes "
                                                 f".*{message}"):
            index.add_codes(path)
    np.save(tmp_path / "bare.npy", codes)
    with pytest.raises(UserInputError, match="bare.npy: no record of sgh-encode beside it"):
        index.add_codes(tmp_path / "bare.npy")
    n = index.ntotal
    index.add_codes(encoded("own.npy", index.fingerprint))
    assert index.ntotal == n + 50


def test_another_runs_scores_are_refused_by_build_input_too(run_and_base, tmp_path,
                                                             command_here):
    """Without input= the copied asymmetric.npz was refused; with it, the index was built."""
    run_dir, base = run_and_base
    config = Config(dataset=SyntheticDatasetConfig(dim=16), model=BaselineConfig(
        name="itq", bits=16), trainer=TrainerConfig(seed=1), eval=EvalConfig())
    other, _ = trained(tmp_path / "other", config)
    (other / "asymmetric.npz").write_bytes((run_dir / "asymmetric.npz").read_bytes())
    result = command_here("index", ["build", f"run={other}", f"input={base}",
                                    f"out={tmp_path / 'index'}"], tmp_path)
    one_error_line(result, "sgh-index", "come from different models")
    assert not (tmp_path / "index").exists()


def test_a_runs_dataset_changed_since_the_run_is_refused_where_it_is_read_again(
        tmp_path, command_here):
    """The same rows, other values: nlist and the byte decoder read the features again and
    mixed the run's codes with lists and byte codes of other data."""
    path = tmp_path / "data.npz"
    np.savez(path, **labelled_arrays(n_train=400, n_test=40, dim=8))
    run_dir = tmp_path / "run"
    trained(run_dir, compose_config("dataset=file", f"dataset.path={path}", "model=itq",
                                    "model.bits=8"))
    SGHIndex.from_run(run_dir, nlist=4)  # as it was: built
    recorded = path.stat()
    np.savez(path, **labelled_arrays(n_train=400, n_test=40, dim=8,
                                     rng=np.random.default_rng(5)))
    os.utime(path, ns=(recorded.st_atime_ns, recorded.st_mtime_ns + 10**9))  # a later write
    for arguments in ({"nlist": 4}, {"mode": "bytes"}):
        with pytest.raises(UserInputError, match=f"run={run_dir} was trained on other data "
                                                 f"\\({path} \\(dataset.path\\): "):
            SGHIndex.from_run(run_dir, **arguments)
    result = command_here("index", ["build", f"run={run_dir}", "nlist=4",
                                    f"out={tmp_path / 'index'}"], tmp_path)
    one_error_line(result, "sgh-index", "was trained on other data")
