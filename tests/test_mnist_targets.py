"""Protocol A targets on the bundled MNIST, through the same `run` as `sgh-train`.

All `slow` (a full 20,000-step run each; `make test-slow`, which CI runs).
Reference figures (docs/results.md, "SGH: the default recipe"): ITQ Recall10@100 0.291 / 0.569 /
0.817 and mAP@all 0.411 / 0.444 / 0.454; the released demo's mAP@all 0.365 / 0.378 / 0.363 and
reconstruction 15.1 / 11.2 / 8.4 at 16 / 32 / 64 bits.
"""

import pytest

from sgh.pipeline import run
from tests.helpers import compose_config

ITQ_RECALL10_AT_100 = {16: 0.291, 32: 0.569, 64: 0.817}
RELEASED_MAP = {16: 0.365, 32: 0.378, 64: 0.363}
RELEASED_RECONSTRUCTION = {16: 15.1, 32: 11.2, 64: 8.4}


def _run(tmp_path, *overrides):
    return run(compose_config(*overrides), tmp_path)


pytestmark = pytest.mark.slow


@pytest.mark.parametrize("bits", [16, 32, 64])
def test_default_recipe_beats_itq_on_euclidean_neighbours(tmp_path, bits, request):
    metrics = (request.getfixturevalue("default_mnist_run")[1] if bits == 32  # the default
               else _run(tmp_path, f"model.bits={bits}"))
    assert metrics["recall10@100"] > ITQ_RECALL10_AT_100[bits]
    assert metrics["recall10@100_stable"] > ITQ_RECALL10_AT_100[bits]
    assert metrics["map"] > RELEASED_MAP[bits]
    if bits == 32:
        assert metrics["recall10@100"] >= 0.60 and metrics["map"] >= 0.385
    assert metrics["dead_bits"] == 0


@pytest.mark.parametrize("bits", [16, 32, 64])
def test_released_preset_reproduces_the_demo(tmp_path, bits):
    metrics = _run(tmp_path, "experiment=released_mnist", f"model.bits={bits}")
    reconstruction = metrics["final_loss_terms_per_item"]["reconstruction"]
    # The demo's figure is one run on the authors' machine; ours moves with the CPU's float
    # kernels (64 bits: 7.996 on an AMD EPYC, the same code and seed), so the band is 0.5.
    assert reconstruction == pytest.approx(RELEASED_RECONSTRUCTION[bits], abs=0.5)
    assert metrics["map"] == pytest.approx(RELEASED_MAP[bits], abs=0.02)


def test_the_fast_preset_reaches_itq_on_euclidean_neighbours(tmp_path):
    """`experiment=fast` (chosen on the validation split): ITQ's test Recall10@100 at 32 bits in
    400 steps (its time against ITQ's: scripts/bench_time_to_quality.py)."""
    metrics = _run(tmp_path, "experiment=fast", "model.bits=32")
    assert metrics["steps"] == 400
    assert metrics["recall10@100"] >= ITQ_RECALL10_AT_100[32]
    assert metrics["dead_bits"] == 0


def test_the_search_preset_beats_every_baselines_asymmetric_form(tmp_path):
    """`experiment=search` (its recipe chosen on the validation split), scored asymmetrically
    with the score validation chose: the target of at least PCAH's projection form (0.778, the
    best baseline form at 32 bits) + 0.01 on the test queries."""
    metrics = _run(tmp_path, "experiment=search", "model.bits=32")
    # MNIST's validation split prefers deep SGH's scan (0.867 against the linear model's 0.804).
    assert metrics["recipe_chosen"] == "deep"
    assert set(metrics["recipe_candidates"]) == {"linear", "deep"}
    assert metrics["ranking"].startswith("scan: encoder likelihood")
    assert metrics["recall10@100"] >= 0.788
    assert metrics["score_for_scan"] == "encoder"  # an mlp decoder has no per-bit score
