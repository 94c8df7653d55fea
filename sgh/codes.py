"""Packed binary codes: bit packing, validation, Hamming words and popcount, and code health.

The package's one code convention: a code of ``bits`` bits is stored packed,
``np.packbits(bits_array, axis=1)``, a ``uint8`` array ``(n, ceil(bits / 8))`` whose first code
bit is the most significant bit of byte 0 and whose padding bits are zero. The Hamming distance
is ``popcount(a XOR b)``, computed on rows zero-padded to machine words (`as_words`).
"""

from __future__ import annotations

import hashlib

import numpy as np

from sgh.errors import UserInputError, check_int, one_line

_BYTE_POPCOUNT = np.array([bin(value).count("1") for value in range(256)], dtype=np.uint8)


def _popcount_lookup(words: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Per-element popcount through a 256-entry byte table (numpy < 2 has no bitwise_count)."""
    as_bytes = words.view(np.uint8).reshape(*words.shape, words.itemsize)
    dtype = np.uint8 if out is None else out.dtype
    return _BYTE_POPCOUNT[as_bytes].sum(axis=-1, dtype=dtype, out=out)


popcount = getattr(np, "bitwise_count", _popcount_lookup)


def pack_bits(bits: np.ndarray) -> np.ndarray:
    """``(n, l)`` booleans or 0/1 integers -> ``(n, ceil(l / 8))`` uint8 codes."""
    bits = np.asarray(bits)
    if bits.ndim != 2:
        raise ValueError(f"pack_bits expects a 2-D (n, bits) array, got shape {bits.shape}")
    if bits.dtype != np.bool_:
        if not np.all((bits == 0) | (bits == 1)):
            raise ValueError("pack_bits expects booleans or 0/1 values; found other values")
        bits = bits.astype(bool)
    return np.packbits(bits, axis=1)


def unpack_bits(packed: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: ``(n, ceil(bits/8))`` uint8 -> ``(n, bits)`` uint8 of 0/1."""
    return np.unpackbits(validate_codes(packed, bits), axis=1, count=bits)


def validate_codes(packed: np.ndarray, bits: int, name: str = "codes") -> np.ndarray:
    """``packed`` as a C-contiguous array of ``bits``-bit codes: 2-D uint8, ``ceil(bits / 8)``
    bytes per row, zero padding; else ValueError naming ``name``."""
    check_int("bits", bits, 1)
    packed = np.asarray(packed)
    if packed.ndim != 2 or packed.dtype != np.uint8:
        raise ValueError(f"{name} must be a 2-D uint8 array of packed bits (np.packbits(..., "
                         f"axis=1)), got dtype {packed.dtype} and shape {packed.shape}")
    n_bytes = -(-int(bits) // 8)
    if packed.shape[1] != n_bytes:
        low, high = 8 * packed.shape[1] - 7, 8 * packed.shape[1]
        raise ValueError(f"{name} have {packed.shape[1]} bytes per row, which holds {low}..{high} "
                         f"bits, but bits={bits} needs {n_bytes} bytes")
    padding_mask = (1 << (8 * n_bytes - bits)) - 1
    if padding_mask and packed.shape[0] and np.any(packed[:, -1] & padding_mask):
        raise ValueError(f"{name} have non-zero padding bits after bit {bits}; are these really "
                         f"{bits}-bit codes?")
    return np.ascontiguousarray(packed)


def stored_bits(arrays, where: str, key: str = "bits") -> int:
    """The code length a file stores under `key` (codes.npz, a Hamming index, an asymmetric
    score): a scalar integer >= 1, else one line naming the file and key, and the keys found."""
    value = arrays.get(key) if hasattr(arrays, "get") else None
    if value is None:
        raise UserInputError(f"{where}: missing key {key!r} (the code length); keys found: "
                             f"{', '.join(sorted(arrays)) or 'none'}")
    value = np.asarray(value)
    if value.shape != () or value.dtype.kind not in "iu" or value < 1:
        raise UserInputError(f"{where}: key {key!r} holds {one_line(value)}; accepted: the "
                             "code length, a scalar integer >= 1")
    return int(value)


def model_fingerprint(arrays: dict[str, np.ndarray]) -> str:
    """16 hex digits naming the model that makes (and scores) codes: a hash of the arrays that
    define its encoder, by name, dtype, shape and bytes. Codes and scores whose fingerprints
    differ are never searched together."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{array.dtype.str}:{array.shape};".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()[:16]


def as_words(packed: np.ndarray) -> np.ndarray:
    """Packed rows as ``(n, n_words)`` unsigned words (u1/u2/u4/u8), each row zero-padded (so
    the padding never contributes to XOR and popcount)."""
    n, n_bytes = packed.shape
    word_bytes = 8 if n_bytes > 4 else {1: 1, 2: 2, 3: 4, 4: 4}[n_bytes]
    padded_bytes = -(-n_bytes // word_bytes) * word_bytes
    padded = np.zeros((n, padded_bytes), dtype=np.uint8)
    padded[:, :n_bytes] = packed
    return padded.view(f"u{word_bytes}")


def code_health(database_packed: np.ndarray, bits: int, rows_per_chunk: int = 1 << 16) -> dict:
    """Statistics that reveal degenerate codes: ``distinct_codes``; ``dead_bits`` (the same in
    every code); per bit, ``bit_balance`` (the fraction set, 0.5 ideal) and ``bit_entropy`` (1.0
    ideal); ``mean_abs_bit_correlation`` over pairs of live bits (0.0 with fewer than two);
    ``code_entropy`` of whole codes, at most ``min(bits, log2(n))``. Memory: ``rows_per_chunk``
    unpacked codes at a time, plus O(bits^2)."""
    database_packed = validate_codes(database_packed, bits, "database codes")
    n = database_packed.shape[0]
    if n == 0:
        raise ValueError("code_health needs at least one database code, got 0")
    words = as_words(database_packed)
    if words.shape[1] == 1:
        _, multiplicity = np.unique(words[:, 0], return_counts=True)
    else:
        _, multiplicity = np.unique(words, axis=0, return_counts=True)
    frequency = multiplicity / n

    # Ones per bit and per pair of bits: integers, exact in float64 up to 2**53 codes.
    ones = np.zeros(bits)
    both = np.zeros((bits, bits))
    for start in range(0, n, rows_per_chunk):
        chunk = np.unpackbits(database_packed[start : start + rows_per_chunk], axis=1, count=bits)
        chunk = chunk.astype(np.float64)
        ones += chunk.sum(axis=0)
        both += chunk.T @ chunk
    mean = ones / n
    live = (ones > 0) & (ones < n)
    mean_abs_correlation = 0.0
    if live.sum() >= 2:
        m = mean[live]
        covariance = both[np.ix_(live, live)] / n - np.outer(m, m)
        std = np.sqrt(m * (1.0 - m))
        correlation = covariance / np.outer(std, std)
        upper = np.triu_indices(len(m), k=1)
        mean_abs_correlation = float(np.abs(correlation[upper]).mean())
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = -(mean * np.log2(mean) + (1.0 - mean) * np.log2(1.0 - mean))
    bit_entropy = np.where((mean > 0) & (mean < 1), terms, 0.0)  # 0 log 0 = 0
    return {"distinct_codes": int(multiplicity.size), "dead_bits": int(bits - live.sum()),
            "bit_balance": mean.tolist(), "mean_abs_bit_correlation": mean_abs_correlation,
            "bit_entropy": bit_entropy.tolist(),
            "code_entropy": float(-(frequency * np.log2(frequency)).sum())}
