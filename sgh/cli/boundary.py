"""The command-line boundary: how errors become one line on stderr and an exit status.

    0    success
    2    bad input (`UserInputError`): one line naming the file, key or value, and what is accepted
    3    training diverged (`TrainingDiverged`): the step and what to change
    130  interrupted (`TrainingInterrupted`, as for Ctrl-C in a shell): a checkpoint was saved

`SGH_DEBUG=1` (any value but empty or 0) prints the traceback of a user error too.
"""

from __future__ import annotations

import os
import sys
import traceback
from contextlib import contextmanager

from sgh.errors import TrainingDiverged, TrainingInterrupted, UserInputError

USAGE_ERROR_EXIT_CODE = 2
DIVERGED_EXIT_CODE = 3
INTERRUPTED_EXIT_CODE = 130


def debug_requested() -> bool:
    return os.environ.get("SGH_DEBUG", "") not in ("", "0")


@contextmanager
def exit_on_user_error(program: str):
    """A `UserInputError` inside the block becomes one line on stderr and exit status 2."""
    try:
        yield
    except UserInputError as error:
        if debug_requested():
            traceback.print_exc()
        print(f"{program}: error: {error}", file=sys.stderr)
        sys.exit(USAGE_ERROR_EXIT_CODE)


@contextmanager
def exit_on_failure(program: str):
    """`exit_on_user_error`, plus a diverged (3) or interrupted (130) training run."""
    try:
        with exit_on_user_error(program):
            yield
    except TrainingDiverged as divergence:
        print(f"{program}: error: {divergence}", file=sys.stderr)
        sys.exit(DIVERGED_EXIT_CODE)
    except TrainingInterrupted as interruption:
        print(f"{program}: {interruption}", file=sys.stderr)
        sys.exit(INTERRUPTED_EXIT_CODE)
