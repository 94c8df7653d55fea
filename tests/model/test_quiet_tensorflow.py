"""`captured_stderr`: what C++ code writes to descriptor 2 is held back and handed over."""

import os

import pytest

from sgh.model.quiet_tensorflow import captured_stderr


def test_what_descriptor_2_receives_is_held_and_handed_over(capfd):
    with captured_stderr() as captured:
        os.write(2, b"E0000 from C++\n")
    assert captured.text == "E0000 from C++\n"
    assert capfd.readouterr().err == ""
    os.write(2, b"after\n")  # descriptor 2 is the terminal's again
    assert capfd.readouterr().err == "after\n"


def test_a_block_that_raises_still_hands_over_what_it_wrote(capfd):
    with pytest.raises(RuntimeError), captured_stderr() as captured:
        os.write(2, b"why it failed\n")
        raise RuntimeError("failed")
    assert captured.text == "why it failed\n" and capfd.readouterr().err == ""


def test_without_a_temporary_file_nothing_is_held(capfd, monkeypatch):
    def no_space():
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("tempfile.TemporaryFile", no_space)
    with captured_stderr() as captured:
        os.write(2, b"shown as usual\n")
    assert captured.text == "" and capfd.readouterr().err == "shown as usual\n"
