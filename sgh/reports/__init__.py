"""How results are shown: the table of one run, the comparison of a sweep's runs, and what
TensorBoard shows of a run (every method's)."""
