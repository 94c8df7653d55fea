import logging
import os
import stat
from functools import partial

import numpy as np
import pytest

from sgh.artifacts import ground_truth_cache as cache
from sgh.data.ground_truth import split_ground_truth
from sgh.data.neighbours import euclidean_neighbours, exact_neighbours
from sgh.data.split import RetrievalSplit


@pytest.fixture
def dataset(tmp_path, monkeypatch):
    """A dataset file in its own folder; the per-user cache redirected into tmp_path."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    folder = tmp_path / "data"
    folder.mkdir()
    path = folder / "points.npz"
    path.write_bytes(b"stand-in: the cache keys on the features, never reads this file")
    rng = np.random.default_rng(0)
    # Integer-valued features: many exactly tied distances, ordered by database index.
    query = rng.integers(0, 4, (12, 5)).astype(np.float32)
    database = rng.integers(0, 4, (300, 5)).astype(np.float32)
    return path, query, database


def cached_next_to(path):
    """The exact neighbours through the cache beside `path`, as a run finds them."""
    return partial(cache.cached_exact_neighbours, dataset_path=path)


def counting_calls(monkeypatch):
    """Replace the exact search by a counting wrapper; return the list of calls."""
    calls = []

    def counted(query, database, k, similarity="euclidean"):
        calls.append(k)
        return exact_neighbours(query, database, k, similarity)

    monkeypatch.setattr(cache, "exact_neighbours", counted)
    return calls


def cache_files(folder):
    return sorted(path.name for path in folder.glob("*.gt-*.npz"))


def test_cache_hit_returns_identical_ids_without_recomputing(dataset, monkeypatch):
    path, query, database = dataset
    calls = counting_calls(monkeypatch)
    first, source = cache.cached_exact_neighbours(query, database, 10, path)
    assert calls == [10] and source.startswith(
        "exact Euclidean neighbours, computed blockwise; cached in")
    [name] = cache_files(path.parent)
    assert name.startswith("points.npz.gt-")
    second, source = cache.cached_exact_neighbours(query, database, 10, path)
    assert calls == [10] and "read from the cache" in source
    np.testing.assert_array_equal(second, first)
    np.testing.assert_array_equal(first, euclidean_neighbours(query, database, 10))
    assert first.dtype == np.int64
    # A smaller k is the prefix of the cached list ((distance, index) is a total order).
    third, _ = cache.cached_exact_neighbours(query, database, 3, path)
    assert calls == [10]
    np.testing.assert_array_equal(third, euclidean_neighbours(query, database, 3))
    # A larger k is computed and replaces the file.
    cache.cached_exact_neighbours(query, database, 20, path)
    assert calls == [10, 20] and cache_files(path.parent) == [name]
    assert np.load(path.parent / name)["ids"].shape == (12, 20)


def test_changed_features_or_queries_get_another_cache_file(dataset, monkeypatch):
    path, query, database = dataset
    calls = counting_calls(monkeypatch)
    cache.cached_exact_neighbours(query, database, 5, path)
    changed = database.copy()
    changed[7, 2] += 1  # one value of one item
    ids, source = cache.cached_exact_neighbours(query, changed, 5, path)
    assert calls == [5, 5] and "cached in" in source
    np.testing.assert_array_equal(ids, euclidean_neighbours(query, changed, 5))
    # Same values, another dtype: another digest too (the features as scored).
    cache.cached_exact_neighbours(query.astype(np.float64), database, 5, path)
    assert calls == [5, 5, 5] and len(cache_files(path.parent)) == 3


def test_read_only_dataset_folder_falls_back_to_the_user_cache(dataset, monkeypatch, tmp_path):
    path, query, database = dataset
    calls = counting_calls(monkeypatch)
    # Mode bits deny writing: treated as read-only even when running as root (as in CI's
    # ../shared/data), so nothing is written next to the dataset.
    os.chmod(path.parent, stat.S_IRUSR | stat.S_IXUSR)
    try:
        ids, source = cache.cached_exact_neighbours(query, database, 4, path)
        assert cache_files(path.parent) == []
    finally:
        os.chmod(path.parent, stat.S_IRWXU)
    user_cache = tmp_path / "user-cache" / "sgh"
    assert source.endswith(str(user_cache / cache_files(user_cache)[0]))
    np.testing.assert_array_equal(ids, euclidean_neighbours(query, database, 4))
    again, source = cache.cached_exact_neighbours(query, database, 4, path)
    assert calls == [4] and "read from the cache" in source
    np.testing.assert_array_equal(again, ids)


def test_no_writable_location_just_computes(dataset, monkeypatch):
    path, query, database = dataset
    monkeypatch.setattr(cache, "may_write", lambda directory: False)
    ids, source = cache.cached_exact_neighbours(query, database, 4, path)
    assert source == "exact Euclidean neighbours, computed blockwise (no writable cache location)"
    np.testing.assert_array_equal(ids, euclidean_neighbours(query, database, 4))
    # A failing write (full disk, a race with chmod) is not an error either.
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(path.parent / "user-cache"))

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache.np, "savez", full_disk)
    ids, source = cache.cached_exact_neighbours(query, database, 4, path)
    assert "no writable cache location" in source and cache_files(path.parent) == []


@pytest.mark.parametrize(
    "corruption",
    [
        "truncated",
        "pickled object",
        "float ids",
        "wrong rows",
        "id out of range",
        "repeated id",
        "plausible wrong row",
        "not numpy",
    ],
)
def test_corrupt_cache_is_recomputed_never_trusted(dataset, monkeypatch, caplog, corruption):
    path, query, database = dataset
    good, _ = cache.cached_exact_neighbours(query, database, 6, path)
    [cached] = path.parent.glob("*.gt-*.npz")
    bad = good.copy()
    if corruption == "truncated":
        cached.write_bytes(cached.read_bytes()[:100])
    elif corruption == "pickled object":
        np.savez(cached, ids=np.array([{"ids": good}], dtype=object), checksum="x")
    elif corruption == "not numpy":
        cached.write_text("hello")
    else:
        if corruption == "float ids":
            bad = good.astype(np.float64)
        elif corruption == "wrong rows":
            bad = good[:-1]
        elif corruption == "id out of range":
            bad[3, 2] = len(database)
        elif corruption == "repeated id":
            bad[5, 4] = bad[5, 0]
        elif corruption == "plausible wrong row":  # in order, distinct, in range: only wrong
            bad[7] = np.sort(bad[7] + 1) % len(database)
            assert len(set(bad[7])) == bad.shape[1]
        # The ids changed, the checksum kept (a damaged file).
        np.savez(cached, ids=bad, checksum=np.load(cached)["checksum"])
    calls = counting_calls(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="sgh.artifacts.ground_truth_cache"):
        ids, source = cache.cached_exact_neighbours(query, database, 6, path)
    assert calls == [6] and "cached in" in source
    assert str(cached) in caplog.text
    np.testing.assert_array_equal(ids, good)
    np.testing.assert_array_equal(np.load(cached)["ids"], good)  # the bad file was replaced


def test_ground_truth_prefers_the_dataset_file_and_caches_otherwise(dataset, monkeypatch):
    path, query, database = dataset
    split = RetrievalSplit(
        name="points", protocol="test", train=database, database=database, query=query
    )
    ids, source = split_ground_truth(split, 5)  # no cache: computed, nothing written
    assert source == "exact Euclidean neighbours, computed blockwise"
    assert cache_files(path.parent) == []
    ids_cached, source = split_ground_truth(split, 5, cached_next_to(path))
    assert "cached in" in source
    np.testing.assert_array_equal(ids_cached, ids)
    shipped = RetrievalSplit(
        name="points",
        protocol="test",
        train=database,
        database=database,
        query=query,
        groundtruth=ids[:, ::-1].copy(),
    )
    ids_shipped, source = split_ground_truth(shipped, 5, cached_next_to(path))
    assert source == "from the dataset file"
    np.testing.assert_array_equal(ids_shipped, ids[:, ::-1])


def test_bad_k_is_refused_even_with_a_cache(dataset):
    path, query, database = dataset
    cache.cached_exact_neighbours(query, database, 5, path)
    for k in (0, len(database) + 1, 2.0):
        with pytest.raises(ValueError, match=r"is impossible; accepted: an integer between 1 "
                                             r"and \d+ \(the database size\)"):
            cache.cached_exact_neighbours(query, database, k, path)


def test_the_cache_is_keyed_by_similarity(dataset, monkeypatch):
    # The same features, searched by inner product, get their own file: a Euclidean cache never
    # answers an inner-product question, nor the other way round.
    path, query, database = dataset
    calls = counting_calls(monkeypatch)
    euclidean, _ = cache.cached_exact_neighbours(query, database, 8, path)
    inner, source = cache.cached_exact_neighbours(query, database, 8, path, "inner_product")
    assert calls == [8, 8] and len(cache_files(path.parent)) == 2
    assert source.startswith("exact inner-product neighbours, computed blockwise; cached in")
    np.testing.assert_array_equal(inner, exact_neighbours(query, database, 8, "inner_product"))
    assert not np.array_equal(inner, euclidean)
    again, source = cache.cached_exact_neighbours(query, database, 8, path, "inner_product")
    assert calls == [8, 8] and "earlier; read from the cache" in source
    np.testing.assert_array_equal(again, inner)
    # Euclidean files keep the digest of the versions before the similarity was stated.
    assert cache.features_digest(query, database) == cache.features_digest(
        query, database, "euclidean") != cache.features_digest(query, database, "inner_product")


def test_split_ground_truth_follows_the_split_similarity(dataset):
    path, query, database = dataset
    split = RetrievalSplit(name="points", protocol="test", train=database, database=database,
                           query=query, similarity="inner_product")
    ids, source = split_ground_truth(split, 5, cached_next_to(path))
    assert source.startswith("exact inner-product neighbours")
    np.testing.assert_array_equal(ids, exact_neighbours(query, database, 5, "inner_product"))
    angular = RetrievalSplit(name="points", protocol="test", train=database, database=database,
                             query=query, similarity="angular")
    ids, source = split_ground_truth(angular, 5, cached_next_to(path))
    assert source.startswith("exact angular neighbours")  # Euclidean on the given vectors
    np.testing.assert_array_equal(ids, euclidean_neighbours(query, database, 5))
    with pytest.raises(ValueError, match="similarity=.* is not known; accepted: "):
        cache.cached_exact_neighbours(query, database, 5, path, "auto")


def test_a_dataset_ground_truth_too_short_for_k_is_recomputed_with_a_warning(dataset, caplog):
    path, query, database = dataset
    exact = euclidean_neighbours(query, database, 5)
    shipped = RetrievalSplit(name="points", protocol="test", train=database, database=database,
                             query=query, groundtruth=exact[:, :3].copy())
    with caplog.at_level(logging.WARNING, logger="sgh.data.ground_truth"):
        ids, source = split_ground_truth(shipped, 5, cached_next_to(path))
    assert "has 3 neighbours per query, fewer than eval.recall_k=5" in caplog.text
    assert source.startswith("exact Euclidean neighbours")
    np.testing.assert_array_equal(ids, exact)
