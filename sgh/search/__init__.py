"""Search over binary codes, the last stage: Hamming ranking (`HammingIndex`, written as faiss
files with `write_faiss`), two-stage search, and `SGHIndex` (a model's codes searched by the
scores of `sgh.scores` on faiss's fast-scan kernels).
"""

from sgh.search.hamming_index import MISSING_DISTANCE, MISSING_ID, HammingIndex

__all__ = ["MISSING_DISTANCE", "MISSING_ID", "HammingIndex"]
