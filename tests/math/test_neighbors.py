"""Block-wise exact k-NN and soft-KNN pieces against brute force."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import make_blobs

from scalenc.engine.cluster import compute
from scalenc.engine.passes import kneighbors_all_rows, kneighbors_pass
from scalenc.math.neighbors import kneighbors_block, merge_neighbors, pairwise_sq_distances
from scalenc.math.sampling import row_hash, stratified_sample
from scalenc.nrbfn.soft_knn import knn_sigma, select_basis, soft_knn_confidence


def brute_knn(X, labeled, cand_index, k):
    d2 = ((X[cand_index, None] - X[None]) ** 2).sum(-1)
    d2[:, ~labeled] = np.inf
    d2[np.arange(cand_index.size), cand_index] = np.inf
    order = np.argsort(d2, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(d2, order, 1), order


@pytest.mark.parametrize("chunks", [(50, 50, 50, 50), (7, 120, 1, 72), (200,)])
def test_pass_equals_brute_force(chunks):
    X, y = make_blobs(200, 4, 3, seed=1, unlabeled=0.2)
    cand_index = np.array([0, 3, 17, 50, 51, 199, 120])
    cand_index = cand_index[y[cand_index] >= 0]
    k = 9
    Xd = da.from_array(X, chunks=(chunks, -1))
    codes = da.from_array(np.where(y >= 0, y, -1), chunks=(chunks,))
    with dask.config.set({"scalenc.split-every": 2}):
        (nb,) = compute(kneighbors_pass(Xd, codes, X[cand_index], cand_index, k))
    d2, order = brute_knn(X, y >= 0, cand_index, k)
    np.testing.assert_array_equal(nb["index"], order)
    np.testing.assert_allclose(nb["dist2"], d2, rtol=1e-10)
    np.testing.assert_array_equal(nb["label"], y[order])
    assert nb["nonfinite"] == 0


def test_blocks_with_fewer_rows_than_k_are_padded_and_merge_is_associative():
    X, y = make_blobs(30, 3, 2, seed=2)
    C, ci = X[:4], np.arange(4)
    parts = [
        kneighbors_block(
            X[s : s + 5], y[s : s + 5], row_start=s, candidates=C, candidate_index=ci, n_neighbors=8
        )
        for s in range(0, 30, 5)
    ]
    assert np.isinf(parts[0]["dist2"][:, 4:]).all() and (parts[0]["index"][:, 4:] == -1).all()
    left = merge_neighbors(merge_neighbors(*parts[:3]), merge_neighbors(*parts[3:]))
    flat = merge_neighbors(*parts)
    for key in ("dist2", "index", "label"):
        np.testing.assert_array_equal(left[key], flat[key])
    d2, order = brute_knn(X, np.ones(30, bool), ci, 8)
    np.testing.assert_array_equal(flat["index"], order)


def test_float32_ranking_and_self_distance():
    X, y = make_blobs(100, 8, 2, seed=3, dtype=np.float32)
    out = kneighbors_block(
        X, y, row_start=0, candidates=X, candidate_index=np.arange(100), n_neighbors=5
    )
    d2, order = brute_knn(X.astype(np.float64), np.ones(100, bool), np.arange(100), 5)
    assert (out["index"] != np.arange(100)[:, None]).all()  # never its own neighbour
    np.testing.assert_allclose(out["dist2"], d2, rtol=1e-4)
    assert np.mean(out["index"] == order) > 0.99
    assert pairwise_sq_distances(X[:3], X[:3])[np.diag_indices(3)].tolist() == [0.0, 0.0, 0.0]


def test_soft_knn_confidence_is_algorithm_1():
    rng = np.random.default_rng(0)
    dist2 = np.sort(rng.random((6, 4)) * 10, axis=1)
    nl = rng.integers(0, 2, (6, 4))
    labels = rng.integers(0, 2, 6)
    sigma = knn_sigma(dist2)
    assert sigma == pytest.approx(np.sqrt(dist2).sum() / 24)
    W = np.exp(-dist2 / (2 * sigma**2))
    expected = (W / W.sum(1, keepdims=True) * (nl == labels[:, None])).sum(1)
    np.testing.assert_allclose(soft_knn_confidence(dist2, nl, labels, sigma), expected, rtol=1e-12)
    far = soft_knn_confidence(dist2 + 1e6, nl, labels, 0.01)  # every weight underflows
    assert np.isfinite(far).all()


def test_select_basis_rules():
    conf = np.array([0.95, 0.2, 0.5, 1.0, 0.99, 0.93, 0.1])
    labels = np.array([0, 0, 0, 1, 1, 2, 2])
    pos, capped = select_basis(conf, labels, 0.9, 3)
    np.testing.assert_array_equal(pos, [1, 2, 4, 6])  # class 1 missed: its least confident added
    assert not capped
    pos, capped = select_basis(conf, labels, 0.9, 3, max_basis=3)
    np.testing.assert_array_equal(pos, [1, 4, 6])
    assert capped
    pos, _ = select_basis(conf, labels, 0.9, 3, n_basis=5)
    np.testing.assert_array_equal(pos, [1, 2, 4, 5, 6])


def test_the_cap_spreads_the_basis_over_the_confidence_order():
    """A capped basis: the least confident row of each class, then rows at evenly spaced
    ranks of the rest of the rule's basis (T < t) in order of (confidence, position)."""
    rng = np.random.default_rng(3)
    conf = rng.choice(np.linspace(0.05, 1.0, 20), size=500)  # many exact ties
    labels = rng.integers(0, 4, 500)
    wanted = np.flatnonzero(conf < 0.9)
    for cap in (4, 5, 37, wanted.size - 1):
        pos, capped = select_basis(conf, labels, 0.9, 4, max_basis=cap)
        assert capped and pos.size == cap and np.all(conf[pos] < 0.9)
        order = np.lexsort((np.arange(500), conf))
        reserve = [order[labels[order] == c][0] for c in range(4)]
        rest = [i for i in order if conf[i] < 0.9 and i not in reserve]
        ranks = (
            [int(j * (len(rest) - 1) / (cap - 5)) for j in range(cap - 4)]
            if cap > 5
            else [0] * (cap - 4)
        )
        np.testing.assert_array_equal(pos, np.union1d(reserve, np.array(rest, int)[ranks]))
        if cap > 5:  # the most confident row of the rule's basis is kept too
            assert rest[-1] in pos
    pos, capped = select_basis(conf, labels, 0.9, 4, max_basis=wanted.size)
    np.testing.assert_array_equal(pos, wanted)
    assert not capped


def test_row_hash_and_stratified_sample():
    u = row_hash(np.arange(100000), 7)
    assert (0 <= u).all() and (u < 1).all() and abs(u.mean() - 0.5) < 0.01
    np.testing.assert_array_equal(row_hash(np.arange(10, 20), 7), u[10:20])
    assert not np.array_equal(row_hash(np.arange(10), 8), u[:10])
    codes = np.repeat([0, 1, 2, -1], [500, 300, 200, 100])
    pick = stratified_sample(codes, 100, 3, seed=1)
    assert pick.size == 100 and (codes[pick] >= 0).all()
    np.testing.assert_array_equal(np.bincount(codes[pick]), [50, 30, 20])
    np.testing.assert_array_equal(stratified_sample(codes, 100, 3, seed=1), pick)


def _splitmix64_unit(index: int, seed: int) -> float:
    """Steele, Lea & Flood's splitmix64 of index + seed·γ, as a double in [0, 1): the
    oracle of ``row_hash``, in Python's integers."""
    mask, golden = 2**64 - 1, 0x9E3779B97F4A7C15
    z = (index + (seed % 2**63) * golden + golden) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return ((z ^ (z >> 31)) >> 11) / 2**53


@pytest.mark.parametrize("seed", [0, 7, 2**63 + 5])
def test_row_hash_is_splitmix64_of_the_index(seed):
    index = np.array([0, 1, 2, 999_999, 2**40 + 3, 2**62], dtype=np.int64)
    expected = [_splitmix64_unit(int(i), seed) for i in index]
    np.testing.assert_array_equal(row_hash(index, seed), expected)
    assert row_hash(int(index[3]), seed) == expected[3]  # a scalar index gives a scalar
    np.testing.assert_array_equal(row_hash(index.reshape(2, 3), seed), np.reshape(expected, (2, 3)))


@pytest.mark.parametrize("chunks", [(60, 60, 60), (7, 101, 1, 71), (180,)])
def test_all_rows_by_block_pairs_equals_brute_force(chunks):
    X, y = make_blobs(180, 5, 3, seed=4, unlabeled=0.1)
    Xd = da.from_array(X, chunks=(chunks, -1))
    codes = da.from_array(y, chunks=(chunks,))
    with dask.config.set({"scalenc.split-every": 2}):
        (results,) = compute(kneighbors_all_rows(Xd, codes, 6))
    index = np.concatenate([r[1] for r in results])
    found = np.concatenate([r[0]["index"] for r in results])
    dist2 = np.concatenate([r[0]["dist2"] for r in results])
    np.testing.assert_array_equal(index, np.flatnonzero(y >= 0))
    d2, order = brute_knn(X, y >= 0, index, 6)
    np.testing.assert_array_equal(found, order)
    np.testing.assert_allclose(dist2, d2, rtol=1e-10)


@pytest.mark.parametrize("tiles", [None, (16, 2820), (16, 7070), (16, 150)])
@pytest.mark.parametrize("chunks", [(90, 90), (7, 101, 1, 71), (180,)])
def test_ties_are_broken_by_row_index_exactly(monkeypatch, chunks, tiles):
    """Integer data: every distance is exact and ties are everywhere (duplicate rows).

    The k nearest are the k smallest (distance, global index), as a stable sort gives —
    in every block pair, with or without the sampled bounds and running column bounds
    (``tiles`` = threshold sample, pair tile elements; 150: tiles of fewer than k rows)."""
    from scalenc.math import neighbors, selection

    if tiles is not None:
        monkeypatch.setattr(selection, "THRESHOLD_SAMPLE", tiles[0])
        monkeypatch.setattr(neighbors, "PAIR_TILE_ELEMENTS", tiles[1])
    rng = np.random.default_rng(6)
    X = rng.integers(0, 3, (180, 3)).astype(np.float64)
    y = rng.integers(-1, 2, 180)
    Xd = da.from_array(X, chunks=(chunks, -1))
    codes = da.from_array(y, chunks=(chunks,))
    with dask.config.set({"scalenc.split-every": 2}):
        (results,) = compute(kneighbors_all_rows(Xd, codes, 7))
    index = np.concatenate([r[1] for r in results])
    d2, order = brute_knn(X, y >= 0, index, 7)
    np.testing.assert_array_equal(np.concatenate([r[0]["index"] for r in results]), order)
    np.testing.assert_array_equal(np.concatenate([r[0]["dist2"] for r in results]), d2)
    cand = index[::5]
    with dask.config.set({"scalenc.split-every": 3}):
        (nb,) = compute(kneighbors_pass(Xd, codes, X[cand], cand, 7))
    d2, order = brute_knn(X, y >= 0, cand, 7)
    np.testing.assert_array_equal(nb["index"], order)
    np.testing.assert_array_equal(nb["dist2"], d2)


@pytest.mark.parametrize("chunks", [1000, 333, (500, 7, 493)])
def test_stratified_sample_pass_draws_the_in_memory_sample_from_dask_labels(chunks):
    """The streamed draw (per-block smallest hashes merged in a tree) picks exactly the rows
    of the in-memory one, for any chunking, and brings only the sample to the client."""
    import dask.array as da

    from scalenc.engine.passes import label_counts_pass, stratified_sample_pass

    rng = np.random.default_rng(5)
    codes = rng.choice([-1, 0, 1, 2], p=[0.2, 0.5, 0.2, 0.1], size=1000)
    cd = da.from_array(codes, chunks=chunks)
    with dask.config.set({"scalenc.split-every": 2}):
        (counts,) = compute(label_counts_pass(cd, n_classes=3))
    np.testing.assert_array_equal(counts, np.bincount(codes[codes >= 0], minlength=3))
    for size in (3, 50, 799):
        with dask.config.set({"scalenc.split-every": 2}):
            (drawn,) = compute(stratified_sample_pass(cd, counts, size, seed=4))
        order = np.argsort(drawn["index"])
        expected = stratified_sample(codes, size, 3, seed=4)
        np.testing.assert_array_equal(drawn["index"][order], expected)
        np.testing.assert_array_equal(drawn["code"][order], codes[expected])


# --- the exact search against a short reference set (CCDR's Nyström extension) ---------------


def exact_knn(Q, R, k, exclude=None):
    """Brute force in float64: the k smallest (‖q − r‖², position), padded (−1, inf)."""
    d2 = ((np.asarray(Q, np.float64)[:, None] - np.asarray(R, np.float64)[None]) ** 2).sum(-1)
    if exclude is not None:
        d2[np.arange(len(Q)), exclude] = np.inf
    pos = np.broadcast_to(np.arange(R.shape[0]), d2.shape)
    order = np.lexsort((pos, d2), axis=-1)[:, :k]
    d2, pos = np.take_along_axis(d2, order, 1), np.take_along_axis(pos, order, 1)
    pad = max(0, k - d2.shape[1])
    d2 = np.pad(d2, ((0, 0), (0, pad)), constant_values=np.inf)
    pos = np.pad(pos, ((0, 0), (0, pad)), constant_values=-1)
    pos[np.isinf(d2)] = -1
    return pos, d2


def near_tie_pairs(n_pairs, p, seed):
    """Reference rows in pairs whose distances to any query differ by ~1e-9 relative: far
    below float32 resolution, so the float32 ranking splits a pair at random."""
    rng = np.random.default_rng(seed)
    A = rng.random((n_pairs, p)).astype(np.float32)
    B = A.copy()
    B[:, 0] = np.nextafter(A[:, 0], np.float32(2.0))  # one float32 ulp apart
    return np.vstack([A, B])[np.argsort(np.r_[np.arange(n_pairs), np.arange(n_pairs)])]


@pytest.mark.parametrize("s_pairs", [20, 600])  # s = 40 and 1200 reference rows
@pytest.mark.parametrize("k", [1, 3, 9])
def test_exact_search_resolves_float32_near_ties_in_float64(s_pairs, k):
    from scalenc.math.neighbors import nearest

    R = near_tie_pairs(s_pairs, 30, seed=k)
    Q = np.random.default_rng(50 + k).random((400, 30)).astype(np.float32)
    pos, d2 = nearest(Q, R, k, dtype=np.float32, refine=True)
    want_pos, want_d2 = exact_knn(Q, R, k)
    np.testing.assert_array_equal(pos, want_pos)
    np.testing.assert_allclose(d2, want_d2, rtol=1e-6)
    # the test has teeth: ranked in float32 alone, some pairs come out in the wrong order
    plain, _ = nearest(Q, R, k + 1, dtype=np.float32)
    assert not np.array_equal(plain, exact_knn(Q, R, k + 1)[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("s", [5, 150, 1037])
def test_exact_search_duplicates_ties_by_position_and_zero_distance(dtype, s):
    """Integer data: exact ties everywhere (duplicate rows), broken by position; a query
    equal to a reference row is at distance exactly 0; fewer than k rows are padded."""
    from scalenc.math.neighbors import nearest

    rng = np.random.default_rng(s)
    R = rng.integers(0, 3, (s, 4)).astype(dtype)
    Q = np.vstack([R[: min(s, 20)], rng.integers(0, 3, (30, 4))]).astype(dtype)
    for k in (1, 4, 12, s + 3):
        pos, d2 = nearest(Q, R, k, dtype=dtype, refine=True)
        want_pos, want_d2 = exact_knn(Q, R, k)
        np.testing.assert_array_equal(pos, want_pos)
        np.testing.assert_array_equal(d2, want_d2)
        assert (d2[: min(s, 20), 0] == 0.0).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exact_search_with_rows_repeated_hundreds_of_times(dtype):
    """A reference set whose rows repeat hundreds of times (intrusion data: one row 1900
    times in 5000): every query on a repeated row has hundreds of ties at distance 0.
    Rows with k + 1 identical rows before them are dropped before the float64
    recomputation; neighbours and distances stay those of float64 brute force, with and
    without excluding the query's own row."""
    from scalenc.math.nearest import _Reference
    from scalenc.math.neighbors import nearest

    rng = np.random.default_rng(7)
    distinct = rng.integers(0, 4, (40, 6)).astype(dtype)
    R = distinct[rng.choice(40, 3000, p=np.r_[0.6, np.full(39, 0.4 / 39)])]
    R[::7] += rng.random((R[::7].shape[0], 6)).astype(dtype)  # some distinct rows too
    Q = np.vstack([R[:300], rng.integers(0, 4, (50, 6)).astype(dtype)])
    atol = 1e-6 * 4 * (np.asarray(R, np.float64) ** 2).sum(axis=1).max()  # float32 ranking
    for k in (1, 4, 10):
        pos, d2 = nearest(Q, R, k, dtype=np.float32, refine=True)
        want_pos, want_d2 = exact_knn(Q, R, k)
        np.testing.assert_array_equal(pos, want_pos)
        np.testing.assert_allclose(d2, want_d2, rtol=0, atol=atol)
        exclude = np.r_[np.arange(300), np.full(50, -1)]
        pos, d2 = nearest(Q, R, k, exclude=exclude, dtype=np.float32, refine=True)
        want_pos, want_d2 = exact_knn(Q[:300], R, k, exclude=np.arange(300))
        np.testing.assert_array_equal(pos[:300], want_pos)
        np.testing.assert_allclose(d2[:300], want_d2, rtol=0, atol=atol)
    rank = _Reference(R, np.float32).duplicate_rank()
    for j in (0, 1, 2999):  # the number of identical rows before each row
        assert rank[j] == np.sum((R[:j] == R[j]).all(axis=1))


@pytest.mark.parametrize("s", [60, 700])
def test_exact_search_excludes_self_and_matches_float64(s):
    from scalenc.ccdr.blocks import knn_search

    X, _ = make_blobs(s, 6, 3, seed=s)
    for dtype in (np.float32, np.float64):
        S = X.astype(dtype)
        nbrs, d2 = knn_search(S, S.astype(np.float64), 5, exclude_self=True)
        want_pos, want_d2 = exact_knn(S, S, 5, exclude=np.arange(s))
        np.testing.assert_array_equal(nbrs, want_pos)
        scale = (X**2).sum(axis=1).max()  # float32 rounding is relative to ‖q‖² + ‖r‖²
        atol = 1e-6 * scale if dtype == np.float32 else 1e-12 * scale
        np.testing.assert_allclose(d2, want_d2, rtol=0, atol=atol)
        assert (nbrs != np.arange(s)[:, None]).all()
    # fewer rows than k: the whole reference, in order
    nbrs, d2 = knn_search(X[:3], X[:3], 8, exclude_self=True)
    assert nbrs.shape == (3, 2)
    np.testing.assert_array_equal(nbrs, exact_knn(X[:3], X[:3], 2, exclude=np.arange(3))[0])


def test_exact_search_beyond_float32_range_ranks_in_float64():
    from scalenc.math.neighbors import nearest

    rng = np.random.default_rng(9)
    R = rng.random((50, 3)) * 1e20
    Q = R[:10] + 1e15
    pos, d2 = nearest(Q.astype(np.float32), R, 2, dtype=np.float32, refine=True)
    want_pos, _ = exact_knn(Q.astype(np.float32), R, 2)
    np.testing.assert_array_equal(pos, want_pos)
    assert np.isfinite(d2).all()


def test_rows_repeated_thousands_of_times_keep_few_survivors(monkeypatch):
    """4 000 copies of one row among 6 000 (the intrusion data's shape): every copy is at
    distance 0 from the others. The neighbours are still the k smallest (distance, index),
    and the selection keeps a few dozen survivors per row, not every copy in the block (it
    kept them all and sorted them, so the all-rows search grew as the square of the
    copies)."""
    from scalenc.math import selection

    widths = []
    select = selection._select

    def recording(values, owner, position, n_owners, k, prev=None):
        if owner.size:
            widths.append(int(np.bincount(owner).max()))
        return select(values, owner, position, n_owners, k, prev)

    monkeypatch.setattr(selection, "_select", recording)
    rng = np.random.default_rng(7)
    X = rng.normal(size=(6000, 4))
    X[rng.permutation(6000)[:4000]] = X[0]
    y = rng.integers(-1, 3, 6000)
    Xd = da.from_array(X, chunks=((2500, 2000, 1500), -1))
    codes = da.from_array(y, chunks=((2500, 2000, 1500),))
    with dask.config.set({"scheduler": "sync", "scalenc.split-every": 2}):
        (results,) = compute(kneighbors_all_rows(Xd, codes, 7))
    index = np.concatenate([r[1] for r in results])
    d2, order = brute_knn(X, y >= 0, index, 7)
    np.testing.assert_array_equal(np.concatenate([r[0]["index"] for r in results]), order)
    np.testing.assert_allclose(np.concatenate([r[0]["dist2"] for r in results]), d2, atol=1e-9)
    # the sampled bounds leave a few dozen survivors per row; the copies were over 1 000
    assert widths and max(widths) < 200, max(widths)


def test_searches_in_one_thread_do_not_share_their_results_buffers():
    """The selections keep their per-tile temporaries in per-thread buffers
    (:func:`scalenc.math.buffers.scratch`). Searches of different sizes, one after the
    other in one thread, each give brute force's neighbours, and what an earlier search
    returned is not overwritten by a later one (no result aliases a buffer)."""
    from scalenc.math.neighbors import nearest

    rng = np.random.default_rng(3)
    problems = []
    for c, b, p in ((300, 2500, 12), (40, 9000, 5), (400, 1200, 30)):
        Q = rng.random((c, p)).astype(np.float32)
        R = np.vstack([near_tie_pairs(b // 4, p, seed=c), rng.random((b - b // 2, p))])
        problems.append((Q, R.astype(np.float32)))
    for refine, k in ((False, 20), (True, 4)):
        first = [nearest(Q, R, k, dtype=np.float32, refine=refine) for Q, R in problems]
        kept = [(pos.copy(), d2.copy()) for pos, d2 in first]
        for (Q, R), (pos, d2), (pos0, d20) in zip(problems, first, kept, strict=True):
            again = nearest(Q, R, k, dtype=np.float32, refine=refine)
            np.testing.assert_array_equal(pos, pos0)  # not overwritten since
            np.testing.assert_array_equal(d2, d20)
            np.testing.assert_array_equal(again[0], pos0)
            np.testing.assert_array_equal(again[1], d20)
            want_pos, want_d2 = exact_knn(Q, R, k)
            if refine:  # the float64 neighbours
                np.testing.assert_array_equal(pos, want_pos)
            scale = 4 * (np.asarray(R, np.float64) ** 2).sum(axis=1).max()
            np.testing.assert_allclose(d2, want_d2, rtol=0, atol=1e-6 * scale)


def test_shared_arange_is_read_only_and_grows():
    from scalenc.math.buffers import arange

    small = arange(5)
    np.testing.assert_array_equal(small, np.arange(5))
    big = arange(100_003)
    np.testing.assert_array_equal(big, np.arange(100_003))
    np.testing.assert_array_equal(arange(7), np.arange(7))
    np.testing.assert_array_equal(small, np.arange(5))  # an earlier view stays valid
    assert arange(0).size == 0 and big.dtype == np.int64
    with pytest.raises(ValueError):
        big[0] = 1


def test_scratch_take_gathers_rows_into_the_threads_buffer():
    from scalenc.math.buffers import scratch_take

    rng = np.random.default_rng(4)
    A = rng.random((50, 3)).astype(np.float32)
    at = rng.integers(0, 50, (7, 4))
    first = scratch_take("test.take", A, at)
    np.testing.assert_array_equal(first, A[at])
    assert first.shape == (7, 4, 3) and first.dtype == np.float32
    second = scratch_take("test.take", A[:, 0], at[0])  # the same buffer, asked again
    np.testing.assert_array_equal(second, A[at[0], 0])
    assert np.shares_memory(first, second)
