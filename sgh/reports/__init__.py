"""How results are shown: the table of one run, and the comparison of a sweep's runs."""
