"""The method registry is the one list of methods: options, choices, order and titles follow it."""

import pytest

from sgh.baselines.fitting import estimator_class
from sgh.config import CHOICES
from sgh.methods import BASELINE_NAMES, METHODS
from sgh.reports.comparison import METHOD_ORDER
from sgh.reports.results_table import run_title
from sgh.resources import CONFIG_DIR
from tests.helpers import compose_config


def test_every_method_has_its_option_and_nothing_else_does():
    assert {path.stem for path in (CONFIG_DIR / "model").glob("*.yaml")} == set(METHODS)
    assert CHOICES["model.name"] == tuple(METHODS)
    assert METHOD_ORDER == tuple(METHODS) and METHOD_ORDER[0] == "sgh"


@pytest.mark.parametrize("name", BASELINE_NAMES)
def test_each_baseline_names_its_estimator_and_composes(name):
    method = METHODS[name]
    assert not method.is_trained
    estimator = estimator_class(name)(n_bits=8, random_state=0)
    assert estimator.get_params()["n_bits"] == 8
    assert compose_config(f"model={name}").model.name == name


def test_sgh_is_the_trained_method_and_has_no_estimator():
    assert [name for name, method in METHODS.items() if method.is_trained] == ["sgh"]
    with pytest.raises(ValueError, match="not a scikit-learn baseline"):
        estimator_class("sgh")


def test_titles_come_from_the_registry():
    assert run_title({"dataset": "mnist", "method": "sph", "bits": 16}) == "mnist, SpH 16 bits"
    assert run_title({"dataset": "mnist", "method": "sgh", "bits": 32, "objective": "paper",
                      "steps": 100}) == "mnist, SGH 32 bits, objective paper, 100 steps"
