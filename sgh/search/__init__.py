"""Search over binary codes: Hamming ranking (`HammingIndex`, written as faiss files with
`write_faiss`), asymmetric scores, two-stage search, and `SGHIndex` (a model's codes and scores
on faiss's fast-scan kernels).
"""

from sgh.search.hamming_index import MISSING_DISTANCE, MISSING_ID, HammingIndex

__all__ = ["MISSING_DISTANCE", "MISSING_ID", "HammingIndex"]
