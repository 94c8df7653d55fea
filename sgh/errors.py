"""The exceptions that mean "the run cannot go on", raised anywhere and reported by `sgh.cli`.

`UserInputError` is the user's mistake: the command line reports it as a single line (no
traceback) with exit status 2. Its message must name the file, key or value at fault and say
what is accepted. Every other exception is a bug and keeps its traceback.
"""


class UserInputError(ValueError):
    """Bad input: a missing or malformed file, a wrong key or shape, an impossible setting.

    A `ValueError`, as Python and scikit-learn code expect of a bad argument."""


class TrainingInterrupted(Exception):
    """SIGINT/SIGTERM arrived; the run saved a checkpoint and can be resumed."""


class TrainingDiverged(Exception):
    """The loss became NaN/Inf; the message says where and what to change."""


def one_line(value: object, limit: int = 200) -> str:
    """`value` as text on one line, for messages that must stay one line: an exception's text,
    or an array by its shape and dtype (its repr spans lines)."""
    shape = getattr(value, "shape", None)
    if shape is not None and shape != ():
        return f"an array of shape {shape} and dtype {value.dtype}"
    text = " ".join(str(value.item() if shape == () else value).split()) or type(value).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
