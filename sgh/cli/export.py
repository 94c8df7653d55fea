"""`sgh-export RUN_DIR`: export the encoder of a finished run that has none yet.

Runs trained before training exported its encoder (or whose `encoder/` was deleted) get
`<run_dir>/encoder/` rebuilt from `config.yaml` and the checkpoint that made `codes.npz` (read
back whole first; damaged best weights come from the training checkpoint of the same step). It
owns the run directory meanwhile, so it is refused while sgh-train writes there.
"""

from __future__ import annotations

import sys

from sgh.cli.boundary import exit_on_user_error
from sgh.errors import UserInputError
from sgh.quiet_tensorflow import import_tensorflow


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    with exit_on_user_error("sgh-export"):
        if len(argv) != 1 or argv[0].startswith("-"):
            raise UserInputError("usage: sgh-export RUN_DIR (a finished sgh-train run)")
        import_tensorflow()
        from sgh.model.export import export_run

        print(f"[sgh] exported {export_run(argv[0])}")


if __name__ == "__main__":
    main()
