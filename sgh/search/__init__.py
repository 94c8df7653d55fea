"""Search over binary codes: Hamming ranking (`HammingIndex`), asymmetric scores, two-stage
search, `SGHIndex` (a model's codes and scores on faiss's fast-scan kernels), and faiss binary
index files written and read without faiss.
"""

from sgh.search.faiss_files import BinaryIndexFile, read_binary_index, write_binary_index
from sgh.search.hamming_index import MISSING_DISTANCE, MISSING_ID, HammingIndex

__all__ = ["MISSING_DISTANCE", "MISSING_ID", "BinaryIndexFile", "HammingIndex",
           "read_binary_index", "write_binary_index"]
