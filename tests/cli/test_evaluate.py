"""`sgh-eval`: scores any codes.npz in the contract, re-scores runs, rejects bad files."""

import json
import subprocess
import sys

import numpy as np
import pytest

from sgh.artifacts.codes_file import load_codes
from sgh.cli.evaluate import evaluate_codes
from sgh.config import EvalCommandConfig
from sgh.errors import UserInputError


def _codes_file(path, overrides=None, bits=16, n_database=300, n_query=20):
    rng = np.random.default_rng(0)
    width = (bits + 7) // 8
    arrays = {
        "database": rng.integers(0, 256, (n_database, width), dtype=np.uint8),
        "query": rng.integers(0, 256, (n_query, width), dtype=np.uint8),
        "bits": np.int64(bits),
        "database_labels": rng.integers(0, 5, n_database),
        "query_labels": rng.integers(0, 5, n_query),
        "groundtruth": np.argsort(rng.uniform(size=(n_query, n_database)), axis=1)[:, :10],
    }
    arrays.update(overrides or {})
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def test_scores_codes_from_any_method_and_writes_flat_json(tmp_path):
    out = tmp_path / "scores.json"
    metrics = evaluate_codes(EvalCommandConfig(codes=str(_codes_file(tmp_path / "c.npz")),
                                               out=str(out)))
    written = json.loads(out.read_text())
    assert written["map"] == pytest.approx(metrics["map"])
    for key in ("map", "map_stable", "map@100", "map@100_stable", "precision@100", "recall@100",
                "lookup_precision@r2", "lookup_recall@r2", "lookup_f1@r2", "recall10@100",
                "recall10@100_stable", "map_k_denominator", "map_convention", "map_at_k_convention",
                "lookup_convention", "recall_convention", "distinct_database_codes"):
        assert key in written
    assert all(not isinstance(value, (dict, list)) for value in written.values())  # flat


def test_labels_only_or_groundtruth_only(tmp_path):
    labels_only = evaluate_codes(EvalCommandConfig(codes=str(_codes_file(
        tmp_path / "a.npz", {"groundtruth": None}))))
    assert "map" in labels_only and "recall10@100" not in labels_only
    truth_only = evaluate_codes(EvalCommandConfig(codes=str(_codes_file(
        tmp_path / "b.npz", {"database_labels": None, "query_labels": None}))))
    assert "recall10@100" in truth_only and "map" not in truth_only


@pytest.mark.parametrize("overrides, message", [
    ({"bits": None}, "missing key 'bits' (the code length)"),
    ({"database": np.zeros((5, 3), np.uint8)}, "expected packed uint8 codes of shape (n, 2)"),
    ({"query": None}, "missing key 'query'"),
    ({"query_labels": None}, "only one of 'database_labels' and 'query_labels'"),
    ({"database_labels": None, "query_labels": None, "groundtruth": None}, "no relevance data"),
    ({"groundtruth": np.full((20, 10), 300)}, "'groundtruth' has ids outside 0..299"),
])
def test_bad_codes_files_are_named(tmp_path, overrides, message):
    path = _codes_file(tmp_path / "bad.npz", overrides)
    with pytest.raises(UserInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_codes(path)


def test_recall_k_beyond_the_ground_truth_is_refused(tmp_path):
    config = EvalCommandConfig(codes=str(_codes_file(tmp_path / "c.npz")))
    config.eval.recall_k = 20
    with pytest.raises(UserInputError, match="eval.recall_k=20 needs 20 ground-truth"):
        evaluate_codes(config)


def test_cli_rescores_a_run_directory_and_fails_cleanly(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _codes_file(run_dir / "codes.npz")
    ok = subprocess.run([sys.executable, "-m", "sgh.cli.evaluate", f"run={run_dir}",
                         "eval.recall_n=[5,50]"], capture_output=True, text=True, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "Recall10@50, Euclidean 10-NN, tie-aware" in ok.stdout
    assert "recall10@5" in json.loads((run_dir / "eval.json").read_text())
    assert not (tmp_path / "outputs").exists() and not (tmp_path / ".hydra").exists()

    bad = subprocess.run([sys.executable, "-m", "sgh.cli.evaluate", f"codes={tmp_path}/none.npz"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().startswith("sgh-eval: error:") and "no such file" in bad.stderr


def test_a_codes_file_holds_no_query_features_for_an_asymmetric_ranking(tmp_path):
    from sgh.config import EvalConfig

    path = _codes_file(tmp_path / "codes.npz")
    for ranking in ("scan", "two_stage", "bytes"):
        with pytest.raises(UserInputError, match="sgh-eval run=DIR instead of codes=FILE"):
            evaluate_codes(EvalCommandConfig(codes=str(path), eval=EvalConfig(ranking=ranking)))
    with pytest.raises(UserInputError, match="eval.ranking='nearest' is not known; accepted: "
                                             "hamming, scan, two_stage, bytes"):
        evaluate_codes(EvalCommandConfig(codes=str(path), eval=EvalConfig(ranking="nearest")))
    # The former names of SGHIndex's modes: refused, naming the mode.
    for old, new in (("asymmetric", "scan"), ("rerank", "two_stage")):
        with pytest.raises(UserInputError, match=f"^eval.ranking={old} is now eval.ranking="
                                                 rf"{new} \(SGHIndex's mode of that name\)"):
            evaluate_codes(EvalCommandConfig(codes=str(path), eval=EvalConfig(ranking=old)))
    with pytest.raises(UserInputError, match="eval.shortlist=0 is impossible"):
        evaluate_codes(EvalCommandConfig(codes=str(path), eval=EvalConfig(shortlist=0)))


def test_a_two_stage_ranking_shortlists_by_the_runs_own_scan_and_says_which(tmp_path, capsys):
    from sgh.config import BaselineConfig, Config, EvalConfig, SyntheticDatasetConfig
    from tests.helpers import trained

    run_dir, hamming = trained(tmp_path / "itq", Config(dataset=SyntheticDatasetConfig(),
                                                  model=BaselineConfig(name="itq", bits=12)))
    capsys.readouterr()
    # ITQ's one score is its encoder form: by default it both makes the shortlist and rescores
    # it, which the user is told once (the shortlist curve's searches repeat nothing).
    with pytest.warns(UserWarning, match="the encoder score rescores the shortlist it made") \
            as caught:
        auto = evaluate_codes(EvalCommandConfig(run=str(run_dir), eval=EvalConfig(
            ranking="two_stage", shortlist=100)))
    assert len(caught) == 1
    assert auto["ranking"].startswith("two_stage: SGHIndex(mode='two_stage', shortlist=100)'s "
                                      "search: the top 100 by the ITQ projection")
    # The table states the convention under the numbers, as metrics.json does.
    assert f"ranking: {auto['ranking']}" in capsys.readouterr().out
    # The run's scan finds more of the true neighbours than Hamming distance's few levels.
    assert hamming["ranking"].startswith("hamming")
    assert auto["recall10@100"] > hamming["recall10@100"]


def test_the_byte_decoder_index_ranks_a_run_as_it_would_serve_it(tmp_path, capsys):
    # eval.ranking=bytes: the database coded by a byte decoder index of the run and searched by
    # it; a projection's run gets one fitted on its training features, any encoding is taken.
    from sgh.config import BaselineConfig, Config, EvalConfig, SyntheticDatasetConfig
    from tests.helpers import trained

    run_dir, hamming = trained(tmp_path / "itq", Config(
        dataset=SyntheticDatasetConfig(), model=BaselineConfig(name="itq", bits=16)))
    assert "byte_decoder_recall10@100" not in hamming  # a baseline's run is not slowed by it
    scores = {encoding: evaluate_codes(EvalCommandConfig(run=str(run_dir), eval=EvalConfig(
        ranking="bytes", encoding=encoding))) for encoding in ("auto", "encoder", "flip4")}
    assert scores["auto"]["ranking"] == ("bytes: SGHIndex(mode='bytes', encoding="
                                         "'local_search'), its flat scan of every code, ties "
                                         "by id")
    assert scores["auto"]["recall10@100"] > scores["encoder"]["recall10@100"]
    assert scores["auto"]["recall10@100"] > hamming["recall10@100"]
    assert "ranking: bytes: SGHIndex(mode='bytes'" in capsys.readouterr().out
    with pytest.raises(UserInputError, match="eval.encoding='icm99' is not known; accepted: "
                                             "encoder, flip1 .. flip8, icm1 .. icm16, "
                                             "local_search; or auto"):
        evaluate_codes(EvalCommandConfig(run=str(run_dir), eval=EvalConfig(
            ranking="bytes", encoding="icm99")))


def test_a_library_warning_reaches_the_user_as_one_warning_line(tmp_path):
    # A real process: sgh-eval's own logging configuration (configs/hydra/job_logging/
    # warnings.yaml) and the boundary that turns Python warnings into log records.
    import os
    import subprocess
    import sys

    from sgh.config import BaselineConfig, Config, SyntheticDatasetConfig
    from tests.helpers import trained

    run_dir, _ = trained(tmp_path / "itq", Config(dataset=SyntheticDatasetConfig(),
                                                  model=BaselineConfig(name="itq", bits=12)))
    env = {key: value for key, value in os.environ.items() if key != "SGH_DEBUG"}
    result = subprocess.run([sys.executable, "-m", "sgh.cli.evaluate", f"run={run_dir}",
                             "eval.ranking=two_stage", "eval.shortlist=100",
                             f"out={tmp_path / 'eval.json'}"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    warned = [line for line in result.stderr.splitlines() if "warning" in line.lower()]
    assert len(warned) == 1 and warned[0].startswith(
        "sgh-eval: warning: two-stage search: the encoder score rescores the shortlist it made, "
        "so the results are that score's scan, found more slowly; "), warned
    # Its advice names what the evaluation has: no exact rescoring, no Hamming shortlist.
    assert "exact" not in warned[0] and "Hamming" not in warned[0], warned
    assert "UserWarning" not in result.stderr
