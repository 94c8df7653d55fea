"""What the command tests share: running a command's `main` in this process."""

from __future__ import annotations

import importlib
import logging.config
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

PROGRAMS = {"train": ("sgh-train", "sgh.cli.train"), "eval": ("sgh-eval", "sgh.cli.evaluate"),
            "encode": ("sgh-encode", "sgh.cli.encode"),
            "compare": ("sgh-compare", "sgh.cli.compare"), "index": ("sgh-index", "sgh.cli.index"),
            "export": ("sgh-export", "sgh.cli.export")}


@pytest.fixture
def command_here(capsys, monkeypatch):
    """A command's `main` in this process: (returncode, stdout, stderr) like `subprocess.run`."""
    # Hydra's logging set-up stays out of it: configuring logging from a dict closes every
    # existing handler (those of the test session's capture too), and the errors are printed,
    # not logged. Hydra configures through the standard library's DictConfigurator.
    monkeypatch.setattr(logging.config.DictConfigurator, "configure", lambda self: None)

    def call(command: str, arguments: list[str], cwd: Path, debug: bool = False):
        program, module = PROGRAMS[command]
        main = importlib.import_module(module).main
        monkeypatch.chdir(cwd)
        monkeypatch.delenv("SGH_DEBUG", raising=False)  # the caller's shell is not the test's
        if debug:
            monkeypatch.setenv("SGH_DEBUG", "1")
        monkeypatch.setattr(sys, "argv", [program, *arguments])
        capsys.readouterr()
        try:
            main()
            returncode = 0
        except SystemExit as exit_:
            returncode = exit_.code
        captured = capsys.readouterr()
        return SimpleNamespace(returncode=returncode, stdout=captured.out, stderr=captured.err)

    return call
