"""The encoder's block math and the class moments on device arrays (issue 28).

Each block function runs on ``array_api_strict`` arrays, which accept the array API
standard and nothing else (so a NumPy-only call in a device path fails here), and its
result is compared with the same call on NumPy arrays, the oracle. The ``gpu`` cases do
the same with CuPy arrays and skip where CuPy or a CUDA device is missing.
"""

import array_api_compat
import array_api_strict
import numpy as np
import pytest
from conftest import cupy_or_skip
from scipy.stats import rankdata

from scalenc.encoder import blocks
from scalenc.encoder import passes as encoder_passes
from scalenc.encoder.kernels import (
    CallableKernel,
    Euclidean,
    Gaussian,
    Linear,
    Means,
    Spearman,
    Tile,
    average_ranks,
    embed,
)
from scalenc.exceptions import InputError
from scalenc.math import moments, softmax, tiles
from scalenc.math.linalg import lda_from_moments, stacked_class_scores
from scalenc.math.xp import to_host

KERNELS = (Linear(), Euclidean(), Spearman(), Gaussian(sigma=2.5))
DTYPES = (np.float32, np.float64)


@pytest.fixture(params=["strict", pytest.param("cupy", marks=pytest.mark.gpu)])
def device(request):
    """A function moving a NumPy array to the device, and a check of a result's library."""
    if request.param == "strict":
        return array_api_strict.asarray, lambda a: isinstance(a, type(array_api_strict.asarray(0)))
    cupy = cupy_or_skip()
    return cupy.asarray, array_api_compat.is_cupy_array


def close(actual, expected, dtype=np.float64, **kwargs):
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-11, "atol": 1e-11}
    np.testing.assert_allclose(to_host(actual), expected, **{**tol, **kwargs})


def close_to_scale(actual, expected, dtype):
    """Equal to the rounding of ``dtype`` relative to the largest entry of ``expected``."""
    scale = np.abs(expected).max()
    close(actual, expected, rtol=0, atol=scale * (1e-5 if dtype == np.float32 else 1e-12))


def data(dtype, n=200, p=7, K=3, seed=0):
    """Rows around K means, with ties in some rows (rounded values, a constant row), about
    a fifth unlabeled (code −1)."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, K, n)
    X = rng.normal(size=(K, p))[codes] * 3.0 + rng.normal(size=(n, p))
    X[::9] = np.round(X[::9])  # ties
    X[5] = 2.0  # a row of one value
    codes[rng.random(n) < 0.2] = -1
    U = np.array([X[codes == k].mean(axis=0) for k in range(K)])
    return X.astype(dtype), codes, U


# --- math/moments.py --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "options",
    [{}, {"scatter": False}, {"sqnorm": True}, {"scatter": False, "sqnorm": True}],
    ids=["scatter", "means", "scatter-sqnorm", "sqnorm"],
)
def test_class_moments(device, dtype, options):
    to_device, _ = device
    X, codes, _ = data(dtype)
    X = X + np.asarray(100.0, dtype)  # means large against the spread: no cancellation
    actual = moments.class_moments(to_device(X), codes, 3, **options)
    # a device block's moments are float64 throughout: NumPy's of the float64 values, and
    # NumPy's float32 products' to their float32 rounding
    exact = moments.class_moments(X.astype(np.float64), codes, 3, **options)
    expected = moments.class_moments(X, codes, 3, **options)
    assert actual.keys() == expected.keys()
    for key in expected:
        assert isinstance(actual[key], np.ndarray)  # partials come back as NumPy
        close(actual[key], exact[key], rtol=1e-10)
        close_to_scale(actual[key], expected[key], dtype)


def test_class_moments_over_several_device_tiles(device, monkeypatch):
    """Device tiles merged by Chan's update give the block's moments."""
    to_device, _ = device
    monkeypatch.setattr(moments, "device_tile_rows", lambda xp, width: 17)
    X, codes, _ = data(np.float64)
    expected = moments.class_moments(X, codes, 3, sqnorm=True)
    actual = moments.class_moments(to_device(X), codes, 3, sqnorm=True, check_finite=True)
    assert actual.pop("all_finite") is True
    for key in expected:
        close(actual[key], expected[key], rtol=1e-10)


def test_class_moments_ignore_unlabeled_nonfinite_rows(device):
    to_device, _ = device
    X, codes, _ = data(np.float64)
    X[codes == -1] = np.nan
    expected = moments.class_moments(X, codes, 3)
    actual = moments.class_moments(to_device(X), codes, 3, check_finite=True)
    assert actual.pop("all_finite") is False
    for key in expected:
        close(actual[key], expected[key])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scatter", [True, False])
def test_checked_class_moments(device, dtype, scatter):
    to_device, _ = device
    X, codes, _ = data(dtype)
    X[3, 2], X[40, 0] = np.nan, np.inf
    expected = moments.checked_class_moments(X, codes, 3, scatter=scatter, sqnorm=True)
    actual = moments.checked_class_moments(to_device(X), codes, 3, scatter=scatter, sqnorm=True)
    assert actual["nonfinite"] == expected["nonfinite"] == 2
    assert actual["rows"] == expected["rows"] == 200
    for key in ("n", "mean", "sqnorm", *(("scatter",) if scatter else ())):
        close_to_scale(actual[key], expected[key], dtype)


def test_finiteness_and_magnitude_checks(device):
    to_device, _ = device
    X, _, _ = data(np.float32)
    moments.check_finite(to_device(X))
    moments.check_magnitude(to_device(X))
    assert moments.count_nonfinite(to_device(X)) == 0
    assert moments.count_nonfinite(to_device(np.arange(6).reshape(2, 3))) == 0
    X[7, 1], X[9, 4] = np.nan, -np.inf
    assert moments.count_nonfinite(to_device(X)) == moments.count_nonfinite(X) == 2
    with pytest.raises(InputError, match="X contains 2 NaN or infinite value"):
        moments.check_finite(to_device(X))
    X[9, 4] = 3e30
    with pytest.raises(InputError, match="X column 4 holds 3e\\+30, too large for float32"):
        moments.check_magnitude(to_device(X))


def test_log_softmax_and_labeled_log_likelihood(device):
    to_device, on_device = device
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(50, 4)) * 30.0
    codes = rng.integers(-1, 4, 50)
    expected = softmax.log_softmax(scores)
    actual = softmax.log_softmax(to_device(scores))
    assert on_device(actual)
    close(actual, expected)
    total, count = softmax.labeled_log_likelihood(actual, codes)
    expected_total, expected_count = softmax.labeled_log_likelihood(expected, codes)
    assert count == expected_count == np.count_nonzero(codes >= 0)
    np.testing.assert_allclose(total, expected_total, rtol=1e-12)


def test_row_tiles(device):
    to_device, on_device = device
    X, codes, _ = data(np.float64, n=50)
    mapped = tiles.map_row_tiles(lambda x: x * 2.0, to_device(X), 7)
    assert on_device(mapped)
    close(mapped, X * 2.0)
    sums = tiles.over_row_tiles(
        lambda x, c: to_host(x).sum(axis=0), lambda a, b: a + b, to_device(X), codes, 7
    )
    close(sums, X.sum(axis=0))


# --- encoder/kernels.py -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_average_ranks_with_ties(device, dtype):
    to_device, on_device = device
    rng = np.random.default_rng(2)
    A = rng.integers(0, 4, (60, 9)).astype(dtype)  # many ties
    A[0] = 1  # one run over the whole row
    A[1] = np.arange(9)[::-1]  # none
    ranks = average_ranks(to_device(A))
    assert on_device(ranks)
    np.testing.assert_array_equal(to_host(ranks), average_ranks(A))
    np.testing.assert_array_equal(to_host(ranks), rankdata(A, axis=1))


def test_means_and_tile(device):
    to_device, on_device = device
    X, _, U = data(np.float32)
    means, host_means = Means(U, to_device(X)), Means(U)
    close(means.sq_norms, host_means.sq_norms)
    close(means.centred_ranks, host_means.centred_ranks)
    tile, host_tile = Tile(to_device(X), means), Tile(X, host_means)
    for name in ("x64", "inner", "sq_distances"):
        assert on_device(getattr(tile, name))
        close(getattr(tile, name), getattr(host_tile, name))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
def test_kernels(device, dtype, kernel):
    to_device, on_device = device
    X, _, U = data(dtype)
    Z = kernel(to_device(X), U)
    assert on_device(Z)
    close(Z, kernel(X, U))


@pytest.mark.parametrize("dtype", DTYPES)
def test_embed_several_kernels(device, dtype):
    to_device, on_device = device
    X, _, U = data(dtype)
    kernels = (*KERNELS, CallableKernel(_cosine))
    Z = embed(kernels, to_device(X), U)
    assert on_device(Z) and Z.shape == (200, 15)
    close(Z, embed(kernels, X, U))


def _cosine(X, U):
    assert isinstance(X, np.ndarray) and isinstance(U, np.ndarray)  # a user function: NumPy
    return (X @ U.T) / np.outer(np.linalg.norm(X, axis=1), np.linalg.norm(U, axis=1))


# --- encoder/blocks.py and the passes' block functions ----------------------------------


def _lda(X, codes, U, kernel):
    Z = kernel(X, U)
    stats = moments.class_moments(Z, codes, U.shape[0])
    return lda_from_moments(stats["n"], stats["mean"], stats["scatter"])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
def test_output_blocks(device, dtype, K, kernel, monkeypatch):
    to_device, on_device = device
    monkeypatch.setattr(blocks, "tile_rows", lambda xp, width: 64)  # several tiles a block
    X, codes, U = data(dtype, K=K)
    model, Xd = _lda(X, codes, U, kernel), to_device(X)
    classes = np.array([10, 20, 30][:K])
    embedded = blocks.embed_block(Xd, kernel=kernel, U=U, out_dtype=dtype)
    assert on_device(embedded) and to_host(embedded).dtype == dtype
    close(embedded, blocks.embed_block(X, kernel=kernel, U=U, out_dtype=dtype), dtype)
    for block_fn in (blocks.decision_block, blocks.proba_block):
        out = block_fn(Xd, kernel=kernel, U=U, model=model, out_dtype=np.float64)
        assert on_device(out)
        close(out, block_fn(X, kernel=kernel, U=U, model=model, out_dtype=np.float64))
    labels = blocks.predict_block(Xd, kernel=kernel, U=U, model=model, classes=classes)
    assert on_device(labels)
    expected = blocks.predict_block(X, kernel=kernel, U=U, model=model, classes=classes)
    np.testing.assert_array_equal(to_host(labels), expected)
    # string labels stay on the host
    names = np.array(["a", "b", "c"][:K])
    labels = blocks.predict_block(Xd, kernel=kernel, U=U, model=model, classes=names)
    np.testing.assert_array_equal(labels, names[np.searchsorted(classes, expected)])


def test_outputs_of_a_precomputed_embedding(device):
    to_device, on_device = device
    X, codes, U = data(np.float64)
    model = _lda(X, codes, U, Linear())
    Z = Linear()(X, U)
    for block_fn, kwargs in [
        (blocks.proba_block, {"model": model, "out_dtype": np.float64}),
        (blocks.predict_block, {"model": model, "classes": np.arange(3)}),
    ]:
        out = blocks.apply_to_embedding(to_device(Z), block_fn=block_fn, **kwargs)
        assert on_device(out)
        close(out, blocks.apply_to_embedding(Z, block_fn=block_fn, **kwargs))


@pytest.mark.parametrize("dtype", DTYPES)
def test_stacked_moments_and_log_likelihood(device, dtype, monkeypatch):
    to_device, _ = device
    monkeypatch.setattr(blocks, "tile_rows", lambda xp, width: 64)
    X, codes, U = data(dtype)
    Z = embed(KERNELS, X, U)
    expected = blocks.stacked_class_moments(Z, codes, len(KERNELS), 3)
    actual = blocks.stacked_class_moments(to_device(Z), codes, len(KERNELS), 3)
    for got, want in zip(actual, expected, strict=True):
        for key in want:
            assert isinstance(got[key], np.ndarray)
            close(got[key], want[key], rtol=1e-10)
    models = [lda_from_moments(m["n"], m["mean"], m["scatter"]) for m in expected]
    coef, intercept = stacked_class_scores(models, 3)
    want = blocks.stacked_log_likelihood(Z, codes, coef, intercept, len(KERNELS))
    got = blocks.stacked_log_likelihood(to_device(Z), codes, coef, intercept, len(KERNELS))
    assert all(isinstance(v, (np.ndarray, np.generic)) for v in got)  # NumPy totals
    close(np.array(got), np.array(want), rtol=1e-11)


@pytest.mark.parametrize("tile", [64, 100_000], ids=["tiles", "whole"])
def test_pass_two_bound_sums(device, tile, monkeypatch):
    """Pass 2's sums for the kernel choice's bounds (``stacked_loss_gradients``: the
    log-likelihood, gradient and the rows by kind and band) on a device block equal the
    NumPy block's, which ``test_encoder_choice`` checks against the row-by-row oracle;
    scores sharpened for one kernel and flattened for another, so that the rows fall in
    every kind."""
    from scalenc.encoder import choice

    to_device, _ = device
    monkeypatch.setattr(blocks, "tile_rows", lambda xp, width: tile)
    X, codes, U = data(np.float64, n=3000)
    kernels = (Linear(), Euclidean())
    Z = np.asarray(embed(kernels, X, U))
    expected = blocks.stacked_class_moments(Z, codes, 2, 3)
    models = [lda_from_moments(m["n"], m["mean"], m["scatter"]) for m in expected]
    coef, intercept = stacked_class_scores(models, 3)
    coef = coef * np.array([4.0, 0.5]).repeat(3)[:, None]
    whiten = [choice.whitening(Z[:1000, m * 3 : (m + 1) * 3]) for m in range(2)]
    want = blocks.stacked_loss_gradients(Z, codes, coef, intercept, whiten, 2)
    got = blocks.stacked_loss_gradients(to_device(Z), codes, coef, intercept, whiten, 2)
    assert all(w["far"].any() and w["tiny"].any() for w in want)
    for mine, theirs in zip(got, want, strict=True):
        for key in theirs:
            assert isinstance(mine[key], (np.ndarray, np.generic))  # NumPy partials
            close(mine[key], theirs[key], rtol=1e-10, atol=1e-10 * np.abs(theirs[key]).max())


@pytest.mark.parametrize("dtype", DTYPES)
def test_encoder_pass_blocks(device, dtype):
    """The passes' block functions, as ``reduce_rows`` calls them on one block."""
    to_device, _ = device
    X, codes, U = data(dtype)
    Xd = to_device(X)
    kw = {"row_start": 0, "kernels": KERNELS, "U": U}
    expected = encoder_passes._embedding_block(X, codes, n_classes=3, **kw)
    actual = encoder_passes._embedding_block(Xd, codes, n_classes=3, **kw)
    for got, want in zip(actual, expected, strict=True):
        for key in want:
            close(got[key], want[key], rtol=1e-10)
    models = [lda_from_moments(m["n"], m["mean"], m["scatter"]) for m in expected]
    coef, intercept = stacked_class_scores(models, 3)
    kw = {**kw, "coef": coef, "intercept": intercept}
    close(
        np.array(encoder_passes._cross_entropy_block(Xd, codes, **kw)),
        np.array(encoder_passes._cross_entropy_block(X, codes, **kw)),
        rtol=1e-11,
    )
    Z = embed([Spearman()], X, U)
    close(
        encoder_passes._log_likelihood_block(to_device(Z), codes, row_start=0, model=models[2]),
        encoder_passes._log_likelihood_block(Z, codes, row_start=0, model=models[2]),
        rtol=1e-12,
    )
    got = encoder_passes._plain_moments_block(to_device(Z), codes, row_start=0, n_classes=3)
    want = encoder_passes._plain_moments_block(Z, codes, row_start=0, n_classes=3)
    for key in want:
        close(got[key], want[key], rtol=1e-10)


def test_full_embedding_block(device):
    to_device, on_device = device
    X, codes, _ = data(np.float64)
    counts = np.bincount(codes[codes >= 0], minlength=3).astype(float)
    kw = {"kernel": Gaussian(sigma=3.0), "n_classes": 3, "counts": counts}
    out = blocks.full_embedding_block(to_device(X[:40]), to_device(X), codes, **kw)
    assert on_device(out)
    close(out, blocks.full_embedding_block(X[:40], X, codes, **kw))
