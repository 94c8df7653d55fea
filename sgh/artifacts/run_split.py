"""A finished run's dataset read again (`sgh-eval run=DIR`, `SGHIndex.from_run`): through its
config.yaml, and only as the run read it: every file its inputs.json records unchanged, and as
many rows as its codes. A file changed in place with the same rows would otherwise mix the
run's codes with features they were not made from."""

from __future__ import annotations

from sgh.artifacts.run_directory import RunDirectory
from sgh.artifacts.run_inputs import changed_inputs, describe_inputs
from sgh.errors import UserInputError


def recorded_split(run: RunDirectory, reading: str, rows: dict[str, int]):
    """The run's `RetrievalSplit`; ``reading``: what reads it, for the messages (e.g.
    ``eval.ranking=scan``); ``rows``: the codes' rows by part (``{"database": n}``)."""
    from sgh.config import dataset_config_from
    from sgh.data import load_split_and_files

    previous = run.previous_config()
    if previous is None or "dataset" not in previous:
        raise UserInputError(f"run={run.path}: no readable config.yaml; {reading} reads the "
                             "run's dataset from it")
    dataset = dataset_config_from(previous["dataset"])
    split, files = load_split_and_files(dataset)
    recorded = run.previous_inputs()
    changes = [] if recorded is None else changed_inputs(recorded, describe_inputs(files))
    if changes:
        raise UserInputError(
            f"run={run.path} was trained on other data ({'; '.join(changes)}), and {reading} "
            "reads its features again; put the file back as it was, or train a new run on it "
            "as it is now")
    for part, n in rows.items():
        if len(getattr(split, part)) != n:
            raise UserInputError(f"run={run.path}: its dataset now has "
                                 f"{len(getattr(split, part))} {part} items, its codes {n}; the "
                                 "dataset changed since the run: train again")
    return split
