"""The per-user cache directory (of `ground_truth_cache` and `compile_cache`), and whether a
directory may be written."""

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
    """Whether to try writing in ``directory`` (created if missing). Permission bits that deny
    writing count even for root: a folder made read-only on purpose stays untouched."""
    existing = directory
    while not existing.exists():
        existing = existing.parent
    return (existing.is_dir() and os.access(existing, os.W_OK)
            and bool(existing.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)))
