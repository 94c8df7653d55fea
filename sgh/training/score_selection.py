"""Choosing SGH's asymmetric score on the validation split, once, after training.

SGH can score a real query against a binary code three ways (`sgh.search.asymmetric`): by its
encoder's likelihood ``-log q(h|x)``, by its decoder's reconstruction distance, or by both,
``-log q(h|x) - lambda log p(x|h)``. Which ranks best depends on the model and the data, so
`eval.score=auto` takes the one the validation split favours, and the choice travels with the
run (`sgh.search.score_set`).

The validation figure: Recall K@100 (K = `eval.recall_k`, the exact K nearest neighbours by the
split's similarity) when every item of the validation database is ranked by the score, ties by
id. The queries are the held-out validation queries (never trained on, never the test queries);
the database is every other training item, up to :data:`SELECTION_DATABASE` (a fixed sample
beyond). Not the 10,000-item sample of model selection: its top 100 is a share of the database
seven times larger than the test protocol's (MNIST: 69,000 items), and on it the scores can
rank in another order than on the test queries, where on the whole training set they rank as
there (docs/guide/search.md).

Candidates: the encoder score; the decoder score (per-bit for the linear decoder, decoded for an
mlp one); and the joint score at each weight of :data:`JOINT_WEIGHTS`. The scan of the whole
database (`eval.ranking=asymmetric`) takes the best per-bit one (`ScoreSet.chosen`); rescoring a
shortlist takes the best of all (`ScoreSet.rescore_chosen`).
"""

from __future__ import annotations

import logging

import numpy as np

from sgh.config import SCORE_KINDS
from sgh.data.neighbours import exact_neighbours
from sgh.data.similarity import NEIGHBOUR_LABELS
from sgh.data.streamed_features import Features, take_rows
from sgh.model.encoding import encode_packed
from sgh.model.sgh_model import SGH
from sgh.search.asymmetric import joint_score
from sgh.search.asymmetric_index import AsymmetricIndex, smallest_by_score_then_id
from sgh.search.decoded import DecodedRescorer
from sgh.search.score_set import ScoreSet
from sgh.training.holdout import ValidationSet

logger = logging.getLogger(__name__)

# The validation database of the choice: every training item up to this many (a sample beyond).
SELECTION_DATABASE = 100_000
# The weights lambda of the decoder's likelihood tried in the joint score.
JOINT_WEIGHTS = (1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0, 2.0)
# The rank cut-off of the validation figure: Recall K@100, the paper's.
CUTOFF = 100
# Queries scored at a time (three float64 score matrices of this many rows by the database).
_QUERY_BLOCK = 128
_SAMPLE_SEED = 4


def select_scores(model: SGH, validation: ValidationSet | None, train_items: Features,
                  similarity: str, recall_k: int) -> ScoreSet:
    """The model's scores, and the kinds the validation split favours (module doc).

    Without a validation split (`validation.every=0`) nothing is chosen on data: the encoder
    score, which needs no weight, and the joint score at weight 1 (the two likelihoods as they
    are) are what `auto` and `joint` mean.
    """
    per_bit = model.asymmetric_scores(similarity)
    network = model.decoder_network()
    if validation is None:
        return _scores(model, per_bit, network, similarity, 1.0, "encoder", "encoder",
                       "no validation split (validation.every=0): eval.score=auto is the "
                       "encoder score, eval.score=joint weighs the decoder's likelihood 1", {})
    database = _selection_database(train_items)
    groundtruth = exact_neighbours(validation.query, database, recall_k, similarity)
    codes = encode_packed(model, database)
    figures = _validation_recalls(model, per_bit, network, codes, validation.query,
                                  groundtruth, recall_k, similarity)
    weight = max(JOINT_WEIGHTS, key=lambda w: (figures[("joint", w)], -abs(np.log2(w))))
    by_kind = {"encoder": figures[("encoder", None)], "decoder": figures[("decoder", None)],
               "joint": figures[("joint", weight)]}
    scannable = [kind for kind in SCORE_KINDS if network is None or kind == "encoder"]
    # Ties go to the earlier kind of SCORE_KINDS: the encoder, which needs the least.
    chosen = max(scannable, key=lambda kind: (by_kind[kind], -SCORE_KINDS.index(kind)))
    rescore = max(SCORE_KINDS, key=lambda kind: (by_kind[kind], -SCORE_KINDS.index(kind)))
    label = f"recall{recall_k}@{CUTOFF}"
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
    return _scores(model, per_bit, network, similarity, weight, chosen, rescore, selection,
                   validation_figures)


def _scores(model: SGH, per_bit: dict, network, similarity: str, weight: float, chosen: str,
            rescore: str, selection: str, validation: dict) -> ScoreSet:
    scores = dict(per_bit)
    if "decoder" in per_bit:
        scores["joint"] = joint_score(per_bit["encoder"], per_bit["decoder"], weight,
                                      model.noise_variance())
    return ScoreSet(scores, chosen, rescore, weight, selection, validation, similarity, network)


def _selection_database(train_items: Features) -> np.ndarray:
    """Every training item, or a fixed sample of `SELECTION_DATABASE` of them (sorted ids)."""
    n = len(train_items)
    if n <= SELECTION_DATABASE:
        return np.asarray(take_rows(train_items, np.arange(n)))
    ids = np.sort(np.random.default_rng(_SAMPLE_SEED).choice(n, SELECTION_DATABASE,
                                                              replace=False))
    return np.asarray(take_rows(train_items, ids))


def _validation_recalls(model: SGH, per_bit: dict, network, codes: np.ndarray,
                        queries: np.ndarray, groundtruth: np.ndarray, recall_k: int,
                        similarity: str) -> dict:
    """``{(kind, weight): Recall K@100}`` of each candidate (module doc)."""
    encoder = AsymmetricIndex(per_bit["encoder"])
    encoder.add(codes)
    if network is None:
        decoder = AsymmetricIndex(per_bit["decoder"])
        decoder.add(codes)
        # The per-bit decoder score omits a per-query constant and is stored / unit: in input
        # units it is D * unit, and its likelihood divides by 2 sigma^2 in the same units.
        unit, variance = per_bit["decoder"].unit, model.noise_variance()
    else:
        decoder = DecodedRescorer(network, codes, similarity)  # normalised units
        unit, variance = 1.0, network.noise_variance
    everything = np.broadcast_to(np.arange(len(codes)), (_QUERY_BLOCK, len(codes)))
    whole = _QUERY_BLOCK * len(codes)
    hits: dict = {}
    candidates = [("encoder", None), ("decoder", None), *(("joint", w) for w in JOINT_WEIGHTS)]
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
            if kind == "encoder":
                scores = encoder_scores
            elif kind == "decoder":
                scores = decoder_scores
            else:
                scores = encoder_scores + weight / (2.0 * variance) * decoder_scores
            _, top = smallest_by_score_then_id(scores, CUTOFF)
            hits[kind, weight] = hits.get((kind, weight), 0) + int(
                (top[:, :, None] == truth[:, None, :]).any(axis=1).sum())
    return {key: value / (len(queries) * recall_k) for key, value in hits.items()}

