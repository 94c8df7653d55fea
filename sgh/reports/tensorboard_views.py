"""What a run shows in TensorBoard beyond the loss curves: code health, the encoder's outputs,
images, the final PR curve, HParams and gradient norms.

Every ``write_*`` function writes into the current event writer
(``sgh.artifacts.tensorboard_events.recording_to``) and does nothing, not even the computation,
without one. None needs TensorFlow. Tags, by TensorBoard tab:

* Scalars: ``code_health/*`` (:func:`write_code_health`), ``gradients/*``
  (:func:`write_gradient_norms`), ``byte_decoder/*`` (:func:`write_byte_decoder_health`).
* Histograms: ``code_health/bit_balance``, ``encoder/logits``, ``encoder/probabilities``.
* Images: ``images/inputs_and_reconstructions``, ``images/decoder_templates``.
* PR Curves: ``pr_curve/hamming_lookup``.
* HParams: one session per run (:func:`write_hparams`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import expit  # sigmoid without overflow warnings for a saturated encoder
from tensorboard.plugins.pr_curve import metadata as pr_curve_metadata

from sgh.artifacts import tensorboard_events as events
from sgh.codes import code_health, pack_bits
from sgh.config import flatten_config
from sgh.metrics import label_histograms
from sgh.metrics.radius import pr_curve_of_histograms

if TYPE_CHECKING:  # the views of a model run where it trained, TensorFlow imported
    from sgh.model.sgh_model import SGH

PR_CURVE_TAG = "pr_curve/hamming_lookup"
# TensorBoard shows images at their own size, so small ones are upscaled (nearest neighbour) to
# tiles at least this many pixels high: 8x8 digits would be a speck.
MIN_TILE_PIXELS = 48
IMAGES_SHOWN = 8

CODE_HEALTH_DESCRIPTIONS = {  # shown in TensorBoard next to each scalar
    "distinct_codes": "number of different codes in the sample",
    "dead_bits": "bits with the same value in every code of the sample",
    "mean_abs_bit_correlation": "mean |Pearson correlation| over pairs of live bits",
    "code_entropy": "-sum_c f_c log2 f_c over the distinct codes c (frequency f_c), in bits; "
                    "at most min(bits, log2 n)",
    "bit_entropy_sum": "sum over bits of H(p_j), in bits: the code entropy if bits were "
                       "independent; the gap to code_entropy is redundancy",
    "balance_deviation": "mean over bits of |p_j - 1/2|, p_j = fraction of codes with bit j "
                         "set: 0 ideal, 0.5 all bits dead",
    "bit_balance_min": "smallest p_j over bits",
    "bit_balance_max": "largest p_j over bits",
}


def write_code_health(bits: np.ndarray, step: int) -> dict:
    """Scalars ``code_health/<name>`` (:func:`sgh.codes.code_health`) and the histogram
    ``code_health/bit_balance`` of a sample's ``(n, bits)`` 0/1 codes; returns the scalars."""
    if not events.recording():
        return {}
    bits = np.asarray(bits)
    if bits.ndim != 2 or bits.shape[0] == 0 or bits.shape[1] == 0:
        raise ValueError(f"write_code_health expects a non-empty (n, bits) array, got shape "
                         f"{bits.shape}")
    health = code_health(pack_bits(bits), bits.shape[1])
    balance = np.asarray(health["bit_balance"])
    scalars = {name: health[name] for name in
               ("distinct_codes", "dead_bits", "mean_abs_bit_correlation", "code_entropy")}
    scalars.update(bit_entropy_sum=float(np.sum(health["bit_entropy"])),
                   balance_deviation=float(np.mean(np.abs(balance - 0.5))),
                   bit_balance_min=float(balance.min()), bit_balance_max=float(balance.max()))
    for name, value in scalars.items():
        events.scalar(f"code_health/{name}", value, step=step,
                      description=CODE_HEALTH_DESCRIPTIONS[name])
    events.histogram("code_health/bit_balance", balance, step=step,
                     description="fraction of the sample's codes with bit j set, per bit")
    return scalars


def write_byte_decoder_health(model: SGH, x_sample: np.ndarray, step: int) -> dict:
    """For a model with byte tables (`model.decoder=bytes`), scalars of its decoder as it
    stands on a sample coded by the encoder: ``byte_decoder/reconstruction`` (1/2 ||x - x^||^2
    per item, input units) and ``byte_decoder/mode_share_byte_<j>`` (the share of items whose
    byte j is the decoder's best given their other bytes), and ``byte_decoder/mode_share``
    (every byte). Returns the scalars ({} for another decoder)."""
    decoder = model.byte_decoder()
    if decoder is None or not events.recording():
        return {}
    x_sample = np.asarray(x_sample, np.float32)
    codes = pack_bits(np.asarray(model.encode_bits(x_sample)))
    residual = x_sample - decoder.decode(codes)
    modes = decoder.conditional_modes(x_sample, codes)
    scalars = {"reconstruction": float(0.5 * np.einsum("ij,ij->i", residual, residual).mean()),
               "mode_share": float(modes.all(axis=1).mean()),
               **{f"mode_share_byte_{j}": float(share) for j, share in
                  enumerate(modes.mean(axis=0))}}
    for name, value in scalars.items():
        events.scalar(f"byte_decoder/{name}", value, step=step, description=(
            "1/2 ||x - x^(h)||^2 per item of the encoder's codes h, input units"
            if name == "reconstruction" else
            "share of items whose code byte(s) the decoder would keep given the others: "
            "how often the encoder's code is the posterior mode, byte by byte"))
    return scalars


def write_encoder_histograms(model: SGH, x_sample: np.ndarray, step: int) -> None:
    """Histograms ``encoder/logits`` (z = x~ W + b) and ``encoder/probabilities`` (sigmoid(z))
    over all ``n * bits`` values of the sample."""
    if not events.recording():
        return
    logits = np.asarray(model.logits(np.asarray(x_sample, np.float32)), np.float64)
    events.histogram("encoder/logits", logits, step=step,
                     description="z = ((x - mean) / scale) W + b over the sample, all bits")
    events.histogram("encoder/probabilities", expit(logits), step=step,
                     description="p = sigmoid(z): probability that each bit is 1")


def infer_image_shape(dim: int) -> tuple[int, int, int] | None:
    """(side, side, 1) when ``dim`` is a square of a side >= 8 (MNIST 784, digits 64), else None.

    Colour images need an explicit ``image_shape``: their flattening order (HWC or CHW) is unknown.
    """
    side = math.isqrt(int(dim))
    return (side, side, 1) if side * side == dim and side >= 8 else None


def write_images(model: SGH, x_sample: np.ndarray, step: int,
                 image_shape: tuple[int, ...] | None = None) -> bool:
    """Inputs over their reconstructions (``images/inputs_and_reconstructions``) and the
    decoder's templates (``images/decoder_templates``). ``image_shape``: ``(height, width[, 1 or
    3])``, row-major; None infers a square grey image. Returns whether images were written.
    """
    x_sample = np.asarray(x_sample, np.float32)
    if x_sample.ndim != 2 or x_sample.shape[0] == 0:
        raise ValueError(f"write_images expects a non-empty (n, dim) sample, got shape "
                         f"{x_sample.shape}")
    shape = _image_shape(x_sample.shape[1], image_shape)
    if shape is None or not events.recording():
        return False
    shown = x_sample[:IMAGES_SHOWN]
    reconstructions = np.asarray(model.reconstruct(shown))
    low, high = float(x_sample.min()), float(x_sample.max())
    scale = high - low if high > low else 1.0
    pair_rows = np.stack([shown, reconstructions])  # (2, items, dim): inputs, reconstructions
    display = np.clip((pair_rows - low) / scale, 0.0, 1.0).reshape(2, len(shown), *shape)
    grid = _grid(display.reshape(-1, *shape), columns=len(shown))
    events.image("images/inputs_and_reconstructions", grid, step=step,
                 description="top: inputs; bottom: reconstructions from the codes "
                             "h = 1[p >= 1/2]; both on the inputs' [min, max] scale")
    templates = np.asarray(model.decoder_templates())
    peak = np.abs(templates).max(axis=1, keepdims=True)
    signed = 0.5 + templates / (2.0 * np.where(peak > 0, peak, 1.0))
    grid = _grid(signed.reshape(-1, *shape), columns=min(len(templates), 8))
    events.image("images/decoder_templates", grid, step=step,
                 description="row k of the decoder (what bit k adds), each scaled on its "
                             "own: mid-grey = 0, bright = positive")
    return True


def _image_shape(dim: int, image_shape) -> tuple[int, int, int] | None:
    if image_shape is None:
        return infer_image_shape(dim)
    shape = tuple(int(size) for size in image_shape)
    if len(shape) == 2:
        shape += (1,)
    if len(shape) != 3 or shape[2] not in (1, 3) or math.prod(shape) != dim:
        raise ValueError(f"image_shape={image_shape!r} does not fit {dim} features; accepted: "
                         "(height, width) or (height, width, 1 or 3) whose product is the "
                         "feature dimension")
    return shape


def _grid(tiles: np.ndarray, columns: int) -> np.ndarray:
    """(n, h, w, c) tiles in [0, 1] -> one (H, W, c) image, rows of ``columns``, 1 px white gaps;
    tiles upscaled to at least MIN_TILE_PIXELS high."""
    factor = max(1, -(-MIN_TILE_PIXELS // tiles.shape[1]))
    tiles = tiles.repeat(factor, axis=1).repeat(factor, axis=2)
    n, height, width, channels = tiles.shape
    rows = -(-n // columns)
    grid = np.ones((rows * (height + 1) - 1, columns * (width + 1) - 1, channels), np.float32)
    for index, tile in enumerate(tiles):
        row, column = divmod(index, columns)
        grid[row * (height + 1):row * (height + 1) + height,
             column * (width + 1):column * (width + 1) + width] = tile
    return grid


def write_pr_curve(query_codes: np.ndarray, database_codes: np.ndarray, bits: int,
                   query_labels: np.ndarray, database_labels: np.ndarray, step: int) -> dict:
    """Hash-lookup precision and recall at every Hamming radius, in TensorBoard's PR Curves tab;
    returns :func:`sgh.metrics.pr_curve`'s dict (empty when nothing is recorded).

    TensorBoard's threshold axis runs 0..1 from "everything retrieved" to "strictest", so point
    i of ``bits + 1`` (threshold ``i / bits``) is radius ``r = bits - i``. The TP/FP/TN/FN counts
    are totals over the queries averaged over (float32: exact up to 2**24).
    """
    if not events.recording():
        return {}
    # One scan gives both the curve and the TP/FP/TN/FN counts the plugin shows.
    histograms = label_histograms(query_codes, database_codes, bits, query_labels,
                                  database_labels)
    curve = pr_curve_of_histograms(histograms)
    scored = histograms.relevant.sum(axis=1) > 0  # the queries pr_curve averages over
    retrieved = np.cumsum(histograms.counts[scored], axis=1).sum(axis=0)
    true_positives = np.cumsum(histograms.relevant[scored], axis=1).sum(axis=0)
    false_negatives = true_positives[-1] - true_positives
    true_negatives = int(scored.sum()) * histograms.n_database - retrieved - false_negatives
    by_threshold = np.stack([  # the plugin's row order; columns: radius bits, bits-1, ..., 0
        true_positives, retrieved - true_positives, true_negatives, false_negatives,
        curve["precision"], curve["recall"]]).astype(np.float32)[:, ::-1]
    plugin_metadata = pr_curve_metadata.create_summary_metadata(
        display_name="hash lookup, label relevance",
        description=("precision / recall of lookup within Hamming radius r = bits - i at "
                     f"threshold i/bits (bits = {bits}); means over queries"),
        num_thresholds=bits + 1)
    events.tensor(PR_CURVE_TAG, np.ascontiguousarray(by_threshold), step, plugin_metadata)
    return curve


def hparams_of(config) -> dict[str, str | int | float | bool]:
    """A configuration (`sgh.config.Config`, or a nested or flat mapping) as HParams values,
    ``{"model.bits": 32, ...}``. HParams holds only numbers, strings and bools, so anything else
    becomes its ``str`` (``"[1, 10]"``); an empty section gives nothing.
    """
    values: dict[str, str | int | float | bool] = {}
    for name, value in flatten_config(config).items():
        if isinstance(value, Mapping) and not value:
            continue
        if isinstance(value, (bool, int, float, str)):
            values[name] = value
        elif isinstance(value, np.generic):
            values[name] = value.item()
        else:
            values[name] = str(value)
    return values


def write_hparams(config) -> None:
    """This run as one HParams session of its configuration (see :func:`hparams_of`).

    No experiment summary on purpose: TensorBoard then builds the table from every run under
    ``--logdir``, with the union of their hyperparameters (SGH beside baselines) and a metric
    column per scalar tag; a declared metric list would be taken from one arbitrary run.
    """
    if events.recording():
        events.hparams(hparams_of(config))


def write_gradient_norms(norms: Mapping[str, float], step: int) -> None:
    """Scalars ``gradients/<name>``: L2 norms of the objective's gradient (``global``, ``W``)."""
    for name, value in norms.items():
        events.scalar(f"gradients/{name}", value, step=step)


# Final numbers shown as `eval/<key>` scalars: the retrieval metrics and the code-health counts.
FINAL_SCALAR_PREFIXES = ("map", "recall", "precision")
FINAL_SCALAR_KEYS = ("distinct_database_codes", "dead_bits", "mean_abs_bit_correlation")


def write_final_scalars(metrics: Mapping, step: int) -> None:
    """The run's final retrieval numbers as scalars ``eval/<key>`` of ``metrics.json``."""
    for key, value in metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (
                key.startswith(FINAL_SCALAR_PREFIXES) or key in FINAL_SCALAR_KEYS):
            events.scalar(f"eval/{key}", value, step=step)


def write_shortlist_curve(curve: Mapping) -> None:
    """The two-stage search's trade-off (`sgh.metrics.shortlist_curve`) as scalars
    ``search/<recall key>`` and ``search/queries_per_second`` whose step is the shortlist size."""
    recall_key = next(key for key in curve if key.startswith("recall"))
    for size, recall, rate in zip(curve["shortlist"], curve[recall_key],
                                  curve["queries_per_second"], strict=True):
        events.scalar(f"search/{recall_key}", recall, step=size,
                      description=f"{recall_key} of the two-stage search (the encoder "
                                  "score's top S, rescored), step = S")
        events.scalar("search/queries_per_second", rate, step=size,
                      description="queries/s of the two-stage search, step = S (this "
                                  "machine, faiss's threads)")


def write_run_summary(config, metrics: Mapping, split, codes: Mapping) -> None:
    """What TensorBoard shows of a finished run, SGH or baseline: the final ``eval/*`` scalars,
    its HParams row, and (labelled data) the PR curve of its final codes."""
    step = int(metrics.get("steps", 0))
    write_final_scalars(metrics, step)
    if "shortlist_curve" in metrics:
        write_shortlist_curve(metrics["shortlist_curve"])
    write_hparams(config)
    if split.has_labels:
        write_pr_curve(codes["query"], codes["database"], config.model.bits,
                       split.query_labels, split.database_labels, step=step)
