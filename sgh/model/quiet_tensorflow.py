"""Import TensorFlow without its start-up chatter on the user's terminal.

TensorFlow prints C++ INFO lines before TF_CPP_MIN_LOG_LEVEL is honoured: `import_tensorflow()`
holds them back, showing them only if the import fails for another reason than a process limit
(libraries not mapped for lack of memory: a `MemoryError`), and first points XLA's compilation
cache at the user's. `cached_compilation()` and `traced_once_per_model` quiet two more notices.
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
    """Hold back what is written to file descriptor 2 in the block (C++ logs included) into the
    yielded `Captured`, whether it returns or raises (if a temporary file can be made)."""
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
        if not any(words in str(error).lower() for words in _LOADER_OUT_OF_MEMORY):
            sys.stderr.write(captured.text)
            raise
        # A memory or address-space limit (`ulimit -v`), not a broken installation.
        raise MemoryError(f"TensorFlow could not be loaded ({one_line(error)})") from error
    except BaseException as error:
        if not _is_limit(error):  # a limit's line says it all; TensorFlow's chatter would not
            sys.stderr.write(captured.text)
        raise
    finally:
        compile_cache.finish_tidying()  # before any compiled call can load an entry


# glibc's loader's words when it cannot map a library for lack of memory or address space.
_LOADER_OUT_OF_MEMORY = ("failed to map segment from shared object", "cannot allocate memory",
                         "cannot map zero-fill pages", "cannot create shared object descriptor")


def _is_limit(error: BaseException) -> bool:
    """Out of memory, or of file descriptors: a process limit, not a broken installation."""
    return isinstance(error, MemoryError) or (isinstance(error, OSError) and error.errno in (
        errno.ENOMEM, errno.EMFILE, errno.ENFILE))


# Logged on every load of a good cache entry: the text-format parse tried before the binary
# one, and XLA's notice of LLVM tuning features no host lists.
_HARMLESS_WHEN_LOADING = ("Error parsing text-format tensorflow.XlaSerializedCacheEntry",
                          "Target machine feature +prefer-")


@contextlib.contextmanager
def cached_compilation() -> Iterator[None]:
    """Around the call that compiles a step: hold back harmless load errors, seal its entry."""
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


def _not_retraced_per_model(record: logging.LogRecord) -> bool:
    """Hold back the retracing notice of a `traced_once_per_model` function: it counts traces
    across objects, so it would blame a program that fits several models."""
    notice = _RETRACING_NOTICE.search(record.getMessage())
    return notice is None or notice.group(1) not in _TRACED_ONCE_PER_MODEL


def traced_once_per_model(function):
    """Mark a `tf.function` (or its method) that each model or trainer traces once; returns it."""
    _TRACED_ONCE_PER_MODEL.add(getattr(function, "python_function", function).__qualname__)
    # TensorFlow's Python logger; adding the same filter again is a no-op.
    logging.getLogger("tensorflow").addFilter(_not_retraced_per_model)
    return function
