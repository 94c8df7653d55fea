"""`sgh-compare`: aggregation arithmetic, CSV/Markdown, PNGs, TensorBoard images, PR curve, errors.

Fake sweep directories (hand-made metrics.json and tiny codes.npz); no training here.
"""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from sgh.artifacts.codes_file import load_codes
from sgh.reports.comparison import aggregate, collect, markdown, pr_curve

# (method, bits, seed, map, recall10@100) of the fake sweep; the means/stds are in the tests.
RUNS = [
    ("sgh", 8, 0, 0.5, 0.2),
    ("sgh", 8, 1, 0.6, 0.4),
    ("sgh", 8, 2, 0.7, 0.3),
    ("itq", 8, 0, 0.40, 0.10),
    ("itq", 8, 1, 0.42, 0.10),
    ("sgh", 16, 0, 0.8, 0.5),
    ("itq", 16, 0, 0.45, 0.25),
]


def _codes(path, bits, seed, n_database=60, n_query=8):
    rng = np.random.default_rng(seed + bits)
    width = (bits + 7) // 8
    np.savez(
        path,
        database=rng.integers(0, 256, (n_database, width), dtype=np.uint8),
        query=rng.integers(0, 256, (n_query, width), dtype=np.uint8),
        bits=np.int64(bits),
        database_labels=rng.integers(0, 3, n_database),
        query_labels=rng.integers(0, 3, n_query),
        groundtruth=np.tile(np.arange(10), (n_query, 1)),
    )


def _run(directory, method, bits, seed, map_value, recall100, dataset="toy"):
    directory.mkdir(parents=True)
    metrics = {
        "dataset": dataset,
        "method": method,
        "bits": bits,
        "seed": seed,
        "map": map_value,
        "map_stable": map_value,
        "recall10@1": recall100 / 10,
        "recall10@100": recall100,
        "recall10@1000": 1.0,
        "distinct_database_codes": 10 * (seed + 1),
        "train_seconds": 1.0 + seed,
        "map_convention": "tie-aware",
        "recall_convention": "tie-aware",
    }
    (directory / "metrics.json").write_text(json.dumps(metrics))
    _codes(directory / "codes.npz", bits, seed)


@pytest.fixture
def sweep(tmp_path):
    root = tmp_path / "sweep"
    for job, run in enumerate(RUNS):
        _run(root / f"{job}_model={run[0]},bits={run[1]},seed={run[2]}", *run)
    (root / "99_failed_job").mkdir()  # a job that never wrote metrics.json: ignored
    (root / "99_failed_job" / "config.yaml").write_text("model: sgh\n")
    return root


def _entry(aggregated, method, bits):
    return next(e for e in aggregated if (e["method"], e["bits"]) == (method, bits))


def test_aggregates_mean_and_population_std_over_seeds(sweep):
    rows = collect(sweep)
    assert len(rows) == len(RUNS)
    aggregated = aggregate(rows)
    assert [(e["method"], e["bits"]) for e in aggregated] == [  # sgh first, then the baselines
        ("sgh", 8),
        ("sgh", 16),
        ("itq", 8),
        ("itq", 16),
    ]
    sgh8 = _entry(aggregated, "sgh", 8)
    assert sgh8["n_seeds"] == 3 and sgh8["seeds"] == [0, 1, 2]
    assert sgh8["map_mean"] == pytest.approx(0.6)  # (0.5 + 0.6 + 0.7) / 3
    assert sgh8["map_std"] == pytest.approx(np.sqrt(0.02 / 3))  # ddof=0: (0.01 + 0 + 0.01) / 3
    assert sgh8["recall10@100_mean"] == pytest.approx(0.3)  # (0.2 + 0.4 + 0.3) / 3
    assert sgh8["recall10@100_std"] == pytest.approx(np.sqrt(0.02 / 3))
    assert sgh8["distinct_database_codes_mean"] == pytest.approx(20.0)  # (10 + 20 + 30) / 3
    assert sgh8["train_seconds_mean"] == pytest.approx(2.0)  # (1 + 2 + 3) / 3
    assert sgh8["first_run"].endswith("seed=0")
    itq8 = _entry(aggregated, "itq", 8)
    assert itq8["map_mean"] == pytest.approx(0.41)  # (0.40 + 0.42) / 2
    assert itq8["map_std"] == pytest.approx(0.01)  # ddof=0: |0.42 - 0.40| / 2
    assert _entry(aggregated, "sgh", 16)["map_std"] == 0.0  # one seed


def test_metrics_missing_for_a_dataset_make_no_column(tmp_path):
    run = tmp_path / "s" / "0"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(
        json.dumps({"dataset": "sift", "method": "lsh", "bits": 8, "seed": 0, "recall10@100": 0.5})
    )
    (entry,) = aggregate(collect(tmp_path / "s"))
    assert "map_mean" not in entry and entry["recall10@100_mean"] == 0.5
    assert "mAP@all" not in markdown([entry]) and "0.500 ± 0.000" in markdown([entry])


def test_markdown_states_conventions_and_formats_cells(sweep):
    text = markdown(aggregate(collect(sweep)))
    lines = text.splitlines()
    # n differs between cells, so each cell says its n
    assert "mean ± std over n seeds (per cell) (population std, ddof=0)" in lines[0]
    assert "label relevance" in lines[0] and "tie-aware" in lines[0]
    assert "Euclidean nearest neighbours" in lines[0]
    assert lines[2] == (
        "| method | mAP@all 8 bits | Recall10@100 8 bits | mAP@all 16 bits | Recall10@100 16 bits |"
    )
    assert lines[4] == (
        "| sgh | 0.600 ± 0.082 (n=3) | 0.300 ± 0.082 (n=3) | 0.800 ± 0.000 (n=1) "
        "| 0.500 ± 0.000 (n=1) |"
    )
    assert lines[5].startswith("| itq | 0.410 ± 0.010 (n=2) | 0.100 ± 0.000 (n=2) |")


@pytest.fixture
def compared(sweep, tmp_path, command_here):
    out = tmp_path / "out"
    printed = command_here("compare", [f"sweep={sweep}", f"out={out}"], cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    return sweep, out, printed


def test_writes_csv_markdown_pngs_and_prints_the_table(compared):
    sweep, out, printed = compared
    with open(out / "comparison.csv", newline="") as file:
        table = list(csv.DictReader(file))
    assert list(table[0])[:7] == [
        "dataset",
        "method",
        "bits",
        "n_seeds",
        "seeds",
        "map_mean",
        "map_std",
    ]
    assert {
        "recall10@1_mean",
        "recall10@100_std",
        "recall10@1000_mean",
        "distinct_database_codes_mean",
        "train_seconds_mean",
    } <= set(table[0])
    assert (table[0]["method"], table[0]["bits"], table[0]["n_seeds"]) == ("sgh", "8", "3")
    assert float(table[0]["map_mean"]) == pytest.approx(0.6)
    markdown_file = (out / "comparison.md").read_text()
    assert "| sgh | 0.600 ± 0.082 (n=3)" in markdown_file
    assert markdown_file in printed.stdout
    for name in ("map_vs_bits", "recall_curves", "pr_curves"):
        png = (out / f"{name}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
        assert f"[sgh] wrote {out / name}.png" in printed.stdout
    assert not list(out.glob(".*"))  # no temporary files left behind
    assert not (sweep / "comparison.csv").exists()  # out=: the sweep is only read


def test_tensorboard_event_file_holds_the_figures(compared):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, out, _ = compared
    accumulator = EventAccumulator(
        str(out / "tensorboard_compare"), size_guidance={"images": 0, "tensors": 0}
    )
    accumulator.Reload()
    tags = accumulator.Tags()
    assert {"map_vs_bits", "recall_curves", "pr_curves"} <= set(tags["images"]) | set(
        tags["tensors"]
    )


def test_default_out_is_the_sweep_and_tensorboard_false_writes_no_images(sweep, tmp_path,
                                                                         command_here):
    assert command_here("compare", [f"sweep={sweep}", "tensorboard=false"],
                        cwd=tmp_path).returncode == 0
    assert (sweep / "comparison.md").is_file() and (sweep / "pr_curves.png").is_file()
    assert not (sweep / "tensorboard_compare").exists()
    assert len(collect(sweep)) == len(RUNS)  # its own outputs are not mistaken for runs


def _brute_force_pr(query, database, query_labels, database_labels, bits):
    """Loop over queries and radii; P = 0 when nothing is retrieved; R = 0 queries skipped."""
    q_bits = np.unpackbits(query, axis=1)[:, :bits].astype(int)
    d_bits = np.unpackbits(database, axis=1)[:, :bits].astype(int)
    precision, recall = np.zeros(bits + 1), np.zeros(bits + 1)
    scored = 0
    for q in range(len(query)):
        relevant = database_labels == query_labels[q]
        if not relevant.any():
            continue
        scored += 1
        distance = np.abs(d_bits - q_bits[q]).sum(axis=1)
        for r in range(bits + 1):
            retrieved = distance <= r  # inclusive radius
            hits = (retrieved & relevant).sum()
            precision[r] += hits / retrieved.sum() if retrieved.any() else 0.0
            recall[r] += hits / relevant.sum()
    return precision / scored, recall / scored


def test_pr_curve_matches_brute_force(tmp_path):
    rng = np.random.default_rng(7)
    bits = 6
    database = np.packbits(rng.integers(0, 2, (40, bits)), axis=1)
    query = np.packbits(rng.integers(0, 2, (9, bits)), axis=1)
    query[0] = np.packbits([[1, 1, 1, 1, 1, 1]])  # a code absent from the database below ...
    database[np.unpackbits(database, axis=1)[:, :bits].sum(axis=1) == bits] = 0  # ... P(0) = 0
    database_labels = rng.integers(0, 3, 40)
    query_labels = rng.integers(0, 3, 9)
    query_labels[1] = 7  # no relevant item: skipped
    np.savez(
        tmp_path / "c.npz",
        database=database,
        query=query,
        bits=np.int64(bits),
        database_labels=database_labels,
        query_labels=query_labels,
    )
    precision, recall = pr_curve(load_codes(tmp_path / "c.npz"))
    expected_p, expected_r = _brute_force_pr(query, database, query_labels, database_labels, bits)
    np.testing.assert_allclose(precision, expected_p, rtol=1e-12)
    np.testing.assert_allclose(recall, expected_r, rtol=1e-12)
    assert precision.shape == (bits + 1,) and recall[-1] == pytest.approx(1.0)


def _error_line(arguments, command_here, cwd):
    result = command_here("compare", arguments, cwd=cwd)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr


def test_empty_directory_is_one_line_exit_2(tmp_path, command_here):
    (tmp_path / "job0").mkdir()
    err = _error_line([f"sweep={tmp_path}"], command_here, tmp_path)
    assert err.startswith("sgh-compare: error: ") and str(tmp_path) in err
    assert "no metrics.json" in err


def test_corrupt_json_is_one_line_naming_the_file(sweep, tmp_path, command_here):
    bad = sweep / "0_model=sgh,bits=8,seed=0" / "metrics.json"
    bad.write_text('{"dataset": "toy", "method": ')
    assert str(bad) in _error_line([f"sweep={sweep}"], command_here, tmp_path)


@pytest.mark.parametrize("arguments, expected", [
    (["{sweep}"], "{sweep} is not key=value; write sweep={sweep}"),
    (["sweep={sweep}", "--out", "{sweep}/report"], "--out is not an option; write out=DIR"),
    (["sweep={sweep}", "--out={sweep}/report"], "--out is not an option; write out=DIR"),
    (["sweep={sweep}", "--no-tensorboard"],
     "--no-tensorboard is not an option; write tensorboard=false"),
    ([], "sweep= is missing; usage: sgh-compare sweep=SWEEP_DIR [out=DIR] [tensorboard=false]"),
], ids=["bare directory", "--out DIR", "--out=DIR", "--no-tensorboard", "no sweep="])
def test_a_command_line_without_its_keys_is_one_line_naming_the_key(sweep, tmp_path, command_here,
                                                                    arguments, expected):
    err = _error_line([text.format(sweep=sweep) for text in arguments], command_here, tmp_path)
    assert err.strip() == f"sgh-compare: error: {expected.format(sweep=sweep)}"
    assert not (sweep / "comparison.md").exists() and not (sweep / "report").exists()


def test_a_sweep_whose_jobs_would_write_into_one_directory_runs_no_job(sweep, tmp_path,
                                                                       command_here):
    result = command_here("compare", ["-m", f"sweep={sweep}", "tensorboard=true,false"],
                          cwd=tmp_path)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert f"out={sweep} would be written by more than one job" in result.stderr
    assert not (sweep / "comparison.md").exists() and not (tmp_path / "multirun").exists()


def test_command_line_exit_status_without_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "sgh.cli.compare", f"sweep={tmp_path / 'missing'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"sgh-compare: error: {tmp_path / 'missing'}: no such directory; expected an sgh-train "
        "sweep directory"
    ]


def test_runs_of_other_rankings_are_their_own_rows_with_their_search_curves(tmp_path,
                                                                           command_here):
    root = tmp_path / "sweep"
    _run(root / "0", "itq", 8, 0, 0.40, 0.10)
    _run(root / "1", "itq", 8, 0, 0.50, 0.30)
    metrics = json.loads((root / "1" / "metrics.json").read_text())
    metrics["ranking"] = "two_stage: SGHIndex(mode='two_stage', shortlist=1000)'s search: ..."
    metrics["shortlist_curve"] = {"shortlist": [10, 30, 60], "recall10@100": [0.2, 0.3, 0.35],
                                  "queries_per_second": [900.0, 500.0, 200.0]}
    (root / "1" / "metrics.json").write_text(json.dumps(metrics))
    aggregated = aggregate(collect(root))
    assert [(e["method"], e["n_seeds"], e["map_mean"]) for e in aggregated] == [
        ("itq", 1, 0.40), ("itq (two_stage)", 1, 0.50)]  # never averaged together
    assert "ranked that way instead" in markdown(aggregated)
    assert command_here("compare", [f"sweep={root}", f"out={tmp_path / 'out'}",
                                    "tensorboard=false"], cwd=tmp_path).returncode == 0
    for name in ("shortlist_curves", "recall_vs_queries_per_second", "pr_curves"):
        assert (tmp_path / "out" / f"{name}.png").stat().st_size > 1000


def _config(run_dir, seed, **model):
    settings = {"dataset": {"name": "toy"}, "model": {"name": "sgh", "bits": 8, "decoder":
                "linear", **model}, "trainer": {"seed": seed, "steps": 20000}}
    (run_dir / "config.yaml").write_text(json.dumps(settings))  # JSON is YAML


def test_runs_that_differ_in_more_than_the_seed_are_never_averaged(tmp_path, caplog,
                                                                    command_here):
    root = tmp_path / "sweep"
    # Two recipes of SGH at 8 bits, two seeds each: the default (linear) one and a deep one.
    for job, (seed, decoder, map_value) in enumerate(
            [(0, "linear", 0.86), (1, "linear", 0.87), (0, "mlp", 0.88), (1, "mlp", 0.90)]):
        _run(root / str(job), "sgh", 8, seed, map_value, 0.5)
        _config(root / str(job), seed, decoder=decoder)
    aggregated = aggregate(collect(root))
    assert [(e["method"], e["seeds"], round(e["map_mean"], 3)) for e in aggregated] == [
        ("sgh [model.decoder=linear]", [0, 1], 0.865),
        ("sgh [model.decoder=mlp]", [0, 1], 0.89)]
    assert "differ in more than the seed" in markdown(aggregated)
    assert not [record for record in caplog.records if record.levelname == "WARNING"]
    assert command_here("compare", [f"sweep={root}", f"out={tmp_path / 'out'}",
                                    "tensorboard=false"], cwd=tmp_path).returncode == 0
    table = (tmp_path / "out" / "comparison.md").read_text()
    assert "| sgh [model.decoder=linear] | 0.865 ± 0.005 |" in table
    assert "| sgh [model.decoder=mlp] | 0.890 ± 0.010 |" in table


def test_a_run_counted_twice_is_warned_about_naming_both(tmp_path, caplog):
    root = tmp_path / "sweep"
    for job in range(2):
        _run(root / str(job), "sgh", 8, 0, 0.5, 0.5)
        _config(root / str(job), 0)
    (entry,) = aggregate(collect(root))
    assert entry["method"] == "sgh" and entry["seeds"] == [0, 0]
    (warning,) = [record.getMessage() for record in caplog.records]
    assert "seeds [0, 0] repeat, so the same run is counted more than once" in warning
    assert str(root / "0") in warning and str(root / "1") in warning
