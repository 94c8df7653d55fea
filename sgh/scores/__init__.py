"""How a query scores binary codes, below the models that make the scores and the indexes that
serve them: the per-bit asymmetric scores (`asymmetric`) and their exact compiled scan
(`asymmetric_index`, `lookup_kernels`, on AVX-512 VBMI `permute_scan`), the byte decoder
(`byte_decoder`, its codes by `posterior_modes`), an mlp decoder's score (`decoded`), and a
method's set of them with the validated choice (`score_set`).
"""
