"""Inputs that ended in a traceback, a silent wrong result or a message blaming the wrong thing:
each is one clear line now.

    SGHHasher.load     a truncated weights.npz (BadZipFile), NaN weights (accepted), a
                       scores.npz of another code length (accepted)
    path length        a path beyond PATH_MAX made of short names was blamed on a 255-byte name

Each case is one problem of a probe of the product (issue 31). Two tiny fits of SGHHasher (a
few seconds with TensorFlow's import); the rest is numpy.
"""

from __future__ import annotations

import errno
import shutil

import numpy as np
import pytest

from sgh.artifacts.output_places import check_writable_place, disk_error_line
from sgh.errors import UserInputError
from tests.helpers import damage


def _message(call, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as raised:
        call(*args, **kwargs)
    message = str(raised.value)
    assert "\n" not in message, message
    return message


# ---- SGHHasher.load ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Two saved hashers of 8 features: 6 bits and 4 bits."""
    from sgh.training.sgh_hasher import SGHHasher

    x = np.random.default_rng(0).normal(size=(200, 8)).astype(np.float32)
    folder = tmp_path_factory.mktemp("hashers")
    for bits in (6, 4):
        SGHHasher(n_bits=bits, steps=4, steps_per_call=2, batch_size=2, jit_compile=False,
                  validation_every=0).fit(x).save(folder / f"{bits}-bits")
    return folder


def _copy(saved, tmp_path, bits=6):
    return shutil.copytree(saved / f"{bits}-bits", tmp_path / "hasher")


def _load_message(path) -> str:
    from sgh.training.sgh_hasher import SGHHasher

    with pytest.raises(UserInputError) as raised:
        SGHHasher.load(path)
    message = str(raised.value)
    assert "\n" not in message, message
    return message


def test_a_truncated_weights_file_is_one_line_naming_it(saved, tmp_path):
    hasher = _copy(saved, tmp_path)
    damage(hasher / "weights.npz", 0.5, 0, cut=True)
    assert _load_message(hasher).startswith(f"{hasher}: unreadable saved SGHHasher ("
                                            f"{hasher / 'weights.npz'}: corrupt or truncated "
                                            ".npz file")


def test_weights_that_are_not_finite_are_refused_naming_the_key(saved, tmp_path):
    hasher = _copy(saved, tmp_path)
    with np.load(hasher / "weights.npz") as arrays:
        weights = {key: arrays[key] for key in arrays.files}
    name = next(key for key, array in weights.items() if array.ndim == 2)
    weights[name][0, 0] = np.nan
    np.savez(hasher / "weights.npz", **weights)
    assert _load_message(hasher) == (
        f"{hasher / 'weights.npz'}: key {name!r} holds NaN or infinite values (1 of "
        f"{weights[name].size}); a fitted hasher's weights are finite: fit it and save it again")


def test_scores_of_another_code_length_are_refused_naming_both_files(saved, tmp_path):
    from sgh.training.sgh_hasher import SGHHasher

    hasher = _copy(saved, tmp_path)
    shutil.copy(saved / "4-bits" / "scores.npz", hasher / "scores.npz")
    assert _load_message(hasher).startswith(
        f"{hasher / 'scores.npz'}: its encoder score is for 4-bit codes, but "
        f"{hasher / 'hasher.json'} is a hasher of n_bits=6; the files are of different hashers")
    assert SGHHasher.load(saved / "6-bits").n_bits_ == 6  # its own scores: loaded


# ---- a path beyond PATH_MAX --------------------------------------------------------------------
def test_a_path_beyond_path_max_is_blamed_on_its_length_not_on_a_name(tmp_path):
    long_path = tmp_path.joinpath(*["d" * 200] * 21) / "scores.json"  # 21 x 201 > 4096 bytes
    with pytest.raises(UserInputError) as raised:
        check_writable_place("out", long_path, directory_wanted=False)
    message = str(raised.value)
    assert "a path may have at most 4095 bytes, whatever its names (each at most 255)" in message
    assert "the name" not in message and len(message) < 400, message
    line = disk_error_line(OSError(errno.ENAMETOOLONG, "File name too long", str(long_path)))
    assert "(absolute); a path may have at most 4095 bytes" in line, line
    # A name beyond 255 bytes is still named as the fault.
    line = disk_error_line(OSError(errno.ENAMETOOLONG, "File name too long",
                                   str(tmp_path / ("n" * 300))))
    assert "the name 'nnnnnnnnnnnnnnnnnnnnnnnn'... is 300 bytes; a file name may have at most " \
           "255 bytes" in line, line
