"""scripts/bench_encoding.py on a few thousand SIFT10K rows: every encoding of SGH trained with its
byte decoder, the linear model's decoder fitted after, the random-start ablation and faiss's
encoders at the same bytes, each a recall, an encoding throughput and a search speed; trained
models kept in --cache and read back with the same recalls."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import SHARED_DATA

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_encoding.py"
pytestmark = [pytest.mark.slow,  # two SGH trainings and faiss's RQ and LSQ: about a minute
              pytest.mark.skipif(not (SHARED_DATA / "siftsmall").is_dir(),
                                 reason="SIFT10K is not beside the checkout")]


def _bench(tmp_path: Path, name: str) -> dict:
    finished = subprocess.run(
        [sys.executable, str(SCRIPT), "--datasets", "siftsmall", "--bits", "16", "--quick",
         "--cache", str(tmp_path / "models"), "--json", str(tmp_path / name)],
        capture_output=True, text=True, cwd=SCRIPT.parents[1],
        env={**os.environ, "SGH_DATA_DIR": str(SHARED_DATA)})
    assert finished.returncode == 0, finished.stderr
    assert "siftsmall, 16 bits, validation split" in finished.stdout
    (result,) = json.loads((tmp_path / name).read_text())
    return result


def test_every_encoding_and_faiss_encoder_is_measured_and_the_cache_gives_the_same(tmp_path):
    result = _bench(tmp_path, "first.json")
    methods = result["methods"]
    encodings = [f"SGH byte decoder, trained, {encoding}" for encoding in
                 ("encoder", "flip4", "flip5", "flip6", "icm1", "icm2", "local_search")]
    assert set(encodings) <= set(methods)
    assert {"faiss OPQ2,PQ2", "faiss RQ2x8_Nqint8", "faiss LSQ2x8_Nqint8",
            "faiss LSQ2x8, norm from its tables",
            "byte decoder from random codes (LSQ's start), local_search",
            "SGH linear, decoder fitted after, local_search"} <= set(methods)
    for value in methods.values():
        assert 0 < value["recall10@100"] <= 1 and value["encoded_per_s"] > 0
        assert value["queries_per_s"] > 0
    assert methods["faiss RQ2x8_Nqint8"]["bytes_per_item"] == 3  # its norm in a byte more
    assert methods[encodings[-1]]["recall10@100"] >= methods[encodings[0]]["recall10@100"]
    assert result["validated_encoding"] in ("encoder", "flip4", "flip5", "flip6", "local_search")
    again = _bench(tmp_path, "again.json")["methods"]
    assert {name: value["recall10@100"] for name, value in again.items()} == \
        {name: value["recall10@100"] for name, value in methods.items()}
