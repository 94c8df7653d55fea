"""An output replaces only the same command's own earlier output for the same run or inputs.

    another run's eval.json   `sgh-eval run=A out=B/eval.json` (or codes=... out=B/eval.json) is
                              refused: B's eval.json is B's re-scoring; A's own is written
    a run's dataset file      `sgh-encode run=R out=F` with F a file R was trained on (its
                              inputs.json) is refused: R could not be re-scored afterwards

Baseline runs and in-process commands: a few seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sgh.cli.evaluate import evaluate_codes
from sgh.config import EvalCommandConfig
from sgh.errors import UserInputError
from sgh.pipeline import run
from tests.cli import conftest as cli_commands
from tests.helpers import QUICK, compose_config, files_below, one_error_line

BASELINE = [*QUICK, "model=lsh"]  # a finished run in a second, without TensorFlow
command_here = cli_commands.command_here


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    """Two finished baseline runs, A and B; B re-scored by `sgh-eval run=B` (its eval.json)."""
    folder = tmp_path_factory.mktemp("more_outputs")
    first, second = folder / "a", folder / "b"
    run(compose_config(*BASELINE), first)
    run(compose_config(*BASELINE, "trainer.seed=1"), second)
    evaluate_codes(EvalCommandConfig(run=str(second)))
    return first, second


# ---- sgh-eval out= another run's eval.json ----------------------------------------------------
def test_sgh_eval_never_writes_another_runs_eval_json(two_runs, tmp_path, command_here):
    first, second = two_runs
    target = second / "eval.json"
    before = files_below(second)
    for config in (EvalCommandConfig(run=str(first), out=str(target)),
                   EvalCommandConfig(codes=str(first / "codes.npz"), out=str(target))):
        with pytest.raises(UserInputError, match=f"is the eval.json of the run {second}"):
            evaluate_codes(config)
    result = command_here("eval", [f"run={first}", f"out={target}"], tmp_path)
    line = one_error_line(result, "sgh-eval", f"out={target} is the eval.json of the run {second}")
    assert "accepted: " in line and "out=" in line.split("accepted: ")[1]
    assert files_below(second) == before
    # Even where B has none yet: B's eval.json would hold A's scores.
    target.unlink()
    with pytest.raises(UserInputError, match=f"is the eval.json of the run {second}"):
        evaluate_codes(EvalCommandConfig(run=str(first), out=str(target)))
    assert not target.exists()
    evaluate_codes(EvalCommandConfig(run=str(second)))  # B's own, again


def test_sgh_eval_still_writes_its_own_run_and_a_new_path(two_runs, tmp_path):
    first, _ = two_runs
    for out in (first / "eval.json", tmp_path / "scores.json"):
        for _ in range(2):  # and replaces what it wrote there before
            evaluate_codes(EvalCommandConfig(run=str(first), out=str(out)))
            assert "map" in json.loads(out.read_text())
    evaluate_codes(EvalCommandConfig(codes=str(first / "codes.npz"),
                                     out=str(tmp_path / "scores.json")))


# ---- sgh-encode out= a run's dataset file -----------------------------------------------------
@pytest.fixture(scope="module")
def run_on_files(tmp_path_factory) -> Path:
    """A finished baseline run on the user's files: base.npy, its queries in query.npy."""
    folder = tmp_path_factory.mktemp("encode_data")
    rng = np.random.default_rng(0)
    np.save(folder / "base.npy", rng.normal(size=(300, 8)).astype(np.float32))
    np.save(folder / "query.npy", rng.normal(size=(20, 8)).astype(np.float32))
    np.save(folder / "new.npy", rng.normal(size=(5, 8)).astype(np.float32))
    run(compose_config(*BASELINE, "dataset=file", f"dataset.path={folder / 'base.npy'}",
                       f"dataset.query_path={folder / 'query.npy'}", "eval.recall_n=[1,10]"),
        folder / "run")
    return folder


@pytest.mark.parametrize("name", ["base.npy", "query.npy"])
def test_sgh_encode_never_writes_over_a_file_the_run_was_trained_on(run_on_files, command_here,
                                                                    name):
    folder = run_on_files
    recorded = json.loads((folder / "run" / "inputs.json").read_text())["files"]
    assert str((folder / name).resolve()) in [item["path"] for item in recorded]
    before = files_below(folder)
    result = command_here("encode", [f"run={folder / 'run'}", f"input={folder / 'new.npy'}",
                                     f"out={folder / name}"], folder)
    line = one_error_line(result, "sgh-encode", f"out={folder / name}")
    assert "run" in line and "accepted: " in line and "out=" in line.split("accepted: ")[1]
    assert files_below(folder) == before
    # Named through a relative path or a link, the same file.
    (folder / "link.npy").symlink_to(folder / name)
    try:
        for out in (name, "link.npy"):
            result = command_here("encode", [f"run={folder / 'run'}",
                                             f"input={folder / 'new.npy'}", f"out={out}"], folder)
            one_error_line(result, "sgh-encode", f"out={out}")
    finally:
        (folder / "link.npy").unlink()
    assert files_below(folder) == before
