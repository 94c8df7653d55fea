"""Choosing the training recipe on the validation split: `validation.candidates`.

A recipe chosen on one dataset need not transfer to another: a run trains each candidate on the
same split, each stopped early by `validation.patience`, and keeps the one whose validation
figure for the search the codes are made for is highest (`search_figure`), the earlier on a tie.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from sgh.artifacts.run_directory import CHOSEN_KEY
from sgh.config import Config, candidate_config
from sgh.data.streamed_features import Features
from sgh.errors import UserInputError
from sgh.model.sgh_model import SGH
from sgh.scores.score_set import ScoreSet
from sgh.training.holdout import ValidationSet
from sgh.training.score_selection import select_scores

logger = logging.getLogger(__name__)


@dataclass
class Choice:
    """The chosen model (best validated weights), its scores and the run's SGH fields."""

    model: SGH
    scores: ScoreSet
    fields: dict


def search_figure(config: Config, search: str, scores: ScoreSet, trained: dict) -> float:
    """A trained candidate's validation figure for `search`: the Recall K@100 of the score it
    would scan or rescore with, or of its byte decoder's index at the encoding validation chose
    (NaN where it has none), or for Hamming ranking the best `validation.metric`."""
    if search == "hamming":
        return trained[f"best_validation_{trained['validation_metric']}"]
    if search == "bytes":
        return scores.encodings.get(scores.encoding, math.nan)
    try:
        kind = scores.kind_for(config.eval.score, search)
    except ValueError as error:
        raise UserInputError(str(error)) from None
    return scores.validation_figure(kind)


def fit_and_score(config: Config, train_items: Features, validation: ValidationSet | None,
                  similarity: str, search: str,
                  fit: Callable[[Config, str | None], tuple[SGH, dict]]) -> Choice:
    """The `Choice` of `fit(config, None)`, or the best for `search` of the candidates' fits."""
    recall_k = config.eval.recall_k
    if not config.validation.candidates:
        model, trained = fit(config, None)
        scores = select_scores(model, validation, train_items, similarity, recall_k)
        return Choice(model, scores, {**trained, **scores.metrics_fields(recall_k)})
    names = list(config.validation.candidates)
    best: tuple[str, SGH, dict, ScoreSet] | None = None
    report, seconds, budget = {}, 0.0, 0
    for number, name in enumerate(names, 1):
        candidate = candidate_config(config, name)
        budget += candidate.trainer.steps
        logger.info("candidate recipe %d of %d, %r: %s", number, len(names), name,
                    config.validation.candidates[name])
        model, trained = fit(candidate, name)
        scores = select_scores(model, validation, train_items, similarity, recall_k)
        figure = search_figure(candidate, search, scores, trained)
        report[name] = {"validation": figure, "steps": trained["steps"],
                        "best_step": trained.get("best_step"),
                        "train_seconds": trained["train_seconds"]}
        seconds += trained["train_seconds"]
        # A NaN figure (no scorable validation query) never beats another.
        if best is None or figure > report[best[0]]["validation"] \
                or math.isnan(report[best[0]]["validation"]):
            best = (name, model, trained, scores)
    chosen, model, trained, scores = best
    # The figure in words, for metrics.json and the results table.
    described = (f"best validation {config.validation.metric} (Hamming ranking)"
                 if search == "hamming" else
                 f"validation Recall{recall_k}@100 of its byte decoder index (the encoding "
                 "validation chose)" if search == "bytes" else
                 f"validation Recall{recall_k}@100 of its "
                 f"{'scan' if search == 'scan' else 'rescoring'} score, "
                 f"eval.score={config.eval.score}")
    logger.info("recipe: %r chosen, %s: %s", chosen, described,
                ", ".join(f"{name} {entry['validation']:.4f}" for name, entry in report.items()))
    fields = {**trained, **scores.metrics_fields(recall_k),
              "train_seconds": seconds,  # every candidate's, this process's part
              CHOSEN_KEY: chosen, "recipe_candidates": report, "recipe_figure": described,
              "recipe_budget_steps": budget,
              "recipe_convention": (
                  "each candidate trained on the same split, early-stopped by "
                  f"validation.patience={config.validation.patience}; chosen by the highest "
                  f"{described} (ties: the earlier candidate); steps, best_step and the other "
                  "training fields are the chosen one's, train_seconds every candidate's")}
    return Choice(model, scores, fields)
