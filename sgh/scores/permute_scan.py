"""The exact top-k scan of :mod:`sgh.scores.lookup_kernels` (`scan_top_k`'s results, to the
bit), filtered by 8-bit lower bounds that the processor sums 64 items at a time with AVX-512
VBMI's byte permute (``vpermi2b``, emitted through LLVM from numba).

**The bound.** Per query, table j is stored as ``U_j[v] = floor((table[j, v] - low_j) / step)``
(``low_j`` its minimum), and per tile each item's term as a level ``floor((term - term_low) /
term_step)`` read through the query's row ``U_t[level] = floor(level term_step / step)``, all
clipped to 255. Each entry is then at most its real share over ``step`` (floors computed in
float32 are within 1e-4 of it: `_MARGIN`), so for ``L = U_t + sum_j U_j`` (uint16) a score is at
least ``base + step L - allowance``, ``base = term_low + sum_j low_j``, ``allowance`` float32
rounding (`ROUNDING` of the sum's largest magnitude). An item whose bound passes the query's
k-th score cannot enter its top k; the rest are scored exactly, summed as `scan_top_k` sums.

**A tile** (its codes transposed, one row per byte, the levels a row after them), per query:
1. every 64 items' sums are stored with their minimum (two ``vpermi2b``, one per half of a
   256-entry row, and a select by the index's top bit, for each row);
2. in the first tile, where nothing is clipped (the step spans every table and the tile's
   terms), the k-th smallest sum ``m_k`` bounds the k-th score from above: ``base + step (m_k +
   rows + 1) + term_step + allowance`` (each floor loses under one step, the level under one
   ``term_step``); ``m_k`` comes from the 64-item minima, then from the sums below them;
3. the items of the blocks whose minimum passes the bar are scored exactly and kept by
   :mod:`sgh.scores.top_k`'s reservoir, whose keys order as the heap does, cut to k at the
   tile's end so that the next tile starts from the exact k-th score.

Once a query holds k scores, its tables are quantised again at ``(k-th score - base) / 255``
where that is finer (entries above it clip, and their bound stays a lower one), and later
tiles' levels take the queries' mean step. At 32 bits about 520 of MNIST's 69,000 items a
query are scored exactly, 180 of SIFT10K's 10,000 and 1,850 of CIFAR-10 GIST's 59,000
(benchmarks/LOG.md).

`AVAILABLE`: whether numba compiles for a processor with the instruction. Where it does not,
the kernel is never compiled and `AsymmetricIndex` runs the scalar scan.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from sgh.compiled import compiled
from sgh.scores.lookup_kernels import TILE_ITEMS, tile_terms
from sgh.scores.top_k import (
    CAPACITY_PER_K,
    NO_BAR,
    keep_smallest,
    key_score,
    score_key,
    write_sorted,
)

ROUNDING = 1e-5  # float32 rounding of a score's sum, relative to its largest magnitude
LANES = 64  # items a bound sum covers: one 512-bit register of bytes
_LEVELS = 255  # the largest table entry and term level
_MARGIN = 1.0  # the bar's allowance, in steps, for floors computed in float32
MAX_CODE_BYTES = 65535 // _LEVELS - 1  # the code bytes whose rows (and the terms') sum in uint16
# Queries a call: from FROM_QUERIES the tiles' transposition, paid once a call, costs less than
# it saves (MNIST, held terms: 0.72x the scalar scan's time at 8 queries, 2.2x at 4); up to
# MAX_QUERIES_A_CALL, so that the reservoirs (3.2 KB a query at k = 100) stay small.
FROM_QUERIES, MAX_QUERIES_A_CALL = 8, 1024
_LAST_ROW = np.uint64(0xFFFFFFFF)  # the largest row a key holds (`sgh.scores.top_k.MAX_ROWS` - 1)
_REQUANTISE_BELOW = 0.8  # a query's tables are quantised again when the step shrinks below this

_BYTES = ir.VectorType(ir.IntType(8), LANES)
_WORDS = ir.VectorType(ir.IntType(16), LANES)
_WORD = ir.IntType(16)


def _compiles_for_byte_permute() -> bool:
    """Whether numba compiles (not disabled) for this processor (its default), which has VBMI."""
    from llvmlite import binding
    from numba.core import config

    if config.DISABLE_JIT or config.CPU_NAME not in (None, "host") or config.CPU_FEATURES:
        return False
    return bool(binding.get_host_cpu_features().get("avx512vbmi", False))


AVAILABLE = _compiles_for_byte_permute()


def _c_array(array_type, dtype, ndim) -> bool:
    return (isinstance(array_type, types.Array) and array_type.layout == "C"
            and array_type.dtype == dtype and array_type.ndim == ndim)


def _vector_at(builder, array_struct, element_type, offset, vector_type):
    """A pointer to ``vector_type`` at element ``offset`` of an array's data."""
    data = builder.bitcast(array_struct.data, ir.PointerType(element_type))
    return builder.bitcast(builder.gep(data, [offset]), ir.PointerType(vector_type))


@intrinsic
def _block_sums(typingctx, luts, codes_t, start, sums):
    """Store ``sums[start + l] = sum_r luts[r, codes_t[r, start + l]]`` for the 64 lanes l
    (uint16) and return their minimum. ``luts``: ``(rows, 256)`` uint8; ``codes_t``: ``(rows,
    width)`` uint8; both C-contiguous, ``start + 64 <= width``."""
    if not (_c_array(luts, types.uint8, 2) and _c_array(codes_t, types.uint8, 2)
            and _c_array(sums, types.uint16, 1)):
        return None  # the pointer arithmetic below assumes these layouts
    signature = types.uint16(luts, codes_t, types.int64, sums)

    def codegen(context, builder, sig, args):
        luts_value, codes_value, start_value, sums_value = args
        lut_array = context.make_array(sig.args[0])(context, builder, luts_value)
        code_array = context.make_array(sig.args[1])(context, builder, codes_value)
        sum_array = context.make_array(sig.args[3])(context, builder, sums_value)
        rows = builder.extract_value(lut_array.shape, 0)
        width = builder.extract_value(code_array.shape, 1)
        permute = builder.module.declare_intrinsic(
            "llvm.x86.avx512.vpermi2var.qi.512", fnty=ir.FunctionType(_BYTES, [_BYTES] * 3))
        smallest = builder.module.declare_intrinsic(
            "llvm.vector.reduce.umin.v64i16", fnty=ir.FunctionType(_WORD, [_WORDS]))
        total = cgutils.alloca_once_value(builder, ir.Constant(_WORDS, None))
        with cgutils.for_range(builder, rows) as loop:
            row = loop.index
            quarters = [builder.load(_vector_at(builder, lut_array, ir.IntType(8),
                                                builder.add(builder.mul(row, row.type(256)),
                                                            row.type(LANES * quarter)),
                                                _BYTES), align=1)
                        for quarter in range(4)]
            index = builder.load(_vector_at(builder, code_array, ir.IntType(8),
                                            builder.add(builder.mul(row, width), start_value),
                                            _BYTES), align=1)
            # vpermi2b reads an index's low 7 bits across two registers: entries 0-127 from
            # the first pair of quarters, 128-255 from the second, chosen by the top bit.
            low = builder.call(permute, [quarters[0], index, quarters[1]])
            high = builder.call(permute, [quarters[2], index, quarters[3]])
            top_bit = builder.icmp_signed("<", index, ir.Constant(_BYTES, None))
            entry = builder.zext(builder.select(top_bit, high, low), _WORDS)
            builder.store(builder.add(builder.load(total), entry), total)
        result = builder.load(total)
        builder.store(result, _vector_at(builder, sum_array, _WORD, start_value, _WORDS), align=2)
        return builder.call(smallest, [result])

    return signature, codegen


@intrinsic
def _stored_below(typingctx, sums, start, bar):
    """The 64-bit mask of ``sums[start + l] < bar`` over the 64 lanes l (bit l: lane l)."""
    if not _c_array(sums, types.uint16, 1):
        return None
    signature = types.uint64(sums, types.int64, types.uint16)

    def codegen(context, builder, sig, args):
        sums_value, start_value, bar_value = args
        sum_array = context.make_array(sig.args[0])(context, builder, sums_value)
        stored = builder.load(_vector_at(builder, sum_array, _WORD, start_value, _WORDS), align=2)
        bars = builder.insert_element(ir.Constant(_WORDS, ir.Undefined), bar_value,
                                      ir.IntType(32)(0))
        bars = builder.shuffle_vector(bars, ir.Constant(_WORDS, ir.Undefined),
                                      ir.Constant(ir.VectorType(ir.IntType(32), LANES), None))
        return builder.bitcast(builder.icmp_unsigned("<", stored, bars), ir.IntType(64))

    return signature, codegen


@intrinsic
def _lowest_bit(typingctx, mask):
    """The index of a nonzero mask's lowest set bit."""
    signature = types.int64(types.uint64)

    def codegen(context, builder, sig, args):
        return builder.cttz(args[0], ir.IntType(1)(1))

    return signature, codegen


@compiled
def _bar(limit, base, step, allowance):
    """The uint16 bar of the bound sums that a score ``<= limit`` passes (module doc)."""
    if not limit < np.inf:
        return np.uint16(65535)
    x = (limit + allowance - base) / step + _MARGIN
    if x < 0:
        return np.uint16(0)
    if x >= 65534:
        return np.uint16(65535)
    return np.uint16(np.int64(x) + 1)


@compiled
def _key_above(limit):
    """The smallest key above the key of every score ``<= limit`` (float64; `score_key`)."""
    if not limit < np.inf:
        return NO_BAR
    below = np.float32(limit)
    if below > limit:
        below = np.nextafter(below, np.float32(-np.inf))
    return score_key(below, _LAST_ROW) + np.uint64(1)


@compiled
def _quantise_tables(table, lows, step, lut):
    """``lut[j, v]`` = ``floor((table[j, v] - lows[j]) / step)``, clipped to 255."""
    scale = np.float32(1.0 / step)
    for j in range(table.shape[0]):
        for v in range(256):
            x = (table[j, v] - lows[j]) * scale
            lut[j, v] = np.uint8(x) if x < _LEVELS else np.uint8(_LEVELS)


@compiled
def _kth_smallest_sum(sums, minima, blocks, k, histogram):
    """The k-th smallest of the bound sums of ``blocks`` full blocks (``sums``, ``minima``:
    their stored sums and each block's minimum): first the k-th smallest block minimum (k sums,
    one a block, are no larger), then among the sums no larger than that one."""
    histogram[:] = 0
    for b in range(blocks):
        histogram[minima[b]] += 1
    seen, bound = 0, 0
    while seen + histogram[bound] < k:
        seen += histogram[bound]
        bound += 1
    histogram[: bound + 1] = 0
    for b in range(blocks):
        if minima[b] <= bound:
            mask = _stored_below(sums, b * LANES, np.uint16(bound + 1))
            while mask != 0:
                histogram[sums[b * LANES + _lowest_bit(mask)]] += 1
                mask &= mask - np.uint64(1)
    seen, value = 0, 0
    while seen + histogram[value] < k:
        seen += histogram[value]
        value += 1
    return np.uint16(value)


@compiled
def permute_scan_top_k(tables, codes, norms, pair_tables, out_scores, out_ids, unbounded):
    """`scan_top_k`'s results (the same arguments; ids from 0), sorted by ``(score, id)`` into
    ``out_scores``, ``out_ids`` (``(nq, k)``, ``k <= n``): module doc. A query whose tables are
    not all finite is left to the scalar scan: ``unbounded[q]`` set, its rows untouched."""
    nq, code_bytes = tables.shape[0], tables.shape[1]
    n, k = codes.shape[0], out_scores.shape[1]
    rows = code_bytes + 1
    flat_codes = codes.reshape(-1)
    terms = np.empty(TILE_ITEMS, np.float32)
    codes_t = np.empty((rows, TILE_ITEMS), np.uint8)
    sums = np.empty(TILE_ITEMS, np.uint16)
    minima = np.empty(TILE_ITEMS // LANES, np.uint16)
    histogram = np.empty(rows * _LEVELS + 1, np.int64)
    luts = np.zeros((nq, rows, 256), np.uint8)
    lows = np.empty((nq, code_bytes), np.float32)
    table_low = np.zeros(nq, np.float64)  # sum_j low_j
    largest = np.zeros(nq, np.float64)  # sum_j max |table[j]|: the sum's largest magnitude
    spans = np.zeros(nq, np.float64)
    steps = np.zeros(nq, np.float64)  # 0: not quantised yet
    keys = np.empty((nq, CAPACITY_PER_K * k), np.uint64)
    counts = np.zeros(nq, np.int64)
    bar_keys = np.full(nq, NO_BAR, np.uint64)
    for q in range(nq):
        for j in range(code_bytes):
            low, high = tables[q, j, 0], tables[q, j, 0]
            for v in range(256):
                entry = tables[q, j, v]
                low, high = min(low, entry), max(high, entry)
                if not np.isfinite(entry):
                    unbounded[q] = True
            lows[q, j] = low
            table_low[q] += low
            largest[q] += max(abs(low), abs(high))
            spans[q] = max(spans[q], np.float64(high) - low)
    for start in range(0, n, TILE_ITEMS):
        stop = min(n, start + TILE_ITEMS)
        count, blocks = stop - start, -(-(stop - start) // LANES)
        tile_terms(norms, pair_tables, codes, start, stop, terms)
        term_low, term_high, finite = np.float64(terms[0]), np.float64(terms[0]), True
        for i in range(count):
            term_low = min(term_low, np.float64(terms[i]))
            term_high = max(term_high, np.float64(terms[i]))
            finite &= np.isfinite(terms[i])
        if not finite:  # an item's term: no bound holds, for any query
            unbounded[:] = True
            return
        term_step = (term_high - term_low) / _LEVELS
        if start > 0:  # later tiles: levels as fine as the queries' mean step
            mean_step = 0.0
            for q in range(nq):
                mean_step += steps[q] / nq
            if 0 < mean_step < term_step:
                term_step = mean_step
        if term_step <= 0:
            term_step = 1.0
        for i in range(count):
            for j in range(code_bytes):
                codes_t[j, i] = flat_codes[(start + i) * code_bytes + j]
            level = (np.float64(terms[i]) - term_low) / term_step
            if level < _LEVELS + 1:  # the tile's largest term may round just above 255
                codes_t[code_bytes, i] = np.uint8(level)
            else:  # beyond the levels: clipped, still below the term
                codes_t[code_bytes, i] = _LEVELS
        codes_t[:, count : blocks * LANES] = 0  # the last block's lanes past the tile
        term_magnitude = max(abs(term_low), abs(term_high))
        for q in range(nq):
            if unbounded[q]:
                continue
            table = tables[q].reshape(-1)
            base = table_low[q] + term_low
            allowance = ROUNDING * (largest[q] + term_magnitude)
            keys_q, count_q, bar_key = keys[q], counts[q], bar_keys[q]
            limit = np.float64(key_score(bar_key)) if count_q >= k else np.inf
            lut = luts[q]
            if steps[q] == 0:
                steps[q] = max(spans[q], term_high - term_low) / _LEVELS
                if steps[q] <= 0:
                    steps[q] = 1.0
                _quantise_tables(tables[q], lows[q], steps[q], lut)
            finer = (limit + allowance - base) / _LEVELS  # once the k-th score is known
            if 0 < finer < _REQUANTISE_BELOW * steps[q]:
                steps[q] = finer
                _quantise_tables(tables[q], lows[q], finer, lut)
            step = steps[q]
            term_scale = term_step / step
            for level in range(256):
                x = level * term_scale
                lut[code_bytes, level] = np.uint8(x) if x < _LEVELS else np.uint8(_LEVELS)
            for block in range(blocks):
                minima[block] = _block_sums(lut, codes_t, block * LANES, sums)
            full_blocks = count // LANES
            # In the first tile nothing is clipped: the step spans every table and the tile's
            # terms, the levels 255 steps of those terms.
            if start == 0 and full_blocks >= k:
                smallest_k = _kth_smallest_sum(sums, minima, full_blocks, k, histogram)
                limit = min(limit, base + step * (smallest_k + rows + _MARGIN) + term_step
                            + allowance)
            bar = _bar(limit, base, step, allowance)
            entry = min(bar_key, _key_above(limit))  # a scored item is kept below this key
            for block in range(blocks):
                if minima[block] >= bar:
                    continue
                mask = _stored_below(sums, block * LANES, bar)
                if (block + 1) * LANES > count:
                    mask &= (np.uint64(1) << np.uint64(count - block * LANES)) - np.uint64(1)
                while mask != 0:
                    i = start + block * LANES + _lowest_bit(mask)
                    mask &= mask - np.uint64(1)
                    s = terms[i - start]
                    for j in range(code_bytes):
                        s += table[j * 256 + flat_codes[i * code_bytes + j]]
                    # Written in any case and kept by the count, without a branch: about half
                    # the items scored are not kept, at random (1.1-1.3x faster). A sum of
                    # finite entries is never NaN; +inf's key is above every bar, as the heap
                    # never keeps it.
                    keys_q[count_q] = score_key(s, i)
                    count_q += np.int64(keys_q[count_q] < entry)
                    if count_q == keys_q.shape[0]:
                        bar_key, count_q = keep_smallest(keys_q, count_q, k), k
                        entry = min(entry, bar_key)
                        limit = min(limit, np.float64(key_score(bar_key)))
                        bar = _bar(limit, base, step, allowance)
            if count_q > k:  # the next tile starts from the exact k-th score
                bar_key, count_q = keep_smallest(keys_q, count_q, k), k
            bar_key = min(bar_key, entry)
            counts[q], bar_keys[q] = count_q, bar_key
    for q in range(nq):
        if not unbounded[q]:
            write_sorted(keys[q], counts[q], k, out_scores[q], out_ids[q])
