"""What `--help` tells a user, and the command line read the way Hydra reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sgh.cli.hydra_command import _arguments
from sgh.cli.resources import CONFIG_DIR, DOCS_DIR


def test_train_help_lists_the_options_a_user_picks_and_no_schema(command_here, tmp_path):
    result = command_here("train", ["--help"], tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith("sgh-train: train a hasher")
    assert "powered by Hydra" not in result.stdout
    listed = dict(line.split(": ", 1) for line in result.stdout.split(
        "== Configuration groups (GROUP=OPTION) ==\n")[1].split("\n\n")[0].splitlines())
    on_disk = {group.name: ", ".join(sorted(option.stem for option in group.glob("*.yaml")))
               for group in CONFIG_DIR.iterdir() if group.is_dir() and group.name != "hydra"}
    assert listed == on_disk
    assert "model: itq, lsh, pcah, sgh, sh, sph" in result.stdout
    assert "schema" not in result.stdout
    assert "  bits: 32" in result.stdout  # the configuration follows, with its defaults


@pytest.mark.parametrize(("command", "program"), [("eval", "sgh-eval"), ("encode", "sgh-encode"),
                                                  ("compare", "sgh-compare")])
def test_the_other_commands_help_lists_their_own_keys_only(command_here, tmp_path, command,
                                                           program):
    result = command_here(command, ["--help"], tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith(f"{program}: ")
    assert "powered by Hydra" not in result.stdout and "dataset:" not in result.stdout
    assert "\nout: null" in result.stdout


@pytest.mark.parametrize("command", ["train", "eval", "encode", "index", "export", "compare"])
def test_help_ends_with_the_guide_and_the_key_reference_as_files_here(command_here, tmp_path,
                                                                      command):
    result = command_here(command, ["--help"], tmp_path)
    assert result.returncode == 0 and result.stderr == ""
    footer = result.stdout.splitlines()[-2:]
    assert [line.split(": ")[0] for line in footer] == ["Guide", "Every key"]
    pages = [Path(line.split(": ", 1)[1]) for line in footer]
    assert all(page.is_absolute() and page.is_file() for page in pages), footer
    assert pages[1] == DOCS_DIR / "reference" / "configuration.md"


def test_compare_help_prints_its_usage_and_keys(command_here, tmp_path):
    result = command_here("compare", ["--help"], tmp_path)
    assert result.returncode == 0 and result.stderr == ""
    assert "Usage: sgh-compare sweep=SWEEP_DIR [out=DIR] [tensorboard=false]" in result.stdout
    assert "\nsweep: null\nout: null\ntensorboard: true\n" in result.stdout
    assert result.stdout.splitlines()[-2] == f"Guide: {DOCS_DIR / 'guide' / 'training.md'}"


def test_the_command_line_is_read_by_hydras_own_parser():
    # Hydra's parser, not a copy of it: the overrides found are the ones @hydra.main reads,
    # whatever flags the installed Hydra has; a flag's value is not taken for an override.
    parsed = _arguments(["-m", "-cn", "train", "model.bits=8,16", "trainer=default"])
    assert parsed.overrides == ["model.bits=8,16", "trainer=default"]
    assert parsed.multirun and parsed.config_name == "train"
    assert _arguments(["--cfg", "job", "--resolve", "model.bits=8"]).overrides == ["model.bits=8"]


def test_rerunning_from_a_pickle_is_refused_in_one_line(command_here, tmp_path):
    (tmp_path / "config.pickle").write_bytes(b"not read")
    result = command_here("train", ["--experimental-rerun", str(tmp_path / "config.pickle")],
                          tmp_path)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "loads a pickle" in result.stderr


def test_help_into_a_closed_pipe_ends_without_a_traceback():
    # `sgh-eval --help | head -1`: the reader has gone before the help is written.
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # no reader at all: the first write fails, whatever the load
    try:
        result = subprocess.run([sys.executable, "-m", "sgh.cli.evaluate", "--help"],
                                stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write_end)
    assert result.returncode == 141
    assert result.stderr == ""
