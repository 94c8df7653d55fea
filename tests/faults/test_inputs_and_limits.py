"""Inputs that were accepted and ignored, blocked forever or ended in a traceback, and process
limits: each is one line (`UserInputError`, exit status 2 at the command line).

    + keys            `+new.key=1`, `+trainer.foo=1`: refused like a misspelt key
    dataset.path      with a named dataset (`mnist` by default): refused, it names dataset=file
    validation size   `validation.database` at most the recall cut-off: refused
    mixed layouts     an .npz with the labelled keys and `base`, `junk`: refused, naming them;
                      an array of no layout: not read, and the log names it
    special files     a FIFO as dataset.path, sgh-encode input= or sgh-eval codes=: refused before
                      anything opens it (a regression fails here instead of blocking)
    symlink loop      as dataset.path: one line, no RuntimeError
    label matrices    a 2-D query_labels holding a 3, or without columns: one line naming the key
    limits            too few file descriptors, too little address space (TensorFlow's load):
                      one line naming the limit, in real processes

Small synthetic data and Python-level calls, except the limits, which need a process of their
own; a few seconds in all.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from sgh.artifacts.codes_file import load_codes
from sgh.cli.encode import encode_file
from sgh.cli.evaluate import evaluate_codes
from sgh.config import (
    EncodeCommandConfig,
    EvalCommandConfig,
    FileDatasetConfig,
    ValidationConfig,
    validate,
)
from sgh.data import load_split
from sgh.errors import UserInputError
from sgh.training.holdout import carve
from tests.helpers import QUICK, compose_config, labelled_arrays


def _command(monkeypatch, capsys, *arguments):
    """`sgh-train ARGUMENTS` in this process, for refusals made before Hydra runs:
    (exit status, stderr)."""
    from sgh.cli.train import main

    monkeypatch.delenv("SGH_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["sgh-train", *arguments])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main()
    return exit_.value.code, capsys.readouterr().err


def _handed_to_the_run(monkeypatch, *arguments):
    """The typed configuration `sgh-train ARGUMENTS` hands to `run` (and the run left out), or
    for a sweep (`-m`) None once its jobs are checked (and none of them run)."""
    import logging.config

    from sgh.cli import train

    handed = []
    monkeypatch.setattr(logging.config.DictConfigurator, "configure", lambda self: None)
    monkeypatch.setattr(train, "run", lambda config, run_dir: handed.append(config) or {})
    monkeypatch.setattr("hydra.main", lambda **_: lambda _job: lambda: None)  # a sweep's run
    monkeypatch.setattr(sys, "argv", ["sgh-train", *arguments])
    train.main()
    return handed[0] if handed else None


def _one_line(stderr: str, program: str = "sgh-train") -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"{program}: error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


def _message(call, *args) -> str:
    with pytest.raises(UserInputError) as raised:
        call(*args)
    message = str(raised.value)
    assert "\n" not in message, message
    return message


# ---- 11: `+key` for a key the schema does not know -------------------------------------------

def test_a_key_added_with_plus_that_the_schema_lacks_is_refused_like_a_misspelt_one(
        tmp_path, monkeypatch, capsys):
    for override, section, key in (("+new.key=1", "the configuration", "new"),
                                   ("+trainer.foo=1", "trainer", "foo"),
                                   ("++trainer.foo=1", "trainer", "foo"),
                                   ("+dataset.foo=1", "dataset", "foo")):
        # A baseline: if the key were taken, the run would be seconds, not a training.
        status, stderr = _command(monkeypatch, capsys, "dataset=synthetic", "model=lsh",
                                  "model.bits=8", override, f"hydra.run.dir={tmp_path / 'run'}")
        line = _one_line(stderr)
        assert status == 2
        assert f"{override}: {section} has no key {key!r}" in line, line
        assert "accepted keys: " in line, line
    assert not (tmp_path / "run").exists()
    # The same typo without +, refused as before; + and ++ on a known key work as Hydra says.
    status, stderr = _command(monkeypatch, capsys, "trainer.foo=1")
    assert status == 2 and "trainer has no key 'foo'" in _one_line(stderr)
    run_dir = f"hydra.run.dir={tmp_path / 'run'}"
    assert _handed_to_the_run(monkeypatch, "++trainer.steps=5", run_dir).trainer.steps == 5
    assert _handed_to_the_run(monkeypatch, "-m", "dataset=synthetic", "++trainer.steps=5,6",
                              f"hydra.sweep.dir={tmp_path / 'sweep'}") is None


# ---- 13: dataset.path without dataset=file ---------------------------------------------------

def test_a_dataset_path_with_a_named_dataset_is_refused_naming_dataset_file(
        tmp_path, monkeypatch, capsys):
    data = tmp_path / "mine.npz"
    np.savez(data, **labelled_arrays(40, 20, rng=np.random.default_rng(0)))
    for named in ([], ["dataset=cifar10_gist"]):
        status, stderr = _command(monkeypatch, capsys, *named, f"dataset.path={data}",
                                  f"hydra.run.dir={tmp_path / 'run'}")
        line = _one_line(stderr)
        assert status == 2
        assert f"dataset.path={data}" in line and "dataset=file" in line, line
    assert not (tmp_path / "run").exists()
    status, stderr = _command(monkeypatch, capsys, "-m", "dataset=file,mnist",
                              f"dataset.path={data}", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert status == 2 and "in the sweep's job with dataset=mnist: dataset" in _one_line(stderr)
    assert _handed_to_the_run(monkeypatch, "dataset=file", f"dataset.path={data}",
                              f"hydra.run.dir={tmp_path / 'run'}").dataset.name == "file"


# ---- 14: validation.database below the recall cut-off ----------------------------------------

def test_a_validation_database_within_the_recall_cutoff_is_refused():
    config = compose_config(*QUICK, "validation.every=20", "validation.database=20")
    assert "validation.database=20 is not more than the recall cut-off 100" in _message(
        validate, config)
    train = np.random.default_rng(0).normal(size=(1000, 8)).astype(np.float32)
    assert "validation.database=100 is not more than the recall cut-off 100" in _message(
        carve, train, ValidationConfig(database=100), 10)
    # More than the training set has takes all of it; map has no cut-off.
    _, validation = carve(train, ValidationConfig(queries=50, database=10**6), 10)
    assert len(validation.database) == 950
    carve(train, ValidationConfig(database=20, metric="map"), 10,
          labels=np.zeros(len(train), np.int64))
    validate(compose_config(*QUICK, "validation.every=20", "validation.database=20",
                            "validation.metric=map"))


# ---- 15: an .npz of one layout plus stray arrays ---------------------------------------------

def test_an_npz_mixing_layouts_is_refused_naming_the_stray_keys(tmp_path, caplog):
    rng = np.random.default_rng(0)
    mixed = tmp_path / "mixed.npz"
    np.savez(mixed, **labelled_arrays(40, 20, rng=rng), base=rng.normal(size=(5, 4)),
             junk=np.ones(3))
    message = _message(load_split, FileDatasetConfig(name="mixed", path=str(mixed)))
    assert f"{mixed}: holds the labelled layout" in message, message
    assert "base, junk" in message and "ANN" in message and "pooled (X, y)" in message
    misspelt = tmp_path / "misspelt.npz"
    np.savez(misspelt, base=rng.normal(size=(30, 4)), query=rng.normal(size=(5, 4)),
             ground_truth=np.zeros((5, 3), np.int64))
    assert "ground_truth looks like the ANN layout's groundtruth" in _message(
        load_split, FileDatasetConfig(name="misspelt", path=str(misspelt)))
    # An array that is no layout's key (an index of the source files) is not read, and the
    # run's log says so: an array meant as data is not dropped without a word.
    indexed = tmp_path / "indexed.npz"
    np.savez(indexed, **labelled_arrays(40, 20, rng=rng), file_index_train=np.arange(40))
    with caplog.at_level("INFO", logger="sgh.data.npz_file"):
        split = load_split(FileDatasetConfig(name="indexed", path=str(indexed), n_queries=5))
    assert len(split.train) == 40
    assert [record.getMessage() for record in caplog.records] == [
        f"{indexed}: file_index_train not read (the labelled layout reads X_train, y_train, "
        "X_test, y_test)"]


# ---- 17: special files -------------------------------------------------------------------------

def _refused_without_blocking(call, fifo) -> str:
    """`call`'s UserInputError line; fails, instead of hanging, if `call` blocks on the FIFO."""
    outcome = {}

    def target():
        try:
            call()
        except BaseException as error:  # noqa: BLE001  handed to the test
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout=60)  # returns as soon as `call` does
    if thread.is_alive():
        # It opened the FIFO and waits for a writer (or for data): one that closes at once
        # ends the wait.
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(timeout=60)
        pytest.fail(f"blocked on the FIFO {fifo}")
    error = outcome.get("error")
    assert isinstance(error, UserInputError), repr(error)
    assert "\n" not in str(error)
    return str(error)


def test_a_fifo_is_refused_before_it_is_opened(tmp_path):
    for name in ("data.npz", "data.npy", "codes.npz"):
        os.mkfifo(tmp_path / name)
    dataset = tmp_path / "data.npz"
    message = _refused_without_blocking(
        lambda: load_split(FileDatasetConfig(name="fifo", path=str(dataset))), dataset)
    assert message.startswith(f"dataset.path={dataset}: is a named pipe (FIFO)"), message
    assert "expected a regular file" in message
    encoder = tmp_path / "encoder"
    encoder.mkdir()
    features = tmp_path / "data.npy"
    message = _refused_without_blocking(lambda: encode_file(EncodeCommandConfig(
        encoder=str(encoder), input=str(features), out=str(tmp_path / "codes.npy"))), features)
    assert message.startswith(f"{features}: is a named pipe (FIFO)"), message
    codes = tmp_path / "codes.npz"
    message = _refused_without_blocking(
        lambda: evaluate_codes(EvalCommandConfig(codes=str(codes))), codes)
    assert message.startswith(f"{codes}: is a named pipe (FIFO)") and "codes.npz" in message


# ---- 18: a symlink loop as dataset.path ------------------------------------------------------

def test_a_symlink_loop_as_dataset_path_is_one_line(tmp_path):
    loop = tmp_path / "loop.npz"
    loop.symlink_to(loop)
    message = _message(load_split, FileDatasetConfig(name="loop", path=str(loop)))
    assert message == (f"dataset.path={loop}: a loop of symbolic links (following them never "
                       "reaches a file); point it at a file")
    inside = _message(load_split, FileDatasetConfig(name="loop", path=str(loop / "x.npz")))
    assert "a loop of symbolic links" in inside


# ---- 19: label matrices of a codes file --------------------------------------------------------

def test_every_label_matrix_mistake_is_one_line_naming_the_key(tmp_path):
    rng = np.random.default_rng(0)
    codes = {"database": np.packbits(rng.integers(0, 2, (30, 8)).astype(np.uint8), axis=1),
             "query": np.packbits(rng.integers(0, 2, (5, 8)).astype(np.uint8), axis=1),
             "bits": np.int64(8), "database_labels": rng.integers(0, 2, (30, 3))}
    query_labels = rng.integers(0, 2, (5, 3))
    query_labels[2, 1] = 3
    cases = {
        "three": ({"query_labels": query_labels},
                  "key 'query_labels' is a 2-D label matrix, so a 0/1 multi-hot one"),
        "no columns": ({"query_labels": np.zeros((5, 0), np.int64),
                        "database_labels": np.zeros((30, 0), np.int64)},
                       "key 'database_labels' is a label matrix of shape (30, 0), with no label "
                       "column"),
        "other labels": ({"query_labels": rng.integers(0, 2, (5, 4))},
                         "'query_labels' has shape (5, 4) but 'database_labels' (30, 3)"),
    }
    for name, (arrays, expected) in cases.items():
        path = tmp_path / f"{name}.npz"
        np.savez(path, **{**codes, **arrays})
        message = _message(evaluate_codes, EvalCommandConfig(codes=str(path)))
        assert message.startswith(f"{path}: ") and expected in message, message
    assert "holds 3 at row 2, column 1" in _message(load_codes, tmp_path / "three.npz")
    assert "expected only 0 and 1, or 1-D integer class ids" in _message(
        load_codes, tmp_path / "three.npz")


# ---- 20: process limits, in processes of their own ----------------------------------------------

def _process(script: str, *arguments: str, cwd, preexec_fn=None):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("SGH_DEBUG", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *arguments], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300,
                          preexec_fn=preexec_fn)


def test_too_few_file_descriptors_is_one_line_naming_the_limit(tmp_path):
    # The limit is set once the command's modules are loaded, at the lowest free descriptor:
    # the command's first open fails, wherever the interpreter's start-up left it.
    script = """
        import os, resource, sys
        from sgh.cli.train import main
        free = os.open(os.devnull, os.O_RDONLY)
        os.close(free)
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (free, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        sys.argv = ["sgh-train", *sys.argv[1:]]
        main()
    """
    result = _process(script, "dataset=synthetic", "model=lsh", "model.bits=8",
                      f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    line = _one_line(result.stderr)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "too many open files" in line and "(ulimit -n: " in line and "raise it" in line, line
    # TensorFlow's own error for it (ResourceExhaustedError) carries the text only.
    from sgh.errors import resource_limit_line

    tensorflow_error = type("ResourceExhaustedError", (Exception,),
                            {"__module__": "tensorflow.python.framework.errors_impl"})
    assert resource_limit_line(tensorflow_error("x.tmp; Too many open files")).startswith(
        "too many open files")


def test_too_little_address_space_for_tensorflow_is_one_line_naming_the_limit(tmp_path):
    # What the loader raises under `ulimit -v 1500000` while TensorFlow loads, without loading
    # TensorFlow: an import finder raises it for `tensorflow`.
    script = """
        import sys

        class OutOfAddressSpace:
            def find_spec(self, name, path=None, target=None):
                if name == "tensorflow":
                    raise ImportError("/venv/tensorflow/libtensorflow_framework.so.2: failed "
                                      "to map segment from shared object")

        sys.meta_path.insert(0, OutOfAddressSpace())
        from sgh.cli.train import main
        sys.argv = ["sgh-train", *sys.argv[1:]]
        main()
    """
    soft = 1 << 40  # a finite limit, far above what the command uses without TensorFlow
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    result = _process(script, *QUICK, "validation.every=0", f"hydra.run.dir={tmp_path / 'run'}",
                      cwd=tmp_path,
                      preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (soft, hard)))
    line = _one_line(result.stderr)
    assert result.returncode == 2, result.stderr[-3000:]
    assert line.startswith("sgh-train: error: out of memory (TensorFlow could not be "
                           "loaded ("), line
    assert f"(ulimit -v: {soft // 1024} KiB) was reached" in line, line
