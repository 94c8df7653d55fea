"""The typed configuration (`sgh.config`) registered with Hydra's ConfigStore, which each YAML
option names in its defaults list (a misspelt key fails at compose time), and the resolvers."""

from __future__ import annotations

import hashlib

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from sgh import config as schema
from sgh.cli.resources import BUNDLED_DATA_DIR, CONFIG_DIR, DOCS_DIR

CONFIG_PATH = str(CONFIG_DIR)  # an absolute path: Hydra never takes it for a package name


def short_id(text: str) -> str:
    """8 hex digits of `text`'s SHA-256: a sweep job's flat directory name from its overrides."""
    return hashlib.sha256(str(text).encode()).hexdigest()[:8]


def config_groups() -> str:
    """The groups a user composes from, one line each (`model: itq, lsh, ...`), for `--help`
    (Hydra's own list also shows the schemas)."""
    groups = [group for group in sorted(CONFIG_DIR.iterdir())
              if group.is_dir() and group.name != "hydra"]  # Hydra's settings, not the run's
    return "\n".join(f"{group.name}: {', '.join(sorted(o.stem for o in group.glob('*.yaml')))}"
                     for group in groups)


def register_configs() -> None:
    """Register the schemas and the configs' resolvers but `sgh_start_time` (idempotent)."""
    for name, resolver in (("sgh_bundled_data_dir", lambda: str(BUNDLED_DATA_DIR)),
                           ("sgh_short_id", short_id), ("sgh_config_groups", config_groups),
                           ("sgh_docs", lambda page: str(DOCS_DIR / page)),
                           # `sgh`, `sgh-search` (experiment=search): a run directory's recipe
                           ("sgh_recipe", lambda method, experiment: method if experiment is None
                            else f"{method}-{str(experiment).replace('/', '-')}")):
        OmegaConf.register_new_resolver(name, resolver, replace=True)
    store = ConfigStore.instance()
    store.store(name="config_schema", node=schema.Config)
    store.store(name="eval_command_schema", node=schema.EvalCommandConfig)
    store.store(name="encode_command_schema", node=schema.EncodeCommandConfig)
    store.store(name="export_command_schema", node=schema.ExportCommandConfig)
    store.store(name="compare_command_schema", node=schema.CompareCommandConfig)
    store.store(name="index_build_schema", node=schema.IndexBuildConfig)
    store.store(name="index_search_schema", node=schema.IndexSearchConfig)
    store.store(group="dataset", name="file_schema", node=schema.FileDatasetConfig)
    store.store(group="dataset", name="synthetic_schema", node=schema.SyntheticDatasetConfig)
    store.store(group="model", name="sgh_schema", node=schema.ModelConfig)
    store.store(group="model", name="baseline_schema", node=schema.BaselineConfig)
