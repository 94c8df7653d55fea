"""`sgh-export RUN_DIR`: export the encoder of a finished run that has none (`<run_dir>/encoder/`,
rebuilt from `config.yaml` and the checkpoint that made `codes.npz`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sgh.artifacts.run_directory import RunDirectory
from sgh.artifacts.run_lock import refuse_a_run_being_written, run_lock
from sgh.cli.boundary import exit_on_failure, print_help
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


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--help"], ["-h"]):
        print_help("sgh-export: write the SavedModel encoder of a finished run that has none",
                   "usage: sgh-export RUN_DIR", "guide/export.md")
        return
    with exit_on_failure("sgh-export"):
        if len(argv) != 1 or argv[0].startswith("-"):
            raise UserInputError("usage: sgh-export RUN_DIR (a finished sgh-train run)")
        import_tensorflow()
        print(f"[sgh] exported {export_run(argv[0])}")


if __name__ == "__main__":
    main()
