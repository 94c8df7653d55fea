"""Whether a TensorFlow checkpoint can be restored: its files on disk, read back whole.

A run resumes from, and takes its weights from, the first intact checkpoint of those it would use
(`first_intact`); a state file TensorFlow cannot parse is rebuilt from the checkpoints on disk.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path

Prefix = str | os.PathLike  # a checkpoint's path without its suffixes: `.../ckpt-100`
CHECKPOINT_PREFIX = "ckpt"  # tf.train.CheckpointManager's: ckpt-<step>.index, .data-*
CHECKPOINT_STATE = "checkpoint"  # TF's list of the kept checkpoints, written last

logger = logging.getLogger(__name__)


def checkpoint_files(prefix: Path) -> list[Path]:
    """The files of the checkpoint `prefix` (`<prefix>.index`, `<prefix>.data-*`) on disk."""
    return sorted(prefix.parent.glob(f"{prefix.name}.*")) if prefix.parent.is_dir() else []


def checkpoint_damage(prefix: Prefix) -> str | None:
    """Why the checkpoint `prefix` cannot be restored, in a few words; None if every tensor its
    index lists reads back with its saved checksum (TensorFlow checks a CRC32C per tensor)."""
    import tensorflow as tf

    prefix = Path(prefix)
    if not prefix.with_name(f"{prefix.name}.index").is_file():
        return f"no {prefix.name}.index"
    try:
        reader = tf.train.load_checkpoint(str(prefix))
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    # Damage comes as OpError subclasses, a short read as IndexError: any failure is damage.
    except Exception as error:  # noqa: BLE001
        lines = str(error).strip().splitlines()
        return (lines[0] if lines else type(error).__name__)[:200]
    return None


def first_intact(prefixes: Iterable[Prefix]) -> tuple[Prefix | None, list[tuple[Prefix, str]]]:
    """The first intact one of `prefixes` (or None), and the damaged ones before it, with why."""
    damaged = []
    for prefix in prefixes:
        problem = checkpoint_damage(prefix)
        if problem is None:
            return prefix, damaged
        damaged.append((prefix, problem))
    return None, damaged


def rebuild_unreadable_state(directory: Path, kept: int) -> None:
    """A state file TensorFlow cannot parse (it would ignore it and start from step 0): list
    the newest checkpoints found on disk instead, with a warning."""
    import tensorflow as tf

    state = directory / CHECKPOINT_STATE
    if not state.is_file() or tf.train.get_checkpoint_state(str(directory)) is not None:
        return
    found = sorted((int(match.group(1)), str(directory / f"{CHECKPOINT_PREFIX}-{match.group(1)}"))
                   for path in directory.glob(f"{CHECKPOINT_PREFIX}-*.index")
                   if (match := re.fullmatch(rf"{CHECKPOINT_PREFIX}-(\d+)\.index", path.name)))
    newest = [prefix for _, prefix in found[-kept:]]
    logger.warning("%s is unreadable; listing the checkpoints found beside it instead: %s", state,
                   ", ".join(Path(prefix).name for prefix in newest) or "none")
    if newest:
        tf.compat.v1.train.update_checkpoint_state(str(directory), newest[-1],
                                                   all_model_checkpoint_paths=newest)
    else:
        state.unlink()
