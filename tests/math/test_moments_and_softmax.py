"""Block math against plain NumPy: class moments, their merge, log-softmax."""

import numpy as np
import pytest

from scalenc.math.moments import (
    SPARSE_SUMS_MIN_CLASSES,
    SPARSE_SUMS_TILE,
    class_moments,
    combine_partials,
    count_nonfinite,
)
from scalenc.math.softmax import log_softmax


def _oracle(X, codes, K):
    n = np.array([(codes == k).sum() for k in range(K)], dtype=float)
    mean = np.array([X[codes == k].mean(0) if n[k] else np.zeros(X.shape[1]) for k in range(K)])
    lab = codes >= 0
    C = X[lab] - mean[codes[lab]]
    return n, mean, C.T @ C


@pytest.mark.parametrize("splits", [[1], [3, 50, 51, 52, 199], list(range(5, 200, 17))])
def test_merged_moments_equal_numpy(splits):
    rng = np.random.default_rng(0)
    X = rng.normal(loc=1e3, size=(200, 5))  # large mean: tests the centred (Chan) merge
    codes = rng.integers(-1, 4, 200)
    parts = [
        class_moments(b, c, 4, sqnorm=True)
        for b, c in zip(np.split(X, splits), np.split(codes, splits))
    ]
    merged = combine_partials(*parts)
    n, mean, S = _oracle(X, codes, 4)
    np.testing.assert_array_equal(merged["n"], n)
    np.testing.assert_allclose(merged["mean"], mean, rtol=1e-13)
    np.testing.assert_allclose(merged["scatter"], S, rtol=1e-9)
    sq = [np.sum(X[codes == k] ** 2) for k in range(4)]
    np.testing.assert_allclose(merged["sqnorm"], sq, rtol=1e-12)


def test_merge_is_order_independent():
    rng = np.random.default_rng(1)
    X, codes = rng.normal(size=(90, 3)), rng.integers(0, 3, 90)
    parts = [class_moments(X[i : i + 10], codes[i : i + 10], 3) for i in range(0, 90, 10)]
    a = combine_partials(*parts)
    b = combine_partials(*parts[::-1])
    np.testing.assert_allclose(a["scatter"], b["scatter"], rtol=1e-12)
    np.testing.assert_allclose(a["mean"], b["mean"], rtol=1e-13)


def test_empty_class_in_block_has_zero_count():
    X = np.ones((4, 2))
    out = class_moments(X, np.array([0, 0, -1, -1]), 3)
    np.testing.assert_array_equal(out["n"], [2, 0, 0])
    np.testing.assert_array_equal(out["mean"][1:], 0)


def test_log_softmax_matches_naive_and_is_stable():
    s = np.array([[1.0, 2.0, 3.0], [1000.0, 0.0, -1000.0]])
    out = log_softmax(s)
    np.testing.assert_allclose(np.exp(out).sum(1), 1.0)
    np.testing.assert_allclose(out[0], np.log(np.exp(s[0]) / np.exp(s[0]).sum()))
    assert np.isfinite(out).all()


@pytest.mark.parametrize("K", [1, 2, 5, 16, 17, 40])
@pytest.mark.parametrize("overwrite", [False, True])
def test_log_softmax_along_rows_of_few_or_many_classes(K, overwrite):
    """Along the rows of (b, K) scores (a classes-by-row copy up to FEW_CLASSES classes),
    and along columns, equal to SciPy's; written into the scores with ``overwrite``."""
    from scipy.special import log_softmax as reference

    rng = np.random.default_rng(K)
    scores = rng.normal(scale=30.0, size=(1000, K))
    expected = reference(scores, axis=1)
    given = scores.copy()
    out = log_softmax(given, overwrite=overwrite)
    np.testing.assert_allclose(out, expected, rtol=1e-13, atol=1e-12)
    assert (out is given) == overwrite and out.shape == scores.shape
    np.testing.assert_allclose(
        log_softmax(scores.T, axis=0), reference(scores.T, axis=0), rtol=1e-13, atol=1e-12
    )
    ints = log_softmax(np.arange(2 * K).reshape(2, K))  # an integer array: float64 out
    np.testing.assert_allclose(ints, reference(np.arange(2.0 * K).reshape(2, K), axis=1))


def test_count_nonfinite():
    X = np.array([[1.0, np.nan], [np.inf, 2.0]])
    assert count_nonfinite(X) == 2
    assert count_nonfinite(np.ones((2, 2), dtype=int)) == 0


@pytest.mark.parametrize("unlabeled", [False, True])
def test_float32_tiled_scatter_matches_float64(unlabeled):
    rng = np.random.default_rng(2)
    X = (rng.normal(loc=50.0, size=(9000, 7)) * rng.uniform(0.5, 3, 7)).astype(np.float32)
    codes = rng.integers(-1 if unlabeled else 0, 3, 9000)
    n, mean, S = _oracle(X.astype(np.float64), codes, 3)
    # float32 path, tiles of 4096 rows; with squared norms the class sums are float64
    a = class_moments(X, codes, 3, sqnorm=True)
    np.testing.assert_array_equal(a["n"], n)
    np.testing.assert_allclose(a["mean"], mean, rtol=1e-12)
    np.testing.assert_allclose(a["scatter"], S, rtol=2e-5, atol=1e-6 * np.abs(S).max())
    # without: the class sums come from the same float32 products as the scatter, centred
    # at the first tile's mean, so their error is float32 rounding of the spread, not of
    # the means (which are 50 × larger here)
    b = class_moments(X, codes, 3)
    np.testing.assert_array_equal(b["n"], n)
    assert np.all(np.abs(b["mean"] - mean) <= 1e-6 * X.std(axis=0))
    np.testing.assert_allclose(b["scatter"], S, rtol=2e-5, atol=1e-6 * np.abs(S).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scatter", [False, True])
def test_many_classes_sums_from_a_sparse_indicator_equal_numpy(dtype, scatter):
    """K = 40 ≥ SPARSE_SUMS_MIN_CLASSES, few features, unlabeled rows, blocks longer than a
    sparse tile: class counts, means, scatter and squared norms as plain NumPy's, and a
    NaN in an unlabeled row still seen by the finiteness check."""
    assert 40 >= SPARSE_SUMS_MIN_CLASSES
    rng = np.random.default_rng(3)
    n_rows = SPARSE_SUMS_TILE + 777
    codes = rng.integers(-1, 40, n_rows)
    X = (rng.normal(size=(40, 6))[np.maximum(codes, 0)] + rng.normal(size=(n_rows, 6))).astype(
        dtype
    )
    n, mean, S = _oracle(X.astype(np.float64), codes, 40)
    out = class_moments(X, codes, 40, scatter=scatter, sqnorm=True, check_finite=True)
    np.testing.assert_array_equal(out["n"], n)
    np.testing.assert_allclose(out["mean"], mean, rtol=1e-10, atol=1e-12)
    sq = [np.sum(X[codes == k].astype(np.float64) ** 2) for k in range(40)]
    np.testing.assert_allclose(out["sqnorm"], sq, rtol=1e-12)
    if scatter:
        np.testing.assert_allclose(out["scatter"], S, rtol=2e-5, atol=1e-6 * np.abs(S).max())
    if dtype == np.float64 and scatter:
        return  # that path does not check finiteness on the way (all_finite False)
    assert out["all_finite"]
    X[np.flatnonzero(codes < 0)[0], 2] = np.nan
    assert not class_moments(X, codes, 40, scatter=scatter, check_finite=True)["all_finite"]
