"""Nothing the user owns is replaced: every output writes only what the product itself wrote.

    sgh-eval out=      a run's metrics.json or config.yaml, or a file of another kind (a dataset
                       .npz), is refused; the file is left as it was
    sgh-encode out=    its own input, or a file inside a run, is refused
    hydra.run.dir=     a user's populated folder (no .sgh-run marker) is refused before Hydra
                       writes anything there; an old run without the marker still resumes
    SGHHasher.save     onto a file, or onto a folder of the user's, is refused
    export_encoder     onto a folder of the user's is refused, and its files survive

Each case is one problem of a probe of the landed product (issue 23, "Lost" 1-4 and 12). The
commands run in this process (their `main`, or the Python call under it): about half a minute,
most of it TensorFlow's import and two tiny trainings, and two `sgh-eval` processes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from sgh.cli.encode import EncodeCommandConfig, encode_file
from sgh.cli.evaluate import evaluate_codes
from sgh.config import EvalCommandConfig
from sgh.errors import UserInputError
from sgh.pipeline import run
from tests.cli import conftest as cli_commands
from tests.helpers import QUICK, compose_config, files_below, one_error_line

BASELINE = [*QUICK, "model=lsh"]  # a finished run in a second, without TensorFlow
SGH_QUICK = [*QUICK, "trainer.jit_compile=false"]
# A command's `main` in this process: the fixture of tests/cli, shared.
command_here = cli_commands.command_here


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished baseline run: config.yaml, inputs.json, codes.npz, metrics.json, .sgh-run."""
    run_dir = tmp_path_factory.mktemp("ownership") / "run"
    run(compose_config(*BASELINE), run_dir)
    return run_dir


# ---- Lost 1: sgh-eval out= a file of the run ------------------------------------------------
@pytest.mark.parametrize("name", ["metrics.json", "config.yaml"])
def test_sgh_eval_never_writes_over_a_file_of_the_run(finished, tmp_path, name):
    before = files_below(finished)
    target = finished / name
    for config in (EvalCommandConfig(run=str(finished), out=str(target)),
                   EvalCommandConfig(codes=str(finished / "codes.npz"), out=str(target))):
        with pytest.raises(UserInputError, match=f"is the {name} of the run {finished}"):
            evaluate_codes(config)
    # The command itself, as a user runs it (a process: no TensorFlow, a few seconds).
    result = subprocess.run([sys.executable, "-m", "sgh.cli.evaluate", f"run={finished}",
                             f"out={target}"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    line = one_error_line(result, "sgh-eval", f"out={target} is the {name} of the run {finished}")
    assert "accepted: " in line
    assert files_below(finished) == before  # the run resumes and compares as it did
    # Its own eval.json, the command's output in a run, is still written there.
    evaluate_codes(EvalCommandConfig(run=str(finished)))
    assert (finished / "eval.json").is_file()
    (finished / "eval.json").unlink()


# ---- Lost 12: sgh-eval out= a file of another kind -------------------------------------------
def test_sgh_eval_writes_only_json(finished, tmp_path):
    victim = tmp_path / "victim.npz"
    np.savez(victim, base=np.arange(12.0).reshape(4, 3))
    before = victim.read_bytes()
    with pytest.raises(UserInputError, match=rf"out={victim}: sgh-eval writes JSON; accepted: "
                                             r"a path ending in \.json"):
        evaluate_codes(EvalCommandConfig(codes=str(finished / "codes.npz"), out=str(victim)))
    assert victim.read_bytes() == before
    # A JSON file of the user's is replaced, as a single-file save replaces one of its kind.
    scores = tmp_path / "scores.json"
    scores.write_text("{}")
    evaluate_codes(EvalCommandConfig(codes=str(finished / "codes.npz"), out=str(scores)))
    assert '"map"' in scores.read_text()


def test_sgh_encode_never_writes_over_its_input_or_a_runs_files(finished, tmp_path):
    features = tmp_path / "features.npy"
    np.save(features, np.zeros((3, 4), np.float32))
    for out, message in ((features, "is the input file"),
                         (finished / "tensorboard" / "codes.npy", "part of the run")):
        with pytest.raises(UserInputError, match=message):
            encode_file(EncodeCommandConfig(run=str(finished), input=str(features), out=str(out)))
    assert np.load(features).shape == (3, 4)


# ---- Lost 2: hydra.run.dir= a user's folder ---------------------------------------------------
def _sgh_config_yaml() -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(compose_config(*BASELINE)))


USER_FOLDERS = {
    "another tool's config.yaml and codes.npz": {"config.yaml": "lr: 0.1\nlayers: 3\n",
                                                 "codes.npz": "mine"},
    "a copy of an sgh config.yaml and codes.npz": {"config.yaml": None, "codes.npz": "mine"},
    "encoder/model.txt and codes.npz": {"encoder/model.txt": "weights", "codes.npz": "mine"},
}


def _user_folder(folder: Path, files: dict) -> Path:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_sgh_config_yaml() if content is None else content)
    return folder


@pytest.mark.parametrize("case", list(USER_FOLDERS))
def test_sgh_train_into_a_users_folder_is_refused_before_anything_is_written(
        tmp_path, case, command_here):
    folder = _user_folder(tmp_path / "mine", USER_FOLDERS[case])
    before = files_below(folder)
    result = command_here("train", [*BASELINE, f"hydra.run.dir={folder}"], cwd=tmp_path)
    one_error_line(result, "sgh-train", f"hydra.run.dir={folder} is not an sgh run directory (no "
                                   ".sgh-run; it holds codes.npz")
    assert files_below(folder) == before  # not even Hydra's .hydra/ and train.log
    # The Python call refuses it too, before a file of the run is written.
    with pytest.raises(UserInputError, match=f"{folder} is not an sgh run directory"):
        run(compose_config(*BASELINE), folder)
    assert files_below(folder) == before  # not even the lock file


# ---- Lost 3 and 4: SGHHasher.save and export_encoder ------------------------------------------
@pytest.fixture(scope="module")
def hasher():
    from sgh.training.sgh_hasher import SGHHasher

    x = np.random.default_rng(0).normal(size=(200, 8)).astype(np.float32)
    return SGHHasher(n_bits=6, steps=4, steps_per_call=2, batch_size=2, jit_compile=False,
                     validation_every=0).fit(x)


def test_sghhasher_save_never_replaces_a_file_with_a_directory(hasher, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(UserInputError, match=rf"{notes} is a file, and a saved SGHHasher .* is "
                                             "a directory: a file is never replaced by a "
                                             "directory; accepted: "):
        hasher.save(notes)
    assert notes.read_text() == "mine"


def test_sghhasher_save_never_deletes_a_users_folder(hasher, tmp_path):
    folder = _user_folder(tmp_path / "project", {"train.py": "print(1)\n",
                                                 "data/x.csv": "1,2\n"})
    before = files_below(folder)
    with pytest.raises(UserInputError, match=rf"{folder} holds files that are not a saved "
                                             r"SGHHasher .*\(data, train.py[;)]"):
        hasher.save(folder)
    assert files_below(folder) == before
    # An empty folder, and an earlier save, are the places a save may take.
    (tmp_path / "empty").mkdir()
    hasher.save(tmp_path / "empty")
    hasher.save(tmp_path / "empty")  # now an earlier save, replaced
    assert {p.name for p in (tmp_path / "empty").iterdir()} >= {"hasher.json", "weights.npz"}


def test_export_encoder_never_deletes_a_users_folder(hasher, tmp_path):
    from sgh.model.export import export_encoder, load_encoder

    folder = _user_folder(tmp_path / "project", {"train.py": "print(1)\n"})
    with pytest.raises(UserInputError, match=rf"{folder} holds files that are not a SavedModel "
                                             r"\(saved_model.pb, variables/\) \(train.py\)"):
        export_encoder(hasher.model_, folder)
    assert (folder / "train.py").read_text() == "print(1)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["project"]  # no temporary left
    # An earlier export is replaced, as before.
    export_encoder(hasher.model_, tmp_path / "encoder")
    export_encoder(hasher.model_, tmp_path / "encoder")
    assert load_encoder(tmp_path / "encoder").bits == 6


# ---- a sweep's directory, and sgh-compare's outputs in it --------------------------------------
def test_a_sweep_into_a_users_folder_is_refused_before_hydra_writes_there(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    before = files_below(folder)
    result = subprocess.run([sys.executable, "-m", "sgh.cli.train", "-m", *BASELINE[:-1],
                             "model=lsh", "model.bits=8,12", f"hydra.sweep.dir={folder}"],
                            capture_output=True, text=True, timeout=300)
    one_error_line(result, "sgh-train", f"hydra.sweep.dir={folder} is not a sweep directory (it "
                                   "holds notes.txt), and sgh never writes over what it did "
                                   "not write")
    assert files_below(folder) == before


def test_sgh_compare_never_replaces_a_users_folder_named_as_its_images(tmp_path):
    from sgh.reports.comparison import compare

    run(compose_config(*BASELINE), tmp_path / "0_job")
    mine = tmp_path / "tensorboard_compare"
    mine.mkdir()
    (mine / "train.py").write_text("print('mine')\n")
    with pytest.raises(UserInputError, match=f"{mine} holds files that are not sgh-compare's "
                                             r"TensorBoard images \(event files\) \(train.py\)"):
        compare(tmp_path)
    assert (mine / "train.py").read_text() == "print('mine')\n"
    (mine / "train.py").unlink()
    compare(tmp_path)  # empty, then its own: replaced
    compare(tmp_path)
    assert [path.name.startswith("events.out.tfevents.") for path in mine.iterdir()] == [True]
