"""Two-stage search: a shortlist of the database, rescored.

Stage 1 keeps a shortlist: by Hamming distance of the queries' codes (`HammingIndex`), the top
``shortlist`` or every item within ``radius`` (inclusive); or the top ``shortlist`` by the scan
of a ``shortlist_score`` (the encoder's per-bit score) of the queries themselves. Stage 2
reorders it by the method's score (``rescore="score"``: :mod:`sgh.scores.asymmetric`, or an mlp
decoder's, :mod:`sgh.scores.decoded`) or by the exact distance to each shortlisted item's
original vector (``"exact"``: float64 ``||x - q||^2``, or ``-<q, x>`` for inner product). Results
``(D, I)``: stage-2 scores (smaller = nearer) and ids by (score, id), padded ``inf`` / ``-1``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from sgh.codes import model_fingerprint, validate_codes
from sgh.config import RESCORE_RULES
from sgh.data.similarity import SIMILARITIES, nearness
from sgh.data.streamed_features import StreamedFeatures, take_rows
from sgh.errors import check_choice, check_int, one_line
from sgh.scores.asymmetric import AsymmetricScore, check_queries
from sgh.scores.asymmetric_index import AsymmetricIndex
from sgh.scores.lookup_kernels import QUERY_BLOCK, run_query_blocks, sorted_heaps
from sgh.search.hamming_index import HammingIndex

_EXACT_BLOCK_VALUES = 1 << 20  # vector values read and scored at a time by the exact rule


class TwoStageSearch:
    """A shortlist rescored by the method's score or exact distances (module doc). ``score``: an
    `AsymmetricScore`, or an object with ``bits`` and ``rescore(queries, candidates) -> (D, I)``
    (`DecodedRescorer`); ``vectors`` (angular: unit-normalised) for the exact rule."""

    def __init__(self, database_codes: np.ndarray, score: AsymmetricScore | None = None,
                 vectors=None, similarity: str = "euclidean",
                 shortlist_score: AsymmetricScore | None = None, *, bits: int | None = None,
                 workers: int | None = None) -> None:
        check_choice("similarity", similarity, SIMILARITIES)
        self.bits = _code_length(score, shortlist_score, bits)
        self.similarity, self.vectors, self.workers = similarity, vectors, workers
        self.hamming = HammingIndex(self.bits)
        self.hamming.add(database_codes)
        self.asymmetric = score  # what rescores for the `score` rule: `.rescore(...)`
        if isinstance(score, AsymmetricScore):
            self.asymmetric = AsymmetricIndex(score, database_codes)
        # Stage 1 by a score's scan instead of Hamming distance.
        self.shortlist_index = (None if shortlist_score is None
                                else AsymmetricIndex(shortlist_score, database_codes))
        if vectors is not None:
            _check_vectors(vectors, self.hamming.ntotal)
        warn_if_one_score(shortlist_score, score, stacklevel=2)

    def __repr__(self) -> str:
        first = ("Hamming distance" if self.shortlist_index is None
                 else f"the {self.shortlist_index.score.kind} score")
        second = [rule for rule, given in (("score", self.asymmetric), ("exact", self.vectors))
                  if given is not None]
        return (f"TwoStageSearch({self.bits} bits, {self.hamming.ntotal} items, shortlist by "
                f"{first}, rescore: {' or '.join(second) or 'nothing given'})")

    def shortlist(self, queries: np.ndarray | None = None, shortlist: int | None = None,
                  radius: int | None = None, query_codes: np.ndarray | None = None
                  ) -> np.ndarray:
        """Stage 1: ``(nq, S)`` int64 database ids in Hamming order of the ``query_codes`` (or
        the shortlist score's order of the ``queries``; ties by id), ``-1`` padding."""
        _check_stage_one(shortlist, radius)
        if self.shortlist_index is not None:
            if radius is not None or queries is None:
                raise ValueError("a shortlist by score takes the top S (shortlist=S, no "
                                 "radius) of the queries' own features (queries=...)")
            return self.shortlist_index.search(queries, shortlist, self.workers)[1]
        if query_codes is None:
            raise ValueError("a Hamming shortlist compares the queries' codes: query_codes=... "
                             "(hasher.encode(queries)); or give shortlist_score=... to "
                             "shortlist by a score's scan")
        query_codes = validate_codes(query_codes, self.bits, "query codes")
        if radius is None:
            return self.hamming.search(query_codes, shortlist)[1]
        lims, _, ids = self.hamming.range_search(query_codes, radius)
        counts = np.diff(lims)
        out = np.full((len(query_codes), int(counts.max(initial=0))), -1, np.int64)
        rows = np.repeat(np.arange(len(query_codes)), counts)
        out[rows, np.arange(len(ids)) - np.repeat(lims[:-1], counts)] = ids
        return out

    def rescore(self, queries: np.ndarray, candidates: np.ndarray, rule: str = "score"
                ) -> tuple[np.ndarray, np.ndarray]:
        """Stage 2: ``(D, I)`` of the candidates, reordered by ``rule`` (module doc)."""
        check_choice("rescore", rule, RESCORE_RULES)
        if rule == "score":
            if self.asymmetric is None:
                raise ValueError("rescore='score' needs the method's asymmetric score "
                                 "(score=...); or use rescore='exact' with vectors=...")
            return self.asymmetric.rescore(queries, candidates)
        if self.vectors is None:
            raise ValueError("rescore='exact' needs the database's original vectors "
                             "(vectors=...); or use rescore='score' with score=...")
        return exact_rescore(queries, self.vectors, candidates, self.similarity)

    def search(self, queries: np.ndarray, k: int, shortlist: int | None = None,
               radius: int | None = None, rescore: str = "score",
               query_codes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The k best of each query's shortlist after rescoring: ``(D, I)``, ``(nq, k)``."""
        check_int("k", k, 1)
        if shortlist is None and radius is None:
            shortlist = default_shortlist(k, self.hamming.ntotal)
        _check_stage_one(shortlist, radius)
        if query_codes is not None and len(query_codes) != len(queries):
            raise ValueError(f"{len(query_codes)} query codes for {len(queries)} queries")
        if rescore == "score" and self.shortlist_index is not None and radius is None \
                and getattr(self.asymmetric, "encoder", None) is self.shortlist_index.score:
            # The joint score adds the decoder's term to the very score that made the
            # shortlist: its values come along instead of being computed twice.
            first, candidates = self.shortlist_index.search(queries, shortlist, self.workers)
            D, I = self.asymmetric.rescore(queries, candidates, encoder_scores=first)
        else:
            D, I = self.rescore(queries, self.shortlist(queries, shortlist, radius, query_codes),
                                rescore)
        return padded(D, I, k)


def default_shortlist(k: int, n_items: int) -> int:
    """The shortlist a search keeps when not told, max(5 k, 1% of the items): 1% alone leaves
    nothing to reorder on a small database, 5 k alone misses neighbours on a large one."""
    return max(5 * k, math.ceil(0.01 * n_items))


def warn_if_one_score(shortlist_score, rescorer, stacklevel: int = 1) -> None:
    """Warn when a two-stage search would rescore its shortlist by the score that made it: that
    score's scan, found more slowly."""
    if shortlist_score is None or rescorer is None:
        return
    same = rescorer is shortlist_score or (
        isinstance(rescorer, AsymmetricScore) and isinstance(shortlist_score, AsymmetricScore)
        and model_fingerprint(rescorer.arrays()) == model_fingerprint(shortlist_score.arrays()))
    if same:
        warnings.warn(f"two-stage search: the {shortlist_score.kind} score rescores the "
                      "shortlist it made, so the results are that score's scan, found more "
                      "slowly; rescore by another score (or the exact distances), or shortlist "
                      "by Hamming distance", stacklevel=stacklevel + 1)


def rescored(rescorer, queries: np.ndarray, candidates: np.ndarray, workers: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """``rescorer.rescore`` of each block of queries, on ``workers`` threads."""
    if workers == 1 or len(queries) <= QUERY_BLOCK:
        return rescorer.rescore(queries, candidates)
    blocks: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def rescore(start: int) -> None:
        rows = slice(start, start + QUERY_BLOCK)
        blocks[start] = rescorer.rescore(queries[rows], candidates[rows])

    run_query_blocks(rescore, len(queries), workers)
    return (np.concatenate([blocks[start][0] for start in sorted(blocks)]),
            np.concatenate([blocks[start][1] for start in sorted(blocks)]))


def padded(D: np.ndarray, I: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The first k columns of ``(D, I)``, padded with ``inf`` / ``-1`` when there are fewer."""
    if D.shape[1] < k:
        pad = ((0, 0), (0, k - D.shape[1]))
        D, I = np.pad(D, pad, constant_values=np.inf), np.pad(I, pad, constant_values=-1)
    return D[:, :k], I[:, :k]


def _code_length(score, shortlist_score, bits: int | None) -> int:
    """The code length the scores state (they must agree), or ``bits`` where none is given."""
    stated = {name: given.bits for name, given in (("score", score),
                                                   ("shortlist_score", shortlist_score))
              if given is not None}
    if bits is not None:
        stated["bits"] = check_int("bits", bits, 1)
    if not stated:
        raise ValueError("a search without a score needs the code length: bits=...")
    if len(set(stated.values())) > 1:
        raise ValueError("the code lengths disagree (" + ", ".join(
            f"{name}: {value} bits" for name, value in stated.items()) + ")")
    return next(iter(stated.values()))


def _check_stage_one(shortlist: int | None, radius: int | None) -> None:
    """One of a shortlist size or a Hamming radius, each checked by its name (not as `k`)."""
    if (shortlist is None) == (radius is None):
        raise ValueError("give exactly one of shortlist (top S) or radius")
    if shortlist is not None:
        check_int("shortlist", shortlist, 1)
    else:
        check_int("radius", radius, 0)


def _check_vectors(vectors, n_codes: int) -> None:
    """An ``(n, dim)`` numpy array of numbers, one row per code, or streamed features; their
    values are checked where they are read (`exact_rescore`): a file may outgrow memory."""
    if not isinstance(vectors, (np.ndarray, StreamedFeatures)):
        raise ValueError(f"vectors is a {type(vectors).__name__}; accepted: the database's "
                         "original vectors as an (n, dim) numpy array (np.asarray(vectors)) or "
                         "streamed features")
    if len(vectors.shape) != 2:
        raise ValueError(f"vectors has shape {vectors.shape}; accepted: an (n, dim) array, one "
                         "row of features per database code")
    if vectors.dtype.kind not in "fiu":
        raise ValueError(f"vectors has dtype {vectors.dtype}; accepted: real numbers")
    if len(vectors) != n_codes:
        raise ValueError(f"vectors has {len(vectors)} rows for {n_codes} codes")


def exact_rescore(queries: np.ndarray, vectors, candidates: np.ndarray, similarity: str
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Exact scores of each query's candidate ids (``-1``: padding), sorted by (score, id); each
    distinct candidate row is read once. float64: a squared distance may overflow float32."""
    candidates = np.asarray(candidates, np.int64)
    dim = vectors.shape[1]
    queries = check_queries(queries, dim).astype(np.float64)
    D = np.full(candidates.shape, np.inf, np.float64)
    per_row = max(1, candidates.shape[1])
    rows_per_block = max(1, _EXACT_BLOCK_VALUES // (per_row * max(dim, 1)))
    for q0 in range(0, len(candidates), rows_per_block):
        block = candidates[q0 : q0 + rows_per_block]
        valid = block >= 0
        distinct, inverse = np.unique(block[valid], return_inverse=True)
        read = take_rows(vectors, distinct).astype(np.float64)
        bad = ~np.isfinite(read)  # a NaN distance, which no ranking orders
        if bad.any():
            row, column = np.argwhere(bad)[0]
            raise ValueError(f"vectors holds {one_line(read[row, column])} at row "
                             f"{distinct[row]}, column {column}; the exact rule needs finite "
                             "features: fix or drop that row, or use rescore='score'")
        rows = read[inverse]
        owners = np.nonzero(valid)[0] + q0
        D[q0 : q0 + rows_per_block][valid] = nearness(rows, queries[owners], similarity)
    return sorted_heaps(D, np.where(candidates >= 0, candidates, -1))
