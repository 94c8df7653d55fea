"""Choosing SGH's asymmetric score on the validation split, once, after training.

`eval.score=auto` takes the score the validation split favours among the encoder's, the
decoder's (per-bit, or decoded for an mlp decoder) and the joint one at each of `JOINT_WEIGHTS`:
for a scan the best per-bit one, for rescoring the best of all. The figure is the Recall K@100 of
the held-out queries against every other training item (up to `SELECTION_DATABASE`), ties by id:
on model selection's smaller sample the scores can rank in another order (docs/guide/search.md).
The same split chooses the byte decoder's encoding (`sgh.training.encoding_choice`).
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from sgh.config import RECALL_CUTOFF, SCORE_KINDS
from sgh.data.neighbours import exact_neighbours
from sgh.data.similarity import NEIGHBOUR_LABELS
from sgh.data.streamed_features import Features, take_rows
from sgh.model.encoding import encode_packed
from sgh.model.sgh_model import SGH
from sgh.scores.asymmetric import joint_score
from sgh.scores.asymmetric_index import AsymmetricIndex, smallest_by_score_then_id
from sgh.scores.decoded import DecodedRescorer
from sgh.scores.score_set import ScoreSet
from sgh.training.encoding_choice import EncodingChoice, byte_decoder_choice
from sgh.training.holdout import ValidationSet

logger = logging.getLogger(__name__)

# The validation database of the choice: every training item up to this many (a sample beyond).
SELECTION_DATABASE = 100_000
# The weights lambda of the decoder's likelihood tried in the joint score.
JOINT_WEIGHTS = (1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0, 2.0)
# Queries scored at a time (three float64 score matrices of this many rows by the database).
_QUERY_BLOCK = 128
_SAMPLE_SEED = 4


def select_scores(model: SGH, validation: ValidationSet | None, train_items: Features,
                  similarity: str, recall_k: int) -> ScoreSet:
    """The model's scores, and the kinds the validation split favours (module doc)."""
    per_bit = model.asymmetric_scores(similarity)
    network = model.decoder_network()
    database = _selection_database(train_items)
    logger.info("fitting the byte decoder on %s training items%s", f"{len(database):,}",
                "; choosing the scores and its encoding on the validation split"
                if validation is not None else "")
    if validation is None:
        return score_set(model, per_bit, network, similarity, 1.0, "encoder", "encoder",
                         "no validation split (validation.every=0): eval.score=auto is the "
                         "encoder score, eval.score=joint weighs the decoder's likelihood 1", {},
                         byte_decoder_choice(model, per_bit["encoder"], database))
    groundtruth = exact_neighbours(validation.query, database, recall_k, similarity)
    bytes_choice = byte_decoder_choice(model, per_bit["encoder"], database, validation.query,
                                       groundtruth, recall_k)
    if network is None and "decoder" not in per_bit:  # the encoder's is the one per-bit score
        return score_set(model, per_bit, None, similarity, 1.0, "encoder", "encoder",
                         "model.decoder=bytes: the encoder score is the one per-bit score; the "
                         "byte decoder ranks its own codes", {}, bytes_choice)
    figures = _validation_recalls(model, per_bit, network, encode_packed(model, database),
                                  validation.query, groundtruth, recall_k, similarity)
    weight = max(JOINT_WEIGHTS, key=lambda w: (figures[("joint", w)], -abs(np.log2(w))))
    by_kind = {"encoder": figures[("encoder", None)], "decoder": figures[("decoder", None)],
               "joint": figures[("joint", weight)]}
    scannable = [kind for kind in SCORE_KINDS if network is None or kind == "encoder"]
    # Ties go to the earlier kind of SCORE_KINDS: the encoder, which needs the least.
    chosen = max(scannable, key=lambda kind: (by_kind[kind], -SCORE_KINDS.index(kind)))
    rescore = max(SCORE_KINDS, key=lambda kind: (by_kind[kind], -SCORE_KINDS.index(kind)))
    label = f"recall{recall_k}@{RECALL_CUTOFF}"
    weights = ", ".join(f"{w:g}" for w in JOINT_WEIGHTS)
    selection = (f"validation {label.capitalize()} of the whole validation database ranked by "
                 f"each score (ties by id), exact {NEIGHBOUR_LABELS[similarity]} neighbours; "
                 f"{len(validation.query)} held-out training queries vs {len(database)} training "
                 f"items; joint weight {weight:g}, the best of {weights}")
    validation_figures = {f"{kind}" + (" (decoded)" if network is not None and kind != "encoder"
                                       else ""): value for kind, value in by_kind.items()}
    validation_figures.update({f"joint {w:g}": figures[("joint", w)] for w in JOINT_WEIGHTS})
    logger.info("asymmetric score: %s for a scan, %s for rescoring (validation %s: %s)", chosen,
                rescore, label, ", ".join(f"{name} {value:.4f}" for name, value in
                                           validation_figures.items()))
    return score_set(model, per_bit, network, similarity, weight, chosen, rescore, selection,
                     validation_figures, bytes_choice)


def score_set(model: SGH, per_bit: dict, network, similarity: str, weight: float, chosen: str,
              rescore: str, selection: str, validation: dict,
              bytes_choice: EncodingChoice | None) -> ScoreSet:
    """The `ScoreSet` of `per_bit` scores, with the joint one at `weight`, and these choices."""
    scores = ScoreSet(with_joint(model, per_bit, weight), chosen, rescore, weight, selection,
                      validation, similarity, network)
    if bytes_choice is None:
        return scores
    return dataclasses.replace(scores, byte_decoder=bytes_choice.decoder,
                               encoding=bytes_choice.encoding, encodings=bytes_choice.figures)


def with_joint(model: SGH, per_bit: dict, weight: float) -> dict:
    """`per_bit` scores, and the joint one at `weight` where there is a decoder score."""
    scores = dict(per_bit)
    if "decoder" in per_bit:
        scores["joint"] = joint_score(per_bit["encoder"], per_bit["decoder"], weight,
                                      model.noise_variance())
    return scores


def _selection_database(train_items: Features) -> np.ndarray:
    """Every training item, or a fixed sample of `SELECTION_DATABASE` of them (sorted ids)."""
    n = len(train_items)
    ids = np.arange(n) if n <= SELECTION_DATABASE else np.sort(
        np.random.default_rng(_SAMPLE_SEED).choice(n, SELECTION_DATABASE, replace=False))
    return np.asarray(take_rows(train_items, ids))


def _validation_recalls(model: SGH, per_bit: dict, network, codes: np.ndarray,
                        queries: np.ndarray, groundtruth: np.ndarray, recall_k: int,
                        similarity: str) -> dict:
    """``{(kind, weight): Recall K@100}`` of each candidate (module doc)."""
    encoder = AsymmetricIndex(per_bit["encoder"], codes)
    if network is None:
        decoder = AsymmetricIndex(per_bit["decoder"], codes)
        # The per-bit decoder score omits a per-query constant and is stored / unit: in input
        # units it is D * unit, and its likelihood divides by 2 sigma^2 in the same units.
        unit, variance = per_bit["decoder"].unit, model.noise_variance()
    else:
        decoder = DecodedRescorer(network, codes, similarity)  # normalised units
        unit, variance = 1.0, network.noise_variance
    everything = np.broadcast_to(np.arange(len(codes)), (_QUERY_BLOCK, len(codes)))
    whole = _QUERY_BLOCK * len(codes)
    candidates = [("encoder", None), ("decoder", None), *(("joint", w) for w in JOINT_WEIGHTS)]
    hits = dict.fromkeys(candidates, 0)
    for q0 in range(0, len(queries), _QUERY_BLOCK):
        block = queries[q0 : q0 + _QUERY_BLOCK]
        ids = everything[: len(block)]
        encoder_scores = next(encoder.score_blocks(block, whole))[2].astype(np.float64)
        if network is None:
            decoder_scores = next(decoder.score_blocks(block, whole))[2].astype(np.float64) * unit
        else:
            decoder_scores = decoder.scores(block, ids)
        truth = groundtruth[q0 : q0 + len(block), :recall_k]
        for kind, weight in candidates:
            scores = (encoder_scores if kind == "encoder" else decoder_scores if kind == "decoder"
                      else encoder_scores + weight / (2.0 * variance) * decoder_scores)
            _, top = smallest_by_score_then_id(scores, RECALL_CUTOFF)
            hits[kind, weight] += int((top[:, :, None] == truth[:, None, :]).any(axis=1).sum())
    return {key: value / (len(queries) * recall_k) for key, value in hits.items()}

