"""One writer per run directory: a second is refused in one line naming the holder, a lock whose
process was killed is taken over, a read-only directory is said as such, and the owner clears
what a killed writer left half-written. No TensorFlow: the holders are small Python processes."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sgh.artifacts.run_directory import RunDirectory
from sgh.artifacts.run_lock import run_lock, take_before_hydra
from sgh.errors import UserInputError

ROOT = Path(__file__).resolve().parents[2]


def _holder(run_dir):
    """A process that takes the lock, says so, and waits to be killed."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from sgh.artifacts.run_lock import run_lock\n"
         "with run_lock(sys.argv[1]):\n"
         "    print('locked', flush=True)\n"
         "    time.sleep(120)\n", str(run_dir)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "locked", process.stderr.read()
    return process


def test_the_lock_file_names_its_holder_and_is_free_after_the_block(tmp_path):
    run_dir = tmp_path / "run"
    with run_lock(run_dir) as lock_file:
        assert lock_file == run_dir / ".lock"
        holder = json.loads(lock_file.read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        assert holder["program"] == "sgh-train" and holder["since"]
        with pytest.raises(UserInputError, match="is in use by sgh-train"):
            with run_lock(run_dir):  # flock is per open file: refused in one process too
                pass
    assert lock_file.read_text() == ""  # no stale holder for the next reader
    with run_lock(run_dir):  # released
        pass
    assert not list(run_dir.glob("*.tmp"))  # the write probe is gone


def test_a_second_writer_is_refused_in_one_line_naming_the_holder(tmp_path):
    holder = _holder(tmp_path)
    try:
        with pytest.raises(UserInputError) as refused:
            with run_lock(tmp_path):
                pytest.fail("two writers in one run directory")
        message = str(refused.value)
        assert "\n" not in message
        assert message.startswith(f"{tmp_path} is in use by sgh-train (pid {holder.pid} on "
                                  f"{socket.gethostname()}, since ")
        assert message.endswith("; wait for it to finish, or choose another hydra.run.dir")
    finally:
        holder.kill()
        holder.wait()


def test_sgh_train_refuses_a_busy_directory_before_hydra_writes_into_it(tmp_path):
    holder = _holder(tmp_path)
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("- model.bits=32\n")
    try:
        with pytest.raises(UserInputError, match=f"is in use by sgh-train \\(pid {holder.pid}"):
            take_before_hydra(tmp_path)
        command = subprocess.run(
            [sys.executable, "-m", "sgh.cli.train", "dataset=synthetic", "model.bits=16",
             f"hydra.run.dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert command.returncode == 2 and f"pid {holder.pid}" in command.stderr
        # The running command's Hydra files are untouched.
        assert (tmp_path / ".hydra" / "overrides.yaml").read_text() == "- model.bits=32\n"
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_taken_before_hydra_is_the_one_the_run_holds(tmp_path):
    run_dir = tmp_path / "new"
    take_before_hydra(run_dir)  # the directory and its lock file made, and held
    assert json.loads((run_dir / ".lock").read_text())["pid"] == os.getpid()
    # Another process is refused from now on, before it writes anything...
    refused = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom sgh.artifacts.run_lock import take_before_hydra"
         "\ntake_before_hydra(sys.argv[1])", str(run_dir)], cwd=ROOT, capture_output=True,
        text=True, timeout=60)
    assert refused.returncode == 1 and f"pid {os.getpid()}" in refused.stderr
    # ...and this process's run goes on with the same lock, named through another spelling.
    with run_lock(tmp_path / "new" / ".." / "new"):
        pass
    with run_lock(run_dir):  # released at the end of the run
        pass


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path):
    holder = _holder(tmp_path)
    holder.send_signal(signal.SIGKILL)  # no cleanup runs: the kernel drops the lock
    holder.wait()
    assert json.loads((tmp_path / ".lock").read_text())["pid"] == holder.pid  # its details stay
    with run_lock(tmp_path) as lock_file:
        assert json.loads(lock_file.read_text())["pid"] == os.getpid()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_run_directory_is_refused_in_one_line_naming_it(tmp_path):
    for run_dir in (tmp_path / "read-only", tmp_path / "read-only-with-lock"):
        run_dir.mkdir()
        if run_dir.name.endswith("lock"):  # a lock file from before the chmod opens fine
            (run_dir / ".lock").touch()
        run_dir.chmod(0o555)
        try:
            with pytest.raises(UserInputError) as refused:
                with run_lock(run_dir):
                    pass
        finally:
            run_dir.chmod(0o755)
        assert str(refused.value) == (f"cannot write the run directory {run_dir} (Permission "
                                      "denied); make it writable, or choose another "
                                      "hydra.run.dir")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_sgh_train_into_a_read_only_directory_is_refused_before_training(tmp_path):
    from sgh.pipeline import run
    from tests.helpers import QUICK, compose_config

    expected = "^" + re.escape(f"cannot write the run directory {tmp_path} (Permission denied)")
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(UserInputError, match=expected):
            run(compose_config(*QUICK), tmp_path)
    finally:
        tmp_path.chmod(0o755)
    assert not list(tmp_path.iterdir())


def test_the_owner_removes_only_what_a_killed_writer_left_half_written(tmp_path):
    run = RunDirectory(tmp_path)
    stray = [".codes.npz.k2j3h4.tmp.npz", ".metrics.json.a8s7d6.tmp", ".encoder.x1y2z3.tmp",
             ".encoder.old-1a2b3c4d.tmp", "..lock.q9w8e7.tmp", "checkpoints/ckpt-250_temp",
             "checkpoints/checkpoint.tmp0123456789abcdef0123456789abcdef",
             "checkpoints/best/ckpt-500_temp"]
    kept = ["codes.npz", "metrics.json", ".eval.json.z9x8c7.tmp",  # sgh-eval's, maybe in flight
            "checkpoints/ckpt-250.index", "checkpoints/checkpoint", "encoder/saved_model.pb"]
    for name in stray + kept:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(("_temp", ".encoder.x1y2z3.tmp")):
            path.mkdir()
            (path / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"half")
        else:
            path.write_bytes(b"x")
    assert sorted(path.relative_to(tmp_path).as_posix()
                  for path in run.remove_stray_temporaries()) == sorted(stray)
    left = {path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*")
            if path.is_file()}
    assert left == set(kept)
