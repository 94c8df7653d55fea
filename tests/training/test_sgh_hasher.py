"""`SGHHasher`: sgh-train's defaults and codes, the scikit-learn contract, saving, and the one
hasher interface it shares with the baselines."""

import pickle

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from sgh.artifacts.codes_file import load_codes
from sgh.baselines import ITQ, LSH, PCAH, SH, SpH
from sgh.data import load_split
from sgh.errors import UserInputError
from sgh.pipeline import run
from sgh.training.sgh_hasher import _KEYS, SGHHasher
from tests.helpers import QUICK, compose_config

# A few compiled-free steps: the contract, not the quality, is under test.
TINY = {"n_bits": 6, "steps": 4, "steps_per_call": 2, "batch_size": 2, "jit_compile": False,
        "validation_every": 0}


def _blobs(n=300, dim=10, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, 3)) @ rng.normal(size=(3, dim))
            + rng.normal(scale=0.1, size=(n, dim))).astype(np.float32)


def test_every_default_is_sgh_trains_default():
    config = compose_config()  # sgh-train with no overrides
    hasher = SGHHasher()
    assert hasher.n_bits == config.model.bits and hasher.random_state == config.trainer.seed
    for parameter, (section, key) in _KEYS.items():
        value = getattr(hasher, parameter)
        value = list(value) if isinstance(value, tuple) else value  # layer sizes
        if parameter == "candidates":  # None, scikit-learn's immutable default, is no candidate
            value = {} if value is None else value
        assert value == getattr(getattr(config, section), key), parameter


@pytest.mark.slow  # 5-10 s: a whole training run
def test_the_estimator_encodes_exactly_as_sgh_train(tmp_path):
    # The same configuration through both doors: sgh-train's run and SGHHasher.fit on the same
    # training set give the same codes, bit for bit (validation and model selection included).
    overrides = [*QUICK, "validation.every=20"]
    metrics = run(compose_config(*overrides), tmp_path)
    split = load_split(compose_config(*overrides).dataset)
    hasher = SGHHasher(n_bits=12, steps=60, batch_size=100, steps_per_call=20,
                       validation_every=20).fit(split.train)
    saved = load_codes(tmp_path / "codes.npz")
    np.testing.assert_array_equal(hasher.encode(split.database), saved.database)
    np.testing.assert_array_equal(hasher.encode(split.query), saved.query)
    assert hasher.fit_info_["best_step"] == metrics["best_step"]


@pytest.mark.slow  # about 2 x 40 s: some 45 checks, each fitting a few times
# The second at the default batch size (500), larger than the checks' data: clipped, warned.
@parametrize_with_checks([SGHHasher(**TINY), SGHHasher(n_bits=4, steps=20, random_state=0)])
def test_sklearn_estimator_contract(estimator, check):
    check(estimator)


def test_save_and_load_give_identical_codes_and_bad_paths_are_one_line(tmp_path):
    x = _blobs()
    hasher = SGHHasher(**{**TINY, "steps": 20}).fit(x)
    hasher.save(tmp_path / "hasher")
    hasher.save(tmp_path / "hasher")  # its own earlier save: replaced
    loaded = SGHHasher.load(tmp_path / "hasher")
    np.testing.assert_array_equal(loaded.encode(x), hasher.encode(x))
    assert loaded.get_params() == hasher.get_params() and loaded.fit_info_["steps"] == 20
    # A user's folder that merely holds files of those names is never replaced.
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("hasher.json", "weights.npz"):
        (mine / name).write_text(f"my own {name}")
    with pytest.raises(UserInputError, match="no .sgh-hasher, the mark of one, is there"):
        hasher.save(mine)
    assert (mine / "hasher.json").read_text() == "my own hasher.json"
    # The validated choice of score travels with it, as plain arrays.
    assert loaded.scores_.chosen == hasher.scores_.chosen
    assert loaded.scores_.validation == hasher.scores_.validation
    np.testing.assert_array_equal(loaded.asymmetric_score().query_projection,
                                  hasher.asymmetric_score().query_projection)
    unpickled = pickle.loads(pickle.dumps(hasher))
    np.testing.assert_array_equal(unpickled.encode(x), hasher.encode(x))
    assert unpickled.scores_.chosen == hasher.scores_.chosen
    with pytest.raises(UserInputError, match="not a saved SGHHasher"):
        SGHHasher.load(tmp_path)
    (tmp_path / "hasher" / "weights.npz").write_bytes(b"garbage")
    with pytest.raises(UserInputError, match="unreadable saved SGHHasher"):
        SGHHasher.load(tmp_path / "hasher")


def test_settings_are_checked_with_sgh_trains_rules_in_the_parameters_names():
    with pytest.raises(UserInputError, match="^objective='map' is not known"):
        SGHHasher(objective="map").fit(_blobs())
    with pytest.raises(UserInputError, match="^n_bits=0 is impossible"):
        SGHHasher(n_bits=0).fit(_blobs())
    with pytest.raises(UserInputError, match="^validation_every=-3 is impossible"):
        SGHHasher(validation_every=-3).fit(_blobs())
    for seed in (-1, 2**32):  # the parameter is named, not the trainer.seed it becomes
        with pytest.raises(UserInputError, match=rf"random_state={seed} is impossible; accepted: "
                                                 "an integer between 0 and 4294967295"):
            SGHHasher(random_state=seed).fit(_blobs())
    with pytest.raises(UserInputError, match="validation_metric=map needs labels, and X has none"):
        SGHHasher(**{**TINY, "validation_every": 2, "validation_metric": "map"}).fit(_blobs())


def test_labels_serve_map_validation():
    x = _blobs()
    y = (x[:, 0] > 0).astype(int)
    hasher = SGHHasher(**{**TINY, "validation_every": 2, "validation_metric": "map"}).fit(x, y)
    assert hasher.fit_info_["validation_metric"] == "map" and hasher.fit_info_["best_step"] > 0


@pytest.mark.parametrize("hasher", [SGHHasher(**TINY), ITQ(n_bits=6, random_state=0),
                                    LSH(n_bits=6, random_state=0), PCAH(n_bits=6), SH(n_bits=6),
                                    SpH(n_bits=6, random_state=0)],
                         ids=lambda hasher: type(hasher).__name__)
def test_every_hasher_shares_one_interface(hasher):
    x = _blobs()
    bits = hasher.fit(x).transform(x[:7])
    codes = hasher.encode(x[:7])
    assert bits.dtype == bool and bits.shape == (7, 6)
    assert codes.dtype == np.uint8 and codes.shape == (7, 1)
    np.testing.assert_array_equal(np.unpackbits(codes, axis=1, count=6).astype(bool), bits)


@pytest.mark.slow
def test_on_mnist_the_estimators_defaults_encode_the_queries_as_sgh_train_does(
        default_mnist_run):
    directory, _ = default_mnist_run  # sgh-train with no overrides
    split = load_split(compose_config().dataset)
    hasher = SGHHasher(n_bits=32, random_state=0).fit(split.train)
    np.testing.assert_array_equal(hasher.encode(split.query),
                                  load_codes(directory / "codes.npz").query)


def test_the_hasher_hands_its_scores_to_search():
    from sgh.scores.asymmetric_index import AsymmetricIndex

    x = _blobs()
    hasher = SGHHasher(**TINY).fit(x)
    score = hasher.asymmetric_score(kind="decoder")
    assert score.bits == 6 and score.form.startswith("decoder, reconstruction distance")
    index = AsymmetricIndex(score)
    index.add(hasher.encode(x))
    scores, ids = index.search(x[:5], 3)
    assert ids.shape == (5, 3) and (np.diff(scores, axis=1) >= 0).all()
    assert hasher.asymmetric_score("inner_product", kind="decoder").code_templates is None
    # Without validation, auto is the encoder score; with it, the kind the validation split
    # favoured, recorded with its figures.
    assert hasher.asymmetric_score().kind == "encoder" == hasher.fit_info_["score_for_scan"]
    validated = SGHHasher(**{**TINY, "validation_every": 2, "validation_queries": 20,
                             "validation_database": 200}).fit(x)
    assert validated.asymmetric_score().kind == validated.fit_info_["score_for_scan"]
    assert set(validated.fit_info_["validation_recall10@100_by_score"]) >= {
        "encoder", "decoder", "joint"}
    assert hasher.asymmetric_score(kind="joint").form.startswith(
        f"joint likelihood: -log q(h|x) - {hasher.scores_.joint_weight:g} log p(x|h)")
    deep = SGHHasher(**TINY, encoder="mlp", decoder="mlp", encoder_hidden=(8,),
                     decoder_hidden=(8,)).fit(x)
    assert deep.asymmetric_score().kind == "encoder" and deep.asymmetric_score().network
    with pytest.raises(ValueError, match="SGHHasher has no per-bit decoder score .*; decoder"
                                         "=mlp has no per-bit form"):
        deep.asymmetric_score(kind="decoder")
    with pytest.raises(ValueError, match="^kind='jiont' is not known"):  # Python's names
        deep.asymmetric_score(kind="jiont")
    # Its decoder rescores shortlists instead.
    rescorer = deep.scores_.rescorer("decoder", deep.encode(x))
    scores, ids = rescorer.rescore(x[:3], np.tile(np.arange(20), (3, 1)))
    assert ids.shape == (3, 20) and (np.diff(scores, axis=1) >= 0).all()


def test_what_a_new_user_trips_over_is_answered_as_scikit_learn_would():
    from sklearn.exceptions import NotFittedError

    x = _blobs(n=60)
    with pytest.raises(NotFittedError):
        SGHHasher(**TINY).transform(x)
    with pytest.raises(UserInputError, match="^n_bits=0 is impossible"):
        SGHHasher(**{**TINY, "n_bits": 0}).fit(x)
    # A batch larger than the data is clipped, with a warning (MLPClassifier's convention).
    with pytest.warns(UserWarning, match="batch_size=500 is larger than the 60 training items"):
        SGHHasher(**{**TINY, "batch_size": 500}).fit(x)
    # A seed drawn from a generator, as scikit-learn's estimators take one.
    first = SGHHasher(**{**TINY, "random_state": np.random.RandomState(3)}).fit(x).encode(x)
    again = SGHHasher(**{**TINY, "random_state": np.random.RandomState(3)}).fit(x).encode(x)
    np.testing.assert_array_equal(first, again)
    SGHHasher(**{**TINY, "random_state": None}).fit(x)
    validated = SGHHasher(**{**TINY, "validation_every": 2, "validation_queries": 20,
                             "validation_database": 200}).fit(_blobs(n=300))
    assert validated.fit_info_["codes_from"] == ("the best validated weights (kept in memory "
                                                 "during the fit)")


def test_fit_leaves_the_users_keras_and_tensorflow_state_alone():
    import keras
    import tensorflow as tf

    # The user's own seeded stream and Keras objects, before and after a fit: a fit that
    # reseeded TensorFlow or cleared the Keras session would change the draw and reuse a name.
    tf.random.set_seed(123)
    expected = [float(tf.random.uniform([])) for _ in range(2)]
    tf.random.set_seed(123)
    first = float(tf.random.uniform([]))
    users_layer = keras.layers.Dense(1)
    x = np.random.default_rng(0).normal(size=(300, 8)).astype(np.float32)
    SGHHasher(n_bits=4, steps=20, batch_size=100, random_state=0).fit(x)
    assert [first, float(tf.random.uniform([]))] == expected
    assert keras.layers.Dense(1).name != users_layer.name


def test_verbose_prints_sgh_trains_progress_on_stderr_and_leaves_the_codes_alone(capsys):
    import logging
    import sys

    x = _blobs()
    settings = {**TINY, "steps": 20, "validation_every": 10, "validation_queries": 20,
                "validation_database": 200, "random_state": 3}
    # A user whose absl logger shows INFO (a notebook's basicConfig): held back during the fit.
    absl = logging.getLogger("absl")
    users_handler, users_level = logging.StreamHandler(sys.stderr), absl.level
    absl.addHandler(users_handler)
    absl.setLevel(logging.INFO)
    try:
        verbose = SGHHasher(**settings, verbose=True)
        assert verbose.get_params()["verbose"] is True
        codes = verbose.fit(x).encode(x)
        err = capsys.readouterr().err
        assert absl.level == logging.INFO  # the user's settings are back
    finally:
        absl.removeHandler(users_handler)
        absl.setLevel(users_level)
    lines = [line for line in err.splitlines() if line.startswith("[sgh] step")]
    assert lines[0].startswith("[sgh] step      2/20  total ") and len(lines) == 10
    assert "val recall10@100" in lines[-1] and "steps/s  ETA" in lines[-1]
    assert "absl" not in err and "Sharding callback" not in err
    progress = logging.getLogger("sgh.training")
    assert progress.propagate and not progress.handlers
    quiet = SGHHasher(**settings).fit(x)
    assert "[sgh]" not in capsys.readouterr().err
    np.testing.assert_array_equal(quiet.encode(x), codes)


def test_candidates_are_chosen_on_validation_and_the_chosen_model_is_saved(tmp_path):
    candidates = {"linear": {"trainer": {"steps": 6}},
                  "deep": {"model": {"encoder": "mlp", "encoder_hidden": [8]}}}
    hasher = SGHHasher(**{**TINY, "validation_every": 2, "validation_queries": 20,
                          "validation_database": 200, "candidates": candidates}).fit(_blobs())
    info = hasher.fit_info_
    assert set(info["recipe_candidates"]) == {"linear", "deep"}
    figures = {name: entry["validation"] for name, entry in info["recipe_candidates"].items()}
    assert info["recipe_chosen"] == max(figures, key=figures.get)  # ties: the earlier, linear
    assert info["best_validation_asymmetric_recall10@100"] == figures[info["recipe_chosen"]]
    assert info["recipe_budget_steps"] == 6 + TINY["steps"]
    # The chosen candidate's architecture is rebuilt on load (not the hasher's own settings).
    hasher.save(tmp_path / "hasher")
    loaded = SGHHasher.load(tmp_path / "hasher")
    np.testing.assert_array_equal(loaded.encode(_blobs(seed=1)), hasher.encode(_blobs(seed=1)))
    assert loaded.candidates == candidates
    with pytest.raises(UserInputError,
                       match=r"^candidates.deep.model.encoderr cannot be set.*accepted: "):
        SGHHasher(**{**TINY, "validation_every": 2,
                     "candidates": {"deep": {"model": {"encoderr": "mlp"}}}}).fit(_blobs())
    # Too few items to validate on: the first candidate is trained, and the warning says so.
    with pytest.warns(UserWarning, match=r"the first of candidates \('linear'\)"):
        small = SGHHasher(**{**TINY, "validation_every": 2, "candidates": candidates}).fit(
            _blobs(n=60))
    assert small.fit_info_["steps"] == 6 and "recipe_chosen" not in small.fit_info_


def test_candidates_are_judged_by_the_search_the_user_deploys():
    candidates = {"linear": {"trainer": {"steps": 6}},
                  "bytes": {"model": {"decoder": "bytes"}}}
    settings = {**TINY, "n_bits": 16, "validation_every": 2, "validation_queries": 20,
                "validation_database": 200, "candidates": candidates}
    hasher = SGHHasher(**settings, search="bytes").fit(_blobs(n=400))
    info = hasher.fit_info_
    figures = {name: entry["validation"] for name, entry in info["recipe_candidates"].items()}
    assert "byte decoder index" in info["recipe_figure"]
    assert info["recipe_chosen"] == max(figures, key=figures.get)
    # The figure is the chosen model's byte decoder index at its validated encoding.
    scores = hasher.scores_
    assert figures[info["recipe_chosen"]] == scores.encodings[scores.encoding]
    # search="two_stage" (SGHIndex's mode): the validation figure of the score that rescores.
    rescoring = SGHHasher(**settings, search="two_stage").fit(_blobs(n=400))
    info, scores = rescoring.fit_info_, rescoring.scores_
    assert "rescoring score" in info["recipe_figure"]
    assert info["recipe_candidates"][info["recipe_chosen"]]["validation"] == \
        scores.validation_figure(scores.kind_for("auto", "two_stage"))
    for search in ("hamming", "asymmetric", "rerank"):  # and eval.ranking's former names
        with pytest.raises(UserInputError, match=rf"^search='{search}' is not known; accepted: "
                                                 "the SGHIndex modes scan "):
            SGHHasher(**settings, search=search).fit(_blobs())


def test_presets_come_from_sgh_trains_experiment_files(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from sgh.cli.resources import CONFIG_DIR
    from sgh.training import sgh_hasher

    assert sgh_hasher._experiment_dir() == CONFIG_DIR / "experiment"
    search = OmegaConf.load(CONFIG_DIR / "experiment" / "search.yaml")
    hasher = SGHHasher.from_preset("search")
    assert hasher.candidates == OmegaConf.to_container(search.validation.candidates)
    assert hasher.patience == search.validation.patience
    assert hasher.validation_metric == search.validation.metric
    assert hasher.n_bits == SGHHasher().n_bits  # what the preset leaves alone is the default
    overridden = SGHHasher.from_preset("search", n_bits=16, steps=7, verbose=True)
    assert (overridden.n_bits, overridden.steps, overridden.verbose) == (16, 7, True)
    assert SGHHasher.from_preset("released_mnist").normalization == "none"
    for name in ("nope", "compare_protocol_a", "../train"):
        with pytest.raises(UserInputError, match=r"accepted: fast, released_mnist, search"):
            SGHHasher.from_preset(name)
    (tmp_path / "mine.yaml").write_text("trainer:\n  steps: 5\n  checkpoint_every: 9\n")
    monkeypatch.setattr(sgh_hasher, "_experiment_dir", lambda: tmp_path)
    with pytest.raises(UserInputError, match="sets trainer.checkpoint_every, which SGHHasher "
                                             "cannot take"):
        SGHHasher.from_preset("mine")


def test_a_fit_that_diverges_names_the_parameter_not_the_command_line_key():
    """"Lower trainer.learning_rate" told a Python user to change a key they never set."""
    from sgh.errors import TrainingDiverged

    with pytest.raises(TrainingDiverged, match=r"Lower learning_rate \(now 1e\+10\)") as raised:
        SGHHasher(**TINY, learning_rate=1e10).fit(_blobs())
    assert "trainer." not in str(raised.value)
