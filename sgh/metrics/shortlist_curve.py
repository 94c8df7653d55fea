"""Recall of a two-stage search against its shortlist size, and against its queries per second.

The trade-off a user of a two-stage search tunes: a longer shortlist finds more true neighbours
after rescoring, and costs more time. Each point runs the search a user serves
(`SGHIndex(mode="two_stage").search` with that ``shortlist``) for every query, and reports
Recall K@N of what it returns and its queries per second (wall time, the threads faiss is given:
a figure of this machine).
"""

from __future__ import annotations

import time

import numpy as np

from sgh.metrics.ordered import neighbour_hits
from sgh.metrics.relevance import neighbour_relevance

# Shortlist sizes: 100 x sqrt(10)^i, about evenly spaced on a log axis.
LADDER = (100, 300, 1000, 3000, 10000, 30000, 100000, 300000, 1000000)
MAX_SHORTLIST_OVER_N = 100


def shortlist_curve(index, queries: np.ndarray, groundtruth: np.ndarray, recall_k: int,
                    recall_n: int) -> dict:
    """``{"shortlist": [S...], "recall{K}@{N}": [...], "queries_per_second": [...]}`` of
    ``index`` (an `SGHIndex` of mode two_stage, ids = database rows) for the sizes of `LADDER`
    from N up to 100 N (or the database size); the index's own shortlist is kept."""
    n_database = index.ntotal
    relevance = neighbour_relevance(groundtruth, recall_k, len(queries), n_database)
    # Up to 100 N: rescoring a longer shortlist costs what a scan of everything does.
    largest = min(n_database, MAX_SHORTLIST_OVER_N * recall_n)
    sizes = [size for size in LADDER if recall_n <= size < largest] + [largest]
    curve: dict = {"shortlist": [], f"recall{recall_k}@{recall_n}": [], "queries_per_second": []}
    served_shortlist = index.shortlist
    try:
        # Builds the engines and compiles the kernels outside the timing: the largest size may
        # take the every-item path, which the smaller ones do not.
        for size in {sizes[0], sizes[-1]}:
            index.shortlist = size
            index.search(queries[:4], recall_n)
        for size in sizes:
            index.shortlist = size
            started = time.perf_counter()
            _, found = index.search(queries, recall_n)
            seconds = time.perf_counter() - started
            hits = neighbour_hits(found, relevance, 0, len(found)).sum()
            curve["shortlist"].append(size)
            curve[f"recall{recall_k}@{recall_n}"].append(float(hits / (len(found) * recall_k)))
            curve["queries_per_second"].append(len(found) / seconds if seconds > 0
                                               else float("inf"))
    finally:
        index.shortlist = served_shortlist
    return curve
