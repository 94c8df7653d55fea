"""`sgh-encode`: packed codes for new data, streamed through a run's exported encoder.

    sgh-encode run=RUN_DIR input=FILE out=CODES.npy [key=NAME] [batch_size=N]
    sgh-encode encoder=ENCODER_DIR input=FILE out=CODES.npy ...     (any exported encoder)

Values are converted as at training (`sgh.cli.input_scale`), so the codes of a run's own data
equal its `codes.npz` bit for bit; what made them is recorded beside them in `<out>.json`. The
guide: docs/guide/export.md.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from sgh.artifacts.atomic import FileKind, atomic_file, refuse_to_replace, write_bytes
from sgh.artifacts.codes_file import record_path
from sgh.artifacts.output_places import check_writable_place
from sgh.artifacts.run_directory import RunDirectory
from sgh.artifacts.run_lock import refuse_a_run_being_written
from sgh.artifacts.run_outputs import refuse_a_run_file, refuse_a_runs_input
from sgh.cli.input_scale import (
    needs_unit_range,
    refuse_another_scale,
    refuse_unscaled_rows,
    scaled,
    training_scale,
)
from sgh.cli.out_file_command import run_out_file_command, writing_out
from sgh.config import INPUT_SCALES, EncodeCommandConfig
from sgh.data.vector_files import open_vectors
from sgh.errors import UserInputError, check_choice, check_int
from sgh.model.quiet_tensorflow import import_tensorflow


def _is_a_record(path: Path) -> bool:
    try:
        return json.loads(path.read_text()).get("written_by") == "sgh-encode"
    except (OSError, ValueError, AttributeError):
        return False


_RECORD = FileKind("sgh-encode's record of a codes file (written_by: sgh-encode)",
                   recognises=_is_a_record)


def _run_dir(config: EncodeCommandConfig) -> Path:
    """The run whose model encodes: `run=`, or the directory an `encoder=` lies in."""
    return Path(config.run) if config.run is not None else Path(config.encoder).parent


def _check_arguments(config: EncodeCommandConfig) -> None:
    if (config.run is None) == (config.encoder is None):
        raise UserInputError("give exactly one of run=DIR (an sgh-train run) or encoder=DIR (an "
                             "exported encoder)")
    for name in ("input", "out"):
        if getattr(config, name) is None:
            raise UserInputError(f"{name}= is missing; usage: sgh-encode run=RUN_DIR "
                                 "input=FILE out=CODES.npy [key=NAME] [batch_size=N]")
    if Path(config.out).suffix != ".npy":
        raise UserInputError(f"out={config.out}: the codes are written as .npy; accepted: a "
                             "path ending in .npy")
    if Path(config.out).is_dir():
        raise UserInputError(f"out={config.out}: is a directory; accepted: a path ending in .npy")
    if Path(config.out).exists() and Path(config.input).exists() \
            and os.path.samefile(config.out, config.input):
        raise UserInputError(f"out={config.out} is the input file, which the codes would "
                             "overwrite; accepted: another path ending in .npy")
    refuse_a_run_file("out", config.out, "codes.npy",
                      runs=() if config.run is None else (config.run,))
    refuse_to_replace(record_path(config.out), _RECORD,
                      elsewhere="choose another out= (its record goes to OUT.json)")
    run_dir = _run_dir(config)
    if config.run is not None or RunDirectory(run_dir, create=False).holds_a_run():
        refuse_a_runs_input("out", config.out, run_dir, "codes.npy")
    check_choice("input_scale", config.input_scale, INPUT_SCALES)
    check_int("batch_size", config.batch_size, 1)
    check_writable_place("out", config.out, directory_wanted=False)


def encode_file(config: EncodeCommandConfig) -> dict:
    """Encode `config.input` to `config.out`; print and return a summary."""
    _check_arguments(config)
    if config.run is not None:  # sgh-train exports the encoder when the run finishes
        run = RunDirectory(config.run, create=False)
        if not run.encoder.is_dir():
            refuse_a_run_being_written(run.path, f"{run.encoder.name}/")
    vectors = open_vectors(config.input, config.key)
    # Nothing is compared without a record (an encoder copied elsewhere, an older run, angular).
    run_dir = _run_dir(config)
    training = training_scale(RunDirectory(run_dir, create=False).feature_conversion,
                              config.input_scale, f"run={run_dir}")
    refuse_another_scale(vectors, training)
    if needs_unit_range(training, vectors.dtype):
        # The first batch now, before the TensorFlow import; every batch as it is encoded.
        rows = vectors.read(0, min(len(vectors), config.batch_size))
        refuse_unscaled_rows(scaled(rows, vectors, 0, config.input_scale)[0], vectors.dtype,
                             training, vectors.where, 0)
    # Only now, so that bad arguments and files fail before TensorFlow's import.
    import_tensorflow()
    from sgh.model.export import load_encoder, run_encoder_path

    out = Path(config.out)
    encoder_path = (run_encoder_path(config.run) if config.run is not None
                    else Path(config.encoder))
    encoder = load_encoder(encoder_path)
    n, dim = vectors.shape
    if dim != encoder.dim:
        raise UserInputError(f"{vectors.where} has {dim} features per vector but the encoder "
                             f"{encoder_path} takes {encoder.dim}; encode features of the kind "
                             "the run was trained on")
    started = time.perf_counter()
    conversion = _stream_codes(vectors, encoder, out, config.batch_size, training,
                               config.input_scale)
    seconds = time.perf_counter() - started
    record = {"written_by": "sgh-encode", "codes": out.name, "shape": [n, encoder.code_bytes],
              "bits": encoder.bits, "fingerprint": _model_fingerprint(config),
              "encoder": os.path.abspath(encoder_path), "input": os.path.abspath(config.input),
              "key": config.key, "conversion": conversion}
    write_bytes(record_path(out), (json.dumps(record, indent=1) + "\n").encode(), replaces=_RECORD)
    summary = {"n": n, "dim": dim, "bits": encoder.bits, "conversion": conversion,
               "seconds": seconds, "vectors_per_second": n / seconds if seconds > 0 else None,
               "out": str(out), "record": str(record_path(out)), "encoder": str(encoder_path),
               "fingerprint": record["fingerprint"]}
    print(f"[sgh] encoded {n} vectors of {vectors.where} (dim {dim}, {conversion}) to "
          f"{encoder.bits}-bit codes -> {out} ({n} x {encoder.code_bytes} uint8; model "
          f"{record['fingerprint']}, in {record_path(out).name}) in {seconds:.1f} s, "
          f"{n / max(seconds, 1e-9):,.0f} vectors/s", flush=True)
    return summary


def _model_fingerprint(config: EncodeCommandConfig) -> str | None:
    """The run's model fingerprint, as its codes.npz carries it; None without a run's score."""
    from sgh.scores.score_set import ScoreSet

    scores = RunDirectory(_run_dir(config), create=False).asymmetric_score
    try:
        return ScoreSet.load(scores).fingerprint if scores.is_file() else None
    except ValueError:  # damaged: the codes are the encoder's all the same, their model unnamed
        return None


def _stream_codes(vectors, encoder, out: Path, batch_size: int, training, input_scale: str) -> str:
    """Read, convert, encode and append `batch_size` rows at a time; return the conversion.
    A plain file handle, not `open_memmap`: a map's written pages stay resident until unmapped."""
    n = len(vectors)
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.uint8)),
              "fortran_order": False, "shape": (n, encoder.code_bytes)}
    conversion = None
    with atomic_file(out, suffix=".npy") as temporary, open(temporary, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        for start in range(0, n, batch_size):
            rows = vectors.read(start, min(start + batch_size, n))
            features, conversion = scaled(rows, vectors, start, input_scale)
            refuse_unscaled_rows(features, vectors.dtype, training, vectors.where, start)
            handle.write(encoder.encode_batch(features).tobytes())
        # An earlier record names another model's codes: gone before these take their place
        # (killed before the new record is written, the codes are left unnamed, not misnamed).
        record_path(out).unlink(missing_ok=True)
    return conversion


def _encode(config: EncodeCommandConfig) -> None:
    with writing_out("sgh-encode", config.out, f"out={config.out}"):
        encode_file(config)


def main() -> None:
    run_out_file_command("sgh-encode", "encode", _encode, _check_arguments, lambda job: job.out)


if __name__ == "__main__":
    main()
