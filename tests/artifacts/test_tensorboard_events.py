"""TensorBoard's event files written without TensorFlow (`sgh.artifacts.tensorboard_events`):
each kind of summary reads back, through TensorBoard's own reader, as the one `tf.summary`
writes for the same values (plugin, dtype, shape, values, step); a live run's records are on disk
as they are written; nothing is recorded outside a block."""

import io

import numpy as np
import pytest
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.plugins.pr_curve import metadata as pr_curve_metadata
from tensorboard.util import tensor_util

from sgh.artifacts import tensorboard_events as events

VALUES = np.random.default_rng(0).normal(size=500)
PIXELS = np.random.default_rng(1).uniform(size=(6, 10, 1)).astype(np.float32)
PR_TABLE = np.random.default_rng(2).uniform(size=(6, 5)).astype(np.float32)
HPARAMS = {"model.bits": 32, "trainer.learning_rate": 0.003, "model.name": "sgh",
           "trainer.jit_compile": True}


def _read(logdir):
    accumulator = EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    accumulator.Reload()
    return accumulator


def _ours(logdir):
    with events.recording_to(logdir):
        events.scalar("a/scalar", 0.25, step=7, description="a quarter")
        events.histogram("a/histogram", VALUES, step=7)
        events.image("a/image", PIXELS, step=7, description="noise")
        events.tensor("a/pr_curve", PR_TABLE, 7, pr_curve_metadata.create_summary_metadata(
            display_name="pr", description="", num_thresholds=5))
        events.hparams(HPARAMS)


def _tensorflows(logdir):
    tf = pytest.importorskip("tensorflow")
    from tensorboard.plugins.hparams import api as hparams_api

    writer = tf.summary.create_file_writer(str(logdir))
    with writer.as_default():
        tf.summary.scalar("a/scalar", 0.25, step=7, description="a quarter")
        tf.summary.histogram("a/histogram", VALUES, step=7)
        tf.summary.image("a/image", PIXELS[np.newaxis], step=7, description="noise")
        tf.summary.write("a/pr_curve", tf.constant(PR_TABLE), step=7,
                         metadata=pr_curve_metadata.create_summary_metadata(
                             display_name="pr", description="",
                             num_thresholds=5).SerializeToString())
        hparams_api.hparams(HPARAMS)
    writer.close()


def test_every_summary_reads_back_as_tensorflows_own(tmp_path):
    _ours(tmp_path / "ours")
    _tensorflows(tmp_path / "tensorflow")
    ours, theirs = _read(tmp_path / "ours"), _read(tmp_path / "tensorflow")
    assert ours.Tags()["tensors"] == theirs.Tags()["tensors"]
    for tag in ours.Tags()["tensors"]:
        mine, reference = ours.Tensors(tag)[-1], theirs.Tensors(tag)[-1]
        assert mine.step == reference.step, tag
        assert (ours.SummaryMetadata(tag).plugin_data.plugin_name
                == theirs.SummaryMetadata(tag).plugin_data.plugin_name), tag
        assert ours.SummaryMetadata(tag).summary_description == theirs.SummaryMetadata(
            tag).summary_description, tag
        if tag == "a/image":  # width, height, then a PNG: the same pixels once decoded
            mine_strings = mine.tensor_proto.string_val
            assert mine_strings[:2] == reference.tensor_proto.string_val[:2] == [b"10", b"6"]
            decoded = [np.asarray(Image.open(io.BytesIO(strings[2])))
                       for strings in (mine_strings, reference.tensor_proto.string_val)]
            np.testing.assert_array_equal(*decoded)
            continue
        mine_values = tensor_util.make_ndarray(mine.tensor_proto)
        reference_values = tensor_util.make_ndarray(reference.tensor_proto)
        assert mine_values.dtype == reference_values.dtype, tag
        if tag == "_hparams_/session_start_info":
            continue  # holds the start time; its plugin data are compared below
        np.testing.assert_allclose(mine_values, reference_values, rtol=1e-6, err_msg=tag)
    start = "_hparams_/session_start_info"
    mine, reference = (accumulator.SummaryMetadata(start).plugin_data.content
                       for accumulator in (ours, theirs))
    mine, reference = (plugin_data_pb2.HParamsPluginData.FromString(data).session_start_info
                       for data in (mine, reference))
    assert dict(mine.hparams) == dict(reference.hparams)


def test_a_live_runs_records_are_on_disk_as_they_are_written(tmp_path):
    with events.recording_to(tmp_path):
        events.scalar("loss/total", 1.5, step=100)
        accumulator = _read(tmp_path)  # while the block, the file, is still open
        assert [event.step for event in accumulator.Tensors("loss/total")] == [100]


def test_nothing_is_recorded_outside_a_block(tmp_path):
    assert not events.recording()
    events.scalar("loss/total", 1.5, step=1)  # a no-op, not an error
    with events.recording_to(tmp_path):
        assert events.recording()
    assert not events.recording()
    assert _read(tmp_path).Tags()["tensors"] == []
