"""`SGHIndex` and its fast-scan engine: the float scan's results from faiss's kernels, one object
that owns codes, ids and scores, inverted lists, saving, and the model fingerprint."""

import dataclasses
import shutil
import warnings

import faiss
import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from sgh import ITQ, SH
from sgh.cli.evaluate import evaluate_codes
from sgh.codes import pack_bits
from sgh.config import (
    BaselineConfig,
    Config,
    EvalCommandConfig,
    EvalConfig,
    SyntheticDatasetConfig,
    TrainerConfig,
)
from sgh.errors import UserInputError
from sgh.scores.asymmetric import make_score
from sgh.scores.asymmetric_index import AsymmetricIndex
from sgh.search.fast_scan import FastScanIndex
from sgh.search.sgh_index import SGHIndex
from tests.helpers import trained


def _score_and_codes(bits: int, with_templates: bool, seed: int = 0, n: int = 3000, dim: int = 24):
    rng = np.random.default_rng(seed)
    features = rng.standard_normal((n, dim)).astype(np.float32)
    codes = pack_bits(features @ rng.standard_normal((dim, bits)) > 0)
    templates = rng.standard_normal((bits, dim)) * 0.3
    score = make_score(bits, -2 * templates.T, rng.standard_normal(bits),
                       templates if with_templates else None, "test score", "decoder")
    return score, codes, rng.standard_normal((40, dim)).astype(np.float32)


@pytest.mark.parametrize("bits", [5, 12, 32, 64])
@pytest.mark.parametrize("with_templates", [True, False])
def test_the_fast_scan_returns_the_float_scans_top_k(bits, with_templates):
    # The item constant ||hB||^2 rides in two extra nibbles, odd group counts included; the
    # candidates' exact rescoring gives the float scan's scores, bit for bit.
    score, codes, queries = _score_and_codes(bits, with_templates)
    exact = AsymmetricIndex(score)
    exact.add(codes)
    engine = FastScanIndex(score)
    engine.refine_factor = 4  # enough candidates for the float scan's top 20
    engine.add(codes)
    D0, I0 = exact.search(queries, 20, workers=1)
    D, I = engine.search(queries, 20)
    np.testing.assert_array_equal(I, I0)
    np.testing.assert_array_equal(D, D0)


@pytest.mark.parametrize("with_templates", [True, False])
def test_a_search_for_every_item_is_the_float_scans_whole_order(with_templates):
    # Every item wanted (k, or refine_factor x k, reaching ntotal): the exact scores of all,
    # bit for bit the float scan's, without faiss's scan; beyond ntotal padded as faiss pads.
    score, codes, queries = _score_and_codes(12, with_templates, n=500)
    exact = AsymmetricIndex(score, codes)
    engine = FastScanIndex(score)
    engine.add(codes)
    (D, I), (D0, I0) = engine.search(queries, 500), exact.search(queries, 500, workers=1)
    np.testing.assert_array_equal(I, I0)
    np.testing.assert_array_equal(D, D0)
    engine.refine_factor = 100
    np.testing.assert_array_equal(engine.search(queries, 7)[1], exact.search(queries, 7)[1])
    D, I = engine.search(queries, 503)
    assert (I[:, 500:] == -1).all() and np.isinf(D[:, 500:]).all()


def test_an_engine_built_in_one_call_keeps_its_callers_codes_not_a_copy():
    # SGHIndex builds its fast scan from all its codes at once: they are held once.
    score, codes, _ = _score_and_codes(32, True)
    lists = np.zeros(len(codes), np.int64)
    engine = FastScanIndex(score, nlist=2)
    engine.add(codes, lists)
    assert engine.codes is codes and engine.lists is lists
    engine.add(codes[:5], lists[:5])  # a later add joins them into a new array
    assert len(engine.codes) == len(codes) + 5 and not np.shares_memory(engine.codes, codes)


def test_inverted_lists_probe_only_the_lists_asked_and_all_of_them_give_the_flat_scan():
    score, codes, queries = _score_and_codes(32, True)
    lists = np.random.default_rng(1).integers(0, 6, len(codes))
    engine = FastScanIndex(score, nlist=6)
    engine.add(codes, lists)
    flat = FastScanIndex(score)
    flat.add(codes)
    # Enough candidates that both give the float scan's top 15 (their fast scans order
    # near ties by different kernels).
    engine.refine_factor = flat.refine_factor = 4
    everything = np.tile(np.arange(6), (len(queries), 1))
    np.testing.assert_array_equal(engine.search(queries, 15, everything)[1],
                                  flat.search(queries, 15)[1])
    _, I = engine.search(queries, 15, np.tile([0, 3], (len(queries), 1)))
    assert np.isin(lists[I], [0, 3]).all()


@pytest.fixture(scope="module")
def itq_data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 20)).astype(np.float32) @ rng.standard_normal((20, 20))
    x = x.astype(np.float32)
    return ITQ(n_bits=16, random_state=0).fit(x), x, x[:30] + 0.05


def test_an_index_of_a_hasher_encodes_as_it_does_and_scans_by_its_score(itq_data):
    hasher, x, queries = itq_data
    index = SGHIndex(hasher)
    index.refine_factor = 4
    index.add(x, ids=np.arange(len(x)) + 500)
    np.testing.assert_array_equal(index.encode(x), hasher.encode(x))
    exact = AsymmetricIndex(hasher.asymmetric_score())
    exact.add(hasher.encode(x))
    D0, I0 = exact.search(queries, 10, workers=1)
    D, I = index.search(queries, 10)
    np.testing.assert_array_equal(I, I0 + 500)
    np.testing.assert_array_equal(D, D0)
    assert repr(index) == ("SGHIndex(16 bits, 3,000 items, 10 bytes each (code 2 + id 8), "
                           f"mode='scan', score='encoder', model {index.fingerprint})")

    index.mode = "hamming"
    hamming = faiss.IndexBinaryFlat(16)
    hamming.add(hasher.encode(x))
    np.testing.assert_array_equal(index.search(queries, 10)[1],
                                  hamming.search(hasher.encode(queries), 10)[1] + 500)
    index.mode = "two_stage"
    with pytest.warns(UserWarning, match="the encoder score rescores the shortlist it made"):
        np.testing.assert_array_equal(index.search(queries, 10)[1], I0 + 500)

    index.mode = "scan"
    assert index.remove_ids(np.arange(500, 600)) == 100 and index.ntotal == 2900
    assert not np.isin(index.search(queries, 50)[1], np.arange(500, 600)).any()


def test_a_saved_index_searches_identically_and_faiss_opens_its_codes(itq_data, tmp_path):
    hasher, x, queries = itq_data
    index = SGHIndex(hasher, nlist=8)
    with pytest.raises(ValueError, match=r"call index.train\(x\)"):
        index.add(x)
    index.train(x)
    index.add(x)
    index.nprobe = 3
    saved = index.save(tmp_path / "index")
    loaded = SGHIndex.load(saved)
    assert repr(loaded) == repr(index)
    for before, after in zip(index.search(queries, 25), loaded.search(queries, 25), strict=True):
        np.testing.assert_array_equal(before, after)
    assert faiss.read_index(str(saved / "codes.faiss")).ntotal == len(x)
    # Saved before the byte decoder was a mode, it said decoder="model" too: the same index.
    with np.load(saved / "index.npz") as arrays:
        assert "decoder" not in arrays
        old = {**arrays, "decoder": np.str_("model")}
    np.savez(saved / "index.npz", **old)
    assert repr(SGHIndex.load(saved)) == repr(index)
    index.save(saved)  # an index saved before is replaced

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(UserInputError, match="holds files that are not a saved SGHIndex"):
        index.save(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_the_lists_centroids_are_the_partition_searched_and_faiss_can_share_it(itq_data,
                                                                               tmp_path):
    hasher, x, queries = itq_data
    assert SGHIndex(hasher).centroids is None
    index = SGHIndex(hasher, nlist=8)
    assert index.centroids is None  # not learned yet
    index.train(x)
    index.add(x)
    centroids = index.centroids
    assert centroids.shape == (8, x.shape[1]) and centroids.dtype == np.float32
    with pytest.raises(ValueError, match="read-only"):
        centroids[0, 0] = 1.0
    np.testing.assert_array_equal(SGHIndex.load(index.save(tmp_path / "i")).centroids, centroids)
    # A faiss IVF index given them as its trained quantizer places items and probes lists as
    # the index does: with one list probed, every result lies in the query's nearest list.
    quantizer = faiss.IndexFlatL2(x.shape[1])
    quantizer.add(centroids)
    item_lists = quantizer.assign(x, 1)[:, 0]
    query_lists = quantizer.assign(queries, 1)[:, 0]
    index.nprobe = 1
    _, I = index.search(queries, 20)
    assert (I >= 0).all()
    np.testing.assert_array_equal(item_lists[I], np.repeat(query_lists[:, None], 20, axis=1))
    ivf = faiss.IndexIVFFlat(quantizer, x.shape[1], 8)
    ivf.train(x)  # the quantizer is trained: kept as it is
    np.testing.assert_array_equal(ivf.quantizer.reconstruct_n(0, 8), centroids)


def test_an_empty_index_answers_every_search_with_padding_as_faiss_does(itq_data):
    hasher, x, queries = itq_data
    listed = SGHIndex(hasher, nlist=4)
    listed.train(x)
    for index in (SGHIndex(hasher), listed):
        for mode in ("scan", "two_stage") if index.nlist else ("scan", "two_stage", "hamming"):
            index.mode = mode
            with warnings.catch_warnings():  # two-stage by the encoder score warns of itself
                warnings.simplefilter("ignore")
                D, I = index.search(queries, 7)
                # One convention in every mode, Hamming distances too: float32, padded with inf.
                assert D.dtype == np.float32 and I.dtype == np.int64
                assert (I == -1).all() and (D == np.inf).all() and I.shape == (len(queries), 7)
                assert index.search(queries[:0], 7)[1].shape == (0, 7)


def test_integer_features_and_a_damaged_saved_index_are_refused_in_one_line(itq_data, tmp_path):
    hasher, x, queries = itq_data
    index = SGHIndex(hasher)
    index.add(x)
    # Raw pixels against a model of pixels / 255 would rank silently wrong: refused, whichever
    # call meets them first.
    pixels = np.clip(queries * 40 + 128, 0, 255).astype(np.uint8)
    for call in (lambda: index.search(pixels, 5), lambda: index.add(pixels),
                 lambda: index.encode(pixels)):
        with pytest.raises(ValueError, match=r"features of dtype uint8: SGHIndex takes float "
                                             r"features .* x.astype\(np.float32\) / 255"):
            call()
    assert index.ntotal == len(x)
    # A model of float features stored as they are: converted, not divided by 255.
    floats = SGHIndex(dataclasses.replace(index.scores, feature_conversion="float32 as stored"))
    with pytest.raises(ValueError, match=r"converted as 'float32 as stored'\); convert them "
                                         r"first, e.g. x.astype\(np.float32\)$"):
        floats.search(pixels, 5)
    saved = index.save(tmp_path / "index")
    (saved / "index.npz").write_bytes(b"not what SGHIndex.save wrote")
    with pytest.raises(UserInputError, match=r"index.npz: not an .npz archive \(a zip of .npy "
                                             r"arrays\): the file is corrupt"):
        SGHIndex.load(saved)


def test_codes_and_scores_of_different_models_are_never_searched_together(itq_data, tmp_path):
    hasher, x, _ = itq_data
    other = ITQ(n_bits=16, random_state=1).fit(x)
    first, second = SGHIndex(hasher), SGHIndex(other)
    assert first.fingerprint != second.fingerprint
    first.save(tmp_path / "first")
    second.save(tmp_path / "second")
    shutil.copy(tmp_path / "second" / "scores.npz", tmp_path / "first" / "scores.npz")
    with pytest.raises(UserInputError, match=f"model {first.fingerprint}.*model "
                                             f"{second.fingerprint}"):
        SGHIndex.load(tmp_path / "first")


def test_hamming_mode_ties_by_the_order_added_ids_and_padding_as_faiss(itq_data):
    # Codes set directly: 16 items in four groups of equal codes, added in two batches with ids.
    hasher, _, _ = itq_data
    index = SGHIndex(hasher, mode="hamming")
    empty = index.search(np.zeros((2, index.dim), np.float32), 3)
    assert np.isinf(empty[0]).all() and (empty[1] == -1).all()
    rng = np.random.default_rng(3)
    groups = rng.integers(0, 256, (4, 2), dtype=np.uint8)
    codes = groups[rng.integers(0, 4, 16)]
    index.add_codes(codes[:9], ids=np.arange(9) * 7 + 100)
    index.add_codes(codes[9:], ids=np.arange(9, 16) * 7 + 100)
    query = np.zeros((1, index.dim), np.float32)
    query_code = index.encode(query)
    distances = np.unpackbits(codes ^ query_code, axis=1).sum(axis=1)
    rows = np.lexsort((np.arange(16), distances))  # by distance, then by the order added
    D, I = index.search(query, 20)
    np.testing.assert_array_equal(I[0, :16], rows * 7 + 100)
    np.testing.assert_array_equal(D[0, :16], distances[rows].astype(np.float32))
    assert D.dtype == np.float32 and np.isinf(D[0, 16:]).all() and (I[0, 16:] == -1).all()


def test_the_retired_hamming_index_names_what_does_its_job():
    import sgh

    with pytest.raises(AttributeError, match=r"^sgh.HammingIndex is no longer part of sgh: "
                                             r"codes alone are searched by faiss.IndexBinaryFlat"):
        getattr(sgh, "HammingIndex")  # noqa: B009 (the attribute is the test)


def test_a_hasher_without_a_per_bit_score_is_sent_to_faiss_binary_index(itq_data):
    _, x, _ = itq_data
    for sh in (SH(n_bits=8).fit(x), SH(n_bits=8)):  # the class says it: fitted or not
        with pytest.raises(ValueError, match=f"^SH has no asymmetric score: "
                                             f"{SH.without_asymmetric}; .* search these codes "
                                             "by Hamming distance with faiss.IndexBinaryFlat$"):
            SGHIndex(sh)
    with pytest.raises(NotFittedError):  # ITQ has a score, once fitted: not sent elsewhere
        SGHIndex(ITQ(n_bits=8))
    with pytest.raises(ValueError, match="mode='nearest' is not known"):
        SGHIndex(itq_data[0], mode="nearest")


def _baseline_run(run_dir, seed):
    config = Config(dataset=SyntheticDatasetConfig(),
                    model=BaselineConfig(name="itq", bits=12),
                    trainer=TrainerConfig(seed=seed), eval=EvalConfig())
    return trained(run_dir, config)[0]


def test_a_runs_codes_carry_its_models_fingerprint_and_another_runs_scores_are_refused(tmp_path):
    first, second = _baseline_run(tmp_path / "a", 0), _baseline_run(tmp_path / "b", 1)
    index = SGHIndex.from_run(first)
    with np.load(first / "codes.npz") as codes:
        assert str(codes["fingerprint"]) == index.fingerprint
        assert index.ntotal == len(codes["database"])
    index.add_codes(first / "codes.npz")  # its own model's: taken
    assert index.ntotal == 2 * SGHIndex.from_run(first).ntotal
    with pytest.raises(UserInputError, match="come from different models"):
        index.add_codes(second / "codes.npz")

    # Another run's asymmetric.npz beside these codes: refused by the index and by sgh-eval.
    shutil.copy(second / "asymmetric.npz", first / "asymmetric.npz")
    with pytest.raises(UserInputError, match="come from different models"):
        SGHIndex.from_run(first)
    with pytest.raises(UserInputError, match=f"codes.npz \\(model {index.fingerprint}\\) and "
                                             ".*asymmetric.npz \\(model "):
        evaluate_codes(EvalCommandConfig(run=str(first), out=str(tmp_path / "eval.json"),
                                         eval=EvalConfig(ranking="scan")))
    assert not (tmp_path / "eval.json").exists()


def test_nprobe_is_refused_where_there_are_no_lists(itq_data):
    hasher, x, queries = itq_data
    flat = SGHIndex(hasher)
    flat.add(x)
    with pytest.raises(ValueError, match=r"^nprobe=8: the index has no inverted lists"):
        flat.nprobe = 8
    flat.nprobe = 1  # what it does anyway
    with pytest.raises(ValueError, match="nprobe=0 is impossible"):
        SGHIndex(hasher, nlist=4).nprobe = 0


def test_ids_that_are_rows_are_not_held_and_list_numbers_are_four_bytes(itq_data, tmp_path):
    hasher, x, queries = itq_data
    index = SGHIndex(hasher)
    index.add(x[:1000])
    index.add(x[1000:2000])  # default ids go on: still the rows
    assert index.bytes_per_item == {"code": 2}
    saved = index.save(tmp_path / "rows")
    assert "ids" not in np.load(saved / "index.npz")  # 2 bytes an item on disk too
    D, I = SGHIndex.load(saved).search(queries, 10)
    np.testing.assert_array_equal((D, I), index.search(queries, 10))
    # Given ids (or a removal) make the ids an array, the rows' ids kept as they were.
    index.add(x[2000:2003], ids=np.array([7000, 7001, 7002]))
    assert index.bytes_per_item == {"code": 2, "id": 8}
    assert [index.remove_ids([i]) for i in (5, 2001, 7001)] == [1, 0, 1]
    rows = SGHIndex.load(saved)
    assert rows.remove_ids([3]) == 1 and rows.bytes_per_item == {"code": 2, "id": 8}
    rows.add(x[3:4])
    assert [rows.remove_ids([i]) for i in (3, 4, 2000)] == [0, 1, 1]  # 3 is never handed out
    # Inverted lists hold items in list order: ids always, list numbers as int32.
    listed = SGHIndex(hasher, nlist=8)
    listed.train(x)
    listed.add(x)
    assert listed.bytes_per_item == {"code": 2, "id": 8, "list": 4}
    assert listed._items.lists.dtype == np.int32
    arrays = dict(np.load(listed.save(tmp_path / "listed") / "index.npz"))
    del arrays["ids"]
    np.savez(tmp_path / "listed" / "index.npz", **arrays)
    with pytest.raises(UserInputError, match="key 'ids' is missing; expected the items' ids"):
        SGHIndex.load(tmp_path / "listed")


def test_verbose_says_what_train_and_a_long_add_do_on_stderr(itq_data, capsys):
    hasher, x, _ = itq_data
    quiet = SGHIndex(hasher, nlist=4)
    quiet.train(x)
    quiet.add(x)
    assert capsys.readouterr().err == ""
    index = SGHIndex(hasher, nlist=4, verbose=True)
    index.train(x)
    index.add(x)  # one block: no line
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"[sgh] training on {len(x):,} rows: k-means of 4 lists"
    assert lines[1].startswith("[sgh] trained in ") and len(lines) == 2
    many = np.repeat(x, -(-70_000 // len(x)), axis=0)[:70_000]  # two blocks of 65,536 rows
    index.add(many)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" vectors")[0] for line in lines] == [
        "[sgh] indexed 65,536/70,000", "[sgh] indexed 70,000/70,000"]
    quiet.add(many)
    np.testing.assert_array_equal(index.search(x[:5], 3), quiet.search(x[:5], 3))


def test_nprobe_is_the_fewest_lists_within_tolerance_of_the_best_validation_recall(
        itq_data, capsys, tmp_path):
    from sgh.data.neighbours import exact_neighbours

    hasher, x, _ = itq_data
    index = SGHIndex(hasher, nlist=16, verbose=True)
    index.train(x)
    index.add(x)
    queries = x[::10]  # training rows (items too: each finds itself)
    truth = exact_neighbours(queries, x, 10)
    recalls = index.choose_nprobe(queries, truth)
    assert list(recalls) == [1, 2, 4, 8, 16]

    def recall(nprobe):  # counted here, as the share of true neighbours among the first 100
        index.nprobe = nprobe
        found = index.search(queries, 100)[1]
        return (found[:, :, None] == truth[:, None, :]).any(axis=1).mean()

    chosen = index.nprobe
    for nprobe, measured in recalls.items():
        assert measured == pytest.approx(recall(nprobe), abs=5e-5)
    best = max(recalls.values())
    assert recalls[chosen] >= best - 0.005
    assert all(recalls[p] < best - 0.005 for p in recalls if p < chosen)
    assert recalls[1] < recalls[chosen]  # one list misses neighbours here: the choice matters
    line = capsys.readouterr().err.splitlines()[-1]
    assert line.startswith(f"[sgh] nprobe={chosen} of 16 lists, chosen on 300 validation queries")
    flat = SGHIndex(hasher)
    flat.add(x)
    with pytest.raises(ValueError, match="choose_nprobe: nlist=None, neighbours of shape"):
        flat.choose_nprobe(queries, truth)
    with pytest.raises(ValueError, match=r"neighbours of shape \(10,\) for 300 queries; "
                                         "accepted: an index with inverted lists"):
        index.choose_nprobe(queries, truth[0])


def test_an_index_from_a_run_with_lists_has_its_nprobe_chosen(tmp_path):
    from sgh.config import SyntheticDatasetConfig

    # One Gaussian (no clusters for the lists to follow): neighbours lie across lists.
    config = Config(dataset=SyntheticDatasetConfig(dim=16, n_classes=1), model=BaselineConfig(
        name="itq", bits=16), trainer=TrainerConfig(seed=0), eval=EvalConfig())
    run_dir, _ = trained(tmp_path / "run", config)
    index = SGHIndex.from_run(run_dir, nlist=32)
    quiet = SGHIndex(index.scores, nlist=32)
    assert index.nprobe > 1 and quiet.nprobe == 1  # the choice was made, and kept by save
    assert SGHIndex.load(index.save(tmp_path / "index")).nprobe == index.nprobe
