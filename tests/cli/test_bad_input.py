"""Every user mistake through the real `sgh-train` entry point: exit status 2, one line on
stderr that names the file, key or value and says what is accepted, and no traceback (unless
`SGH_DEBUG=1` asks for one).

The table runs in this process (`sgh.cli.train.main` with its argv: Hydra, the group-choice
check and the exit statuses are all there), a few milliseconds a case. A few cases also run as
real subprocesses, for what only a process shows: its exit status, and that nothing else is
printed before the line.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.io

from tests.helpers import labelled_arrays, quick
from tests.helpers_vector_files import write_texmex

# Settings that would make a run short if the input were good.
QUICK = quick("trainer.steps=10", "trainer.steps_per_call=5", "validation.every=0",
              without=("dataset", "trainer.batch_size", "model.bits"))


def _write(path, content: bytes):
    path.write_bytes(content)
    return path


def _mat(folder, name, **arrays):
    scipy.io.savemat(folder / name, arrays)
    return folder / name


def _npz(folder, name, **arrays):
    np.savez(folder / name, **arrays)
    return folder / name


def _truncated(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def _texmex_pair(folder, stem, base, query):
    write_texmex(folder / f"{stem}_base{_suffix(base)}", base)
    write_texmex(folder / f"{stem}_query{_suffix(query)}", query)
    return folder / f"{stem}_base{_suffix(base)}"


def _suffix(array):
    return ".bvecs" if array.dtype == np.uint8 else ".fvecs"


def _v73(folder):
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 2024 HDF5 schema"
    (folder / "v73.mat").write_bytes(header.ljust(512, b" ") + b"\x89HDF\r\n\x1a\n" + bytes(64))
    return folder / "v73.mat"


def _object_npy(folder):
    np.save(folder / "objects.npy", np.array([[{"a": 1}]], dtype=object), allow_pickle=True)
    return folder / "objects.npy"


def _inconsistent_fvecs(folder):
    write_texmex(folder / "odd_query.fvecs", np.ones((2, 3)))
    return write_texmex(folder / "odd_base.fvecs", np.ones((4, 3)), dims=[3, 3, 9, 3])


def _negative_dim_bvecs(folder):
    (folder / "neg_base.bvecs").write_bytes((-3).to_bytes(4, "little", signed=True) + bytes(12))
    return folder / "neg_base.bvecs"


def _nan(folder):
    arrays = labelled_arrays()
    arrays["X_train"][2, 1] = np.nan
    arrays["X_train"][7, 3] = np.nan
    return _npz(folder, "nan.npz", **arrays)


def _inf_fvecs(folder):
    base = np.ones((6, 3), np.float32)
    base[3, 0] = np.inf
    return _texmex_pair(folder, "inf", base, np.ones((2, 3), np.float32))


def _groundtruth_ivecs(folder):
    base = _texmex_pair(folder, "gt", np.ones((5, 3), np.float32), np.ones((2, 3), np.float32))
    write_texmex(folder / "gt_groundtruth.ivecs", np.array([[0, 1], [4, 5]]))
    return base


# (case id, builder of the dataset file or None, extra overrides ({folder}: the builder's
# folder), text the line must contain). With a builder, the line must also name a file of its
# folder (the dataset file, or the companion at fault).
CASES = [
    ("path missing", lambda f: f / "missing.npz", [], "which does not exist"),
    ("a directory", lambda f: f, [], "is a directory"),
    ("unknown extension", lambda f: _write(f / "data.csv", b"1,2"), [],
     "unknown extension '.csv'; accepted: .npy, .npz, .fvecs, .bvecs, .ivecs, .mat"),
    ("corrupt npz", lambda f: _write(f / "c.npz", b"PK\x03\x04 not a zip"),
     [], "corrupt or truncated .npz file"),
    ("truncated npz", lambda f: _truncated(_npz(f, "t.npz", **labelled_arrays(200))), [],
     "corrupt or truncated .npz file"),
    ("corrupt mat", lambda f: _write(f / "c.mat", b"MATLAB 5.0 garbage" * 20),
     [], "corrupt or unreadable .mat file"),
    ("truncated mat", lambda f: _truncated(_mat(f, "t.mat", **labelled_arrays())), [],
     "corrupt or unreadable .mat file"),
    ("mat v7.3 damaged", _v73, [], "corrupt, truncated or not an HDF5 file"),
    ("truncated fvecs", lambda f: _truncated(_texmex_pair(f, "tr", np.ones((5, 3), np.float32),
                                                          np.ones((2, 3), np.float32)), 0.9),
     [], "is not a multiple of the row size 4 + 3 x 4 = 16 bytes"),
    ("corrupt fvecs", _inconsistent_fvecs, [],
     "row 2 declares dimension 9 but the first row declares 3"),
    ("truncated bvecs", lambda f: _truncated(_texmex_pair(f, "tb", np.ones((5, 8), np.uint8),
                                                          np.ones((2, 8), np.uint8)), 0.9),
     [], "is not a multiple of the row size 4 + 8 x 1 = 12 bytes"),
    ("corrupt bvecs", _negative_dim_bvecs, [], "the first row declares dimension -3"),
    ("object arrays npz", lambda f: _npz(f, "o.npz", X=np.array([[{"a": 1}]], dtype=object),
                                         y=np.zeros(1)), [],
     "object (pickled) arrays, which are refused"),
    ("object array npy", _object_npy, [], "object (pickled) array, which is refused"),
    ("missing keys npz", lambda f: _npz(f, "k.npz", X_train=np.ones((3, 2)), y_train=np.ones(3),
                                        X_test=np.ones((3, 2))), [],
     "keys found: X_test, X_train, y_train; expected labelled"),
    ("missing key mat", lambda f: _mat(f, "k.mat", features=np.ones((3, 2)),
                                       labels=np.ones(3)), [],
     "keys found: features, labels; expected labelled"),
    ("dimension mismatch npz", lambda f: _npz(f, "dim.npz", **{**labelled_arrays(),
                                                               "X_test": np.zeros((10, 5))}),
     [], "key 'X_test' has 5 features per item but the other splits have 4"),
    ("dimension mismatch fvecs", lambda f: _texmex_pair(f, "dm", np.ones((5, 3), np.float32),
                                                        np.ones((2, 4), np.float32)),
     [], "has 4 features per item but the database"),
    ("uint8 and float splits", lambda f: _texmex_pair(f, "sc", np.ones((5, 3), np.uint8),
                                                      np.ones((2, 3), np.float32)),
     ["dataset.query_path={folder}/sc_query.fvecs"], "is converted as"),
    ("label count mismatch", lambda f: _npz(f, "lab.npz", **{**labelled_arrays(),
                                                             "y_train": np.zeros(7, int)}),
     [], "key 'y_train' has 7 labels but 'X_train' has 20 items"),
    ("empty array", lambda f: _npz(f, "e.npz", **{**labelled_arrays(),
                                                  "X_train": np.zeros((0, 4))}),
     [], "key 'X_train' has shape (0, 4); expected a non-empty 2-D array"),
    ("empty fvecs", lambda f: _write(f / "e_base.fvecs", b""), [],
     "is empty; expected at least one vector"),
    ("non-numeric features", lambda f: _npz(f, "s.npz", **{**labelled_arrays(),
                                                           "X_train": np.full((20, 4), "a")}),
     [], "non-numeric dtype <U1"),
    ("nan", _nan, [], "key 'X_train' has 2 NaN/Inf values (first at row 2, column 1: nan)"),
    ("inf", _inf_fvecs, [], "has 1 NaN/Inf values (first at row 3, column 0: inf)"),
    ("ground truth out of range npz", lambda f: _npz(
        f, "gt.npz", base=np.zeros((5, 2)), query=np.zeros((2, 2)),
        groundtruth=np.array([[0, 1], [4, 5]])), [],
     "key 'groundtruth' has ids outside 0..4 (min 0, max 5; first at row 1: 5); ids index the "
     "rows of the database from 0"),
    ("ground truth out of range ivecs", _groundtruth_ivecs, [],
     "gt_groundtruth.ivecs has ids outside 0..4"),
    ("query file missing", lambda f: write_texmex(f / "solo_base.fvecs", np.ones((4, 2))), [],
     "expected its queries in"),
    ("bits zero", None, ["model.bits=0"], "model.bits=0 is impossible"),
    ("bits above maximum", None, ["model.bits=1025"],
     "model.bits=1025 is impossible; accepted: an integer between 1 and 1024"),
    ("batch size zero", None, ["trainer.batch_size=0"], "trainer.batch_size=0 is impossible"),
    ("negative steps", None, ["trainer.steps=-1"], "trainer.steps=-1 is impossible"),
    ("unknown dataset", None, ["dataset=mnsit"],
     "dataset=mnsit is not a known option; accepted: cifar10_gist, digits, file"),
    ("unknown model", None, ["model=sghh"], "model=sghh is not a known option; accepted: itq"),
    ("unknown model name", None, ["model.name=foo"], "model.name='foo' is not known"),
    ("unknown experiment", None, ["experiment=paper"], "experiment=paper is not a known option"),
]
# Needs TensorFlow: the training set is only known once the split is made.
BATCH_CASE = ("batch larger than the training set", None,
              ["dataset=synthetic", "trainer.batch_size=5000"],
              "trainer.batch_size=5000 is larger than the training set")


def sgh_train(*args, cwd, debug=False):
    """`sgh-train` as a subprocess."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("SGH_DEBUG", None)
    if debug:
        env["SGH_DEBUG"] = "1"
    return subprocess.run([sys.executable, "-m", "sgh.cli.train", *QUICK, *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def sgh_train_here(command_here):
    """`sgh-train` (with the quick settings) in this process, like `subprocess.run`."""
    return lambda *args, cwd: command_here("train", [*QUICK, *args], cwd)


def _arguments(tmp_path, build, overrides):
    arguments = [f"hydra.run.dir={tmp_path / 'run'}", *overrides]
    path = None
    if build is not None:
        folder = tmp_path / "data"
        folder.mkdir()
        path = build(folder)
        arguments = [a.format(folder=folder) for a in arguments]
        arguments += ["dataset=file", f"dataset.path={path}"]
    return arguments, path


def _assert_one_error_line(result, expected, path):
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("sgh-train: error: "), lines[0]
    assert expected in lines[0], lines[0]
    if path is not None:
        folder = path if path.is_dir() else path.parent
        named = [folder, *folder.iterdir()] if folder.is_dir() else [path]
        assert any(str(file) in lines[0] for file in named), lines[0]
    assert "error" not in result.stdout.lower(), result.stdout


@pytest.mark.parametrize("case, build, overrides, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(tmp_path, sgh_train_here, case, build, overrides,
                                          expected):
    arguments, path = _arguments(tmp_path, build, overrides)
    _assert_one_error_line(sgh_train_here(*arguments, cwd=tmp_path), expected, path)


# The command-line boundary itself, in real processes: a data error, an unknown option (checked
# before Hydra) and an impossible value.
SUBPROCESS_CASES = [case for case in CASES
                    if case[0] in ("path missing", "unknown dataset", "bits zero")]


@pytest.mark.parametrize("case, build, overrides, expected", SUBPROCESS_CASES,
                         ids=[c[0] for c in SUBPROCESS_CASES])
def test_bad_input_from_a_real_process_is_one_line_and_exit_2(tmp_path, case, build, overrides,
                                                               expected):
    arguments, path = _arguments(tmp_path, build, overrides)
    _assert_one_error_line(sgh_train(*arguments, cwd=tmp_path), expected, path)


def test_batch_larger_than_the_training_set(tmp_path, sgh_train_here):
    _, _, overrides, expected = BATCH_CASE
    result = sgh_train_here(f"hydra.run.dir={tmp_path / 'run'}", *overrides, cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and expected in errors[0], result.stderr
    assert "Traceback" not in result.stderr


def test_sgh_debug_shows_the_traceback_and_keeps_exit_2(tmp_path):
    result = sgh_train("model.bits=0", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path,
                       debug=True)
    assert result.returncode == 2
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "sgh-train: error: model.bits=0 is impossible; accepted: an integer between 1 and 1024")
