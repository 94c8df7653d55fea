"""Where the shipped files live: the Hydra configurations, the bundled datasets and the docs (at
a checkout's top level, or inside the wheel's `sgh/`, pyproject.toml)."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # sgh/, inside which the wheel ships them


def _shipped(inside_package: str, in_checkout: str) -> Path:
    installed = _PACKAGE / inside_package
    return installed if installed.is_dir() else _PACKAGE.parent / in_checkout


CONFIG_DIR = _shipped("configs", "configs")  # a command's <name>.yaml, and the groups
BUNDLED_DATA_DIR = _shipped("bundled", "data")  # <BUNDLED_DATA_DIR>/<dataset>/<file>
DOCS_DIR = _shipped("docs", "docs")  # the guides `--help` points to (a wheel has no checkout)
