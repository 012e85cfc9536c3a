"""nRBFN's and LRC's block math on non-NumPy arrays (issue 28): the same calls on
``array_api_strict`` arrays — which accept the array API standard and nothing else, so a
NumPy-only call cannot slip into the device path — give the NumPy results (the oracle);
on a GPU, the same with CuPy arrays (marked ``gpu``, skipped elsewhere)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cupy_or_skip

from scalenc.math import xp as xpmod
from scalenc.nrbfn import blocks as nb

xs = pytest.importorskip("array_api_strict")


def host(a):
    return xpmod.to_host(a)


@pytest.fixture(params=[np.float32, np.float64], ids=["float32", "float64"])
def problem(request):
    dtype = request.param
    rng = np.random.default_rng(3)
    X = rng.normal(size=(257, 6)).astype(dtype)
    codes = rng.integers(-1, 3, 257)  # a quarter unlabeled
    basis = rng.normal(size=(23, 6)).astype(dtype)
    return X, codes, basis, 1.1


def _tol(dtype):
    return {"rtol": 2e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-11, "atol": 1e-13}


def test_namespace_is_numpy_itself_for_numpy_blocks():
    assert xpmod.namespace(np.ones(3), None, 2.0) is np
    assert xpmod.namespace(xs.asarray([1.0])) is xs


@pytest.mark.parametrize("normalize", [True, False])
def test_normalized_kernel_on_strict_arrays(problem, normalize):
    X, _, basis, sigma = problem
    got = nb.normalized_kernel(xs.asarray(X), basis, sigma, normalize=normalize)
    assert xpmod.namespace(got) is xs
    want = nb.normalized_kernel(X, basis, sigma, normalize=normalize)
    np.testing.assert_allclose(host(got), want, **_tol(X.dtype))
    # the plain kernel against its definition: exp(−‖x − g‖²/(2σ²)), rows not summing to 1
    d2 = ((X[:, None, :].astype(np.float64) - basis[None, :, :]) ** 2).sum(-1)
    plain = np.exp(-d2 / (2 * sigma**2))
    np.testing.assert_allclose(
        want, plain / plain.sum(1, keepdims=True) if normalize else plain, **_tol(X.dtype)
    )


def test_sigma_block_on_strict_arrays(problem):
    X, codes, basis, _ = problem
    want = nb.sigma_block(X, codes, row_start=0, basis=basis)
    got = xpmod.host_tree(nb.sigma_block(xs.asarray(X), codes, row_start=0, basis=basis))
    assert int(got["rows"]) == int(want["rows"])
    np.testing.assert_allclose(float(got["dist_sum"]), float(want["dist_sum"]), rtol=1e-5)


#: W̃ and W of one σ (sharing their products), and W̃ of another
KERNELS = ((1.1, True), (1.1, False), (0.55, True))


@pytest.mark.parametrize(
    "n_folds, only_fold, kernels",
    [(1, None, KERNELS[:1]), (3, None, KERNELS[:1]), (3, 1, KERNELS[:1]), (3, None, KERNELS)],
)
def test_gram_block_on_strict_arrays(problem, n_folds, only_fold, kernels):
    X, codes, basis, _ = problem
    kwargs = dict(row_start=40, basis=basis, kernels=kernels, n_classes=3, n_folds=n_folds)
    kwargs.update(seed=5, only_fold=only_fold)
    want = nb.gram_block(X, codes, **kwargs)
    got = xpmod.host_tree(nb.gram_block(xs.asarray(X), codes, **kwargs))
    folds = 1 if only_fold is not None else n_folds
    assert got["M"].shape == want["M"].shape == (len(kernels), folds, 23, 23)
    lower = np.tril_indices(basis.shape[0])  # the host fills the lower triangle only
    for v in range(len(kernels)):
        for f in range(folds):
            np.testing.assert_allclose(
                got["M"][v, f][lower], want["M"][v, f][lower], **_tol(X.dtype)
            )
    np.testing.assert_allclose(got["B"], want["B"], **_tol(X.dtype))
    np.testing.assert_array_equal(got["count"], want["count"])


@pytest.mark.parametrize("tile", [None, 23 * 40], ids=["shared", "one-at-a-time"])
def test_kernels_of_one_block_are_each_kernel_alone(problem, tile, monkeypatch):
    """Oracle: the kernels of one Gram or held-out block (W and W̃ of one σ sharing their
    products; or one at a time where their tiles would pass the tile's cap) give, bit for
    bit, what each gives alone."""
    if tile is not None:
        monkeypatch.setattr(nb, "GRAM_TILE_ELEMENTS", tile)  # tiles of 40 rows
    X, codes, basis, _ = problem
    kwargs = dict(row_start=0, basis=basis, n_classes=3, n_folds=3, seed=5)
    every = nb.gram_block(X, codes, kernels=KERNELS, **kwargs)
    weights = np.random.default_rng(4).normal(size=(len(KERNELS), 3, 4, 3, 23))
    errors = nb.cv_error_block(X, codes, row_start=0, basis=basis, kernels=KERNELS,
                               weights=weights, seed=5)  # fmt: skip
    for v, kernel in enumerate(KERNELS):
        alone = nb.gram_block(X, codes, kernels=(kernel,), **kwargs)
        np.testing.assert_array_equal(every["M"][v], alone["M"][0])
        np.testing.assert_array_equal(every["B"][v], alone["B"][0])
        one = nb.cv_error_block(X, codes, row_start=0, basis=basis, kernels=(kernel,),
                                weights=weights[v : v + 1], seed=5)  # fmt: skip
        np.testing.assert_array_equal(errors[v], one[0])


def test_cv_error_blocks_on_strict_arrays(problem):
    X, codes, basis, sigma = problem
    rng = np.random.default_rng(4)
    weights = rng.normal(size=(len(KERNELS), 3, 4, 3, basis.shape[0]))  # kernels, folds, λ, K, r
    kwargs = dict(row_start=0, basis=basis, kernels=KERNELS, weights=weights, seed=2)
    want = nb.cv_error_block(X, codes, **kwargs)
    assert want.shape == (len(KERNELS), 4)
    np.testing.assert_array_equal(nb.cv_error_block(xs.asarray(X), codes, **kwargs), want)
    models = tuple((basis[f:], sigma, weights[0, f][:, :, f:]) for f in range(3))
    kwargs = dict(row_start=0, models=models, n_folds=3, seed=2)
    want = nb.cv_error_refit_block(X, codes, **kwargs)
    np.testing.assert_array_equal(nb.cv_error_refit_block(xs.asarray(X), codes, **kwargs), want)


def test_output_blocks_on_strict_arrays(problem):
    X, _, basis, sigma = problem
    rng = np.random.default_rng(5)
    weights = rng.normal(size=(3, basis.shape[0]))
    weights[:, :4] = -10.0  # some rows with no positive score: their mass on the argmax
    kwargs = dict(score_fn=nb.nrbfn_scores, basis=basis, sigma=sigma, weights=weights)
    Xs = xs.asarray(X)
    for block, extra in [
        (nb.decision_block, {"out_dtype": X.dtype, "binary": False}),
        (nb.proba_block, {"out_dtype": X.dtype}),
        (nb.predict_block, {"classes": np.array([2, 4, 8])}),
    ]:
        got = block(Xs, **kwargs, **extra)
        assert xpmod.namespace(got) is xs, block.__name__
        np.testing.assert_allclose(host(got), block(X, **kwargs, **extra), **_tol(X.dtype))
    labels = nb.predict_block(Xs, **kwargs, classes=np.array(["a", "b", "c"]))
    assert isinstance(labels, np.ndarray)  # strings stay on the host


def test_lrc_scores_on_strict_arrays(problem):
    X, _, _, _ = problem
    rng = np.random.default_rng(6)
    coef, intercept = rng.normal(size=(3, X.shape[1])), rng.normal(size=3)
    got = nb.lrc_scores(xs.asarray(X), coef=coef, intercept=intercept)
    want = nb.lrc_scores(X, coef=coef, intercept=intercept)
    np.testing.assert_allclose(host(got), want, rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
def test_nrbfn_blocks_on_cupy(problem):
    cupy = cupy_or_skip()
    X, codes, basis, sigma = problem
    Xc = cupy.asarray(X)
    np.testing.assert_allclose(
        nb.normalized_kernel(Xc, basis, sigma).get(),
        nb.normalized_kernel(X, basis, sigma),
        **_tol(X.dtype),
    )
    kwargs = dict(row_start=0, basis=basis, kernels=KERNELS, n_classes=3, n_folds=2, seed=1)
    got = xpmod.host_tree(nb.gram_block(Xc, codes, **kwargs))
    want = nb.gram_block(X, codes, **kwargs)
    lower = np.tril_indices(basis.shape[0])
    for v in range(len(KERNELS)):
        np.testing.assert_allclose(got["M"][v, 0][lower], want["M"][v, 0][lower], **_tol(X.dtype))
    np.testing.assert_allclose(got["B"], want["B"], **_tol(X.dtype))
