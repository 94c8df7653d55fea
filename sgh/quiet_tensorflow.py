"""Import TensorFlow without its start-up chatter on the user's terminal.

TensorFlow >= 2.16 prints C++ INFO lines (oneDNN notice, missing CUDA drivers) before absl
logging is initialised, where TF_CPP_MIN_LOG_LEVEL is not yet honoured, and device discovery
logs a failed CUDA initialisation on machines without a GPU. Entry points call
`import_tensorflow()` first; the lines are captured (`captured_stderr`) and shown only if the
import fails. It also points XLA's compilation cache at the user's cache
(`sgh.artifacts.compile_cache`), which must be set before TensorFlow starts; loading from that
cache logs two harmless errors, which `cached_compilation()` holds back.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

from sgh.artifacts import compile_cache


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
    try:
        with captured_stderr() as captured:
            import tensorflow

            tensorflow.config.list_physical_devices()
    except BaseException:
        sys.stderr.write(captured.text)
        raise
    finally:
        compile_cache.finish_tidying()  # before any compiled call can load an entry


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
