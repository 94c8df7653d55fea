"""What many tests share: composing a configuration, small overrides, a brute-force oracle."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from sgh.cli.resources import CONFIG_DIR
from sgh.cli.schemas import register_configs

register_configs()

# The project's real datasets (MNIST, CIFAR-10 GIST, SIFT10K), beside the checkout; tests that
# need them skip when it is absent.
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# A run of seconds: synthetic data, few steps, short codes.
QUICK = ["dataset=synthetic", "trainer.steps=60", "trainer.batch_size=100",
         "trainer.steps_per_call=20", "model.bits=12"]


def quick(*overrides: str, without: tuple[str, ...] = ()) -> list[str]:
    """`QUICK` with `overrides` (`key=value`: a key of QUICK takes the new value in its place,
    a new key comes after) and without the keys in `without`."""
    changes = dict(override.split("=", 1) for override in overrides)
    kept = [f"{key}={changes.pop(key, value)}"
            for key, value in (setting.split("=", 1) for setting in QUICK) if key not in without]
    return kept + [f"{key}={value}" for key, value in changes.items()]


def trained(run_dir: Path, config) -> tuple[Path, dict]:
    """`run_dir` and the metrics of `sgh.pipeline.run(config, run_dir)`: a finished run."""
    from sgh.pipeline import run

    return run_dir, run(config, run_dir)


def start_training(run_dir: Path, *arguments: str) -> subprocess.Popen:
    """`sgh-train` with `arguments` writing `run_dir`, started as a process (output piped)."""
    return subprocess.Popen([sys.executable, "-m", "sgh.cli.train", *arguments,
                             f"hydra.run.dir={run_dir}"],
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def run_codes(run_dir: Path) -> dict[str, np.ndarray]:
    """The database and query codes of a finished run (its `codes.npz`)."""
    with np.load(run_dir / "codes.npz", allow_pickle=False) as codes:
        return {key: codes[key] for key in ("database", "query")}


def labelled_arrays(n_train: int = 20, n_test: int = 10, dim: int = 4,
                    rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
    """The arrays of a small labelled `.npz` (`X_train`, `y_train`, `X_test`, `y_test`: normal
    features, 3 classes), drawn from `rng` (None: seed 0)."""
    rng = np.random.default_rng(0) if rng is None else rng
    return {"X_train": rng.normal(size=(n_train, dim)), "y_train": rng.integers(0, 3, n_train),
            "X_test": rng.normal(size=(n_test, dim)), "y_test": rng.integers(0, 3, n_test)}


def compose_config(*overrides: str, config_name: str = "train"):
    """The typed configuration `sgh-train` (or `sgh-eval`, `sgh-encode`) would run with."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return OmegaConf.to_object(compose(config_name, overrides=list(overrides)))


def hamming_distances(query_packed: np.ndarray, database_packed: np.ndarray) -> np.ndarray:
    """All pairwise Hamming distances by brute force on unpacked bits (the tests' oracle)."""
    query_bits = np.unpackbits(np.asarray(query_packed, np.uint8), axis=1).astype(bool)
    database_bits = np.unpackbits(np.asarray(database_packed, np.uint8), axis=1).astype(bool)
    if query_bits.shape[1] != database_bits.shape[1]:
        raise ValueError("query and database codes have different widths")
    return (query_bits[:, None, :] != database_bits[None, :, :]).sum(axis=2)


def order_of_distances(distances: np.ndarray, depth: int) -> np.ndarray:
    """The first `depth` ids of each row of integer distances, ties by id (a stable argsort)."""
    return np.argsort(np.asarray(distances, np.int64), axis=1, kind="stable")[:, :depth]


def assert_same_split(split, expected) -> None:
    """Two `RetrievalSplit`s hold the same arrays (dtype and values), protocol, feature
    conversion and similarity: the same dataset read through two formats."""
    for field in ("train", "database", "query", "groundtruth", "database_labels",
                  "query_labels"):
        got, want = getattr(split, field), getattr(expected, field)
        assert (got is None) == (want is None), field
        if want is not None:
            assert got.dtype == want.dtype, field
            np.testing.assert_array_equal(got, want, err_msg=field)
    assert (split.protocol, split.feature_conversion, split.similarity) == (
        expected.protocol, expected.feature_conversion, expected.similarity)


def damage(path: Path, position: float, flip: int, cut: bool) -> None:
    """Damage a file in place as a bad disk or copy would: cut it at the relative `position`,
    or XOR the byte there with `flip`."""
    data = bytearray(Path(path).read_bytes())
    at = min(int(position * len(data)), len(data) - 1)
    if cut:
        del data[at:]
    else:
        data[at] ^= flip
    Path(path).write_bytes(bytes(data))


def fresh_python(program: str) -> str:
    """What `program` prints when run by a fresh interpreter (nothing imported yet: what an
    import loads is its own doing); a failure shows its stderr."""
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def modules_loaded_by(imports: str, watched: tuple[str, ...]) -> list[str]:
    """Which of `watched` a fresh interpreter has loaded after running `imports`."""
    return eval(fresh_python(f"import sys\n{imports}\n"
                             f"print(sorted(m for m in {watched!r} if m in sys.modules))"))


def files_below(folder: Path) -> dict[str, bytes | str | None]:
    """Every entry below `folder` by relative path: a file's bytes, a link's target, None for a
    directory (what a command must leave as it was)."""
    return {str(path.relative_to(folder)): (os.readlink(path) if path.is_symlink() else
                                            path.read_bytes() if path.is_file() else None)
            for path in sorted(folder.rglob("*"))}


def one_error_line(result, program: str, expected: str) -> str:
    """The one line a refused command printed (exit status 2, no traceback), holding
    `expected`."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"{program}: error: ") and expected in lines[0], lines[0]
    return lines[0]
