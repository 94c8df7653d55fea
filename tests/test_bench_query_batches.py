"""scripts/bench_query_batches.py on a small synthetic SGH run: milliseconds per query of SGH's
flat indexes and faiss's at the same bytes, for every number of queries per call."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import compose_config, quick, trained

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_query_batches.py"
pytestmark = pytest.mark.slow  # a training run, a byte decoder and faiss's OPQ: seconds each


def test_every_index_is_timed_for_every_number_of_queries_per_call(tmp_path):
    run_dir, _ = trained(tmp_path / "run", compose_config(*quick("model.bits=16")))
    finished = subprocess.run([sys.executable, str(SCRIPT), "--runs", str(run_dir), "--queries",
                               "20", "--json", str(tmp_path / "calls.json")],
                              capture_output=True, text=True, cwd=SCRIPT.parents[1])
    assert finished.returncode == 0, finished.stderr
    (result,) = json.loads((tmp_path / "calls.json").read_text())
    assert result["bits"] == 16 and result["queries"] == 20
    timings = result["by_queries_per_call"]
    assert set(timings) == {"SGH byte decoder", "SGH model's scan", "faiss OPQ2,PQ2",
                            "faiss OPQ4,PQ4x4fs"}
    assert all(set(row) == {"1", "4", "16", "all"} and all(value > 0 for value in row.values())
               for row in timings.values())
    assert "milliseconds per query, one thread" in finished.stdout
