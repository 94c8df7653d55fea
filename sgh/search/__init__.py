"""Search over binary codes, the last stage: `SGHIndex` (:mod:`sgh.search.sgh_index`), a model's
codes searched by the scores of `sgh.scores` on faiss's kernels, in the modes the evaluation ranks
by. Codes without a model (SH, SpH) are searched by faiss's own ``IndexBinaryFlat``.
"""
