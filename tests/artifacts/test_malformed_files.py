"""Every file the commands read back, malformed by hypothesis: refused in one clear error or read
consistently, never another exception (the readers of datasets are fuzzed in tests/data/)."""

import io
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgh.artifacts.codes_file import load_codes
from sgh.errors import UserInputError
from sgh.scores.asymmetric import decoder_score
from sgh.scores.score_set import ScoreSet

# SGH_FUZZ_EXAMPLES=N runs more examples (a longer hunt); CI runs the default.
FUZZ = settings(max_examples=int(os.environ.get("SGH_FUZZ_EXAMPLES", 30)), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def _valid_archives() -> dict[str, bytes]:
    """One valid file of each kind, as bytes, for the mutations to start from."""
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 256, (20, 2), dtype=np.uint8)
    out = {}
    buffer = io.BytesIO()
    np.savez(buffer, database=codes, query=codes[:4], bits=np.int64(16),
             groundtruth=np.tile(np.arange(10), (4, 1)))
    out["codes"] = buffer.getvalue()
    with tempfile.TemporaryDirectory() as folder:
        decoder_score(rng.normal(size=(16, 3)), np.zeros(3), "euclidean").save(
            Path(folder) / "score.npz")
        out["score"] = (Path(folder) / "score.npz").read_bytes()
    return out


VALID = _valid_archives()
READERS = {"codes": (load_codes, (UserInputError, ValueError)),
           "score": (ScoreSet.load_score, (ValueError,))}


def _read(kind: str, content: bytes) -> None:
    reader, refusals = READERS[kind]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{kind}.npz"
        path.write_bytes(content)
        try:
            reader(path)
        except refusals as error:
            assert "\n" not in str(error).strip() and str(path) in str(error)


@FUZZ
@given(kind=st.sampled_from(sorted(VALID)), content=st.binary(max_size=400))
def test_random_bytes_are_refused_in_one_line_naming_the_file(kind, content):
    _read(kind, content)


@FUZZ
@given(kind=st.sampled_from(sorted(VALID)), data=st.data())
def test_damaged_archives_are_refused_or_read(kind, data):
    content = bytearray(VALID[kind])
    if data.draw(st.booleans()):  # cut it short
        content = content[: data.draw(st.integers(0, len(content) - 1))]
    else:  # flip a few bytes
        for _ in range(data.draw(st.integers(1, 4))):
            position = data.draw(st.integers(0, len(content) - 1))
            content[position] ^= data.draw(st.integers(1, 255))
    _read(kind, bytes(content))


@FUZZ
@given(kind=st.sampled_from(sorted(VALID)), drop=st.integers(0, 5))
def test_an_archive_missing_a_member_is_refused_naming_the_file(kind, drop):
    source = zipfile.ZipFile(io.BytesIO(VALID[kind]))
    names = source.namelist()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as target:
        for index, name in enumerate(names):
            if index != drop % len(names):
                target.writestr(name, source.read(name))
    _read(kind, buffer.getvalue())


@FUZZ
@given(kind=st.sampled_from(sorted(VALID)), data=st.data())
def test_a_member_of_another_shape_or_type_is_refused_naming_the_file(kind, data):
    source = zipfile.ZipFile(io.BytesIO(VALID[kind]))
    names = source.namelist()
    replaced = data.draw(st.sampled_from(names))
    value = data.draw(st.sampled_from([np.zeros(3), np.array("text"), np.zeros((2, 2, 2)),
                                       np.float64(np.nan), np.int64(-1), np.zeros((0, 2))]))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as target:
        for name in names:
            if name == replaced:
                member = io.BytesIO()
                np.save(member, value)
                target.writestr(name, member.getvalue())
            else:
                target.writestr(name, source.read(name))
    _read(kind, buffer.getvalue())
