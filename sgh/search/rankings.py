"""Whole rankings of the database for evaluation: `SGHIndex`'s own search in the mode that
`eval.ranking` names (scan, two_stage, bytes), so that what is scored is what the index serves.

The metrics of :mod:`sgh.metrics.ordered` score a ranking given as ids in rank order, the first
``depth`` of each query; the Hamming ranking has its own tie-aware engine (:mod:`sgh.metrics`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from sgh.data.streamed_features import Features, evenly_spaced, iter_chunks, take_rows
from sgh.errors import UserInputError
from sgh.scores.asymmetric import ASYMMETRIC_NEEDS_LINEAR_DECODER
from sgh.scores.byte_decoder import FIT_ROWS
from sgh.scores.score_set import ScoreSet
from sgh.search.sgh_index import SGHIndex

logger = logging.getLogger(__name__)

BLOCK_ENTRIES = 1 << 22  # entries (query x database item) of one block of rankings


def block_queries(depth: int) -> int:
    """Queries per block so that a block holds at most `BLOCK_ENTRIES` ids."""
    return max(1, BLOCK_ENTRIES // max(1, depth))


@dataclass
class IndexRanking:
    """The database ranked by an `SGHIndex`'s own search of the query features (what the index
    serves is what is scored), ties by id. Ids are database rows."""

    index: SGHIndex
    queries: np.ndarray
    description: str  # the results file's `ranking`

    def order_blocks(self, depth: int) -> Iterator[tuple[int, int, np.ndarray]]:
        depth = min(depth, self.index.ntotal)
        step = block_queries(depth)
        for q0 in range(0, len(self.queries), step):
            q1 = min(q0 + step, len(self.queries))
            yield q0, q1, self.index.search(self.queries[q0:q1], depth)[1]


@dataclass
class TwoStageRanking:
    """``index`` (mode two_stage)'s search at its shortlist S, then the rest of the database in
    its first stage's order (the encoder score's scan, the shortlist's own order, which the
    index's mode scan gives where its chosen score is the encoder's): for every N <= S its first
    N are what ``index.search(k=N)`` returns. Ids are database rows."""

    index: SGHIndex
    queries: np.ndarray
    description: str  # the results file's `ranking`

    def order_blocks(self, depth: int) -> Iterator[tuple[int, int, np.ndarray]]:
        n = self.index.ntotal
        depth, shortlist = min(depth, n), min(self.index.shortlist, n)
        step = block_queries(max(depth, shortlist))
        for q0 in range(0, len(self.queries), step):
            q1 = min(q0 + step, len(self.queries))
            rescored = self.index.search(self.queries[q0:q1], shortlist)[1]
            if depth <= shortlist:
                yield q0, q1, rescored[:, :depth]
                continue
            # The rest: the first stage's first `depth` ids less the shortlisted ones, in its
            # order. At least depth - S remain, so the row fills up, each id once (a deeper
            # first stage may leave out a shortlisted id, never put it twice).
            order = self._first_stage_order(self.queries[q0:q1], depth)
            merged = np.empty((q1 - q0, depth), np.int64)
            for row, (first, ordered) in enumerate(zip(rescored, order, strict=True)):
                rest = ordered[~np.isin(ordered, first)]
                merged[row] = np.concatenate([first, rest])[:depth]
            yield q0, q1, merged

    def _first_stage_order(self, queries: np.ndarray, depth: int) -> np.ndarray:
        """The encoder score's scan, by the same index and its engine of the shortlist."""
        self.index.mode = "scan"
        try:
            return self.index.search(queries, depth)[1]
        finally:
            self.index.mode = "two_stage"


def byte_decoder_ranking(scores: ScoreSet | None, database: Features, queries: np.ndarray,
                         encoding: str = "auto",
                         train: Features | None = None) -> IndexRanking | None:
    """The ranking of ``SGHIndex(scores, mode="bytes", encoding=encoding)`` (``auto``: the
    validated one, `eval.encoding`'s default) holding
    ``database`` (features, ids = rows); where the scores bring no byte decoder, one fitted on
    ``train`` (None: no ranking)."""
    if scores is None or (scores.byte_decoder is None and train is None):
        return None
    index = SGHIndex(scores, mode="bytes", encoding=None if encoding == "auto" else encoding)
    # Coding a large database (local search) takes a while: say what the wait is for.
    logger.info("coding the %s database items by the byte decoder (encoding %s), then scoring "
                "its index", f"{len(database):,}", index.encoding)
    if not index.is_trained:
        index.train(np.asarray(take_rows(train, evenly_spaced(len(train), FIT_ROWS)), np.float32))
    for _, rows in iter_chunks(database):  # in memory or streamed; ids: the rows
        index.add(rows)
    return IndexRanking(index, queries, "bytes: SGHIndex(mode='bytes', encoding="
                        f"{index.encoding!r}), its flat scan of every code, ties by id")


def served_scan_ranking(scores: ScoreSet, kind: str, database_codes: np.ndarray,
                        queries: np.ndarray) -> IndexRanking:
    """The ranking of ``SGHIndex(scores)`` scanning by ``kind`` (ids = rows): what the index
    serves, with its refine factor, is what is scored."""
    index = _index_of(dataclasses.replace(scores, chosen=kind), "scan", database_codes)
    return IndexRanking(index, queries, (
        f"scan: {scores.scores[kind].form}; SGHIndex(mode='scan')'s search at the depth "
        "scored (the whole database with labels, else the largest N): faiss's fast scan, its "
        f"top {index.refine_factor} x depth rescored by the exact score, ties by id"))


def two_stage_ranking(scores: ScoreSet, kind: str, database_codes: np.ndarray,
                      queries: np.ndarray, shortlist: int) -> TwoStageRanking:
    """The ranking of ``SGHIndex(scores, mode="two_stage")`` with ``shortlist``, rescoring by
    ``kind`` (ids = rows), then the encoder score's scan order beyond the shortlist."""
    index = _index_of(dataclasses.replace(scores, chosen="encoder", rescore_chosen=kind),
                      "two_stage", database_codes)
    index.shortlist = shortlist
    return TwoStageRanking(index, queries, (
        f"two_stage: SGHIndex(mode='two_stage', shortlist={shortlist})'s search: the top "
        f"{shortlist} by the {scores.scores['encoder'].form} (faiss's fast scan, its top "
        f"{index.refine_factor} x {shortlist} rescored by the exact score), reordered by the "
        f"{scores.rescoring_form(kind)}; then the rest of the database in the encoder score's "
        "order; ties by id"))


def _index_of(scores: ScoreSet, mode: str, database_codes: np.ndarray) -> SGHIndex:
    index = SGHIndex(scores, mode)
    index.add_codes(database_codes)  # ids: the database rows
    return index


def evaluation_ranking(config, database_codes: np.ndarray, scores: ScoreSet | None = None,
                       queries: np.ndarray | None = None, database_vectors=None,
                       without_score: str = "this method has no asymmetric score",
                       train_vectors=None):
    """The ranking `eval` (``config``, an `EvalConfig`) asks for (None: Hamming, scored by the
    tie-aware engine); UserInputError when it needs what is missing (``scores`` None:
    ``without_score`` says why; ``database_vectors``: for ``bytes``, whose index fits its byte
    decoder on ``train_vectors`` where the scores bring none)."""
    if config.ranking == "hamming":
        return None
    if config.ranking == "bytes":
        if scores is None or queries is None or database_vectors is None:
            missing = without_score if scores is None else "a codes file holds no features"
            raise UserInputError(
                "eval.ranking=bytes searches the features with a byte decoder index "
                f"(SGHIndex(mode='bytes')), and {missing}; accepted: sgh-eval run=DIR of a "
                "run of SGH, ITQ, PCAH or LSH, or eval.ranking=hamming")
        try:
            ranking = byte_decoder_ranking(scores, database_vectors, queries, config.encoding,
                                           train_vectors)
        except ValueError as error:
            raise UserInputError(str(error)) from None
        if ranking is None:
            raise UserInputError("eval.ranking=bytes: the method's scores bring no byte "
                                 "decoder, and no training features were given to fit one; "
                                 "accepted: train_vectors=... (sgh-eval run=DIR reads them)")
        return ranking
    rule = f"eval.ranking={config.ranking}"
    if scores is None:
        raise UserInputError(f"{rule} needs an asymmetric score, and {without_score}; accepted: "
                             "eval.ranking=hamming")
    if queries is None:
        raise UserInputError(f"{rule} scores the query features, which a codes file does not "
                             "hold; re-score a run with sgh-eval run=DIR instead of codes=FILE")
    try:
        kind = scores.kind_for(config.score, config.ranking)
    except ValueError as error:
        # An mlp decoder's kinds exist, decoded: never a scan's (no templates hT + t).
        decoded = config.ranking == "scan" and scores.decoder is not None \
            and config.score in ("decoder", "joint")
        why = (f"; {ASYMMETRIC_NEEDS_LINEAR_DECODER}, so it ranks a shortlist by decoding "
               "it: accepted: eval.ranking=two_stage, or eval.score=encoder" if decoded else "")
        raise UserInputError(str(error) + why) from None
    if config.ranking == "scan":
        return served_scan_ranking(scores, kind, database_codes, queries)
    return two_stage_ranking(scores, kind, database_codes, queries, config.shortlist)
