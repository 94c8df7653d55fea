"""The one exception type that means "the user gave us something we cannot use".

Anything raised as `UserInputError` is reported by the command-line entry points as a single
line (no traceback) with exit status 2; every other exception is a bug and keeps its traceback.
The message must name the file, key or value at fault and say what is accepted.
"""

import os
import sys
import traceback
from contextlib import contextmanager

USAGE_ERROR_EXIT_CODE = 2


class UserInputError(Exception):
    """Bad input: a missing or malformed file, a wrong key or shape, an impossible setting."""


class TrainingInterrupted(Exception):
    """SIGINT/SIGTERM arrived; the run saved a checkpoint and can be resumed."""


class TrainingDiverged(Exception):
    """The loss became NaN/Inf; the message says where and what to change."""


def debug_requested() -> bool:
    """`SGH_DEBUG=1` (any value but empty or 0): show the traceback of a user error too."""
    return os.environ.get("SGH_DEBUG", "") not in ("", "0")


@contextmanager
def exit_on_user_error(program: str):
    """The command-line boundary: a `UserInputError` becomes one line on stderr and exit 2."""
    try:
        yield
    except UserInputError as error:
        if debug_requested():
            traceback.print_exc()
        print(f"{program}: error: {error}", file=sys.stderr)
        sys.exit(USAGE_ERROR_EXIT_CODE)
