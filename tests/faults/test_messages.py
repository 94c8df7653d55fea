"""Messages that send the user the right way."""

import pytest

from sgh.artifacts.run_lock import run_lock
from sgh.errors import UserInputError


def test_a_directory_named_as_the_lock_file_is_named_not_the_run_directory(tmp_path):
    (tmp_path / ".lock").mkdir()
    with pytest.raises(UserInputError, match=rf"^{tmp_path}/.lock is a directory, where "
                                             "sgh-train keeps its lock file; move it away"):
        with run_lock(tmp_path):
            pass


def test_sgh_export_on_a_data_folder_says_it_is_no_run_not_to_resume_it(tmp_path):
    from sgh.artifacts.run_directory import RunDirectory

    (tmp_path / "features.npy").write_bytes(b"")
    with pytest.raises(UserInputError, match=rf"^run={tmp_path} is not an sgh-train run "
                                             "directory"):
        RunDirectory(tmp_path, create=False).read_metrics()
