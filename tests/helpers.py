"""What many tests share: composing a configuration, small overrides, a brute-force oracle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from sgh.cli.schemas import register_configs
from sgh.resources import CONFIG_DIR

register_configs()

# The project's real datasets (MNIST, CIFAR-10 GIST, SIFT10K), beside the checkout; tests that
# need them skip when it is absent.
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# A run of seconds: synthetic data, few steps, short codes.
QUICK = ["dataset=synthetic", "trainer.steps=60", "trainer.batch_size=100",
         "trainer.steps_per_call=20", "model.bits=12"]


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
