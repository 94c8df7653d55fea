"""Stochastic Generative Hashing: learned binary codes for Hamming-distance retrieval.

The public Python API. Names are loaded on first use, so `import sgh` stays light: TensorFlow is
imported only by the names that need it (`SGHHasher`, the layers, `SGH`, `doubly_sn`,
`export_encoder`, `load_encoder`, `run`).

    from sgh import SGHHasher, SGHIndex
    hasher = SGHHasher(n_bits=32, random_state=0).fit(x_train)     # or ITQ(...), LSH(...), ...
    index = SGHIndex(hasher); index.add(x_base)                    # codes, ids and scores
    D, I = index.search(x_query, k=100)                             # the validated score's scan
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# name -> the module that owns it (one owner per concept; see the package layout in docs/).
_EXPORTS = {
    # configuration and the sgh-train flow
    "Config": "sgh.config", "ModelConfig": "sgh.config", "TrainerConfig": "sgh.config",
    "EvalConfig": "sgh.config", "ValidationConfig": "sgh.config",
    "FileDatasetConfig": "sgh.config", "SyntheticDatasetConfig": "sgh.config",
    "run": "sgh.pipeline", "METHODS": "sgh.methods",
    "UserInputError": "sgh.errors",
    # data
    "RetrievalSplit": "sgh.data", "load_split": "sgh.data",
    "euclidean_neighbours": "sgh.data.neighbours", "exact_neighbours": "sgh.data.neighbours",
    # SGH as building blocks (TensorFlow): the estimator, the Keras layers, the model
    "SGHHasher": "sgh.training.sgh_hasher", "DoublySN": "sgh.model.layers",
    "StraightThroughSign": "sgh.model.layers", "GradientReversal": "sgh.model.layers",
    "SGH": "sgh.model.sgh_model", "doubly_sn": "sgh.model.ops",
    "export_encoder": "sgh.model.export", "load_encoder": "sgh.model.export",
    # codes, search, baselines, metrics (numpy)
    "pack_bits": "sgh.codes", "unpack_bits": "sgh.codes", "code_health": "sgh.codes",
    "HammingIndex": "sgh.search", "BinaryHasher": "sgh.hasher",
    "AsymmetricScore": "sgh.search.asymmetric", "AsymmetricIndex": "sgh.search.asymmetric_index",
    "TwoStageSearch": "sgh.search.two_stage", "ScoreSet": "sgh.search.score_set",
    "DecodedRescorer": "sgh.search.decoded", "SGHIndex": "sgh.search.sgh_index",
    "LSH": "sgh.baselines", "PCAH": "sgh.baselines", "ITQ": "sgh.baselines",
    "SH": "sgh.baselines", "SpH": "sgh.baselines",
    "mean_average_precision": "sgh.metrics", "recall_at_n": "sgh.metrics",
    "evaluate_labels": "sgh.metrics", "hash_lookup": "sgh.metrics", "pr_curve": "sgh.metrics",
    "load_codes": "sgh.artifacts.codes_file",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'sgh' has no attribute {name!r}")
    module = _EXPORTS[name]
    if module.startswith(("sgh.model", "sgh.training", "sgh.pipeline")):
        from sgh.model.quiet_tensorflow import import_tensorflow

        import_tensorflow()
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
