"""A method's asymmetric scores, by kind, and which one validation chose: a run's asymmetric.npz.

SGH has up to three per-bit scores (`sgh.scores.asymmetric`: encoder, decoder, joint), a
projection baseline one (its encoder form). `eval.score=auto` uses the kind the validation split
favoured (`sgh.training.score_selection`) for each use of a score: ``chosen`` for a scan of the
whole database, ``rescore_chosen`` for rescoring a shortlist (which may name an mlp decoder's
kind, decoder or joint, with no per-bit form: it decodes the shortlist). Beside them, the byte
decoder an index of mode ``"bytes"`` scans by, and the encoding of its items validation
chose (`sgh.training.encoding_choice`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sgh.codes import model_fingerprint
from sgh.config import SCORE_KINDS, SCORE_SETTINGS
from sgh.data.npz_file import read_npz_arrays
from sgh.data.similarity import SIMILARITIES
from sgh.errors import UserInputError, check_choice, one_line
from sgh.scores.asymmetric import AsymmetricScore
from sgh.scores.byte_decoder import ByteDecoder
from sgh.scores.decoded import DecodedRescorer, DecoderNetwork, decoded_form
from sgh.scores.posterior_modes import Encoding

_BYTE_DECODER = "byte_decoder."  # the key prefix of the byte decoder's arrays


@dataclass(frozen=True)
class ScoreSet:
    """Scores by kind (`SCORE_KINDS` order) and the validated choices (module doc): ``selection``
    says how, ``validation`` holds each candidate's figure. ``decoder``: an mlp decoder, whose
    kinds rescore by decoding; ``feature_conversion``: how the training features became float32
    (e.g. ``uint8 / 255``), which query features read from files must match (None: unknown).
    ``byte_decoder``: the model's byte decoder (None: an index fits one), ``encoding`` the
    default encoding of an index's items by it, ``encodings`` each one's validation figure."""

    scores: dict[str, AsymmetricScore]
    chosen: str
    rescore_chosen: str = ""
    joint_weight: float = 1.0
    selection: str = ""
    validation: dict[str, float] = field(default_factory=dict)
    similarity: str = "euclidean"
    decoder: DecoderNetwork | None = None
    feature_conversion: str | None = None
    byte_decoder: ByteDecoder | None = None
    encoding: str = "local_search"
    encodings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of_model(cls, model) -> ScoreSet:
        """The set of a fitted hasher (`SGHHasher`: the validated choice among its scores; ITQ,
        PCAH, LSH: their projection's), or the set itself."""
        if isinstance(model, ScoreSet):
            return model
        if hasattr(model, "scores_"):
            return model.scores_
        if not hasattr(model, "asymmetric_score"):
            raise TypeError(f"SGHIndex takes a fitted hasher or a ScoreSet, got "
                            f"{type(model).__name__}")
        reason = getattr(model, "without_asymmetric", None)  # SH, SpH: the hasher's own word
        if reason is not None:
            raise ValueError(f"{type(model).__name__} has no asymmetric score: {reason}; "
                             "SGHIndex needs a per-bit score (SGH, ITQ, PCAH, LSH): search "
                             "these codes by Hamming distance with faiss.IndexBinaryFlat")
        return cls.of_projection(model.asymmetric_score(), type(model).__name__)

    @classmethod
    def of_projection(cls, score: AsymmetricScore, method: str) -> ScoreSet:
        """A projection hasher's set: its one score, the encoder's form, nothing to choose."""
        return cls({"encoder": score}, "encoder", "encoder",
                   selection=f"model={method} has one score, its projection's")

    @property
    def fingerprint(self) -> str:
        """The model's fingerprint: of the encoder's score, which fixes the codes."""
        return model_fingerprint(self.scores["encoder"].arrays())

    @property
    def rescoring_kinds(self) -> tuple[str, ...]:
        """The kinds that can rescore a shortlist: the per-bit ones, and a decoder's."""
        decoded = ("decoder", "joint") if self.decoder is not None else ()
        return tuple(kind for kind in SCORE_KINDS if kind in self.scores or kind in decoded)

    def __repr__(self) -> str:
        decoder = "" if self.decoder is None else ", an mlp decoder"
        return (f"ScoreSet({', '.join(self.scores)}; {self.chosen!r} for a scan, "
                f"{self.rescore_chosen or self.chosen!r} for rescoring; {self.similarity}"
                f"{decoder}; model {self.fingerprint})")

    def _rescoring_kind(self, kind: str) -> str:
        """``kind`` (``"auto"``: the validated choice), if a shortlist can be rescored by it."""
        if kind == "auto":
            kind = self.rescore_chosen or self.chosen
        if kind not in self.scores and (self.decoder is None
                                        or kind not in self.rescoring_kinds):
            raise ValueError(f"no {kind} score to rescore with (there are: "
                             f"{', '.join(self.rescoring_kinds)})")
        return kind

    def rescorer(self, kind: str, database_codes: np.ndarray):
        """What rescores a shortlist of ``database_codes`` by ``kind`` (``"auto"``: the
        validated choice): the per-bit score, or a `DecodedRescorer` for an mlp decoder's."""
        kind = self._rescoring_kind(kind)
        if kind in self.scores:
            return self.scores[kind]
        return DecodedRescorer(self.decoder, database_codes, self.similarity, kind,
                               self.scores["encoder"] if kind == "joint" else None,
                               self.joint_weight)

    def rescoring_form(self, kind: str) -> str:
        """The form of `rescorer(kind, ...)`, without building it."""
        kind = self._rescoring_kind(kind)
        if kind in self.scores:
            return self.scores[kind].form
        return decoded_form(kind, self.similarity, self.joint_weight)

    def validation_figure(self, kind: str) -> float:
        """The validation figure of ``kind`` (a decoded one's, for an mlp decoder's kinds)."""
        return self.validation.get(kind, self.validation.get(f"{kind} (decoded)", float("nan")))

    def kind_for(self, requested: str | None, use: str, where: str = "the run") -> str:
        """The kind ``eval.score=requested`` means for ``use``, an index mode (``scan``: a scan;
        ``two_stage``: rescoring a shortlist, where decoded kinds are allowed); ValueError naming
        what ``where`` holds when it has no such score."""
        if requested in (None, "auto"):
            return self.chosen if use == "scan" else (self.rescore_chosen or self.chosen)
        check_choice("eval.score", requested, SCORE_SETTINGS)
        available = self.scores if use == "scan" else self.rescoring_kinds
        if requested not in available:
            what = "per-bit " if use == "scan" else ""
            raise ValueError(f"eval.score={requested}: {where} has no {what}{requested} score "
                             f"(it has: {', '.join(available)})")
        return requested

    def metrics_fields(self, recall_k: int) -> dict:
        """What metrics.json reports about the choice (the figures with a validation split)."""
        fields = {"score_for_scan": self.chosen,
                  "score_for_rescoring": self.rescore_chosen or self.chosen,
                  "joint_weight": self.joint_weight, "score_selection": self.selection}
        label = f"recall{recall_k}@100"
        if self.validation:
            fields[f"validation_{label}_by_score"] = dict(self.validation)
            # What a sweeper may maximise for search (an optimizable best_validation_ key).
            fields[f"best_validation_asymmetric_{label}"] = self.validation[self.chosen]
        if self.byte_decoder is not None:
            fields["byte_decoder_encoding"] = self.encoding
        if self.encodings:
            fields[f"validation_{label}_by_encoding"] = dict(self.encodings)
            fields[f"best_validation_byte_decoder_{label}"] = self.encodings[self.encoding]
        return fields

    def save(self, path: str | os.PathLike) -> None:
        """Write every score (keys ``<kind>.*``, `AsymmetricScore.arrays`) and the choices as an
        ``.npz`` of plain arrays."""
        arrays = {"kinds": np.array(list(self.scores), dtype=np.str_),
                  "chosen": np.str_(self.chosen), "rescore_chosen": np.str_(self.rescore_chosen),
                  "joint_weight": np.float64(self.joint_weight),
                  "selection": np.str_(self.selection),
                  "validation_names": np.array(list(self.validation), dtype=np.str_),
                  "validation_values": np.array(list(self.validation.values()), np.float64),
                  "similarity": np.str_(self.similarity)}
        for kind, score in self.scores.items():
            arrays.update(score.arrays(prefix=f"{kind}."))
        if self.decoder is not None:
            arrays.update(self.decoder.arrays(prefix="decoder_network."))
        if self.feature_conversion is not None:
            arrays["feature_conversion"] = np.str_(self.feature_conversion)
        if self.byte_decoder is not None:
            arrays.update(self.byte_decoder.arrays(prefix=_BYTE_DECODER), encoding=np.str_(
                self.encoding), encoding_names=np.array(list(self.encodings), dtype=np.str_),
                encoding_values=np.array(list(self.encodings.values()), np.float64))
        with open(path, "wb") as file:
            np.savez(file, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> ScoreSet:
        """Read what `save` (or `AsymmetricScore.save`) wrote; ValueError naming file and key."""
        path = Path(path)
        try:
            arrays = read_npz_arrays(path)
        except ValueError as error:  # damaged bytes, pickles, a .npy
            raise ValueError(f"{path}: not a readable asymmetric-score .npz "
                             f"({str(error).removeprefix(f'{path}: ')})") from None
        if "kinds" not in arrays:  # one score, as AsymmetricScore.save writes it
            score = AsymmetricScore.from_arrays(arrays, str(path))
            return cls({score.kind: score}, score.kind)
        kinds = [str(kind) for kind in np.atleast_1d(arrays["kinds"])]
        unknown = [kind for kind in kinds if kind not in SCORE_KINDS]
        if not kinds or unknown:
            raise ValueError(f"{path}: key 'kinds' holds {one_line(arrays['kinds'])}; accepted: "
                             f"some of {', '.join(SCORE_KINDS)}")
        scores = {kind: AsymmetricScore.from_arrays(arrays, str(path), prefix=f"{kind}.")
                  for kind in kinds}
        text = {key: str(arrays[key]) if key in arrays else "" for key in (
            "chosen", "rescore_chosen", "selection")}
        if text["chosen"] not in scores or text["rescore_chosen"] not in ("", *SCORE_KINDS) \
                or "encoder" not in scores:
            raise ValueError(f"{path}: key 'chosen' is {text['chosen']!r} and 'rescore_chosen' "
                             f"{text['rescore_chosen']!r}; accepted: one of the file's kinds "
                             f"({', '.join(kinds)})")
        weight = arrays.get("joint_weight", np.float64(1.0))
        if weight.shape != () or weight.dtype.kind != "f" or not np.isfinite(weight) \
                or weight <= 0:
            raise ValueError(f"{path}: key 'joint_weight' must be a positive number, got "
                             f"{one_line(weight)}")
        validation = _figures(arrays, "validation", path)
        similarity = str(arrays.get("similarity", np.str_("euclidean")))
        if similarity not in SIMILARITIES:
            raise ValueError(f"{path}: key 'similarity' is {similarity!r}; accepted: "
                             f"{', '.join(SIMILARITIES)}")
        decoder = (DecoderNetwork.from_arrays(arrays, str(path), prefix="decoder_network.")
                   if any(key.startswith("decoder_network.") for key in arrays) else None)
        conversion = arrays.get("feature_conversion")
        byte_decoder, encoding, encodings = None, "local_search", {}
        if any(key.startswith(_BYTE_DECODER) for key in arrays):
            byte_decoder = ByteDecoder.from_arrays(arrays, str(path), _BYTE_DECODER)
            encoding = str(arrays.get("encoding", encoding))
            try:
                Encoding.named(encoding)
            except ValueError as error:
                raise ValueError(f"{path}: key 'encoding': {error}") from None
            encodings = _figures(arrays, "encoding", path)
        return cls(scores, text["chosen"], text["rescore_chosen"], float(weight),
                   text["selection"], validation, similarity, decoder,
                   None if conversion is None else str(conversion), byte_decoder, encoding,
                   encodings)

    @classmethod
    def of_run(cls, run) -> ScoreSet:
        """A finished run's scores (a `RunDirectory`), with the conversion its features had;
        UserInputError in one line when it lacks its codes or scores, they are damaged, or they
        are of two models (another run's asymmetric.npz copied in)."""
        from sgh.artifacts.codes_file import load_codes, refuse_another_models_scores
        from sgh.artifacts.run_lock import refuse_a_run_being_written

        for needed in (run.codes, run.asymmetric_score):
            if not needed.is_file():
                refuse_a_run_being_written(run.path, needed.name)
                raise UserInputError(f"{run.path}: no {needed.name} there; expected a finished "
                                     "sgh-train run of SGH, ITQ, PCAH or LSH")
        try:
            scores = cls.load(run.asymmetric_score)
        except ValueError as error:
            raise UserInputError(str(error)) from None
        refuse_another_models_scores(load_codes(run.codes), scores, run.asymmetric_score)
        return dataclasses.replace(scores, feature_conversion=run.feature_conversion)

    @classmethod
    def load_score(cls, path: str | os.PathLike, kind: str | None = None) -> AsymmetricScore:
        """Read a score written by `AsymmetricScore.save`, or one ``kind`` of a run's scores
        (None: the one validation chose); ValueError naming the file and key if invalid."""
        scores = cls.load(path)
        return scores.scores[scores.kind_for(kind, "scan", str(path))]


def _figures(arrays: dict, name: str, path: Path) -> dict[str, float]:
    """``{name: figure}`` saved as the keys ``<name>_names`` and ``<name>_values``."""
    names = [str(entry) for entry in np.atleast_1d(arrays.get(f"{name}_names", []))]
    values = np.atleast_1d(arrays.get(f"{name}_values", np.zeros(0)))
    if len(names) != len(values) or values.dtype.kind != "f":
        raise ValueError(f"{path}: keys '{name}_names' and '{name}_values' do not pair up")
    return dict(zip(names, map(float, values), strict=True))
