"""CCDR's block math and the exact search against its subsample, on device arrays.

Every block function runs on ``array_api_strict`` arrays (the array API standard and
nothing else, so a NumPy-only call in a device path fails here) and is compared with the
same call on NumPy arrays, the oracle; the tests marked ``gpu`` do the same with CuPy's
arrays on a CUDA device and skip elsewhere.
"""

from __future__ import annotations

import array_api_compat
import array_api_strict
import numpy as np
import pytest
from conftest import cupy_or_skip, make_blobs

from scalenc import CCDRClassifier
from scalenc.ccdr import blocks as cb
from scalenc.exceptions import InputError
from scalenc.math.nearest import nearest_exact
from scalenc.math.xp import to_host

TOL = {np.float64: 1e-12, np.float32: 1e-5}


def strict(a):
    return array_api_strict.asarray(a)


def assert_strict(a):
    assert array_api_compat.array_namespace(a) is array_api_strict, type(a)


def assert_close(device, host, dtype=np.float64, atol=0.0):
    np.testing.assert_allclose(to_host(device), host, rtol=TOL[dtype], atol=atol)


# --- the exact search against a short reference set ---------------------------------------


def search_cases():
    """(Q, R, ks): random rows with near ties in float32, integer rows full of duplicates
    (queries equal to reference rows among them), and one row repeated hundreds of times."""
    rng = np.random.default_rng(3)
    A = rng.random((60, 8))
    R = np.vstack([A, A + 1e-9 * rng.random(A.shape)])  # pairs far below float32 ulps
    yield rng.random((90, 8)), R, (1, 3, 9)
    R = rng.integers(0, 3, (150, 4)).astype(np.float64)
    yield np.vstack([R[:20], rng.integers(0, 3, (30, 4))]), R, (1, 4, 12, 153)
    distinct = rng.integers(0, 4, (10, 5)).astype(np.float64)
    R = distinct[rng.choice(10, 600, p=np.r_[0.6, np.full(9, 0.4 / 9)])]
    yield np.vstack([R[:40], rng.random((10, 5))]), R, (1, 4)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_exact_search_on_device_matches_numpy(dtype):
    """The same neighbours (indices exactly, duplicates and zero distances included) and
    distances as NumPy's search, with and without excluding each query's own row."""
    for Q, R, ks in search_cases():
        Q = Q.astype(dtype)
        exclude = np.where(np.arange(Q.shape[0]) < 20, np.arange(Q.shape[0]), -1)
        for k in ks:
            for excl in (None, exclude):
                want = nearest_exact(Q, R, k, excl, dtype)
                got = nearest_exact(strict(Q), R, k, excl, dtype)
                assert_strict(got[0])
                np.testing.assert_array_equal(to_host(got[0]), want[0])
                np.testing.assert_allclose(to_host(got[1]), want[1], rtol=1e-12, atol=1e-12)


def test_exact_search_on_device_beyond_float32_range():
    rng = np.random.default_rng(9)
    R = rng.random((50, 3)) * 1e20
    Q = (R[:10] + 1e15).astype(np.float32)
    want = nearest_exact(Q, R, 2, None, np.float32)
    got = nearest_exact(strict(Q), R, 2, None, np.float32)
    np.testing.assert_array_equal(to_host(got[0]), want[0])
    np.testing.assert_allclose(to_host(got[1]), want[1], rtol=1e-12)


# --- the Nyström map, the outputs and the heads' statistics -------------------------------


@pytest.fixture(scope="module", params=["linear", "lda", "knn"])
def fitted(request):
    """A CCDRClassifier fitted on NumPy rows (two aligned subsamples), its training rows
    (subsample rows among them: the exact-copy case of eq. 20) and codes (some −1)."""
    X, y = make_blobs(400, 5, 3, seed=4, sep=1.0, unlabeled=0.2, dtype=np.float32)
    X = X.astype(np.float64)  # float32 values: a float32 block holds S's rows exactly
    clf = CCDRClassifier(
        n_components=3,
        n_neighbors=8,
        subsample_size=150,
        n_subsamples=2,
        classifier=request.param,
        random_state=0,
    ).fit(X, y)
    return clf, X[::3], y[::3]


def solutions(clf):
    return tuple(clf.ccdr_.solutions_)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nystrom_on_device(fitted, dtype):
    clf, X, y = fitted
    X = X.astype(dtype)
    sols = solutions(clf)
    assert any((X[:, None] == sols[0].X[None]).all(-1).any(1))  # some rows of S itself
    for codes in (None, y):
        for sol in sols:
            got = cb.nystrom(sol, strict(X), codes)
            assert_strict(got)
            assert_close(got, cb.nystrom(sol, X, codes), dtype)
        got = cb.nystrom_ensemble(sols, strict(X), None if codes is None else strict(codes))
        assert_strict(got)
        assert_close(got, cb.nystrom_ensemble(sols, X, codes), dtype)


def test_weighted_rows_on_device():
    rng = np.random.default_rng(1)
    weights, Y = rng.random((30, 4)), rng.random((12, 3))
    rows = rng.integers(-1, 12, (30, 4))
    weights[rows < 0] = 0.0
    got = cb._weighted_rows(strict(weights), strict(rows), strict(Y))
    assert_strict(got)
    assert_close(got, cb._weighted_rows(weights, rows, Y))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_transform_block_on_device(fitted, dtype):
    clf, X, y = fitted
    X = X.astype(dtype)
    sols = solutions(clf)
    with_codes = np.hstack([X, y[:, None].astype(dtype)])
    for block, flag in ((X, False), (with_codes, True)):
        want = cb.transform_block(block, solutions=sols, with_codes=flag, out_dtype=dtype)
        got = cb.transform_block(strict(block), solutions=sols, with_codes=flag, out_dtype=dtype)
        assert_strict(got)
        assert got.dtype == getattr(array_api_strict, np.dtype(dtype).name)
        assert_close(got, want, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_classifier_outputs_on_device(fitted, dtype):
    """scores, proba and predict through each head (linear, LDA, k-NN), as device arrays;
    string labels come back as NumPy."""
    clf, X, _ = fitted
    X = X.astype(dtype)
    args = {"solutions": solutions(clf), "head": clf.head_}
    for binary in (False, True):
        got = cb.scores_block(strict(X), binary=binary, **args)
        assert_strict(got)
        assert_close(got, cb.scores_block(X, binary=binary, **args), dtype, atol=1e-12)
    got = cb.proba_block(strict(X), **args)
    assert_strict(got)
    assert_close(got, cb.proba_block(X, **args), dtype, atol=1e-12)
    for classes in (np.array([3, 5, 7]), np.array(["a", "b", "c"])):
        want = cb.predict_block(X, classes=classes, **args)
        got = cb.predict_block(strict(X), classes=classes, **args)
        if classes.dtype.kind in "iu":
            assert_strict(got)
        np.testing.assert_array_equal(to_host(got), want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_head_statistics_on_device(fitted, dtype):
    """The linear and LDA heads' partials of a device block (NumPy codes) equal NumPy's."""
    clf, X, y = fitted
    X = X.astype(dtype)
    args = {"row_start": 0, "solutions": solutions(clf), "n_classes": 3}
    for block in (cb.linear_stats_block, cb.lda_stats_block):
        want = block(X, y, **args)
        got = block(strict(X), y, **args)
        assert got.keys() == want.keys()
        if block is cb.linear_stats_block:  # computed on the device (moments come as NumPy)
            assert_strict(got["gram"])
        for key in want:
            np.testing.assert_allclose(
                to_host(got[key]), want[key], rtol=TOL[dtype], atol=1e-9, err_msg=key
            )


def test_embed_refuses_non_finite_device_block(fitted):
    clf, X, _ = fitted
    X = X.copy()
    X[2, 1] = np.nan
    with pytest.raises(InputError, match="1 NaN or infinite"):
        cb.embed(strict(X), None, solutions(clf))


# --- the same on a CUDA device ------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_exact_search_on_gpu_matches_numpy(dtype):
    cupy = cupy_or_skip()
    for Q, R, ks in search_cases():
        Q = Q.astype(dtype)
        for k in ks:
            want = nearest_exact(Q, R, k, None, dtype)
            got = nearest_exact(cupy.asarray(Q), R, k, None, dtype)
            assert isinstance(got[0], cupy.ndarray)
            np.testing.assert_array_equal(got[0].get(), want[0])
            np.testing.assert_allclose(got[1].get(), want[1], rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_ccdr_blocks_on_gpu(fitted, dtype):
    cupy = cupy_or_skip()
    clf, X, y = fitted
    X = X.astype(dtype)
    sols = solutions(clf)
    args = {"solutions": sols, "head": clf.head_}
    got = cb.transform_block(cupy.asarray(X), solutions=sols, with_codes=False, out_dtype=dtype)
    assert isinstance(got, cupy.ndarray)
    want = cb.transform_block(X, solutions=sols, with_codes=False, out_dtype=dtype)
    np.testing.assert_allclose(got.get(), want, rtol=TOL[dtype])
    got = cb.proba_block(cupy.asarray(X), **args)
    assert isinstance(got, cupy.ndarray)
    np.testing.assert_allclose(got.get(), cb.proba_block(X, **args), rtol=TOL[dtype], atol=1e-12)
    classes = np.array([3, 5, 7])
    got = cb.predict_block(cupy.asarray(X), classes=classes, **args)
    np.testing.assert_array_equal(got.get(), cb.predict_block(X, classes=classes, **args))
    stats = {"row_start": 0, "solutions": sols, "n_classes": 3}
    for block in (cb.linear_stats_block, cb.lda_stats_block):
        want = block(X, y, **stats)
        got = block(cupy.asarray(X), y, **stats)
        for key in want:
            np.testing.assert_allclose(to_host(got[key]), want[key], rtol=TOL[dtype], atol=1e-9)
