"""The run directory knows every file name; reading one that is not a run is one clear line."""

import numpy as np
import pytest

from sgh.artifacts.codes_file import load_codes
from sgh.artifacts.run_directory import RunDirectory
from sgh.config import Config, ModelConfig, SyntheticDatasetConfig
from sgh.errors import UserInputError


def test_names_of_everything_a_run_writes(tmp_path):
    run = RunDirectory(tmp_path / "run")
    assert run.path.is_dir()
    assert {path.relative_to(run.path).as_posix() for path in (
        run.config_file, run.codes, run.metrics, run.eval_file, run.tensorboard,
        run.checkpoints, run.best_checkpoints, run.encoder)} == {
        "config.yaml", "codes.npz", "metrics.json", "eval.json", "tensorboard",
        "checkpoints", "checkpoints/best", "encoder"}


def test_config_and_codes_round_trip(tmp_path):
    run = RunDirectory(tmp_path)
    assert run.previous_config() is None and not run.has_checkpoint()
    run.write_config(Config(dataset=SyntheticDatasetConfig(), model=ModelConfig(bits=8)))
    assert run.previous_config()["model"]["bits"] == 8 and run.model_section()["name"] == "sgh"
    codes = np.packbits(np.eye(8, dtype=np.uint8), axis=1)
    run.write_codes(database=codes, query=codes[:2], bits=np.int64(8),
                    database_labels=np.arange(8), query_labels=np.arange(2))
    saved = load_codes(run.codes)
    assert saved.bits == 8 and saved.has_labels
    np.testing.assert_array_equal(saved.database, codes)


def test_an_existing_run_must_be_one(tmp_path):
    with pytest.raises(UserInputError, match=rf"run={tmp_path}: no config.yaml there; expected "
                                             "an sgh-train run directory"):
        RunDirectory.existing(tmp_path)
    RunDirectory(tmp_path, create=False).write_config(
        Config(dataset=SyntheticDatasetConfig(), model=ModelConfig()))
    with pytest.raises(UserInputError, match="has not finished"):
        RunDirectory.existing(tmp_path).read_metrics()


def test_opening_for_reading_creates_nothing(tmp_path):
    RunDirectory(tmp_path / "nowhere", create=False)
    assert not (tmp_path / "nowhere").exists()
