"""`SGHIndex`: a trained model's query side, the database codes and their ids, searched the way
faiss indexes are (usage, modes and ``nlist``: docs/guide/search.md).

Modes (`index.mode`), the names `eval.ranking` evaluates them by: ``"scan"``, every code by the
validated score on faiss's fast-scan kernels (:mod:`sgh.search.fast_scan`); ``"two_stage"``, the
encoder score's shortlist reordered by the validated rescoring score; ``"hamming"``, the query's
own code by Hamming distance; ``"bytes"``, every code by the byte decoder
(:mod:`sgh.scores.byte_decoder`: the model's own, or one fitted by `train`), whose codes are its
own: an item's code moves from the encoder's toward its posterior mode as far as ``encoding`` says
(`sgh.scores.posterior_modes`; default: the one the model's validation chose); with ``nlist``,
as in faiss's IVF-PQ, it is coded as its residual to its list's centroid.

Features are encoded by the encoder's own score: a bit is 1 where its encoder weight is <= 0, in
float64 (a logit within float32 rounding of 0 may give a bit unlike the TensorFlow encoder's).
Codes carry the model's fingerprint (`sgh.codes.model_fingerprint`): codes, scores and saved
indexes of different models are refused, never searched together; so are features unlike
those the model recorded (`sgh.search.index_features`, every entry point) and a saved
index.npz that is not as `save` wrote it (`sgh.search.saved_index_checks`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from sgh.artifacts.atomic import DirectoryKind, atomic_directory
from sgh.artifacts.codes_file import encoded_codes, load_codes, refuse_another_models_scores
from sgh.codes import pack_bits, validate_codes
from sgh.config import RANKINGS
from sgh.data.neighbours import exact_neighbours
from sgh.data.npz_file import read_npz_arrays
from sgh.data.streamed_features import evenly_spaced, take_rows
from sgh.errors import UserInputError, check_int
from sgh.metrics.neighbour_recall import recall_of_results
from sgh.scores.asymmetric import AsymmetricScore
from sgh.scores.asymmetric_index import AsymmetricIndex
from sgh.scores.byte_decoder import ByteDecoder
from sgh.scores.posterior_modes import index_encoding
from sgh.scores.score_set import ScoreSet
from sgh.search.coarse_lists import CoarseQuantizer, learned_centroids
from sgh.search.faiss_codes import additive_quantizer
from sgh.search.fast_scan import DEFAULT_REFINE_FACTOR, FastScanIndex
from sgh.search.index_features import refuse_overflow, served_features
from sgh.search.index_items import IndexItems, check_ids
from sgh.search.inverted_table_scan import InvertedTableScan
from sgh.search.progress import say_progress, vectors_done
from sgh.search.saved_index_checks import check_saved_arrays, saved_mode
from sgh.search.two_stage import default_shortlist, padded, rescored, warn_if_one_score

MODES = RANKINGS  # the evaluation's rankings are the modes, by the same names
# The files of a saved index (a directory): faiss opens CODES_FILE with faiss.read_index.
INDEX_FILE, SCORES_FILE, CODES_FILE = "index.npz", "scores.npz", "codes.faiss"
_FORMAT = "sgh-index 2"  # 2: a byte decoder's inverted lists hold codes of residuals
# The mark `save` leaves: a folder that merely holds files of these names is the user's.
SAVED_INDEX = DirectoryKind(f"a saved SGHIndex ({INDEX_FILE}, {SCORES_FILE}, {CODES_FILE})",
                            required=frozenset({INDEX_FILE, SCORES_FILE, CODES_FILE}),
                            marker=".sgh-index")
_ADD_ROWS = 1 << 16  # features encoded (and assigned to lists) at a time by `add`
_BYTE_DECODER = "byte_decoder."  # the key prefix of a byte decoder's arrays in index.npz
NPROBE_TOLERANCE, VALIDATION_QUERIES = 0.005, 1000  # `choose_nprobe`'s, as a run's encoding


class SGHIndex:
    """A model's codes and their search (module doc). ``model``: a fitted hasher with an
    asymmetric score (`SGHHasher`, ITQ, PCAH, LSH) or a `ScoreSet` (a run's asymmetric.npz);
    ``mode``: one of `MODES` (``"bytes"``: the codes are the byte decoder's, and the index keeps
    that mode); ``nlist``: inverted lists (None: a flat scan of every code); ``encoding``: how
    far the byte decoder's codes go (None: the model's validated choice); ``verbose``: progress
    lines on stderr (what `train` learns, an `add` of more than 65,536 rows, `choose_nprobe`)."""

    def __init__(self, model, mode: str = "scan", nlist: int | None = None,
                 encoding: str | None = None, verbose: bool = False) -> None:
        self.verbose = verbose
        self.nlist = None if nlist is None else check_int("nlist", nlist, 1)
        self._mode = mode  # the codes it stores, for good (`codes_by_bytes`): checked next
        self.mode = mode
        self.scores = ScoreSet.of_model(model)
        # Inverted lists code residuals, which the model's decoder was not trained on.
        self.byte_decoder: ByteDecoder | None = (
            self.scores.byte_decoder if self.codes_by_bytes and nlist is None else None)
        self.encoding = index_encoding(encoding, self.codes_by_bytes, nlist,
                                       self.scores.encoding)
        self.bits = self.scores.scores["encoder"].bits
        self.dim = self.scores.scores["encoder"].dim
        self.fingerprint = self.scores.fingerprint
        self._nprobe, self.shortlist = 1, None
        self.refine_factor = DEFAULT_REFINE_FACTOR
        self._items = IndexItems(-(-self.bits // 8), listed=self.nlist is not None)
        self._centroids: np.ndarray | None = None
        # The engines of the items as they are now: replaced, never emptied, on every change, so
        # that an engine a concurrent search builds from the items before is never kept.
        self._engines: dict = {}

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} is not known; accepted: {', '.join(MODES)}")
        if (mode == "bytes") != self.codes_by_bytes:
            held, searched_by = (("the byte decoder's", "mode 'bytes' alone") if self.codes_by_bytes
                                 else ("the encoder's signs", "the modes hamming, scan and "
                                       "two_stage"))
            raise ValueError(f"mode={mode!r}: the index's codes are {held}, searched by "
                             f"{searched_by}; build another index with mode={mode!r}")
        if mode == "hamming" and self.nlist is not None:
            raise ValueError("mode='hamming' scans every code; inverted lists (nlist) serve "
                             "the scan and two_stage modes")
        self._mode = mode

    @property
    def codes_by_bytes(self) -> bool:
        """Whether the codes are the byte decoder's (mode "bytes", for good), not the encoder's."""
        return self._mode == "bytes"

    @property
    def nprobe(self) -> int:
        """Inverted lists each query scans (1 without lists)."""
        return self._nprobe

    @nprobe.setter
    def nprobe(self, nprobe: int) -> None:
        nprobe = check_int("nprobe", nprobe, 1)
        if self.nlist is None and nprobe != 1:
            raise ValueError(f"nprobe={nprobe}: the index has no inverted lists, and every "
                             "search scans every code; nprobe serves an index with nlist")
        self._nprobe = nprobe

    @property
    def centroids(self) -> np.ndarray | None:
        """The inverted lists' ``(nlist, dim)`` float32 centroids, read-only (None without lists,
        or before `train`): faiss's IVF indexes take them as a trained coarse quantizer, so that
        both search one partition."""
        if self._centroids is None:
            return None
        view = self._centroids.view()
        view.flags.writeable = False
        return view

    @property
    def ntotal(self) -> int:
        return len(self._items)

    @property
    def bytes_per_item(self) -> dict[str, int]:
        """What `save` stores of each item, and the index holds in memory besides what its search
        engines build, in bytes: its code, its id (none while ids are rows), its list number."""
        return self._items.bytes_per_item()

    @property
    def is_trained(self) -> bool:
        lists_learned = self.nlist is None or self._centroids is not None
        return lists_learned and (not self.codes_by_bytes or self.byte_decoder is not None)

    def __repr__(self) -> str:
        score = {"scan": f", score={self.scores.chosen!r}",
                 "two_stage": f", shortlist by 'encoder', rescored by {self._rescore_kind()!r}"
                              f", shortlist={self.shortlist}",
                 "hamming": "", "bytes": f", encoding={self.encoding!r}"}[self.mode]
        lists = "" if self.nlist is None else f", nlist={self.nlist}, nprobe={self.nprobe}"
        held = self.bytes_per_item
        return (f"SGHIndex({self.bits} bits, {self.ntotal:,} items, {sum(held.values())} bytes "
                f"each ({' + '.join(f'{field} {size}' for field, size in held.items())}), "
                f"mode={self.mode!r}{score}{lists}, model {self.fingerprint})")

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Packed codes of features ``x``: the encoder score's signs, or the byte decoder's
        posterior modes (of the residuals to their lists' centroids with ``nlist``)."""
        features = served_features(x, self.scores, "x")
        if not self.codes_by_bytes:
            return self._codes_of(features)
        self._require_training()
        return self._stored_codes(features, self._lists_of(features))

    def _stored_codes(self, features: np.ndarray, lists: np.ndarray | None) -> np.ndarray:
        weights = self.scores.scores["encoder"].code_weights(features)
        codes = pack_bits(weights <= 0)
        if self.byte_decoder is not None:
            codes = self.byte_decoder.encode(self._residuals(features, lists), codes,
                                             self.encoding, np.abs(weights))
        return codes

    def _residuals(self, features: np.ndarray, lists: np.ndarray | None) -> np.ndarray:
        """What the byte decoder codes: the features, or their residuals to their lists'."""
        return features if lists is None else features - self._centroids[lists]

    def _lists_of(self, features: np.ndarray) -> np.ndarray | None:
        return None if self.nlist is None else self._coarse(features, 1)[:, 0]

    def _codes_of(self, features: np.ndarray) -> np.ndarray:  # of features `served_features` read
        return pack_bits(self.scores.scores["encoder"].code_weights(features) <= 0)

    def train(self, x: np.ndarray, seed: int = 0) -> None:
        """Learn the ``nlist`` lists, and fit the byte decoder (mode ``"bytes"``) where the
        model brings none, or for the lists' residuals, on features ``x``."""
        if self.ntotal and (self.codes_by_bytes or self.nlist is not None):
            held = "coded by its byte decoder" if self.codes_by_bytes else "in its lists"
            raise ValueError(f"train: the index holds {self.ntotal} items {held}, which new "
                             "training would leave stale; train a new SGHIndex (or remove "
                             "every item first)")
        x = served_features(x, self.scores, "x")
        if self.nlist is not None and len(x) < self.nlist:
            raise ValueError(f"train: {len(x)} points for nlist={self.nlist} lists; accepted: "
                             "at least one point per list")
        if self.codes_by_bytes and not len(x):
            raise ValueError("train: no points to fit the byte decoder on; accepted: at least one")
        self._engines = {}
        fits_tables = self.codes_by_bytes and (self.nlist is not None
                                                   or self.byte_decoder is None)
        steps = ([f"k-means of {self.nlist} lists"] if self.nlist else []) + (
            ["the byte decoder's tables (hard EM)"] if fits_tables else [])
        started = time.perf_counter()
        self._progress(f"training on {len(x):,} rows: {' and '.join(steps) or 'nothing to learn'}")
        if self.nlist is not None:
            self._centroids = learned_centroids(x, self.nlist, seed)
        if fits_tables:
            self.byte_decoder = ByteDecoder.fit(self._residuals(x, self._lists_of(x)),
                                                self._codes_of(x), self.bits, seed=seed)
        self._progress(f"trained in {time.perf_counter() - started:,.1f} s")

    def add(self, x: np.ndarray, ids: np.ndarray | None = None) -> None:
        """Encode features ``x`` and add them (``ids``: int64 per row; default ``ntotal ..``)."""
        features = served_features(x, self.scores, "x")  # every row checked before any is added
        self._require_training()
        ids = self._items.new_ids(len(features), ids)
        codes, lists, started = [], [], time.perf_counter()
        for start in range(0, len(features), _ADD_ROWS):
            block = features[start : start + _ADD_ROWS]
            lists.append(self._lists_of(block))
            codes.append(self._stored_codes(block, lists[-1]))
            done = start + len(block)
            if len(features) > _ADD_ROWS:  # one block is said by the caller's own progress
                self._progress(vectors_done("indexed", done, len(features), started))
        self._items.append(np.concatenate(codes) if codes else self._items.codes[:0], ids,
                           None if self.nlist is None else np.concatenate(lists or [[]]))
        self._engines = {}

    def add_codes(self, codes, ids: np.ndarray | None = None) -> None:
        """Add packed codes: an ``(n, ceil(bits/8))`` uint8 array (taken as this model's: an
        array carries no fingerprint), or a file whose codes must carry this model's
        fingerprint: a ``codes.npz`` (its database codes) or `sgh-encode`'s ``.npy`` with its
        record (a flat index only)."""
        if self.nlist is not None:
            raise ValueError("add_codes: an index with inverted lists places each item by its "
                             "features; use add(x), or SGHIndex.from_run(run, nlist=...)")
        if self.codes_by_bytes:
            raise ValueError("add_codes: an index of mode 'bytes' stores its byte "
                             "decoder's codes, not the encoder's; use add(x)")
        if isinstance(codes, (str, os.PathLike)) and Path(codes).suffix == ".npy":
            codes = encoded_codes(codes, self.fingerprint, self.bits)
        elif isinstance(codes, (str, os.PathLike)):
            saved = load_codes(codes)
            refuse_another_models_scores(saved, self.scores, "this index's scores")
            codes = saved.database
        codes = validate_codes(codes, self.bits, "codes").copy()  # never the caller's array
        self._items.append(codes, self._items.new_ids(len(codes), ids), None)
        self._engines = {}

    def remove_ids(self, ids) -> int:
        """Remove every item with one of ``ids`` (integers); the number removed. Their ids are
        not handed out again by `add`."""
        removed = self._items.remove(ids)
        if removed:
            self._engines = {}
        return removed

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest items of each query: ``(D, I)``, ``(nq, k)``, sorted by (score, id),
        smaller nearer (Hamming mode: ties in the order added); ``D`` float32 in every mode,
        ``I`` the items' ids, padding ``D = inf``, ``I = -1`` (as faiss)."""
        k = check_int("k", k, 1)
        queries = served_features(queries, self.scores, "queries")
        import faiss  # its thread count: one setting governs every mode's threads

        threads = faiss.omp_get_max_threads()
        if self.mode == "hamming":
            D, rows = self._engine("hamming").search(self._codes_of(queries), k)
        else:
            self._require_training()
            probes = None if self.nlist is None else self._coarse(queries, self.nprobe)
            if self.codes_by_bytes:
                if probes is None:
                    D, rows = self._engine("bytes").search(queries, k, workers=threads)
                    # The scan's score lacks the query's own ||x||^2: added, D is a distance.
                    D += np.einsum("ij,ij->i", queries, queries)[:, None]
                else:
                    D, rows = self._engine("bytes_lists").search(queries, k, probes, threads)
                refuse_overflow(D, rows >= 0)  # squared distances beyond float32
            elif self.mode == "scan":
                D, rows = self._engine(self.scores.chosen).search(queries, k, probes, threads)
            else:
                depth = (default_shortlist(k, self.ntotal) if self.shortlist is None
                         else max(k, check_int("shortlist", self.shortlist, 1)))
                depth = min(depth, max(self.ntotal, 1))  # no longer than the items: padded
                candidates = self._engine("encoder").search(queries, depth, probes, threads)[1]
                D, rows = padded(*rescored(self._engine("rescore"), queries, candidates,
                                           threads), k)
        if D.dtype != np.float32:  # one convention for every mode: Hamming, decoded scores too
            D = np.where(rows >= 0, D, np.inf).astype(np.float32)
        return D, self._items.ids_of(rows)

    def choose_nprobe(self, queries: np.ndarray, neighbours: np.ndarray, n: int = 100,
                      tolerance: float = NPROBE_TOLERANCE) -> dict[int, float]:
        """Set ``nprobe`` to the fewest lists (1, 2, 4, ..., ``nlist``) whose RecallK@``n`` of
        validation ``queries`` (training features, never the test queries; ``neighbours``:
        their exact ``(nq, K)`` nearest items' ids) is within ``tolerance`` of the best, as
        faiss's autotune picks an operating point; the recall measured at each ``nprobe``."""
        neighbours = np.asarray(neighbours)
        if self.nlist is None or neighbours.ndim != 2 or len(neighbours) != len(queries):
            raise ValueError(f"choose_nprobe: nlist={self.nlist}, neighbours of shape "
                             f"{neighbours.shape} for {len(queries)} queries; accepted: an "
                             "index with inverted lists, (n_queries, K) ids")
        recalls = {}
        for nprobe in sorted({min(1 << power, self.nlist)
                              for power in range(self.nlist.bit_length() + 1)}):
            self.nprobe = nprobe
            recalls[nprobe] = round(recall_of_results(
                self.search(queries, min(n, self.ntotal))[1], neighbours, neighbours.shape[1]), 4)
        best = max(recalls.values())
        self.nprobe = min(p for p, recall in recalls.items() if recall >= best - tolerance)
        self._progress(f"nprobe={self.nprobe} of {self.nlist} lists, chosen on "
                       f"{len(queries):,} validation queries (the fewest within {tolerance} of "
                       f"the best Recall{neighbours.shape[1]}@{n}; " + ", ".join(
                           f"nprobe {p}: {recall:.4f}" for p, recall in recalls.items()) + ")")
        return recalls

    def _engine(self, name: str):
        """The structure a mode searches with, built on first use after a change."""
        engines = self._engines  # of the items this engine is built from (__init__)
        if name not in engines:
            engines[name] = self._build_engine(name)
        engine = engines[name]
        if isinstance(engine, FastScanIndex):
            engine.refine_factor = check_int("refine_factor", self.refine_factor, 1)
        return engine

    def _build_engine(self, name: str):
        if name == "bytes_lists":
            return InvertedTableScan(self.byte_decoder, self._items.codes, self._items.lists,
                                     self._centroids)
        # A score kind names its fast scan: mode scan's (the chosen kind) and mode two_stage's
        # shortlist (the encoder's), one engine where the two are the same kind.
        if name in self.scores.scores:
            engine = FastScanIndex(self.scores.scores[name], self.nlist)
            engine.add(self._items.codes, self._items.lists)  # lists: read with nlist only
            return engine
        if name == "rescore":
            rescorer = self.scores.rescorer(self._rescore_kind(), self._items.codes)
            # search -> _engine -> here: the warning names the user's search call.
            warn_if_one_score(self.scores.scores["encoder"], rescorer, stacklevel=4)
            if not isinstance(rescorer, AsymmetricScore):
                return rescorer
            engine = AsymmetricIndex(rescorer)
        elif name == "hamming":  # ties by position (the order added), as faiss breaks them
            import faiss

            engine = faiss.IndexBinaryFlat(8 * self._items.codes.shape[1])
        elif name == "bytes":
            engine = AsymmetricIndex(self.byte_decoder)
        else:
            raise ValueError(f"no search engine named {name!r}")
        engine.add(self._items.codes)
        return engine

    def _rescore_kind(self) -> str:
        return self.scores.rescore_chosen or self.scores.chosen

    def save(self, path: str | os.PathLike) -> Path:
        """Write the index as a directory (`SAVED_INDEX`), replacing only an index saved before.
        An untrained one (lists not learned, byte decoder not fitted) is refused (ValueError),
        as its `add` and `search` are."""
        import faiss

        self._require_training()
        path = Path(path)
        arrays = {"format": np.str_(_FORMAT), **self._items.saved_arrays(),
                  "mode": np.str_(self.mode),
                  "nlist": np.int64(self.nlist or 0), "nprobe": np.int64(self.nprobe),
                  "shortlist": np.int64(self.shortlist or 0),
                  "refine_factor": np.int64(self.refine_factor),
                  "fingerprint": np.str_(self.fingerprint),
                  "encoding": np.str_(self.encoding or "")}
        if self._centroids is not None:
            arrays["centroids"] = self._centroids
        if self.byte_decoder is not None:
            arrays.update(self.byte_decoder.arrays(_BYTE_DECODER))
        if self.codes_by_bytes:  # codes.faiss: faiss's additive quantizer of the same tables
            faiss_codes = additive_quantizer(
                self.byte_decoder, self._items.codes,
                *(() if self.nlist is None else (self._items.lists, self._centroids)))
        else:  # the index the mode searches
            faiss_codes = self._engine(
                self.scores.chosen if self.mode == "scan" else "encoder")._index()
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
        where = str(path / INDEX_FILE)
        check_saved_arrays(arrays, where, scores, _BYTE_DECODER)
        if str(arrays["fingerprint"]) != scores.fingerprint:
            raise UserInputError(f"{path / INDEX_FILE} (model {arrays['fingerprint']}) and "
                                 f"{path / SCORES_FILE} (model {scores.fingerprint}) come from "
                                 "different models; save the index again")
        mode = saved_mode(arrays)
        # An index saved before encodings were a choice coded its items by local search.
        encoding = str(arrays.get("encoding", "local_search")) if mode == "bytes" else None
        try:
            index = cls(scores, mode, int(arrays["nlist"]) or None, encoding)
            if mode == "bytes":
                index.byte_decoder = ByteDecoder.from_arrays(arrays, where, _BYTE_DECODER)
                if (index.byte_decoder.bits, index.byte_decoder.dim) != (index.bits, index.dim):
                    raise ValueError("its byte decoder is of another model's codes or features")
            index.nprobe, index.refine_factor = int(arrays["nprobe"]), int(arrays["refine_factor"])
            index.shortlist = int(arrays["shortlist"]) or None
            index._centroids = arrays.get("centroids")
            index._items.append(validate_codes(arrays["codes"], index.bits, "codes"),
                                None if "ids" not in arrays else check_ids(
                                    arrays["ids"], len(arrays["codes"])),
                                arrays["lists"] if index.nlist else None)
        except ValueError as error:
            raise UserInputError(f"{where}: {str(error).removeprefix(f'{where}: ')}") from None
        index._items.next_id = max(index._items.next_id, int(arrays.get("next_id", 0)))
        return index

    @classmethod
    def from_run(cls, run_dir: str | os.PathLike, mode: str = "scan",
                 nlist: int | None = None, encoding: str | None = None,
                 verbose: bool = False) -> SGHIndex:
        """The database codes and scores of a finished `sgh-train` run (ids: database rows);
        with ``nlist`` or mode ``"bytes"`` its dataset's features are read again (to learn
        the lists, or the byte decoder where the run has none, and to encode the database); with
        ``nlist``, ``nprobe`` is chosen on 1,000 of its training rows (`choose_nprobe`; each
        finds itself where the training rows are items of the database, as in MNIST's)."""
        from sgh.artifacts.run_directory import RunDirectory
        from sgh.artifacts.run_split import recorded_split

        run = RunDirectory(run_dir, create=False)
        scores = ScoreSet.of_run(run)  # checked against the codes' model
        codes = load_codes(run.codes)
        index = cls(scores, mode, nlist, encoding, verbose)
        if nlist is None and not index.codes_by_bytes:
            index._items.append(codes.database, None, None)  # ids: the database rows
            return index
        reading = "mode=bytes" if nlist is None else f"nlist={nlist}"
        split = recorded_split(run, reading, {"database": len(codes.database)})
        database = np.asarray(split.database, np.float32)
        if index.codes_by_bytes:
            if not index.is_trained:
                index.train(np.asarray(split.train, np.float32))
            index.add(database)  # ids: the database rows
        else:
            index.train(database)
            lists = np.concatenate([index._lists_of(database[start : start + _ADD_ROWS])
                                    for start in range(0, len(database), _ADD_ROWS)])
            index._items.append(codes.database, np.arange(len(database), dtype=np.int64), lists)
        if nlist is not None:
            queries = take_rows(split.train, evenly_spaced(len(split.train), VALIDATION_QUERIES))
            truth = exact_neighbours(queries, database, min(10, len(database)), split.similarity)
            index.choose_nprobe(queries, truth)
        return index

    def _coarse(self, x: np.ndarray, nearest: int) -> np.ndarray:  # (n, nearest) lists
        if "coarse" not in self._engines:
            self._engines["coarse"] = CoarseQuantizer(self._centroids)
        return self._engines["coarse"].nearest(x, nearest)

    def _progress(self, message: str) -> None:
        if self.verbose:
            say_progress(message)

    def _require_training(self) -> None:
        if not self.is_trained and self.codes_by_bytes:
            raise ValueError("the index has mode 'bytes', its byte decoder not fitted yet: "
                             "call index.train(x) with training features first")
        if not self.is_trained:
            raise ValueError(f"the index has nlist={self.nlist} inverted lists, not learned "
                             "yet: call index.train(x) with training features first")
