"""The compiled kernels of the exact neighbour search (`sgh.data.neighbours`, whose module doc
gives the method): centring a chunk, and scanning its products with the queries. Each runs on
one worker's rows or queries, without the GIL (`sgh.compiled`).
"""

from __future__ import annotations

import numpy as np

from sgh.compiled import compiled

# Queries screened at a time once an item passes some query's threshold: only the segments it
# passes in are looked at query by query.
_SEGMENT = 64


@compiled
def column_sums(rows, sums):
    """Add the columns of ``rows`` into float64 ``sums`` (independent columns: vectorised)."""
    for i in range(rows.shape[0]):
        for j in range(rows.shape[1]):
            sums[j] += rows[i, j]


@compiled
def centre_rows(rows, shift, centred, squared_norms):
    """``centred = rows - shift`` (in float64, rounded once to ``centred``'s dtype) and each
    centred row's squared norm, summed in float64 from the rounded values: in four running sums
    (any order has the same error bound), as one chain of dependent adds bounds the speed."""
    dim = rows.shape[1]
    for i in range(rows.shape[0]):
        row = centred[i]
        for j in range(dim):
            row[j] = rows[i, j] - shift[j]
        total0 = total1 = total2 = total3 = 0.0
        for j in range(0, dim - 3, 4):
            total0 += np.float64(row[j]) * np.float64(row[j])
            total1 += np.float64(row[j + 1]) * np.float64(row[j + 1])
            total2 += np.float64(row[j + 2]) * np.float64(row[j + 2])
            total3 += np.float64(row[j + 3]) * np.float64(row[j + 3])
        for j in range(dim - dim % 4, dim):
            total0 += np.float64(row[j]) * np.float64(row[j])
        squared_norms[i] = (total0 + total1) + (total2 + total3)


@compiled
def count_within(products, item_term, product_scale, thresholds):
    """How many queries' keys ``item_term + product_scale * products`` (one item's products
    with a run of queries) are <= their thresholds; branch-free, so that it vectorises."""
    count = 0
    for i in range(products.shape[0]):
        count += item_term + product_scale * np.float64(products[i]) <= thresholds[i]
    return count


@compiled
def replace_top(heap, key):
    """Put ``key`` in place of the max-heap's root, sift it down; return the new root."""
    size = heap.shape[0]
    position = 0
    while True:
        child = 2 * position + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] > heap[child]:
            child += 1
        if heap[child] <= key:
            break
        heap[position] = heap[child]
        position = child
    heap[position] = key
    return heap[0]


@compiled
def keep_within(keys, ids, count, threshold):
    """Drop the listed candidates whose key exceeds ``threshold``; return how many are left."""
    kept = 0
    for c in range(count):
        if keys[c] <= threshold:
            keys[kept] = keys[c]
            ids[kept] = ids[c]
            kept += 1
    return kept


@compiled
def offer_items(products, item_terms, product_scale, first_id, margins, ceilings, thresholds,
                 heaps, keys, ids, counts):
    """Scan a block of items against a block of queries: item ``first_id + j`` has with query i
    the float64 key ``item_terms[j] + product_scale * products[j, i]``.

    Per query, ``heaps[i]`` (a max-heap of the k smallest keys so far) is updated,
    ``thresholds[i]`` kept at min(``ceilings[i]``, its root + ``margins[i]``), and every key
    <= the threshold at its turn listed in ``keys[i]`` / ``ids[i]`` after the ``counts[i]``
    already there; the root only decreases, so the final list holds every item within the
    final threshold. A full list is compacted; one that stays over half full (many near ties)
    gets count -1 and is skipped from then on (the caller scans it again with a longer list).
    """
    capacity = keys.shape[1]
    n_queries = products.shape[1]
    for j in range(products.shape[0]):
        term = item_terms[j]
        if count_within(products[j], term, product_scale, thresholds) == 0:
            continue  # the usual case
        for start in range(0, n_queries, _SEGMENT):
            stop = min(start + _SEGMENT, n_queries)
            row = products[j, start:stop]
            if count_within(row, term, product_scale, thresholds[start:stop]) == 0:
                continue
            for i in range(start, stop):
                key = term + product_scale * np.float64(row[i - start])
                if key > thresholds[i]:
                    continue
                if key < heaps[i, 0]:
                    thresholds[i] = min(ceilings[i], replace_top(heaps[i], key) + margins[i])
                count = counts[i]
                if count == capacity:
                    count = keep_within(keys[i], ids[i], count, thresholds[i])
                    if count > capacity // 2:
                        counts[i] = -1
                        thresholds[i] = -np.inf  # no key is listed any more
                        continue
                keys[i, count] = key
                ids[i, count] = first_id + j
                counts[i] = count + 1
