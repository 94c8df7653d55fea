"""Tests of the classic baselines (sgh.baselines): estimator contract, algorithms, MNIST numbers.

scikit-learn's estimator checks run on all five with small codes (2 bits for PCAH and ITQ, whose
codes cannot be longer than the 3 features of the checks' data; 4 bits for the others). We skip
no check: ``expected_failed_checks`` is empty. scikit-learn itself skips
``check_array_api_input`` unless the SCIPY_ARRAY_API environment variable is set (5 "SKIPPED"
lines); the baselines are numpy-only anyway. The bool output is declared through the
``preserves_dtype = []`` transformer tag.

MNIST (protocol A, tie-aware mAP@all, relevance = same label) against the reference figures
of docs/results.md ("Comparison with the classic baselines"). ITQ and LSH are randomised, and
one draw varies a lot between seeds (measured over seeds 0-9: LSH at 16 / 32 / 64 bits SD
0.010 / 0.015 / 0.012, range 0.201-0.233 at 16 bits; ITQ at 16 bits SD 0.006, range 0.403-0.429
over seeds 0-14). So the tests compare the mean over random_state = 0..4 with the reference,
never one hand-picked seed.
At 16 bits the margins are thin (measured: ITQ 0.420 vs 0.411, LSH 0.216 vs 0.242): the
reference ITQ figure sits low and the LSH figure high in our seed distributions.
Both MNIST checks are ``slow`` (``make test-slow``, which CI runs): ITQ and LSH at 32 bits, and
all bit lengths with every method's mAP@all and Recall10@100 printed.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from sgh.baselines import ITQ, LSH, PCAH, SH, SpH
from sgh.baselines.fitting import baseline_class
from sgh.codes import pack_bits
from sgh.methods import BASELINE_NAMES
from sgh.metrics import mean_average_precision, recall_at_n

BASELINES = {name: baseline_class(name) for name in BASELINE_NAMES}

SEEDS = range(5)
ITQ_MAP = {16: 0.411, 32: 0.444, 64: 0.454}
LSH_MAP = {16: 0.242, 32: 0.290, 64: 0.324}
ITQ_TOLERANCE, LSH_TOLERANCE = 0.01, 0.03


def _check_instances():
    return [
        LSH(n_bits=4, random_state=0),
        PCAH(n_bits=2),
        ITQ(n_bits=2, n_iter=5, random_state=0),
        SH(n_bits=4),
        SpH(n_bits=4, random_state=0),
    ]


@parametrize_with_checks(_check_instances(), expected_failed_checks=lambda estimator: {})
def test_sklearn_estimator_contract(estimator, check):
    check(estimator)


def _blobs(n=300, d=12, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(4, d))
    return (centres[rng.integers(0, 4, n)] + rng.normal(size=(n, d))).astype(np.float32)


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_codes_are_bool_one_column_per_bit_and_deterministic_given_the_seed(name):
    X = _blobs()
    first = BASELINES[name](n_bits=8, random_state=3).fit(X).transform(X)
    again = BASELINES[name](n_bits=8, random_state=3).fit(X).transform(X)
    assert first.dtype == np.bool_ and first.shape == (300, 8)
    np.testing.assert_array_equal(first, again)
    # float32 and float64 inputs give the same bits (all arithmetic is float64).
    np.testing.assert_array_equal(
        first, BASELINES[name](n_bits=8, random_state=3).fit(X.astype(np.float64)).transform(X)
    )


@pytest.mark.parametrize("name", ["lsh", "itq", "sph"])
def test_random_state_matters_for_the_randomised_methods(name):
    X = _blobs()
    a = BASELINES[name](n_bits=8, random_state=0).fit(X).transform(X)
    b = BASELINES[name](n_bits=8, random_state=1).fit(X).transform(X)
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_transform_before_fit_raises_not_fitted(name):
    with pytest.raises(NotFittedError):
        BASELINES[name](n_bits=4).transform(_blobs())


@pytest.mark.parametrize("name", ["pcah", "itq"])
def test_more_bits_than_features_is_refused_quoting_the_values(name):
    with pytest.raises(ValueError, match=r"n_bits=13 with n_features=12"):
        BASELINES[name](n_bits=13).fit(_blobs())


@pytest.mark.parametrize("name", ["lsh", "sh", "sph"])
def test_more_bits_than_features_is_allowed_where_the_method_permits(name):
    # LSH draws any number of projections, SpH any number of spheres, and SH takes several
    # sinusoidal modes along one principal direction.
    bits = BASELINES[name](n_bits=20, random_state=0).fit(_blobs()).transform(_blobs(seed=1))
    assert bits.shape == (300, 20)


@pytest.mark.parametrize("name", sorted(BASELINES))
@pytest.mark.parametrize("n_bits", [0, -1, 2.0, True, "8"])
def test_bad_n_bits_is_refused_quoting_it(name, n_bits):
    expected = f"n_bits={n_bits!r} is impossible; accepted: an integer >= 1"
    with pytest.raises(ValueError, match=re.escape(expected)):
        BASELINES[name](n_bits=n_bits).fit(_blobs())


def test_itq_rotation_is_orthogonal_and_the_quantization_loss_never_increases():
    X = _blobs(n=2000, d=40)
    itq = ITQ(n_bits=16, n_iter=50, random_state=0).fit(X)
    np.testing.assert_allclose(itq.rotation_.T @ itq.rotation_, np.eye(16), atol=1e-10)
    np.testing.assert_allclose(itq.projection_, itq.components_ @ itq.rotation_)
    loss = itq.loss_history_
    assert loss.shape == (51,)
    assert np.all(np.diff(loss) <= 1e-9 * loss[0])
    assert loss[-1] < 0.9 * loss[0]  # it does learn something


def test_itq_loss_history_is_the_quantization_loss_of_the_final_rotation():
    X = _blobs(n=500, d=10)
    itq = ITQ(n_bits=6, n_iter=7, random_state=0).fit(X)
    V = (X - itq.mean_) @ itq.components_ @ itq.rotation_
    expected = np.square(np.where(V >= 0, 1.0, -1.0) - V).sum() / len(X)
    assert itq.loss_history_[-1] == pytest.approx(expected)
    assert itq.n_iter_ == 7


def test_lsh_and_pcah_are_signs_of_centred_projections():
    X = _blobs(d=5)
    lsh = LSH(n_bits=7, random_state=0).fit(X)
    np.testing.assert_allclose(lsh.mean_, X.mean(axis=0), rtol=1e-6)
    np.testing.assert_array_equal(lsh.transform(X), (X - lsh.mean_) @ lsh.projections_ >= 0)
    pcah = PCAH(n_bits=3).fit(X)
    # The components are the covariance's top eigenvectors, in decreasing order of variance.
    values, vectors = np.linalg.eigh(np.cov(X.astype(np.float64), rowvar=False))
    np.testing.assert_allclose(np.abs(pcah.components_), np.abs(vectors[:, ::-1][:, :3]), atol=1e-8)
    # A PCAH bit splits the training set at the mean of its projection.
    assert np.all(np.abs(pcah.transform(X).mean(axis=0) - 0.5) < 0.35)


def test_sh_picks_the_lowest_frequency_modes_of_the_pca_box():
    # Two independent uniform dimensions with ranges 2.5 and 1; PCA keeps them (component 0 =
    # the wide one). maxMode = ceil(6 R / 2.5) = 6 and 3, so the candidate modes are k = 1..5
    # along component 0, eigenvalues (k pi / 2.5)^2 = (0.16, 0.64, 1.44, 2.56, 4) pi^2, and
    # k = 1, 2 along component 1: (1, 4) pi^2. The 5 smallest: (0,1) (0,2) (1,1) (0,3) (0,4).
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.uniform(0, 2.5, 20000), rng.uniform(0, 1, 20000)])
    sh = SH(n_bits=5).fit(X)
    assert np.all(np.abs(np.abs(sh.components_) - np.eye(2)) < 1e-2)
    assert [(int(np.argmax(row)), int(row.max())) for row in sh.modes_] == [
        (0, 1),
        (0, 2),
        (1, 1),
        (0, 3),
        (0, 4),
    ]
    assert np.all((sh.modes_ > 0).sum(axis=1) == 1)
    # Mode k along a uniform dimension splits it into k + 1 stripes: bits are balanced for odd k.
    bits = sh.transform(X)
    assert abs(bits[:, 0].mean() - 0.5) < 0.02
    # Bit b is sign(sin(pi/2 + k pi (x - mn) / (mx - mn))) along its dimension.
    projected = X @ sh.components_
    for b, row in enumerate(sh.modes_):
        i, k = int(np.argmax(row)), int(row.max())
        phase = k * np.pi * (projected[:, i] - sh.mn_[i]) / (sh.mx_[i] - sh.mn_[i])
        np.testing.assert_array_equal(bits[:, b], np.sin(np.pi / 2 + phase) > 0)


def test_sph_balances_each_sphere_and_pairwise_overlaps():
    X = _blobs(n=3000, d=16)
    sph = SpH(n_bits=12, random_state=0, n_samples=2000).fit(X)
    assert sph.converged_ and 1 <= sph.n_iter_ <= 50
    assert sph.overlap_mean_error_ <= 0.1 and sph.overlap_std_ <= 0.15
    bits = sph.transform(X)
    distances = np.linalg.norm(X[:, None, :] - sph.pivots_[None], axis=2)
    # transform uses |x|^2 - 2 x.p + |p|^2: points within rounding of a radius may differ (the
    # point that defines each radius sits exactly on it).
    clear = np.abs(distances - sph.radii_) > 1e-9 * sph.radii_
    np.testing.assert_array_equal(bits[clear], (distances <= sph.radii_)[clear])
    assert clear.mean() > 0.999
    # Each sphere holds about half the data, each pair about a quarter.
    assert np.all(np.abs(bits.mean(axis=0) - 0.5) < 0.05)
    both = (bits[:, :, None] & bits[:, None, :]).mean(axis=0)[np.triu_indices(12, k=1)]
    assert np.abs(both - 0.25).mean() < 0.05


def test_sph_with_one_bit_and_no_iterations():
    X = _blobs()
    assert SpH(n_bits=1, random_state=0).fit(X).transform(X).mean() == pytest.approx(0.5, abs=0.01)
    assert SpH(n_bits=4, max_iter=0, random_state=0).fit(X).n_iter_ == 0


@pytest.mark.parametrize(
    "params, message",
    [
        ({"n_iter": -1}, "n_iter=-1 is impossible; accepted: an integer >= 0"),
    ],
)
def test_itq_bad_hyperparameters(params, message):
    with pytest.raises(ValueError, match=message):
        ITQ(n_bits=4, **params).fit(_blobs())


@pytest.mark.parametrize(
    "params, message",
    [
        ({"n_samples": 1}, "n_samples=1 is impossible; accepted: an integer >= 2"),
        ({"max_iter": -1}, "max_iter=-1 is impossible; accepted: an integer >= 0"),
        ({"epsilon_mean": 0}, r"epsilon_mean=0 is impossible; accepted: a number in \(0, 1\]"),
        ({"epsilon_stddev": 1.5},
         r"epsilon_stddev=1.5 is impossible; accepted: a number in \(0, 1\]"),
    ],
)
def test_sph_bad_hyperparameters(params, message):
    with pytest.raises(ValueError, match=message):
        SpH(n_bits=4, **params).fit(_blobs())


# --- MNIST, protocol A -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mnist():
    from sgh.cli.resources import BUNDLED_DATA_DIR
    from sgh.config import FileDatasetConfig
    from sgh.data import load_split

    path = BUNDLED_DATA_DIR / "mnist" / "mnist.npz"
    return load_split(FileDatasetConfig(name="mnist", path=str(path)))


def _codes(hasher, split):
    return pack_bits(hasher.transform(split.query)), pack_bits(hasher.transform(split.database))


def _map(hasher, split, bits):
    query, database = _codes(hasher, split)
    return mean_average_precision(
        query, database, bits, split.query_labels, split.database_labels, ties="expected"
    )["map"]


def _seed_mean_map(estimator, split, bits):
    return float(
        np.mean(
            [_map(estimator(bits, random_state=s).fit(split.train), split, bits) for s in SEEDS]
        )
    )


@pytest.mark.slow
def test_mnist_itq_and_lsh_at_32_bits_match_the_reference(mnist):
    start = time.perf_counter()
    itq = _seed_mean_map(ITQ, mnist, 32)
    lsh = _seed_mean_map(LSH, mnist, 32)
    print(
        f"\nMNIST 32 bits, mean mAP@all over seeds 0-4: ITQ {itq:.4f} (reference 0.444), "
        f"LSH {lsh:.4f} (reference 0.290); {time.perf_counter() - start:.1f} s"
    )
    assert itq == pytest.approx(ITQ_MAP[32], abs=ITQ_TOLERANCE)
    assert lsh == pytest.approx(LSH_MAP[32], abs=LSH_TOLERANCE)


@pytest.mark.slow
def test_mnist_all_baselines_at_16_32_64_bits(mnist):
    from sgh.data.neighbours import euclidean_neighbours

    groundtruth = euclidean_neighbours(mnist.query, mnist.database, 10)
    rows, maps = [], {}
    for name, estimator in BASELINES.items():
        for bits in (16, 32, 64):
            start = time.perf_counter()
            hasher = estimator(n_bits=bits, random_state=0).fit(mnist.train)
            fit_seconds = time.perf_counter() - start
            query, database = _codes(hasher, mnist)
            result = mean_average_precision(
                query, database, bits, mnist.query_labels, mnist.database_labels
            )["map"]
            recall = recall_at_n(query, database, bits, groundtruth, [100])[100]
            recall_stable = recall_at_n(query, database, bits, groundtruth, [100], ties="stable")
            maps[name, bits] = result
            rows.append(
                f"{name:5s} {bits:3d}  {result:.4f}  {recall:.4f}  {recall_stable[100]:.4f}  "
                f"{fit_seconds:6.1f}  {time.perf_counter() - start:6.1f}"
            )
    print("\nMNIST protocol A, random_state=0; mAP@all tie-aware; R10@100 tie-aware / stable")
    print("method bits  mAP@all  R10@100  R10@100s  fit s  total s")
    print("\n".join(rows))

    seed_means = {}
    for bits in (16, 32, 64):
        seed_means["itq", bits] = _seed_mean_map(ITQ, mnist, bits)
        seed_means["lsh", bits] = _seed_mean_map(LSH, mnist, bits)
        print(
            f"{bits} bits, mean over seeds 0-4: ITQ {seed_means['itq', bits]:.4f} (reference "
            f"{ITQ_MAP[bits]}), LSH {seed_means['lsh', bits]:.4f} (reference {LSH_MAP[bits]})"
        )
    ordering = {
        bits: maps["itq", bits] > max(maps["sph", bits], maps["sh", bits]) > maps["pcah", bits]
        for bits in (32, 64)
    }
    print(
        f"ITQ > SpH, SH > PCAH at 32 / 64 bits: {ordering[32]} / {ordering[64]}; PCAH mAP@all "
        f"16 -> 64 bits: {maps['pcah', 16]:.4f} -> {maps['pcah', 64]:.4f}"
    )

    for bits in (16, 32, 64):
        assert seed_means["itq", bits] == pytest.approx(ITQ_MAP[bits], abs=ITQ_TOLERANCE)
        assert seed_means["lsh", bits] == pytest.approx(LSH_MAP[bits], abs=LSH_TOLERANCE)
    # The literature's ordering at longer codes, and PCAH's decline with more bits.
    assert ordering[64]
    assert maps["pcah", 64] < maps["pcah", 16]
