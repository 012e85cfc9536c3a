"""Kernels against direct per-pair formulas."""

import numpy as np
import pytest
from scipy.stats import spearmanr

from scalenc.kernels import Gaussian, get_kernel


@pytest.fixture
def xu():
    rng = np.random.default_rng(0)
    return rng.normal(size=(7, 9)), rng.normal(size=(3, 9))


def test_linear(xu):
    X, U = xu
    np.testing.assert_allclose(get_kernel("linear")(X, U), X @ U.T)


def test_euclidean(xu):
    X, U = xu
    ref = -np.array([[np.linalg.norm(x - u) for u in U] for x in X])
    np.testing.assert_allclose(get_kernel("euclidean")(X, U), ref, atol=1e-12)


def test_spearman_equals_scipy(xu):
    X, U = xu
    X = X.copy()
    X[0, :3] = 1.0  # ties
    ref = np.array([[spearmanr(x, u).statistic for u in U] for x in X])
    np.testing.assert_allclose(get_kernel("spearman")(X, U), ref, atol=1e-12)


def test_gaussian(xu):
    X, U = xu
    ref = np.array([[np.exp(-np.sum((x - u) ** 2) / 8.0) for u in U] for x in X])
    np.testing.assert_allclose(Gaussian(sigma=2.0)(X, U), ref)


def test_gaussian_default_width_is_mean_squared_distance(xu):
    X, U = xu
    y = np.arange(7) % 3
    U = np.array([X[y == k].mean(0) for k in range(3)])
    stats = {"n": np.bincount(y).astype(float), "mean": U,
             "sqnorm": np.array([np.sum(X[y == k] ** 2) for k in range(3)])}
    sigma = Gaussian().resolve(stats).sigma
    ref = np.mean([[np.sum((x - u) ** 2) for u in U] for x in X])
    np.testing.assert_allclose(sigma**2, ref)


def test_callable_kernel_shape_is_checked(xu):
    X, U = xu
    k = get_kernel(lambda A, B: A[:, :2])
    with pytest.raises(ValueError, match=r"must return an array of shape \(rows, K\)"):
        k(X, U)


def test_unknown_kernel_lists_valid_names():
    with pytest.raises(ValueError, match=r"Unknown kernel 'rbf'. Valid names are \['euclidean'"):
        get_kernel("rbf")


@pytest.mark.parametrize("ties", [False, True])
def test_average_ranks_equal_scipy_rankdata(ties):
    from scipy.stats import rankdata

    from scalenc.kernels import average_ranks

    rng = np.random.default_rng(1)
    A = rng.integers(0, 4, size=(50, 13)).astype(float) if ties else rng.normal(size=(50, 13))
    np.testing.assert_array_equal(average_ranks(A), rankdata(A, axis=1))
