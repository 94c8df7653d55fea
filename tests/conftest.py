"""Shared test setup: GPUs hidden, caches private, and one quick reference run.

Tests run on the CPU, seeded, whatever the machine has: a GPU would change the numbers (and
the timing). `SGH_TEST_GPU=1` leaves the GPUs visible, for a deliberate check of the GPU path.
"""

from __future__ import annotations

import os

import pytest

if not os.environ.get("SGH_TEST_GPU"):
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before any test imports TensorFlow


@pytest.fixture(autouse=True, scope="session")
def _private_user_cache(tmp_path_factory):
    """Ground-truth caches that fall back to the user's cache (read-only data directories, as
    on CI) go to a temporary directory, never to the developer's ~/.cache."""
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))
    yield
    patch.undo()
