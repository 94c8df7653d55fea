"""The command line: the only package that knows Hydra, argv and exit statuses.

One module per `sgh-*` command; boundary.py turns errors into one line and an exit status.
"""
