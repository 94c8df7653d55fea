"""Sweeps say what happened: a comparison names the jobs it lacks, a sweep stopped by a failing
job or by Ctrl-C in a job says how to go on."""

import os
import subprocess
import sys
import textwrap

import pytest

from sgh.cli.compare import planned_jobs
from sgh.pipeline import run
from sgh.reports.comparison import compare
from tests.helpers import QUICK, compose_config

BASIC_SWEEP = """\
hydra:
  sweeper:
    _target_: core_plugins.basic_sweeper.BasicSweeper  # the class Hydra records, shortened
  overrides:
    task: [model=itq, "model.bits=4,8,12,16"]
"""


def test_a_comparison_names_the_jobs_without_results_and_how_to_finish_them(tmp_path, caplog):
    for number, bits in ((0, 4), (1, 8)):
        job = tmp_path / f"{number}_job"
        run(compose_config(*QUICK[:-1], "model=itq", f"model.bits={bits}"), job)
        (job / ".hydra").mkdir()
    failed = tmp_path / "2_job"
    (failed / ".hydra").mkdir(parents=True)  # started, then failed: no metrics.json
    (tmp_path / "multirun.yaml").write_text(BASIC_SWEEP)  # 4 jobs planned; job 3 never ran
    assert planned_jobs(tmp_path / "multirun.yaml") == 4
    table, _ = compare(tmp_path, tensorboard=False, planned_jobs=4)
    expected = (f"2 of 4 jobs of the sweep have no results (failed, interrupted or not run: "
                f"{failed}), so the table covers 2; run the sweep's command again with "
                f"hydra.sweep.dir={tmp_path} to finish them")
    assert expected in caplog.text
    assert table.startswith("**Incomplete sweep**: " + expected)
    assert (tmp_path / "comparison.md").read_text().startswith("**Incomplete sweep**")


def _train(*arguments, script=None, cwd):
    command = ([sys.executable, "-c", script] if script else
               [sys.executable, "-m", "sgh.cli.train"])
    return subprocess.run([*command, *arguments], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=600)


@pytest.mark.slow  # a sweep of three jobs through Hydra's launcher, twice
def test_a_sweep_stopped_by_a_failing_job_says_so_and_how_to_resume(tmp_path):
    # Synthetic data has 32 features: ITQ cannot make 40 bits of them (a check on the data,
    # made in the job, not before the sweep).
    arguments = ["-m", *QUICK[:-1], "model=itq", "model.bits=8,40,4",
                 f"hydra.sweep.dir={tmp_path}"]
    stopped = _train(*arguments, cwd=tmp_path)
    assert stopped.returncode == 2 and "Traceback" not in stopped.stderr
    # Job 0, a baseline, has no validated metric; Hydra's basic sweeper reads none either.
    assert "optimized_metric" not in stopped.stderr
    line = stopped.stderr.strip().splitlines()[-1]
    assert line.startswith("sgh-train: error: model.bits=40 is more than the 32 features")
    assert (f"(job 1 of the sweep, {tmp_path}/1_" in line and "the sweep stopped there, its "
            "earlier jobs are finished and kept" in line and line.endswith(
                f"then run the same command with hydra.sweep.dir={tmp_path} to resume the sweep "
                "(its finished jobs are not trained again))"))
    finished = sorted(path.parent.name for path in tmp_path.glob("*/metrics.json"))
    assert [name.split("_")[0] for name in finished] == ["0"]


# sgh-train whose first progress line comes with a SIGINT: a Ctrl-C inside a job's training.
INTERRUPTED_IN_TRAINING = textwrap.dedent("""
    import signal
    import sgh.training.progress as progress
    original = progress.ConsoleProgress.__call__
    def interrupted(self, log):
        signal.raise_signal(signal.SIGINT)
        return original(self, log)
    progress.ConsoleProgress.__call__ = interrupted
    from sgh.cli.train import main
    main()
""")


@pytest.mark.slow
def test_ctrl_c_in_a_sweep_jobs_training_names_the_sweep_to_resume(tmp_path):
    stopped = _train("-m", *QUICK[:-1], "model.bits=8,12", f"hydra.sweep.dir={tmp_path}",
                     script=INTERRUPTED_IN_TRAINING, cwd=tmp_path)
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    line = stopped.stderr.strip().splitlines()[-1]
    assert line.startswith("sgh-train: interrupted at step 20 of 60; checkpoint saved in the job "
                           f"{tmp_path}/0_")
    assert line.endswith(f"run the same command with hydra.sweep.dir={tmp_path} to resume the "
                         "sweep (its finished jobs are not trained again)")
    assert "hydra.run.dir" not in line
