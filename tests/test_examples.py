"""Every example runs, as a user would run it, and prints what its docstring promises (`slow`:
each is a process that trains)."""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
pytestmark = pytest.mark.slow


def _run(name, *args):
    result = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_features_to_search():
    out = _run("features_to_search.py", "--steps", "300")
    assert "query 0: database items [" in out
    label_map = float(out.split("mAP@all (relevant = same digit, tie-aware): ")[1].split()[0])
    recall = float(out.split("tie-aware): ")[-1].split()[0])
    assert 0.2 < label_map <= 1 and 0.3 < recall <= 1  # far above chance (mAP 0.1)


def test_doubly_sn_in_keras():
    out = _run("doubly_sn_in_keras.py", "--epochs", "8")
    first, last = (float(part.split()[0]) for part in out.split("MSE: ")[1].split(", ")[:2])
    assert last < first
    distinct = int(out.strip().splitlines()[-1].split()[0])
    assert distinct > 100  # the codes tell the digits apart


@pytest.mark.parametrize("name", sorted(path.name for path in EXAMPLES.glob("*.py")))
def test_every_example_has_a_test(name):
    assert name in {"features_to_search.py", "doubly_sn_in_keras.py"}, f"{name} has no test"
