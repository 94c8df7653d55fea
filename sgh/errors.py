"""The one exception type that means "the user gave us something we cannot use".

Anything raised as `UserInputError` is reported by the command-line entry points as a single
line (no traceback) with exit status 2; every other exception is a bug and keeps its traceback.
The message must name the file, key or value at fault and say what is accepted.
"""

import sys
from contextlib import contextmanager

USAGE_ERROR_EXIT_CODE = 2


class UserInputError(Exception):
    """Bad input: a missing or malformed file, a wrong key or shape, an impossible setting."""


@contextmanager
def exit_on_user_error(program: str):
    """The command-line boundary: a `UserInputError` becomes one line on stderr and exit 2."""
    try:
        yield
    except UserInputError as error:
        print(f"{program}: error: {error}", file=sys.stderr)
        sys.exit(USAGE_ERROR_EXIT_CODE)
