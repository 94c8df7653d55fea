"""The wheel works outside the repository: built from this checkout, installed into a new
virtual environment, every command runs from an empty directory elsewhere, on the bundled MNIST.

The new environment borrows the test environment's dependencies through a `.pth` line (the
packages, not the editable `sgh`: a `.pth` line adds a path without running that path's own
`.pth` files), so only `sgh` itself comes from the wheel, and no download is needed.
"""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
import venv
from pathlib import Path

import numpy as np
import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(bin directory of a venv with the sgh wheel installed, an empty working directory)."""
    root = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPOSITORY), "--no-deps",
                    "--no-build-isolation", "-w", str(root / "dist")],
                   check=True, capture_output=True, text=True)
    (wheel,) = (root / "dist").glob("sgh-*.whl")
    environment = root / "venv"
    venv.create(environment, with_pip=False)
    bin_dir = environment / "bin"
    python = bin_dir / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path("
                              "'purelib'))"], check=True, capture_output=True, text=True)
    Path(purelib.stdout.strip(), "borrowed_dependencies.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True,
                   text=True)
    work = root / "elsewhere"
    work.mkdir()
    return bin_dir, work


def dead_links(docs: Path) -> list[str]:
    """Each relative link of the Markdown pages below `docs` whose file is not there (code
    blocks left out; anchors not checked)."""
    dead = []
    for page in docs.rglob("*.md"):
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            path = target.partition("#")[0]
            if path and "://" not in path and not (page.parent / path).exists():
                dead.append(f"{page.relative_to(docs)}: {target}")
    return dead


def _command(installed, *args, timeout=600):
    bin_dir, work = installed
    env = {key: value for key, value in os.environ.items()
           if key not in ("SGH_DATA_DIR", "PYTHONPATH")}  # the bundled data, found by the wheel
    result = subprocess.run([str(bin_dir / args[0]), *args[1:]], cwd=work, env=env,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, (args, result.stderr[-3000:])
    return result


def test_the_installed_package_is_the_wheel_with_its_configs_data_and_docs(installed):
    bin_dir, work = installed
    where = subprocess.run([bin_dir / "python", "-c", "import sgh.cli.resources as r; "
                            "print(r.CONFIG_DIR); print(r.BUNDLED_DATA_DIR); print(r.DOCS_DIR)"],
                           cwd=work, check=True, capture_output=True, text=True).stdout.split()
    for path in where:
        assert str(REPOSITORY) not in path and "site-packages" in path
    shipped = {p.relative_to(REPOSITORY / "configs") for p in (REPOSITORY / "configs").rglob("*")
               if p.is_file()}
    assert shipped == {p.relative_to(where[0]) for p in Path(where[0]).rglob("*")
                       if p.is_file() and p.suffix == ".yaml"}
    assert (Path(where[1]) / "mnist" / "mnist.npz").is_file()
    docs = {p.relative_to(REPOSITORY / "docs") for p in (REPOSITORY / "docs").rglob("*")
            if p.is_file()}
    assert docs == {p.relative_to(where[2]) for p in Path(where[2]).rglob("*") if p.is_file()}
    assert not dead_links(Path(where[2])), "links the installed docs cannot follow"
    for command in ("sgh-train", "sgh-eval", "sgh-encode"):  # the footers name installed pages
        footer = _command(installed, command, "--help").stdout.splitlines()[-2:]
        pages = [Path(line.split(": ", 1)[1]) for line in footer]
        assert all(page.is_file() and page.is_relative_to(where[2]) for page in pages), footer


def test_every_command_runs_from_an_empty_directory_outside_the_repository(installed):
    _, work = installed
    job = _command(installed, "sgh-train", "--cfg", "job")
    assert "dataset:" in job.stdout and "path: ${data_dir}/mnist/mnist.npz" in job.stdout
    resolved = _command(installed, "sgh-train", "--cfg", "job", "--resolve")
    assert "site-packages/sgh/bundled/mnist/mnist.npz" in resolved.stdout

    run_dir = work / "run"
    train = _command(installed, "sgh-train", "trainer.steps=200", "validation.every=100",
                     f"hydra.run.dir={run_dir}")
    assert "[sgh] step    200/200" in train.stdout
    assert "mAP@all, label relevance, tie-aware" in train.stdout
    log = (run_dir / "train.log").read_text()
    assert "step    200/200" in log and "mAP@all, label relevance, tie-aware" in log
    assert "Recall10@100, Euclidean 10-NN, tie-aware" in log

    evaluated = _command(installed, "sgh-eval", f"run={run_dir}")
    assert "Recall10@100" in evaluated.stdout
    assert json.loads((run_dir / "eval.json").read_text())["map"] == json.loads(
        (run_dir / "metrics.json").read_text())["map"]

    features = np.random.default_rng(0).random((50, 784), dtype=np.float32)
    np.save(work / "new.npy", features)
    _command(installed, "sgh-encode", f"run={run_dir}", f"input={work / 'new.npy'}",
             f"out={work / 'new_codes.npy'}")
    assert np.load(work / "new_codes.npy").shape == (50, 4)

    _command(installed, "sgh-index", "build", f"run={run_dir}", f"input={work / 'new.npy'}",
             f"out={work / 'new.sghindex'}")
    _command(installed, "sgh-index", "search", f"index={work / 'new.sghindex'}", "k=5",
             f"input={work / 'new.npy'}", f"out={work / 'found.npz'}")
    with np.load(work / "found.npz") as found:
        assert found["I"].shape == (50, 5)
    from sgh.search.sgh_index import SGHIndex

    # The index encodes from the encoder's score as the exported encoder does.
    np.testing.assert_array_equal(SGHIndex.load(work / "new.sghindex").encode(features),
                                  np.load(work / "new_codes.npy"))

    compared = _command(installed, "sgh-compare", f"sweep={work}", f"out={work / 'compared'}",
                        "tensorboard=false")
    assert "mnist" in compared.stdout and (work / "compared" / "comparison.md").is_file()

    _command(installed, "sgh-export", f"run={run_dir}")
    assert (run_dir / "encoder" / "saved_model.pb").is_file()
