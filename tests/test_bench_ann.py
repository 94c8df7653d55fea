"""scripts/bench_ann.py on a small synthetic SGH run: every curve measured, the recalls as the
module doc defines them, the plot and the target's verdict written."""


import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from sgh.artifacts.codes_file import load_codes
from sgh.config import dataset_config_from
from sgh.data import load_split
from sgh.search.sgh_index import SGHIndex
from tests.helpers import compose_config, quick, trained

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_ann.py"
# A training run and a faiss build of every anchor: half a minute to a minute.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def benchmarked(tmp_path_factory):
    place = tmp_path_factory.mktemp("bench_ann")
    run_dir, _ = trained(place / "run", compose_config(*quick("model.bits=16")))
    finished = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", str(run_dir), "--quick",
         "--json", str(place / "bench.json"), "--png", str(place / "plots")],
        capture_output=True, text=True, cwd=SCRIPT.parents[1])
    assert finished.returncode == 0, finished.stderr
    return run_dir, place, finished.stdout, json.loads((place / "bench.json").read_text())


def test_every_curve_is_measured_at_the_bytes_its_scan_reads(benchmarked):
    run_dir, _, _, result = benchmarked
    points = result["points"]
    methods = {point["method"] for point in points}
    lists = next(point["params"]["nlist"] for point in points if "nlist" in point["params"])
    assert methods == {"SGH scan", "SGH two-stage", f"SGH IVF{lists} scan",
                       "SGH byte decoder scan",
                       f"SGH IVF{lists} byte decoder scan",
                       "faiss PQ2np", "faiss PQ4x4fs", "faiss PQ3np", "faiss OPQ3,PQ3np",
                       "faiss OPQ2,PQ2np", "faiss OPQ4,PQ4x4fs", "faiss RQ2x8_Nqint8",
                       "faiss LSQ2x8_Nqint8", "faiss RQ2x4fs_Nrq2x4", "faiss LSQ2x4fs_Nlsq2x4",
                       f"faiss IVF{lists},PQ4x4fs", f"faiss IVF{lists},PQ4x4fsr",
                       f"faiss IVF{lists},RQ2x8_Nqint8", f"faiss IVF{lists},LSQ2x8_Nqint8",
                       f"faiss IVF{lists},RQ2x4fsr_Nrq2x4",
                       f"faiss IVF{lists},LSQ2x4fsr_Nlsq2x4", "faiss RaBitQ"}
    # The codes' 2 bytes; with a stored item constant in one more byte (the model's decoder
    # and joint scores, faiss's additive quantizers with 8-bit codebooks), and PQ/OPQ with one
    # more sub-quantizer at those 3 bytes; the byte decoder computes its norm from the code,
    # flat and in lists, and faiss's fast-scan additive quantizers hold theirs in two of their
    # 4-bit codes; RaBitQ at its own size, a bit per dimension (32) plus its floats.
    sizes = {"faiss RaBitQ": 12, "faiss RQ2x8_Nqint8": 3, "faiss PQ3np": 3,
             "faiss OPQ3,PQ3np": 3, "faiss LSQ2x8_Nqint8": 3,
             f"faiss IVF{lists},RQ2x8_Nqint8": 3, f"faiss IVF{lists},LSQ2x8_Nqint8": 3}
    scores = SGHIndex.from_run(run_dir).scores.scores
    with_constant = {name: 2 + (score.code_templates is not None)
                     for name, score in scores.items()}
    for point in points:
        assert (point["dataset"], point["bits"], point["threads"]) == ("synthetic", 16, 1)
        assert point["queries_per_second"] > 0
        for metric in ("recall10@100", "10-recall@10", "1-recall@1"):
            assert 0 <= point[metric] <= 1
        ranking = point["params"].get("rescore", point["params"].get("score"))
        expected = with_constant[ranking] if point["method"] in (
            "SGH scan", "SGH two-stage", f"SGH IVF{lists} scan") else sizes.get(point["method"], 2)
        assert point["bytes_per_item"] == expected, point["method"]
    # faiss's inverted lists are SGH's byte decoder lists of the same size (--quick: one size
    # for both), so both search one partition.
    assert {point["params"].get("lists") for point in points
            if point["method"].startswith("faiss IVF")} == {"SGH byte decoder's"}


def test_recall_is_the_share_of_the_true_ten_among_the_first_hundred(benchmarked):
    run_dir, _, _, result = benchmarked
    section = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))["dataset"]
    queries = load_split(dataset_config_from(section)).query
    truth = load_codes(run_dir / "codes.npz").groundtruth[:, :10]
    _, I = SGHIndex.from_run(run_dir).search(queries, 100)
    expected = np.mean([len(set(row[:100]) & set(true)) / 10
                        for row, true in zip(I, truth, strict=True)])
    scan = next(point for point in result["points"] if point["method"] == "SGH scan"
                and point["params"]["refine_factor"] == SGHIndex.from_run(run_dir).refine_factor)
    assert scan["recall10@100"] == pytest.approx(expected)


def test_the_plot_and_the_targets_verdict_are_written(benchmarked):
    run_dir, place, stdout, result = benchmarked
    lists = next(point["params"]["nlist"] for point in result["points"]
                 if "nlist" in point["params"])
    assert (place / "plots" / "synthetic_2bytes.png").stat().st_size > 0
    (verdict,) = result["targets"]
    assert verdict["run"] == str(run_dir)
    assert ("TARGET MET" if verdict["at_or_above"] else "TARGET NOT MET") in stdout
    assert "at 2 bytes per item (SGH's points of as many)" in stdout
    # Every SGH point judged again against every anchor up to B + 1 bytes.
    plus_one = verdict["up_to_one_byte_more"]
    assert "at up to 3 bytes per item (every SGH point)" in stdout
    assert plus_one["levels_compared"] >= 1 and plus_one["recall_range"][1] <= 1
    assert not any(level["anchor_point"].startswith("faiss RaBitQ")
                   for level in plus_one["below_at"])
    assert "1 thread(s)" in stdout
    flats = {"scan": "SGH scan (", "bytes": "SGH byte decoder scan ("}
    assert set(verdict["inverted_lists"]) == set(flats)
    for mode, inverted in verdict["inverted_lists"].items():
        assert inverted["flat_point"].startswith(flats[mode])
        if inverted["ivf_point"] is not None:
            assert inverted["ivf_point"].startswith(
                f"SGH IVF{lists} {'byte decoder ' if mode == 'bytes' else ''}scan (")
            assert inverted["recall_share"] >= 0.95
            assert inverted["met"] == (inverted["speedup"] >= 10)
    assert stdout.count("IVF TARGET") == 2


def test_sgh_only_measures_no_anchor_and_still_judges_the_inverted_lists(benchmarked):
    run_dir, place, _, _ = benchmarked
    finished = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", str(run_dir), "--quick", "--sgh-only",
         "--nprobes", "3,1", "--json", str(place / "sgh_only.json")], capture_output=True,
        text=True, cwd=SCRIPT.parents[1])
    assert finished.returncode == 0, finished.stderr
    result = json.loads((place / "sgh_only.json").read_text())
    assert all(point["method"].startswith("SGH ") for point in result["points"])
    assert {point["params"]["nprobe"] for point in result["points"]
            if "nprobe" in point["params"]} == {1, 3}  # the --nprobes given
    (verdict,) = result["targets"]
    assert "at_or_above" not in verdict and "inverted_lists" in verdict
    assert finished.stdout.count("IVF TARGET") == 2
    assert "anchors' envelope" not in finished.stdout
