"""The method registry is the one list of methods: options, choices, order and titles follow it."""

import numpy as np
import pytest

from sgh.baselines.fitting import baseline_class
from sgh.cli.resources import CONFIG_DIR
from sgh.hasher import BinaryHasher
from sgh.methods import BASELINE_NAMES, METHODS
from sgh.reports.comparison import METHOD_ORDER
from sgh.reports.results_table import run_title
from tests.helpers import compose_config


def test_every_method_has_its_option_and_nothing_else_does():
    assert {path.stem for path in (CONFIG_DIR / "model").glob("*.yaml")} == set(METHODS)
    assert METHOD_ORDER[0] == "sgh"  # comparisons list SGH first


@pytest.mark.parametrize("name", BASELINE_NAMES)
def test_each_baseline_names_its_class_and_composes(name):
    method = METHODS[name]
    assert not method.uses_tensorflow
    baseline_class(name)(n_bits=8, random_state=0)  # sgh-train's arguments
    assert compose_config(f"model={name}").model.name == name


def test_sgh_is_the_tensorflow_method_and_has_no_baseline_class():
    assert [name for name, method in METHODS.items() if method.uses_tensorflow] == ["sgh"]
    assert METHODS["sgh"].baseline_class is None
    with pytest.raises(ValueError, match="not a scikit-learn baseline"):
        baseline_class("sgh")


def _fitted(name: str, n_bits: int, n_features: int):
    x = np.random.default_rng(0).normal(size=(60, n_features))
    return baseline_class(name)(n_bits=n_bits, random_state=0).fit(x)


@pytest.mark.parametrize("name", BASELINE_NAMES)
def test_each_baseline_says_whether_it_has_an_asymmetric_score_and_means_it(name):
    """`without_asymmetric` (the one answer the stages ask) agrees with the class's method."""
    cls = baseline_class(name)
    assert (cls.asymmetric_score is not BinaryHasher.asymmetric_score) \
        == (cls.without_asymmetric is None)
    hasher = _fitted(name, 8, 9)
    if cls.without_asymmetric is None:
        score = hasher.asymmetric_score()  # of 8 bits, for queries of 9 features
        assert score.bits == 8 and score.query_projection.shape == (9, 8)
    else:
        with pytest.raises(ValueError, match=f"has no asymmetric score: {cls.without_asymmetric}"):
            hasher.asymmetric_score()


@pytest.mark.parametrize("name", BASELINE_NAMES)
def test_each_baseline_limits_its_bits_to_the_features_exactly_where_its_class_says(name):
    if baseline_class(name).bits_at_most_features:
        _fitted(name, 9, 9)
        with pytest.raises(ValueError, match="n_bits=10 with n_features=9"):
            _fitted(name, 10, 9)
    else:
        assert _fitted(name, 10, 9).n_bits_ == 10


def test_the_capabilities_are_those_of_the_methods():
    capabilities = {name: (cls.bits_at_most_features, cls.without_asymmetric is None)
                    for name in BASELINE_NAMES for cls in [baseline_class(name)]}
    assert capabilities == {"lsh": (False, True), "pcah": (True, True), "itq": (True, True),
                            "sh": (False, False), "sph": (False, False)}


def test_titles_come_from_the_registry():
    assert run_title({"dataset": "mnist", "method": "sph", "bits": 16}) == "mnist, SpH 16 bits"
    assert run_title({"dataset": "mnist", "method": "sgh", "bits": 32, "objective": "paper",
                      "steps": 100}) == "mnist, SGH 32 bits, objective paper, 100 steps"
