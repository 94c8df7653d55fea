"""The per-user cache directory, and whether a directory may be written.

Two caches live there: exact ground truth of datasets whose own directory is read-only
(`sgh.artifacts.ground_truth_cache`) and compiled training steps (`sgh.artifacts.compile_cache`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def user_cache_dir() -> Path | None:
    """``$XDG_CACHE_HOME/sgh``, or ``~/.cache/sgh``; None if there is no home directory."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = Path.home() / ".cache"
        except RuntimeError:  # no HOME and no password-database entry
            return None
    return Path(base) / "sgh"


def may_write(directory: Path) -> bool:
    """Whether to try writing in ``directory`` (created if missing).

    A directory whose permission bits deny writing counts as read-only even for root, whose
    writes the system would allow: a folder made read-only on purpose stays untouched."""
    existing = directory
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return False
    return bool(existing.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) and (
        os.access(existing, os.W_OK)
    )
