"""What a run read: its dataset files, recorded when it starts, so a resume on other data is
refused instead of silently mixing two datasets in one model.

Each file is recorded by its path, size and modification time: one `stat`, not a content hash of
gigabytes, so a file merely touched counts as modified. config.yaml records the same settings as
absolute paths, so a run can be re-scored, resumed or exported from any directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sgh.data.ann_files import SETTINGS as COMPANION_SETTINGS

# The dataset settings that name files (`path`, and a single-array database's companions).
FILE_SETTINGS = ("path", *(setting.removeprefix("dataset.")
                           for setting in COMPANION_SETTINGS.values()))


@dataclass(frozen=True)
class InputFile:
    setting: str  # the setting that names the file, e.g. dataset.path
    path: str  # resolved
    size: int  # bytes
    mtime_ns: int


def describe_inputs(files: dict[str, Path]) -> list[InputFile]:
    """The record of `files` (setting -> path, as `sgh.data.load_split_and_files` gives
    them), now."""
    described = []
    for setting, path in files.items():
        resolved = Path(path).expanduser().resolve()
        status = resolved.stat()
        described.append(InputFile(setting, str(resolved), status.st_size, status.st_mtime_ns))
    return described


def absolute_file_settings(dataset: dict) -> dict:
    """`dataset` with its file settings as absolute paths (`~` expanded, links kept as named)."""
    return {**dataset, **{name: os.path.abspath(os.path.expanduser(dataset[name]))
                          for name in FILE_SETTINGS if isinstance(dataset.get(name), str)}}


def inputs_from_json(payload) -> list[InputFile]:
    """The record read back from `inputs.json`; ValueError if it is not one."""
    try:
        return [InputFile(str(item["setting"]), str(item["path"]), int(item["size"]),
                          int(item["mtime_ns"])) for item in payload["files"]]
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"not a record of input files ({error!r})") from None


def changed_inputs(recorded: list[InputFile], current: list[InputFile]) -> list[str]:
    """What differs between the record of a run's start and the files now, one phrase each,
    e.g. `/data/x.npz (dataset.path): size 1200 -> 1300 bytes`; empty when nothing did."""
    before = {item.setting: item for item in recorded}
    now = {item.setting: item for item in current}
    changes = []
    for setting in sorted(before.keys() | now.keys()):
        old, new = before.get(setting), now.get(setting)
        if new is None:
            changes.append(f"{old.path} ({setting}) is no longer read")
        elif old is None:
            changes.append(f"{new.path} ({setting}) is read now and was not then")
        elif old.path != new.path:
            changes.append(f"{setting} is {new.path} now, {old.path} then")
        elif old.size != new.size:
            changes.append(f"{new.path} ({setting}): size {old.size} -> {new.size} bytes")
        elif old.mtime_ns != new.mtime_ns:
            changes.append(f"{new.path} ({setting}): modified at {_when(new.mtime_ns)}, "
                           f"recorded {_when(old.mtime_ns)}")
    return changes


def _when(mtime_ns: int) -> str:
    """Local time to the nanosecond, as recorded: `2026-12-01 11:19:03.123456789`."""
    seconds, nanoseconds = divmod(mtime_ns, 10**9)
    return f"{datetime.fromtimestamp(seconds):%Y-%m-%d %H:%M:%S}.{nanoseconds:09d}"

