"""Compiled scans of asymmetric scores: per-query lookup tables over the code bytes.

A query's score of a packed code is ``norm[i] + sum_j table[j, code[i, j]]`` (see
:mod:`sgh.search.asymmetric`): ``code_bytes`` table reads and adds per pair, and the tables of a
query (``code_bytes x 256`` float32: 4 KB at 32 bits) stay in L1 while the database streams by.
This is the scan of faiss's ``IndexPQ`` with 8-bit sub-quantizers, where the code bytes index
tables of partial distances.

The per-item term ``norm[i]`` comes either from an array held beside the codes or, for a score
whose item term is a sum over pairs of code bytes (the byte decoder's ``||x^(h)||^2`` less its
per-byte part, `pair_terms`), from the codes themselves: computed once per tile of the database
and shared by every query of the call, so the index holds the codes and nothing per item.

Two kernels, both ``nogil`` so that callers run query blocks on several threads:

* :func:`scan_top_k` keeps each query's k best ``(score, id)`` in a max-heap: a pair costs the
  table reads and one compare; few items ever enter the heap (about ``k ln(n / k)`` of ``n``).
* :func:`scan_scores` writes every score of a block of queries (evaluation ranks whole databases).

A call of a few queries shares a tile's item terms among too few of them: there
:func:`bounded_scan_top_k` reads a one-byte bound of each term instead and computes the term
only for the items the bound lets near the top k.

The database is walked in tiles of :data:`TILE_ITEMS` codes, which every query of the block
passes over while they are in cache. The two kernels spell out the same four-query body on
purpose: factored into a compiled helper returning the four sums, the top-k scan is
markedly slower.
"""

from __future__ import annotations

import numpy as np

from sgh.compiled import compiled

# Codes of a tile: 16,384 x 8 bytes (64 bits) = 128 KB of codes stays in L2 while the queries of
# a block pass over it.
TILE_ITEMS = 1 << 14


@compiled
def _sift_down(scores, ids, position, size):
    """Restore the max-heap on (score, id) below ``position``."""
    while True:
        left = 2 * position + 1
        if left >= size:
            return
        child = left
        right = left + 1
        if right < size and (scores[right] > scores[left]
                             or (scores[right] == scores[left] and ids[right] > ids[left])):
            child = right
        if scores[child] > scores[position] or (scores[child] == scores[position]
                                                 and ids[child] > ids[position]):
            scores[child], scores[position] = scores[position], scores[child]
            ids[child], ids[position] = ids[position], ids[child]
            position = child
        else:
            return


@compiled
def _offer(scores, ids, score, item_id, k):
    """Put (score, id) in the heap in place of its root (the caller checked that it beats it);
    return the new root score."""
    scores[0] = score
    ids[0] = item_id
    _sift_down(scores, ids, 0, k)
    return scores[0]


@compiled
def pair_terms(pair_tables, codes, start, stop, out):
    """``out[i - start]`` for the codes ``start .. stop - 1``: the sum over byte pairs ``a < b``
    (in the order (0, 1), (0, 2), ..., (1, 2), ...) of ``pair_tables[p, 256 code[a] + code[b]]``,
    in float32; 0 for one-byte codes."""
    code_bytes = codes.shape[1]
    for i in range(start, stop):
        s = np.float32(0.0)
        p = 0
        for a in range(code_bytes):
            row = np.int64(codes[i, a]) * 256
            for b in range(a + 1, code_bytes):
                s += pair_tables[p, row + codes[i, b]]
                p += 1
        out[i - start] = s


@compiled
def _tile_terms(norms, pair_tables, codes, start, stop, out):
    """The tile's per-item terms: ``norms`` where it holds one per item, else `pair_terms`."""
    if norms.shape[0] == codes.shape[0]:
        out[: stop - start] = norms[start:stop]
    else:
        pair_terms(pair_tables, codes, start, stop, out)


@compiled
def scan_top_k(tables, codes, norms, pair_tables, id_offset, heap_scores, heap_ids):
    """Merge the database ``codes`` (ids ``id_offset + i``) into each query's running top k.

    Args:
        tables: ``(nq, code_bytes, 256)`` float32 lookup tables.
        codes: ``(n, code_bytes)`` uint8.
        norms: ``(n,)`` float32 per-item term; or empty: the term is `pair_terms` of
            ``pair_tables`` (``(pairs, 65536)`` float32), computed per tile.
        id_offset: id of ``codes[0]``; ids must grow from call to call (shards in id order).
        heap_scores, heap_ids: ``(nq, k)`` float32 / int64 max-heaps on (score, id), initially
            ``+inf`` / ``-1``; updated in place.

    Every score is ``norm + table[0, c0] + table[1, c1] + ...`` summed in this order in float32
    (:meth:`sgh.search.asymmetric_index.AsymmetricIndex.rescore` sums alike). Four queries share
    each code load and run four independent add chains, far more pairs/s than one query at a
    time.
    """
    nq, code_bytes = tables.shape[0], tables.shape[1]
    n, k = codes.shape[0], heap_scores.shape[1]
    flat_codes = codes.reshape(-1)
    terms = np.empty(TILE_ITEMS, np.float32)
    for start in range(0, n, TILE_ITEMS):
        stop = min(n, start + TILE_ITEMS)
        _tile_terms(norms, pair_tables, codes, start, stop, terms)
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
                    w0 = _offer(heap_scores[q], heap_ids[q], s0, id_offset + i, k)
                if s1 < w1:
                    w1 = _offer(heap_scores[q + 1], heap_ids[q + 1], s1, id_offset + i, k)
                if s2 < w2:
                    w2 = _offer(heap_scores[q + 2], heap_ids[q + 2], s2, id_offset + i, k)
                if s3 < w3:
                    w3 = _offer(heap_scores[q + 3], heap_ids[q + 3], s3, id_offset + i, k)
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
                    worst = _offer(heap_scores[rest], heap_ids[rest], s, id_offset + i, k)


@compiled
def scan_scores(tables, codes, norms, pair_tables, out):
    """``out[q, i]`` = the score of code ``i`` for query ``q`` (the item terms and the sums as
    in `scan_top_k`); ``out`` is ``(nq, n)`` float32."""
    nq, code_bytes = tables.shape[0], tables.shape[1]
    n = codes.shape[0]
    flat_codes = codes.reshape(-1)
    terms = np.empty(TILE_ITEMS, np.float32)
    for start in range(0, n, TILE_ITEMS):
        stop = min(n, start + TILE_ITEMS)
        _tile_terms(norms, pair_tables, codes, start, stop, terms)
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
    each item's term is read first as its bound, ``level_terms[levels[i]]`` (one byte per item,
    within ``slack[q]`` of the term and of the float32 sums' rounding), and computed exactly
    from the pairs only where that bound could enter the query's heap (about 1% of the items
    at 32 and 64 bits on MNIST). The exact score is summed as `scan_top_k` sums it, so the
    results are bit-identical to its.
    """
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
                s = np.float32(0.0)  # the term as `pair_terms` sums it, then the tables
                p = 0
                for a in range(code_bytes):
                    row = np.int64(flat_codes[base + a]) * 256
                    for b in range(a + 1, code_bytes):
                        s += pair_tables[p, row + flat_codes[base + b]]
                        p += 1
                for j in range(code_bytes):
                    s += table[j * 256 + flat_codes[base + j]]
                if s < worst:
                    worst = _offer(heap_scores[q], heap_ids[q], s, i, k)


@compiled
def sort_heaps(heap_scores, heap_ids):
    """Sort each row's max-heap on ``(score, id)`` (as the scans leave them) in place, by
    ``(score, id)`` ascending: a heapsort, ``k log k`` per row where a sort of arbitrary rows
    (`sorted_heaps`) costs several times more. Empty slots (``+inf``, -1) end up last."""
    k = heap_scores.shape[1]
    for q in range(heap_scores.shape[0]):
        scores, ids = heap_scores[q], heap_ids[q]
        for end in range(k - 1, 0, -1):
            scores[0], scores[end] = scores[end], scores[0]
            ids[0], ids[end] = ids[end], ids[0]
            _sift_down(scores, ids, 0, end)


def sorted_heaps(heap_scores: np.ndarray, heap_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows in any order sorted by (score, id); empty slots (``+inf``, -1) last."""
    order = np.lexsort((heap_ids, heap_scores), axis=-1)
    return (np.take_along_axis(heap_scores, order, axis=1),
            np.take_along_axis(heap_ids, order, axis=1))


@compiled
def rescore_top_k(tables, codes, norms, candidates, top_scores, top_ids):
    """Each query's k best candidate rows by the exact score, sorted by (score, row).

    Args:
        tables, codes, norms: as `scan_top_k`.
        candidates: ``(nq, S)`` int64 rows of ``codes``, ``-1`` skipped; nearly in score order
            (a fast scan's approximate ranking), which makes the insertion sort below linear in
            practice.
        top_scores, top_ids: ``(nq, k)`` float32 / int64 outputs, filled with ``+inf`` / -1
            where a query has fewer than k candidates.

    Scores are summed as in `scan_top_k`, so a candidate's score is bit-identical to the full
    scan's.
    """
    nq, code_bytes = tables.shape[0], tables.shape[1]
    k, width = top_scores.shape[1], candidates.shape[1]
    scores = np.empty(width, np.float32)
    rows = np.empty(width, np.int64)
    for q in range(nq):
        table = tables[q].reshape(-1)
        n = 0
        for c in range(width):
            i = candidates[q, c]
            if i < 0:
                continue
            s = norms[i]
            for j in range(code_bytes):
                s += table[j * 256 + codes[i, j]]
            # Insertion by (score, row): the candidates arrive nearly sorted, so few moves.
            position = n
            while position > 0 and (scores[position - 1] > s or (
                    scores[position - 1] == s and rows[position - 1] > i)):
                scores[position] = scores[position - 1]
                rows[position] = rows[position - 1]
                position -= 1
            scores[position] = s
            rows[position] = i
            n += 1
        for r in range(k):
            if r < n:
                top_scores[q, r], top_ids[q, r] = scores[r], rows[r]
            else:
                top_scores[q, r], top_ids[q, r] = np.inf, -1


@compiled
def scan_lists_top_k(tables, list_tables, constants, codes, levels, level_terms, starts, probes,
                     heap_scores, heap_ids):
    """Each query's k best ``(score, row)`` among the codes of the inverted lists it probes,
    codes of residuals to their list's centroid.

    Args:
        tables: as `scan_top_k`, the query's.
        list_tables: ``(nlist, code_bytes, 256)`` float32, each list's centroid's tables: a
            probed list is scanned with ``tables[q] - list_tables[l]``.
        constants: ``(nq, nprobe)`` float32, added to the score of each probed list's items.
        codes, levels: ``(n, code_bytes)`` / ``(n,)`` uint8 in list order: list ``l`` holds
            rows ``starts[l] .. starts[l + 1] - 1``; an item's term is
            ``level_terms[levels[i]]`` (`sgh.search.byte_decoder.one_byte_terms`).
        probes: ``(nq, nprobe)`` int64 lists per query, ``-1`` skipped.
        heap_scores, heap_ids: as `scan_top_k` (ids are the rows).

    Every score is ``(term + t[0, c0] + t[1, c1] + ...) + constant`` in float32, ``t`` the
    list's table: an item's score does not depend on which other lists are probed. The lists
    are probed in any order, so a score equal to the heap's root displaces it when its row is
    smaller: ties by row.
    """
    nq, code_bytes = tables.shape[0], tables.shape[1]
    k = heap_scores.shape[1]
    width = code_bytes * 256
    table = np.empty(width, np.float32)
    for q in range(nq):
        query_table = tables[q].reshape(-1)
        worst = heap_scores[q, 0]
        for p in range(probes.shape[1]):
            chosen = probes[q, p]
            if chosen < 0:
                continue
            shift = list_tables[chosen].reshape(-1)
            for a in range(width):
                table[a] = query_table[a] - shift[a]
            constant = constants[q, p]
            for i in range(starts[chosen], starts[chosen + 1]):
                s = level_terms[levels[i]]
                for j in range(code_bytes):
                    s += table[j * 256 + codes[i, j]]
                s += constant
                if s < worst or (s == worst and i < heap_ids[q, 0]):
                    worst = _offer(heap_scores[q], heap_ids[q], s, i, k)
