"""The `sgh-train` flow on one page: config -> split -> method -> codes -> scores -> run directory.

    run(config, run_dir)
      validate the settings                  sgh.config
      load the split                         sgh.data
      fit or train the method                sgh.methods -> sgh.training / sgh.baselines
      ground truth for Recall K@N            sgh.data.ground_truth, sgh.artifacts.ground_truth_cache
      the ranking (Hamming, asymmetric, ...)  sgh.search.rankings
      score both protocols                   sgh.metrics.scoring
      write codes, metrics, TensorBoard      sgh.artifacts, sgh.reports.tensorboard_views
      log the results table                  sgh.reports.results_table

Each stage only hands its result to the next; nothing below knows Hydra (`sgh.cli.train` is the
boundary), and tests call `run` directly. A run directory that already holds a checkpoint of the
same configuration, on the same dataset files, is resumed from it (the comparison:
`sgh.artifacts.resume_checks`). The run owns its directory from start to end
(`sgh.artifacts.run_lock`): a second writer is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
from functools import partial
from pathlib import Path

import numpy as np

from sgh.artifacts.ground_truth_cache import cached_exact_neighbours
from sgh.artifacts.resume_checks import (
    finished_as_configured,
    refuse_another_configuration,
    refuse_other_data,
    refuse_to_record_a_finished_run_again,
)
from sgh.artifacts.run_directory import RunDirectory
from sgh.artifacts.run_inputs import InputFile, absolute_file_settings, describe_inputs
from sgh.artifacts.run_lock import run_lock
from sgh.config import Config, validate
from sgh.data import RetrievalSplit, input_files, load_split
from sgh.data.ground_truth import split_ground_truth
from sgh.errors import UserInputError
from sgh.methods import METHODS, EncodedSplit
from sgh.metrics.conventions import RESULT_CONVENTIONS
from sgh.metrics.scoring import score
from sgh.model.quiet_tensorflow import import_tensorflow
from sgh.reports.results_table import collapse_warning, results_table, run_title
from sgh.search.asymmetric import ASYMMETRIC_NEEDS_LINEAR_DECODER
from sgh.search.rankings import evaluation_ranking

logger = logging.getLogger(__name__)


def run(config: Config, run_dir: str | os.PathLike) -> dict:
    """Train the configured method, evaluate it, write the run directory; return the metrics."""
    validate(config)
    _refuse_a_ranking_the_method_cannot_give(config)
    # Recorded so in config.yaml: the run is re-scored and resumed from any directory.
    config = dataclasses.replace(config, dataset=type(config.dataset)(
        **absolute_file_settings(vars(config.dataset))))
    method = METHODS[config.model.name]
    split = load_split(config.dataset)
    inputs = describe_inputs(input_files(config.dataset))
    _check_settings_against_data(config, split)
    if method.uses_tensorflow:
        # TensorFlow takes seconds to import: only now, so that every mistake in the settings
        # and the data above is answered in about a second; and only to train (a baseline's
        # run, TensorBoard's views included, needs none of it).
        import_tensorflow()
        from sgh.training.devices import strategy_for, writable_run_dir

        # Created once, here, before TensorFlow's first op: the device layout and collective
        # ops are fixed from then on.
        strategy = strategy_for(config.trainer)
        # Only the chief writes: another worker gets a scratch directory.
        writable = writable_run_dir(run_dir, strategy)
    else:
        strategy, writable = None, contextlib.nullcontext(Path(run_dir))
    # The writer owns the directory from here to the end (the kernel releases the lock if the
    # process dies).
    with writable as own_dir:
        # Claimed before the lock file goes in: a folder of the user's is refused untouched.
        run_directory = RunDirectory(own_dir)
        with run_lock(own_dir):
            run_directory.remove_stray_temporaries()  # a killed writer's; none in flight
            return _run(config, run_directory, split, inputs, strategy)


def _run(config: Config, run_directory: RunDirectory, split: RetrievalSplit,
         inputs: list[InputFile], strategy) -> dict:
    from sgh.reports.tensorboard_views import write_run_summary

    refuse_another_configuration(run_directory, config)
    refuse_other_data(run_directory, inputs)
    previous = _previous_metrics(run_directory)
    # The workers of a cluster all take part in the run's collective steps, so the chief goes
    # through them too (it trains no step, and keeps the training record below).
    if previous is not None and not _in_a_cluster(strategy):
        if finished_as_configured(run_directory, config, previous):
            # Finished work is never recorded again: the results as they were, no file touched.
            logger.info("%s holds this run, finished; its results:", run_directory.path)
            logger.info("%s", results_table(previous, run_title(previous), config.eval),
                        extra={"plain": True})
            return previous
        # Nor recorded again under other settings: another run, or (a baseline) a re-scoring.
        refuse_to_record_a_finished_run_again(run_directory, config)
    run_directory.write_config(config)
    run_directory.write_inputs(inputs)
    logger.info("%s: train %s, database %s, queries %s; %s", split.name, split.train.shape,
                split.database.shape, split.query.shape, split.protocol)

    encoded = _fit(config, split, run_directory, strategy)
    groundtruth, groundtruth_source = split_ground_truth(split, config.eval.recall_k, partial(
        cached_exact_neighbours, dataset_path=getattr(config.dataset, "path", None)))
    if encoded.scores is not None:  # for sgh-eval run=DIR eval.ranking=...
        run_directory.write_asymmetric_score(encoded.scores)
    ranking = evaluation_ranking(config.eval, encoded.database, encoded.query, config.model.bits,
                                 encoded.scores, split.query, split.database,
                                 split.similarity, encoded.without_scores)
    metrics = {
        "dataset": split.name,
        "method": config.model.name,
        "bits": config.model.bits,
        "seed": config.trainer.seed,
        **encoded.fields,
        **score(encoded.database, encoded.query, config.model.bits, config.eval,
                split.database_labels, split.query_labels, groundtruth, ranking),
        "similarity": split.similarity,
        "protocol": split.protocol,
        "feature_conversion": split.feature_conversion,
        "groundtruth": f"{groundtruth.shape[1]} neighbours per query, {groundtruth_source}",
        **RESULT_CONVENTIONS,
    }
    codes = {"database": encoded.database, "query": encoded.query,
             "bits": np.int64(config.model.bits), "groundtruth": groundtruth}
    if encoded.scores is not None:
        codes["fingerprint"] = np.str_(encoded.scores.fingerprint)
    if split.has_labels:
        codes["database_labels"] = split.database_labels
        codes["query_labels"] = split.query_labels
    run_directory.write_codes(**codes)
    run_directory.write_metrics(metrics)
    with run_directory.summary_writer():
        write_run_summary(config, metrics, split, codes)

    # The results table as one record, shown as it is (sgh.cli.logs: "plain").
    logger.info("%s", results_table(metrics, run_title(metrics), config.eval),
                extra={"plain": True})
    warning = collapse_warning(metrics, config.model.bits)
    if warning:
        logger.warning("%s", warning)
    logger.info("run directory: %s", run_directory.path)
    return metrics


def _in_a_cluster(strategy) -> bool:
    if strategy is None:
        return False
    from sgh.training.devices import is_multi_worker

    return is_multi_worker(strategy)


def _previous_metrics(run_directory: RunDirectory) -> dict | None:
    """The metrics.json of an earlier finish of this run, if there is a readable one."""
    try:
        metrics = json.loads(run_directory.metrics.read_text())
    except (OSError, ValueError):
        return None  # none yet, or damaged: the run writes it again
    return metrics if isinstance(metrics, dict) else None


def _fit(config: Config, split: RetrievalSplit, run_directory: RunDirectory,
         strategy) -> EncodedSplit:
    """Train (resuming from the run directory) or fit the method; its codes of the split."""
    if METHODS[config.model.name].uses_tensorflow:
        from sgh.training.train_sgh import train_sgh

        return train_sgh(config, split, run_directory, strategy)
    from sgh.baselines.fitting import fit_baseline

    return fit_baseline(config, split)


def _check_settings_against_data(config: Config, split: RetrievalSplit) -> None:
    """The settings that depend on the data, checked before any training: a mistake here
    would otherwise surface only after training, or silently change what is measured."""
    if METHODS[config.model.name].baseline_class is not None:
        from sgh.baselines.fitting import refuse_more_bits_than_features

        refuse_more_bits_than_features(config, split.train.shape[1], split.name)
    n_database, k = len(split.database), config.eval.recall_k
    if k > n_database:
        raise UserInputError(f"eval.recall_k={k} is more than the database of {split.name!r} "
                             f"({n_database} items); accepted: eval.recall_k <= {n_database}")


def _refuse_a_ranking_the_method_cannot_give(config: Config) -> None:
    """Before training: asymmetric and score-rescored rankings need the scores they name."""
    evaluation = config.eval
    scan = evaluation.ranking == "asymmetric"
    rerank = evaluation.ranking == "rerank"
    needs_score = scan or (rerank and (evaluation.rescore == "score"
                                       or evaluation.shortlist_by == "encoder"))
    if not needs_score:
        return
    setting = (f"eval.ranking={evaluation.ranking} (eval.score={evaluation.score}, eval.rescore="
               f"{evaluation.rescore}, eval.shortlist_by={evaluation.shortlist_by})")
    named = evaluation.score if scan or evaluation.rescore == "score" else "auto"
    if METHODS[config.model.name].uses_tensorflow:
        # An mlp decoder rescores a shortlist by decoding it, but has no per-bit tables for a
        # scan of the whole database.
        reason = (None if config.model.decoder == "linear" or not scan
                  or named in ("auto", "encoder")
                  else f"{ASYMMETRIC_NEEDS_LINEAR_DECODER} (eval.score=encoder scans, and "
                       "eval.ranking=rerank decodes a shortlist for the decoder and joint scores)")
    else:
        from sgh.baselines.fitting import baseline_class

        reason = baseline_class(config.model.name).without_asymmetric  # SH, SpH
        if reason is None and named not in ("auto", "encoder"):  # LSH, PCAH, ITQ
            reason = ("its one score is its projection's, an encoder score; accepted: "
                      "eval.score=auto or encoder")
    if reason is not None:
        raise UserInputError(f"{setting} needs a score, and model={config.model.name}: {reason}; "
                             "accepted: eval.ranking=hamming, or eval.ranking=rerank "
                             "eval.rescore=exact")
