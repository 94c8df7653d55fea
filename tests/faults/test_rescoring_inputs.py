"""Inputs are checked wherever they are read again: `sgh-eval run=` against the run's record."""

import numpy as np
import pytest

from sgh.cli.evaluate import evaluate_codes
from sgh.config import EvalCommandConfig, EvalConfig
from sgh.data.synthetic import gaussian_clusters
from sgh.errors import UserInputError
from sgh.pipeline import run
from tests.helpers import QUICK, compose_config


def _write(path, seed):
    x_train, y_train, x_test, y_test = gaussian_clusters(600, 200, 16, 4, seed)
    np.savez(path, X_train=x_train, y_train=y_train, X_test=x_test, y_test=y_test)


def test_a_rescore_on_a_changed_dataset_file_is_refused_naming_it(tmp_path):
    data = tmp_path / "clusters.npz"
    _write(data, 0)
    run_dir = tmp_path / "run"
    run(compose_config(*QUICK[1:], "dataset=file", f"dataset.path={data}",
                       "dataset.n_queries=50", "model=itq"), run_dir)
    exact = EvalConfig(ranking="rerank", rescore="exact", shortlist=50)
    before = evaluate_codes(EvalCommandConfig(run=str(run_dir), eval=exact))
    _write(data, 1)  # other vectors of the same shape: only the record tells
    with pytest.raises(UserInputError, match=rf"run={run_dir} was trained on other data \("
                                             rf"{data.resolve()} \(dataset.path\)"):
        evaluate_codes(EvalCommandConfig(run=str(run_dir), eval=exact))
    # The Hamming ranking reads no features: the codes alone are scored, as before.
    hamming = evaluate_codes(EvalCommandConfig(run=str(run_dir), eval=EvalConfig()))
    assert hamming["n_queries"] == before["n_queries"] == 50
