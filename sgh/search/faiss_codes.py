"""An index's codes in faiss's own indexes: added to an IVF index list by list, and a byte
decoder's as faiss's additive quantizer (the ``codes.faiss`` a saved `SGHIndex` holds, which
``faiss.read_index`` opens and faiss alone searches)."""

from __future__ import annotations

import numpy as np

from sgh.codes import validate_codes
from sgh.scores.byte_decoder import ByteDecoder, norm_levels


def add_listed_codes(index, lists: np.ndarray, codes: np.ndarray) -> None:
    """Add codes to a faiss IVF ``index`` by ``add_sa_codes``, each item's list number first
    (little-endian), its ids continuing ``index.ntotal``."""
    prefix = np.asarray(lists, np.int64)[:, None] >> (8 * np.arange(index.coarse_code_size()))
    index.add_sa_codes(np.ascontiguousarray(np.concatenate([prefix.astype(np.uint8), codes], 1)))


def additive_quantizer(decoder: ByteDecoder, codes: np.ndarray, lists: np.ndarray | None = None,
                       centroids: np.ndarray | None = None):
    """faiss's `IndexLocalSearchQuantizer` of ``codes`` with the ``decoder``'s tables as its
    codebooks, or with ``lists`` and their ``centroids`` (codes of residuals) its IVF version;
    the reconstruction's norm in one byte (``ST_norm_qint8``), as faiss's search needs it."""
    import faiss  # on first use: `import sgh.search` stays light

    codes = validate_codes(codes, decoder.bits, "codes")
    books = decoder.books
    norm_type = faiss.AdditiveQuantizer.ST_norm_qint8
    if lists is None:
        index = faiss.IndexLocalSearchQuantizer(decoder.dim, len(books), 8, faiss.METRIC_L2,
                                                norm_type)
    else:
        quantizer = faiss.IndexFlatL2(decoder.dim)
        quantizer.add(np.ascontiguousarray(centroids, np.float32))
        index = faiss.IndexIVFLocalSearchQuantizer(quantizer, decoder.dim, len(centroids),
                                                   len(books), 8, faiss.METRIC_L2, norm_type)
        index.own_fields = True
        quantizer.this.disown()
    faiss.copy_array_to_vector(np.ascontiguousarray(books).ravel(), index.aq.codebooks)
    index.aq.is_trained = index.is_trained = True
    if len(codes) == 0:
        return index
    norms = decoder.squared_norms(codes)
    index.aq.train_norm(len(norms), faiss.swig_ptr(norms))
    stored = np.concatenate(
        [codes, norm_levels(norms, index.aq.norm_min, index.aq.norm_max)[:, None]], axis=1)
    if lists is None:
        index.add_sa_codes(np.ascontiguousarray(stored))
    else:
        add_listed_codes(index, lists, stored)
    return index
