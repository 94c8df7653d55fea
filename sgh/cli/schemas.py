"""The typed configuration (`sgh.config`) registered with Hydra, so YAML options extend it.

Each YAML option names its schema in its defaults list (`- sgh_schema`, `- file_schema`, ...),
so a misspelt key fails when the configuration is composed, not somewhere in the run.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from sgh.config import (
    BaselineConfig,
    Config,
    EncodeCommandConfig,
    EvalCommandConfig,
    FileDatasetConfig,
    ModelConfig,
    SyntheticDatasetConfig,
)
from sgh.resources import BUNDLED_DATA_DIR, CONFIG_DIR

# Hydra takes a config directory as a string; an absolute path, which it never mistakes for a
# Python package name.
CONFIG_PATH = str(CONFIG_DIR)


def register_configs() -> None:
    """Register the schemas and the `${sgh_bundled_data_dir:}` resolver (idempotent)."""
    if not OmegaConf.has_resolver("sgh_bundled_data_dir"):
        OmegaConf.register_new_resolver("sgh_bundled_data_dir", lambda: str(BUNDLED_DATA_DIR))
    store = ConfigStore.instance()
    store.store(name="config_schema", node=Config)
    store.store(name="eval_command_schema", node=EvalCommandConfig)
    store.store(name="encode_command_schema", node=EncodeCommandConfig)
    store.store(group="dataset", name="file_schema", node=FileDatasetConfig)
    store.store(group="dataset", name="synthetic_schema", node=SyntheticDatasetConfig)
    store.store(group="model", name="sgh_schema", node=ModelConfig)
    store.store(group="model", name="baseline_schema", node=BaselineConfig)
