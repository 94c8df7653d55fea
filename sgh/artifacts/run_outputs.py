"""What no command's output may replace: a run's own files, and the files it was trained on.
Every writer of an output path the user chose asks here first, before any work."""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

from sgh.artifacts.run_directory import EVAL_FILE, INPUTS_FILE, RUN_ENTRIES, RunDirectory
from sgh.errors import UserInputError


def refuse_a_run_file(setting: str, path: str | os.PathLike, example: str,
                      runs: tuple[str | os.PathLike, ...] = (),
                      eval_of: str | os.PathLike | None = None) -> None:
    """UserInputError, one line, for an output `path` (chosen by `setting`) that is one of a run's
    own files: written over, the run could neither resume nor be compared. A directory above
    `path` is a run if it is in `runs` (a command's `run=`) or holds one. Only the eval.json of
    `eval_of` (`sgh-eval run=DIR`) is an output there. `example`: an accepted value to suggest."""
    given = Path(os.path.abspath(path))
    known = {Path(run).resolve() for run in runs}
    own_eval = None if eval_of is None else Path(eval_of).resolve()
    for candidate in dict.fromkeys((given, given.resolve())):  # as written, and through links
        for directory in candidate.parents:
            inside = candidate.relative_to(directory)
            if inside.parts[0] not in RUN_ENTRIES or (
                    inside.parts == (EVAL_FILE,) and directory.resolve() == own_eval):
                continue
            if directory.resolve() in known or RunDirectory(directory, create=False).holds_a_run():
                what = (f"the {inside} of the run {directory}" if len(inside.parts) == 1 else
                        f"inside {directory / inside.parts[0]}, part of the run {directory}")
                if inside.parts == (EVAL_FILE,):  # another run's: its re-scoring
                    what += f" (its re-scoring, sgh-eval run={directory}'s output)"
                raise UserInputError(
                    f"{setting}={path} is {what}, whose files no other output may replace; "
                    f"accepted: a path that is none of a run's files, e.g. {setting}={example}")


def refuse_a_runs_input(setting: str, path: str | os.PathLike, run_dir: str | os.PathLike,
                        example: str) -> None:
    """UserInputError, one line, for an output `path` that is, however named, one of the dataset
    files the run in `run_dir` was trained on: it could no longer be re-scored or resumed."""
    recorded = RunDirectory(run_dir, create=False).previous_inputs() or []
    given = Path(path).expanduser()
    resolved = given.resolve()
    for item in recorded:
        same = resolved == Path(item.path)
        if not same and given.exists():
            with suppress(OSError):  # the recorded file is gone: not the same
                same = os.path.samefile(given, item.path)
        if same:
            raise UserInputError(
                f"{setting}={path} is {item.path}, the {item.setting} the run {run_dir} was "
                f"trained on (its {INPUTS_FILE}), which no output may replace: the run could "
                f"not be re-scored afterwards; accepted: another path, e.g. {setting}={example}")
