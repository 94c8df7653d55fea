"""`SGHIndex`: a trained model's query side, the database codes and their ids, searched the way
faiss indexes are (usage, modes, ``nlist`` and ``decoder="bytes"``: docs/guide/search.md).

Modes (`index.mode`): ``"scan"``, every code by the validated score on faiss's fast-scan kernels
(:mod:`sgh.search.fast_scan`); ``"two_stage"``, the encoder score's shortlist reordered by the
validated rescoring score; ``"hamming"``, the query's own code by Hamming distance. With the byte
decoder (:mod:`sgh.search.byte_decoder`) and ``nlist``, as in faiss's IVF-PQ, an item is coded
as its residual to its list's centroid.

Features are encoded by the encoder's own score: a bit is 1 where its encoder weight is <= 0, in
float64 (a logit within float32 rounding of 0 may give a bit unlike the TensorFlow encoder's).
Codes carry the model's fingerprint (`sgh.codes.model_fingerprint`): codes, scores and saved
indexes of different models are refused, never searched together.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from sgh.artifacts.atomic import DirectoryKind, atomic_directory
from sgh.artifacts.codes_file import load_codes, refuse_another_models_scores
from sgh.codes import pack_bits, validate_codes
from sgh.data.feature_conversion import UINT8_CONVERSION
from sgh.data.npz_file import read_npz_arrays
from sgh.data.similarity import unit_normalised
from sgh.errors import UserInputError, check_int
from sgh.search.asymmetric import AsymmetricScore, check_queries
from sgh.search.asymmetric_index import AsymmetricIndex
from sgh.search.byte_decoder import ByteDecoder
from sgh.search.byte_fast_scan import ByteFastScan
from sgh.search.fast_scan import DEFAULT_REFINE_FACTOR, FastScanIndex
from sgh.search.hamming_index import HammingIndex
from sgh.search.inverted_table_scan import InvertedTableScan
from sgh.search.lookup_kernels import QUERY_BLOCK, run_query_blocks
from sgh.search.score_set import ScoreSet
from sgh.search.two_stage import default_shortlist, padded, warn_if_one_score

MODES = ("hamming", "scan", "two_stage")
DECODERS = ("model", "bytes")  # what ranks the codes: the model's scores, or a byte decoder
# The files of a saved index (a directory): faiss opens CODES_FILE with faiss.read_index.
INDEX_FILE, SCORES_FILE, CODES_FILE = "index.npz", "scores.npz", "codes.faiss"
_FORMAT = "sgh-index 2"  # 2: a byte decoder's inverted lists hold codes of residuals
SAVED_INDEX = DirectoryKind(f"a saved SGHIndex ({INDEX_FILE}, {SCORES_FILE}, {CODES_FILE})",
                       required=frozenset({INDEX_FILE, SCORES_FILE, CODES_FILE}))
_ADD_ROWS = 1 << 16  # features encoded (and assigned to lists) at a time by `add`
_KMEANS_POINTS_PER_LIST = 256  # training points per list for the coarse k-means: faiss's cap
_BYTE_DECODER = "byte_decoder."  # the key prefix of a byte decoder's arrays in index.npz


class SGHIndex:
    """A model's codes and their search (module doc). ``model``: a fitted hasher with an
    asymmetric score (`SGHHasher`, ITQ, PCAH, LSH) or a `ScoreSet` (a run's asymmetric.npz);
    ``nlist``: inverted lists (None: a flat scan of every code)."""

    def __init__(self, model, mode: str = "scan", nlist: int | None = None,
                 decoder: str = "model") -> None:
        if decoder not in DECODERS:
            raise ValueError(f"decoder={decoder!r} is not known; accepted: "
                             f"{', '.join(DECODERS)}")
        self.decoder = decoder
        self.byte_decoder: ByteDecoder | None = None
        self.scores = ScoreSet.of_model(model)
        self.bits = self.scores.scores["encoder"].bits
        self.dim = self.scores.scores["encoder"].dim
        self.fingerprint = self.scores.fingerprint
        self.nlist = None if nlist is None else check_int("nlist", nlist, 1)
        self.mode = mode
        self.nprobe, self.shortlist = 1, None
        # The byte decoder scans exactly unless given one (sgh.search.byte_fast_scan).
        self.refine_factor = None if decoder == "bytes" else DEFAULT_REFINE_FACTOR
        self._codes = np.zeros((0, -(-self.bits // 8)), np.uint8)
        self._ids = np.zeros(0, np.int64)
        self._lists = np.zeros(0, np.int64)
        self._centroids: np.ndarray | None = None
        self._engines: dict = {}

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} is not known; accepted: {', '.join(MODES)}")
        if self.decoder == "bytes" and mode != "scan":
            raise ValueError(f"mode={mode!r}: an index with decoder='bytes' has one mode, "
                             "'scan' (its codes are the byte decoder's, not the encoder's)")
        if mode == "hamming" and self.nlist is not None:
            raise ValueError("mode='hamming' scans every code; inverted lists (nlist) serve "
                             "the scan and two_stage modes")
        self._mode = mode

    @property
    def ntotal(self) -> int:
        return len(self._ids)

    @property
    def is_trained(self) -> bool:
        lists_learned = self.nlist is None or self._centroids is not None
        return lists_learned and (self.decoder == "model" or self.byte_decoder is not None)

    def __repr__(self) -> str:
        score = {"scan": f", score={self.scores.chosen!r}",
                 "two_stage": f", shortlist by 'encoder', rescored by {self._rescore_kind()!r}"
                              f", shortlist={self.shortlist}",
                 "hamming": ""}[self.mode]
        if self.decoder == "bytes":
            score = ", decoder='bytes'"
        lists = "" if self.nlist is None else f", nlist={self.nlist}, nprobe={self.nprobe}"
        return (f"SGHIndex({self.bits} bits, {self.ntotal} items, mode={self.mode!r}{score}"
                f"{lists}, model {self.fingerprint})")

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Packed codes of features ``x``: the encoder score's signs, or the byte decoder's
        posterior modes (of the residuals to their lists' centroids with ``nlist``)."""
        features = self._features(x)
        if self.decoder == "model":
            return self._codes_of(features)
        self._require_training()
        return self._stored_codes(features, self._lists_of(features))

    def _stored_codes(self, features: np.ndarray, lists: np.ndarray | None) -> np.ndarray:
        codes = self._codes_of(features)
        if self.byte_decoder is not None:
            codes = self.byte_decoder.encode(self._residuals(features, lists), codes)
        return codes

    def _residuals(self, features: np.ndarray, lists: np.ndarray | None) -> np.ndarray:
        """What the byte decoder codes: the features, or their residuals to their lists'."""
        return features if lists is None else features - self._centroids[lists]

    def _lists_of(self, features: np.ndarray) -> np.ndarray | None:
        return None if self.nlist is None else self._coarse(features, 1)[1][:, 0]

    def _codes_of(self, features: np.ndarray) -> np.ndarray:
        """`encode` of features already as the model saw them (`_features`)."""
        return pack_bits(self.scores.scores["encoder"].bit_weights(features) <= 0)

    def train(self, x: np.ndarray, seed: int = 0) -> None:
        """Fit the byte decoder (``decoder="bytes"``) and the ``nlist`` lists on features ``x``."""
        if self.decoder == "bytes" and self.ntotal:
            raise ValueError(f"train: the index holds {self.ntotal} items coded by its byte "
                             "decoder, which new tables would invalidate; train a new SGHIndex")
        x = self._features(check_queries(x, self.dim, "x"))
        if self.nlist is not None and len(x) < self.nlist:
            raise ValueError(f"train: {len(x)} points for nlist={self.nlist} lists; accepted: "
                             "at least one point per list")
        self._engines.clear()
        if self.nlist is not None:
            import faiss

            kmeans = faiss.Kmeans(self.dim, self.nlist, niter=20, seed=seed,
                                  max_points_per_centroid=_KMEANS_POINTS_PER_LIST)
            kmeans.train(np.ascontiguousarray(x, np.float32))
            self._centroids = kmeans.centroids
        if self.decoder == "bytes":
            self.byte_decoder = ByteDecoder.fit(self._residuals(x, self._lists_of(x)),
                                                self._codes_of(x), self.bits, seed=seed)

    def add(self, x: np.ndarray, ids: np.ndarray | None = None) -> None:
        """Encode features ``x`` and add them (``ids``: int64 per row; default ``ntotal ..``)."""
        x = check_queries(x, self.dim, "x")
        self._require_training()
        ids = self._new_ids(len(x), ids)
        for start in range(0, len(x), _ADD_ROWS):
            block = self._features(x[start : start + _ADD_ROWS])
            lists = self._lists_of(block)
            self._append(self._stored_codes(block, lists), ids[start : start + len(block)], lists)

    def add_codes(self, codes, ids: np.ndarray | None = None) -> None:
        """Add packed codes: an ``(n, ceil(bits/8))`` uint8 array, or a ``codes.npz`` path whose
        database codes must carry this model's fingerprint (a flat index only)."""
        if self.nlist is not None:
            raise ValueError("add_codes: an index with inverted lists places each item by its "
                             "features; use add(x), or SGHIndex.from_run(run, nlist=...)")
        if self.decoder == "bytes":
            raise ValueError("add_codes: an index with decoder='bytes' stores its byte "
                             "decoder's codes, not the encoder's; use add(x)")
        if isinstance(codes, (str, os.PathLike)):
            saved = load_codes(codes)
            refuse_another_models_scores(saved, self.scores, "this index's scores")
            codes = saved.database
        codes = validate_codes(codes, self.bits, "codes")
        self._append(codes, self._new_ids(len(codes), ids), None)

    def remove_ids(self, ids) -> int:
        """Remove every item with one of ``ids``; the number removed."""
        kept = ~np.isin(self._ids, np.asarray(ids, np.int64).reshape(-1))
        removed = int((~kept).sum())
        if removed:
            self._codes, self._ids = self._codes[kept], self._ids[kept]
            if self.nlist is not None:
                self._lists = self._lists[kept]
            self._engines.clear()
        return removed

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest items of each query: ``(D, I)``, ``(nq, k)``, sorted by (score, id),
        smaller nearer; ``I`` the items' ids, padding ``D = inf``, ``I = -1`` (as faiss)."""
        k = check_int("k", k, 1)
        queries = self._features(check_queries(queries, self.dim))
        import faiss  # its thread count: one setting governs every mode's threads

        threads = faiss.omp_get_max_threads()
        if self.mode == "hamming":
            D, rows = self._engine("hamming").search(self._codes_of(queries), k)
        else:
            self._require_training()
            probes = None if self.nlist is None else self._coarse(
                queries, check_int("nprobe", self.nprobe, 1))[1]
            if self.decoder == "bytes":
                if probes is None:
                    exact = self.refine_factor is None
                    D, rows = self._engine("bytes" if exact else "bytes_fast").search(
                        queries, k, workers=threads)
                    # The scan's score lacks the query's own ||x||^2: added, D is a distance.
                    D += np.einsum("ij,ij->i", queries, queries)[:, None]
                else:
                    D, rows = self._engine("bytes_lists").search(queries, k, probes, threads)
            elif self.mode == "scan":
                D, rows = self._engine("scan").search(queries, k, probes, threads)
            else:
                depth = (default_shortlist(k, self.ntotal) if self.shortlist is None
                         else max(k, check_int("shortlist", self.shortlist, 1)))
                candidates = self._engine("shortlist").search(queries, depth, probes,
                                                              threads)[1]
                D, rows = padded(*rescored(self._engine("rescore"), queries, candidates,
                                           threads), k)
        found = rows >= 0
        ids = np.full(rows.shape, -1, np.int64)
        ids[found] = self._ids[rows[found]]
        return D, ids

    def _engine(self, name: str):
        """The structure a mode searches with, built on first use after a change."""
        if name not in self._engines:
            self._engines[name] = self._build_engine(name)
        engine = self._engines[name]
        if isinstance(engine, (FastScanIndex, ByteFastScan)):
            engine.refine_factor = check_int("refine_factor", self.refine_factor, 1)
        return engine

    def _build_engine(self, name: str):
        if name == "bytes_lists":
            return InvertedTableScan(self.byte_decoder, self._codes, self._lists, self._centroids)
        if name == "bytes_fast":
            return ByteFastScan(self.byte_decoder, self._codes)
        if name in ("scan", "shortlist"):
            kind = self.scores.chosen if name == "scan" else "encoder"
            engine = FastScanIndex(self.scores.scores[kind], self.nlist)
            engine.add(self._codes, self._lists)  # the lists are read with nlist only
            return engine
        if name == "rescore":
            rescorer = self.scores.rescorer(self._rescore_kind(), self._codes)
            # search -> _engine -> here: the warning names the user's search call.
            warn_if_one_score(self.scores.scores["encoder"], rescorer, stacklevel=4)
            if not isinstance(rescorer, AsymmetricScore):
                return rescorer
            engine = AsymmetricIndex(rescorer)
        elif name == "hamming":
            engine = HammingIndex(self.bits)
        elif name == "bytes":
            engine = AsymmetricIndex(self.byte_decoder)
        else:
            raise ValueError(f"no search engine named {name!r}")
        engine.add(self._codes)
        return engine

    def _rescore_kind(self) -> str:
        return self.scores.rescore_chosen or self.scores.chosen

    def save(self, path: str | os.PathLike) -> Path:
        """Write the index as a directory (`SAVED_INDEX`), replacing only an index saved before."""
        import faiss

        path = Path(path)
        arrays = {"format": np.str_(_FORMAT), "codes": self._codes, "ids": self._ids,
                  "lists": self._lists, "mode": np.str_(self.mode),
                  "nlist": np.int64(self.nlist or 0), "nprobe": np.int64(self.nprobe),
                  "shortlist": np.int64(self.shortlist or 0),
                  "refine_factor": np.int64(self.refine_factor or DEFAULT_REFINE_FACTOR),
                  "fingerprint": np.str_(self.fingerprint), "decoder": np.str_(self.decoder)}
        if self._centroids is not None:
            arrays["centroids"] = self._centroids
        if self.byte_decoder is not None:
            arrays.update(self.byte_decoder.arrays(_BYTE_DECODER))
            # Its own key (0: the exact scan): files before it hold 1, unused, in refine_factor.
            arrays["byte_refine_factor"] = np.int64(self.refine_factor or 0)
        if self.decoder == "bytes":  # codes.faiss: faiss's additive quantizer of the same tables
            faiss_codes = self.byte_decoder.faiss_index(
                self._codes, *(() if self.nlist is None else (self._lists, self._centroids)))
        else:  # the index the mode searches
            faiss_codes = self._engine("scan" if self.mode == "scan" else "shortlist")._index()
        with atomic_directory(path, replaces=SAVED_INDEX) as staging:
            np.savez(staging / INDEX_FILE, **arrays)
            self.scores.save(staging / SCORES_FILE)
            faiss.write_index(faiss_codes, str(staging / CODES_FILE))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> SGHIndex:
        """Read an index `save` wrote; UserInputError naming the file and key if it is not one."""
        path = Path(path)
        if not (path / INDEX_FILE).is_file():
            raise UserInputError(f"{path}: no {INDEX_FILE} there; expected a directory "
                                 "SGHIndex.save wrote")
        arrays = read_npz_arrays(path / INDEX_FILE)
        if str(arrays.get("format", "")) != _FORMAT:
            raise UserInputError(f"{path / INDEX_FILE}: key 'format' is not {_FORMAT!r}; "
                                 "expected a file this sgh's SGHIndex.save wrote (build it again)")
        try:
            scores = ScoreSet.load(path / SCORES_FILE)
        except ValueError as error:
            raise UserInputError(str(error)) from None
        if str(arrays["fingerprint"]) != scores.fingerprint:
            raise UserInputError(f"{path / INDEX_FILE} (model {arrays['fingerprint']}) and "
                                 f"{path / SCORES_FILE} (model {scores.fingerprint}) come from "
                                 "different models; save the index again")
        decoder = str(arrays.get("decoder", "model"))
        try:
            index = cls(scores, str(arrays["mode"]), int(arrays["nlist"]) or None, decoder)
            if decoder == "bytes":
                index.byte_decoder = ByteDecoder.from_arrays(arrays, str(path / INDEX_FILE),
                                                             _BYTE_DECODER)
        except ValueError as error:
            raise UserInputError(f"{path / INDEX_FILE}: {error}") from None
        index.nprobe, index.refine_factor = int(arrays["nprobe"]), int(arrays["refine_factor"])
        if decoder == "bytes":
            index.refine_factor = int(arrays.get("byte_refine_factor", 0)) or None
        index.shortlist = int(arrays["shortlist"]) or None
        index._centroids = arrays.get("centroids")
        index._append(validate_codes(arrays["codes"], index.bits, f"{path / INDEX_FILE} codes"),
                      arrays["ids"].astype(np.int64),
                      arrays["lists"].astype(np.int64) if index.nlist else None)
        return index

    @classmethod
    def from_run(cls, run_dir: str | os.PathLike, mode: str = "scan",
                 nlist: int | None = None, decoder: str = "model") -> SGHIndex:
        """The database codes and scores of a finished `sgh-train` run (ids: database rows);
        with ``nlist`` or ``decoder="bytes"`` its dataset's features are read again (to learn
        the lists, or to fit the byte decoder and encode the database by it)."""
        from sgh.artifacts.run_directory import RunDirectory

        run = RunDirectory(run_dir, create=False)
        scores = ScoreSet.of_run(run)
        codes = load_codes(run.codes)
        refuse_another_models_scores(codes, scores, run.asymmetric_score)
        index = cls(scores, mode, nlist, decoder)
        ids = np.arange(len(codes.database), dtype=np.int64)
        if nlist is None and decoder == "model":
            index._append(codes.database, ids, None)
            return index
        split = _run_split(run, len(codes.database))
        database = np.asarray(split.database, np.float32)
        if decoder == "bytes":
            index.train(np.asarray(split.train, np.float32))
            index.add(database, ids)
            return index
        index.train(database)
        lists = np.concatenate([index._lists_of(database[start : start + _ADD_ROWS])
                                for start in range(0, len(database), _ADD_ROWS)])
        index._append(codes.database, ids, lists)
        return index

    def _features(self, x: np.ndarray) -> np.ndarray:
        """float32 features as the model saw them: unit-normalised for an angular model."""
        x = np.asarray(x)
        if x.dtype.kind != "f":
            conversion = self.scores.feature_conversion
            how = ("sgh-train divides uint8 features by 255); convert them first, e.g. "
                   "x.astype(np.float32) / 255" if conversion in (None, UINT8_CONVERSION) else
                   f"its training features were converted as '{conversion}'); convert them "
                   "first, e.g. x.astype(np.float32)")
            raise ValueError(f"features of dtype {x.dtype}: SGHIndex takes float features as "
                             f"the model saw them ({how}")
        x = np.ascontiguousarray(x, np.float32)
        if self.scores.similarity == "angular":
            x = unit_normalised(x, "the features (angular: divided by their length)")
        return x

    def _coarse(self, x: np.ndarray, nearest: int) -> tuple[np.ndarray, np.ndarray]:
        """``(n, nearest)`` squared distances (float32) to the nearest centroids, their lists."""
        if "coarse" not in self._engines:
            import faiss

            self._engines["coarse"] = faiss.IndexFlatL2(self.dim)
            self._engines["coarse"].add(self._centroids)
        nearest = min(nearest, self.nlist)
        return self._engines["coarse"].search(np.ascontiguousarray(x, np.float32), nearest)

    def _require_training(self) -> None:
        if not self.is_trained and self.decoder == "bytes":
            raise ValueError("the index has decoder='bytes', its byte decoder not fitted yet: "
                             "call index.train(x) with training features first")
        if not self.is_trained:
            raise ValueError(f"the index has nlist={self.nlist} inverted lists, not learned "
                             "yet: call index.train(x) with training features first")

    def _new_ids(self, n: int, ids) -> np.ndarray:
        if ids is None:
            start = int(self._ids.max()) + 1 if self.ntotal else 0
            return np.arange(start, start + n, dtype=np.int64)
        ids = np.asarray(ids)
        if ids.shape != (n,) or ids.dtype.kind not in "iu":
            raise ValueError(f"ids must be {n} integers, one per item, got dtype {ids.dtype} "
                             f"and shape {ids.shape}")
        return ids.astype(np.int64)

    def _append(self, codes: np.ndarray, ids: np.ndarray, lists: np.ndarray | None) -> None:
        """Add items at the end; with inverted lists each after the last item of its list, so
        that a list is one run of the codes, which the byte decoder's scan reads in place."""
        at = len(self._ids)
        if lists is not None:
            order = np.argsort(lists, kind="stable")
            codes, ids, lists = codes[order], ids[order], lists[order].astype(np.int64)
            at = np.searchsorted(self._lists, lists, side="right")
            self._lists = np.insert(self._lists, at, lists)
        self._codes = np.insert(self._codes, at, codes, axis=0)
        self._ids = np.insert(self._ids, at, ids)
        self._engines.clear()


def _run_split(run, n_database: int):
    """The split of a run's dataset (`RetrievalSplit`), read again from its config.yaml."""
    from sgh.config import dataset_config_from
    from sgh.data import load_split

    previous = run.previous_config()
    if previous is None or "dataset" not in previous:
        raise UserInputError(f"{run.path}: no readable config.yaml; nlist reads the run's "
                             "database features through it")
    split = load_split(dataset_config_from(previous["dataset"]))
    if len(split.database) != n_database:
        raise UserInputError(f"{run.path}: its dataset now has {len(split.database)} database "
                             f"items, its codes {n_database}; the dataset changed since the run")
    return split


def rescored(rescorer, queries: np.ndarray, candidates: np.ndarray, workers: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """``rescorer.rescore`` of each block of queries, on ``workers`` threads."""
    if workers == 1 or len(queries) <= QUERY_BLOCK:
        return rescorer.rescore(queries, candidates)
    blocks: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def rescore(start: int) -> None:
        rows = slice(start, start + QUERY_BLOCK)
        blocks[start] = rescorer.rescore(queries[rows], candidates[rows])

    run_query_blocks(rescore, len(queries), workers)
    return (np.concatenate([blocks[start][0] for start in sorted(blocks)]),
            np.concatenate([blocks[start][1] for start in sorted(blocks)]))
