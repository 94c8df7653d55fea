"""`sgh-compare sweep=SWEEP_DIR [out=DIR] [tensorboard=false]`: the comparison of a sweep's runs.

Every `metrics.json` below SWEEP_DIR, in tables, plots and TensorBoard (`sgh.reports.comparison`).
"""

from __future__ import annotations

import errno
import math
import os
import sys
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from sgh.cli.boundary import exit_on_failure
from sgh.cli.out_file_command import run_out_file_command
from sgh.config import CompareCommandConfig
from sgh.errors import UserInputError
from sgh.reports.comparison import compare

USAGE = "usage: sgh-compare sweep=SWEEP_DIR [out=DIR] [tensorboard=false]"
# Flags a user may type out of habit, which Hydra's parser would call unrecognized arguments
# without naming the key that does the same.
FLAG_KEYS = {"--out": "out=DIR", "--no-tensorboard": "tensorboard=false"}


def _check_arguments(config: CompareCommandConfig) -> None:
    if config.sweep is None:
        raise UserInputError(f"sweep= is missing; {USAGE}")


def _compare(config: CompareCommandConfig) -> None:
    # Here, or `run_job` prints its own; a disk error names out=, else the sweep it writes into.
    with exit_on_failure("sgh-compare", output_key="out", output_path=config.out or config.sweep):
        _check_arguments(config)
        sweep, out = config.sweep, config.out
        # Before reading and plotting every run: access() answers for read-only mounts too.
        if out is None and Path(sweep).is_dir() and not os.access(sweep, os.W_OK | os.X_OK):
            raise _read_only(sweep, "not writable (read-only or permission denied)")
        try:
            table, paths = compare(sweep, out, tensorboard=config.tensorboard,
                                   planned_jobs=planned_jobs(Path(sweep) / "multirun.yaml"))
        except OSError as error:
            if out is None and error.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise _read_only(sweep, f"{os.strerror(error.errno).lower()} "
                                        f"({error.filename or sweep})") from None
            raise
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
                          "pass out=DIR to write it elsewhere")


def main() -> None:
    with exit_on_failure("sgh-compare"):
        for flag in (argument.split("=")[0] for argument in sys.argv[1:]):
            if flag in FLAG_KEYS:
                raise UserInputError(f"{flag} is not an option; write {FLAG_KEYS[flag]}")
    # A sweep's jobs writing into one directory are refused, as sgh-encode's sharing one out=.
    run_out_file_command("sgh-compare", "compare", _compare, _check_arguments,
                         lambda job: job.out or job.sweep, positional="sweep")


if __name__ == "__main__":
    main()
