"""`SGHHasher`: SGH as a scikit-learn estimator on `sgh-train`'s defaults and training core, so
`SGHHasher(n_bits=32, random_state=0).fit(x_train)` encodes exactly as `sgh-train` with no
overrides does, without a run directory. Usage: docs/guide/python-api.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import warnings
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from sgh.artifacts.atomic import DirectoryKind, atomic_directory
from sgh.artifacts.run_directory import CHOSEN_KEY
from sgh.config import (
    MAX_SEED,
    RECALL_CUTOFF,
    Config,
    EvalConfig,
    ModelConfig,
    TrainerConfig,
    ValidationConfig,
    candidate_config,
    validate_training,
)
from sgh.data.npz_file import read_npz_arrays
from sgh.errors import TrainingDiverged, UserInputError
from sgh.hasher import BinaryHasher
from sgh.model.encoding import encode_bit_matrix, encode_packed
from sgh.model.sgh_model import SGH
from sgh.scores.asymmetric import ASYMMETRIC_NEEDS_LINEAR_DECODER, AsymmetricScore
from sgh.scores.score_set import ScoreSet
from sgh.training.holdout import MAX_HELD_OUT_SHARE
from sgh.training.recipe_choice import fit_and_score
from sgh.training.score_selection import with_joint
from sgh.training.train_sgh import fit_in_memory, hold_out
from sgh.training.verbose import progress_on_stderr

# (parameter, configuration section, key in it): every parameter but n_bits and random_state.
_KEYS = {
    **{field.name: ("model", field.name) for field in dataclasses.fields(ModelConfig)
       if field.name not in ("name", "bits")},
    **{key: ("trainer", key) for key in ("steps", "batch_size", "learning_rate", "schedule",
                                         "decay_every", "decay_rate", "steps_per_call",
                                         "jit_compile")},
    **{f"validation_{key}": ("validation", key) for key in ("every", "queries", "database",
                                                            "metric")},
    "patience": ("validation", "patience"), "candidates": ("validation", "candidates"),
    "recall_k": ("eval", "recall_k"),
}
_PARAMS_FILE, _WEIGHTS_FILE, _SCORES_FILE = "hasher.json", "weights.npz", "scores.npz"
# Layer sizes are tuples here (scikit-learn wants immutable defaults), lists in the config.
_DEFAULT_MODEL = ModelConfig()
# A preset's (section, key) -> the parameter it sets.
_PRESET_KEYS = {**{place: parameter for parameter, place in _KEYS.items()},
                ("model", "bits"): "n_bits", ("trainer", "seed"): "random_state"}
# eval.* keys of how sgh-train scores codes, which a hasher does not do: a preset's are left out.
_EVAL_ONLY = {field.name for field in dataclasses.fields(EvalConfig)} - {"recall_k"}


class SGHHasher(BinaryHasher):
    """Stochastic Generative Hashing as a scikit-learn transformer (see the module doc).

    Every parameter sets the `sgh-train` key `_KEYS` maps it to (`n_bits`: `model.bits`;
    `random_state`: `trainer.seed`, or a RandomState or None to draw it from at each `fit`).
    `validation_metric="map"` needs `y` in `fit`. `candidates`: recipes `{name: {"model": {...},
    "trainer": {...}}}`, the one whose `search` ranks the validation split best kept: the
    `SGHIndex` mode "scan" (the model's score), "two_stage" (its rescoring score) or "bytes"
    (its byte decoder). `verbose`: progress lines.

    After `fit`: `model_`, `scores_` (`ScoreSet`), `n_bits_`, `n_features_in_`, `fit_info_`.
    """

    without_asymmetric = None  # its encoder, decoder and joint scores

    def __init__(self, n_bits: int = ModelConfig.bits, random_state: int = TrainerConfig.seed, *,
                 objective: str = ModelConfig.objective,
                 gradient_estimator: str = ModelConfig.gradient_estimator,
                 noise: str = ModelConfig.noise, normalization: str = ModelConfig.normalization,
                 init: str = ModelConfig.init, alpha: float = ModelConfig.alpha,
                 beta: float = ModelConfig.beta, encoder: str = ModelConfig.encoder,
                 encoder_hidden: tuple[int, ...] = tuple(_DEFAULT_MODEL.encoder_hidden),
                 encoder_activation: str = ModelConfig.encoder_activation,
                 decoder: str = ModelConfig.decoder,
                 decoder_hidden: tuple[int, ...] = tuple(_DEFAULT_MODEL.decoder_hidden),
                 decoder_activation: str = ModelConfig.decoder_activation,
                 steps: int = TrainerConfig.steps, batch_size: int = TrainerConfig.batch_size,
                 learning_rate: float = TrainerConfig.learning_rate,
                 schedule: str = TrainerConfig.schedule,
                 decay_every: int = TrainerConfig.decay_every,
                 decay_rate: float = TrainerConfig.decay_rate,
                 steps_per_call: int = TrainerConfig.steps_per_call,
                 jit_compile: bool = TrainerConfig.jit_compile,
                 validation_every: int = ValidationConfig.every,
                 validation_queries: int = ValidationConfig.queries,
                 validation_database: int = ValidationConfig.database,
                 validation_metric: str = ValidationConfig.metric,
                 patience: int = ValidationConfig.patience, candidates: dict | None = None,
                 recall_k: int = EvalConfig.recall_k, search: str = "scan",
                 verbose: bool = False):
        # Every parameter stored untouched, under its own name (scikit-learn's contract).
        self.__dict__.update({name: value for name, value in locals().items() if name != "self"})

    @classmethod
    def from_preset(cls, name: str, **params) -> SGHHasher:
        """A hasher with the settings of configs/experiment/<name>.yaml, which `params` override,
        less its dataset and `eval.*` keys but `recall_k` (a hasher fits X and scores no codes)."""
        directory = _experiment_dir()
        available = sorted(path.stem for path in directory.glob("*.yaml"))
        settings, refused = (_preset_settings(directory / f"{name}.yaml") if name in available
                             else ({}, []))
        if not settings:
            accepted = [other for other in available
                        if _preset_settings(directory / f"{other}.yaml")[0]]
            reason = ("sets no SGH setting (a sweep or a dataset of sgh-train)"
                      if name in available else "is not a preset")
            raise UserInputError(f"experiment={name!r} {reason}; accepted: "
                                 f"{', '.join(accepted)} (the files in {directory})")
        if refused:
            raise UserInputError(f"experiment={name} ({directory / f'{name}.yaml'}) sets "
                                 f"{', '.join(refused)}, which SGHHasher cannot take")
        return cls(**{**settings, **params})

    def training_config(self) -> Config:
        """These parameters as `sgh-train`'s typed configuration (checked, one-line errors)."""
        seed = self.random_state
        if seed is None or isinstance(seed, np.random.RandomState):
            # scikit-learn's convention: a seed drawn from the generator (None: NumPy's global).
            seed = int(check_random_state(seed).randint(0, MAX_SEED))
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) \
                or not 0 <= seed <= MAX_SEED:
            raise UserInputError(f"random_state={seed!r} is impossible; accepted: an integer "
                                 f"between 0 and {MAX_SEED} (the trainer.seed of sgh-train), a "
                                 "RandomState or None")
        sections = {"model": {"bits": self.n_bits}, "trainer": {"seed": int(seed)},
                    "validation": {}, "eval": {}}
        for parameter, (section, key) in _KEYS.items():
            value = getattr(self, parameter)
            sections[section][key] = (list(value) if isinstance(value, tuple)
                                      else dict(value or {}) if key == "candidates" else value)
        config = Config(dataset=None, model=ModelConfig(**sections["model"]),
                        trainer=TrainerConfig(**sections["trainer"]),
                        validation=ValidationConfig(**sections["validation"]),
                        eval=EvalConfig(**sections["eval"]))
        try:
            return validate_training(config)
        except UserInputError as error:  # sgh-train's wording, in this class's names
            raise UserInputError(_python_names(str(error))) from None

    def fit(self, X, y=None):
        """Train on `X` (`(n, d)` floats); `y`: labels, used only by `validation_metric="map"`."""
        # Every setting checked first, and the seed drawn once.
        if self.search not in ("scan", "two_stage", "bytes"):
            raise UserInputError(f"search={self.search!r} is not known; accepted: the SGHIndex "
                                 "modes scan (the model's score), two_stage (its rescoring "
                                 "score), bytes (its byte decoder)")
        self._config = self.training_config()
        self._labels = None if y is None else np.asarray(y)
        try:
            with progress_on_stderr(self.verbose):
                return super().fit(X)
        except (UserInputError, TrainingDiverged) as error:  # sgh-train's keys, from training
            renamed = _python_names(str(error))
            if renamed == str(error):
                raise
            raise type(error)(renamed) from None
        finally:
            del self._labels, self._config

    def _fit(self, X: np.ndarray, n_bits: int) -> None:
        config, labels = self._config, self._labels
        if labels is not None and len(labels) != len(X):
            raise UserInputError(f"y has {len(labels)} labels but X has {len(X)} items")
        held_out = min(config.validation.queries, len(X) // MAX_HELD_OUT_SHARE)
        if config.validation.every and len(X) - held_out <= RECALL_CUTOFF \
                and config.validation.metric != "map":
            # Every validation score would be 1.0; scikit-learn's way: fit anyway, say so.
            first = next(iter(config.validation.candidates), None)
            warnings.warn(f"X has {len(X)} items, too few to validate Recall@{RECALL_CUTOFF} "
                          "on; training without validation (validation_every=0)"
                          + (f", the first of candidates ({first!r})" if first else ""),
                          stacklevel=3)
            if first:
                config = candidate_config(config, first)
            config = dataclasses.replace(config, validation=dataclasses.replace(
                config.validation, every=0))
        train_items, validation = hold_out(config, X, labels, "X")
        if config.trainer.batch_size > len(train_items):
            # scikit-learn's convention (MLPClassifier): a batch larger than the data is clipped.
            warnings.warn(f"batch_size={config.trainer.batch_size} is larger than the "
                          f"{len(train_items)} training items; using {len(train_items)}",
                          stacklevel=3)
            config = dataclasses.replace(config, trainer=dataclasses.replace(
                config.trainer, batch_size=len(train_items)))

        def fit(recipe: Config, _candidate: str | None) -> tuple[SGH, dict]:
            trained = fit_in_memory(recipe, train_items, validation)
            return trained.model, trained.fields

        chosen = fit_and_score(config, train_items, validation, "euclidean", self.search, fit)
        self.model_, self.scores_, self.fit_info_ = chosen.model, chosen.scores, chosen.fields

    # float32, as sgh-train encodes (not the baselines' float64 row blocks).
    def _features(self, X) -> np.ndarray:
        check_is_fitted(self)
        return validate_data(self, X, dtype=np.float32, reset=False)

    def transform(self, X) -> np.ndarray:
        features = self._features(X)  # first: an unfitted hasher says so (NotFittedError)
        return encode_bit_matrix(self.model_, features).astype(bool)

    def encode(self, X) -> np.ndarray:
        return encode_packed(self.model_, self._features(X))

    def asymmetric_score(self, similarity: str = "euclidean", *,
                         kind: str = "auto") -> AsymmetricScore:
        """A per-bit query-against-code score of ``kind`` "encoder", "decoder", "joint" or "auto"
        (validation's choice); an mlp decoder's rescore shortlists (``scores_.rescorer``)."""
        check_is_fitted(self)
        scores = self.scores_
        if similarity != scores.similarity:  # with the choice made for Euclidean neighbours
            scores = dataclasses.replace(
                scores, similarity=similarity,
                scores=with_joint(self.model_, self.model_.asymmetric_scores(similarity),
                                  scores.joint_weight),
                selection=scores.selection + " (made for Euclidean neighbours)")
        try:
            return scores.scores[scores.kind_for(kind, "scan", "SGHHasher")]
        except ValueError as error:
            reason = ASYMMETRIC_NEEDS_LINEAR_DECODER if self.model_.decoder_network() else None
            message = str(error) + (f"; {reason}" if reason else "")
            raise ValueError(_python_names(message.replace("eval.score=", "kind="))) from None

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False  # the seed fixes everything (stateless per-step noise)
        return tags

    def save(self, path: str | os.PathLike) -> Path:
        """Write the fitted hasher to the directory `path` atomically, its weights as plain
        arrays; `path` may be new, empty or an earlier `save`'s, else `UserInputError`."""
        check_is_fitted(self)
        path = Path(path)
        saved = DirectoryKind(f"a saved SGHHasher ({_PARAMS_FILE}, {_WEIGHTS_FILE})",
                              required=frozenset({_PARAMS_FILE, _WEIGHTS_FILE}),
                              optional=frozenset({_SCORES_FILE}), marker=".sgh-hasher")
        with atomic_directory(path, replaces=saved) as staging:
            (staging / _PARAMS_FILE).write_text(json.dumps(
                {"params": self.get_params(), "n_features_in": int(self.n_features_in_),
                 "fit_info": self.fit_info_}, indent=2, default=float) + "\n")
            np.savez(staging / _WEIGHTS_FILE, **self.model_.weights())
            self.scores_.save(staging / _SCORES_FILE)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> SGHHasher:
        """A hasher written by `save`; anything else is a `UserInputError` naming the file."""
        path = Path(path)
        params_file, weights_file = path / _PARAMS_FILE, path / _WEIGHTS_FILE
        scores_file = path / _SCORES_FILE
        if not params_file.is_file() or not weights_file.is_file():
            raise UserInputError(f"{path}: not a saved SGHHasher (expected {_PARAMS_FILE} and "
                                 f"{_WEIGHTS_FILE} in it)")
        try:
            weights = read_npz_arrays(weights_file)
        except UserInputError as error:  # damaged or truncated: its line names the file
            raise UserInputError(f"{path}: unreadable saved SGHHasher ({error})") from None
        _refuse_non_finite_weights(weights, weights_file)
        try:
            saved = json.loads(params_file.read_text())
            # JSON has no tuples: the layer sizes come back as lists.
            hasher = cls(**{key: tuple(value) if isinstance(value, list) else value
                            for key, value in saved["params"].items()})
            n_features = int(saved["n_features_in"])
            scores = ScoreSet.load(scores_file)
            _refuse_scores_of_another_size(scores, scores_file, hasher.n_bits, n_features,
                                           params_file)
            hasher._restore(n_features, weights, saved["fit_info"], scores)
        except UserInputError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise UserInputError(f"{path}: unreadable saved SGHHasher ({error})") from None
        return hasher

    def _restore(self, n_features: int, weights: dict, fit_info: dict, scores: ScoreSet) -> None:
        config = self.training_config()
        if fit_info.get(CHOSEN_KEY):  # the weights are the chosen candidate's model
            config = candidate_config(config, fit_info[CHOSEN_KEY])
        self.model_ = SGH.skeleton(config.model, n_features)
        self.model_.assign_weights(weights)
        self.n_features_in_, self.n_bits_, self.fit_info_ = n_features, config.model.bits, fit_info
        self.scores_ = scores

    # Pickling goes through plain arrays too: TensorFlow objects are rebuilt, never pickled.
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        model = state.pop("model_", None)
        if model is not None:
            state["_weights"] = model.weights()
        return state

    def __setstate__(self, state: dict) -> None:
        weights = state.pop("_weights", None)
        scores = state.pop("scores_", None)
        self.__dict__.update(state)
        if weights is not None:
            self._restore(self.n_features_in_, weights, self.fit_info_, scores)


def _python_names(message: str) -> str:
    """``message`` with sgh-train's keys (``model.bits``) named as parameters (``n_bits``)."""
    for (section, key), parameter in sorted(_PRESET_KEYS.items(),
                                            key=lambda item: -len(".".join(item[0]))):
        message = re.sub(rf"\b{re.escape(section)}\.{re.escape(key)}\b", parameter, message)
    return message


def _refuse_non_finite_weights(weights: dict[str, np.ndarray], where: Path) -> None:
    """NaN or Inf weights (training stops at a NaN loss) would give every item one code."""
    for name, array in weights.items():
        if array.dtype.kind in "fc" and not np.isfinite(array).all():
            bad = int(np.count_nonzero(~np.isfinite(array)))
            raise UserInputError(f"{where}: key {name!r} holds NaN or infinite values ({bad} of "
                                 f"{array.size}); a fitted hasher's weights are finite: fit it "
                                 "and save it again")


def _refuse_scores_of_another_size(scores: ScoreSet, where: Path, bits: object,
                                   n_features: int, params_file: Path) -> None:
    """Another hasher's scores, copied in, would rank with another model's bits."""
    for kind, score in scores.scores.items():
        if score.bits != bits:
            raise UserInputError(f"{where}: its {kind} score is for {score.bits}-bit codes, but "
                                 f"{params_file} is a hasher of n_bits={bits}; the files are of "
                                 "different hashers: save the hasher again")
        if score.dim != n_features:
            raise UserInputError(f"{where}: its {kind} score takes {score.dim} features, but "
                                 f"{params_file} is a hasher of {n_features} "
                                 "(n_features_in); the files are of different hashers: save "
                                 "the hasher again")


def _experiment_dir() -> Path:
    """configs/experiment, found the way `sgh.cli.resources.CONFIG_DIR` (not importable here) is."""
    package = Path(__file__).resolve().parents[1]  # sgh/
    installed = package / "configs"
    return (installed if installed.is_dir() else package.parent / "configs") / "experiment"


def _preset_settings(path: Path) -> tuple[dict, list[str]]:
    """The constructor parameters a preset's file sets, and the keys it sets that none takes."""
    preset = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
    settings, refused = {}, []
    for section, values in preset.items():
        if section == "defaults":  # only a dataset may be chosen there; _self_ orders them
            for entry in values:
                group = next(iter(entry)) if isinstance(entry, dict) else entry
                if group.removeprefix("override").strip(" /") not in ("dataset", "_self_"):
                    refused.append(f"defaults: {group}")
        elif section in ("model", "trainer", "validation", "eval") and isinstance(values, dict):
            for key, value in values.items():
                parameter = _PRESET_KEYS.get((section, key))
                if parameter is not None:
                    settings[parameter] = tuple(value) if isinstance(value, list) else value
                elif not (section == "eval" and key in _EVAL_ONLY):
                    refused.append(f"{section}.{key}")
        elif section != "dataset":
            refused.append(section)
    return settings, refused
