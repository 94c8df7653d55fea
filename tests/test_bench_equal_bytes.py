"""scripts/bench_equal_bytes.py on a small synthetic SGH run: the byte decoder and PQ, OPQ, LSQ
and the fast-scan forms at its bytes, each a recall and a speed, measured on training rows only."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import compose_config, quick, trained

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_equal_bytes.py"
pytestmark = pytest.mark.slow  # a training run, faiss's OPQ and LSQ: about half a minute


def test_the_byte_decoder_and_faiss_quantizers_are_measured_at_equal_bytes(tmp_path):
    run_dir, _ = trained(tmp_path / "run", compose_config(*quick("model.bits=16")))
    finished = subprocess.run([sys.executable, str(SCRIPT), "--runs", str(run_dir), "--json",
                               str(tmp_path / "equal.json")],
                              capture_output=True, text=True, cwd=SCRIPT.parents[1])
    assert finished.returncode == 0, finished.stderr
    (result,) = json.loads((tmp_path / "equal.json").read_text())
    assert result["bits"] == 16 and result["queries"] + result["database"] <= 2000
    figures = {key: value for key, value in result.items() if isinstance(value, dict)}
    assert set(figures) == {"SGH byte decoder (2 B)", "faiss PQ2 (2 B)", "faiss OPQ2,PQ2 (2 B)",
                            "faiss LSQ2x8 (2 B)", "faiss PQ4x4fs (2 B)",
                            "faiss OPQ4,PQ4x4fs (2 B)",
                            "its codes in faiss LSQ, ST_norm_from_LUT (2 + 0 B)",
                            "its codes in faiss LSQ, ST_norm_qint8 (2 + 1 B)",
                            "its codes in faiss LSQ, ST_norm_float (2 + 4 B)"}
    assert all(0 < value["recall"] <= 1 and value["queries_per_s"] > 0
               for value in figures.values())
    # The same tables and codes with an exact norm rank as the byte decoder's own scan does.
    ours = figures["SGH byte decoder (2 B)"]["recall"]
    for norm in ("ST_norm_from_LUT (2 + 0 B)", "ST_norm_float (2 + 4 B)"):
        assert abs(figures[f"its codes in faiss LSQ, {norm}"]["recall"] - ours) < 0.005
    assert "validation Recall10@100" in finished.stdout


def test_a_code_length_that_is_no_whole_number_of_bytes_is_refused(tmp_path):
    run_dir, _ = trained(tmp_path / "run", compose_config(*quick("model.bits=12")))
    finished = subprocess.run([sys.executable, str(SCRIPT), "--runs", str(run_dir)],
                              capture_output=True, text=True, cwd=SCRIPT.parents[1])
    assert finished.returncode != 0
    assert "12 bits; accepted: a multiple of 8" in finished.stderr
