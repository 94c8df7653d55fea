"""Whether a TensorFlow checkpoint can be restored: its files on disk, read back whole.

A checkpoint is its index (`<prefix>.index`) and data files (`<prefix>.data-*`). It is intact
when every tensor its index lists reads back with the checksum it was saved with
(`checkpoint_damage`); a run resumes from, and takes its weights from, the first intact one of
those it would use (`first_intact`), never from a damaged one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

Prefix = str | os.PathLike  # a checkpoint's path without its suffixes: `.../ckpt-100`


def checkpoint_files(prefix: Path) -> list[Path]:
    """The files of the checkpoint `prefix` (`<prefix>.index`, `<prefix>.data-*`) on disk."""
    return sorted(prefix.parent.glob(f"{prefix.name}.*")) if prefix.parent.is_dir() else []


def checkpoint_damage(prefix: Prefix) -> str | None:
    """Why the checkpoint `prefix` cannot be restored, in a few words; None if it is intact.

    Intact means: its index reads, and every tensor it lists reads back from the data files
    with the checksum it was saved with (TensorFlow checks a CRC32C per tensor), so a truncated,
    overwritten or missing file is found before anything is restored from it.
    """
    import tensorflow as tf

    prefix = Path(prefix)
    if not prefix.with_name(f"{prefix.name}.index").is_file():
        return f"no {prefix.name}.index"
    try:
        reader = tf.train.load_checkpoint(str(prefix))
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    # The reader reports damage as OpError subclasses, but a short read as IndexError: any
    # failure to read the checkpoint back means it is damaged.
    except Exception as error:  # noqa: BLE001
        lines = str(error).strip().splitlines()
        return (lines[0] if lines else type(error).__name__)[:200]
    return None


def first_intact(prefixes: Iterable[Prefix]) -> tuple[Prefix | None, list[tuple[Prefix, str]]]:
    """The first of `prefixes` that is intact (`checkpoint_damage`), or None, and the damaged
    ones before it with why each is (every one of them when none is intact)."""
    damaged = []
    for prefix in prefixes:
        problem = checkpoint_damage(prefix)
        if problem is None:
            return prefix, damaged
        damaged.append((prefix, problem))
    return None, damaged
