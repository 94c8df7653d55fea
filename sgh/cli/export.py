"""`sgh-export run=RUN_DIR`: export the encoder of a finished run that has none
(`<run_dir>/encoder/`, rebuilt from `config.yaml` and the checkpoint that made `codes.npz`)."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from sgh.artifacts.run_directory import RunDirectory
from sgh.artifacts.run_lock import refuse_a_run_being_written, run_lock
from sgh.cli.boundary import exit_on_failure
from sgh.cli.hydra_command import run_hydra_command
from sgh.config import ExportCommandConfig
from sgh.errors import UserInputError
from sgh.model.quiet_tensorflow import import_tensorflow


def export_run(run_dir: str | os.PathLike) -> Path:
    """Export a finished run's encoder to `<run_dir>/encoder`, owning the directory meanwhile
    (refused while sgh-train writes it)."""
    from sgh.model.export import export_encoder, restore_run_model  # TensorFlow

    run = RunDirectory(run_dir, create=False)
    if not run.metrics.is_file():  # sgh-train writes it last
        refuse_a_run_being_written(run.path, run.metrics.name)
    angular = run.read_metrics().get("similarity") == "angular"
    with run_lock(run.path, program="sgh-export",
                  if_busy="wait for it to finish, then export again",
                  if_read_only="make it writable to export into it"):
        run.remove_stray_temporaries()  # e.g. a killed export's half SavedModel
        return export_encoder(restore_run_model(run_dir), run.encoder, unit_normalise=angular)


def _export(config: ExportCommandConfig) -> None:
    with exit_on_failure("sgh-export"):  # here, or Hydra's `run_job` prints a line of its own
        if config.run is None:
            raise UserInputError("run= is missing; usage: sgh-export run=RUN_DIR (a finished "
                                 "sgh-train run)")
        import_tensorflow()
        print(f"[sgh] exported {export_run(config.run)}")


def main() -> None:
    # A sweep's jobs need no check before the first: all of them have run=, or none has.
    run_hydra_command("sgh-export", "export", _export, lambda _config, typed: partial(
        _export, typed), lambda _jobs, _config: None, positional="run")


if __name__ == "__main__":
    main()
