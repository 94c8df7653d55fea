"""Import TensorFlow without its start-up chatter on the user's terminal.

TensorFlow >= 2.16 prints C++ INFO lines (oneDNN notice, missing CUDA drivers) before absl
logging is initialised, where TF_CPP_MIN_LOG_LEVEL is not yet honoured, and device discovery
logs a failed CUDA initialisation on machines without a GPU. Entry points call
`import_tensorflow()` first; the lines are captured (`captured_stderr`) and shown only if the
import fails for another reason than a process limit: a library the loader could not map
for lack of memory or address space (`ulimit -v`) is raised as a `MemoryError`, which the
command line reports in one line (`sgh.cli.boundary`). It also points XLA's compilation cache
at the user's cache (`sgh.artifacts.compile_cache`), which must be set before TensorFlow starts;
loading from that cache logs two harmless errors, which `cached_compilation()` holds back.
Every model traces its own compiled functions once; `traced_once_per_model` marks them, so that
TensorFlow's notice of "frequent retracing" is not shown when a program fits several models.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator

from sgh.artifacts import compile_cache
from sgh.errors import one_line


class Captured:
    """What `captured_stderr` held back: `text`, complete once its block has ended."""

    text = ""


@contextlib.contextmanager
def captured_stderr() -> Iterator[Captured]:
    """Everything written to file descriptor 2 during the block (TensorFlow's C++ logs
    included) is kept from the terminal and handed over in the yielded `Captured`, whether the
    block returns or raises; the caller decides what of it to show. Where no temporary file
    can be made, nothing is captured: the messages reach the terminal as usual."""
    held = Captured()
    try:
        file = tempfile.TemporaryFile()
    except OSError:
        yield held
        return
    with file:
        try:
            saved = os.dup(2)
        except OSError:  # no descriptor 2 at all (a daemon's closed one): nothing to hold
            yield held
            return
        sys.stderr.flush()
        os.dup2(file.fileno(), 2)
        try:
            yield held
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            file.seek(0)
            held.text = file.read().decode(errors="replace")


def import_tensorflow() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # honoured once absl is initialised
    if "tensorflow" in sys.modules:
        return
    compile_cache.enable()  # checks the cache's entries in a thread meanwhile
    captured = Captured()
    try:
        with captured_stderr() as captured:
            import tensorflow

            tensorflow.config.list_physical_devices()
    except ImportError as error:
        if not _lacks_memory(error):
            sys.stderr.write(captured.text)
            raise
        # The loader could not map TensorFlow's libraries: a memory or address-space limit
        # (`ulimit -v`), not a broken installation. A MemoryError says so, and the command line
        # reports it as one line naming the limit (`sgh.cli.boundary`).
        raise MemoryError(f"TensorFlow could not be loaded ({one_line(error)})") from error
    except BaseException as error:
        if not _is_limit(error):  # a limit's line says it all; TensorFlow's chatter would not
            sys.stderr.write(captured.text)
        raise
    finally:
        compile_cache.finish_tidying()  # before any compiled call can load an entry


# What the dynamic loader says when it cannot map a library for lack of memory or address
# space (glibc's messages).
_LOADER_OUT_OF_MEMORY = ("failed to map segment from shared object", "cannot allocate memory",
                         "cannot map zero-fill pages", "cannot create shared object descriptor")


def _lacks_memory(error: ImportError) -> bool:
    text = str(error).lower()
    return any(words in text for words in _LOADER_OUT_OF_MEMORY)


def _is_limit(error: BaseException) -> bool:
    """Out of memory, or of file descriptors: a process limit, not a broken installation."""
    return isinstance(error, MemoryError) or (isinstance(error, OSError) and error.errno in (
        errno.ENOMEM, errno.EMFILE, errno.ENFILE))


# What TensorFlow logs on every load of a good compiled-step entry: its text-format parse,
# tried before the binary one, and XLA's notice of LLVM's tuning features, which no host lists.
_HARMLESS_WHEN_LOADING = ("Error parsing text-format tensorflow.XlaSerializedCacheEntry",
                          "Target machine feature +prefer-")


@contextlib.contextmanager
def cached_compilation() -> Iterator[None]:
    """Around the call that compiles a step, or loads it from the compiled-step cache:
    TensorFlow's harmless load-time errors are held back (every other line written to the
    process's stderr meanwhile is passed on after the call, whether it returned or raised), and
    once the call has returned, the entry it wrote is sealed (`compile_cache.seal`)."""
    if not compile_cache.enabled():
        yield
        return
    try:
        with captured_stderr() as captured:
            yield
    finally:
        sys.stderr.write("".join(line for line in captured.text.splitlines(keepends=True)
                                 if not any(text in line for text in _HARMLESS_WHEN_LOADING)))
        sys.stderr.flush()
    compile_cache.seal()


# TensorFlow's notice, logged when 5 of a Python function's recent calls traced it: "N out of the
# last M calls to <function SGH.encode_bits at 0x...> triggered tf.function retracing ...".
_RETRACING_NOTICE = re.compile(r"calls to <(?:function|bound method) ([\w.]+)[ >].*"
                               r"triggered tf\.function retracing")
_TRACED_ONCE_PER_MODEL: set[str] = set()


class _PerModelTracing(logging.Filter):
    """Holds back TensorFlow's retracing notice about a function marked `traced_once_per_model`:
    the notice counts traces per Python function, across objects, and blames the caller
    ("creating @tf.function repeatedly in a loop"); a program that fits several models (a sweep
    of code lengths, scikit-learn's checks) traces each model's functions once, as it must.
    The notice about any other function passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        notice = _RETRACING_NOTICE.search(record.getMessage())
        return notice is None or notice.group(1) not in _TRACED_ONCE_PER_MODEL


_PER_MODEL_TRACING = _PerModelTracing()


def traced_once_per_model(function):
    """Mark a `tf.function` (or the method it wraps) that each model or trainer object traces
    once, on its first call; returns `function`."""
    python_function = getattr(function, "python_function", function)
    _TRACED_ONCE_PER_MODEL.add(python_function.__qualname__)
    # TensorFlow's Python logger; adding the same filter again is a no-op.
    logging.getLogger("tensorflow").addFilter(_PER_MODEL_TRACING)
    return function
