"""`sgh-encode`: every input format gives the run's own codes.npz bit for bit, streamed."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import scipy.io

from sgh.cli.encode import EncodeCommandConfig, encode_file
from sgh.cli.export import export_run
from sgh.errors import UserInputError
from sgh.model.encoding import encode_packed
from sgh.model.export import load_encoder, restore_run_model, run_encoder_path
from sgh.pipeline import run
from tests.helpers import compose_config, one_error_line

DIM = 16


def _config(data_path, *overrides):
    quick = ["dataset=npz", f"dataset.path={data_path}", "dataset.name=tiny",
             "trainer.steps=40", "trainer.batch_size=100", "trainer.steps_per_call=20",
             "model.bits=12", *overrides]
    return compose_config(*quick)


def _texmex(path, array, value_type):
    """Write rows as (int32 d, d values): the .fvecs / .bvecs layout."""
    rows = np.empty(len(array), [("d", "<i4"), ("v", value_type, (array.shape[1],))])
    rows["d"], rows["v"] = array.shape[1], array
    rows.tofile(path)
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished run on uint8 features (ANN layout: database = base), its encoder exported."""
    root = tmp_path_factory.mktemp("encode")
    rng = np.random.default_rng(0)
    centres = rng.integers(0, 256, (8, DIM))

    def draw(n):
        noisy = centres[rng.integers(0, 8, n)] + rng.normal(0, 25, (n, DIM))
        return np.clip(noisy, 0, 255).astype(np.uint8)

    base = draw(700)
    np.savez(root / "tiny.npz", base=base, query=draw(40))
    run_dir = root / "run"
    # Validated often with a large rate, so that the best weights (which give codes.npz) are
    # from an earlier step than the last: export_run must pick the checkpoint that made them.
    run(_config(root / "tiny.npz", "trainer.steps=60", "trainer.learning_rate=0.05",
                "validation.every=20", "validation.queries=50"), run_dir)
    export_run(run_dir)  # the final weights, rebuilt from config.yaml and the checkpoint
    with np.load(run_dir / "codes.npz", allow_pickle=False) as codes:
        database_codes = codes["database"]
    return root, run_dir, base, database_codes


def _inputs(root, base):
    """The run's database features in every accepted format: (path, key)."""
    np.save(root / "base_u8.npy", base)
    np.save(root / "base_fortran.npy", np.asfortranarray(base))
    scipy.io.savemat(root / "base.mat", {"X": base, "other": np.zeros(3)})
    return {
        "bvecs": (_texmex(root / "base.bvecs", base, "u1"), None),
        # float32 features equal to the training conversion uint8 / 255, stored as such
        "fvecs": (_texmex(root / "base.fvecs", base.astype(np.float32) / np.float32(255),
                          "<f4"), None),
        "npy": (root / "base_u8.npy", None),
        "npy_fortran": (root / "base_fortran.npy", None),
        "npz": (root / "tiny.npz", "base"),
        "mat": (root / "base.mat", "X"),
    }


@pytest.mark.parametrize("kind", ["bvecs", "fvecs", "npy", "npy_fortran", "npz", "mat"])
def test_codes_of_the_runs_own_data_equal_codes_npz(trained, kind):
    root, run_dir, base, database_codes = trained
    path, key = _inputs(root, base)[kind]
    out = root / f"codes_{kind}.npy"
    # batch_size 97 does not divide 700: the last batch is partial.
    summary = encode_file(EncodeCommandConfig(run=str(run_dir), input=str(path), key=key,
                                              out=str(out), batch_size=97))
    codes = np.load(out, allow_pickle=False)
    assert codes.dtype == np.uint8 and codes.shape == (700, 2)
    np.testing.assert_array_equal(codes, database_codes)
    assert summary["n"] == 700 and summary["bits"] == 12
    assert summary["conversion"] == ("float32 as stored" if kind == "fvecs" else "uint8 / 255")
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no temporary left


def test_input_scale_sets_the_conversion_of_input_stored_otherwise(trained):
    root, run_dir, base, database_codes = trained
    # Raw pixel values stored as floats, which `auto` refuses for this uint8-trained run:
    # input_scale=uint8 divides them by 255 exactly as the training conversion did.
    np.save(root / "pixels_f32.npy", base.astype(np.float32))
    out = root / "codes_scaled.npy"
    summary = encode_file(EncodeCommandConfig(run=str(run_dir), input=str(root / "pixels_f32.npy"),
                                              out=str(out), input_scale="uint8"))
    np.testing.assert_array_equal(np.load(out), database_codes)
    assert summary["conversion"] == "float32 as stored / 255 (input_scale=uint8)"
    # input_scale=none takes uint8 values as they are (BIGANN .bvecs through a float .fvecs
    # run); this run saw uint8 / 255, features in [0, 1], which the values contradict.
    path, _ = _inputs(root, base)["bvecs"]
    with pytest.raises(UserInputError, match=r"base.bvecs has values outside \[0, 1\] .* "
                                             r"input_scale=none takes them as they are"):
        encode_file(EncodeCommandConfig(run=str(run_dir), input=str(path), out=str(out),
                                        input_scale="none", batch_size=97))
    np.testing.assert_array_equal(np.load(out), database_codes)  # left as it was
    # input_scale=uint8 says the values are uint8 levels: floats already divided contradict it.
    np.save(root / "unit_f32.npy", base.astype(np.float32) / 255)
    with pytest.raises(UserInputError, match=r"unit_f32.npy holds 0.\d+ at row \d+, column "
                                             r"\d+, but input_scale=uint8 says its values are "
                                             r"uint8 levels"):
        encode_file(EncodeCommandConfig(run=str(run_dir), input=str(root / "unit_f32.npy"),
                                        out=str(out), input_scale="uint8"))
    with pytest.raises(UserInputError, match="input_scale='raw' is not known; accepted: auto, "
                                             "none, uint8"):
        encode_file(EncodeCommandConfig(run=str(run_dir), input=str(path), out=str(out),
                                        input_scale="raw"))


def test_restored_run_model_is_the_one_that_made_codes_npz(trained):
    root, run_dir, base, database_codes = trained
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["best_step"] < metrics["steps"]  # the case where the last step would be wrong
    model = restore_run_model(run_dir)
    np.testing.assert_array_equal(encode_packed(model, base.astype(np.float32) / 255),
                                  database_codes)


def test_exported_encoder_directly_equals_codes_npz(trained):
    _, run_dir, base, database_codes = trained
    encoder = load_encoder(run_encoder_path(run_dir))
    np.testing.assert_array_equal(encoder.encode_packed(base.astype(np.float32) / 255),
                                  database_codes)


def test_encoder_argument_and_replacing_an_existing_output(trained):
    root, run_dir, base, database_codes = trained
    path, _ = _inputs(root, base)["bvecs"]
    out = root / "existing.npy"
    np.save(out, np.arange(5))
    encode_file(EncodeCommandConfig(encoder=str(run_dir / "encoder"), input=str(path),
                                    out=str(out)))
    np.testing.assert_array_equal(np.load(out), database_codes)


def test_a_failure_midway_leaves_the_existing_output_untouched(trained):
    root, run_dir, base, _ = trained
    features = base.astype(np.float32) / 255
    features[650, 2] = np.inf  # found in the seventh batch of 97, after six were written
    np.save(root / "with_inf.npy", features)
    out = root / "kept.npy"
    np.save(out, np.arange(5))
    with pytest.raises(UserInputError, match="row 650, column 2"):
        encode_file(EncodeCommandConfig(run=str(run_dir), input=str(root / "with_inf.npy"),
                                        out=str(out), batch_size=97))
    np.testing.assert_array_equal(np.load(out), np.arange(5))
    assert not [p for p in root.iterdir() if p.name.startswith(".kept")]


def test_bad_arguments_are_one_line_errors(trained, tmp_path):
    root, run_dir, base, _ = trained
    bvecs, _ = _inputs(root, base)["bvecs"]

    def encode(**arguments):
        arguments = {"run": str(run_dir), "input": str(bvecs), "out": str(tmp_path / "c.npy"),
                     **arguments}
        encode_file(EncodeCommandConfig(**arguments))

    cases = [
        ({"out": str(tmp_path / "c.txt")}, "accepted: a path ending in .npy"),
        ({"encoder": str(run_dir / "encoder")}, "exactly one of run=DIR"),
        ({"run": None}, "exactly one of run=DIR"),
        ({"input": None}, "input= is missing"),
        ({"batch_size": 0}, "batch_size=0 is impossible"),
        ({"input": str(tmp_path / "none.fvecs")}, "no such file"),
        ({"input": str(root / "base.mat")}, "holds several arrays"),
        ({"input": str(bvecs), "out": str(bvecs.with_suffix(".npy"))}, None),  # fine: other file
    ]
    for arguments, message in cases:
        if message is None:
            encode(**arguments)
            continue
        with pytest.raises(UserInputError, match=message):
            encode(**arguments)
    np.save(root / "narrow.npy", base[:, :9])
    with pytest.raises(UserInputError, match=r"has 9 features per vector but the encoder .* "
                                             r"takes 16"):
        encode(input=str(root / "narrow.npy"))
    with pytest.raises(UserInputError, match="is the input file"):
        encode(input=str(root / "narrow.npy"), out=str(root / "narrow.npy"))


def test_runs_without_an_encoder(trained, tmp_path, command_here):
    root, run_dir, base, database_codes = trained
    bvecs, _ = _inputs(root, base)["bvecs"]
    unexported = tmp_path / "unexported"
    shutil.copytree(run_dir, unexported, ignore=shutil.ignore_patterns("encoder"))
    with pytest.raises(UserInputError, match=r"this run has no exported encoder .* "
                                             rf"sgh-export run={unexported}$"):
        encode_file(EncodeCommandConfig(run=str(unexported), input=str(bvecs),
                                        out=str(tmp_path / "c.npy")))
    # The command that line names; the run as a bare word, or no run, is one line.
    one_error_line(command_here("export", [str(unexported)], tmp_path), "sgh-export",
                   f"{unexported} is not key=value; write run={unexported}")
    one_error_line(command_here("export", [], tmp_path), "sgh-export",
                   "run= is missing; usage: sgh-export run=RUN_DIR")
    exported = command_here("export", [f"run={unexported}"], tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == f"[sgh] exported {unexported / 'encoder'}\n"
    encode_file(EncodeCommandConfig(run=str(unexported), input=str(bvecs),
                                    out=str(tmp_path / "c.npy")))
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), database_codes)
    # A sweep exports several runs, one job each.
    other = tmp_path / "other"
    shutil.copytree(unexported, other, ignore=shutil.ignore_patterns("encoder"))
    shutil.rmtree(unexported / "encoder")
    swept = command_here("export", ["-m", f"run={unexported},{other}",
                                    f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    assert swept.returncode == 0, swept.stderr
    assert all((run / "encoder" / "saved_model.pb").is_file() for run in (unexported, other))
    baseline = tmp_path / "itq"
    run(_config(root / "tiny.npz", "model=itq"), baseline)
    with pytest.raises(UserInputError, match="model=itq baseline run, which has no TensorFlow "
                                             "encoder"):
        encode_file(EncodeCommandConfig(run=str(baseline), input=str(bvecs),
                                        out=str(tmp_path / "c.npy")))
    with pytest.raises(UserInputError, match="no config.yaml there"):
        encode_file(EncodeCommandConfig(run=str(tmp_path), input=str(bvecs),
                                        out=str(tmp_path / "c.npy")))


def _sgh_encode(*arguments):
    return subprocess.run([sys.executable, "-m", "sgh.cli.encode", *arguments],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # ~5 s: sgh-encode started as a process
def test_command_line(trained):
    root, run_dir, base, database_codes = trained
    bvecs, _ = _inputs(root, base)["bvecs"]
    out = root / "cli.npy"
    done = _sgh_encode(f"run={run_dir}", f"input={bvecs}", f"out={out}", "batch_size=300")
    assert done.returncode == 0, done.stderr
    assert "encoded 700 vectors" in done.stdout and "12-bit codes" in done.stdout
    assert "vectors/s" in done.stdout and "uint8 / 255" in done.stdout
    np.testing.assert_array_equal(np.load(out), database_codes)
    # Bad arguments: exit 2, one line, no traceback (and no TensorFlow import to wait for).
    bad = _sgh_encode(f"run={run_dir}", f"input={bvecs}", "out=codes.txt")
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("sgh-encode: error: out=codes.txt")


def test_the_codes_record_names_the_model_as_the_runs_codes_npz_does(trained, tmp_path):
    root, run_dir, base, database_codes = trained
    path, _ = _inputs(root, base)["bvecs"]
    out = tmp_path / "codes.npy"
    summary = encode_file(EncodeCommandConfig(run=str(run_dir), input=str(path), out=str(out)))
    with np.load(run_dir / "codes.npz", allow_pickle=False) as codes:
        fingerprint = str(codes["fingerprint"])
    record = json.loads((tmp_path / "codes.npy.json").read_text())
    assert record == {"written_by": "sgh-encode", "codes": "codes.npy", "shape": [700, 2],
                      "bits": 12, "fingerprint": fingerprint,
                      "encoder": str(run_dir / "encoder"), "input": str(path), "key": None,
                      "conversion": "uint8 / 255"}
    assert summary["fingerprint"] == fingerprint
    # An encoder copied out of its run names no model: null, never another run's.
    detached = tmp_path / "encoder"
    shutil.copytree(run_dir / "encoder", detached)
    encode_file(EncodeCommandConfig(encoder=str(detached), input=str(path), out=str(out)))
    assert json.loads((tmp_path / "codes.npy.json").read_text())["fingerprint"] is None
    np.testing.assert_array_equal(np.load(out), database_codes)


def test_a_users_file_where_the_record_goes_is_refused_before_any_work(trained, tmp_path):
    root, run_dir, base, _ = trained
    path, _ = _inputs(root, base)["bvecs"]
    out = tmp_path / "codes.npy"
    (tmp_path / "codes.npy.json").write_text('{"mine": true}\n')
    with pytest.raises(UserInputError, match=r"codes.npy.json is not sgh-encode's record of a "
                                             r"codes file .* choose another out="):
        encode_file(EncodeCommandConfig(run=str(run_dir), input=str(path), out=str(out)))
    assert not out.exists() and (tmp_path / "codes.npy.json").read_text() == '{"mine": true}\n'
