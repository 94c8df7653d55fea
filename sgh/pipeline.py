"""The `sgh-train` flow on one page: config -> split -> method -> codes -> scores -> run directory.

Nothing below knows Hydra (`sgh.cli.train` is the boundary). A run directory holding a checkpoint
of the same configuration and dataset files is resumed (`sgh.artifacts.resume_checks`); the run
owns its directory from start to end (`sgh.artifacts.run_lock`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from functools import partial
from pathlib import Path

import numpy as np

from sgh.artifacts.ground_truth_cache import cached_exact_neighbours
from sgh.artifacts.resume_checks import check_recorded_configuration, refuse_other_data
from sgh.artifacts.run_directory import RunDirectory
from sgh.artifacts.run_inputs import InputFile, absolute_file_settings, describe_inputs
from sgh.artifacts.run_lock import run_lock
from sgh.config import Config, validate
from sgh.data import RetrievalSplit, load_split_and_files
from sgh.data.ground_truth import split_ground_truth
from sgh.errors import UserInputError
from sgh.methods import METHODS
from sgh.metrics.conventions import RESULT_CONVENTIONS
from sgh.metrics.scoring import score, score_search
from sgh.model.quiet_tensorflow import import_tensorflow
from sgh.reports.results_table import collapse_warning, results_table, run_title
from sgh.scores.asymmetric import ASYMMETRIC_NEEDS_LINEAR_DECODER
from sgh.scores.posterior_modes import check_encoding_setting
from sgh.search.rankings import byte_decoder_ranking, evaluation_ranking

logger = logging.getLogger(__name__)


def run(config: Config, run_dir: str | os.PathLike) -> dict:
    """Train the configured method, evaluate it, write the run directory; return the metrics."""
    validate(config)
    _refuse_a_ranking_the_method_cannot_give(config)
    # Recorded so in config.yaml: the run is re-scored and resumed from any directory.
    config = dataclasses.replace(config, dataset=type(config.dataset)(
        **absolute_file_settings(vars(config.dataset))))
    method = METHODS[config.model.name]
    split, files = load_split_and_files(config.dataset)
    inputs = describe_inputs(files)
    # The settings that depend on the data, checked before any training.
    if method.baseline_class is not None:
        from sgh.baselines.fitting import refuse_more_bits_than_features

        refuse_more_bits_than_features(config, split.train.shape[1], split.name)
    n_database, k = len(split.database), config.eval.recall_k
    if k > n_database:
        raise UserInputError(f"eval.recall_k={k} is more than the database of {split.name!r} "
                             f"({n_database} items); accepted: eval.recall_k <= {n_database}")
    if method.uses_tensorflow:
        # Seconds to import: only now, after the settings and data are checked, and only to train.
        import_tensorflow()
        from sgh.training.devices import strategy_for, writable_run_dir

        # Before TensorFlow's first op, which fixes the device layout and collective ops.
        strategy = strategy_for(config.trainer)
        # Only the chief writes: another worker gets a scratch directory.
        writable = writable_run_dir(run_dir, strategy)
    else:
        strategy, writable = None, contextlib.nullcontext(Path(run_dir))
    with writable as own_dir:
        # Claimed before the lock file goes in: a folder of the user's is refused untouched.
        run_directory = RunDirectory(own_dir)
        with run_lock(own_dir):
            run_directory.remove_stray_temporaries()  # a killed writer's; none in flight
            return _run(config, run_directory, split, inputs, strategy)


def _run(config: Config, run_directory: RunDirectory, split: RetrievalSplit,
         inputs: list[InputFile], strategy) -> dict:
    from sgh.reports.tensorboard_views import write_run_summary

    check_recorded_configuration(run_directory, config)
    refuse_other_data(run_directory, inputs)
    previous = run_directory.recorded_metrics()  # None: none yet, or damaged (written again)
    # Finished work is never recorded again, nor under other settings (another run, or a
    # re-scoring): this very run gives its results as they were, no file touched. A cluster's
    # workers all take part in the collective steps: the chief goes through them too.
    if previous is not None and not _in_a_cluster(strategy) and \
            check_recorded_configuration(run_directory, config, previous):
        logger.info("%s holds this run, finished; its results:", run_directory.path)
        logger.info("%s", results_table(previous, run_title(previous), config.eval),
                    extra={"plain": True})
        return previous
    run_directory.write_config(config)
    run_directory.write_inputs(inputs)
    logger.info("%s: train %s, database %s, queries %s; %s", split.name, split.train.shape,
                split.database.shape, split.query.shape, split.protocol)

    if METHODS[config.model.name].uses_tensorflow:  # training resumes from the run directory
        from sgh.training.train_sgh import train_sgh

        encoded = train_sgh(config, split, run_directory, strategy)
    else:
        from sgh.baselines.fitting import fit_baseline

        encoded = fit_baseline(config, split)
    groundtruth, groundtruth_source = split_ground_truth(split, config.eval.recall_k, partial(
        cached_exact_neighbours, dataset_path=getattr(config.dataset, "path", None)))
    codes = {"database": encoded.database, "query": encoded.query,
             "bits": np.int64(config.model.bits), "groundtruth": groundtruth}
    if encoded.scores is not None:  # for sgh-eval run=DIR eval.ranking=...
        run_directory.write_asymmetric_score(encoded.scores)
        codes["fingerprint"] = np.str_(encoded.scores.fingerprint)
    if split.has_labels:
        codes.update(database_labels=split.database_labels, query_labels=split.query_labels)
    logger.info("scoring the codes: %s queries against %s database items", f"{len(split.query):,}",
                f"{len(split.database):,}")
    ranking = evaluation_ranking(config.eval, encoded.database, encoded.scores, split.query,
                                 split.database, encoded.without_scores, split.train)
    metrics = {
        "dataset": split.name, "method": config.model.name, "bits": config.model.bits,
        "seed": config.trainer.seed, **encoded.fields,
        **score(encoded.database, encoded.query, config.model.bits, config.eval,
                split.database_labels, split.query_labels, groundtruth, ranking),
        "similarity": split.similarity, "protocol": split.protocol,
        "feature_conversion": split.feature_conversion,
        "groundtruth": f"{groundtruth.shape[1]} neighbours per query, {groundtruth_source}",
        **RESULT_CONVENTIONS,
    }
    # What an index of the run serves, scored beside the codes' own ranking.
    if config.eval.ranking != "bytes" and (
            searched := byte_decoder_ranking(encoded.scores, split.database, split.query,
                                             config.eval.encoding)):
        metrics.update(score_search(searched, "byte_decoder_", config.eval, len(split.database),
                                    split.database_labels, split.query_labels, groundtruth),
                       byte_decoder_index_encoding=searched.index.encoding)
    run_directory.write_codes(**codes)
    run_directory.write_metrics(metrics)
    with run_directory.summary_writer():
        write_run_summary(config, metrics, split, codes)

    logger.info("%s", results_table(metrics, run_title(metrics), config.eval),
                extra={"plain": True})
    if warning := collapse_warning(metrics, config.model.bits):
        logger.warning("%s", warning)
    logger.info("run directory: %s", run_directory.path)
    return metrics


def _in_a_cluster(strategy) -> bool:
    if strategy is None:  # TensorFlow's: imported only to train
        return False
    from sgh.training.devices import is_multi_worker

    return is_multi_worker(strategy)


def _refuse_a_ranking_the_method_cannot_give(config: Config) -> None:
    """Before training: the scan and two_stage rankings need the scores they name."""
    evaluation = config.eval
    check_encoding_setting(evaluation.encoding)
    if evaluation.ranking == "bytes" and not METHODS[config.model.name].uses_tensorflow:
        from sgh.baselines.fitting import baseline_class

        reason = baseline_class(config.model.name).without_asymmetric  # SH, SpH
        if reason is not None:
            raise UserInputError(f"eval.ranking=bytes codes the database by a byte decoder from "
                                 f"the method's encoder score, and model={config.model.name}: "
                                 f"{reason}; accepted: eval.ranking=hamming")
    if evaluation.ranking not in ("scan", "two_stage"):
        return
    scan = evaluation.ranking == "scan"
    setting = f"eval.ranking={evaluation.ranking} (eval.score={evaluation.score})"
    if METHODS[config.model.name].uses_tensorflow and config.model.decoder == "bytes":
        reason = (None if evaluation.score in ("auto", "encoder") else
                  "model.decoder=bytes has no decoder or joint score: its byte decoder ranks "
                  "codes of its own, the byte decoder index's (scored beside the codes' "
                  "ranking; eval.score=encoder scans)")
    elif METHODS[config.model.name].uses_tensorflow:
        # An mlp decoder rescores a shortlist by decoding it, but has no per-bit tables to scan.
        reason = (None if config.model.decoder == "linear" or not scan
                  or evaluation.score in ("auto", "encoder")
                  else f"{ASYMMETRIC_NEEDS_LINEAR_DECODER} (eval.score=encoder scans, and "
                       "eval.ranking=two_stage decodes a shortlist for the decoder and joint "
                       "scores)")
    else:
        from sgh.baselines.fitting import baseline_class

        reason = baseline_class(config.model.name).without_asymmetric  # SH, SpH
        if reason is None and evaluation.score not in ("auto", "encoder"):  # LSH, PCAH, ITQ
            reason = ("its one score is its projection's, an encoder score; accepted: "
                      "eval.score=auto or encoder")
    if reason is not None:
        raise UserInputError(f"{setting} needs a score, and model={config.model.name}: {reason}; "
                             "accepted: eval.ranking=hamming")
