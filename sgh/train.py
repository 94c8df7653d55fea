"""`sgh-train`: the Hydra boundary. `main` composes the config; `run(config, run_dir)` works.

The data flow reads straight down: typed config -> load split -> build model -> train
(TensorBoard, checkpoints) -> encode database and queries -> metrics -> run directory.
Nothing below `main` knows Hydra; tests call `run` directly.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
import numpy as np
from omegaconf import DictConfig, OmegaConf

from sgh.artifacts import RunDirectory
from sgh.config import Config, register_configs, validate
from sgh.config_choices import check_group_choices
from sgh.data import RetrievalSplit, load_split
from sgh.errors import (
    TrainingDiverged,
    TrainingInterrupted,
    UserInputError,
    exit_on_user_error,
)
from sgh.evaluate import CONVENTIONS, collapse_warning, ground_truth, results_table, score
from sgh.quiet_tensorflow import import_tensorflow

register_configs()
# Exit statuses besides bad input (2, sgh.errors): 130 as for Ctrl-C in a shell.
INTERRUPTED_EXIT_CODE = 130
DIVERGED_EXIT_CODE = 3


def _comparable(config) -> dict:
    """What defines a training run: everything but the evaluation settings."""
    values = config if isinstance(config, dict) else OmegaConf.to_container(
        OmegaConf.structured(config))
    return {key: value for key, value in values.items() if key != "eval"}


def run(config: Config, run_dir) -> dict:
    """Train the configured method, evaluate it, write the run directory; return the metrics.

    A run directory that already holds a checkpoint of the same configuration is resumed from
    it (see `sgh.sgh_training`).
    """
    validate(config)
    split = load_split(config.dataset)
    # TensorFlow takes seconds to import: only now, so that every mistake in the settings and
    # the data above is answered in about a second.
    import_tensorflow()
    from sgh.distribute import strategy_for, writable_run_dir

    # Before TensorFlow's first op: the device layout and collective ops are fixed from then on.
    strategy = strategy_for(config.trainer) if config.model.name == "sgh" else None
    with writable_run_dir(run_dir, strategy) as own_dir:  # only the chief writes (sgh.distribute)
        return _run(config, own_dir, split)


def _run(config: Config, run_dir, split: RetrievalSplit) -> dict:
    from sgh.baseline_training import fit_baseline
    from sgh.sgh_training import train_sgh

    run_directory = RunDirectory(run_dir)
    previous = run_directory.previous_config()
    resumable = (run_directory.path / "checkpoints" / "checkpoint").is_file()
    if resumable and previous is not None and _comparable(previous) != _comparable(config):
        raise UserInputError(
            f"{run_directory.path} holds a run with another configuration; resume it with the "
            "same settings, or choose a new hydra.run.dir")
    run_directory.write_config(config)
    print(f"[sgh] {split.name}: train {split.train.shape}, database {split.database.shape}, "
          f"queries {split.query.shape}; {split.protocol}", flush=True)

    if config.model.name == "sgh":
        encoded = train_sgh(config, split, run_directory)
    else:
        encoded = fit_baseline(config, split)
    groundtruth, groundtruth_source = ground_truth(
        split, config.eval.recall_k, getattr(config.dataset, "path", None))
    metrics = {
        "dataset": split.name,
        "method": config.model.name,
        "bits": config.model.bits,
        "seed": config.trainer.seed,
        **encoded.fields,
        **score(encoded.database, encoded.query, config.model.bits, config.eval,
                split.database_labels, split.query_labels, groundtruth),
        "protocol": split.protocol,
        "feature_conversion": split.feature_conversion,
        "groundtruth": f"{groundtruth.shape[1]} neighbours per query, {groundtruth_source}",
        **CONVENTIONS,
    }
    codes = {"database": encoded.database, "query": encoded.query,
             "bits": np.int64(config.model.bits), "groundtruth": groundtruth}
    if split.has_labels:
        codes["database_labels"] = split.database_labels
        codes["query_labels"] = split.query_labels
    run_directory.write_codes(**codes)
    run_directory.write_metrics(metrics)
    run_directory.write_final_summary(metrics)
    _write_run_views(run_directory, config, split, codes, step=int(metrics.get("steps", 0)))
    print(results_table(metrics, _title(metrics), config.eval), flush=True)
    warning = collapse_warning(metrics, config.model.bits)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    print(f"[sgh] run directory: {run_directory.path}", flush=True)
    return metrics


def _write_run_views(run_directory: RunDirectory, config: Config, split, codes: dict,
                     step: int) -> None:
    """TensorBoard's HParams row of this run, and the PR curve of its final codes."""
    from sgh import tensorboard_views as views

    writer = run_directory.summary_writer()
    with writer.as_default():
        views.write_hparams(config)
        if split.has_labels:
            views.write_pr_curve(codes["query"], codes["database"], config.model.bits,
                                 split.query_labels, split.database_labels,
                                 step=step)
    writer.close()


def _title(metrics: dict) -> str:
    if metrics["method"] == "sgh":
        return (f"{metrics['dataset']}, SGH {metrics['bits']} bits, objective "
                f"{metrics['objective']}, {metrics['steps']} steps")
    return f"{metrics['dataset']}, {metrics['method'].upper()} {metrics['bits']} bits"


# An absolute path: Hydra would read a relative one as a Python package ("configs").
CONFIG_DIR = str(Path(__file__).resolve().parent.parent / "configs")


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train")
def _hydra_main(cfg: DictConfig) -> None:
    run_dir = hydra.core.hydra_config.HydraConfig.get().runtime.output_dir
    # Hydra routes Python logging to the console at INFO; TensorFlow's absl INFO lines are noise.
    logging.getLogger("absl").setLevel(logging.WARNING)
    logging.getLogger("tensorflow").setLevel(logging.WARNING)  # collective all-reduce INFO lines
    try:
        with exit_on_user_error("sgh-train"):
            run(OmegaConf.to_object(cfg), run_dir)
    except TrainingDiverged as divergence:
        print(f"sgh-train: error: {divergence}", file=sys.stderr)
        sys.exit(DIVERGED_EXIT_CODE)
    except TrainingInterrupted as interruption:
        print(f"sgh-train: {interruption}", file=sys.stderr)
        sys.exit(INTERRUPTED_EXIT_CODE)


def main() -> None:
    with exit_on_user_error("sgh-train"):  # before Hydra, which reports these in many lines
        check_group_choices(sys.argv[1:], Path(CONFIG_DIR))
    _hydra_main()


if __name__ == "__main__":
    main()
