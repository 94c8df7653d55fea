"""Typed configuration: the schema Hydra composes into, and the checks Hydra cannot express.

Library code receives these dataclasses, never a `DictConfig`. What each setting does (the one
place that says it): docs/reference/configuration.md.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sgh.data.similarity import SIMILARITIES
from sgh.errors import UserInputError, check_choice, check_int, check_real
from sgh.methods import BASELINE_NAMES, METHODS

# OmegaConf's marker of a missing value, spelt out: sgh.search's numpy-only users import this.
MISSING = "???"
# The metrics.json keys a sweeper may optimise: validation scores only.
OPTIMIZABLE_PREFIX = "best_validation_"
# eval.ranking: the database ranked as SGHIndex searches it in the mode of the same name
# (sgh.search.sgh_index.MODES is this tuple).
RANKINGS = ("hamming", "scan", "two_stage", "bytes")
RETIRED_RANKINGS = {"asymmetric": "scan", "rerank": "two_stage"}  # former name: mode
# The kinds of asymmetric score, in table order; eval.score: a kind, or auto (validation's choice).
SCORE_KINDS = ("encoder", "decoder", "joint")
SCORE_SETTINGS = ("auto", *SCORE_KINDS)
# Beyond 1024 bits a code is no longer "compact", and the linear encoder's memory grows with it.
MAX_BITS = 1024
MAX_SEED = 2**32 - 1


@dataclass
class FileDatasetConfig:
    """A dataset read from files; the split protocol follows from what `path` holds."""

    name: str = MISSING
    path: str = MISSING
    query_selection: str = "random"  # random | per_class  (labelled layouts)
    n_queries: int = 1000
    split: str = "test"  # test | validation (queries carved from the training set)
    query_path: str | None = None  # single-array datasets; None = the texmex sibling, if any
    groundtruth_path: str | None = None  # query x K neighbour ids, 0-based (else computed)
    learn_path: str | None = None  # the training set (else the database)
    streaming: str = "auto"  # leave the data on disk (sgh/data/streamed_features.py)
    stream_reader: str = "mmap"  # how streamed rows are gathered (sgh/data/mapped_rows.py)
    similarity: str = "auto"  # what neighbours are (sgh/data/similarity.py)


@dataclass
class SyntheticDatasetConfig:
    """Gaussian clusters with labels: a dataset that needs no file (tests, quick checks)."""

    name: str = "synthetic"
    n_train: int = 2000
    n_test: int = 400
    dim: int = 32
    n_classes: int = 10
    seed: int = 0
    n_queries: int = 200
    query_selection: str = "random"
    split: str = "test"
    similarity: str = "auto"  # auto (= euclidean) | euclidean | angular | inner_product


@dataclass
class ModelConfig:
    name: str = "sgh"
    bits: int = 32
    objective: str = "paper"  # paper (the MDL objective) | released (the authors' demo's loss)
    noise: str = "uniform"  # uniform: xi ~ U(0,1) (the paper) | fixed: xi = 0.5 (released demo)
    gradient_estimator: str = "approximate"  # the codes' gradient (sgh/model/sgh_model.py)
    normalization: str = "isotropic"  # isotropic: (x - mean) / one global scale | none
    init: str = "random"  # random: W~N(0,1/d), b=0 | released: the demo's, b~N(0,1)
    alpha: float = 1e-3  # objective=released: weight of the BCE term
    beta: float = 1e-3  # objective=released: weight decay on W and U
    encoder: str = "linear"  # linear | mlp (objective=paper): dense layers of the hidden sizes
    encoder_hidden: list[int] = field(default_factory=lambda: [512])
    encoder_activation: str = "relu"  # relu | tanh | gelu | elu | sigmoid
    decoder: str = "linear"  # linear | mlp | bytes (a table of reconstructions per code byte)
    decoder_hidden: list[int] = field(default_factory=lambda: [512])
    decoder_activation: str = "relu"


@dataclass
class BaselineConfig:
    """A classic hashing baseline (sgh/baselines): fitted on the training set, no trainer."""

    name: str = MISSING  # lsh | pcah | itq | sh | sph
    bits: int = 32


@dataclass
class TrainerConfig:
    steps: int = 20000
    batch_size: int = 500  # drawn with replacement, as the released demo does
    learning_rate: float = 3e-3
    schedule: str = "constant"  # constant | step | cosine
    decay_every: int = 2000  # schedule=step: multiply the rate by decay_rate every this many steps
    decay_rate: float = 0.5
    seed: int = 0
    steps_per_call: int = 100  # inside one compiled call, averaged into one log line
    jit_compile: bool = True
    checkpoint_every: int = 1000
    strategy: str = "auto"  # devices (sgh/training/devices.py)
    logical_cpus: int = 0  # N >= 2: the CPU as N devices (mirrored training without GPUs)


@dataclass
class ValidationConfig:
    """Model selection during SGH training, on a validation split carved from the training set."""

    every: int = 1000  # steps between validation points; 0 = no validation (final = last step)
    queries: int = 1000  # training items held out as queries (at most a tenth of them)
    database: int = 10000  # training items (a fixed sample) the queries are ranked against
    metric: str = "recall"  # recall (Recall K@100) | encoder_recall | map (mAP@all)
    patience: int = 0  # stop after this many validation points without improvement; 0 = never
    # Recipes {model: {...}, trainer: {...}} over the run's settings, the best kept (empty: none).
    candidates: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvalConfig:
    recall_k: int = 10  # Recall K@N: K true Euclidean neighbours...
    recall_n: list[int] = field(default_factory=lambda: [1, 10, 100, 1000])  # ...among top N
    map_k: list[int] = field(default_factory=lambda: [100, 1000])  # mAP@K, P@K, R@K cut-offs
    map_k_denominator: str = "retrieved"  # of mAP@K: retrieved (relevant in top K) | min_rk | r
    radius: int = 2  # hash lookup within this Hamming radius (inclusive)
    ranking: str = "hamming"  # RANKINGS: SGHIndex's mode that ranks (sgh/search/rankings.py)
    score: str = "auto"  # a query's score against a code (sgh/scores/asymmetric.py)
    shortlist: int = 1000  # two_stage: the encoder score's top S, rescored by eval.score
    # bytes: the byte decoder index's encoding (auto: validation's); checked by
    # sgh.scores.posterior_modes.check_encoding_setting, which owns the names
    encoding: str = "auto"


@dataclass
class Config:
    dataset: Any = MISSING
    model: Any = MISSING  # ModelConfig (sgh) or BaselineConfig
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    data_dir: str = "${oc.env:SGH_DATA_DIR,${sgh_bundled_data_dir:}}"  # <data_dir>/<dataset>/
    optimized_metric: str = "best_validation_recall10@100"  # returned to a sweeper (Optuna)


@dataclass
class EvalCommandConfig:
    """`sgh-eval`: score saved codes (codes=FILE) or re-score a finished run (run=DIR)."""

    codes: str | None = None  # any codes.npz in the documented contract
    run: str | None = None  # a run directory of sgh-train (its codes.npz)
    out: str | None = None  # where to write the JSON; default: <run>/eval.json with run=
    eval: EvalConfig = field(default_factory=EvalConfig)


# Large enough that per-call overhead is negligible, small enough to bound memory at any file size.
ENCODE_BATCH_SIZE = 65536
# How sgh-encode's input values become the encoder's input: as at training, as stored, or / 255.
INPUT_SCALES = ("auto", "none", "uint8")


@dataclass
class EncodeCommandConfig:
    """`sgh-encode`: which encoder, which input, where the codes go."""

    run: str | None = None  # an sgh-train run directory (its encoder/)
    encoder: str | None = None  # or an exported encoder directory itself
    input: str | None = None  # .npy, .npz, .fvecs, .bvecs, .mat or .hdf5 features
    out: str | None = None  # the codes, .npy
    key: str | None = None  # the array in an .npz / .mat / .hdf5 input
    batch_size: int = ENCODE_BATCH_SIZE  # rows read and encoded at a time
    input_scale: str = "auto"  # INPUT_SCALES


@dataclass
class ExportCommandConfig:
    """`sgh-export`: the finished run whose encoder is written to `<run>/encoder`."""

    run: str | None = None  # an sgh-train run directory


@dataclass
class CompareCommandConfig:
    """`sgh-compare`: the sweep whose runs are compared, and where the comparison goes."""

    sweep: str | None = None  # an sgh-train sweep directory (searched recursively)
    out: str | None = None  # the comparison's directory; default: the sweep directory
    tensorboard: bool = True  # false: no TensorBoard images (tensorboard_compare/)


@dataclass
class IndexBuildConfig:
    """`sgh-index build`: an SGHIndex of a run, over its database codes or a vector file."""

    run: str = MISSING  # an sgh-train run directory
    out: str = MISSING  # the saved index, a directory
    input: str | None = None  # vectors indexed in its place (ids: their rows), as sgh-encode's
    key: str | None = None  # the array in an .npz / .mat / .hdf5 input
    nlist: int | None = None  # inverted lists (k-means); None: one flat scan
    mode: str = "scan"  # sgh.search.sgh_index.MODES (bytes: the byte decoder's own codes)
    encoding: str | None = None  # the byte decoder's: encoder, flipT, icmN or local_search
    batch_size: int = ENCODE_BATCH_SIZE  # rows read and added at a time
    input_scale: str = "auto"  # INPUT_SCALES


@dataclass
class IndexSearchConfig:
    """`sgh-index search`: each query's `k` nearest items of a saved index, to an .npz."""

    index: str = MISSING  # a saved SGHIndex (sgh-index build's out=)
    input: str = MISSING  # the queries, any file sgh-encode reads
    key: str | None = None  # the array in an .npz / .mat / .hdf5 input
    out: str = MISSING  # D and I, .npz
    k: int = 100  # results per query
    mode: str | None = None  # None: the index's own
    nprobe: int | None = None  # lists scanned per query; None: the index's own
    shortlist: int | None = None  # two_stage's candidates per query; None: the index's own
    refine_factor: int | None = None  # the scan rescores refine_factor x k candidates exactly
    groundtruth: str | None = None  # each query's nearest ids: Recall10@N in the results
    groundtruth_key: str | None = None  # the array in an .npz / .mat / .hdf5 groundtruth
    batch_size: int = ENCODE_BATCH_SIZE  # queries read and searched at a time
    input_scale: str = "auto"  # INPUT_SCALES


def dataset_config_from(section: dict) -> FileDatasetConfig | SyntheticDatasetConfig:
    """The dataset section of a run's config.yaml as its dataclass."""
    return (FileDatasetConfig if "path" in section else SyntheticDatasetConfig)(**section)


def flatten_config(values, prefix: str = "") -> dict:
    """A configuration (a `Config`, or a config.yaml read back) as `{"model.bits": 32, ...}`:
    values as they are (lists, None), an empty section as its own value (`{}`)."""
    if dataclasses.is_dataclass(values) and not isinstance(values, type):
        values = dataclasses.asdict(values)
    flat = {}
    for key, value in values.items():
        if isinstance(value, Mapping) and value:
            flat.update(flatten_config(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


# The values a `model.*` setting may name, owned here, not by sgh.model (a cycle, test_layout).
OBJECTIVES = ("paper", "released")
NOISES = ("uniform", "fixed")
GRADIENT_ESTIMATORS = ("unbiased", "approximate")
NETWORKS = ("linear", "mlp")  # the encoder's form
DECODERS = (*NETWORKS, "bytes")  # and the decoder's: or a table per code byte
ACTIVATIONS = ("relu", "tanh", "gelu", "elu", "sigmoid")  # of an mlp's hidden layers
MODEL_CHOICES = {"objective": OBJECTIVES, "noise": NOISES,
                 "gradient_estimator": GRADIENT_ESTIMATORS,
                 "normalization": ("isotropic", "none"), "init": ("random", "released"),
                 "encoder": NETWORKS, "decoder": DECODERS, "encoder_activation": ACTIVATIONS,
                 "decoder_activation": ACTIVATIONS}
CHOICES = {
    "model.name": tuple(METHODS),
    **{f"model.{key}": values for key, values in MODEL_CHOICES.items()},
    "trainer.schedule": ("constant", "step", "cosine"),
    "trainer.strategy": ("auto", "one_device", "mirrored", "multi_worker"),
    "dataset.query_selection": ("random", "per_class"),
    "dataset.split": ("test", "validation"),
    "dataset.streaming": ("auto", "always", "never"),
    "dataset.stream_reader": ("mmap", "pread"),
    "dataset.similarity": ("auto", *SIMILARITIES),
    "validation.metric": ("recall", "encoder_recall", "map"),
}


def validate(config: Config) -> Config:
    """Check every value Hydra's types cannot; raise UserInputError naming the key."""
    dataset = config.dataset
    keys = ["dataset.query_selection", "dataset.split", "dataset.similarity"]
    if isinstance(dataset, FileDatasetConfig):
        keys += ["dataset.streaming", "dataset.stream_reader"]
    for key in keys:
        check_choice(key, getattr(dataset, key.split(".")[1]), CHOICES[key])
    check_int("dataset.n_queries", dataset.n_queries, 1)
    if not str(config.optimized_metric).startswith(OPTIMIZABLE_PREFIX):
        raise UserInputError(f"optimized_metric={config.optimized_metric!r} is not a validation "
                             f"score; accepted: a key {OPTIMIZABLE_PREFIX}... of metrics.json, "
                             "e.g. best_validation_recall10@100 (test-query figures are never "
                             "optimised)")
    validation, recall_k = config.validation, config.eval.recall_k
    # (Fewer validation items than eval.recall_k: the held-out split says so, with its size.)
    if isinstance(config.model, ModelConfig) and validation.every > 0 and \
            validation.metric != "map" and recall_k <= validation.database:
        refuse_a_validation_database_within_the_cutoff(validation.database, recall_k)
    return validate_training(config)


# The rank cut-off of the recall metric validation selects on: the paper's headline Recall10@100.
RECALL_CUTOFF = 100


def refuse_a_validation_database_within_the_cutoff(database: int, recall_k: int) -> None:
    """At most RECALL_CUTOFF validation items: refused here and where the split is carved."""
    if database <= RECALL_CUTOFF:
        raise UserInputError(
            f"validation.database={database} is not more than the recall cut-off "
            f"{RECALL_CUTOFF}: every validation Recall{recall_k}@{RECALL_CUTOFF} would be 1.0, "
            f"so model selection would mean nothing; accepted: validation.database > "
            f"{RECALL_CUTOFF} (the default is 10000; more than the training set has takes all "
            "of it), or validation.metric=map, or validation.every=0")


def validate_training(config: Config) -> Config:
    """`validate` for everything but the dataset (what `SGHHasher` checks too)."""
    model, trainer, validation = config.model, config.trainer, config.validation
    keys = ["model.name", "trainer.schedule", "trainer.strategy"]
    if isinstance(model, ModelConfig):
        keys += [f"model.{key}" for key in MODEL_CHOICES]
        check_real("model.alpha", model.alpha, 0)
        check_real("model.beta", model.beta, 0)
        _validate_networks(model)
    for key in keys:
        section, attribute = key.split(".")
        check_choice(key, getattr(getattr(config, section), attribute), CHOICES[key])
    if isinstance(model, ModelConfig) != (METHODS[model.name].baseline_class is None):
        raise UserInputError(f"model.name={model.name!r} does not match its option; choose "
                             f"model=sgh or model=<baseline> ({', '.join(BASELINE_NAMES)})")
    check_int("model.bits", model.bits, 1, MAX_BITS)
    check_int("trainer.steps", trainer.steps, 0)
    check_int("trainer.batch_size", trainer.batch_size, 1)
    check_real("trainer.learning_rate", trainer.learning_rate, 1e-12)
    check_int("trainer.decay_every", trainer.decay_every, 1)
    check_real("trainer.decay_rate", trainer.decay_rate, 0, 1)
    check_int("trainer.steps_per_call", trainer.steps_per_call, 1)
    check_int("trainer.checkpoint_every", trainer.checkpoint_every, 1)
    check_int("trainer.logical_cpus", trainer.logical_cpus, 0, 256)
    # What the generators and random_state take (NumPy raises on a negative seed, deep inside).
    check_int("trainer.seed", trainer.seed, 0, MAX_SEED)
    validate_eval(config.eval)
    check_choice("validation.metric", validation.metric, CHOICES["validation.metric"])
    check_int("validation.every", validation.every, 0)
    check_int("validation.queries", validation.queries, 1)
    check_int("validation.database", validation.database, 1)
    check_int("validation.patience", validation.patience, 0)
    if validation.patience > 0 and validation.every == 0:
        # Early stopping counts validation points: without any it would silently never stop.
        raise UserInputError(f"validation.patience={validation.patience} is impossible with "
                             "validation.every=0 (no validation points to count); accepted: "
                             "validation.every >= 1, or validation.patience=0")
    if validation.candidates:
        _validate_candidates(config)
    return config


def _validate_networks(model: ModelConfig) -> None:
    for part in ("encoder", "decoder"):
        form = getattr(model, part)
        if form != "linear" and model.objective != "paper":
            raise UserInputError(f"model.{part}={form} needs model.objective=paper (the "
                                 "released demo's objective is linear); accepted: "
                                 f"objective=paper, or model.{part}=linear")
        hidden = getattr(model, f"{part}_hidden")
        if not hidden:
            raise UserInputError(f"model.{part}_hidden is empty; accepted: a list of layer "
                                 "sizes, e.g. [512]")
        for size in hidden:
            check_int(f"model.{part}_hidden", size, 1, 65536)


# What a candidate recipe may set: the model and its training, not the code length or method.
CANDIDATE_SECTIONS = ("model", "trainer")
_FIXED_FOR_CANDIDATES = ("model.name", "model.bits")


def candidate_config(config: Config, name: str) -> Config:
    """The configuration the candidate `name` of `validation.candidates` trains: its settings
    over the run's, with no candidates of its own."""
    where = f"validation.candidates.{name}"
    settings = config.validation.candidates[name]
    if not isinstance(settings, Mapping) or not settings \
            or not set(settings) <= set(CANDIDATE_SECTIONS):
        raise UserInputError(f"{where}={settings!r} is not a recipe; accepted: a mapping of "
                             "model and/or trainer settings, e.g. {model: {encoder: mlp}, "
                             "trainer: {steps: 10000}}")
    sections = {}
    for section, values in settings.items():
        current = getattr(config, section)
        known = [entry.name for entry in dataclasses.fields(current)]
        if not isinstance(values, Mapping):
            raise UserInputError(f"{where}.{section}={values!r} is not a mapping; accepted: "
                                 f"{section} settings, e.g. {{{known[1]}: ...}}")
        for key in values:
            if key not in known or f"{section}.{key}" in _FIXED_FOR_CANDIDATES:
                raise UserInputError(
                    f"{where}.{section}.{key} cannot be set by a candidate; accepted: "
                    + ", ".join(k for k in known if f"{section}.{k}" not in _FIXED_FOR_CANDIDATES))
        sections[section] = dataclasses.replace(current, **values)
    return dataclasses.replace(config, **sections, validation=dataclasses.replace(
        config.validation, candidates={}))


def _validate_candidates(config: Config) -> None:
    if not isinstance(config.model, ModelConfig):
        raise UserInputError(f"validation.candidates are recipes of SGH's training, and "
                             f"model={config.model.name} trains none; accepted: model=sgh, or "
                             "validation.candidates={}")
    if config.validation.every == 0:
        raise UserInputError("validation.candidates are chosen on the validation split, and "
                             "validation.every=0 turns it off; accepted: validation.every >= 1")
    for name in config.validation.candidates:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", str(name)):
            raise UserInputError(f"validation.candidates.{name}: the name names folders of the "
                                 "run; accepted: letters, digits, _ and -")
        try:
            validate_training(candidate_config(config, name))
        except UserInputError as error:
            if str(error).startswith("validation.candidates."):
                raise
            raise UserInputError(f"validation.candidates.{name}: {error}") from None


def validate_eval(config: EvalConfig) -> EvalConfig:
    check_int("eval.recall_k", config.recall_k, 1)
    check_int("eval.radius", config.radius, 0, MAX_BITS)
    for k in config.map_k:
        check_int("eval.map_k", k, 1)
    # Here, not at the top: sgh.metrics loads its compiler, which reading the settings never needs.
    from sgh.metrics.conventions import DENOMINATORS

    check_choice("eval.map_k_denominator", config.map_k_denominator, DENOMINATORS)
    if not config.recall_n:
        raise UserInputError("eval.recall_n is empty; accepted: a list of cut-offs N >= 1")
    if config.ranking in RETIRED_RANKINGS:
        raise UserInputError(f"eval.ranking={config.ranking} is now eval.ranking="
                             f"{RETIRED_RANKINGS[config.ranking]} (SGHIndex's mode of that name); "
                             f"accepted: {', '.join(RANKINGS)}")
    check_choice("eval.ranking", config.ranking, RANKINGS)
    check_choice("eval.score", config.score, SCORE_SETTINGS)
    check_int("eval.shortlist", config.shortlist, 1)
    for n in config.recall_n:
        check_int("eval.recall_n", n, 1)
    return config
