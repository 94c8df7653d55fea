"""Shared test setup: GPUs hidden, Ctrl-C as in a terminal, caches private, and one quick
reference run.

Tests run on the CPU, seeded, whatever the machine has: a GPU would change the numbers (and
the timing). `SGH_TEST_GPU=1` leaves the GPUs visible, for a deliberate check of the GPU path.
"""

from __future__ import annotations

import os
import signal

import pytest

if not os.environ.get("SGH_TEST_GPU"):
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before any test imports TensorFlow

# The tests of Ctrl-C model a command typed in a terminal, where SIGINT raises
# KeyboardInterrupt. A suite started in the background by a non-interactive shell (`... &`)
# inherits SIGINT ignored, and Python then leaves it ignored, in this process and in every
# command a test starts: those tests would see no Ctrl-C at all.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True, scope="session")
def _private_user_cache(tmp_path_factory):
    """Ground-truth caches that fall back to the user's cache (read-only data directories, as
    on CI) go to a temporary directory, never to the developer's ~/.cache."""
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))
    yield
    patch.undo()


@pytest.fixture(scope="session")
def default_mnist_run(tmp_path_factory):
    """`sgh-train` with no overrides (32-bit SGH on MNIST), run once for every slow test that
    checks it: its directory and metrics."""
    from sgh.pipeline import run
    from tests.helpers import compose_config

    directory = tmp_path_factory.mktemp("default_mnist_run")
    return directory, run(compose_config(), directory)
