"""The on-disk cache of compiled training steps (`sgh.artifacts.compile_cache`): what
`enable()` tells TensorFlow, which entries it keeps, and (slow) that a warm, a cold and a
damaged cache all train to the same codes, in whole `sgh-train` processes whose TensorBoard
events are complete."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from sgh.artifacts import compile_cache
from sgh.model.quiet_tensorflow import cached_compilation
from tests.helpers import damage, run_codes


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh user cache and a process that has not enabled the compile cache yet."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("TF_XLA_FLAGS", raising=False)
    monkeypatch.delenv("SGH_COMPILE_CACHE", raising=False)
    monkeypatch.setattr(compile_cache, "_enabled", None)
    monkeypatch.setattr(compile_cache, "_removed", [])
    yield tmp_path / "sgh" / "xla"
    compile_cache.finish_tidying()  # no check left running into the next test


def _entry(directory, name, content=b"compiled step"):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{compile_cache._prefix()}__{name}__1__XLA_CPU_JIT.pb"
    path.write_bytes(content)
    return path


def test_enable_points_tensorflow_at_the_user_cache_with_a_versioned_prefix(cache):
    assert compile_cache.enable() == cache and cache.is_dir()
    flags = os.environ["TF_XLA_FLAGS"].split()
    assert f"--tf_xla_persistent_cache_directory={cache}" in flags
    assert f"--tf_xla_persistent_cache_prefix={compile_cache._prefix()}" in flags
    assert compile_cache._prefix().startswith("sgh-tf")


def test_a_child_process_replaces_the_inherited_flags_and_keeps_the_users(cache, monkeypatch):
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_always_defer_compilation=false")
    compile_cache.enable()
    first = os.environ["TF_XLA_FLAGS"]
    compile_cache.enable()  # what a child of an sgh process does: the same flags, once
    assert os.environ["TF_XLA_FLAGS"] == first
    assert first.startswith("--tf_xla_always_defer_compilation=false ")
    assert first.count("--tf_xla_persistent_cache_directory") == 1


@pytest.mark.parametrize("setting", ["off", "0", "FALSE"])
def test_switched_off(cache, monkeypatch, setting):
    monkeypatch.setenv("SGH_COMPILE_CACHE", setting)
    assert compile_cache.enable() is None and "TF_XLA_FLAGS" not in os.environ


def test_a_users_own_cache_directory_is_left_alone(cache, monkeypatch, tmp_path):
    own = f"--tf_xla_persistent_cache_directory={tmp_path / 'mine'}"
    monkeypatch.setenv("TF_XLA_FLAGS", own)
    assert compile_cache.enable() is None and os.environ["TF_XLA_FLAGS"] == own


def test_no_writable_cache_directory_means_no_cache(cache, monkeypatch):
    cache.parent.parent.mkdir(parents=True, exist_ok=True)
    (cache.parent).write_text("a file where the sgh cache directory should be")
    assert compile_cache.enable() is None and "TF_XLA_FLAGS" not in os.environ


def test_only_sealed_intact_entries_survive_enable(cache):
    sealed, unsealed, changed = (_entry(cache, name) for name in ("sealed", "new", "changed"))
    other_version = cache / "sgh-tf0.0.0-00000000__old__1__XLA_CPU_JIT.pb"
    other_version.write_bytes(b"not ours to judge")
    compile_cache._enabled = (cache, compile_cache._prefix())
    compile_cache.seal()
    compile_cache._enabled = None
    unsealed.with_name(unsealed.name + ".blake2b").unlink()  # written, not sealed: a killed run
    damage(changed, 0.5, 0x20, cut=False)  # sealed, then a flipped bit
    compile_cache.enable()
    compile_cache.finish_tidying()
    assert sorted(cache.glob("*.pb")) == sorted([sealed, other_version])
    assert not changed.with_name(changed.name + ".blake2b").exists()


def _aged(path, days):
    then = time.time() - days * 86400
    os.utime(path, (then, then))
    return path


def test_the_cache_is_bounded_in_age_and_size_whatever_made_its_entries(cache, monkeypatch,
                                                                       caplog):
    newest, newer, older = (_aged(_entry(cache, name, b"x" * 100), days)
                            for name, days in (("newest", 0), ("newer", 1), ("older", 2)))
    compile_cache._enabled = (cache, compile_cache._prefix())
    compile_cache.seal()
    compile_cache._enabled = None
    stale = cache / "sgh-tf0.0.0-00000000__old__1__XLA_CPU_JIT.pb"
    stale.write_bytes(b"another TensorFlow's")
    _aged(stale, compile_cache.MAX_AGE_DAYS + 1)
    orphan = cache / "sgh-tf0.0.0-00000000__gone__1__XLA_CPU_JIT.pb.blake2b"
    orphan.write_text("a seal whose entry another process removed")
    monkeypatch.setattr(compile_cache, "MAX_BYTES", 250)  # room for two of the three
    with caplog.at_level(logging.INFO, logger=compile_cache.__name__):
        compile_cache.enable()
        compile_cache.finish_tidying()
    assert sorted(cache.iterdir()) == sorted(
        [newest, newer, *(entry.with_name(entry.name + ".blake2b") for entry in (newest, newer))])
    said = caplog.text
    assert f"{older} removed (beyond the cache's" in said
    assert f"{stale} removed (older than {compile_cache.MAX_AGE_DAYS} days)" in said
    assert f"{orphan} removed (its entry is gone)" in said


def test_the_check_runs_beside_the_import_and_is_done_before_anything_is_sealed(
        cache, monkeypatch):
    release, checked = threading.Event(), []

    def held_check(entry):  # the check of an entry, held until the test lets it finish
        release.wait(timeout=30)
        checked.append(entry)
        return True

    monkeypatch.setattr(compile_cache, "_is_sealed", held_check)
    _entry(cache, "step")
    compile_cache.enable()  # returns while the check still waits: it runs in its own thread
    assert compile_cache._tidying.is_alive() and not checked
    threading.Timer(0.2, release.set).start()
    compile_cache.seal()  # what the first compiled call does: after the check, never during it
    assert checked and compile_cache._tidying is None


def test_seal_writes_one_digest_per_new_entry_and_nothing_before_enable(cache):
    entry = _entry(cache, "step")
    compile_cache.seal()  # not enabled: nothing to do
    assert not entry.with_name(entry.name + ".blake2b").exists()
    compile_cache.enable()
    compile_cache.finish_tidying()  # as import_tensorflow() does before any call can compile
    entry = _entry(cache, "step")  # what TensorFlow writes once a call has compiled
    compile_cache.seal()
    seal = entry.with_name(entry.name + ".blake2b")
    assert seal.read_text().strip() == compile_cache._digest(entry)
    assert not [path for path in cache.iterdir() if path.name.endswith(".tmp")]


def test_another_kind_of_cpu_uses_other_entries(cache, monkeypatch):
    here = compile_cache._prefix()
    assert compile_cache._host_cpu()  # this machine describes itself
    monkeypatch.setattr(compile_cache, "_host_cpu", lambda: "model name: another\nflags: sse2")
    assert compile_cache._prefix() != here  # e.g. no AVX-512: never loads code built for it


def _write_to_fd2(text):
    os.write(2, text.encode())


LOAD_NOISE = ("E0000 text_format.cc:378] Error parsing text-format "
              "tensorflow.XlaSerializedCacheEntry: 2:1: Expected identifier, got: :\n"
              "E0000 cpu_aot_loader.cc:220] Loading XLA:CPU AOT result. Target machine feature "
              "+prefer-no-scatter is not  supported on the host machine.\n")


def test_cached_compilation_holds_back_only_the_harmless_load_messages(cache, capfd):
    compile_cache.enable()
    with cached_compilation():
        _write_to_fd2(LOAD_NOISE + "W0000 something the user should see\n")
    assert capfd.readouterr().err == "W0000 something the user should see\n"
    with pytest.raises(RuntimeError), cached_compilation():
        _write_to_fd2("E0000 the reason the call failed\n")
        raise RuntimeError("the call failed")
    assert capfd.readouterr().err == "E0000 the reason the call failed\n"


def test_cached_compilation_touches_nothing_without_the_cache(cache, monkeypatch, capfd):
    monkeypatch.setenv("SGH_COMPILE_CACHE", "off")
    compile_cache.enable()
    with cached_compilation():
        _write_to_fd2(LOAD_NOISE)
    assert capfd.readouterr().err == LOAD_NOISE


ARGS = ["dataset=synthetic", "model.bits=16", "trainer.steps=200", "trainer.steps_per_call=100",
        "validation.every=0"]


def _train(run_dir, xdg):
    result = subprocess.run([sys.executable, "-m", "sgh.cli.train", *ARGS,
                             f"hydra.run.dir={run_dir}"], capture_output=True, text=True,
                            env={**os.environ, "XDG_CACHE_HOME": str(xdg)}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # Loading a cached step logs nothing the user would take for a fault.
    assert "XlaSerializedCacheEntry" not in result.stderr
    assert "Target machine feature" not in result.stderr
    return run_codes(run_dir)


@pytest.mark.slow
def test_cold_warm_and_damaged_caches_train_to_the_same_codes(tmp_path):
    xdg = tmp_path / "cache"
    cold = _train(tmp_path / "cold", xdg)
    entries = sorted((xdg / "sgh" / "xla").glob("*.pb"))
    assert entries and all(entry.with_name(entry.name + ".blake2b").exists()
                           for entry in entries)
    warm = _train(tmp_path / "warm", xdg)
    for entry in entries:  # a cut entry would fail TensorFlow's load: it must never reach it
        damage(entry, 0.5, 0, cut=True)
    repaired = _train(tmp_path / "repaired", xdg)
    for codes in (warm, repaired):
        for key in ("database", "query"):
            np.testing.assert_array_equal(codes[key], cold[key])
    assert all(compile_cache._digest(entry) == entry.with_name(entry.name + ".blake2b")
               .read_text().strip() for entry in sorted((xdg / "sgh" / "xla").glob("*.pb")))
    # These processes ended without their final garbage collection (sgh.cli.boundary): their
    # TensorBoard events are all on disk, the last call's and the final results too.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "repaired" / "tensorboard"),
                              size_guidance={"tensors": 0})
    events.Reload()
    assert [event.step for event in events.Tensors("loss/total")] == [100, 200]
    assert {"eval/map", "eval/recall10@100"} <= set(events.Tags()["tensors"])
