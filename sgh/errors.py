"""The one exception type that means "the user gave us something we cannot use".

Anything raised as `UserInputError` is reported by the command-line entry points as a single
line (no traceback) with exit status 2; every other exception is a bug and keeps its traceback.
The message must name the file, key or value at fault and say what is accepted.
"""

USAGE_ERROR_EXIT_CODE = 2


class UserInputError(Exception):
    """Bad input: a missing or malformed file, a wrong key or shape, an impossible setting."""
