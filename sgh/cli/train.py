"""`sgh-train`: the Hydra boundary of `sgh.pipeline.run`.

    sgh-train                                   SGH, 32 bits, on the bundled MNIST
    sgh-train dataset=cifar10_gist model.bits=64
    sgh-train -m model=sgh,itq model.bits=16,32,64     a sweep, one directory per job

`main` checks the config-group options, Hydra composes the configuration, and `run` gets it as
typed dataclasses (`OmegaConf.to_object`): Hydra is not seen below this module.
"""

from __future__ import annotations

import logging
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from sgh.cli.boundary import exit_on_failure, exit_on_user_error
from sgh.cli.group_choices import check_group_choices
from sgh.cli.schemas import CONFIG_PATH, register_configs
from sgh.pipeline import run
from sgh.resources import CONFIG_DIR

register_configs()
logger = logging.getLogger(__name__)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="train")
def _hydra_main(cfg: DictConfig) -> float | None:
    """One run; returns its `optimized_metric` (what a sweeper such as Optuna maximises)."""
    run_dir = HydraConfig.get().runtime.output_dir
    # TensorFlow's absl INFO lines and collective all-reduce INFO lines are noise here.
    logging.getLogger("absl").setLevel(logging.WARNING)
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    with exit_on_failure("sgh-train"):
        config = OmegaConf.to_object(cfg)
        metrics = run(config, run_dir)
        swept = HydraConfig.get().mode == RunMode.MULTIRUN
        return optimized_value(metrics, config.optimized_metric, warn=swept)


def optimized_value(metrics: dict, key: str, warn: bool = True) -> float | None:
    """The run's `optimized_metric`; None (with a warning in a sweep) when the run has no such
    score, e.g. a baseline or validation off: there is nothing validated to optimise."""
    value = metrics.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        if warn:
            logger.warning("optimized_metric=%s is not in this run's metrics (validation off, "
                           "or a baseline): nothing to return to the sweeper", key)
        return None
    return float(value)


def main() -> None:
    with exit_on_user_error("sgh-train"):  # before Hydra, which reports these in many lines
        check_group_choices(sys.argv[1:], CONFIG_DIR)
    _hydra_main()


if __name__ == "__main__":
    main()
