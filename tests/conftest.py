"""Shared test setup."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_user_cache(tmp_path_factory):
    """Ground-truth caches that fall back to the user's cache (read-only data directories, as
    on CI) go to a temporary directory, never to the developer's ~/.cache."""
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))
    yield
    patch.undo()
