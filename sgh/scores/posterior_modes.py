"""Coding items by a byte decoder: each item's code moved from its encoder's code toward the
decoder's posterior mode, as far as an index's ``encoding`` says.

The decoder ``x^(h) = sum_j C_j[h_j]`` (in the tables' coordinates, `sgh.scores.byte_decoder`)
gives each code an error ``||x - x^(h)||^2``; the encodings, cheapest first:

* ``encoder``: the encoder's code as it is (amortised inference: one forward pass).
* ``flip<T>`` (1 <= T <= 8): two sweeps over the bytes, each byte set to the best of the 2^T
  values that flip any of the encoder's T least certain bits of it (by the bit weights'
  magnitudes), the other bytes as they are: the encoder proposes, the decoder chooses. ``flip8``
  is ``icm2``.
* ``icm<N>`` (1 <= N <= 16): N sweeps of iterated conditional modes, each byte set to the best of
  all its 256 values, the others as they are.
* ``local_search``: ``icm4``, then `LOCAL_SEARCH_ROUNDS` rounds of iterated local search, as
  faiss's LSQ encodes: a random byte moved to a random value, ICM again, the move kept where the
  error fell.

No step makes an item's error larger, and every item is coded alone: the same codes in any
batches or order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from sgh.compiled import compiled
from sgh.errors import UserInputError

ENCODE_SWEEPS = 4  # ICM sweeps of ``local_search`` before its rounds
# Local-search rounds (module doc), each ICM_SWEEPS_PER_ROUND sweeps from a moved byte. Fitting
# does without them: there they cost far more than they give the database codes.
LOCAL_SEARCH_ROUNDS = 16
ICM_SWEEPS_PER_ROUND = 2
FLIP_SWEEPS = 2  # sweeps of ``flip<T>``: the second recovers what the first's order missed
BLOCK_ROWS = 1 << 14  # items whose errors against one table are computed at a time
ACCEPTED = "encoder, flip1 .. flip8, icm1 .. icm16, local_search"


@dataclass(frozen=True)
class Encoding:
    """What an encoding (module doc) does after the encoder: ``flips`` (T of ``flip<T>``, 0:
    none), ``icm_sweeps`` and ``local_search_rounds``."""

    name: str
    flips: int = 0
    icm_sweeps: int = 0
    local_search_rounds: int = 0

    @classmethod
    def named(cls, name: str) -> Encoding:
        """The encoding called ``name``; ValueError naming what is accepted otherwise."""
        match = re.fullmatch(r"(flip|icm)([1-9][0-9]?)", str(name))
        count = int(match[2]) if match else 0
        if name == "encoder":
            return cls(name)
        if match and match[1] == "flip" and count <= 8:
            return cls(name, flips=count)
        if match and match[1] == "icm" and count <= 16:
            return cls(name, icm_sweeps=count)
        if name == "local_search":
            return cls(name, icm_sweeps=ENCODE_SWEEPS, local_search_rounds=LOCAL_SEARCH_ROUNDS)
        raise ValueError(f"encoding={name!r} is not known; accepted: {ACCEPTED}")


def check_encoding_setting(value: str) -> None:
    """``eval.encoding``: ``auto`` or an encoding's name; UserInputError otherwise."""
    if value != "auto":
        try:
            Encoding.named(value)
        except ValueError as error:
            raise UserInputError(f"eval.{error}; or auto (validation's choice)") from None


def index_encoding(encoding: str | None, codes_by_bytes: bool, nlist: int | None,
                   validated: str) -> str | None:
    """How far an index's byte-decoder codes go: ``encoding``, or by default the model's
    ``validated`` choice, or local search in inverted lists (their decoder of residuals is
    fitted by `train`, which no validation measured); None where the codes are the encoder's."""
    if not codes_by_bytes:
        if encoding is not None:
            raise ValueError(f"encoding={encoding!r} says how far the byte decoder's codes go; "
                             "an index of the modes hamming, scan and two_stage stores the "
                             "encoder's own codes: accepted: mode='bytes', or no encoding")
        return None
    if encoding is None:
        return validated if nlist is None else "local_search"
    Encoding.named(encoding)  # a ValueError naming what is accepted
    if nlist is not None and encoding == "encoder":
        raise ValueError("encoding='encoder' with nlist: items in inverted lists are coded as "
                         "residuals to their list's centroid, which the encoder never saw; "
                         "accepted: icm1 .. icm16, local_search")
    return encoding


def encoded(centred: np.ndarray, start_codes: np.ndarray, tables: np.ndarray, valid: np.ndarray,
            encoding: Encoding, certainty: np.ndarray | None = None) -> np.ndarray:
    """The codes ``encoding`` makes of items ``centred`` (the tables' coordinates) from their
    encoder codes ``start_codes``; ``certainty`` ``(n, bits)``: each bit's weight magnitude, which
    ``flip<T>`` needs."""
    codes = start_codes.copy()
    if encoding.flips:
        if certainty is None:
            raise ValueError(f"encoding={encoding.name!r} flips the encoder's least certain "
                             "bits, and no bit weights were given")
        widths = np.full((len(codes), codes.shape[1] * 8), np.inf, np.float32)
        widths[:, : certainty.shape[1]] = certainty  # padding bits: never flipped
        flip_sweeps(np.ascontiguousarray(centred, np.float32), codes, widths,
                    np.ascontiguousarray(tables, np.float32), squared_entries(tables, valid),
                    encoding.flips, FLIP_SWEEPS)
    if encoding.icm_sweeps:
        codes = posterior_modes(centred, codes, tables, valid, encoding.icm_sweeps)
    for start in range(0, len(codes) if encoding.local_search_rounds else 0, BLOCK_ROWS):
        rows = slice(start, start + BLOCK_ROWS)
        codes[rows] = _local_search(centred[rows], codes[rows], start_codes[rows], tables,
                                    valid, encoding.local_search_rounds)
    return codes


def valid_values(bits: int) -> np.ndarray:
    """``(bytes, 256)`` bool: the values each code byte can take (the last byte's padding bits,
    low in the byte, are always 0)."""
    valid = np.ones((-(-bits // 8), 256), bool)
    if bits % 8:
        valid[-1] = np.arange(256) % (1 << (8 - bits % 8)) == 0
    return valid


def squared_entries(tables: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``(bytes, 256)`` float32 ``||C_j[v]||^2``, infinite where ``v`` is no value of byte j."""
    squared = np.einsum("jvd,jvd->jv", tables, tables).astype(np.float32)
    squared[~valid] = np.inf
    return squared


def reconstruct(codes: np.ndarray, tables: np.ndarray) -> np.ndarray:
    """``(n, r)`` float32 ``sum_j C_j[h_j]`` of packed codes."""
    out = np.zeros((len(codes), tables.shape[2]), np.float32)
    for j in range(len(tables)):
        out += tables[j][codes[:, j]]
    return out


def posterior_modes(centred: np.ndarray, codes: np.ndarray, tables: np.ndarray,
                    valid: np.ndarray, sweeps: int) -> np.ndarray:
    """Iterated conditional modes (module doc) from ``codes``, ``sweeps`` times over the bytes;
    a block of rows stops early when a sweep changes nothing."""
    codes = codes.copy()
    squared = squared_entries(tables, valid)
    for start in range(0, len(codes), BLOCK_ROWS):
        block = codes[start : start + BLOCK_ROWS]
        residual = centred[start : start + len(block)] - reconstruct(block, tables)
        for _ in range(sweeps):
            changed = False
            for j in range(len(tables)):
                residual += tables[j][block[:, j]]
                # ||C_j[v]||^2 - 2 <residual, C_j[v]> in place: the same bits, one array fewer.
                scores = residual @ tables[j].T
                scores *= -2.0
                scores += squared[j]
                best = np.argmin(scores, axis=1)
                changed |= bool((best != block[:, j]).any())
                block[:, j] = best
                residual -= tables[j][block[:, j]]
            if not changed:
                break
    return codes


# Vectorised sums (fastmath): 3x the throughput of the loop as written; a candidate's score may
# differ in its last bits between processors, so a near-tie may go either way.
@compiled(fastmath=True)
def flip_sweeps(centred, codes, certainty, tables, squared, flips, sweeps):
    """``flip<T>`` (module doc) in place on ``codes`` ``(n, bytes)`` uint8, from them:
    ``certainty`` ``(n, 8 bytes)`` float32 (infinite for padding bits), ``squared`` from
    `squared_entries`. Ties go to the earlier candidate, the encoder's own value first."""
    n, n_bytes = codes.shape
    dim = centred.shape[1]
    count = 1 << flips
    residual = np.empty(dim, np.float32)
    values = np.empty((n_bytes, count), np.int64)  # each byte's candidates
    order = np.empty(8, np.int64)
    for i in range(n):
        residual[:] = centred[i]
        for j in range(n_bytes):
            start = codes[i, j]
            residual -= tables[j, start]
            # The byte's bits by certainty, least certain first (an insertion sort, stable:
            # ties keep the earlier bit first; no allocation per item).
            for b in range(8):
                weight, p = certainty[i, 8 * j + b], b
                while p > 0 and certainty[i, 8 * j + order[p - 1]] > weight:
                    order[p] = order[p - 1]
                    p -= 1
                order[p] = b
            for s in range(count):
                mask = 0
                for b in range(flips):
                    if (s >> b) & 1:
                        mask |= 1 << (7 - order[b])
                values[j, s] = start ^ mask
        for _ in range(sweeps):
            for j in range(n_bytes):
                residual += tables[j, codes[i, j]]
                best_value, best_score = codes[i, j], np.inf
                for s in range(count):
                    value = values[j, s]
                    if squared[j, value] == np.inf:
                        continue
                    row = tables[j, value]
                    dot = np.float32(0.0)
                    for d in range(dim):
                        dot += residual[d] * row[d]
                    score = squared[j, value] - 2.0 * dot
                    if score < best_score:
                        best_value, best_score = value, score
                codes[i, j] = best_value
                residual -= tables[j, best_value]


def _local_search(centred: np.ndarray, codes: np.ndarray, start_codes: np.ndarray,
                  tables: np.ndarray, valid: np.ndarray, rounds: int) -> np.ndarray:
    """Iterated local search (module doc) over ``rounds``. Which byte moves, and to which
    value, is a hash of the item's start code and the round: the same in any batch."""
    n_bytes = codes.shape[1]
    keys = np.zeros(len(codes), np.uint64)
    for j in range(n_bytes):
        keys = _mixed(keys ^ start_codes[:, j].astype(np.uint64))
    best, best_error = codes.copy(), squared_errors(centred, codes, tables)
    for number in range(rounds):
        draw = _mixed(keys + np.uint64(number + 1))
        trial = best.copy()
        trial[np.arange(len(trial)), (draw % np.uint64(n_bytes)).astype(np.intp)] = \
            (draw >> np.uint64(32)).astype(np.uint8)
        trial[:, -1] = np.where(valid[-1][trial[:, -1]], trial[:, -1], best[:, -1])
        trial = posterior_modes(centred, trial, tables, valid, ICM_SWEEPS_PER_ROUND)
        error = squared_errors(centred, trial, tables)
        better = error < best_error
        best[better], best_error[better] = trial[better], error[better]
    return best


def _mixed(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: each uint64 to a well-mixed uint64 (wrapping arithmetic)."""
    values = (values + np.uint64(0x9E3779B97F4A7C15)) * np.uint64(0xBF58476D1CE4E5B9)
    values = (values ^ (values >> np.uint64(30))) * np.uint64(0x94D049BB133111EB)
    return values ^ (values >> np.uint64(31))


def squared_errors(centred: np.ndarray, codes: np.ndarray, tables: np.ndarray) -> np.ndarray:
    """``(n,)`` ``||x - x^(h)||^2`` in the tables' coordinates."""
    residual = centred - reconstruct(codes, tables)
    return np.einsum("ij,ij->i", residual, residual)
