"""The exceptions that mean "the run cannot go on", raised anywhere and reported by `sgh.cli`.

`UserInputError` is the user's mistake: one line that names the file, key or value at fault and
says what is accepted. How each one ends a command: `sgh.cli.boundary`.
"""

import errno
import math
import numbers


class UserInputError(ValueError):
    """Bad input: a missing or malformed file, a wrong key or shape, an impossible setting (a
    `ValueError`, as Python and scikit-learn code expect of a bad argument)."""


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


def first_few(names, shown: int = 3) -> str:
    """`a, b, c, and 4 more`: a list for a one-line message, its first `shown` items named."""
    names = list(names)
    rest = f", and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(str(name) for name in names[:shown]) + rest


def causes(error: BaseException) -> list[BaseException]:
    """The error and what it was raised from or during, innermost last (a bounded walk)."""
    seen = []
    while error is not None and len(seen) < 16 and all(error is not e for e in seen):
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def _limit_text(limit: str) -> str:
    """The soft value of `resource.<limit>`, as `ulimit` states it."""
    try:
        import resource

        soft = resource.getrlimit(getattr(resource, limit))[0]
    except (ImportError, AttributeError, OSError, ValueError):  # no such limit here (Windows)
        return "unknown"
    if soft == resource.RLIM_INFINITY:
        return "unlimited"
    return f"{soft // 1024} KiB" if limit == "RLIMIT_AS" else str(soft)


def resource_limit_line(error: BaseException) -> str | None:
    """One line for a process limit reached anywhere in `error`'s chain (too many open files,
    out of memory or address space), naming the limit and its value; else None."""
    for cause in causes(error):
        code = cause.errno if isinstance(cause, OSError) else None
        # TensorFlow's file system raises tf.errors.* with the text only.
        if code in (errno.EMFILE, errno.ENFILE) or (type(cause).__module__.startswith(
                "tensorflow") and "Too many open files" in str(cause)):
            which = ("the system's limit on open files" if code == errno.ENFILE else "the limit "
                     f"on open files of this process (ulimit -n: {_limit_text('RLIMIT_NOFILE')})")
            return (f"too many open files: {which} was reached; raise it (e.g. ulimit -n 4096 "
                    "in the shell that runs the command) and run the same command again")
        if isinstance(cause, MemoryError) or code == errno.ENOMEM:
            space = _limit_text("RLIMIT_AS")
            what = one_line(cause) if str(cause) else "an allocation failed"
            if space == "unlimited":
                return (f"out of memory ({what}): no address-space limit is set (ulimit -v: "
                        "unlimited), so the machine has too little free memory for it; free "
                        "some, or use less (dataset.streaming=always, a smaller "
                        "trainer.batch_size), and run the same command again")
            return (f"out of memory ({what}): the address-space limit of this process (ulimit "
                    f"-v: {space}) was reached; raise it (e.g. ulimit -v unlimited; TensorFlow "
                    "alone reserves several GiB of address space) and run the same command "
                    "again")
    return None


# The checks of a value: "NAME=VALUE is impossible; accepted: WHAT", NAME a key or an argument.

def check_int(name: str, value: object, minimum: int | None = None,
              maximum: int | None = None, *, maximum_is: str = "") -> int:
    """`value` as an int in [minimum, maximum] (either bound may be None); bools refused.
    `maximum_is` says what the maximum is, for the message ("the database size")."""
    within = (minimum is None or value >= minimum) and (maximum is None or value <= maximum) \
        if isinstance(value, numbers.Integral) and not isinstance(value, bool) else False
    if not within:
        if minimum is not None and maximum is not None:
            bound = f"an integer between {minimum} and {maximum}" + (
                f" ({maximum_is})" if maximum_is else "")
        elif minimum is not None:
            bound = f"an integer >= {minimum}"
        elif maximum is not None:
            bound = f"an integer <= {maximum}"
        else:
            bound = "an integer"
        shown = repr(value) if isinstance(value, str) else one_line(value)
        raise UserInputError(f"{name}={shown} is impossible; accepted: {bound}")
    return int(value)


def check_real(name: str, value: object, low: float = float("-inf"), high: float = float("inf"),
               *, low_open: bool = False) -> float:
    """`value` as a finite float in [low, high] (`(low, high]` with `low_open`); bools refused."""
    number = isinstance(value, numbers.Real) and not isinstance(value, bool) \
        and math.isfinite(value)
    within = number and (value > low if low_open else value >= low) and value <= high
    if not within:
        if math.isfinite(low) and math.isfinite(high):
            bound = (f"a number in ({low:g}, {high:g}]" if low_open
                     else f"a number between {low:g} and {high:g}")
        elif math.isfinite(low):
            bound = f"a number {'>' if low_open else '>='} {low:g}"
        elif math.isfinite(high):
            bound = f"a number <= {high:g}"
        else:
            bound = "a finite number"
        raise UserInputError(f"{name}={value!r} is impossible; accepted: {bound}")
    return float(value)


def check_choice(name: str, value: object, accepted) -> object:
    """`value` if it is one of `accepted` (the owner's tuple of names)."""
    if value not in accepted:
        raise UserInputError(f"{name}={value!r} is not known; accepted: "
                             f"{', '.join(str(choice) for choice in accepted)}")
    return value
