"""Every output replaces only what the same command wrote itself, and leaves nothing behind.

    staging files      a killed writer's temporary (`.NAME.*.tmp*`) is removed by the next
                       writer of the same output; one still being written is left alone; a
                       killed sgh-compare's images are never in a directory TensorBoard reads
    symbolic links     out= onto a link is refused, the link and its target left as they were
    sgh-compare        a user's comparison.md / .csv, or one edited since, is refused; a refusal
                       writes nothing; out= inside a run's encoder/ is refused; a metrics.json
                       whose seed is a string is one line
    sweep directories  a folder holding only a multirun.yaml or a .png of the user's is refused
    shared out=        a sweep of sgh-eval or sgh-encode whose jobs would write one out= is
                       refused before any job runs
    refused starts     an sgh-train refused inside the run leaves no run directory behind

Each case is one problem of a probe of the product (issue 31). Baseline runs and in-process
commands, a few processes killed on purpose: about twenty seconds.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing import io_wrapper

from sgh.artifacts.atomic import atomic_directory, write_bytes, write_json
from sgh.errors import UserInputError
from sgh.pipeline import run
from sgh.reports.comparison import compare
from tests.cli import conftest as cli_commands
from tests.helpers import QUICK, compose_config, files_below, one_error_line

BASELINE = [*QUICK, "model=lsh"]  # a finished run in a second, without TensorFlow
command_here = cli_commands.command_here


def _killed_in_python(script: str, *arguments: str) -> None:
    """Run `script` in a new interpreter that kills itself with SIGKILL where the script says."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *arguments],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == -9, result.stderr[-2000:]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished baseline run: config.yaml, inputs.json, codes.npz, metrics.json, .sgh-run."""
    run_dir = tmp_path_factory.mktemp("outputs") / "run"
    run(compose_config(*BASELINE), run_dir)
    return run_dir


def _sweep(folder: Path, recall: float = 0.25) -> Path:
    """A sweep of one finished job, as sgh-compare reads it: its metrics.json (no labels, so no
    PR curve to draw from its codes)."""
    job = folder / "sweep" / "0_1234abcd"
    job.mkdir(parents=True, exist_ok=True)
    (job / "metrics.json").write_text(json.dumps({
        "dataset": "toy", "method": "lsh", "bits": 8, "seed": 0, "recall10@100": recall}))
    return job.parent


# ---- staging files of a killed writer ----------------------------------------------------------
KILLED_WHILE_WRITING = """
    import os, signal, sys
    from sgh.artifacts.atomic import atomic_directory, atomic_file
    writing = atomic_directory if sys.argv[2] == "directory" else atomic_file
    with writing(sys.argv[1]) as temporary:
        if sys.argv[2] == "directory":
            (temporary / "part").write_text("half")
        else:
            temporary.write_text("half")
        os.kill(os.getpid(), signal.SIGKILL)
"""


def _temporaries(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if ".tmp" in path.name)


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_the_next_writer_of_an_output_removes_what_a_killed_writer_left(tmp_path, kind):
    target = tmp_path / ("scores.json" if kind == "file" else "saved")
    _killed_in_python(KILLED_WHILE_WRITING, str(target), kind)
    assert len(_temporaries(tmp_path)) == 1 and not target.exists()  # left by the killed one
    if kind == "file":
        write_json(target, {"map": 0.5})
        assert json.loads(target.read_text()) == {"map": 0.5}
    else:
        with atomic_directory(target) as staging:
            (staging / "whole").write_text("all of it")
        assert sorted(path.name for path in target.iterdir()) == ["whole"]
    assert _temporaries(tmp_path) == []


def test_a_temporary_still_being_written_is_left_to_its_writer(tmp_path):
    target = tmp_path / "scores.json"
    in_flight = tmp_path / ".scores.json.a1b2c3d4.tmp"
    in_flight.write_text("being written")
    descriptor = os.open(in_flight, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)  # as its writer holds it, in another process
        write_bytes(target, b"{}")
        assert in_flight.read_text() == "being written"
    finally:
        os.close(descriptor)
    write_bytes(target, b"{}")  # its writer is gone now: an abandoned temporary
    assert _temporaries(tmp_path) == []


KILLED_COMPARE = """
    import os, signal, sys
    from sgh.artifacts import tensorboard_events
    from sgh.reports.comparison import compare
    written = tensorboard_events.encoded_image
    def killed_after_the_first_image(*args, **kwargs):
        written(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
    tensorboard_events.encoded_image = killed_after_the_first_image
    compare(sys.argv[1])
"""


def test_a_killed_comparison_leaves_no_run_for_tensorboard_and_the_next_clears_it(tmp_path):
    sweep = _sweep(tmp_path)
    _killed_in_python(KILLED_COMPARE, str(sweep))

    def runs_tensorboard_sees() -> list[str]:  # every directory holding an event file
        return sorted(os.path.relpath(directory, sweep)
                      for directory in io_wrapper.GetLogdirSubdirectories(str(sweep)))

    assert runs_tensorboard_sees() == []  # the half-written images are not a run
    compare(sweep)
    assert runs_tensorboard_sees() == ["tensorboard_compare"]
    images = sweep / "tensorboard_compare"
    assert [path.name.startswith("events.out.tfevents.") for path in images.iterdir()] == [True]
    assert _temporaries(sweep) == []


# ---- out= onto a symbolic link -----------------------------------------------------------------
def test_out_onto_a_symbolic_link_is_refused_and_the_link_kept(finished, tmp_path,
                                                               command_here):
    target = tmp_path / "kept.json"
    target.write_text('{"mine": 1}')
    link = tmp_path / "scores.json"
    link.symlink_to(target)
    encoded = tmp_path / "codes.npy"
    encoded.symlink_to(tmp_path / "elsewhere.npy")  # dangling: np.save would make a file there
    np.save(tmp_path / "features.npy", np.zeros((3, 4), np.float32))
    before = files_below(tmp_path)
    result = command_here("eval", [f"codes={finished / 'codes.npz'}", f"out={link}"],
                          cwd=tmp_path)
    line = one_error_line(result, "sgh-eval", f"out={link} is a symbolic link (to {target})")
    assert "accepted: a path that is not a link: write elsewhere (out=...)" in line
    result = command_here("encode", [f"run={finished}", f"input={tmp_path / 'features.npy'}",
                                     f"out={encoded}"], cwd=tmp_path)
    one_error_line(result, "sgh-encode", f"out={encoded} is a symbolic link")
    with pytest.raises(UserInputError, match=f"{link} is a symbolic link"):
        write_json(link, {})  # every writer: the link itself is never replaced
    assert files_below(tmp_path) == before


# ---- sgh-compare's outputs -----------------------------------------------------------------------
def test_sgh_compare_replaces_only_its_own_outputs_and_checks_them_all_first(tmp_path,
                                                                             command_here):
    sweep = _sweep(tmp_path)
    report = tmp_path / "report"
    report.mkdir()
    (report / "comparison.md").write_text("# my notes\n")
    (report / "comparison.csv").write_text("mine,1\n")
    before = files_below(report)
    result = command_here("compare", [f"sweep={sweep}", f"out={report}"], cwd=tmp_path)
    one_error_line(result, "sgh-compare", f"{report / 'comparison.csv'} is not a file sgh-compare "
                                     "wrote")
    assert files_below(report) == before  # not even comparison.csv, nor a plot
    # Its own earlier output is replaced; the same file edited since is the user's again.
    (report / "comparison.md").unlink()
    (report / "comparison.csv").unlink()
    assert command_here("compare", [f"sweep={sweep}", f"out={report}"],
                        cwd=tmp_path).returncode == 0
    _sweep(tmp_path, recall=0.75)
    assert command_here("compare", [f"sweep={sweep}", f"out={report}"],
                        cwd=tmp_path).returncode == 0
    assert "0.750" in (report / "comparison.md").read_text()
    with open(report / "comparison.md", "a") as notes:
        notes.write("my conclusions\n")
    result = command_here("compare", [f"sweep={sweep}", f"out={report}", "tensorboard=false"],
                          cwd=tmp_path)
    one_error_line(result, "sgh-compare", "it is yours, or was edited since")
    # A refusal found last (a folder of the user's named as the images) writes nothing first.
    (report / "comparison.md").write_bytes(b"")
    assert command_here("compare", [f"sweep={sweep}", f"out={report}"],
                        cwd=tmp_path).returncode != 0  # the emptied file is not its own
    (report / "comparison.md").unlink()
    assert command_here("compare", [f"sweep={sweep}", f"out={report}"],
                        cwd=tmp_path).returncode == 0
    _sweep(tmp_path, recall=0.5)
    for event_file in (report / "tensorboard_compare").iterdir():
        event_file.unlink()
    (report / "tensorboard_compare" / "train.py").write_text("print('mine')\n")
    before = files_below(report)
    result = command_here("compare", [f"sweep={sweep}", f"out={report}"], cwd=tmp_path)
    one_error_line(result, "sgh-compare",
                   "holds files that are not sgh-compare's TensorBoard images")
    assert files_below(report) == before  # comparison.md still says 0.750


def test_sgh_compare_never_writes_into_a_runs_encoder(finished, tmp_path, command_here):
    sweep = _sweep(tmp_path)
    out = finished / "encoder"
    result = command_here("compare", [f"sweep={sweep}", f"out={out}"], cwd=tmp_path)
    one_error_line(result, "sgh-compare", f"out={out} is the encoder of the run {finished}, "
                   "whose files no other output may replace")
    assert not out.exists()


def test_a_seed_that_is_not_a_number_is_one_line_naming_the_file_and_key(tmp_path,
                                                                         command_here):
    sweep = _sweep(tmp_path)
    other = sweep / "1_5678abcd"
    other.mkdir()
    (other / "metrics.json").write_text(json.dumps({
        "dataset": "toy", "method": "lsh", "bits": 8, "seed": "1", "recall10@100": 0.4}))
    result = command_here("compare", [f"sweep={sweep}", "tensorboard=false"], cwd=tmp_path)
    one_error_line(result, "sgh-compare", f"{other / 'metrics.json'}: key 'seed' is '1'; expected "
                                     "an integer")


# ---- a sweep's directory -------------------------------------------------------------------------
@pytest.mark.parametrize("name,content", [("multirun.yaml", "lr: 0.1\n"),
                                          ("figure.png", "\x89PNG mine")])
def test_a_sweep_into_a_folder_holding_only_a_users_file_is_refused(tmp_path, command_here,
                                                                    name, content):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / name).write_text(content)
    before = files_below(folder)
    result = command_here("train", ["-m", *BASELINE[:-1], "model=lsh", "model.bits=8,12",
                                    f"hydra.sweep.dir={folder}"], cwd=tmp_path)
    one_error_line(result, "sgh-train", f"hydra.sweep.dir={folder} is not a sweep directory (it "
                                   f"holds {name})")
    assert files_below(folder) == before


def test_an_sgh_sweep_with_its_comparison_still_resumes(tmp_path, command_here):
    sweep = tmp_path / "sweep"
    command = ["-m", *BASELINE[:-1], "model=lsh", "model.bits=8,12", f"hydra.sweep.dir={sweep}"]
    assert command_here("train", command, cwd=tmp_path).returncode == 0
    assert command_here("compare", [f"sweep={sweep}"], cwd=tmp_path).returncode == 0
    # Hydra's multirun.yaml, the jobs, sgh-compare's files: all the sweep's own.
    resumed = command_here("train", command, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]


# ---- a sweep whose jobs share one out= -----------------------------------------------------------
def test_a_sweep_whose_jobs_would_share_one_out_is_refused_before_any_job(finished, tmp_path,
                                                                          command_here):
    codes = finished / "codes.npz"
    copy = tmp_path / "other.npz"
    copy.write_bytes(codes.read_bytes())
    out = tmp_path / "scores.json"
    result = command_here("eval", ["-m", f"codes={codes},{copy}", f"out={out}"], cwd=tmp_path)
    one_error_line(result, "sgh-eval", f"out={out} would be written by more than one job of this "
                                  f"sweep (the jobs with codes={codes} and codes={copy})")
    # Crossed with another swept key, out=a,b still gives one file to two jobs.
    result = command_here("eval", ["-m", f"codes={codes},{copy}",
                                   f"out={tmp_path / 'a.json'},{tmp_path / 'b.json'}"],
                          cwd=tmp_path)
    one_error_line(result, "sgh-eval", "would be written by more than one job of this sweep")
    # Without out=, a re-scored run's jobs all write its eval.json.
    result = command_here("eval", ["-m", f"run={finished}", "eval.radius=1,2"], cwd=tmp_path)
    one_error_line(result, "sgh-eval", f"out={finished / 'eval.json'} would be written by more "
                                  "than one job")
    np.save(tmp_path / "a.npy", np.zeros((3, 4), np.float32))
    np.save(tmp_path / "b.npy", np.zeros((3, 4), np.float32))
    result = command_here("encode", ["-m", f"run={finished}",
                                     f"input={tmp_path / 'a.npy'},{tmp_path / 'b.npy'}",
                                     f"out={tmp_path / 'codes.npy'}"], cwd=tmp_path)
    one_error_line(result, "sgh-encode", "would be written by more than one job of this sweep")
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "a.npy", "b.npy", "other.npz"]  # no output, no multirun/ tree
    assert not (finished / "eval.json").exists()
    # Jobs with outputs of their own run as before.
    assert command_here("eval", ["-m", f"codes={codes},{copy}"], cwd=tmp_path).returncode == 0


def test_one_job_per_out_is_a_sweep_like_any_other(finished, tmp_path, command_here):
    outs = [tmp_path / "a.json", tmp_path / "b.json"]
    result = command_here("eval", ["-m", f"codes={finished / 'codes.npz'}",
                                    f"out={outs[0]},{outs[1]}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert all(json.loads(out.read_text())["bits"] == 12 for out in outs)


# ---- a refused start of sgh-train ----------------------------------------------------------------
def test_a_start_refused_inside_the_run_leaves_no_run_directory(tmp_path, command_here):
    # LSH fits any number of bits; ITQ one bit per principal component: refused once the data
    # are read, after Hydra made the run directory (the default one, runs/...).
    too_many_bits = [*QUICK[:-1], "model=itq", "model.bits=40"]
    result = command_here("train", too_many_bits, cwd=tmp_path)
    one_error_line(result, "sgh-train", "model.bits=40 is more than the 32 features")
    assert list(tmp_path.iterdir()) == []  # no runs/synthetic/itq-40b/<time>/
    # A directory of the user's given for the run stays, as it was: empty.
    empty = tmp_path / "empty"
    empty.mkdir()
    result = command_here("train", [*too_many_bits, f"hydra.run.dir={empty}"], cwd=tmp_path)
    assert result.returncode == 2 and list(empty.iterdir()) == []
