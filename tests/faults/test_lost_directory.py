"""A run whose directory, or whose `tensorboard/`, is deleted while it trains.

The deletion happens on an event of the run (right after its first checkpoint is saved), never
after a sleep: the run's own periodic-checkpoint step is wrapped to delete, once, after saving.
"""

import shutil

import pytest

from sgh.errors import UserInputError
from sgh.pipeline import run
from sgh.training import progress
from tests.cli import conftest as cli_commands
from tests.helpers import QUICK, compose_config

command_here = cli_commands.command_here

# 60 steps, a compiled call and a checkpoint every 20: the deletion follows step 20's checkpoint,
# and steps 40 and 60 still have records to write.
ARGS = [*QUICK, "trainer.checkpoint_every=20", "trainer.jit_compile=false"]


@pytest.fixture
def delete_after_the_first_checkpoint(monkeypatch):
    """Make the run delete `path` (a function of nothing, read when it is time) once, right
    after it saved its first periodic checkpoint."""
    deleted = []

    def arrange(path):
        save = progress.PeriodicCheckpoints.__call__

        def save_then_delete(self, log):
            save(self, log)
            if self.last_saved is not None and not deleted:
                shutil.rmtree(path())
                deleted.append(log.step)

        monkeypatch.setattr(progress.PeriodicCheckpoints, "__call__", save_then_delete)
        return deleted

    return arrange


def test_a_run_directory_deleted_while_training_stops_the_run_and_is_not_made_again(
        tmp_path, delete_after_the_first_checkpoint):
    run_dir = tmp_path / "run"
    deleted = delete_after_the_first_checkpoint(lambda: run_dir)
    with pytest.raises(UserInputError, match=rf"^the run directory {run_dir} was deleted while "
                                             "the run was writing it .*; run the command again "
                                             "to train it anew$"):
        run(compose_config(*ARGS), run_dir)
    assert deleted == [20]
    assert not run_dir.exists()  # no config-less run made again by the checkpoints or events


def test_sgh_train_says_so_in_one_line_with_exit_status_2(tmp_path, command_here,
                                                           delete_after_the_first_checkpoint):
    run_dir = tmp_path / "run"
    delete_after_the_first_checkpoint(lambda: run_dir)
    result = command_here("train", [*ARGS, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert errors == [f"sgh-train: error: the run directory {run_dir} was deleted while the run "
                      "was writing it (its config.yaml, inputs.json, train.log and checkpoints "
                      "with it); the run stops here rather than leave a run without them; run "
                      "the command again to train it anew"]
    assert "Traceback" not in result.stderr and not run_dir.exists()


def test_a_deleted_tensorboard_folder_is_made_again_and_the_loss_said(
        tmp_path, caplog, delete_after_the_first_checkpoint):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    run_dir = tmp_path / "run"
    delete_after_the_first_checkpoint(lambda: run_dir / "tensorboard")
    metrics = run(compose_config(*ARGS), run_dir)
    assert metrics["steps"] == 60
    lost = [record.getMessage() for record in caplog.records if "was deleted" in record.message]
    assert len(lost) == 1 and lost[0].startswith(f"{run_dir / 'tensorboard'}/events.out.")
    assert "curves before step 40 went with it; recording goes on from step 40" in lost[0]
    steps = {event.step for path in (run_dir / "tensorboard").glob("events.out.tfevents.*")
             for event in EventFileLoader(str(path)).Load()
             if any(value.tag == "train/learning_rate" for value in event.summary.value)}
    assert steps == {40, 60}  # step 20's went with the folder; the rest is recorded
