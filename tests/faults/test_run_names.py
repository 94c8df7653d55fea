"""Run directories of their own: named by the recipe, never shared by two commands.

Two commands started in the same second used to share `runs/<dataset>/<method>-<bits>b/<time>`:
one was refused, after Hydra had written its overrides into the other's `.hydra/`. The clock is
held still here, so that "the same second" is certain, not a matter of luck.
"""

from datetime import datetime

import pytest
from omegaconf import OmegaConf

from sgh.cli import train
from tests.cli import conftest as cli_commands
from tests.helpers import QUICK

command_here = cli_commands.command_here
SECOND = "2026-12-01_11-19-03"


class _StoppedClock(datetime):
    @classmethod
    def now(cls, tz=None):
        return datetime(2026, 12, 1, 11, 19, 3, tzinfo=tz)


@pytest.fixture
def same_second(monkeypatch):
    monkeypatch.setattr(train, "datetime", _StoppedClock)


def _overrides(run_dir):
    return OmegaConf.load(run_dir / ".hydra" / "overrides.yaml")


def test_two_runs_started_in_the_same_second_get_two_directories(tmp_path, command_here,
                                                                  same_second):
    for seed in (1, 2):
        result = command_here("train", [*QUICK, "model=lsh", f"trainer.seed={seed}"],
                              cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
    method = tmp_path / "runs" / "synthetic" / "lsh-12b"
    assert sorted(path.name for path in method.iterdir()) == [SECOND, f"{SECOND}_2"]
    for name, seed in ((SECOND, 1), (f"{SECOND}_2", 2)):
        assert f"trainer.seed={seed}" in _overrides(method / name)
        assert OmegaConf.load(method / name / "config.yaml").trainer.seed == seed
    # A command refused once the data are read leaves no third directory behind.
    refused = command_here("train", [*QUICK, "model=itq", "model.bits=40"], cwd=tmp_path)
    assert refused.returncode == 2
    assert sorted(path.name for path in (tmp_path / "runs" / "synthetic").iterdir()) == [
        "lsh-12b"]


def test_a_run_directory_names_its_experiment(tmp_path, command_here, same_second):
    result = command_here("train", [*QUICK, "model=lsh", "experiment=fast"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "runs" / "synthetic" / "lsh-fast-12b" / SECOND / "metrics.json").is_file()


def test_two_sweeps_started_in_the_same_second_get_two_directories(tmp_path, command_here,
                                                                    same_second):
    for _ in range(2):
        result = command_here("train", ["-m", *QUICK, "model=lsh", "model.bits=8,12"],
                              cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(path.name for path in (tmp_path / "multirun").iterdir()) == [
        SECOND, f"{SECOND}_2"]
