"""What `sgh-encode`, `sgh-eval` and `sgh-compare` share: a Hydra command that writes one
file (one directory: sgh-compare), set by `out`."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial

from sgh.cli.boundary import exit_on_failure
from sgh.cli.hydra_command import run_hydra_command
from sgh.config import flatten_config
from sgh.errors import UserInputError


def writing_out(program: str, out: str | os.PathLike | None, shown: object):
    """`exit_on_failure` for one job writing `out`; `shown` names it in an interruption's line."""
    return exit_on_failure(program, output_key="out", output_path=out,
                           interrupted=f"interrupted; {shown} was not written (or left as it "
                                       "was): run the same command again")


def refuse_a_shared_output(jobs: list, output_of: Callable[[object], str | os.PathLike | None]
                           ) -> None:
    """Refuse a sweep two of whose `jobs` would write the same file (`output_of` a job)."""
    writers: dict[str, object] = {}
    for job in jobs:
        out = output_of(job)
        if out is None:
            continue
        first = writers.setdefault(os.path.realpath(out), job)
        if first is not job:
            one, two = flatten_config(first), flatten_config(job)
            differences = "; ".join(f"{key}={one[key]} and {key}={two[key]}" for key in one
                                    if one[key] != two.get(key)) or "the same settings"
            raise UserInputError(
                f"out={out} would be written by more than one job of this sweep (the jobs "
                f"with {differences}), each replacing the one before, so only the "
                "last result would be kept; accepted: one command per job, each with its own out=")


def run_out_file_command(program: str, config_name: str, job: Callable[[object], object],
                         check_job: Callable[[object], None],
                         output_of: Callable[[object], str | os.PathLike | None],
                         positional: str | None = None) -> None:
    """`run_hydra_command` with `out` as the output setting: `job` runs a typed configuration;
    a sweep's jobs are each checked (`check_job`) before any runs; `positional` as there."""
    def check_sweep(jobs: list, _config) -> None:
        for each in jobs:
            check_job(each)
        refuse_a_shared_output(jobs, output_of)

    run_hydra_command(program, config_name, job, lambda _config, typed: partial(job, typed),
                      check_sweep, output_key="out", positional=positional)
