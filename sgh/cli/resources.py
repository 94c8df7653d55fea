"""Where the files the product ships live: the Hydra configurations, the bundled datasets and
the documentation.

A checkout keeps them at its top level (`configs/`, `data/`, the project's layout); the wheel
carries the same files inside the package as `sgh/configs/`, `sgh/bundled/` and `sgh/docs/` (see
`pyproject.toml`). Every command finds them here, so an installed `sgh-train` works from any
directory and its `--help` names guides that exist on this machine, and nothing else in the
package knows these locations.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # sgh/, inside which the wheel ships them


def _shipped(inside_package: str, in_checkout: str) -> Path:
    installed = _PACKAGE / inside_package
    return installed if installed.is_dir() else _PACKAGE.parent / in_checkout


# The Hydra config directory (train.yaml, evaluate.yaml, encode.yaml and the config groups).
CONFIG_DIR = _shipped("configs", "configs")
# Bundled datasets, `<BUNDLED_DATA_DIR>/<dataset>/<file>` (MNIST ships with the product).
BUNDLED_DATA_DIR = _shipped("bundled", "data")
# The guides and the reference (`--help` footers point into it: a wheel user has no checkout).
DOCS_DIR = _shipped("docs", "docs")
