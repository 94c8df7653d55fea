"""Search over binary codes: exact Hamming ranking, asymmetric (decoder and projection) scores,
and two-stage search (a Hamming shortlist rescored); faiss files for the codes. `SGHIndex`
(sgh.search.sgh_index) owns a model's codes, ids and scores and searches them on faiss's
fast-scan kernels (sgh.search.fast_scan), flat or over inverted lists.

    HammingIndex        sgh.search.hamming_index   exact Hamming top-k and range search (faiss
                                                   IndexBinaryFlat semantics), external ids
    write_binary_index  sgh.search.faiss_files     faiss IndexBinaryFlat / IndexBinaryIDMap
    read_binary_index                              files, written and read without faiss
"""

from sgh.search.faiss_files import BinaryIndexFile, read_binary_index, write_binary_index
from sgh.search.hamming_index import MISSING_DISTANCE, MISSING_ID, HammingIndex

__all__ = ["MISSING_DISTANCE", "MISSING_ID", "BinaryIndexFile", "HammingIndex",
           "read_binary_index", "write_binary_index"]
