"""`sgh-train` end to end: the run directory, its file contracts, the CLI, sweeps, bad input."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from sgh.cli.resources import CONFIG_DIR
from sgh.errors import UserInputError
from sgh.pipeline import run
from tests.helpers import QUICK, compose_config, trained


def _config(*overrides):
    return compose_config(*QUICK, *overrides)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    return trained(tmp_path_factory.mktemp("run"), _config())


def test_run_directory_holds_every_artifact(finished_run):
    run_dir, _ = finished_run
    for name in ("config.yaml", "codes.npz", "metrics.json"):
        assert (run_dir / name).is_file()
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert (run_dir / "checkpoints" / "checkpoint").is_file()
    assert (run_dir / "checkpoints" / "best" / "checkpoint").is_file()
    assert (run_dir / "encoder" / "saved_model.pb").is_file()
    assert not list(run_dir.glob(".*.tmp*"))  # no temporary file left behind
    assert OmegaConf.load(run_dir / "config.yaml").model.bits == 12


def test_codes_npz_contract(finished_run):
    run_dir, _ = finished_run
    with np.load(run_dir / "codes.npz", allow_pickle=False) as codes:
        assert int(codes["bits"]) == 12
        assert codes["database"].dtype == np.uint8 and codes["database"].shape == (2200, 2)
        assert codes["query"].shape == (200, 2)
        assert codes["database_labels"].shape == (2200,) and codes["query_labels"].shape == (200,)
        assert codes["groundtruth"].shape[0] == 200 and codes["groundtruth"].shape[1] >= 10
        # 12 bits in 2 bytes: the 4 padding bits (least significant of byte 1) are zero.
        assert not np.any(codes["database"][:, 1] & 0x0F)


def test_codes_are_the_model_encoding_of_the_database(finished_run):
    # Re-encode from the checkpoint: the saved codes are exactly the deterministic encoding.
    import tensorflow as tf

    from sgh.data import load_split
    from sgh.model.encoding import encode_packed
    from sgh.model.sgh_model import SGH

    run_dir, _ = finished_run
    config = _config()
    split = load_split(config.dataset)
    model = SGH.from_training_data(config.model, split.train, seed=123)  # other init...
    # The final codes come from the best validated weights.
    tf.train.Checkpoint(model=model).restore(
        tf.train.latest_checkpoint(str(run_dir / "checkpoints" / "best"))).expect_partial()
    with np.load(run_dir / "codes.npz") as codes:  # ...replaced by the trained weights
        np.testing.assert_array_equal(encode_packed(model, split.database), codes["database"])


def test_metrics_json_contract(finished_run):
    run_dir, returned = finished_run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for key in ("map", "map_stable", "recall10@1", "recall10@10", "recall10@100",
                "recall10@1000", "distinct_database_codes", "bits", "dataset", "steps",
                "train_seconds", "ms_per_step", "map_convention", "recall_convention"):
        assert key in metrics, key
    assert metrics["bits"] == 12 and metrics["steps"] == 60 and metrics["dataset"] == "synthetic"
    assert 0 < metrics["map"] <= 1 and metrics["recall10@1000"] == pytest.approx(
        returned["recall10@1000"])
    # Gaussian clusters are easy: learned codes must beat chance (1/10) by far.
    assert metrics["map"] > 0.3


def test_config_value_reaches_the_run(tmp_path):
    # Habit: a config value changes behaviour. Another seed gives other codes.
    run(_config("trainer.seed=1"), tmp_path / "a")
    run(_config("trainer.seed=2"), tmp_path / "b")
    with np.load(tmp_path / "a" / "codes.npz") as a, np.load(tmp_path / "b" / "codes.npz") as b:
        assert np.any(a["database"] != b["database"])


@pytest.mark.parametrize("method", ["lsh", "itq"])
def test_baselines_run_through_the_same_pipeline(tmp_path, method):
    metrics = run(_config(f"model={method}"), tmp_path)
    assert metrics["method"] == method and metrics["bits"] == 12
    with np.load(tmp_path / "codes.npz") as codes:
        assert codes["database"].shape == (2200, 2) and int(codes["bits"]) == 12
    assert json.loads((tmp_path / "metrics.json").read_text())["map"] == metrics["map"]
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_a_baselines_run_imports_no_tensorflow_and_still_shows_its_tensorboard_views(tmp_path):
    # TensorFlow's import is seconds of a run that needs none of it: a baseline's TensorBoard
    # views are written without it (sgh.artifacts.tensorboard_events).
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "sgh.cli.train",
                             *QUICK, "model=itq", f"hydra.run.dir={tmp_path}"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")}
    assert "sklearn" in imported  # the check sees the run's imports
    assert not {"tensorflow", "keras"} & imported
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    tags = set(events.Tags()["tensors"])
    assert {"eval/map", "pr_curve/hamming_lookup", "_hparams_/session_start_info"} <= tags, tags


def _cli(*args, cwd):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "sgh.cli.train", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # two real sgh-train jobs through Hydra's launcher (~12 s)
def test_cli_runs_a_sweep_one_directory_per_job_with_the_table_printed_and_logged(tmp_path):
    result = _cli("-m", *QUICK[:-1], "model.bits=8,12", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                  cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    jobs = sorted(path.parent for path in (tmp_path / "sweep").glob("*/metrics.json"))
    assert [json.loads((job / "metrics.json").read_text())["bits"] for job in jobs] == [8, 12]
    lines = result.stdout.splitlines()
    assert sum(line.startswith("[sgh] synthetic: train (") for line in lines) == 2
    assert any(line.startswith("[sgh] step     60/60  total ") for line in lines)
    assert sum(line.startswith("  mAP@all, label relevance, tie-aware  ")
               for line in lines) == 2  # the tables, unprefixed
    assert "Recall10@100, Euclidean 10-NN, tie-aware" in result.stdout
    for job in jobs:
        assert f"[sgh] run directory: {job}" in lines
        # Hydra's log of each job holds its own lines, with their time and logger.
        log = (job / "train.log").read_text()
        assert "[sgh.training.progress][INFO] - step     60/60  total " in log
        assert "mAP@all, label relevance, tie-aware" in log and "run directory:" in log


def test_configs_are_found_by_the_package():
    assert Path(CONFIG_DIR, "train.yaml").is_file()


def test_tensorboard_events_hold_every_loss_term_rate_and_step_time(finished_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, _ = finished_run
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    tags = set(events.Tags()["tensors"])
    assert {"loss/total", "loss/reconstruction", "loss/gaussian_nll", "loss/kl", "loss/rho",
            "train/learning_rate", "train/ms_per_step", "train/steps_per_second"} <= tags
    steps = [event.step for event in events.Tensors("loss/total")]
    assert steps == [20, 40, 60]  # one point per compiled call of 20 steps


def test_tensorboard_shows_validation_code_health_encoder_pr_curve_and_hparams(finished_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, _ = finished_run
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    tags = set(events.Tags()["tensors"])
    assert {"validation/recall10@100", "validation/best_recall10@100", "validation/seconds",
            "code_health/distinct_codes", "code_health/dead_bits", "code_health/bit_balance",
            "encoder/logits", "encoder/probabilities", "pr_curve/hamming_lookup",
            "gradients/global", "gradients/W", "eval/map"} <= tags, tags
    plugins = {events.SummaryMetadata(tag).plugin_data.plugin_name for tag in tags}
    assert {"scalars", "histograms", "pr_curves"} <= plugins
    # The run's HParams row: TensorBoard's session-start record of the flattened config.
    assert "_hparams_/session_start_info" in events.PluginTagToContent("hparams")


DEEP = ["model.encoder=mlp", "model.decoder=mlp", "model.encoder_hidden=[24]",
        "model.decoder_hidden=[24]", "model.gradient_estimator=unbiased", "validation.every=20"]


@pytest.mark.slow  # 5-10 s: a whole training run
def test_a_deep_model_runs_resumes_and_exports_through_the_pipeline(tmp_path, caplog):
    import logging

    from sgh.data import load_split
    from sgh.model.encoding import encode_packed
    from sgh.model.export import load_encoder, restore_run_model

    metrics = run(_config(*DEEP), tmp_path)
    assert metrics["best_step"] > 0 and metrics["dead_bits"] < 12
    codes = np.load(tmp_path / "codes.npz")
    split_database = load_split(_config(*DEEP).dataset).database
    # The run's checkpoint and its exported encoder give the run's codes.
    np.testing.assert_array_equal(encode_packed(restore_run_model(tmp_path), split_database),
                                  codes["database"])
    np.testing.assert_array_equal(load_encoder(tmp_path / "encoder").encode_packed(
        split_database), codes["database"])
    with caplog.at_level(logging.INFO, logger="sgh"):
        again = run(_config(*DEEP), tmp_path)  # the same command: nothing to do
    assert "holds this run, finished" in caplog.text and again == metrics
    # eval.score=decoder: an mlp decoder has no templates hT + t to scan: refused, saying what
    # ranks by it (a shortlist decoded), and that ranking names the mlp decoder.
    from sgh.cli.evaluate import evaluate_codes
    from sgh.config import EvalCommandConfig, EvalConfig

    with pytest.raises(UserInputError, match="eval.score=decoder: the run has no per-bit "
                                             "decoder score .*model.decoder=mlp has no per-bit "
                                             "form.*accepted: eval.ranking=two_stage"):
        evaluate_codes(EvalCommandConfig(run=str(tmp_path), eval=EvalConfig(
            ranking="scan", score="decoder")))
    decoded = evaluate_codes(EvalCommandConfig(run=str(tmp_path), eval=EvalConfig(
        ranking="two_stage", score="decoder", shortlist=40)))["ranking"]
    assert "reordered by the decoder (mlp)" in decoded and "hT + t" not in decoded


@pytest.mark.slow
def test_a_deep_model_rescores_its_shortlist_by_decoding_it(tmp_path):
    # No per-bit tables for the decoder, but the shortlist is rescored through it, in sgh-train
    # and sgh-eval alike (which reads the decoder from asymmetric.npz: no TensorFlow there).
    from sgh.cli.evaluate import evaluate_codes
    from sgh.config import EvalCommandConfig, EvalConfig

    for score in ("decoder", "joint"):  # the shortlist: the encoder score's top 40
        settings = {"ranking": "two_stage", "shortlist": 40, "score": score}
        rescored = run(_config(*DEEP, *(f"eval.{key}={value}" for key, value in
                                        settings.items())), tmp_path / score)
        assert rescored["ranking"].startswith(
            "two_stage: SGHIndex(mode='two_stage', shortlist=40)'s search: the top 40 by the "
            "encoder likelihood")
        assert f"reordered by the {score} likelihood" in rescored["ranking"] if score == "joint" \
            else "reordered by the decoder (mlp)" in rescored["ranking"]
        again = evaluate_codes(EvalCommandConfig(run=str(tmp_path / score),
                                                 eval=EvalConfig(**settings)))
        for key in ("map", "recall10@100", "recall10@10"):
            assert again[key] == rescored[key], key
    # The scan of the whole database takes the encoder, which the validation chose for it.
    scanned = evaluate_codes(EvalCommandConfig(run=str(tmp_path / score),
                                               eval=EvalConfig(ranking="scan")))
    assert scanned["ranking"].startswith("scan: encoder likelihood")
    assert rescored["score_for_scan"] == "encoder"
    assert set(rescored["validation_recall10@100_by_score"]) >= {
        "encoder", "decoder (decoded)", "joint (decoded)"}


@pytest.mark.slow  # 5-10 s: a whole training run
def test_a_run_from_before_new_settings_existed_still_resumes(tmp_path, caplog):
    # A config.yaml written before keys were added to the schema (here the network settings)
    # describes a run that had their defaults: resuming it is not "another configuration".
    import logging

    run(_config(), tmp_path)
    saved = OmegaConf.load(tmp_path / "config.yaml")
    for key in ("encoder", "encoder_hidden", "encoder_activation", "decoder", "decoder_hidden",
                "decoder_activation"):
        del saved.model[key]
    OmegaConf.save(saved, tmp_path / "config.yaml")
    (tmp_path / "codes.npz").unlink()  # so that the run is resumed, not found finished
    with caplog.at_level(logging.INFO, logger="sgh"):
        run(_config(), tmp_path)
    assert "resuming from step 60" in caplog.text
    with pytest.raises(UserInputError, match="holds a run with another configuration"):
        run(_config("model.encoder=mlp"), tmp_path)


def test_a_run_finished_before_evaluation_keys_retired_is_still_that_run(tmp_path):
    # eval.shortlist_by, eval.shortlist_radius and eval.rescore configured only the retired
    # rerank ranking: a Hamming run that recorded them is the same run now, shown, not redone.
    run_dir = tmp_path
    run(_config(), run_dir)
    saved = OmegaConf.load(run_dir / "config.yaml")
    saved.eval.update(shortlist_by="auto", shortlist_radius=None, rescore="score")
    OmegaConf.save(saved, run_dir / "config.yaml")
    def written():  # the run's files (its lock aside, which every command takes)
        return {path.name: path.stat().st_mtime_ns for path in run_dir.iterdir()
                if path.is_file() and path.name != ".lock"}

    before = written()
    run(_config(), run_dir)
    assert written() == before


@pytest.mark.filterwarnings("ignore:two-stage search")  # ITQ's one score
def test_a_finished_run_is_rescored_in_every_ranking_without_training(finished_run, tmp_path):
    from sgh.cli.evaluate import evaluate_codes
    from sgh.config import EvalCommandConfig, EvalConfig

    run_dir, hamming = finished_run
    assert hamming["ranking"].startswith("hamming") and hamming["similarity"] == "euclidean"
    assert (run_dir / "asymmetric.npz").is_file()
    trained = run(_config("model=itq", "eval.ranking=scan"), tmp_path / "itq")
    for directory, method, score in ((run_dir, "decoder, reconstruction", "decoder"),
                                     (tmp_path / "itq", "ITQ", "auto")):
        asymmetric = evaluate_codes(EvalCommandConfig(run=str(directory), eval=EvalConfig(
            ranking="scan", score=score)))
        assert asymmetric["ranking"].startswith(f"scan: {method}")
        assert "map_stable" not in asymmetric and "lookup_precision@r2" not in asymmetric
        everything = evaluate_codes(EvalCommandConfig(run=str(directory), eval=EvalConfig(
            ranking="two_stage", shortlist=100_000, score=score)))  # the whole database
        assert everything["ranking"].startswith("two_stage: SGHIndex(mode='two_stage', "
                                                "shortlist=100000)'s search")
        for key in ("map", "map@100", "recall10@100"):
            assert everything[key] == pytest.approx(asymmetric[key], abs=1e-12), key
        # The two-stage trade-off, up to a shortlist of the whole database: the ranking above.
        curve = everything["shortlist_curve"]
        assert "rescore" not in curve
        assert curve["shortlist"][-1] == everything["n_database"]
        assert curve["recall10@100"][-1] == pytest.approx(everything["recall10@100"], abs=1e-12)
        assert all(rate > 0 for rate in curve["queries_per_second"])
    # sgh-train's own asymmetric scores are those sgh-eval gives the run.
    assert trained["recall10@100"] == pytest.approx(asymmetric["recall10@100"], abs=1e-12)


@pytest.mark.slow  # 5-10 s: a whole training run
def test_the_table_reports_the_byte_decoder_index_a_user_would_serve(tmp_path):
    # A run of SGH with its byte decoder: the decoder trained, refitted and its encoding chosen
    # on the validation split; the byte decoder index's search of the test queries beside the
    # codes' Hamming ranking, the same figure SGHIndex.from_run serves.
    from sgh.data import load_split
    from sgh.reports.results_table import results_table
    from sgh.search.sgh_index import SGHIndex

    run_dir, metrics = trained(tmp_path, _config("model.decoder=bytes", "model.bits=16",
                                                 "trainer.steps=200", "validation.every=100"))
    by_encoding = metrics["validation_recall10@100_by_encoding"]
    assert set(by_encoding) == {"encoder", "flip4", "flip5", "flip6", "local_search"}
    assert metrics["byte_decoder_encoding"] in by_encoding
    assert by_encoding["flip6"] >= by_encoding["encoder"]
    assert metrics["byte_decoder_ranking"].startswith("bytes: SGHIndex(mode='bytes', encoding=")
    for key in ("byte_decoder_map", "byte_decoder_recall10@100", "recall10@100", "map"):
        assert 0 < metrics[key] <= 1, key
    index = SGHIndex.from_run(run_dir, mode="bytes")
    assert index.encoding == metrics["byte_decoder_encoding"]
    found = index.search(load_split(_config().dataset).query, 100)[1]
    with np.load(run_dir / "codes.npz") as codes:
        truth = codes["groundtruth"][:, :10]
    served = (found[:, :, None] == truth[:, None, :]).any(axis=1).mean()
    assert served == pytest.approx(metrics["byte_decoder_recall10@100"], abs=1e-12)
    table = results_table(metrics, "title", _config().eval)
    encoding = metrics["byte_decoder_encoding"]
    assert f"byte decoder index ({encoding}): mAP@all, label relevance, ties by id" in table
    assert (f"byte decoder index ({encoding}): Recall10@1/@10/@100/@1000, Euclidean 10-NN, "
            "ties by id") in table
    assert re.search(rf"byte decoder's encoding \(validation Recall10@100\) +{encoding} \(encoder",
                     table)
    assert metrics["byte_decoder_index_encoding"] == encoding
    # eval.encoding codes the index's database as it says (a cheaper encoding for a large one).
    _, cheap = trained(tmp_path / "cheap", _config("model.decoder=bytes", "model.bits=8",
                                                   "trainer.steps=100", "eval.encoding=encoder"))
    assert cheap["byte_decoder_index_encoding"] == "encoder"
    assert "encoding='encoder'" in cheap["byte_decoder_ranking"]
    assert "byte decoder index (encoder): mAP@all" in results_table(cheap, "t", _config().eval)
    # The encoder exports as any run's: its SavedModel gives the run's Hamming codes.
    from sgh.model.export import load_encoder

    with np.load(run_dir / "codes.npz") as codes:
        np.testing.assert_array_equal(
            load_encoder(run_dir / "encoder").encode_packed(load_split(_config().dataset).query),
            codes["query"])


def test_an_unknown_encoding_is_refused_before_training(tmp_path):
    with pytest.raises(UserInputError, match="eval.encoding='icm99' is not known; accepted: "
                                             "encoder, flip1 .. flip8, icm1 .. icm16, "
                                             "local_search; or auto"):
        run(_config("eval.ranking=bytes", "eval.encoding=icm99"), tmp_path)
    assert not (tmp_path / "config.yaml").exists()


@pytest.mark.parametrize("overrides, reason", [
    (["model=sh", "eval.ranking=scan"], "model=sh: its bits are not signs of linear"),
    (["model=sph", "eval.ranking=two_stage"], "model=sph: its bits are not signs"),
    (["model.decoder=mlp", "model.encoder=mlp", "eval.ranking=scan",
      "eval.score=decoder"], "model.decoder=mlp has no per-bit form"),
    (["model=itq", "eval.ranking=scan", "eval.score=joint"],
     "model=itq: its one score is its projection's"),
    (["model.decoder=bytes", "eval.ranking=two_stage", "eval.score=decoder"],
     "model.decoder=bytes has no decoder or joint score"),
])
def test_a_ranking_the_method_cannot_give_is_refused_before_training(tmp_path, overrides,
                                                                    reason):
    with pytest.raises(UserInputError, match=reason) as error:
        run(_config(*overrides), tmp_path)
    # What to do instead: SH and SpH have the Hamming ranking only (two_stage needs the
    # encoder score).
    assert str(error.value).endswith("; accepted: eval.ranking=hamming")
    assert not (tmp_path / "config.yaml").exists()


@pytest.mark.slow
def test_any_feature_scale_gives_the_same_codes_and_scores(tmp_path, caplog):
    # x 2^100 and x 1e30: squared distances overflow float32 (ground truth, the input-unit
    # reconstruction term). The product's promise: a power-of-two scale changes
    # nothing, bit for bit (every division by a scale is then exact); any other scale changes
    # the inputs' own float32 rounding, which training carries into the late digits of the
    # weights, so the continuous asymmetric scores may swap near-tied items.
    from sgh.data.synthetic import gaussian_clusters

    x_train, y_train, x_test, y_test = gaussian_clusters(1200, 300, 16, 5, 0)
    results = {}
    for scale in (1.0, 2.0**100, 1e30):
        path = tmp_path / f"scaled_{scale:g}.npz"
        np.savez(path, X_train=x_train.astype(np.float64) * scale, y_train=y_train,
                 X_test=x_test.astype(np.float64) * scale, y_test=y_test)
        metrics = run(compose_config("dataset=file", f"dataset.path={path}", *QUICK[1:],
                                     "eval.ranking=scan"), tmp_path / f"run_{scale:g}")
        results[scale] = (metrics, np.load(tmp_path / f"run_{scale:g}" / "codes.npz"))
    plain, plain_codes = results[1.0]
    power_of_two, power_of_two_codes = results[2.0**100]
    for key in ("database", "query", "groundtruth"):
        np.testing.assert_array_equal(plain_codes[key], power_of_two_codes[key])
    for key in ("map", "recall10@100", "recall10@10"):
        assert power_of_two[key] == plain[key], key
    huge, huge_codes = results[1e30]
    np.testing.assert_array_equal(plain_codes["groundtruth"], huge_codes["groundtruth"])
    for key in ("map", "recall10@100", "recall10@10"):
        assert huge[key] == pytest.approx(plain[key], abs=0.02), key
    assert "exceed float32's range in input units" in caplog.text


@pytest.mark.parametrize("overrides, message", [
    (["eval.recall_k=5000"], "eval.recall_k=5000 is more than the database of 'synthetic' "
                             r"\(2200 items\); accepted: eval.recall_k <= 2200"),
    (["validation.database=8"], "eval.recall_k=10 is more than the 8 validation database items"),
])
def test_settings_that_depend_on_the_data_are_refused_before_training(tmp_path, overrides,
                                                                      message):
    with pytest.raises(UserInputError, match=message):
        run(_config(*overrides), tmp_path)
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "metrics.json").exists()


@pytest.mark.parametrize("distance, similarity", [("angular", "angular"),
                                                  ("dot", "inner_product")])
def test_an_ann_benchmarks_file_sets_the_similarity_of_every_stage(tmp_path, distance,
                                                                   similarity):
    import h5py

    from sgh.data.neighbours import exact_neighbours

    rng = np.random.default_rng(0)
    train = (rng.normal(size=(600, 12)) + 2).astype(np.float32)
    test = (rng.normal(size=(30, 12)) + 2).astype(np.float32)
    with h5py.File(tmp_path / "toy.hdf5", "w") as file:
        file.create_dataset("train", data=train)
        file.create_dataset("test", data=test)
        file.attrs["distance"] = distance
    metrics = run(_config("dataset=file", f"dataset.path={tmp_path / 'toy.hdf5'}",
                          "model=itq"), tmp_path / "run")
    assert metrics["similarity"] == similarity
    codes = np.load(tmp_path / "run" / "codes.npz")
    if similarity == "angular":  # every stage saw unit vectors
        train = train / np.linalg.norm(train, axis=1, keepdims=True)
        test = test / np.linalg.norm(test, axis=1, keepdims=True)
    truth = exact_neighbours(test, train, 10, "euclidean" if similarity == "angular"
                             else similarity)
    np.testing.assert_array_equal(codes["groundtruth"], truth)
