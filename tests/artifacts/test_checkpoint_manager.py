"""Checkpoints whose state file never names a checkpoint that is gone
(`sgh.artifacts.checkpoint_manager`): superseded ones are deleted only after the state file has
stopped naming them, so a process killed at any moment leaves only whole checkpoints listed."""

import re

import tensorflow as tf

from sgh.artifacts.checkpoint_manager import StateFirstCheckpointManager


def _listed(directory):
    return re.findall(r'all_model_checkpoint_paths: "([^"]+)"',
                      (directory / "checkpoint").read_text())


def test_a_superseded_checkpoint_is_deleted_only_once_the_state_file_leaves_it_out(
        tmp_path, monkeypatch):
    checkpoint = tf.train.Checkpoint(step=tf.Variable(0))
    manager = StateFirstCheckpointManager(checkpoint, str(tmp_path), max_to_keep=2,
                                          checkpoint_name="ckpt")
    deleted_while_listed, deleted = [], []
    delete = StateFirstCheckpointManager._delete_files

    def watched(prefix):  # what a kill -9 right now would leave: the state file as it is
        deleted.append(prefix)
        if any(prefix.endswith(name) for name in _listed(tmp_path)):
            deleted_while_listed.append(prefix)
        delete(prefix)

    monkeypatch.setattr(StateFirstCheckpointManager, "_delete_files", staticmethod(watched))
    for step in (100, 200, 300, 400):
        checkpoint.step.assign(step)
        manager.save(checkpoint_number=step)
        for name in _listed(tmp_path):  # every listed checkpoint is whole
            assert (tmp_path / f"{name}.index").is_file(), name
    assert [path.rsplit("/", 1)[-1] for path in deleted] == ["ckpt-100", "ckpt-200"]
    assert not deleted_while_listed
    assert _listed(tmp_path) == ["ckpt-300", "ckpt-400"]
    assert sorted(path.name for path in tmp_path.glob("ckpt-*.index")) == [
        "ckpt-300.index", "ckpt-400.index"]
    restored = tf.train.Checkpoint(step=tf.Variable(0))
    restored.restore(manager.latest_checkpoint).assert_consumed()
    assert int(restored.step.numpy()) == 400
