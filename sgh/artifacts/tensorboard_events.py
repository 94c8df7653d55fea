"""TensorBoard event files, written without TensorFlow, so a baseline's run never imports it.

TensorBoard's own package makes the protocol buffers (`scalar_pb`, `histogram_pb`, `hparams_pb`,
plugin metadata) and frames the records (`RecordWriter`); the file is ours, since TensorBoard's
`EventFileWriter` opens it through `tf.io.gfile`, which imports TensorFlow. The files are the
ones `tf.summary` writes: the same plugins, tags, tensor layouts and steps.

`recording_to(directory)` makes a writer the current one for its block; `scalar`, `histogram`,
`image`, `tensor` and `hparams` write to it, and do nothing without one, so code that shows
something need not know whether anyone records. A writer given `if_lost` notices when its file
is deleted under it: it calls `if_lost(path, step)`, which may stop the run by raising, and
otherwise records on in a new file.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import itertools
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.histogram import summary_v2 as histogram_summary
from tensorboard.plugins.hparams import summary_v2 as hparams_summary
from tensorboard.plugins.image import metadata as image_metadata
from tensorboard.plugins.scalar import summary_v2 as scalar_summary
from tensorboard.summary.writer.record_writer import RecordWriter
from tensorboard.util import tensor_util

from sgh.artifacts.atomic import staging, staging_names_of

_files_opened = itertools.count()  # two files of one process in one second get two names
# TensorBoard takes every file whose name holds "tfevents" for events of the run in its
# directory, whatever else the name says (`io_wrapper.IsSummaryEventsFile`), and every directory
# holding one for a run: a file still being written is staged under a name without it.
_STAGED_EVENTS = Path("events")
STAGED_EVENT_FILES = staging_names_of(_STAGED_EVENTS)  # `.events.*.tmp*`


class EventFile:
    """A new event file in `directory`, named as TensorFlow names them (TensorBoard reads every
    ``events.out.tfevents.*`` file of a run's directory, in name order). `staged_at`: where its
    bytes go until the caller renames them to `path`, if not straight there."""

    def __init__(self, directory: str | Path, staged_at: Path | None = None,
                 if_lost: Callable[[Path, int], None] | None = None):
        self.directory, self._if_lost = Path(directory), if_lost
        self._open(staged_at)

    def _open(self, staged_at: Path | None = None) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / (
            f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
            f"{os.getpid()}.{next(_files_opened)}")
        self._file = open(staged_at or self.path, "wb")  # noqa: SIM115  (closed by close())
        self._records = RecordWriter(self._file)
        self.add(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def add(self, event: event_pb2.Event) -> None:
        # An unlinked file has no name left (st_nlink 0): one fstat per record, ~1 us.
        if self._if_lost is not None and os.fstat(self._file.fileno()).st_nlink == 0:
            self._if_lost(self.path, event.step)  # raises to stop; else a new file from here
            self._file.close()
            self._open()
        self._records.write(event.SerializeToString())
        # Each record reaches the file at once: TensorBoard shows a live run as it goes, and a
        # killed process loses nothing it wrote (a few events per compiled call: cheap).
        self._file.flush()

    def close(self) -> None:
        self._file.close()


_current: contextvars.ContextVar[EventFile | None] = contextvars.ContextVar(
    "sgh_tensorboard_writer", default=None)


@contextlib.contextmanager
def recording_to(directory: str | Path, staged_at: Path | None = None,
                 if_lost: Callable[[Path, int], None] | None = None) -> Iterator[EventFile]:
    """Record this block's summaries into a new event file in `directory` (yielded; written at
    `staged_at` until renamed; `if_lost`: `EventFile`); the file is closed, so complete on disk,
    when the block ends, however it ends (a process that exits without its final garbage
    collection, `sgh.cli.boundary`, needs that)."""
    writer = EventFile(directory, staged_at, if_lost)
    token = _current.set(writer)
    try:
        yield writer
    finally:
        _current.reset(token)
        writer.close()


@contextlib.contextmanager
def recording_as_the_only_file(directory: str | Path) -> Iterator[EventFile]:
    """Record this block's summaries as the one event file of `directory`, which the caller
    owns (`sgh.artifacts.atomic.refuse_to_replace`): the earlier ones are removed, so a rerun
    shows one set of summaries, not two. TensorBoard never reads it half-made: it is staged
    (`_STAGED_EVENTS`, `sgh.artifacts.atomic.staging`) and renamed into place on success."""
    directory = Path(directory)
    with staging(directory / _STAGED_EVENTS) as staged:
        with recording_to(directory, staged_at=staged) as writer:
            yield writer
        for earlier in directory.glob("events.out.tfevents.*"):
            earlier.unlink()
        os.replace(staged, writer.path)


def recording() -> bool:
    """Whether a summary written now would be kept (a block of `recording_to` is running)."""
    return _current.get() is not None


def _write(summary: summary_pb2.Summary, step: int) -> None:  # only while `recording()`
    _current.get().add(event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))


def scalar(tag: str, value: float, step: int, description: str | None = None) -> None:
    """One float32 value in the Scalars tab."""
    if recording():
        _write(scalar_summary.scalar_pb(tag, float(value), description=description), step)


def histogram(tag: str, values, step: int, description: str | None = None) -> None:
    """The values' distribution in the Histograms and Distributions tabs (TensorBoard's 30
    equal-width buckets, as `tf.summary.histogram`)."""
    if recording():  # histogram_pb flattens the values to float64 itself
        _write(histogram_summary.histogram_pb(tag, values, description=description), step)


def image(tag: str, pixels: np.ndarray, step: int, description: str | None = None) -> None:
    """One image in the Images tab: `pixels` (height, width, 1 or 3 channels), floats in [0, 1]
    (converted to 8 bits as `tf.image.convert_image_dtype` does) or uint8."""
    if not recording():
        return
    from PIL import Image  # only runs that show images pay for its import

    pixels = np.asarray(pixels)
    if pixels.dtype != np.uint8:
        pixels = np.clip(np.floor(pixels * 255.5), 0, 255).astype(np.uint8)
    if pixels.ndim == 3 and pixels.shape[2] == 1:
        pixels = pixels[:, :, 0]
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    encoded_image(tag, buffer.getvalue(), step, description)


def encoded_image(tag: str, png_bytes: bytes, step: int, description: str | None = None) -> None:
    """An image already encoded as PNG (a matplotlib figure's, say), in the Images tab (the
    image plugin's tensor: width, height, then the encoded image)."""
    if recording():
        from PIL import Image  # only runs that show images pay for its import

        width, height = Image.open(io.BytesIO(png_bytes)).size  # reads the header only
        metadata = image_metadata.create_summary_metadata(display_name=None,
                                                          description=description)
        tensor(tag, np.array([str(width).encode(), str(height).encode(), png_bytes],
                             dtype=object), step, metadata)


def tensor(tag: str, values: np.ndarray, step: int,
           metadata: summary_pb2.SummaryMetadata) -> None:
    """A tensor summary for the plugin that `metadata` names (the PR curve's, the image's)."""
    if recording():
        summary = summary_pb2.Summary()
        summary.value.add(tag=tag, metadata=metadata,
                          tensor=tensor_util.make_tensor_proto(values))
        _write(summary, step)


def hparams(values: Mapping[str, str | int | float | bool]) -> None:
    """This run as one session of the HParams tab, with these hyperparameter values (step 0,
    as `tensorboard.plugins.hparams.api.hparams`)."""
    if recording():
        _write(hparams_summary.hparams_pb(dict(values)), 0)
