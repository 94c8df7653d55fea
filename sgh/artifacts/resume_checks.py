"""Whether a run directory's earlier run may go on under the current settings: the
configuration and dataset files it recorded (`config.yaml`, `inputs.json`) against the current
ones. Keys added to the schema since the run started count at their defaults; evaluation keys
retired since then are dropped (a ranking that read them has a retired `eval.ranking` too).
"""

from __future__ import annotations

import dataclasses

from omegaconf import OmegaConf

from sgh.artifacts.run_directory import RunDirectory
from sgh.artifacts.run_inputs import InputFile, absolute_file_settings, changed_inputs
from sgh.config import Config, flatten_config
from sgh.errors import UserInputError, first_few
from sgh.methods import METHODS


def check_recorded_configuration(run_directory: RunDirectory, config: Config,
                                 finished: dict | None = None) -> bool:
    """Refuse to go on under another configuration than the one the directory recorded. A run
    with a checkpoint resumes only with the same configuration, the evaluation aside. A run
    `finished` (its metrics) is never recorded again: under another configuration (another run)
    nor under other evaluation settings (a re-scoring, `sgh-eval ... out=FILE`, for any method:
    evaluated again in place, its metrics.json and config.yaml would be replaced). True when the
    directory holds this very run finished: the same configuration, the evaluation included,
    and every file the run writes."""
    recorded = run_directory.previous_config()
    if recorded is None or (finished is None and not run_directory.has_checkpoint()):
        return False
    recorded = with_new_keys_at_their_defaults(recorded, config)
    current = OmegaConf.to_container(OmegaConf.structured(config))
    # What defines a training run: everything but the evaluation settings.
    differences = configuration_differences({**recorded, "eval": None}, {**current, "eval": None})
    if differences and finished is None:
        raise UserInputError(
            f"{run_directory.path} holds a run with another configuration "
            f"({first_few(differences, _DIFFERENCES_SHOWN)}); resume it "
            "with the same settings, or choose a new hydra.run.dir")
    if differences:
        raise UserInputError(
            f"{run_directory.path} holds a finished run with another configuration "
            f"({first_few(differences, _DIFFERENCES_SHOWN)}), and finished work is never "
            "recorded again; accepted: its own settings (its results are shown, nothing is "
            "written), or a new hydra.run.dir for this run")
    if finished is None:
        return False
    evaluation = configuration_differences({"eval": recorded.get("eval")},
                                           {"eval": current["eval"]})
    if evaluation:
        overrides = " ".join(f"{key}={_override(value)}" for key, value in sorted(
            flatten_config({"eval": current["eval"]}).items())
            if any(change.startswith(f"{key}: ") for change in evaluation))
        raise UserInputError(
            f"{run_directory.path} holds a finished run (model={config.model.name}) with other "
            f"evaluation settings ({first_few(evaluation, _DIFFERENCES_SHOWN)}), and finished "
            "work is never recorded again; accepted: re-score it into a file of its own, "
            f"sgh-eval run={run_directory.path} {overrides} out=scores.json, or a new "
            "hydra.run.dir for a new run")
    needed = [run_directory.codes]
    if METHODS[config.model.name].uses_tensorflow:
        needed.append(run_directory.encoder / "saved_model.pb")
    if "score_for_scan" in finished:
        needed.append(run_directory.asymmetric_score)
    return all(path.is_file() for path in needed)


def _override(value) -> str:
    """`value` as a command-line override writes it: null, [5,50], a word as it is."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_override(item) for item in value) + "]"
    return str(value)


def with_new_keys_at_their_defaults(previous: dict, config: Config) -> dict:
    """An earlier run's configuration, with the keys added to the schema since then at their
    defaults (which that run had), the evaluation keys retired since then dropped, and its
    dataset files as absolute paths, as recorded now."""
    filled = dict(previous)
    if isinstance(previous.get("dataset"), dict):
        filled["dataset"] = absolute_file_settings(previous["dataset"])
    for section, value in vars(config).items():
        if dataclasses.is_dataclass(value) and isinstance(previous.get(section), dict):
            # Every section's field has a default: a fresh section holds them all.
            filled[section] = {**dataclasses.asdict(type(value)()), **filled[section]}
    if isinstance(filled.get("eval"), dict):
        known = {field.name for field in dataclasses.fields(config.eval)}
        filled["eval"] = {key: value for key, value in filled["eval"].items() if key in known}
    return filled


_ABSENT = object()
_DIFFERENCES_SHOWN = 6  # another dataset section would make a line of dozens


def _shown(value) -> str:
    return "(absent)" if value is _ABSENT else "null" if value is None else str(value)


def configuration_differences(previous: dict, current: dict) -> list[str]:
    """`key: old -> new` for every key whose value differs, in key order."""
    before, now = flatten_config(previous), flatten_config(current)
    return [f"{key}: {_shown(before.get(key, _ABSENT))} -> {_shown(now.get(key, _ABSENT))}"
            for key in sorted(before.keys() | now.keys())
            if before.get(key, _ABSENT) != now.get(key, _ABSENT)]


def refuse_other_data(run_directory: RunDirectory, inputs: list[InputFile]) -> None:
    """A resume trains on the files the run started on, or not at all: a model half trained
    on one version of a file and finished on another is neither's."""
    recorded = run_directory.previous_inputs()
    if not run_directory.has_checkpoint() or recorded is None:
        return
    changes = changed_inputs(recorded, inputs)
    if changes:
        raise UserInputError(
            f"{run_directory.path} holds a run on other data ({'; '.join(changes)}); put the "
            "file back as it was to resume the run, or choose a new hydra.run.dir to train on "
            "it as it is now")
