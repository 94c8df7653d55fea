"""scripts/make_clustered_vectors.py, bench_large_index.py and bench_threads.py end to end on a
small clustered set: the files and their exact ground truth, an SGH run on them, the index built
and searched from the command line (flat and with lists), its recall, bytes per item and
identity after save and load, faiss's anchors on the same files, and every mode's search alike
on one thread and two."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import compose_config, quick, trained

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
pytestmark = pytest.mark.slow  # an SGH training and four sgh-index processes: about a minute


def _texmex(path: Path, dtype) -> np.ndarray:
    """The rows of an .fvecs / .ivecs file (each row: its int32 dimension, then the values)."""
    raw = np.fromfile(path, dtype=np.int32)
    return raw.reshape(-1, raw[0] + 1)[:, 1:].view(dtype)


def _script(name: str, *arguments: str) -> subprocess.CompletedProcess:
    finished = subprocess.run([sys.executable, str(SCRIPTS / name), *arguments],
                              capture_output=True, text=True, cwd=SCRIPTS.parent)
    assert finished.returncode == 0, finished.stderr
    return finished


@pytest.fixture(scope="module")
def clustered(tmp_path_factory):
    data = tmp_path_factory.mktemp("clustered")
    _script("make_clustered_vectors.py", str(data), "--n", "3000", "--dim", "16",
            "--clusters", "12", "--learn", "2000", "--queries", "40", "--k", "100")
    config = compose_config(*quick(
        "dataset=file", f"dataset.path={data / 'base.fvecs'}",
        f"dataset.learn_path={data / 'learn.fvecs'}", f"dataset.query_path={data / 'query.fvecs'}",
        f"dataset.groundtruth_path={data / 'groundtruth.ivecs'}", "dataset.name=clustered",
        "model.bits=16", "trainer.steps=200"))
    run_dir, _ = trained(data / "run", config)
    return data, run_dir


def test_the_generated_ground_truth_is_the_exact_nearest_base_rows(clustered):
    data, _ = clustered
    base = _texmex(data / "base.fvecs", np.float32).astype(np.float64)
    queries = _texmex(data / "query.fvecs", np.float32).astype(np.float64)
    truth = _texmex(data / "groundtruth.ivecs", np.int32)
    assert base.shape == (3000, 16) and queries.shape == (40, 16) and truth.shape == (40, 100)
    distances = ((queries[:, None, :] - base[None]) ** 2).sum(axis=2)
    nearest = np.argsort(distances, axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(np.sort(truth[:, :10], axis=1), np.sort(nearest, axis=1))


def test_the_large_index_bench_builds_searches_and_reloads_identically(clustered, tmp_path):
    data, run_dir = clustered
    out = tmp_path / "large.json"
    _script("bench_large_index.py", "--run", str(run_dir), "--data", str(data), "--nlist", "8",
            "--nprobes", "2", "8", "--work", str(tmp_path / "work"), "--json", str(out))
    layouts = {entry["layout"]: entry for entry in json.loads(out.read_text())}
    assert set(layouts) == {"flat", "IVF8"}
    for entry in layouts.values():
        assert entry["items"] == 3000 and entry["identical_after_save_and_load"]
        assert entry["mode"] == "scan"
        assert entry["build"]["peak_rss_mib"] > 0 and entry["bytes_per_item_on_disk"] > 2
        assert entry["bytes_per_item_in_memory"]["code"] == 2.0  # 16 bits
        for search in entry["searches"]:
            assert 0 < search["recall10@100"] <= 1 and search["queries_per_second"] > 0
    assert [search["nprobe"] for search in layouts["IVF8"]["searches"]] == [2, 8]


def test_the_large_index_bench_serves_the_byte_decoder_too(clustered, tmp_path):
    data, run_dir = clustered
    out = tmp_path / "bytes.json"
    _script("bench_large_index.py", "--run", str(run_dir), "--data", str(data), "--nlist", "8",
            "--nprobes", "8", "--mode", "bytes", "--encoding", "flip4",
            "--work", str(tmp_path / "work"), "--json", str(out))
    layouts = {entry["layout"]: entry for entry in json.loads(out.read_text())}
    assert set(layouts) == {"flat", "IVF8"}
    for entry in layouts.values():
        assert (entry["mode"], entry["encoding"]) == ("bytes", "flip4")
        assert entry["items"] == 3000 and entry["identical_after_save_and_load"]
        # The byte decoder's scans read the index's own codes: no faiss copy of them.
        memory = entry["bytes_per_item_in_memory"]
        assert memory["code"] == 2.0 and "faiss_fast_scan_codes" not in memory
        (search,) = entry["searches"]
        assert 0 < search["recall10@100"] <= 1 and search["queries_per_second"] > 0


def test_faiss_anchors_are_measured_on_the_same_files(clustered, tmp_path):
    data, _ = clustered
    out = tmp_path / "faiss.json"
    _script("bench_faiss_large.py", "--data", str(data), "--nlist", "8", "--nprobes", "2", "8",
            "--json", str(out))
    rows = json.loads(out.read_text())
    assert [(row["index"], row["nprobe"]) for row in rows] == [
        ("PQ8x4fs", None), ("IVF8,PQ8x4fs", 2), ("IVF8,PQ8x4fs", 8)]
    for row in rows:
        assert row["items"] == 3000 and 0 < row["recall10@100"] <= 1
        assert row["queries_per_second"] > 0 and row["add_items_per_second"] > 0


def test_every_mode_searches_alike_on_one_thread_and_two(clustered, tmp_path):
    _, run_dir = clustered
    out = tmp_path / "threads.json"
    _script("bench_threads.py", "--runs", str(run_dir), "--json", str(out))
    (result,) = json.loads(out.read_text())
    assert result["identical_results"] and result["indexes"]
    for by_count in result["indexes"].values():
        assert set(by_count) == {"1", "2"} and by_count["1"]["speedup"] == 1
