"""What `sgh-encode` and `sgh-eval` share: a Hydra command that writes one file, set by `out`."""

from __future__ import annotations

import os
from collections.abc import Callable

from sgh.cli.boundary import exit_on_failure
from sgh.cli.hydra_command import run_hydra_command


def writing_out(program: str, out: str | os.PathLike | None, shown: object):
    """The boundary (`exit_on_failure`) of one job writing `out`; `shown`: how the line of an
    interruption names what was not written."""
    return exit_on_failure(program, output_key="out", output_path=out,
                           interrupted=f"interrupted; {shown} was not written (or left as it "
                                       "was): run the same command again")


def run_out_file_command(program: str, config_name: str, hydra_main: Callable[[], object],
                         check_job: Callable[[object], None]) -> None:
    """`run_hydra_command` with `out` as the output setting, `check_job` run on every composed
    job (each job of a sweep) before any runs."""
    run_hydra_command(program, config_name, hydra_main, output_key="out",
                      check=lambda composed: [check_job(job) for job in composed.jobs])
