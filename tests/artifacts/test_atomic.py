"""Atomic writes: the target is the old version or the new one, complete, never half of one."""

import json
import os

import numpy as np
import pytest

from sgh.artifacts.atomic import atomic_directory, atomic_file, write_bytes, write_json


def _leftovers(folder):
    return [path.name for path in folder.iterdir() if path.name.endswith(".tmp")
            or ".tmp" in path.name]


def test_a_file_appears_only_when_the_block_succeeds(tmp_path):
    target = tmp_path / "sub" / "result.txt"
    write_bytes(target, b"old")
    with pytest.raises(RuntimeError), atomic_file(target) as temporary:
        temporary.write_text("half of the new")
        raise RuntimeError("crash while writing")
    assert target.read_bytes() == b"old"
    assert not _leftovers(target.parent)
    write_bytes(target, b"new")
    assert target.read_bytes() == b"new" and not _leftovers(target.parent)


def test_files_follow_the_umask_not_mkstemps_private_mode(tmp_path):
    previous = os.umask(0o022)
    try:
        write_bytes(tmp_path / "f", b"x")
    finally:
        os.umask(previous)
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o644


def test_the_suffix_ends_the_temporary_name_for_writers_that_insist(tmp_path):
    with atomic_file(tmp_path / "codes.npz", suffix=".npz") as temporary:
        assert temporary.name.endswith(".npz")
        np.savez(temporary, a=np.arange(3))  # would append ".npz" to any other name
    with np.load(tmp_path / "codes.npz") as loaded:
        np.testing.assert_array_equal(loaded["a"], np.arange(3))


def test_a_directory_is_swapped_in_whole_and_a_failure_keeps_the_old_one(tmp_path):
    target = tmp_path / "encoder"
    with atomic_directory(target) as staging:
        (staging / "a").write_text("1")
    with atomic_directory(target) as staging:  # replaces a non-empty directory
        (staging / "b").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["b"]
    with pytest.raises(RuntimeError), atomic_directory(target) as staging:
        (staging / "c").write_text("3")
        raise RuntimeError("crash while writing")
    assert sorted(p.name for p in target.iterdir()) == ["b"]
    assert not _leftovers(tmp_path)


def test_json_has_no_nan_and_numpy_scalars_become_numbers(tmp_path):
    write_json(tmp_path / "m.json", {"map": np.float32(0.5), "nan": float("nan"),
                                     "nested": [np.int64(3), float("inf")]})
    assert json.loads((tmp_path / "m.json").read_text()) == {
        "map": 0.5, "nan": None, "nested": [3, None]}
