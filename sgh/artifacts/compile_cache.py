"""Compiled training steps kept on disk, so that a run does not compile what an earlier one did
(the user's view: docs/guide/training.md, "The compiled step cache").

`enable()` names ``<user cache>/xla`` in `TF_XLA_FLAGS` before TensorFlow is imported. TensorFlow
never checks an entry's bytes, and a damaged one fails every later compilation of its step, so
`seal()` writes a digest beside each new entry; `enable()` deletes, in a thread that
`finish_tidying()` waits for, entries without a matching seal and those beyond `MAX_AGE_DAYS` or
`MAX_BYTES`. The entries' prefix holds TensorFlow's version and digests of `XLA_FLAGS` and of the
CPU, so no executable runs under another TensorFlow, options or CPU (SIGILL on a shared home).
`SGH_COMPILE_CACHE=off`, or a `TF_XLA_FLAGS` naming its own directory, turns it off.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import platform
import threading
import time
from pathlib import Path

from sgh.artifacts.user_cache import may_write, user_cache_dir

logger = logging.getLogger(__name__)

_DIRECTORY_FLAG = "--tf_xla_persistent_cache_directory"
_PREFIX_FLAG = "--tf_xla_persistent_cache_prefix"
_SEAL = ".blake2b"
MAX_AGE_DAYS = 30
MAX_BYTES = 1 << 30
_enabled: tuple[Path, str] | None = None  # this process's (directory, prefix), once enabled
_tidying: threading.Thread | None = None  # enable()'s check of the entries, until finished
_removed: list[str] = []  # what the check removed and why, logged once it has finished


def _without_ours(flags: str) -> str:
    """`TF_XLA_FLAGS` less what an sgh parent process added (its children inherit it)."""
    words = flags.split()
    if not any(word.startswith(f"{_PREFIX_FLAG}=sgh-") for word in words):
        return flags
    return " ".join(word for word in words
                    if not word.startswith((f"{_DIRECTORY_FLAG}=", f"{_PREFIX_FLAG}=")))


def _host_cpu() -> str:
    """The CPU's model and instruction sets (Linux: the first processor of /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            lines = cpuinfo.read().split("\n\n", 1)[0].splitlines()
    except OSError:
        lines = []
    described = [line for line in lines
                 if line.split(":")[0].strip() in ("model name", "flags", "Features")]
    return "\n".join(described) or f"{platform.machine()} {platform.processor()}"


def _prefix() -> str:
    try:
        version = importlib.metadata.version("tensorflow")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    flags = hashlib.blake2b(os.environ.get("XLA_FLAGS", "").encode(), digest_size=4)
    cpu = hashlib.blake2b(_host_cpu().encode(), digest_size=4)
    return f"sgh-tf{version}-{flags.hexdigest()}-{cpu.hexdigest()}"


def _digest(path: Path) -> str:
    return hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()


def _seal_of(entry: Path) -> Path:
    return entry.with_name(entry.name + _SEAL)


def _is_sealed(entry: Path) -> bool:
    try:
        return _seal_of(entry).read_text().strip() == _digest(entry)
    except OSError:
        return False


def enable() -> Path | None:
    """Point TensorFlow's compilation cache at ``<user cache>/xla`` (call before importing
    TensorFlow); the directory, or None where the cache stays off."""
    global _enabled, _tidying
    finish_tidying()  # an earlier call's check, if any, before another lists the entries
    flags = _without_ours(os.environ.get("TF_XLA_FLAGS", ""))
    base = user_cache_dir()
    if (os.environ.get("SGH_COMPILE_CACHE", "").lower() in ("off", "0", "false")
            or _DIRECTORY_FLAG in flags or base is None or not may_write(base / "xla")):
        return None
    directory, prefix = base / "xla", _prefix()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # Listed now, checked in the thread: an entry this process writes later is its own.
        entries = [(path, path.stat()) for path in directory.glob("sgh-*__*.pb")]
        seals = list(directory.glob(f"sgh-*__*.pb{_SEAL}"))
    except OSError as error:  # a cache we cannot tidy is a cache we do not use
        logger.info("compile cache %s unusable (%s); compiling without it", directory, error)
        return None
    os.environ["TF_XLA_FLAGS"] = (f"{flags} {_DIRECTORY_FLAG}={directory} "
                                  f"{_PREFIX_FLAG}={prefix}").strip()
    _enabled = directory, prefix
    _tidying = threading.Thread(target=_tidy, args=(entries, seals, prefix),
                                name="sgh-compile-cache-check", daemon=True)
    _tidying.start()
    return directory


def _tidy(entries: list[tuple[Path, os.stat_result]], seals: list[Path], prefix: str) -> None:
    """Remove the entries TensorFlow must not load (this prefix's unsealed or damaged ones) and
    those the cache need not keep (too old, or the oldest beyond `MAX_BYTES`)."""
    now, kept_bytes = time.time(), 0
    for entry, stat in sorted(entries, key=lambda item: item[1].st_mtime, reverse=True):
        if now - stat.st_mtime > MAX_AGE_DAYS * 86400:
            reason = f"older than {MAX_AGE_DAYS} days"
        elif kept_bytes + stat.st_size > MAX_BYTES:
            reason = f"beyond the cache's {MAX_BYTES >> 20} MiB"
        elif entry.name.startswith(f"{prefix}__") and not _is_sealed(entry):
            reason = "not sealed or does not match its seal; the step is compiled again"
        else:
            kept_bytes += stat.st_size
            continue
        _remove(entry, reason)
    for seal in seals:  # a seal whose entry another process removed
        if not seal.with_name(seal.name[:-len(_SEAL)]).exists():
            _remove(seal, "its entry is gone")


def _remove(path: Path, reason: str) -> None:
    try:
        path.unlink(missing_ok=True)
        if path.suffix != _SEAL:
            _seal_of(path).unlink(missing_ok=True)
        _removed.append(f"compile cache: {path} removed ({reason})")
    except OSError as error:
        _removed.append(f"compile cache: cannot remove {path} ({error})")


def finish_tidying() -> None:
    """Wait for `enable()`'s check of the entries, and log what it removed."""
    global _tidying
    if _tidying is not None:
        _tidying.join()
        _tidying = None
    while _removed:
        logger.info("%s", _removed.pop(0))


def seal() -> None:
    """Seal the entries TensorFlow has written since `enable()` (call after a compiled call
    returned: its entry is then complete on disk)."""
    if _enabled is None:
        return
    finish_tidying()  # the check must not judge an entry sealed meanwhile
    directory, prefix = _enabled
    for entry in sorted(directory.glob(f"{prefix}__*.pb")):
        if not _seal_of(entry).exists():
            try:
                # Atomic, as TensorFlow's own writes: a seal is whole or absent.
                temporary = entry.with_name(f".{entry.name}.{os.getpid()}{_SEAL}.tmp")
                temporary.write_text(_digest(entry) + "\n")
                temporary.replace(_seal_of(entry))
            except OSError as error:
                logger.info("compile cache: cannot seal %s (%s); it will be compiled again",
                            entry, error)


def enabled() -> bool:
    """Whether this process loads and keeps compiled steps (`enable()` pointed TensorFlow here)."""
    return _enabled is not None
