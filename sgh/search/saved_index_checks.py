"""What `SGHIndex.load` accepts of a saved ``index.npz``: its keys as `SGHIndex.save` writes them,
of the right types and in range, and consistent with each other and with the model's scores,
so that a damaged or edited file is refused in one line naming the key, never loaded to answer
wrongly (NaN centroids, lists beyond ``nlist``, a mode that says another codes' kind)."""

from __future__ import annotations

import numpy as np

from sgh.errors import UserInputError

# key: (dtype kinds, dimensions) of what `save` writes; the optional ones after.
_KEYS = {"format": ("U", 0), "codes": ("u", 2), "lists": ("iu", 1),
         "mode": ("U", 0), "nlist": ("iu", 0), "nprobe": ("iu", 0), "shortlist": ("iu", 0),
         "refine_factor": ("iu", 0), "fingerprint": ("U", 0)}
_OPTIONAL = {"ids": ("iu", 1), "decoder": ("U", 0), "encoding": ("U", 0), "next_id": ("iu", 0),
             "centroids": ("f", 2)}
_LEAST = {"nlist": 0, "nprobe": 1, "shortlist": 0, "refine_factor": 1, "next_id": 0}


def saved_mode(arrays: dict[str, np.ndarray]) -> str:
    """The saved index's mode; one saved before the byte decoder was a mode says
    ``decoder="bytes"`` (beside mode "scan") instead."""
    return "bytes" if str(arrays.get("decoder", "")) == "bytes" else str(arrays["mode"])


def check_saved_arrays(arrays: dict[str, np.ndarray], where: str, scores,
                       byte_decoder_prefix: str) -> None:
    """UserInputError naming ``where`` and the key unless ``arrays`` are a saved index's (module
    doc); ``scores``: the `ScoreSet` saved beside them. An unknown mode is the constructor's to
    refuse."""
    def refuse(key: str, found: str, expected: str) -> None:
        raise UserInputError(f"{where}: key {key!r} {found}; expected {expected}, as SGHIndex.save "
                         "writes it (save or build the index again)")

    for key, (kinds, ndim) in {**_KEYS, **_OPTIONAL}.items():
        if key not in arrays:
            if key in _KEYS:
                refuse(key, "is missing", "every key of a saved index")
            continue
        value = arrays[key]
        if value.dtype.kind not in kinds or value.ndim != ndim:
            refuse(key, f"has dtype {value.dtype} and shape {value.shape}",
                   f"{'a scalar' if ndim == 0 else f'a {ndim}-D array'} of kind {kinds!r}")
        if key in _LEAST and int(value) < _LEAST[key]:
            refuse(key, f"is {int(value)}", f"an integer >= {_LEAST[key]}")
    has_tables = any(key.startswith(byte_decoder_prefix) for key in arrays)
    if has_tables != (saved_mode(arrays) == "bytes"):
        refuse("mode", f"is {saved_mode(arrays)!r} and the file "
               f"{'holds' if has_tables else 'lacks'} a byte decoder's tables",
               "'bytes' exactly where the tables are")
    n, nlist = len(arrays["codes"]), int(arrays["nlist"])
    lists, centroids = arrays["lists"], arrays.get("centroids")
    if nlist == 0:
        if len(lists) or centroids is not None:
            refuse("nlist", "is 0 (a flat index) but the file holds lists or centroids",
                   "nlist > 0 with lists and centroids, or neither")
        return
    if "ids" not in arrays:  # items in lists are in list order, not in the order of their ids
        refuse("ids", "is missing", "the items' ids, one per code, with inverted lists")
    if centroids is None or centroids.shape != (nlist, scores.scores["encoder"].dim) \
            or not np.isfinite(centroids).all():
        found = ("is missing" if centroids is None else
                 f"has shape {centroids.shape}" + ("" if np.isfinite(centroids).all()
                                                   else " and NaN or infinite values"))
        refuse("centroids", found, f"({nlist}, {scores.scores['encoder'].dim}) finite floats, "
               f"one per list (nlist={nlist})")
    if len(lists) != n or (n and (lists.min() < 0 or lists.max() >= nlist
                                  or (np.diff(lists) < 0).any())):
        refuse("lists", f"holds {len(lists)} lists for {n} codes" + (
            f", in {int(lists.min())}..{int(lists.max())}" if len(lists) else ""),
            f"one list in 0..{nlist - 1} per code, in list order")
