"""The command line: the only package that knows Hydra, argv and exit statuses.

`sgh-train` (train.py), `sgh-eval` (evaluate.py), `sgh-encode` (encode.py), `sgh-compare`
(compare.py), `sgh-export` (export.py); boundary.py turns errors into one line and an exit status.
"""
