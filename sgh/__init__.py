"""Stochastic Generative Hashing: learned binary codes for Hamming-distance retrieval.

The public Python API, loaded on first use: only the names that need TensorFlow import it.

    from sgh import SGHHasher, SGHIndex
    hasher = SGHHasher(n_bits=32, random_state=0).fit(x_train)     # or ITQ(...), LSH(...), ...
    index = SGHIndex(hasher); index.add(x_base)                    # codes, ids and scores
    D, I = index.search(x_query, k=100)                             # the validated score's scan
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# module -> the public names it owns (one owner per concept; see the package layout in docs/).
_OWNERS = {
    # configuration and the sgh-train flow
    "sgh.config": "Config ModelConfig TrainerConfig EvalConfig ValidationConfig "
                  "FileDatasetConfig SyntheticDatasetConfig",
    "sgh.pipeline": "run", "sgh.methods": "METHODS", "sgh.errors": "UserInputError",
    # data
    "sgh.data": "RetrievalSplit load_split",
    "sgh.data.neighbours": "euclidean_neighbours exact_neighbours",
    # SGH as building blocks (TensorFlow): the estimator, the Keras layers, the model
    "sgh.training.sgh_hasher": "SGHHasher",
    "sgh.model.layers": "DoublySN StraightThroughSign GradientReversal",
    "sgh.model.sgh_model": "SGH", "sgh.model.ops": "doubly_sn",
    "sgh.model.export": "export_encoder load_encoder",
    # codes, search, baselines, metrics (numpy)
    "sgh.codes": "pack_bits unpack_bits code_health", "sgh.hasher": "BinaryHasher",
    "sgh.scores.asymmetric": "AsymmetricScore",
    "sgh.scores.score_set": "ScoreSet", "sgh.search.sgh_index": "SGHIndex",
    "sgh.baselines": "LSH PCAH ITQ SH SpH",
    "sgh.metrics": "mean_average_precision recall_at_n evaluate_labels hash_lookup pr_curve",
    "sgh.artifacts.codes_file": "load_codes",
}
_EXPORTS = {name: module for module, names in _OWNERS.items() for name in names.split()}
__all__ = ["__version__", *_EXPORTS]
# Names that were public, and what does their job now.
_RETIRED = {"HammingIndex": "codes alone are searched by faiss.IndexBinaryFlat, a model's codes "
                            "by SGHIndex(model, mode='hamming') (docs/guide/search.md)"}


def __getattr__(name: str):
    if name in _RETIRED:
        raise AttributeError(f"sgh.{name} is no longer part of sgh: {_RETIRED[name]}")
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
