"""The two-stage mode of `SGHIndex` (``mode="two_stage"``): the pieces of a shortlist reordered by
a rescoring score. Stage 1 is the encoder score's fast scan (:mod:`sgh.search.fast_scan`) of
``shortlist`` candidates; stage 2 reorders them by the method's rescoring score (a per-bit
:mod:`sgh.scores.asymmetric` score's scan of the candidates, or an mlp decoder's,
:mod:`sgh.scores.decoded`). Results ``(D, I)``: stage-2 scores (smaller = nearer) and ids by
(score, id), padded ``inf`` / ``-1``, as faiss's.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from sgh.codes import model_fingerprint
from sgh.scores.asymmetric import AsymmetricScore
from sgh.scores.lookup_kernels import QUERY_BLOCK, run_query_blocks


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
                      "slowly; rescore by another score (eval.score=decoder or joint), or "
                      "search in mode 'scan'", stacklevel=stacklevel + 1)


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
