"""Finished work is never recorded again: the same command on a finished run changes no file,
a finished run given other settings is refused (its evaluation is sgh-eval's, for SGH as for a
baseline), and a run whose artifacts were lost re-creates them with its training record kept."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from sgh.artifacts.run_directory import RunDirectory
from sgh.artifacts.run_lock import run_lock
from sgh.errors import UserInputError
from sgh.pipeline import run
from tests.cli import conftest as cli_commands
from tests.helpers import QUICK, compose_config, files_below, one_error_line

command_here = cli_commands.command_here


def _config(*overrides):
    return compose_config(*QUICK, *overrides)


def _files(run_dir):
    """Every file of the run with its modification time (Hydra's own files aside)."""
    return {path: path.stat().st_mtime_ns for path in run_dir.rglob("*")
            if path.is_file() and ".hydra" not in path.parts and path.name != ".lock"}


@pytest.mark.parametrize("method", ["sgh", "itq"])
def test_the_same_command_on_a_finished_run_gives_its_results_and_changes_no_file(tmp_path,
                                                                                  method):
    overrides = [] if method == "sgh" else ["model=itq"]
    finished = run(_config(*overrides), tmp_path)
    before = _files(tmp_path)
    again = run(_config(*overrides), tmp_path)
    assert again == json.loads((tmp_path / "metrics.json").read_text())
    assert again["train_seconds"] == finished["train_seconds"]  # not a second, empty record
    assert _files(tmp_path) == before


@pytest.mark.parametrize("changed", ["eval.recall_n=[5,50]", "eval.ranking=two_stage",
                                     "model.bits=8", "trainer.seed=1"])
def test_a_finished_baseline_run_is_not_recorded_again_under_other_settings(tmp_path, changed,
                                                                            command_here):
    run_dir = tmp_path / "run"
    run(_config("model=lsh"), run_dir)
    before = files_below(run_dir)
    with pytest.raises(UserInputError, match=f"{run_dir} holds a finished run"):
        run(_config("model=lsh", changed), run_dir)
    assert files_below(run_dir) == before
    # The command, as a user runs it: one line saying where the new work goes.
    result = command_here("train", [*QUICK, "model=lsh", changed, f"hydra.run.dir={run_dir}"],
                          tmp_path)
    expected = (f"sgh-eval run={run_dir}" if changed.startswith("eval.")
                else "a new hydra.run.dir")
    line = one_error_line(result, "sgh-train", expected)
    assert changed.split("=")[0] in line, line
    if changed.startswith("eval."):  # the command it suggests re-scores the run elsewhere
        suggested = line.split("sgh-eval ")[1].split(", or ")[0].split()
        assert suggested == [f"run={run_dir}", changed, "out=scores.json"], suggested
        assert command_here("eval", suggested, tmp_path).returncode == 0
        assert (tmp_path / "scores.json").is_file()
    assert {name: data for name, data in files_below(run_dir).items()
            if name != "train.log" and not name.startswith(".hydra")} == {
        name: data for name, data in before.items()
        if name != "train.log" and not name.startswith(".hydra")}
    # The same settings still give the finished results, touching nothing.
    assert run(_config("model=lsh"), run_dir) == json.loads((run_dir / "metrics.json").read_text())


def test_a_run_still_training_is_named_so_by_every_command(tmp_path, command_here):
    """sgh-eval said "no codes.npz there", sgh-encode sent the user to sgh-export, which said
    the run had not finished: the run holds its lock, so each says it is still training."""
    run_dir = tmp_path / "run"
    RunDirectory(run_dir).write_config(_config())  # a run as sgh-train starts it
    np.save(tmp_path / "x.npy", np.zeros((3, 32), np.float32))
    commands = {"eval": [f"run={run_dir}"],
                "encode": [f"run={run_dir}", f"input={tmp_path / 'x.npy'}",
                           f"out={tmp_path / 'codes.npy'}"],
                "index": ["build", f"run={run_dir}", f"out={tmp_path / 'index'}"]}
    with run_lock(run_dir):
        holder = json.loads((run_dir / ".lock").read_text())
        holder = (f"sgh-train (pid {holder['pid']} on {holder['host']}, since "
                  f"{holder['since']})")
        for command, arguments in commands.items():
            one_error_line(command_here(command, arguments, tmp_path), f"sgh-{command}",
                           f"run={run_dir} is still being written by {holder}")
        exported = command_here("export", [f"run={run_dir}"], tmp_path)
        assert exported.returncode == 2 and exported.stderr.strip() == (
            f"sgh-export: error: run={run_dir} is still being written by {holder}, which writes "
            "its metrics.json when it finishes (a run still training); wait for it to finish, "
            "then run this command again")
    # Released (or its holder killed, its details left): the run is not training.
    (run_dir / ".lock").write_text('{"program": "sgh-train", "pid": 1}')
    result = command_here("eval", commands["eval"], tmp_path)
    one_error_line(result, "sgh-eval", "no codes.npz there")


@pytest.mark.parametrize("lost", ["codes.npz", "metrics.json"])
def test_a_lost_artifact_is_made_again_and_the_training_record_kept(tmp_path, lost):
    finished = run(_config(), tmp_path)
    (tmp_path / lost).unlink()
    again = run(_config(), tmp_path)
    assert (tmp_path / "codes.npz").is_file() and (tmp_path / "metrics.json").is_file()
    assert again["steps_this_process"] == 0 and again["map"] == finished["map"]
    # The record of the training, kept beside the checkpoints, not this process's empty one.
    for key in ("train_seconds", "ms_per_step", "final_loss_terms_per_item"):
        assert again[key] == finished[key], key


def _kept(files: dict) -> dict:
    """What a refused command must leave as it was: all but Hydra's record and the log."""
    return {name: data for name, data in files.items()
            if name != "train.log" and not name.startswith(".hydra")}


def test_a_finished_sgh_run_is_not_evaluated_again_in_place(tmp_path, command_here):
    """Its metrics.json (the Hamming results) and config.yaml were replaced by another
    evaluation's, without a word: refused as a baseline's is, pointing at sgh-eval."""
    run_dir = tmp_path / "run"
    finished = run(_config(), run_dir)
    before = files_below(run_dir)
    changed = ["eval.ranking=scan", "eval.recall_n=[1,10]"]
    result = command_here("train", [*QUICK, *changed, f"hydra.run.dir={run_dir}"], tmp_path)
    line = one_error_line(result, "sgh-train", f"{run_dir} holds a finished run (model=sgh) "
                                                "with other evaluation settings")
    assert _kept(files_below(run_dir)) == _kept(before)
    suggested = line.split("sgh-eval ")[1].split(", or ")[0].split()
    assert suggested == [f"run={run_dir}", *changed, "out=scores.json"], suggested
    assert command_here("eval", suggested, tmp_path).returncode == 0
    assert json.loads((tmp_path / "scores.json").read_text())["ranking"].startswith("scan: ")
    assert json.loads((run_dir / "metrics.json").read_text()) == finished


@pytest.mark.slow  # two sweeps of two jobs through Hydra's launcher
def test_a_resumed_sweep_does_not_record_its_finished_jobs_again(tmp_path):
    command = [sys.executable, "-m", "sgh.cli.train", "-m", *QUICK[:-1], "model.bits=8,12",
               f"hydra.sweep.dir={tmp_path}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    jobs = sorted(path.parent for path in tmp_path.glob("*/metrics.json"))
    before = {job: _files(job) for job in jobs}
    records = {job: json.loads((job / "metrics.json").read_text()) for job in jobs}
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.count("holds this run, finished") == 2
    for job in jobs:
        files = {path: stamp for path, stamp in _files(job).items() if path.name != "train.log"}
        assert files == {path: stamp for path, stamp in before[job].items()
                         if path.name != "train.log"}
        assert json.loads((job / "metrics.json").read_text()) == records[job]
