"""The typed configuration (`sgh.config`) registered with Hydra, so YAML options extend it.

Each YAML option names its schema in its defaults list (`- sgh_schema`, `- file_schema`, ...),
so a misspelt key fails when the configuration is composed, not somewhere in the run.
"""

from __future__ import annotations

import hashlib

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from sgh.cli.resources import BUNDLED_DATA_DIR, CONFIG_DIR, DOCS_DIR
from sgh.config import (
    BaselineConfig,
    Config,
    EncodeCommandConfig,
    EvalCommandConfig,
    FileDatasetConfig,
    ModelConfig,
    SyntheticDatasetConfig,
)

# Hydra takes a config directory as a string; an absolute path, which it never mistakes for a
# Python package name.
CONFIG_PATH = str(CONFIG_DIR)


def short_id(text: str) -> str:
    """8 hex digits of `text`'s SHA-256: a sweep job's directory name from its overrides
    (`hydra.sweep.subdir: ${hydra.job.num}_${sgh_short_id:${hydra.job.override_dirname}}`),
    short and flat whatever the overrides hold (a `dataset.path` with `/`, a name beyond the
    255-byte limit); the overrides themselves are in the job's `.hydra/overrides.yaml`."""
    return hashlib.sha256(str(text).encode()).hexdigest()[:8]


def config_groups() -> str:
    """The configuration groups a user composes from, one line each (`model: itq, lsh, ...`):
    the YAML options under the config directory. `sgh-train --help` lists these instead of
    Hydra's own list, which also shows the schemas registered below (`file_schema`, ...),
    options no one should pick."""
    lines = []
    for group in sorted(path for path in CONFIG_DIR.iterdir() if path.is_dir()):
        if group.name != "hydra":  # Hydra's settings, not a choice of the run's
            options = sorted(option.stem for option in group.glob("*.yaml"))
            lines.append(f"{group.name}: {', '.join(options)}")
    return "\n".join(lines)


def register_configs() -> None:
    """Register the schemas and the `${sgh_bundled_data_dir:}`, `${sgh_short_id:TEXT}`,
    `${sgh_config_groups:}` and `${sgh_docs:PAGE}` (a page's path here) resolvers (idempotent)."""
    for name, resolver in (("sgh_bundled_data_dir", lambda: str(BUNDLED_DATA_DIR)),
                           ("sgh_short_id", short_id), ("sgh_config_groups", config_groups),
                           ("sgh_docs", lambda page: str(DOCS_DIR / page))):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)
    store = ConfigStore.instance()
    store.store(name="config_schema", node=Config)
    store.store(name="eval_command_schema", node=EvalCommandConfig)
    store.store(name="encode_command_schema", node=EncodeCommandConfig)
    store.store(group="dataset", name="file_schema", node=FileDatasetConfig)
    store.store(group="dataset", name="synthetic_schema", node=SyntheticDatasetConfig)
    store.store(group="model", name="sgh_schema", node=ModelConfig)
    store.store(group="model", name="baseline_schema", node=BaselineConfig)
