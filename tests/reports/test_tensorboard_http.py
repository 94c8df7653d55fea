"""The real TensorBoard server on our event files, queried over HTTP the way a browser does.

Two runs of a "sweep" are written with sgh.reports.tensorboard_views (write_final_scalars too);
`tensorboard --logdir SWEEP --host 127.0.0.1 --port 0` serves them; the test reads the scalars,
PR curve, images and HParams table through the dashboards' HTTP endpoints, then stops the server
with SIGTERM and checks that it exits cleanly.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from sgh.artifacts.run_directory import RunDirectory
from sgh.config import Config, ModelConfig, SyntheticDatasetConfig
from sgh.model.sgh_model import SGH
from sgh.reports import tensorboard_views as views

pytestmark = pytest.mark.slow

STARTUP_SECONDS = 120


def _write_job(job_dir: Path, bits: int, seed: int) -> dict:
    """One sweep job's TensorBoard directory; returns what was written, for comparison."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, (300, 64)).astype(np.float32)  # 8x8 "images"
    labels = rng.integers(0, 4, 300)
    model = SGH.from_training_data(ModelConfig(bits=bits), x, seed=seed)
    run_directory = RunDirectory(job_dir)
    written = {"code_health": {}}
    with run_directory.summary_writer():
        for step in (0, 100, 200):
            model.W.assign_add(rng.normal(0.0, 0.5, model.W.shape).astype(np.float32))
            written["code_health"][step] = views.write_code_health(
                model.encode_bits(x).numpy(), step)
            views.write_encoder_histograms(model, x, step)
            assert views.write_images(model, x, step)
        codes = np.packbits(model.encode_bits(x).numpy(), axis=1)
        written["pr_curve"] = views.write_pr_curve(codes[:50], codes[50:], bits, labels[:50],
                                                   labels[50:], step=200)
        views.write_hparams(Config(dataset=SyntheticDatasetConfig(dim=64),
                                   model=ModelConfig(bits=bits)))
    written["metrics"] = {"steps": 200, "map": 0.25 + bits / 1000, "distinct_database_codes": 7}
    with run_directory.summary_writer():
        views.write_final_scalars(written["metrics"], step=200)
    return written


def _get(port: int, path: str, body: dict | None = None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _query(**parameters) -> str:
    return urllib.parse.urlencode(parameters)


@pytest.fixture
def tensorboard_server(tmp_path):
    """Start TensorBoard on tmp_path/sweep; yield (port, sweep dir, written); stop it."""
    sweep = tmp_path / "sweep"
    written = {"0/tensorboard": _write_job(sweep / "0", bits=16, seed=0),
               "1/tensorboard": _write_job(sweep / "1", bits=32, seed=1)}
    # TensorBoard records the port it bound in <TMPDIR>/.tensorboard-info/pid-<pid>.info.
    info_dir = tmp_path / "tmp"
    info_dir.mkdir()
    log = (tmp_path / "tensorboard.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(sweep),
         "--host", "127.0.0.1", "--port", "0", "--reload_interval", "1"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "TMPDIR": str(info_dir)})
    info_file = info_dir / ".tensorboard-info" / f"pid-{server.pid}.info"
    try:
        port = _wait_until_serving(server, info_file, set(written), tmp_path / "tensorboard.log")
        yield port, written, server, info_file
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        log.close()


def _wait_until_serving(server, info_file: Path, runs: set, log_path: Path) -> int:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"tensorboard exited with {server.returncode}: {log_path.read_text()}")
        if info_file.is_file():
            port = json.loads(info_file.read_text())["port"]
            try:
                loaded = set(_get(port, "/data/runs"))
                tags = _get(port, "/data/plugin/scalars/tags")
                if runs <= loaded and all("eval/map" in tags.get(run, {}) for run in runs):
                    return port
            except OSError:
                pass  # bound but not answering yet
        time.sleep(0.5)
    pytest.fail(f"tensorboard did not serve the runs within {STARTUP_SECONDS} s: "
                f"{log_path.read_text()}")


def test_tensorboard_serves_every_view_over_http(tensorboard_server):
    port, written, server, info_file = tensorboard_server

    # Scalars: the tags of each run, then the series of one tag, as the scalars dashboard asks.
    tags = _get(port, "/data/plugin/scalars/tags")
    for run, job in written.items():
        assert {f"code_health/{name}" for name in views.CODE_HEALTH_DESCRIPTIONS} <= set(tags[run])
        series = _get(port, "/data/plugin/scalars/scalars?" + _query(
            run=run, tag="code_health/distinct_codes"))
        assert [step for _, step, _ in series] == [0, 100, 200]
        assert [value for _, _, value in series] == [
            job["code_health"][step]["distinct_codes"] for step in (0, 100, 200)]
        entropy = _get(port, "/data/plugin/scalars/scalars?" + _query(
            run=run, tag="code_health/code_entropy"))
        assert entropy[-1][2] == pytest.approx(job["code_health"][200]["code_entropy"], rel=1e-6)
        final = _get(port, "/data/plugin/scalars/scalars?" + _query(run=run, tag="eval/map"))
        assert [(step, value) for _, step, value in final] == [
            (200, pytest.approx(job["metrics"]["map"], rel=1e-6))]

    # Histograms and images are listed by their dashboards.
    histogram_tags = _get(port, "/data/plugin/histograms/tags")
    image_tags = _get(port, "/data/plugin/images/tags")
    for run in written:
        assert {"encoder/logits", "encoder/probabilities",
                "code_health/bit_balance"} <= set(histogram_tags[run])
        assert {"images/inputs_and_reconstructions",
                "images/decoder_templates"} <= set(image_tags[run])

    # PR curve: TensorBoard's plugin reads our raw precision/recall back (column i: r = bits - i).
    run = "0/tensorboard"
    entries = _get(port, "/data/plugin/pr_curves/pr_curves?" + _query(
        run=run, tag=views.PR_CURVE_TAG))[run]
    curve = written[run]["pr_curve"]
    assert entries[-1]["step"] == 200
    shown = len(entries[-1]["precision"])  # trailing radii that retrieve nothing are dropped
    assert 2 <= shown <= 16 + 1
    np.testing.assert_allclose(entries[-1]["precision"], curve["precision"][::-1][:shown],
                               rtol=1e-6)
    np.testing.assert_allclose(entries[-1]["recall"], curve["recall"][::-1][:shown], rtol=1e-6)

    # HParams: one session per run; the table's metric columns include the final eval/map.
    experiment = _get(port, "/data/plugin/hparams/experiment", {"experimentName": ""})
    hparam_names = {info["name"] for info in experiment["hparamInfos"]}
    assert {"model.bits", "model.objective", "trainer.learning_rate"} <= hparam_names
    metric_tags = {info["name"]["tag"] for info in experiment["metricInfos"]}
    assert {"eval/map", "code_health/distinct_codes"} <= metric_tags
    groups = _get(port, "/data/plugin/hparams/session_groups", {
        "experimentName": "", "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS"],
        "colParams": [{"hparam": "model.bits"},
                      {"metric": {"tag": "eval/map", "group": ""}}],
        "startIndex": 0, "sliceSize": 10})
    table = {group["hparams"]["model.bits"]: group["metricValues"]
             for group in groups["sessionGroups"]}
    assert set(table) == {16, 32}
    for bits, job in zip((16, 32), written.values(), strict=True):
        values = {value["name"]["tag"]: value["value"] for value in table[bits]}
        assert values["eval/map"] == pytest.approx(job["metrics"]["map"], rel=1e-6)

    # A clean shutdown: SIGTERM, exit status 0, and the server's info file removed.
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=30) == 0
    assert not info_file.exists()

