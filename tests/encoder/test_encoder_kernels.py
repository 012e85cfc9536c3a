"""Kernels against direct per-pair formulas."""

import numpy as np
import pytest
from scipy.stats import spearmanr

from scalenc.encoder.kernels import Gaussian, get_kernel


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
    stats = {
        "n": np.bincount(y).astype(float),
        "mean": U,
        "sqnorm": np.array([np.sum(X[y == k] ** 2) for k in range(3)]),
    }
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

    from scalenc.encoder.kernels import average_ranks

    rng = np.random.default_rng(1)
    A = rng.integers(0, 4, size=(50, 13)).astype(float) if ties else rng.normal(size=(50, 13))
    np.testing.assert_array_equal(average_ranks(A), rankdata(A, axis=1))


@pytest.mark.parametrize("case", ["continuous", "ties", "signed_zeros", "tiny_and_huge"])
def test_float32_ranks_equal_scipy_rankdata(case):
    """The packed-key sort of float32 rows ranks exactly as rankdata, ties included."""
    from scipy.stats import rankdata

    from scalenc.encoder import ranks
    from scalenc.encoder.kernels import average_ranks

    rng = np.random.default_rng(2)
    A = rng.normal(size=(300, 37)).astype(np.float32)
    if case == "ties":
        A[::7, :5] = A[::7, 5:6]  # some rows with ties, the others without
    elif case == "signed_zeros":
        A[::3, 0], A[::3, 1] = 0.0, -0.0  # equal values: one tie
    elif case == "tiny_and_huge":
        A[:, :4] = np.array([-3e38, -1e-45, 1e-45, 3e38], dtype=np.float32)
    np.testing.assert_array_equal(average_ranks(A), rankdata(A, axis=1))
    np.testing.assert_array_equal(average_ranks(A), average_ranks(A.astype(np.float64)))
    tied_rows = {"continuous": 0, "ties": 43, "signed_zeros": 100, "tiny_and_huge": 0}[case]
    assert ranks.ranks_and_tied_rows(A)[1].size == tied_rows


def test_embed_shares_work_and_equals_each_kernel_alone(monkeypatch):
    """Kernels evaluated together on shared tile products equal each kernel's formula, also
    across several row tiles where only some have ties."""
    from scalenc.encoder import kernels

    monkeypatch.setattr(kernels, "EMBED_TILE_ELEMENTS", 100 * 11)  # tiles of 100 rows
    rng = np.random.default_rng(3)
    X = rng.normal(size=(250, 11)).astype(np.float32)
    X[205, :4] = 0.5  # a tie in the third tile only
    U = rng.normal(size=(4, 11))
    chosen = [
        get_kernel("linear"),
        get_kernel("euclidean"),
        Gaussian(sigma=3.0),
        get_kernel("spearman"),
        get_kernel(lambda A, B: A[:, :4] * 2.0),
    ]
    Z = kernels.embed(chosen, X, U)
    X64 = X.astype(np.float64)
    d2 = ((X64[:, None, :] - U[None, :, :]) ** 2).sum(-1)
    rows = [
        X.astype(np.float64) @ U.T,
        -np.sqrt(d2),
        np.exp(-d2 / 18.0),
        np.array([[spearmanr(x, u).statistic for u in U] for x in X]),
        X64[:, :4] * 2.0,
    ]
    for m, ref in enumerate(rows):
        np.testing.assert_allclose(Z[:, 4 * m : 4 * (m + 1)], ref, rtol=1e-10, atol=1e-10)


def test_embed_tile_rows():
    from scalenc.encoder.kernels import embed_tile_rows

    assert embed_tile_rows(16) == 16384 and embed_tile_rows(256) == 1024  # 2^18 elements
    assert embed_tile_rows(1024) == 256 and embed_tile_rows(4096) == 64
    assert embed_tile_rows(10**6) == 1 and embed_tile_rows(0) == 2**18


def test_a_callable_kernel_sees_the_whole_block_once(monkeypatch):
    from scalenc.encoder import kernels

    monkeypatch.setattr(kernels, "EMBED_TILE_ELEMENTS", 10)
    seen = []

    def inner(A, B):
        seen.append(A.shape)
        return A @ B.T

    X, U = np.ones((250, 3)), np.ones((2, 3))
    Z = kernels.embed([get_kernel(inner), get_kernel("linear")], X, U)
    assert seen == [(250, 3)]
    np.testing.assert_array_equal(Z, np.full((250, 4), 3.0))
