"""Search over binary codes, the last stage: `SGHIndex` (a model's codes searched by the scores
of `sgh.scores` on faiss's fast-scan kernels, in the modes the evaluation ranks by), and
`HammingIndex` (codes alone by Hamming distance, written as faiss files with `write_faiss`).
"""

from sgh.search.hamming_index import MISSING_DISTANCE, MISSING_ID, HammingIndex

__all__ = ["MISSING_DISTANCE", "MISSING_ID", "HammingIndex"]
