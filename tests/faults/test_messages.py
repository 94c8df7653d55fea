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
