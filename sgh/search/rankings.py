"""Whole rankings of the database for evaluation: an `SGHIndex`'s own search (the asymmetric
scan, the byte decoder's), or a shortlist rescored.

The metrics of :mod:`sgh.metrics.ordered` score a ranking given as ids in rank order, the first
``depth`` of each query; the Hamming ranking has its own tie-aware engine (:mod:`sgh.metrics`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from sgh.codes import as_words, popcount
from sgh.data.streamed_features import Features, evenly_spaced, iter_chunks, take_rows
from sgh.errors import UserInputError
from sgh.scores.asymmetric import ASYMMETRIC_NEEDS_LINEAR_DECODER
from sgh.scores.asymmetric_index import AsymmetricIndex
from sgh.scores.byte_decoder import FIT_ROWS
from sgh.scores.score_set import ScoreSet
from sgh.search.sgh_index import SGHIndex
from sgh.search.two_stage import TwoStageSearch

BLOCK_ENTRIES = 1 << 22  # entries (query x database item) of one block of rankings


def block_queries(n_database: int, depth: int) -> int:
    """Queries per block so that a block holds at most `BLOCK_ENTRIES` scores or ids."""
    return max(1, BLOCK_ENTRIES // max(1, n_database, depth))


def hamming_distances(query_codes: np.ndarray, database_codes: np.ndarray) -> np.ndarray:
    """``(nq, n)`` uint16 Hamming distances (a dense block; callers keep nq * n bounded)."""
    query_words, database_words = as_words(query_codes), as_words(database_codes)
    distances = np.zeros((len(query_words), len(database_words)), np.uint16)
    for w in range(query_words.shape[1]):
        distances += popcount(query_words[:, w, None] ^ database_words[None, :, w])
    return distances


def order_of_distances(distances: np.ndarray, depth: int) -> np.ndarray:
    """The first ``depth`` ids of each row of integer distances, ties by id."""
    if depth >= distances.shape[1]:
        return np.argsort(distances, axis=1, kind="stable")  # radix sort of uint16
    keys = distances.astype(np.int64) * distances.shape[1] + np.arange(distances.shape[1])
    top = np.argpartition(keys, depth - 1, axis=1)[:, :depth]
    return np.take_along_axis(top, np.argsort(np.take_along_axis(keys, top, 1), 1), 1)


@dataclass
class RerankRanking:
    """The shortlist (the Hamming top S or radius, or the encoder score's top S) rescored, then
    the rest of the database in the first stage's order, ties by id: what a two-stage search
    returns if asked for more than its shortlist holds."""

    search: TwoStageSearch
    query_codes: np.ndarray
    queries: np.ndarray
    rescore: str
    shortlist: int | None = 1000
    radius: int | None = None
    description: str = "rerank"  # the results file's `ranking`

    def _first_stage(self, q0: int, q1: int, reach: int) -> tuple[np.ndarray, np.ndarray]:
        """(the first ``reach`` ids of each query's first-stage order, its shortlist lengths)."""
        if self.search.shortlist_index is not None:  # the encoder score's order
            order = _score_order(self.search.shortlist_index, self.queries[q0:q1], reach)
        else:
            distances = hamming_distances(self.query_codes[q0:q1], self.search.hamming.codes())
            order = order_of_distances(distances, reach)
            if self.radius is not None:
                return order, (distances <= self.radius).sum(axis=1)
        return order, np.full(q1 - q0, min(self.shortlist, self.search.hamming.ntotal))

    def order_blocks(self, depth: int) -> Iterator[tuple[int, int, np.ndarray]]:
        n = self.search.hamming.ntotal
        depth = min(depth, n)
        reach = n if self.radius is not None else min(n, max(depth, self.shortlist))
        step = block_queries(n, reach)
        for q0 in range(0, len(self.queries), step):
            q1 = min(q0 + step, len(self.queries))
            order, lengths = self._first_stage(q0, q1, reach)
            width = int(lengths.max(initial=0))
            candidates = np.where(np.arange(width) < lengths[:, None], order[:, :width], -1)
            _, rescored = self.search.rescore(self.queries[q0:q1], candidates, self.rescore)
            # Row r: its rescored shortlist (padding sorts last), then its first-stage order.
            merged = order.copy()
            merged[:, :width] = np.where(candidates >= 0, rescored, order[:, :width])
            yield q0, q1, merged[:, :depth]


@dataclass
class IndexRanking:
    """The database ranked by an `SGHIndex`'s own search of the query features (what the index
    serves is what is scored), ties by id. Ids are database rows."""

    index: SGHIndex
    queries: np.ndarray
    description: str  # the results file's `ranking`

    def order_blocks(self, depth: int) -> Iterator[tuple[int, int, np.ndarray]]:
        depth = min(depth, self.index.ntotal)
        step = block_queries(0, depth)
        for q0 in range(0, len(self.queries), step):
            q1 = min(q0 + step, len(self.queries))
            yield q0, q1, self.index.search(self.queries[q0:q1], depth)[1]


def byte_decoder_ranking(scores: ScoreSet | None, database: Features, queries: np.ndarray,
                         encoding: str = "auto",
                         train: Features | None = None) -> IndexRanking | None:
    """The ranking of ``SGHIndex(scores, decoder="bytes", encoding=encoding)`` (``auto``: the
    validated one, `eval.encoding`'s default) holding
    ``database`` (features, ids = rows); where the scores bring no byte decoder, one fitted on
    ``train`` (None: no ranking)."""
    if scores is None or (scores.byte_decoder is None and train is None):
        return None
    index = SGHIndex(scores, decoder="bytes", encoding=None if encoding == "auto" else encoding)
    if not index.is_trained:
        index.train(np.asarray(take_rows(train, evenly_spaced(len(train), FIT_ROWS)), np.float32))
    for _, rows in iter_chunks(database):  # in memory or streamed; ids: the rows
        index.add(rows)
    return IndexRanking(index, queries, "byte decoder: SGHIndex(decoder='bytes', encoding="
                        f"{index.encoding!r}), its flat scan of every code, ties by id")


def served_scan_ranking(scores: ScoreSet, kind: str, database_codes: np.ndarray,
                        queries: np.ndarray) -> IndexRanking:
    """The ranking of ``SGHIndex(scores)`` scanning by ``kind`` (ids = rows): what the index
    serves, with its refine factor, is what is scored."""
    index = SGHIndex(dataclasses.replace(scores, chosen=kind))
    index.add_codes(database_codes)
    return IndexRanking(index, queries, (
        f"asymmetric: {scores.scores[kind].form}; SGHIndex(mode='scan')'s search at the depth "
        "scored (the whole database with labels, else the largest N): faiss's fast scan, its "
        f"top {index.refine_factor} x depth rescored by the exact score, ties by id"))


def _score_order(index: AsymmetricIndex, queries: np.ndarray, depth: int) -> np.ndarray:
    """The first ``depth`` ids of each query's order by the index's score, ties by id."""
    if depth < index.ntotal:  # the heap scan, no dense scores
        return index.search(queries, depth)[1]
    scores = next(index.score_blocks(queries, len(queries) * max(1, index.ntotal)))[2]
    return np.argsort(scores, axis=1, kind="stable")  # equal scores stay in id order


def shortlist_stage(config, scores: ScoreSet | None) -> str:
    """What ``eval.shortlist_by`` means for a method with these scores: ``auto`` is the encoder
    score's scan where there is one (finer than Hamming distance's bits + 1 levels), Hamming
    distance otherwise, or where ``eval.shortlist_radius`` is set (a Hamming notion)."""
    if config.shortlist_by != "auto":
        return config.shortlist_by
    return "hamming" if scores is None or config.shortlist_radius is not None else "encoder"


def evaluation_ranking(config, database_codes: np.ndarray, query_codes: np.ndarray, bits: int,
                       scores: ScoreSet | None = None, queries: np.ndarray | None = None,
                       database_vectors=None, similarity: str = "euclidean",
                       without_score: str = "this method has no asymmetric score",
                       train_vectors=None):
    """The ranking `eval` (``config``, an `EvalConfig`) asks for (None: Hamming, scored by the
    tie-aware engine); UserInputError when it needs what is missing (``scores`` None:
    ``without_score`` says why; ``database_vectors``: for ``rescore=exact`` and ``bytes``, whose
    index fits its byte decoder on ``train_vectors`` where the scores bring none)."""
    if config.ranking == "hamming":
        return None
    if config.ranking == "bytes":
        if scores is None or queries is None or database_vectors is None:
            missing = without_score if scores is None else "a codes file holds no features"
            raise UserInputError(
                "eval.ranking=bytes searches the features with a byte decoder index "
                f"(SGHIndex(decoder='bytes')), and {missing}; accepted: sgh-eval run=DIR of a "
                "run of SGH, ITQ, PCAH or LSH, or eval.ranking=hamming")
        try:
            return byte_decoder_ranking(scores, database_vectors, queries, config.encoding,
                                        train_vectors)
        except ValueError as error:
            raise UserInputError(str(error)) from None
    scan = config.ranking == "asymmetric"
    by_encoder = shortlist_stage(config, scores) == "encoder"
    rule = ("eval.ranking=asymmetric" if scan else
            f"eval.ranking=rerank with eval.rescore={config.rescore} and eval.shortlist_by="
            f"{config.shortlist_by}")
    if scores is None and (scan or config.rescore == "score" or by_encoder):
        raise UserInputError(f"{rule} needs an asymmetric score, and {without_score}; accepted: "
                             "eval.ranking=hamming, or eval.ranking=rerank eval.rescore=exact")
    if queries is None:
        raise UserInputError(f"{rule} scores the query features, which a codes file does not "
                             "hold; re-score a run with sgh-eval run=DIR instead of codes=FILE")
    if not scan and config.rescore == "exact" and database_vectors is None:
        raise UserInputError(f"{rule} reads the database's original vectors; re-score a run "
                             "with sgh-eval run=DIR, whose dataset holds them")
    kind = None
    if scan or config.rescore == "score":
        try:
            kind = scores.kind_for(config.score, "asymmetric" if scan else "rerank")
        except ValueError as error:
            # An mlp decoder's kinds exist, decoded: never a scan's (no templates hT + t).
            decoded = scan and scores.decoder is not None and config.score in ("decoder", "joint")
            why = (f"; {ASYMMETRIC_NEEDS_LINEAR_DECODER}, so it ranks a shortlist by decoding "
                   "it: accepted: eval.ranking=rerank, or eval.score=encoder" if decoded else "")
            raise UserInputError(str(error) + why) from None
    if scan:
        return served_scan_ranking(scores, kind, database_codes, queries)
    rescorer = scores.rescorer(kind, database_codes) if kind is not None else None
    search = TwoStageSearch(database_codes, rescorer, database_vectors, similarity,
                            shortlist_score=scores.scores["encoder"] if by_encoder else None,
                            bits=bits)
    if config.shortlist_radius is not None:
        stage_1 = f"Hamming radius {config.shortlist_radius} (inclusive)"
        shortlist, radius = None, config.shortlist_radius
    else:
        stage_1 = (f"the top {config.shortlist} by the {scores.scores['encoder'].form}"
                   if by_encoder else f"Hamming top {config.shortlist}") + " (ties by id)"
        shortlist, radius = config.shortlist, None
    stage_2 = (f"the {rescorer.form}" if kind is not None
               else f"exact {similarity} distance on the original vectors")
    rest = "the encoder score's" if by_encoder else "Hamming"
    return RerankRanking(search, query_codes, queries, config.rescore, shortlist, radius,
                         description=f"rerank: shortlist = {stage_1}, rescored by {stage_2}; "
                                     f"then the rest of the database in {rest} order")
