"""An Optuna search through Hydra's sweeper: each trial is an `sgh-train` run that returns its
best validation score (`optimized_metric`), and the search keeps the best of them."""

import json
import subprocess
import sys

import pytest
import yaml

from sgh.cli.train import optimized_value
from tests.helpers import compose_config

pytestmark = pytest.mark.slow  # three training runs
pytest.importorskip("hydra_plugins.hydra_optuna_sweeper",
                    reason="the tune extra (hydra-optuna-sweeper) is not installed")


def test_the_default_optimized_metric_is_the_validation_score_never_a_test_figure():
    from sgh.config import validate
    from sgh.errors import UserInputError

    config = compose_config("hparams_search=mnist_optuna")
    assert config.optimized_metric == "best_validation_recall10@100"
    assert optimized_value({"best_validation_recall10@100": 0.8, "recall10@100": 0.6},
                           config.optimized_metric) == 0.8
    assert optimized_value({"map": 0.4}, config.optimized_metric, warn=False) is None
    with pytest.raises(UserInputError, match="optimized_metric='recall10@100' is not a "
                                             "validation score"):
        validate(compose_config("optimized_metric=recall10@100"))


def test_a_three_trial_search(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "sgh.cli.train", "-m", "hparams_search=mnist_optuna",
         "hydra.sweeper.n_trials=3", "dataset=synthetic", "model.bits=8", "trainer.steps=200",
         "trainer.batch_size=100", "trainer.steps_per_call=50", "validation.every=100",
         f"hydra.sweep.dir={tmp_path}"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    trials = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("*/metrics.json"))]
    assert len(trials) == 3
    scores = [trial["best_validation_recall10@100"] for trial in trials]
    best = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    assert best["best_value"] == pytest.approx(max(scores))
    assert {"trainer.learning_rate", "model.gradient_estimator", "model.encoder"} <= set(
        best["best_params"])
