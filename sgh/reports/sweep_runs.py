"""The runs below a sweep directory as `sgh-compare` reads them, and which of them are seeds.

Runs are averaged together only when they are seeds of one run: the same dataset, method,
ranking and code length, and a config.yaml that differs in nothing but `trainer.seed`. Other
runs are rows of their own, each named by the settings that set it apart (`variant`: `sgh
[model.decoder=mlp, trainer.steps=10000]`); a run without a readable config.yaml is told apart
by its metrics only.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from omegaconf import OmegaConf

from sgh.artifacts.run_directory import CONFIG_FILE, METRICS_FILE
from sgh.config import flatten_config
from sgh.errors import UserInputError

SEED_SETTING = "trainer.seed"  # the one setting seeds of a run differ in


def collect(sweep_dir) -> list[dict]:
    """Every run's metrics below `sweep_dir`, sorted by path, with `run_dir` and `variant` (see
    the module doc; '' when the runs of its method label and code length share one recipe)."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise UserInputError(f"{sweep_dir}: no such directory; expected an sgh-train sweep "
                             "directory")
    rows = []
    for path in sorted(sweep_dir.rglob(METRICS_FILE)):
        try:
            row = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise UserInputError(f"{path}: not valid JSON ({error})") from None
        if not isinstance(row, dict) or not all(isinstance(row.get(key), str)
                                                for key in ("dataset", "method")) \
                or isinstance(row.get("bits"), bool) or not isinstance(row.get("bits"), int):
            raise UserInputError(f"{path}: expected a JSON object with a string 'dataset' and "
                                 "'method' and an integer 'bits', as sgh-train writes")
        seed = row.get("seed")  # runs are ordered and grouped by it
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise UserInputError(f"{path}: key 'seed' is {seed!r}; expected an integer (the "
                                 "run's trainer.seed), as sgh-train writes")
        rows.append({**row, "run_dir": str(path.parent)})
    if not rows:
        raise UserInputError(f"{sweep_dir}: no {METRICS_FILE} below it; expected the directory "
                             "of an sgh-train sweep (one sub-directory per job)")
    _name_variants(rows)
    return rows


def ranking_label(row: dict) -> str:
    """How tables and legends name a run's method and ranking: ``itq``, or ``itq
    (scan)`` when the run was scored in another ranking than Hamming."""
    ranking = str(row.get("ranking", "hamming")).split(":")[0]
    return row["method"] if ranking == "hamming" else f"{row['method']} ({ranking})"


def _settings(run_dir: str) -> dict | None:
    """The run's flattened settings but its seed; None without a readable config.yaml."""
    try:
        loaded = OmegaConf.to_container(OmegaConf.load(Path(run_dir) / CONFIG_FILE))
    except Exception:  # noqa: BLE001  absent or unreadable: the metrics alone describe the run
        return None
    if not isinstance(loaded, dict):
        return None
    settings = flatten_config(loaded)
    settings.pop(SEED_SETTING, None)
    return settings


def _shown(value) -> str:
    return json.dumps(value, separators=(",", ":")) if isinstance(value, (list, dict)) or \
        value is None else str(value)


def _name_variants(rows: list[dict]) -> None:
    """Set each row's `variant`: '' where the runs of its method label and code length share
    their settings (seeds of one run), else `' [key=value, ...]'` over the settings in which
    those runs differ."""
    groups = defaultdict(list)
    for row in rows:
        row["variant"] = ""
        groups[row["dataset"], ranking_label(row), row["bits"]].append(row)
    for group in groups.values():
        settings = [_settings(row["run_dir"]) for row in group]
        distinct = {json.dumps(entry, sort_keys=True, default=str) for entry in settings}
        if len(distinct) < 2:
            continue
        known = [entry for entry in settings if entry is not None]
        keys = sorted({key for entry in known for key in entry
                       if len({_shown(other.get(key)) for other in known}) > 1})
        for row, entry in zip(group, settings, strict=True):
            named = (", ".join(f"{key}={_shown(entry.get(key))}" for key in keys)
                     if entry is not None else f"no {CONFIG_FILE}")
            row["variant"] = f" [{named}]"
