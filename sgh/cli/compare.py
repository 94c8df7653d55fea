"""`sgh-compare SWEEP_DIR [--out DIR] [--no-tensorboard]`: the comparison of a sweep's runs.

Every `metrics.json` below SWEEP_DIR, in tables, plots and TensorBoard (`sgh.reports.comparison`).
"""

from __future__ import annotations

import argparse
import errno
import logging
import math
import os
import sys
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from sgh.artifacts.output_places import disk_error_line
from sgh.cli.boundary import exit_on_failure
from sgh.cli.logs import ConsoleFormatter
from sgh.errors import UserInputError
from sgh.reports.comparison import compare

USAGE = "usage: sgh-compare SWEEP_DIR [--out DIR] [--no-tensorboard]"


class _OneLineParser(argparse.ArgumentParser):
    """argparse's errors as one line (it prints the usage, then the error, and exits 2)."""

    def error(self, message: str):
        raise UserInputError(f"{message}; {USAGE}")


def main(argv: list[str] | None = None) -> None:
    with exit_on_failure("sgh-compare", output_key="--out"):
        parser = _OneLineParser(prog="sgh-compare", description=__doc__.splitlines()[0])
        parser.add_argument("sweep_dir", help="an sgh-train sweep directory (searched recursively)")
        parser.add_argument("--out", help="where to write the results (default: SWEEP_DIR)")
        parser.add_argument("--no-tensorboard", action="store_true",
                            help="skip the TensorBoard images (and the TensorFlow import)")
        args = parser.parse_args(argv)
        # Before reading and plotting every run: access() answers for read-only mounts too.
        if args.out is None and Path(args.sweep_dir).is_dir() and not os.access(
                args.sweep_dir, os.W_OK | os.X_OK):
            raise _read_only(args.sweep_dir, "not writable (read-only or permission denied)")
        # The library's warnings (repeated seeds, a missing PR curve) as "sgh-compare: warning:".
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(ConsoleFormatter("sgh-compare"))
        handler.setLevel(logging.WARNING)
        logging.getLogger("sgh").addHandler(handler)
        logging.getLogger("sgh").setLevel(logging.INFO)
        try:
            planned = planned_jobs(Path(args.sweep_dir) / "multirun.yaml")
            table, paths = compare(args.sweep_dir, args.out, tensorboard=not args.no_tensorboard,
                                   planned_jobs=planned)
        except OSError as error:
            if args.out is None and error.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise _read_only(args.sweep_dir, f"{os.strerror(error.errno).lower()} "
                                                 f"({error.filename or args.sweep_dir})") from None
            line = disk_error_line(error, "--out", args.out or args.sweep_dir)
            if line is None:
                raise
            raise UserInputError(line) from None
        finally:
            logging.getLogger("sgh").removeHandler(handler)
        print(table)
        for path in paths:
            print(f"[sgh] wrote {path}")


def planned_jobs(multirun: Path) -> int | None:
    """How many jobs a basic sweeper's sweep has, from its `multirun.yaml`; else None (an Optuna
    search, or no readable record)."""
    if not multirun.is_file():
        return None
    try:
        recorded = OmegaConf.load(multirun)
        if not str(OmegaConf.select(recorded, "hydra.sweeper._target_", default="")).endswith(
                "BasicSweeper"):
            return None
        overrides = OverridesParser.create().parse_overrides(
            list(OmegaConf.select(recorded, "hydra.overrides.task", default=[])))
        return math.prod(len(list(override.sweep_string_iterator()))
                         for override in overrides if override.is_sweep_override())
    except Exception:  # noqa: BLE001  an unreadable record counts no jobs, and refuses none
        return None


def _read_only(sweep_dir: str, reason: str) -> UserInputError:
    return UserInputError(f"{sweep_dir}: {reason}, so the comparison cannot be written there; "
                          "pass --out DIR to write it elsewhere")


if __name__ == "__main__":
    main()
