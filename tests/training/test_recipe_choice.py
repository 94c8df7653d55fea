"""`validation.candidates`: several recipes trained on one validation split, the best kept.

The choice is the candidate whose validation figure for the run's search is highest (here its
scan's, `eval.ranking=scan`); its weights make the run's codes, sgh-export restores them
(its model settings, its checkpoint), and the same command again resumes every candidate at its
last step and trains nothing.
"""

import numpy as np
import pytest

from sgh.config import candidate_config, validate
from sgh.errors import UserInputError
from sgh.pipeline import run
from sgh.scores.score_set import ScoreSet
from sgh.training.recipe_choice import search_figure
from tests.helpers import compose_config, quick

FIGURE = "best_validation_asymmetric_recall10@100"  # the scan's figure, chosen candidate's
# Two mlp encoders of different widths over a linear base: a restore that missed the chosen
# candidate's settings would build the wrong network and fail to read its checkpoint.
CANDIDATES = ["validation.every=40", "validation.metric=encoder_recall", "eval.ranking=scan",
              "+validation.candidates.narrow={model: {encoder: mlp, encoder_hidden: [8]}, "
              "trainer: {steps: 120}}",
              "+validation.candidates.wide={model: {encoder: mlp, encoder_hidden: [24]}, "
              "trainer: {steps: 80, learning_rate: 0.01}}"]


def _config(*overrides):
    return compose_config(*quick(*overrides))


@pytest.mark.slow  # 5-10 s: a whole training run
def test_the_candidate_that_ranks_validation_best_makes_the_codes_and_is_restored(tmp_path):
    from sgh.data import load_split
    from sgh.model.encoding import encode_packed
    from sgh.model.export import restore_run_model

    config = _config(*CANDIDATES)
    metrics = run(config, tmp_path)
    report = metrics["recipe_candidates"]
    assert list(report) == ["narrow", "wide"]
    figures = {name: entry["validation"] for name, entry in report.items()}
    chosen = metrics["recipe_chosen"]
    assert figures[chosen] == max(figures.values())  # ties: the earlier one
    assert chosen == "narrow" or figures["wide"] > figures["narrow"]
    assert metrics[FIGURE] == figures[chosen] and metrics["steps"] == report[chosen]["steps"]
    assert metrics["recipe_budget_steps"] == 200
    assert metrics["train_seconds"] == pytest.approx(
        sum(entry["train_seconds"] for entry in report.values()))
    for name in report:
        assert (tmp_path / "checkpoints" / "candidates" / name / "best").is_dir()
        assert any((tmp_path / "tensorboard" / name).glob("events.out.tfevents.*"))
    codes = np.load(tmp_path / "codes.npz")
    database = load_split(config.dataset).database
    np.testing.assert_array_equal(encode_packed(restore_run_model(tmp_path), database),
                                  codes["database"])

    # Interrupted after training, before its results: every candidate resumes at its end.
    (tmp_path / "metrics.json").unlink()
    again = run(config, tmp_path)
    assert again["recipe_chosen"] == chosen and again["recipe_candidates"].keys() == report.keys()
    np.testing.assert_array_equal(np.load(tmp_path / "codes.npz")["database"], codes["database"])


@pytest.mark.parametrize("override, message", [
    ("+validation.candidates.a={model: {bits: 16}}",
     "validation.candidates.a.model.bits cannot be set by a candidate; accepted: objective"),
    ("+validation.candidates.a={model: {encoder: conv}}",
     "validation.candidates.a: model.encoder='conv' is not known; accepted: linear, mlp"),
    ("+validation.candidates.a={trainer: {steps: -1}}",
     "validation.candidates.a: trainer.steps=-1"),
    ("+validation.candidates.a={eval: {recall_k: 5}}",
     "validation.candidates.a={'eval': {'recall_k': 5}} is not a recipe; accepted: a mapping"),
    ("+validation.candidates.a={model: linear}",
     "validation.candidates.a.model='linear' is not a mapping"),
])
def test_a_candidate_that_is_not_a_recipe_is_refused_naming_its_key(override, message):
    with pytest.raises(UserInputError, match="^" + message.replace("(", r"\(").replace(
            "[", r"\[")):
        validate(_config(override))


def test_candidates_need_sgh_and_a_validation_split():
    candidate = "+validation.candidates.a={trainer: {steps: 10}}"
    with pytest.raises(UserInputError, match="model=itq trains none"):
        validate(_config(candidate, "model=itq"))
    with pytest.raises(UserInputError, match="validation.every=0 turns it off"):
        validate(_config(candidate, "validation.every=0"))


def test_a_candidate_trains_its_settings_over_the_runs_and_has_no_candidates_of_its_own():
    config = _config(*CANDIDATES, "trainer.batch_size=50")
    wide = candidate_config(config, "wide")
    assert wide.model.encoder_hidden == [24] and wide.trainer.learning_rate == 0.01
    assert wide.trainer.batch_size == 50 and wide.model.bits == config.model.bits
    assert wide.validation.candidates == {} and config.validation.candidates  # not changed


def test_the_search_recipe_chooses_among_a_linear_and_a_deep_candidate():
    config = compose_config("experiment=search")
    validate(config)
    assert list(config.validation.candidates) == ["linear", "deep"]
    assert candidate_config(config, "deep").model.decoder == "mlp"
    assert candidate_config(config, "linear").model.encoder == "linear"


def test_a_byte_decoder_run_judges_candidates_by_its_index_at_the_validated_encoding():
    config = _config("eval.ranking=bytes")
    scores = ScoreSet({}, "encoder", "joint", validation={"encoder": 0.8}, encoding="flip4",
                      encodings={"encoder": 0.7, "flip4": 0.93, "local_search": 0.95})
    assert search_figure(config, "bytes", scores, {}) == 0.93  # the index's, not the best
    assert np.isnan(search_figure(config, "bytes", ScoreSet({}, "encoder", "joint"), {}))


@pytest.mark.parametrize("overrides, figure", [
    ((), 0.6),  # hamming: the figure of validation.metric, which selected the weights
    (("eval.ranking=scan",), 0.8),
    (("eval.ranking=two_stage",), 0.9),  # an mlp decoder's decoded joint score
    (("eval.ranking=scan", "eval.score=joint"), float("nan")),  # not per bit
])
def test_a_candidate_is_judged_by_the_validation_figure_of_the_runs_search(overrides, figure):
    config = _config(*overrides)
    search = config.eval.ranking  # what fit_and_score is given: the SGHIndex mode
    scores = ScoreSet({}, "encoder", "joint", validation={
        "encoder": 0.8, "decoder (decoded)": 0.7, "joint (decoded)": 0.9})
    trained = {"validation_metric": "recall10@100", "best_validation_recall10@100": 0.6}
    if np.isnan(figure):
        with pytest.raises(UserInputError, match="has no per-bit joint score"):
            search_figure(config, search, scores, trained)
    else:
        assert search_figure(config, search, scores, trained) == figure
