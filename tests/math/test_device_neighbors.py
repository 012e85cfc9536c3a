"""The exact k-NN search on a device's arrays (issue 28) against the NumPy path.

The device path (:func:`scalenc.math.neighbors_device.nearest_on_device`) runs here on
``array_api_strict`` arrays, which accept the array API standard and nothing else; the
NumPy path is the oracle: the same neighbours (indices and labels exactly, ties broken by
(distance, global index)) and the same distances. The ``gpu`` tests repeat the comparison
with CuPy arrays where a GPU is present.
"""

from __future__ import annotations

import array_api_strict
import numpy as np
import pytest
from conftest import cupy_or_skip

from scalenc.math import neighbors_device
from scalenc.math.distances import (
    pairwise_sq_distances,
    row_sq_norms,
    score_bound,
    sq_distances_from_inner,
)
from scalenc.math.neighbors import (
    kneighbors_block,
    kneighbors_pair,
    labeled_rows,
    merge_neighbors,
    nearest,
)

TOL = {np.float32: 1e-5, np.float64: 1e-12}


def strict(a):
    return array_api_strict.asarray(a)


def host(a):
    return np.asarray(a) if isinstance(a, np.ndarray) else np.from_dlpack(a)


def blocks_data(kind, dtype, n=160, p=5, seed=0):
    """Rows of three kinds: continuous; continuous with rows repeated (one row n/4 times,
    more than k + 1, others 2 to 4 times); small integers (exact scores, ties
    everywhere). A quarter of the rows unlabeled."""
    rng = np.random.default_rng(seed)
    if kind == "integer":
        X = rng.integers(0, 3, (n, p)).astype(dtype)
    else:
        X = rng.normal(size=(n, p)).astype(dtype)
    if kind == "duplicates":
        X[rng.permutation(n)[: n // 4]] = X[3]
        for j in range(n // 3, n // 3 + n // 4, 4):
            X[j + 1 : j + rng.integers(2, 5)] = X[j]
    codes = rng.integers(-1, 3, n)
    return X, codes


def assert_same_partial(got, want, dtype):
    for key in ("index", "label"):
        np.testing.assert_array_equal(got[key], want[key])
    np.testing.assert_allclose(got["dist2"], want["dist2"], rtol=TOL[dtype], atol=0)
    assert int(got["nonfinite"]) == int(want["nonfinite"])


def block_call(X, codes, start, stop, candidates, candidate_index, k, to=lambda a: a):
    return kneighbors_block(
        to(X[start:stop]),
        codes[start:stop],
        row_start=start,
        candidates=candidates,
        candidate_index=candidate_index,
        n_neighbors=k,
    )


@pytest.mark.parametrize("kind", ["continuous", "duplicates", "integer"])
@pytest.mark.parametrize("k", [1, 10])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kneighbors_block_on_strict_arrays_equals_numpy(kind, k, dtype):
    """Blocks at row_start ≠ 0 with duplicate and unlabeled rows; candidates from the
    block (never their own neighbour) and from elsewhere; the two blocks' partials,
    brought to the host, merge to the NumPy result."""
    X, codes = blocks_data(kind, dtype)
    cand_index = np.array([3, 5, 40, 51, 60, 61, 70, 100, 101, 150])
    C = X[cand_index]
    merged = {}
    for name, to in (("numpy", lambda a: a), ("strict", strict)):
        parts = []
        for start, stop in ((0, 55), (55, 160)):
            part = block_call(X, codes, start, stop, C, cand_index, k, to)
            assert all(isinstance(part[key], np.ndarray) for key in ("dist2", "index", "label"))
            parts.append(part)
        merged[name] = merge_neighbors(*parts)
        if name == "numpy":
            want = parts
        else:
            for got_part, want_part in zip(parts, want, strict=True):
                assert_same_partial(got_part, want_part, dtype)
    assert_same_partial(merged["strict"], merged["numpy"], dtype)
    assert (merged["strict"]["index"] != cand_index[:, None]).all()


@pytest.mark.parametrize("group", [2, 3, 32])
@pytest.mark.parametrize("kind", ["continuous", "duplicates", "integer"])
@pytest.mark.parametrize("k", [1, 10])
def test_selection_among_groups_of_columns_equals_numpy(monkeypatch, group, kind, k):
    """Rows long enough for the search to select among groups of columns first (groups of
    2 and 3 on short blocks, the default on a long one): the grouped rows, the rows whose
    group minima tie (searched whole) and the last, shorter group give NumPy's result."""
    monkeypatch.setattr(neighbors_device, "DEVICE_GROUP", group)
    n = 160 if group < 32 else 2500
    X, codes = blocks_data(kind, np.float32, n=n, p=3 if group == 32 else 5)
    cand_index = np.array([3, 5, 41, 51, 60, 61, 70, 100, 101, 150])
    got = block_call(X, codes, 1, n, X[cand_index], cand_index, k, strict)
    want = block_call(X, codes, 1, n, X[cand_index], cand_index, k)
    assert_same_partial(got, want, np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rows_whose_group_minima_tie_are_searched_whole(monkeypatch, dtype):
    """Every point of the lattice {0, 1, 2}⁵ once: the centre's ten nearest are all at
    distance 1, in ten groups of two columns, so for k = 1 its tenth smallest group minimum
    ties with the first and its row is searched whole; the corners' rows are not."""
    monkeypatch.setattr(neighbors_device, "DEVICE_GROUP", 2)
    rng = np.random.default_rng(11)
    X = np.stack(np.meshgrid(*[np.arange(3)] * 5, indexing="ij"), -1).reshape(-1, 5)
    X = X[rng.permutation(X.shape[0])].astype(dtype)
    codes = rng.integers(0, 2, X.shape[0])
    centre = int(np.flatnonzero((X == 1).all(axis=1))[0])
    corners = np.flatnonzero((X != 1).all(axis=1))[:5]
    cand_index = np.r_[centre, corners]
    for k in (1, 3):
        got = block_call(X, codes, 0, X.shape[0], X[cand_index], cand_index, k, strict)
        want = block_call(X, codes, 0, X.shape[0], X[cand_index], cand_index, k)
        assert_same_partial(got, want, dtype)
        assert (got["dist2"][0] == 1.0).all()


def test_candidates_from_a_device_block_and_blocks_with_fewer_rows_than_k():
    X, codes = blocks_data("duplicates", np.float64, n=40)
    rows, index, _ = labeled_rows(strict(X[20:26]), codes[20:26], 20)
    got = block_call(X, codes, 20, 26, rows, index, 10, strict)
    want = block_call(X, codes, 20, 26, X[20:26][codes[20:26] >= 0], index, 10)
    assert_same_partial(got, want, np.float64)
    assert (got["index"][:, index.size - 1 :] == -1).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_labeled_rows_keep_the_device(dtype):
    X, codes = blocks_data("continuous", dtype, n=30)
    rows, index, kept = labeled_rows(strict(X), codes, 7)
    want_rows, want_index, want_kept = labeled_rows(X, codes, 7)
    assert isinstance(rows, array_api_strict._array_object.Array)
    np.testing.assert_array_equal(host(rows), want_rows)
    np.testing.assert_array_equal(index, want_index)
    np.testing.assert_array_equal(kept, want_kept)
    codes[:] = 0
    assert labeled_rows(strict(X), codes, 0)[0].shape == X.shape


@pytest.mark.parametrize("kind", ["continuous", "duplicates", "integer"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kneighbors_pair_on_strict_arrays_equals_numpy(kind, dtype):
    X, codes = blocks_data(kind, dtype, n=120)
    args = {"start_i": 10, "start_j": 60, "n_neighbors": 6}
    want = kneighbors_pair(X[10:60], codes[10:60], X[60:], codes[60:], **args)
    got = kneighbors_pair(strict(X[10:60]), codes[10:60], strict(X[60:]), codes[60:], **args)
    for got_part, want_part in zip(got, want, strict=True):
        assert_same_partial(got_part, want_part, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_selection_widens_where_scores_are_within_the_bound(monkeypatch, dtype):
    """No slack: rows repeated three times leave the query's two copies tied with the k+1
    smallest score, so the rows in doubt select again among twice as many; the excluded
    row (the query itself) and padding stay (−1, inf)."""
    monkeypatch.setattr(neighbors_device, "DEVICE_SLACK", 0)
    rng = np.random.default_rng(3)
    R = np.repeat(rng.normal(size=(20, 4)), 3, axis=0).astype(dtype)
    exclude = np.arange(0, 60, 2)
    Q = R[exclude]
    for k in (1, 2, 5):
        want_pos, want_d2 = nearest(Q, R, k, exclude=exclude)
        pos, d2 = nearest(strict(Q), strict(R), k, exclude=exclude)
        assert isinstance(pos, array_api_strict._array_object.Array)
        np.testing.assert_array_equal(host(pos), want_pos)
        np.testing.assert_allclose(host(d2), want_d2, rtol=TOL[dtype], atol=0)
    pos, d2 = nearest(strict(Q[:3]), strict(R[:2]), 4, exclude=np.array([0, -1, 1]))
    want_pos, want_d2 = nearest(Q[:3], R[:2], 4, exclude=np.array([0, -1, 1]))
    np.testing.assert_array_equal(host(pos), want_pos)
    np.testing.assert_array_equal(np.isinf(host(d2)), np.isinf(want_d2))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_distances_on_strict_arrays_equal_numpy(dtype):
    rng = np.random.default_rng(5)
    A, B = rng.normal(size=(7, 4)).astype(dtype), rng.normal(size=(5, 4)).astype(dtype)
    B[0] = A[0]
    tol = TOL[dtype]
    np.testing.assert_allclose(host(row_sq_norms(strict(A))), row_sq_norms(A), rtol=1e-12)
    got = host(pairwise_sq_distances(strict(A), strict(B)))
    np.testing.assert_allclose(got, pairwise_sq_distances(A, B), rtol=tol, atol=tol)
    assert got[0, 0] == 0.0
    inner = A @ B.T
    want = sq_distances_from_inner(
        inner.copy(), row_sq_norms(A).astype(dtype), row_sq_norms(B).astype(dtype), out=None
    )
    mine = strict(inner)
    out = sq_distances_from_inner(
        mine,
        row_sq_norms(strict(A)),
        row_sq_norms(strict(B)),
        zero_below=float(np.finfo(dtype).eps),
        out=mine,
    )
    assert out is mine and host(mine).dtype == dtype
    np.testing.assert_allclose(host(mine), want, rtol=tol, atol=tol)
    q = row_sq_norms(A)
    np.testing.assert_allclose(
        host(score_bound(strict(q), 3.0, 4, array_api_strict.float32)),
        score_bound(q, 3.0, 4, np.float32),
        rtol=1e-15,
    )


# --- CuPy, where a GPU is present -----------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["continuous", "duplicates", "integer"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kneighbors_block_on_cupy_equals_numpy(kind, dtype):
    cupy = cupy_or_skip()
    X, codes = blocks_data(kind, dtype, n=3000, p=12)
    cand_index = np.arange(0, 3000, 7)
    C = X[cand_index]
    for k in (1, 10):
        want, got = [], []
        for start, stop in ((0, 1100), (1100, 3000)):
            want.append(block_call(X, codes, start, stop, C, cand_index, k))
            got.append(block_call(X, codes, start, stop, C, cand_index, k, cupy.asarray))
            assert_same_partial(got[-1], want[-1], dtype)
        assert_same_partial(merge_neighbors(*got), merge_neighbors(*want), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kneighbors_pair_on_cupy_equals_numpy(dtype):
    cupy = cupy_or_skip()
    X, codes = blocks_data("duplicates", dtype, n=2000, p=8)
    args = {"start_i": 0, "start_j": 900, "n_neighbors": 7}
    want = kneighbors_pair(X[:900], codes[:900], X[900:], codes[900:], **args)
    got = kneighbors_pair(
        cupy.asarray(X[:900]), codes[:900], cupy.asarray(X[900:]), codes[900:], **args
    )
    for got_part, want_part in zip(got, want, strict=True):
        assert_same_partial(got_part, want_part, dtype)
