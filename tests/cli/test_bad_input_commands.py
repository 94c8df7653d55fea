"""A new user's mistakes with every command: `sgh-train`, `sgh-eval`, `sgh-encode`, `sgh-compare`,
`sgh-index`, `sgh-export`.

One table, one case a row: the case builds its input in a temporary folder, runs the command's
real `main` in this process (the pre-flight, Hydra, the boundary and the exit statuses are all
there; no TensorFlow, a fraction of a second a case) and checks the exit status, exactly one
line on stderr naming the key or file, no traceback, and that no file that existed before was
changed. A few run as real processes too; those that train are `slow`.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.cli.conftest import PROGRAMS
from tests.helpers import quick


# ---- inputs a user might have -----------------------------------------------------------------
def _codes(folder: Path, name: str = "codes.npz", bits: int = 12, n_database: int = 30,
           n_query: int = 5, **replaced) -> Path:
    """A codes.npz in the contract (pad bits 0), with some arrays replaced (None: left out)."""
    rng = np.random.default_rng(0)
    width = (bits + 7) // 8
    pad = np.uint8((0xFF << (width * 8 - bits)) & 0xFF)

    def codes(n):
        packed = rng.integers(0, 256, (n, width), dtype=np.uint8)
        packed[:, -1] &= pad
        return packed

    arrays = {"database": codes(n_database), "query": codes(n_query), "bits": np.int64(bits),
              "database_labels": rng.integers(0, 3, n_database),
              "query_labels": rng.integers(0, 3, n_query),
              "groundtruth": np.tile(np.arange(10), (n_query, 1))}
    arrays.update(replaced)
    np.savez(folder / name, **{key: value for key, value in arrays.items() if value is not None})
    return folder / name


def _file(path: Path, content: bytes | str = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def _trained_run(folder: Path, conversion: str) -> Path:
    """What sgh-encode reads of a finished SGH run before it loads the encoder."""
    run = folder / "run"
    _file(run / "config.yaml", "model:\n  name: sgh\n  bits: 12\n")
    _file(run / "metrics.json", json.dumps({"feature_conversion": conversion,
                                            "similarity": "euclidean"}))
    _file(run / "encoder" / "saved_model.pb", b"not read: the input is refused first")
    return run


def _sweep(folder: Path) -> Path:
    """A finished sweep of one job, as sgh-train leaves it."""
    job = folder / "sweep" / "0_1234abcd"
    _file(job / "metrics.json",
          json.dumps({"dataset": "toy", "method": "lsh", "bits": 8, "seed": 0, "map": 0.5}))
    _codes(job, bits=8)
    return job.parent


def _npy(path: Path, array: np.ndarray) -> Path:
    np.save(path, array)
    return path


# Patches (monkeypatch, folder): what a test cannot make for real.
def _not_writable(name: str):
    """The folder `name` answers as a read-only mount does (as root, chmod cannot make one)."""
    def patch(monkeypatch, folder):
        read_only = _file(folder / name / "kept").parent.resolve()
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode, **kwargs: (
            Path(path).resolve() != read_only and real_access(path, mode, **kwargs)))
    return patch


def _failing_writes(code: int):
    """Every atomic write fails as a full (or read-only) disk makes it fail: without a name.
    sgh-compare's plots, drawn before its writes, are skipped: a second of matplotlib."""
    def patch(monkeypatch, folder):
        def refuse(*args, **kwargs):
            raise OSError(code, os.strerror(code))
        monkeypatch.setattr("sgh.artifacts.atomic.tempfile.mkstemp", refuse)
        monkeypatch.setattr("sgh.reports.comparison.figures", lambda aggregated: {})
    return patch


def _signal_during(target: str, number: int):
    """The process gets the signal `number` when `target` (module.function) runs."""
    def patch(monkeypatch, folder):
        def deliver(*args, **kwargs):
            # To this thread, so that its handler runs before the next line (os.kill may hand
            # it to another of the process's threads, TensorFlow's or numba's).
            signal.raise_signal(number)
            raise AssertionError("the signal should have interrupted this")
        monkeypatch.setattr(target, deliver)
    return patch


@dataclass
class Case:
    name: str
    command: str  # a key of PROGRAMS
    arguments: Callable[[Path], list[str]]  # builds the input under the folder; the argv
    expected: str  # text of the line; {tmp} is the folder, so the file's name is checked
    status: int = 2
    patch: Callable[[pytest.MonkeyPatch, Path], None] | None = None
    slow: bool = False  # a second or so, with a faster case of the same code path


def _run_dir(folder: Path) -> str:
    return f"hydra.run.dir={folder / 'run'}"


def _yaml_garbage(folder: Path) -> Path:
    return _file(folder / "run" / "config.yaml", "model: {bits: 3\n  x: [\n")


# A table, one row a case: its rows are alike in shape on purpose (nothing in them to factor).
CASES = [
    # ---- sgh-train: Hydra's own errors, as one line --------------------------------------------
    Case("misspelt key", "train", lambda f: ["model.bitz=3"],
         "model.bitz=3: model has no key 'bitz'; accepted keys: name, bits, objective"),
    Case("misspelt section", "train", lambda f: ["trainr.steps=3"],
         "trainr.steps=3: the configuration has no key 'trainr'; accepted keys: dataset, model"),
    Case("wrong type", "train", lambda f: ["model.bits=abc"],
         "model.bits=abc: Value 'abc' of type 'str' could not be converted to Integer"),
    Case("float for an integer", "train", lambda f: ["trainer.steps=1.5"],
         "trainer.steps=1.5: Value '1.5' of type 'float' could not be converted to Integer"),
    Case("wrong type in a list", "train", lambda f: ["eval.recall_n=[1,a]"],
         "eval.recall_n=[1,a]: Value 'a' of type 'str' could not be converted to Integer"),
    Case("not a boolean", "train", lambda f: ["trainer.jit_compile=maybe"],
         "trainer.jit_compile=maybe: Value 'maybe' is not a valid bool (type str)"),
    Case("a scalar for a list", "train", lambda f: ["model.encoder_hidden=512"],
         "model.encoder_hidden=512: Invalid value assigned: int is not a ListConfig"),
    Case("bad override syntax", "train", lambda f: ["model.bits=["],
         "cannot read the override 'model.bits=[': no viable alternative at input '['; write "
         "key=value, and quote"),
    Case("override without a value", "train", lambda f: ["model.bits"],
         "cannot read the override 'model.bits': missing EQUAL at '<EOF>'"),
    Case("override without a key", "train", lambda f: ["=3"],
         "cannot read the override '=3': no key before the '='"),
    Case("unknown trainer option", "train", lambda f: ["trainer=fast"],
         "trainer=fast is not a known option; accepted: default"),
    Case("unknown Hydra option", "train", lambda f: ["hydra/launcher=joblibb"],
         "hydra/launcher=joblibb is not a known option; accepted: basic"),
    Case("unknown flag", "train", lambda f: ["--cfgg", "job"],
         "unrecognized arguments: --cfgg (--help lists the options)"),
    Case("two commands", "train", lambda f: ["-m", "--cfg", "job"],
         "--multirun and --cfg cannot be combined"),
    Case("interpolation of nothing", "train", lambda f: ["model.bits=${bitz}"],
         "model.bits=${{bitz}}: Interpolation key 'bitz' not found"),
    Case("deleting a key", "train", lambda f: ["~model.bits"],
         "~model.bits: ModelConfig (DictConfig) does not support deletion"),
    Case("dataset=file without a path", "train", lambda f: ["dataset=file"],
         "dataset.path is missing: dataset=file reads your own file; add dataset.path=FILE "
         "(.npy, .npz"),
    # ---- sgh-train: the evaluation's former words, each naming what does its work now -------
    Case("eval.ranking=asymmetric, the scan's former name", "train",
         lambda f: ["eval.ranking=asymmetric"],
         "eval.ranking=asymmetric is now eval.ranking=scan (SGHIndex's mode of that name); "
         "accepted: hamming, scan, two_stage, bytes"),
    Case("eval.ranking=rerank, two_stage's former name", "train",
         lambda f: ["eval.ranking=rerank"],
         "eval.ranking=rerank is now eval.ranking=two_stage (SGHIndex's mode of that name)"),
    Case("eval.rescore, a retired key", "train", lambda f: ["eval.rescore=exact"],
         "eval.rescore=exact: eval has no key 'rescore' any more; eval.ranking=two_stage "
         "rescores by eval.score, as SGHIndex does; exact distances on your own vectors: the "
         "search guide's rescoring recipe"),
    Case("eval.rescore added with +", "train", lambda f: ["+eval.rescore=score"],
         "+eval.rescore=score: eval has no key 'rescore' any more; eval.ranking=two_stage"),
    Case("eval.shortlist_by, a retired key", "train", lambda f: ["eval.shortlist_by=hamming"],
         "eval.shortlist_by=hamming: eval has no key 'shortlist_by' any more; "
         "eval.ranking=two_stage shortlists by the encoder score"),
    Case("eval.shortlist_radius, a retired key", "train",
         lambda f: ["eval.shortlist_radius=2"],
         "eval.shortlist_radius=2: eval has no key 'shortlist_radius' any more; "
         "eval.ranking=two_stage shortlists the encoder score's top eval.shortlist"),
    # ---- sgh-train: sweeps, checked before any job runs -------------------------------------
    Case("several values without -m", "train", lambda f: ["model.bits=16,32"],
         "Ambiguous value for argument 'model.bits=16,32'; 1. To use it as a list, use "
         "key=[value1,value2]; 2. To use it as string, quote the value: key='value1,value2'; "
         "3. To sweep over it, add --multirun to your command line"),
    Case("a bad value late in a sweep", "train",
         lambda f: ["-m", "model.bits=16,32,abc", f"hydra.sweep.dir={f / 'sweep'}"],
         "model.bits=abc: Value 'abc' of type 'str' could not be converted to Integer"),
    Case("a key one swept option lacks", "train",
         lambda f: ["-m", "model=sgh,itq", "model.encoder=mlp", f"hydra.sweep.dir={f / 's'}"],
         "in the sweep's job with model=itq: model.encoder=mlp: model has no key 'encoder'; "
         "accepted keys: name, bits"),
    Case("an unknown option in a sweep", "train", lambda f: ["-m", "model=sgh,itqq"],
         "model=itqq is not a known option; accepted: itq, lsh, pcah, sgh, sh, sph"),
    Case("a sweep over paths beyond ASCII, as typed", "train",
         lambda f: ["-m", "dataset=file", f"hydra.sweep.dir={f / 'sweep'}",
                    f"dataset.path={_file(f / 'dätä' / 'a.csv')},{f / 'dätä' / 'b.csv'}"],
         "{tmp}/dätä/a.csv: unknown extension '.csv'", slow=True),
    Case("a quote and letters beyond ASCII", "train", lambda f: ["dataset.name=it's-ä"],
         "cannot read the override \"dataset.name=it's-ä\": it cannot read \"'\" at position 15; "
         "letters beyond ASCII must be quoted"),
    # ---- sgh-train: values and places ---------------------------------------------------------
    Case("negative seed", "train", lambda f: ["trainer.seed=-1"],
         "trainer.seed=-1 is impossible; accepted: an integer between 0 and 4294967295"),
    Case("huge seed of a baseline", "train",
         lambda f: ["model=lsh", "dataset=synthetic", "trainer.seed=4294967296"],
         "trainer.seed=4294967296 is impossible; accepted: an integer between 0 and 4294967295"),
    Case("ITQ with more bits than features", "train",
         lambda f: ["model=itq", "model.bits=16", "dataset=synthetic", "dataset.dim=8",
                    _run_dir(f)],
         "model.bits=16 is more than the 8 features of 'synthetic', and model=itq takes one bit "
         "per principal component; accepted: model.bits <= 8, or a method without that limit "
         "(model=sgh, lsh, sh, sph)"),
    Case("PCAH with more bits than features", "train",
         lambda f: ["model=pcah", "model.bits=9", "dataset=synthetic", "dataset.dim=8",
                    _run_dir(f)],
         "model.bits=9 is more than the 8 features of 'synthetic', and model=pcah", slow=True),
    Case("run directory is a file", "train",
         lambda f: [f"hydra.run.dir={_file(f / 'notes.txt', 'mine')}"],
         "hydra.run.dir={tmp}/notes.txt is a file; accepted: a directory"),
    Case("run directory below a file", "train",
         lambda f: [f"hydra.run.dir={_file(f / 'notes.txt', 'mine')}/run"],
         "hydra.run.dir={tmp}/notes.txt/run: {tmp}/notes.txt is a file, so nothing can be "
         "made below it"),
    Case("run directory name too long", "train", lambda f: [f"hydra.run.dir={f / ('r' * 300)}"],
         "is 300 bytes; a file name may have at most 255 bytes"),
    Case("run directory read-only", "train", lambda f: [f"hydra.run.dir={f / 'ro' / 'run'}"],
         "hydra.run.dir={tmp}/ro/run: {tmp}/ro is not writable (read-only or permission "
         "denied)", patch=_not_writable("ro")),
    Case("corrupt config.yaml in the run directory", "train",
         lambda f: [f"hydra.run.dir={_yaml_garbage(f).parent}"],
         "{tmp}/run/config.yaml: not readable YAML (while parsing a flow mapping"),
    Case("a path with letters beyond ASCII, as typed", "train",
         lambda f: ["dataset=file", f"dataset.path={_file(f / 'dätä' / 'x.csv', '1,2')}"],
         "{tmp}/dätä/x.csv: unknown extension '.csv'"),
    Case("a path with spaces, as typed", "train",
         lambda f: ["dataset=file", f"dataset.path={_file(f / 'my data' / 'x.csv', '1,2')}"],
         "{tmp}/my data/x.csv: unknown extension '.csv'"),
    Case("SIGTERM while the data load", "train", lambda f: ["dataset=synthetic", _run_dir(f)],
         "interrupted before the run finished; run the same command with "
         "hydra.run.dir={tmp}/run to resume", status=130,
         patch=_signal_during("sgh.pipeline.load_split_and_files", signal.SIGTERM)),
    # ---- sgh-eval -----------------------------------------------------------------------------
    Case("out= the codes file", "eval",
         lambda f: [f"codes={_codes(f)}", f"out={f / 'codes.npz'}"],
         "out={tmp}/codes.npz is the codes file, which the JSON would overwrite"),
    Case("no queries", "eval", lambda f: [f"codes={_codes(f, n_query=0)}"],
         "{tmp}/codes.npz: key 'query' holds no codes (shape (0, 2)); expected at least one "
         "query"),
    Case("empty database", "eval", lambda f: [f"codes={_codes(f, n_database=0)}"],
         "{tmp}/codes.npz: key 'database' holds no codes (shape (0, 2))"),
    Case("pad bits set", "eval",
         lambda f: [f"codes={_codes(f, query=np.full((5, 2), 0xFF, np.uint8))}"],
         "{tmp}/codes.npz: key 'query' has bits set in the padding after bit 12 (5 rows, the "
         "first row 0: last byte 11111111)"),
    Case("1-D query labels, 2-D database labels", "eval",
         lambda f: [f"codes={_codes(f, database_labels=np.eye(3, dtype=np.int64)[[0] * 30])}"],
         "{tmp}/codes.npz: 'query_labels' has shape (5,) but 'database_labels' (30, 3); give "
         "both as 1-D class ids"),
    Case("an HTML page named .npz", "eval",
         lambda f: [f"codes={_file(f / 'codes.npz', '<!DOCTYPE html><html>Not Found</html>')}"],
         "{tmp}/codes.npz: not an .npz archive (a zip of .npy arrays): the file is corrupt or "
         "of another format (it starts with b'<!DOCTYPE html><'"),
    Case("out= a directory", "eval",
         lambda f: [f"codes={_codes(f)}", f"out={_file(f / 'scores' / 'keep').parent}"],
         "out={tmp}/scores is a directory; accepted: a file name"),
    Case("out= a read-only place", "eval",
         lambda f: [f"codes={_codes(f)}", f"out={f / 'ro' / 'scores.json'}"],
         "out={tmp}/ro/scores.json: {tmp}/ro is not writable", patch=_not_writable("ro")),
    Case("disk full writing out=", "eval",
         lambda f: [f"codes={_codes(f)}", f"out={_file(f / 'scores.json', '{}')}"],
         "{tmp}/scores.json: no space left on device; free some space, or write elsewhere "
         "(out=...)", patch=_failing_writes(errno.ENOSPC)),
    Case("Ctrl-C while scoring", "eval",
         lambda f: [f"codes={_codes(f)}", f"out={_file(f / 'scores.json', '{}')}"],
         "interrupted; {tmp}/scores.json was not written (or left as it was): run the same "
         "command again", status=130,
         patch=_signal_during("sgh.cli.evaluate.score", signal.SIGINT)),
    Case("misspelt eval key", "eval", lambda f: [f"codes={_codes(f)}", "eval.recal_k=5"],
         "eval.recal_k=5: eval has no key 'recal_k'; accepted keys: recall_k, recall_n"),
    Case("eval option unknown", "eval", lambda f: [f"codes={_codes(f)}", "eval=fast"],
         "eval=fast is not a known option; accepted: default"),
    Case("eval.ranking=rerank when re-scoring a run", "eval",
         lambda f: [f"run={_trained_run(f, 'none')}", "eval.ranking=rerank"],
         "eval.ranking=rerank is now eval.ranking=two_stage (SGHIndex's mode of that name)"),
    Case("eval.rescore when re-scoring a run", "eval",
         lambda f: [f"run={_trained_run(f, 'none')}", "eval.rescore=exact"],
         "eval.rescore=exact: eval has no key 'rescore' any more"),
    Case("corrupt config.yaml of a re-scored run", "eval",
         lambda f: [f"run={_codes(_yaml_garbage(f).parent).parent}", "eval.ranking=scan"],
         "{tmp}/run/config.yaml: not readable YAML"),
    # ---- sgh-encode ---------------------------------------------------------------------------
    Case("uint8 input for a float-trained run", "encode",
         lambda f: [f"run={_trained_run(f, 'float32 as stored')}", f"out={f / 'c.npy'}",
                    f"input={_npy(f / 'x.npy', np.ones((4, 3), np.uint8))}"],
         "{tmp}/x.npy is uint8 (converted as 'uint8 / 255') but run={tmp}/run was trained on "
         "features converted as 'float32 as stored'"),
    Case("raw pixels as floats for a uint8-trained run", "encode",
         lambda f: [f"run={_trained_run(f, 'uint8 / 255')}", f"out={f / 'c.npy'}",
                    f"input={_npy(f / 'x.npy', np.full((4, 3), 200, np.float32))}"],
         "{tmp}/x.npy has values outside [0, 1] (first at row 0, column 0: 200) but "
         "run={tmp}/run was trained on uint8 features divided by 255"),
    Case("misspelt encode argument", "encode", lambda f: ["batchsize=3"],
         "batchsize=3: the configuration has no key 'batchsize'; accepted keys: run, encoder, "
         "input, out, key, batch_size, input_scale"),
    Case("encode batch size not a number", "encode", lambda f: ["batch_size=lots"],
         "batch_size=lots: Value 'lots' of type 'str' could not be converted to Integer"),
    Case("encode out= a read-only place", "encode",
         lambda f: [f"run={_trained_run(f, 'uint8 / 255')}", f"input={f / 'x.npy'}",
                    f"out={f / 'ro' / 'c.npy'}"],
         "out={tmp}/ro/c.npy: {tmp}/ro is not writable", patch=_not_writable("ro")),
    # ---- sgh-compare --------------------------------------------------------------------------
    Case("read-only sweep directory", "compare",
         lambda f: [f"sweep={_sweep(f)}", "tensorboard=false"],
         "{tmp}/sweep: not writable (read-only or permission denied), so the comparison cannot "
         "be written there; pass out=DIR", patch=_not_writable("sweep")),
    Case("sweep directory turns read-only while writing", "compare",
         lambda f: [f"sweep={_sweep(f)}", "tensorboard=false"],
         "{tmp}/sweep: read-only file system", patch=_failing_writes(errno.EROFS)),
    Case("full disk under out=", "compare",
         lambda f: [f"sweep={_sweep(f)}", f"out={f / 'report'}", "tensorboard=false"],
         "no space left on device; free some space, or write elsewhere (out=...)",
         patch=_failing_writes(errno.ENOSPC)),
    Case("compare sweep as a bare word", "compare", lambda f: [str(_sweep(f))],
         "{tmp}/sweep is not key=value; write sweep={tmp}/sweep"),
    Case("misspelt compare key", "compare", lambda f: [f"sweep={_sweep(f)}", "outt=x"],
         "outt=x: the configuration has no key 'outt'; accepted keys: sweep, out, tensorboard"),
    Case("compare tensorboard not a bool", "compare",
         lambda f: [f"sweep={_sweep(f)}", "tensorboard=maybe"],
         "tensorboard=maybe: Value 'maybe' is not a valid bool"),
    Case("no sweep directory given", "compare", lambda f: [],
         "sweep= is missing; usage: sgh-compare sweep=SWEEP_DIR [out=DIR] [tensorboard=false]"),
    # ---- sgh-index, sgh-export: the first word picks the action; the rest are Hydra's keys -----
    Case("index without an action", "index", lambda f: [f"run={_trained_run(f, 'none')}"],
         "the first word is the action, build or search, not 'run={tmp}/run'; usage: "),
    Case("index search misspelt key", "index",
         lambda f: ["search", "index=I", "input=Q.npy", "out=R.npz", "nprob=3"],
         "nprob=3: the configuration has no key 'nprob'; accepted keys: index, input, key, out"),
    Case("index build nlist not a number", "index",
         lambda f: ["build", f"run={_trained_run(f, 'none')}", "out=I", "nlist=many"],
         "nlist=many: Value 'many' of type 'str' could not be converted to Integer"),
    Case("index build decoder=bytes, mode=bytes's former spelling", "index",
         lambda f: ["build", f"run={_trained_run(f, 'none')}", f"out={f / 'I'}", "decoder=bytes"],
         "decoder=bytes: the configuration has no key 'decoder' any more; the byte decoder's "
         "index is mode=bytes"),
    Case("export run as a bare word", "export", lambda f: [str(_trained_run(f, "none"))],
         "{tmp}/run is not key=value; write run={tmp}/run"),
    Case("export without run=", "export", lambda f: [],
         "run= is missing; usage: sgh-export run=RUN_DIR"),
]




def _files(folder: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def assert_one_line(result, program: str, expected: str, status: int) -> None:
    assert result.returncode == status, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    prefix = f"{program}: error: " if status == 2 else f"{program}: "
    assert lines[0].startswith(prefix), lines[0]
    assert expected in lines[0], f"\n{lines[0]}\n{expected}"


@pytest.mark.parametrize("case", [
    pytest.param(case, id=case.name, marks=[pytest.mark.slow] if case.slow else [])
    for case in CASES])
def test_a_mistake_is_one_line_and_leaves_every_file_as_it_was(case, tmp_path, command_here,
                                                               monkeypatch):
    folder = tmp_path / "work"
    folder.mkdir()
    arguments = case.arguments(folder)
    if case.patch is not None:
        case.patch(monkeypatch, folder)
    before = _files(folder)
    result = command_here(case.command, arguments, cwd=folder)
    assert_one_line(result, PROGRAMS[case.command][0], case.expected.format(tmp=folder),
                    case.status)
    for path, content in before.items():
        assert path.is_file() and path.read_bytes() == content, f"{path} was changed"


def test_nothing_of_a_refused_sweep_runs(tmp_path, command_here):
    result = command_here("train", ["-m", "model=lsh", "model.bits=8,abc",
                                    f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path)
    assert result.returncode == 2
    assert not (tmp_path / "sweep").exists()  # not even the first job's directory


def test_sgh_debug_shows_the_traceback_of_a_hydra_error(tmp_path, command_here):
    result = command_here("train", ["model.bitz=3"], cwd=tmp_path, debug=True)
    assert result.returncode == 2
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("sgh-train: error: model.bitz=3")


# ---- sweep job directories ------------------------------------------------------------------
def test_sweep_jobs_get_short_flat_directories_whatever_their_overrides():
    from hydra import compose, initialize_config_dir

    from sgh.cli.schemas import CONFIG_PATH, register_configs

    register_configs()
    long_path = "dataset.path=/data/" + "deep/" * 80 + "x.npz"
    with initialize_config_dir(config_dir=CONFIG_PATH, version_base="1.3"):
        config = compose("train", overrides=["dataset=synthetic"], return_hydra_config=True)
    names = set()
    for number, overrides in enumerate([f"{long_path},model.bits=16", "model.bits=16", ""]):
        config.hydra.job.num = number
        config.hydra.job.override_dirname = overrides
        name = str(config.hydra.sweep.subdir)
        assert name.startswith(f"{number}_") and len(name.split("_")[1]) == 8, name
        assert "/" not in name and len(name.encode()) <= 255
        names.add(name.split("_")[1])
    assert len(names) == 3  # different overrides, different names


# ---- real processes ---------------------------------------------------------------------------
def _process(command: str, *arguments: str, cwd: Path, timeout: float = 300):
    env = {key: value for key, value in os.environ.items()
           if key not in ("SGH_DEBUG", "HYDRA_FULL_ERROR")}
    return subprocess.run([sys.executable, "-m", PROGRAMS[command][1], *arguments], cwd=cwd,
                          env={**env, "PYTHONUNBUFFERED": "1"}, capture_output=True, text=True,
                          timeout=timeout)


def test_hydra_errors_from_a_real_process_are_one_line_and_exit_2(tmp_path):
    result = _process("train", "model.bitz=3", cwd=tmp_path)
    assert_one_line(result, "sgh-train", "model.bitz=3: model has no key 'bitz'", 2)


@pytest.mark.slow
@pytest.mark.parametrize("command, arguments, expected", [
    ("eval", ["eval.recal_k=5"], "eval.recal_k=5: eval has no key 'recal_k'"),
    ("encode", ["batchsize=3"], "batchsize=3: the configuration has no key 'batchsize'"),
    ("compare", ["sweep=.", "--no-tensorboard"],
     "--no-tensorboard is not an option; write tensorboard=false"),
    ("index", ["search", "k=abc"], "k=abc: Value 'abc' of type 'str' could not be converted"),
    ("export", ["runs/x"], "runs/x is not key=value; write run=runs/x"),
    ("train", ["dataset=file"], "dataset.path is missing"),
])
def test_every_command_from_a_real_process(tmp_path, command, arguments, expected):
    result = _process(command, *arguments, cwd=tmp_path)
    assert_one_line(result, PROGRAMS[command][0], expected, 2)


QUICK_SGH = quick("trainer.steps=40", "validation.every=0", "model.bits=8")
# Runs sgh-train with a signal delivered when the named function of sgh.pipeline is called.
SIGNALLING_TRAIN = """
import signal, sys
import sgh.pipeline as pipeline
target, number = sys.argv.pop(1), int(sys.argv.pop(1))
owner, name = (pipeline.RunDirectory, target.split(".")[1]) if "." in target else (pipeline,
                                                                                  target)
original = getattr(owner, name)
def deliver(*args, **kwargs):
    signal.raise_signal(number)  # to this thread: handled here, not a few instructions late
    return original(*args, **kwargs)
setattr(owner, name, deliver)
from sgh.cli.train import main
main()
"""


@pytest.mark.slow
@pytest.mark.parametrize("target, number", [
    ("load_split_and_files", signal.SIGTERM),  # before the first step
    ("score", signal.SIGTERM),  # evaluating, after training
    ("RunDirectory.write_metrics", signal.SIGINT),  # the final writes
], ids=["before training", "during evaluation", "during the final writes"])
def test_a_signal_at_any_phase_ends_130_and_the_same_command_finishes_the_run(tmp_path, target,
                                                                             number):
    run_dir = tmp_path / "run"
    arguments = [*QUICK_SGH, f"hydra.run.dir={run_dir}"]
    interrupted = subprocess.run([sys.executable, "-c", SIGNALLING_TRAIN, target, str(number),
                                  *arguments], cwd=tmp_path, capture_output=True, text=True,
                                 timeout=300)
    assert interrupted.returncode == 130, interrupted.stderr[-3000:]
    assert "Traceback" not in interrupted.stderr
    assert interrupted.stderr.strip().splitlines()[-1] == (
        f"sgh-train: interrupted before the run finished; run the same command with "
        f"hydra.run.dir={run_dir} to resume")
    assert not (run_dir / "metrics.json").exists()
    assert not [p for p in run_dir.rglob(".*.tmp*")]  # nothing half-written left
    resumed = _process("train", *arguments, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((run_dir / "metrics.json").read_text())["steps"] == 40


@pytest.mark.slow
def test_a_sweep_over_paths_has_flat_job_directories_that_sgh_compare_finds(tmp_path):
    data = tmp_path / "nested" / "data"
    data.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        np.savez(data / f"{name}.npz", X=rng.normal(size=(300, 8)), y=rng.integers(0, 3, 300))
    sweep = tmp_path / "sweep"
    result = _process("train", "-m", "model=lsh", "model.bits=8,16", "dataset=file",
                      f"dataset.path={data / 'a.npz'},{data / 'b.npz'}", "dataset.n_queries=20",
                      f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = sorted(path for path in sweep.iterdir() if path.is_dir())
    assert [job.name.split("_")[0] for job in jobs] == ["0", "1", "2", "3"]
    for job in jobs:  # flat: the job's files are right there; its settings beside them
        assert (job / "metrics.json").is_file() and (job / "config.yaml").is_file()
        assert any("dataset.path=" in line
                   for line in (job / ".hydra" / "overrides.yaml").read_text().splitlines())
    compared = _process("compare", f"sweep={sweep}", "tensorboard=false", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr[-3000:]
    # Two files are two datasets, never averaged as if seeds: lsh x 2 bits x 2 paths.
    rows = (sweep / "comparison.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 4
    assert sum("a.npz" in row for row in rows) == sum("b.npz" in row for row in rows) == 2
