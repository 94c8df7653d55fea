"""Atomic writes: a file or a directory appears complete under its name, or not at all.

Everything is first written under a hidden temporary name in the target's own directory (so the
final rename never crosses file systems), then renamed onto the target. A crash, a full disk or a
Ctrl-C leaves the previous version, or nothing, never a half-written file that looks complete.
Temporary names start with `.<name>.` and end in `.tmp`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path

import numpy as np


def _umask_mode(mode: int) -> int:
    # mkstemp/mkdtemp create 0600/0700 (private); results are ordinary files: honour the umask.
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


@contextmanager
def atomic_file(path: str | os.PathLike, suffix: str = ""):
    """Yield a temporary path next to `path`; rename it onto `path` if the block succeeds.

    `suffix` ends the temporary name, for writers that insist on an extension (`np.savez`
    appends `.npz` to a name without it).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + suffix,
                                         dir=path.parent)
    os.close(handle)
    os.chmod(temporary, _umask_mode(0o666))
    try:
        yield Path(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


@contextmanager
def atomic_directory(path: str | os.PathLike):
    """Yield an empty temporary directory next to `path`; swap it in for `path` on success.

    A directory cannot be renamed over a non-empty one, so an existing `path` is first moved
    aside and deleted after the swap: at every instant `path` is absent, the old one, or the
    new one, complete.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield temporary
        os.chmod(temporary, _umask_mode(0o777))
        _swap_in(temporary, path)
    finally:
        if temporary.exists():
            shutil.rmtree(temporary)


def _swap_in(new: Path, path: Path) -> None:
    if not path.exists() and not path.is_symlink():
        os.replace(new, path)
        return
    aside = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}.tmp")
    os.replace(path, aside)
    os.replace(new, path)
    if aside.is_dir() and not aside.is_symlink():
        shutil.rmtree(aside)
    else:
        aside.unlink()


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_file(path) as temporary:
        temporary.write_bytes(data)


def _json_ready(value):
    """Plain JSON: numpy scalars to Python, NaN/Inf to null (JSON has no NaN)."""
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: str | os.PathLike, payload: dict) -> None:
    """One JSON object (NaN/Inf written as null), atomically."""
    write_bytes(path, (json.dumps(_json_ready(payload), indent=2) + "\n").encode())
