"""Import TensorFlow without its start-up chatter on the user's terminal.

TensorFlow >= 2.16 prints C++ INFO lines (oneDNN notice, missing CUDA drivers) before absl
logging is initialised, where TF_CPP_MIN_LOG_LEVEL is not yet honoured, and device discovery
logs a failed CUDA initialisation on machines without a GPU. Entry points call
`import_tensorflow()` first; the lines are captured and shown only if the import fails. It
also points XLA's compilation cache at the user's cache (`sgh.artifacts.compile_cache`),
which must be set before TensorFlow starts.
"""

from __future__ import annotations

import os
import sys
import tempfile


def import_tensorflow() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # honoured once absl is initialised
    if "tensorflow" in sys.modules:
        return
    from sgh.artifacts import compile_cache

    compile_cache.enable()
    sys.stderr.flush()
    saved_stderr = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow

            tensorflow.config.list_physical_devices()
        except BaseException:
            os.dup2(saved_stderr, 2)
            captured.seek(0)
            sys.stderr.write(captured.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)
