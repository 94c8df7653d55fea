"""Compiled scans of asymmetric scores: per-query lookup tables over the code bytes.

A query's score of a packed code is ``norm[i] + sum_j table[j, code[i, j]]`` (see
:mod:`sgh.scores.asymmetric`), the scan of faiss's ``IndexPQ`` with 8-bit sub-quantizers. The
database is walked in tiles of :data:`TILE_ITEMS` codes that every query of a block passes over
while they are in cache. The per-item term comes from an array beside the codes or, for the byte
decoder, from the codes' byte pairs (`pair_terms`), computed once per tile for all the queries.

`scan_top_k` and `scan_scores` spell out the same four-query body on purpose: factored into a
compiled helper returning the four sums, the top-k scan is markedly slower. The lists' scan
(`scan_lists_top_k`) does call a helper, `_list_scores`, but once per list, not per item: it
writes the list's scores into a buffer that the top k then reads.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from sgh.compiled import compiled, resolved_workers
from sgh.scores.top_k import (
    CAPACITY_PER_K,
    NO_BAR,
    RESERVOIR_FROM_K,
    keep_smallest,
    key_score,
    offer,
    score_key,
    sort_heap,
    sort_heaps,
    write_sorted,
)

TILE_ITEMS = 1 << 14  # codes of a tile: 128 KB at 64 bits, which stays in L2
# Queries per kernel call: their tables stay in L2 together, and each call is long enough that
# dispatch costs nothing.
QUERY_BLOCK = 64
# float32 entries of one 64-byte cache line: the stride of `pair_terms`' in-order read.
_LINE_FLOATS = 16
# Items from which `pair_terms` reads each pair table in order before its gathers: a table's
# cache lines (256 x 256 entries), which that many random gathers mostly reach.
READ_AHEAD_FROM = 256 * 256 // _LINE_FLOATS


@compiled
def pair_term(pair_tables, codes, i):
    """Code ``i``'s sum over byte pairs ``a < b`` (in the order (0, 1), (0, 2), ..., (1, 2),
    ...) of ``pair_tables[p, 256 code[a] + code[b]]``, in float32; 0 for one-byte codes."""
    code_bytes = codes.shape[1]
    s = np.float32(0.0)
    p = 0
    for a in range(code_bytes):
        row = np.int64(codes[i, a]) * 256
        for b in range(a + 1, code_bytes):
            s += pair_tables[p, row + codes[i, b]]
            p += 1
    return s


@compiled
def pair_terms(pair_tables, codes, start, stop, out):
    """``out[i - start]``: `pair_term` of the codes ``start .. stop - 1``, summed pair by pair
    over all of them, in the same order as code by code, while one pair's table (256 KB) stays
    in cache: 1.7-3.2x faster."""
    runs = np.empty((1, 2), np.int64)
    runs[0, 0], runs[0, 1] = start, stop
    _runs_pair_terms(pair_tables, codes, runs, out[: stop - start], start)


@compiled
def _runs_pair_terms(pair_tables, codes, runs, out, shift):
    """`pair_term` of the codes of every run ``begin .. end - 1`` (``runs``' rows) into
    ``out[i - shift]``, one pair table at a time over all the runs. Where the runs hold at least
    `READ_AHEAD_FROM` items, their gathers reach most of the table's cache lines, so the table
    is first read in order, which the processor prefetches: the gathers then hit the nearest
    cache instead of waiting on a farther one for each line, 1.2-1.3x faster from 6,000 items
    with the caches warm, up to 3.8x after other work has passed through them
    (benchmarks/LOG.md)."""
    code_bytes = codes.shape[1]
    items = 0
    for r in range(runs.shape[0]):
        out[runs[r, 0] - shift : runs[r, 1] - shift] = 0.0
        items += runs[r, 1] - runs[r, 0]
    p = 0
    for a in range(code_bytes):
        for b in range(a + 1, code_bytes):
            table = pair_tables[p]
            if items >= READ_AHEAD_FROM:
                seen = np.float32(0.0)
                for line in range(0, table.shape[0], _LINE_FLOATS):
                    seen += table[line]
                # A use of the reads that changes nothing (NaN only if the table holds one, and
                # out[...] += 0 leaves every sum as it is), so that the compiler keeps them.
                if seen != seen:
                    out[runs[0, 0] - shift] += np.float32(0.0)
            for r in range(runs.shape[0]):
                for i in range(runs[r, 0], runs[r, 1]):
                    out[i - shift] += table[np.int64(codes[i, a]) * 256 + codes[i, b]]
            p += 1


@compiled
def tile_terms(norms, pair_tables, codes, start, stop, out):
    """``out[: stop - start]``: the item terms of codes ``start .. stop - 1``, held (``norms``)
    or from ``pair_tables`` (`pair_terms`)."""
    if norms.shape[0] == codes.shape[0]:
        out[: stop - start] = norms[start:stop]
    else:
        pair_terms(pair_tables, codes, start, stop, out)


@compiled
def scan_top_k(tables, codes, norms, pair_tables, id_offset, heap_scores, heap_ids):
    """Merge the database ``codes`` (ids ``id_offset + i``, growing from call to call) into each
    query's running top k: ``heap_scores``, ``heap_ids``, ``(nq, k)`` max-heaps on (score, id),
    initially ``+inf`` / ``-1``. ``norms``: ``(n,)`` per-item terms, or empty: `pair_terms` of
    ``pair_tables``, computed per tile. Every score is ``norm + table[0, c0] + table[1, c1] +
    ...`` summed in this order in float32 (`AsymmetricIndex.rescore` sums alike)."""
    nq, code_bytes = tables.shape[0], tables.shape[1]
    n, k = codes.shape[0], heap_scores.shape[1]
    flat_codes = codes.reshape(-1)
    terms = np.empty(TILE_ITEMS, np.float32)
    for start in range(0, n, TILE_ITEMS):
        stop = min(n, start + TILE_ITEMS)
        tile_terms(norms, pair_tables, codes, start, stop, terms)
        q = 0
        while q + 4 <= nq:
            t0 = tables[q].reshape(-1)
            t1 = tables[q + 1].reshape(-1)
            t2 = tables[q + 2].reshape(-1)
            t3 = tables[q + 3].reshape(-1)
            w0, w1 = heap_scores[q, 0], heap_scores[q + 1, 0]
            w2, w3 = heap_scores[q + 2, 0], heap_scores[q + 3, 0]
            for i in range(start, stop):
                base = i * code_bytes
                s0 = s1 = s2 = s3 = terms[i - start]
                for j in range(code_bytes):
                    at = j * 256 + flat_codes[base + j]
                    s0 += t0[at]
                    s1 += t1[at]
                    s2 += t2[at]
                    s3 += t3[at]
                # Ids grow, so an equal score never displaces a kept item (ties: smaller id).
                if s0 < w0:
                    w0 = offer(heap_scores[q], heap_ids[q], s0, id_offset + i, k)
                if s1 < w1:
                    w1 = offer(heap_scores[q + 1], heap_ids[q + 1], s1, id_offset + i, k)
                if s2 < w2:
                    w2 = offer(heap_scores[q + 2], heap_ids[q + 2], s2, id_offset + i, k)
                if s3 < w3:
                    w3 = offer(heap_scores[q + 3], heap_ids[q + 3], s3, id_offset + i, k)
            q += 4
        for rest in range(q, nq):  # the last nq % 4 queries, one at a time
            table = tables[rest].reshape(-1)
            worst = heap_scores[rest, 0]
            for i in range(start, stop):
                base = i * code_bytes
                s = terms[i - start]
                for j in range(code_bytes):
                    s += table[j * 256 + flat_codes[base + j]]
                if s < worst:
                    worst = offer(heap_scores[rest], heap_ids[rest], s, id_offset + i, k)


@compiled
def scan_scores(tables, codes, norms, pair_tables, out):
    """``out[q, i]`` (``(nq, n)`` float32): code ``i``'s score for query ``q``, as `scan_top_k`."""
    nq, code_bytes = tables.shape[0], tables.shape[1]
    n = codes.shape[0]
    flat_codes = codes.reshape(-1)
    terms = np.empty(TILE_ITEMS, np.float32)
    for start in range(0, n, TILE_ITEMS):
        stop = min(n, start + TILE_ITEMS)
        tile_terms(norms, pair_tables, codes, start, stop, terms)
        q = 0
        while q + 4 <= nq:
            t0 = tables[q].reshape(-1)
            t1 = tables[q + 1].reshape(-1)
            t2 = tables[q + 2].reshape(-1)
            t3 = tables[q + 3].reshape(-1)
            for i in range(start, stop):
                base = i * code_bytes
                s0 = s1 = s2 = s3 = terms[i - start]
                for j in range(code_bytes):
                    at = j * 256 + flat_codes[base + j]
                    s0 += t0[at]
                    s1 += t1[at]
                    s2 += t2[at]
                    s3 += t3[at]
                out[q, i], out[q + 1, i], out[q + 2, i], out[q + 3, i] = s0, s1, s2, s3
            q += 4
        for rest in range(q, nq):
            table = tables[rest].reshape(-1)
            for i in range(start, stop):
                base = i * code_bytes
                s = terms[i - start]
                for j in range(code_bytes):
                    s += table[j * 256 + flat_codes[base + j]]
                out[rest, i] = s


@compiled
def bounded_scan_top_k(tables, codes, levels, level_terms, slack, pair_tables, heap_scores,
                       heap_ids):
    """`scan_top_k` of a score whose item term comes from ``pair_tables``, for a few queries:
    each item's term is first bounded by ``level_terms[levels[i]]`` (within ``slack[q]``), and
    computed only where that bound could enter the query's heap, summed as `scan_top_k` sums it
    (bit-identical results)."""
    nq, code_bytes = tables.shape[0], tables.shape[1]
    n, k = codes.shape[0], heap_scores.shape[1]
    flat_codes = codes.reshape(-1)
    for q in range(nq):
        table = tables[q].reshape(-1)
        worst = heap_scores[q, 0]
        for i in range(n):
            base = i * code_bytes
            partial = np.float32(0.0)
            for j in range(code_bytes):
                partial += table[j * 256 + flat_codes[base + j]]
            if partial + level_terms[levels[i]] - slack[q] < worst:
                s = pair_term(pair_tables, codes, i)
                for j in range(code_bytes):
                    s += table[j * 256 + flat_codes[base + j]]
                if s < worst:
                    worst = offer(heap_scores[q], heap_ids[q], s, i, k)


@compiled
def rescore_top_k(tables, codes, norms, candidates, heap_scores, heap_ids):
    """Each query's k best ``candidates`` (``(nq, S)`` rows of ``codes``, ``-1`` skipped) by the
    exact score, into ``heap_scores``, ``heap_ids`` (``(nq, k)``, which the caller fills with
    ``+inf`` / -1), sorted by (score, row). Scores are summed as in `scan_top_k`: bit-identical
    to the full scan's."""
    nq, code_bytes = tables.shape[0], tables.shape[1]
    k, width = heap_scores.shape[1], candidates.shape[1]
    for q in range(nq):
        table = tables[q].reshape(-1)
        worst = heap_scores[q, 0]
        for c in range(width):
            i = candidates[q, c]
            if i < 0:
                continue
            s = norms[i]
            for j in range(code_bytes):
                s += table[j * 256 + codes[i, j]]
            # Candidates come in any order: an equal score displaces the root by a smaller row.
            if s < worst or (s == worst and i < heap_ids[q, 0]):
                worst = offer(heap_scores[q], heap_ids[q], s, i, k)
    sort_heaps(heap_scores, heap_ids)


@compiled
def list_pair_terms(pair_tables, codes, starts, lists, out):
    """`pair_terms` of the rows of each of ``lists`` (ascending; list ``l``: rows ``starts[l] ..
    starts[l + 1] - 1``), into the same rows of ``out``; runs of consecutive lists taken as one."""
    runs = np.empty((lists.shape[0], 2), np.int64)
    count = 0
    first = 0
    while first < lists.shape[0]:
        last = first
        while last + 1 < lists.shape[0] and lists[last + 1] == lists[last] + 1:
            last += 1
        runs[count, 0], runs[count, 1] = starts[lists[first]], starts[lists[last] + 1]
        count += 1
        first = last + 1
    _runs_pair_terms(pair_tables, codes, runs[:count], out, 0)


@compiled
def _list_scores(table, codes, terms, start, stop, constant, out):
    """``out[i - start] = (terms[i] + table[0 * 256 + codes[i, 0]] + ...) + constant`` for the
    rows ``start .. stop - 1`` of one list, summed in that order. Four bytes (32 bits) spelled
    out: with the byte count known to the compiler the loop runs 1.1-1.3x faster (vectorised
    over the rows), the same sums."""
    if codes.shape[1] == 4:
        for i in range(start, stop):
            code = codes[i]
            out[i - start] = ((((terms[i] + table[code[0]]) + table[256 + code[1]])
                               + table[512 + code[2]]) + table[768 + code[3]]) + constant
        return
    for i in range(start, stop):
        s = terms[i]
        for j in range(codes.shape[1]):
            s += table[j * 256 + codes[i, j]]
        out[i - start] = s + constant


@compiled
def scan_lists_top_k(tables, list_tables, constants, codes, terms, starts, probes, out_scores,
                     out_rows):
    """Each query's k best ``(score, row)`` among the codes (of residuals, in list order: list
    ``l`` holds rows ``starts[l] .. starts[l + 1] - 1``) of the lists it ``probes`` (-1
    skipped), sorted, into ``out_scores``, ``out_rows`` (``(nq, k)``, padded ``+inf`` / -1). A
    score is ``(terms[i] + t[0, c0] + t[1, c1] + ...) + constants[q, p]`` in float32, ``t =
    tables[q] - list_tables[l]``: the same whichever other lists are probed. Kept by a heap,
    from `RESERVOIR_FROM_K` on by a reservoir (`sgh.scores.top_k`), both by ``(score, row)``, so
    the lists' order does not matter."""
    nq, code_bytes = tables.shape[0], tables.shape[1]
    k = out_scores.shape[1]
    width = code_bytes * 256
    table = np.empty(width, np.float32)
    scores = np.empty(np.max(starts[1:] - starts[:-1]), np.float32)
    heap = k < RESERVOIR_FROM_K
    keys = np.empty(0 if heap else CAPACITY_PER_K * k, np.uint64)
    for q in range(nq):
        query_table = tables[q].reshape(-1)
        count, bar, worst = 0, NO_BAR, np.float32(np.inf)
        out_scores[q] = np.inf
        out_rows[q] = -1
        for p in range(probes.shape[1]):
            chosen = probes[q, p]
            if chosen < 0:
                continue
            shift = list_tables[chosen].reshape(-1)
            for a in range(width):
                table[a] = query_table[a] - shift[a]
            first = starts[chosen]
            _list_scores(table, codes, terms, first, starts[chosen + 1], constants[q, p], scores)
            for i in range(first, starts[chosen + 1]):
                s = scores[i - first]
                if s > worst:
                    continue
                if heap:
                    if s < worst or i < out_rows[q, 0]:
                        worst = offer(out_scores[q], out_rows[q], s, i, k)
                    continue
                key = score_key(s, i)
                if key < bar:
                    keys[count] = key
                    count += 1
                    if count == keys.shape[0]:
                        bar, count = keep_smallest(keys, count, k), k
                        worst = key_score(bar)
        if heap:
            sort_heap(out_scores[q], out_rows[q])
        else:
            write_sorted(keys, count, k, out_scores[q], out_rows[q])


@compiled
def bounded_scan_lists_top_k(tables, list_tables, constants, codes, levels, level_terms, slack,
                             pair_tables, starts, probes, out_scores, out_rows):
    """`scan_lists_top_k` for a few queries: each item's term first bounded by
    ``level_terms[levels[i]]`` (within ``slack[q]``), and computed from ``pair_tables`` only
    where that bound could reach the query's bar, summed as `scan_lists_top_k` sums it
    (bit-identical results). Its own kernel, the top-k lines written out as there: one kernel
    with the bound behind a flag, or a call per key, slowed the plain scan (benchmarks/LOG.md)."""
    nq, code_bytes = tables.shape[0], tables.shape[1]
    k = out_scores.shape[1]
    width = code_bytes * 256
    table = np.empty(width, np.float32)
    heap = k < RESERVOIR_FROM_K
    keys = np.empty(0 if heap else CAPACITY_PER_K * k, np.uint64)
    for q in range(nq):
        query_table = tables[q].reshape(-1)
        count, bar, worst = 0, NO_BAR, np.float32(np.inf)
        out_scores[q] = np.inf
        out_rows[q] = -1
        for p in range(probes.shape[1]):
            chosen = probes[q, p]
            if chosen < 0:
                continue
            shift = list_tables[chosen].reshape(-1)
            for a in range(width):
                table[a] = query_table[a] - shift[a]
            constant = constants[q, p]
            for i in range(starts[chosen], starts[chosen + 1]):
                partial = np.float32(0.0)
                for j in range(code_bytes):
                    partial += table[j * 256 + codes[i, j]]
                if partial + level_terms[levels[i]] + constant - slack[q] <= worst:
                    s = pair_term(pair_tables, codes, i)
                    for j in range(code_bytes):
                        s += table[j * 256 + codes[i, j]]
                    s += constant
                    if s > worst:
                        continue
                    if heap:
                        if s < worst or i < out_rows[q, 0]:
                            worst = offer(out_scores[q], out_rows[q], s, i, k)
                        continue
                    key = score_key(s, i)
                    if key < bar:
                        keys[count] = key
                        count += 1
                        if count == keys.shape[0]:
                            bar, count = keep_smallest(keys, count, k), k
                            worst = key_score(bar)
        if heap:
            sort_heap(out_scores[q], out_rows[q])
        else:
            write_sorted(keys, count, k, out_scores[q], out_rows[q])


def run_query_blocks(scan, n_queries: int, workers: int | None, block: int = QUERY_BLOCK) -> None:
    """Run ``scan(start)`` for every ``block`` of queries, on threads."""
    starts = range(0, n_queries, block)
    workers = resolved_workers(workers)
    if workers == 1 or len(starts) == 1:
        for start in starts:
            scan(start)
        return
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(scan, starts))  # consumed: re-raises a kernel's exception
