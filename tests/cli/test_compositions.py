"""A run's configuration crosses the Hydra boundary once: composed once, converted once to the
typed dataclasses, validated once (`sgh.cli.hydra_command`). Counted where every composition
goes, Hydra's Compose API's and `@hydra.main`'s alike: its config loader's `load_configuration`."""

from __future__ import annotations

from collections import Counter

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from sgh.cli.schemas import CONFIG_PATH
from sgh.config import Config
from tests.helpers import QUICK


@pytest.fixture
def crossings(monkeypatch):
    """Counts of the compositions, of the conversions to a `Config` and of its validations."""
    counts = Counter()

    def counted(name, function, when=lambda *args: True):
        def wrapper(*args, **kwargs):
            counts[name] += when(*args)
            return function(*args, **kwargs)
        return wrapper

    # Hydra's config loader, found through its public API: `load_configuration` is its public
    # interface's (`hydra.core.config_loader.ConfigLoader`), which every composition goes through.
    with initialize_config_dir(config_dir=CONFIG_PATH, version_base="1.3"):
        loader = type(GlobalHydra.instance().config_loader())
    monkeypatch.setattr(loader, "load_configuration",
                        counted("composed", loader.load_configuration))
    monkeypatch.setattr(OmegaConf, "to_object", counted(
        "converted", OmegaConf.to_object, lambda config: OmegaConf.get_type(config) is Config))
    import sgh.cli.train
    import sgh.pipeline

    for module in (sgh.pipeline, sgh.cli.train):
        monkeypatch.setattr(module, "validate", counted("validated", module.validate))
    return counts


def test_a_run_is_composed_converted_and_validated_once(tmp_path, command_here, crossings):
    result = command_here("train", [*QUICK, "model=lsh", f"hydra.run.dir={tmp_path / 'run'}"],
                          cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "run" / "metrics.json").is_file()
    assert crossings == {"composed": 1, "converted": 1, "validated": 1}


def test_a_sweep_composes_each_job_once_before_hydra(tmp_path, command_here, crossings):
    # Each job once here, before the sweep's directory is made (its values checked too), then
    # twice by Hydra's basic sweeper (its check of the batch, and the launch); and Hydra
    # composes the sweep's own configuration twice (`get_mode`, then `multirun`).
    result = command_here("train", ["-m", *QUICK, "model=lsh", "model.bits=8,12",
                                    f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(list((tmp_path / "sweep").glob("*/metrics.json"))) == 2
    assert crossings["composed"] <= 2 + 3 * 2
    assert crossings["converted"] == crossings["validated"] == 2 * 2  # checked, then run


class Recorder:
    """A user's Hydra callback: the events of a run it is told, in order."""

    events: list = []

    def on_run_start(self, config, **kwargs):
        Recorder.events.append("run start")

    def on_job_start(self, config, task_function, **kwargs):
        Recorder.events.append("job start")

    def on_job_end(self, config, job_return, **kwargs):
        Recorder.events.append(f"job end {job_return.status.name}")

    def on_run_end(self, config, **kwargs):
        Recorder.events.append("run end")


def test_a_runs_hydra_callbacks_are_told_of_the_run_and_its_job(tmp_path, command_here):
    Recorder.events.clear()
    result = command_here("train", [*QUICK, "model=lsh", f"hydra.run.dir={tmp_path / 'run'}",
                                    f"+hydra.callbacks.record._target_={__name__}.Recorder"],
                          cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert Recorder.events == ["run start", "job start", "job end COMPLETED", "run end"]


def test_version_is_hydras_and_runs_nothing(tmp_path, command_here):
    import hydra

    result = command_here("train", ["--version"], cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == f"Hydra {hydra.__version__}"
    assert list(tmp_path.iterdir()) == []
