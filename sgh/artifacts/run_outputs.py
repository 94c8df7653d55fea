"""What no command's output may replace: a run's own files, and the files it was trained on.

Every writer that takes an output path from the user (`sgh-eval out=`, `sgh-encode out=`,
`sgh-index out=`, `sgh-compare --out`) asks here first, before any work.
"""

from __future__ import annotations

import os
from pathlib import Path

from sgh.artifacts.run_directory import EVAL_FILE, INPUTS_FILE, RUN_ENTRIES, RunDirectory
from sgh.errors import UserInputError


def refuse_a_run_file(setting: str, path: str | os.PathLike, example: str,
                      runs: tuple[str | os.PathLike, ...] = (),
                      eval_of: str | os.PathLike | None = None) -> None:
    """Refuse an output `path` that is one of a run's own files (its config.yaml, metrics.json,
    codes, checkpoints/, encoder/, ...): written over, the run could neither resume nor be
    compared. Only eval.json, which `sgh-eval run=DIR` writes into the run it re-scores, is an
    output there, and only for that run: another run's eval.json is that run's re-scoring.

    Args:
        setting: the key that chose `path` (`out`), for the message.
        example: an accepted value to suggest (`scores.json`).
        runs: directories known to be runs (a command's `run=`), whatever they hold; any other
            directory above `path` counts if it is one (`RunDirectory.holds_a_run`).
        eval_of: the run whose eval.json the command writes (`sgh-eval run=DIR`), if any; the
            eval.json of any other run is refused as its other files are.

    Raises:
        UserInputError: one line naming the path and the run.
    """
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
    """Refuse an output `path` that is one of the dataset files the run in `run_dir` was
    trained on (its inputs.json: `dataset.path`, `dataset.query_path`, ...): written over, the
    run could no longer be re-scored (`sgh-eval run=DIR eval.ranking=...`), resumed or trained
    again on its data. Named as written, through links, or by another hard link, the same file.

    Raises:
        UserInputError: one line naming the path, the setting that recorded it and the run.
    """
    recorded = RunDirectory(run_dir, create=False).previous_inputs() or []
    given = Path(path).expanduser()
    resolved = given.resolve()
    for item in recorded:
        same = resolved == Path(item.path)
        if not same and given.exists():
            try:
                same = os.path.samefile(given, item.path)
            except OSError:
                same = False
        if same:
            raise UserInputError(
                f"{setting}={path} is {item.path}, the {item.setting} the run {run_dir} was "
                f"trained on (its {INPUTS_FILE}), which no output may replace: the run could "
                f"not be re-scored afterwards; accepted: another path, e.g. {setting}={example}")
