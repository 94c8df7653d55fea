"""Configuration: every option composes, typos fail at compose time, impossible values are named."""

import pytest
from hydra.errors import ConfigCompositionException

from sgh.cli.resources import BUNDLED_DATA_DIR, CONFIG_DIR
from sgh.config import (
    MAX_BITS,
    FileDatasetConfig,
    SyntheticDatasetConfig,
    validate,
)
from sgh.errors import UserInputError
from tests.helpers import compose_config as _compose


@pytest.mark.parametrize("dataset", [p.stem for p in (CONFIG_DIR / "dataset").glob("*.yaml")])
def test_every_dataset_option_composes(dataset):
    needs_path = dataset in ("npz", "file")
    overrides = [f"dataset={dataset}"] + (["dataset.path=x.npz"] if needs_path else [])
    config = validate(_compose(*overrides))
    expected = SyntheticDatasetConfig if dataset == "synthetic" else FileDatasetConfig
    assert isinstance(config.dataset, expected)


@pytest.mark.parametrize("model", [p.stem for p in (CONFIG_DIR / "model").glob("*.yaml")])
def test_every_model_option_composes(model):
    config = validate(_compose(f"model={model}", "model.bits=16"))
    assert config.model.name == model and config.model.bits == 16


def test_baseline_options_have_no_sgh_keys():
    with pytest.raises(ConfigCompositionException):
        _compose("model=itq", "model.gradient_estimator=unbiased")


@pytest.mark.parametrize("experiment",
                         [p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml")])
def test_every_experiment_composes(experiment):
    validate(_compose(f"experiment={experiment}"))


def test_released_preset_sets_the_demo_recipe():
    config = _compose("experiment=released_mnist")
    assert (config.model.objective, config.model.noise, config.model.normalization,
            config.model.init, config.model.gradient_estimator) == ("released", "fixed", "none",
                                                           "released", "approximate")
    assert (config.trainer.learning_rate, config.trainer.schedule, config.trainer.batch_size,
            config.trainer.steps) == (0.01, "constant", 500, 5000)
    assert config.validation.every == 0  # the demo trains on everything and keeps the last step


def test_data_dir_defaults_to_bundled_data_and_follows_the_environment(monkeypatch):
    monkeypatch.delenv("SGH_DATA_DIR", raising=False)
    assert _compose().dataset.path == f"{BUNDLED_DATA_DIR}/mnist/mnist.npz"
    monkeypatch.setenv("SGH_DATA_DIR", "/elsewhere")
    assert _compose().dataset.path == "/elsewhere/mnist/mnist.npz"
    assert _compose("data_dir=/mine").dataset.path == "/mine/mnist/mnist.npz"


def test_misspelt_key_fails_at_compose_time():
    with pytest.raises(ConfigCompositionException):
        _compose("model.bitz=16")


def test_wrong_type_fails_at_compose_time():
    with pytest.raises(ConfigCompositionException):
        _compose("model.bits=many")


@pytest.mark.parametrize("override, message", [
    ("model.bits=0", "model.bits=0 is impossible; accepted: an integer between 1 and 1024"),
    (f"model.bits={MAX_BITS + 1}", f"model.bits={MAX_BITS + 1} is impossible"),
    ("trainer.batch_size=0", "trainer.batch_size=0 is impossible; accepted: an integer >= 1"),
    ("trainer.steps=-1", "trainer.steps=-1 is impossible"),
    ("trainer.learning_rate=nan", "trainer.learning_rate=nan is impossible"),
    ("model.objective=vae", "model.objective='vae' is not known; accepted: paper, released"),
    ("model.noise=gaussian", "model.noise='gaussian' is not known; accepted: uniform, fixed"),
    ("trainer.schedule=linear", "trainer.schedule='linear' is not known"),
    ("eval.recall_n=[]", "eval.recall_n is empty"),
    ("validation.patience=-1",
     "validation.patience=-1 is impossible; accepted: an integer >= 0"),
])
def test_impossible_values_are_named(override, message):
    with pytest.raises(UserInputError) as error:
        validate(_compose(override))
    assert message in str(error.value)


def test_patience_needs_validation_points_and_an_integer():
    # Early stopping counts validation points: with none it would silently never stop.
    with pytest.raises(UserInputError, match=r"^validation.patience=3 is impossible with "
                       r"validation.every=0 \(no validation points to count\); accepted: "
                       r"validation.every >= 1, or validation.patience=0$"):
        validate(_compose("validation.every=0", "validation.patience=3"))
    assert validate(_compose("validation.every=0", "validation.patience=0"))  # off with it
    assert validate(_compose("validation.patience=3")).validation.patience == 3
    # Hydra's types refuse 2.5 on the command line; from Python it reaches the check.
    with pytest.raises(ConfigCompositionException):
        _compose("validation.patience=2.5")
    config = _compose()
    for value in (2.5, True, "3"):
        config.validation.patience = value
        with pytest.raises(UserInputError, match=r"^validation.patience=.* is impossible; "
                           r"accepted: an integer >= 0$"):
            validate(config)


def test_what_acts_on_a_setting_knows_every_value_it_may_name():
    # The values live once, in sgh.config; the implementations keyed by them must cover
    # exactly those, so that a value added in one place cannot be accepted and then fail.
    from sgh import config
    from sgh.model import sgh_model
    from sgh.scores import asymmetric

    assert tuple(sgh_model.ACTIVATIONS) == config.ACTIVATIONS
    assert tuple(asymmetric.ACTIVATIONS) == config.ACTIVATIONS
    assert tuple(sgh_model.LOSS_TERMS) == config.OBJECTIVES
