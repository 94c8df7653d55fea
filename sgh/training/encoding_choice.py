"""The byte decoder of a trained model, and how its index encodes items, chosen on validation.

A model with byte tables (`model.decoder=bytes`) brings its own decoder, refitted by least
squares to the codes its index stores (`ByteDecoder.refitted`); any other gets one fitted after
training from its encoder's codes (`ByteDecoder.fit`). Each encoding of `VALIDATED_ENCODINGS`
(`sgh.scores.posterior_modes`) then codes the validation database from the encoder's codes as
`SGHIndex` makes them (the signs of its score's bit weights), and the held-out queries are
ranked by the decoder against it: the figure is Recall K@100, ties by id. The default encoding
is the fastest within `ENCODING_TOLERANCE` of the best figure: beyond the encoder's own codes,
each step costs a multiple of the encoder's time for a smaller gain (docs/guide/search.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from sgh.codes import pack_bits
from sgh.metrics.neighbour_recall import recall_of_results
from sgh.scores.asymmetric import AsymmetricScore
from sgh.scores.asymmetric_index import AsymmetricIndex
from sgh.scores.byte_decoder import ByteDecoder

logger = logging.getLogger(__name__)

# The encodings measured, fastest first.
VALIDATED_ENCODINGS = ("encoder", "flip4", "flip5", "flip6", "local_search")
# A faster encoding is the default if its validation Recall K@100 is at most this far below the
# best encoding's (5 true neighbours in the 1,000 of a hundred queries).
ENCODING_TOLERANCE = 0.005
# Without a validation split: the encoding that searches hardest, unmeasured.
UNVALIDATED_ENCODING = "local_search"
CUTOFF = 100  # the figure's rank cut-off: Recall K@100, the paper's
# Squared norms up to this leave room for the sums of squares the decoder computes in float32.
FLOAT32_ROOM = float(np.finfo(np.float32).max) / 64


@dataclass(frozen=True)
class EncodingChoice:
    """``decoder``; ``encoding``, the default; ``figures``: each encoding's validation recall."""

    decoder: ByteDecoder
    encoding: str
    figures: dict[str, float]


def byte_decoder_choice(model, encoder: AsymmetricScore, database: np.ndarray,
                        queries: np.ndarray | None = None, groundtruth: np.ndarray | None = None,
                        recall_k: int = 10) -> EncodingChoice | None:
    """The decoder an index of ``model`` scans by (module doc), fitted on ``database`` (training
    rows) from the codes of its ``encoder`` score, and its encoding: validated on the held-out
    ``queries`` (their ``groundtruth`` in ``database``), or without them `UNVALIDATED_ENCODING`.
    None where the features' squared distances would not fit in float32 (the decoder's unit)."""
    squared = np.einsum("ij,ij->i", database, database, dtype=np.float64)
    if len(squared) and not squared.max() < FLOAT32_ROOM:
        logger.warning("no byte decoder: the training features' squared norms (up to %.3g) "
                       "exceed float32's range, in which its distances are computed; scale the "
                       "features down to have one", squared.max())
        return None
    weights = encoder.code_weights(database)  # the codes an index makes of them (SGHIndex)
    start_codes, trained = pack_bits(weights <= 0), model.byte_decoder()
    decoder = (ByteDecoder.fit(database, start_codes, model.bits) if trained is None
               else trained.refitted(database, start_codes))
    if queries is None:
        return EncodingChoice(decoder, UNVALIDATED_ENCODING, {})
    figures, certainty = {}, np.abs(weights)
    for encoding in VALIDATED_ENCODINGS:
        codes = decoder.encode(database, start_codes, encoding, certainty)
        found = AsymmetricIndex(decoder, codes).search(queries, CUTOFF)[1]
        figures[encoding] = recall_of_results(found, groundtruth, recall_k)
    encoding = default_encoding(figures)
    logger.info("byte decoder (%s): encoding %s (validation recall%d@%d: %s)",
                "fitted after training" if trained is None else "trained, refitted", encoding,
                recall_k, CUTOFF,
                ", ".join(f"{name} {figure:.4f}" for name, figure in figures.items()))
    return EncodingChoice(decoder, encoding, figures)


def default_encoding(figures: dict[str, float]) -> str:
    """The first (cheapest) of ``figures``' encodings within `ENCODING_TOLERANCE` of the best."""
    best = max(figures.values())
    return next(name for name, figure in figures.items() if figure >= best - ENCODING_TOLERANCE)
