"""`sgh-compare SWEEP_DIR [--out DIR] [--no-tensorboard]`: the comparison of a sweep's runs.

Reads every `metrics.json` below SWEEP_DIR, and writes `comparison.csv`, `comparison.md`, the
plots and `tensorboard_compare/` (see `sgh.reports.comparison`).
"""

from __future__ import annotations

import argparse
import logging
import sys

from sgh.cli.boundary import exit_on_user_error
from sgh.cli.logs import ConsoleFormatter
from sgh.reports.comparison import compare


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sgh-compare", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", help="an sgh-train sweep directory (searched recursively)")
    parser.add_argument("--out", help="where to write the results (default: SWEEP_DIR)")
    parser.add_argument("--no-tensorboard", action="store_true",
                        help="skip the TensorBoard images (and the TensorFlow import)")
    args = parser.parse_args(argv)
    # The library's warnings (repeated seeds, a missing PR curve) as "sgh-compare: warning: ...".
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ConsoleFormatter("sgh-compare"))
    handler.setLevel(logging.WARNING)
    logging.getLogger("sgh").addHandler(handler)
    logging.getLogger("sgh").setLevel(logging.INFO)
    try:
        with exit_on_user_error("sgh-compare"):
            table, paths = compare(args.sweep_dir, args.out, tensorboard=not args.no_tensorboard)
    finally:
        logging.getLogger("sgh").removeHandler(handler)
    print(table)
    for path in paths:
        print(f"[sgh] wrote {path}")


if __name__ == "__main__":
    main()
