"""nRBFN's default basis, grown by held-out error (issue 36), against plain NumPy oracles:
the order the basis grows in, the sizes tried, the kept network (Algorithm 2 on its basis,
σ and λ), the held-out errors of the λ tried, and invariance to chunks and schedulers."""

from __future__ import annotations

import functools
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import make_blobs
from test_nrbfn import _brute_force_cv, predict_oracle, weights_for

from scalenc import NRBFNClassifier
from scalenc.exceptions import BasisCappedWarning
from scalenc.math.linalg import fold_gram, ridge_path, ridge_solve
from scalenc.math.sampling import fold_of
from scalenc.nrbfn import soft_knn
from scalenc.nrbfn.estimator import AUTO_ALPHA_GRID
from scalenc.nrbfn.search import (
    CHEAP_WORK,
    GROWTH_START,
    KERNELS,
    WIDTHS,
    Search,
    Trial,
    growth_sizes,
    next_size,
    size_work,
    width_margin,
)


@pytest.fixture(scope="module")
def data():
    X, y = make_blobs(900, 4, 3, seed=7, sep=0.8)
    return X[:600], y[:600], X[600:], y[600:]


@pytest.fixture(scope="module")
def grown(data):
    X, y, _, _ = data
    return NRBFNClassifier(n_neighbors=7, random_state=5).fit(X, y)


def test_growth_order_reserves_each_class_then_the_rule_then_the_rest():
    rng = np.random.default_rng(0)
    confidence = rng.random(200)
    labels = rng.integers(0, 4, 200)
    index = np.arange(200) * 3 + 1
    order = soft_knn.growth_order(confidence, labels, index, 0.5, 4, seed=1)
    assert np.array_equal(np.sort(order), np.arange(200))  # a permutation
    assert set(labels[order[:4]]) == {0, 1, 2, 3}  # every prefix of ≥ K rows has each class
    for k in range(4):  # each class's first is its least confident candidate
        assert (
            order[k]
            == np.flatnonzero(labels == labels[order[k]])[
                np.argmin(confidence[labels == labels[order[k]]])
            ]
        )
    rule = confidence[order[4:]] < 0.5
    first_rest = np.argmin(rule) if not rule.all() else rule.size
    assert rule[:first_rest].all() and not rule[first_rest:].any()  # the rule's rows first
    again = soft_knn.growth_order(confidence, labels, index, 0.5, 4, seed=1)
    other = soft_knn.growth_order(confidence, labels, index, 0.5, 4, seed=2)
    assert np.array_equal(order, again) and not np.array_equal(order, other)


@pytest.mark.parametrize("m", [1, 2, 3, 7, 64, 100, 1000])
def test_nested_spread_prefixes_cover_the_ranks_evenly(m):
    order = soft_knn._nested_spread(m)
    assert np.array_equal(np.sort(order), np.arange(m))
    for size in (2, 4, 8):
        if size <= m:  # the first `size` leave no gap wider than about m / size ranks
            prefix = np.sort(order[:size])
            gaps = np.diff(np.r_[prefix, m])
            assert prefix[0] == 0 and gaps.max() <= -(-m // size) + 1


def test_growth_sizes_double_from_the_start_to_the_top():
    assert growth_sizes(3, 1000) == [GROWTH_START, 256, 512, 1000]
    assert growth_sizes(3, 90) == [90]
    assert growth_sizes(200, 1000) == [400, 800, 1000]  # at least two rows per class
    # a cap just above a doubling replaces it; every candidate (no cap) does not
    assert growth_sizes(3, 8665, capped=True)[-2:] == [4096, 8665]
    assert growth_sizes(3, 4196, capped=True)[-2:] == [2048, 4196]
    assert growth_sizes(3, 4196)[-2:] == [4096, 4196]
    assert growth_sizes(3, 7140, capped=True)[-2:] == [4096, 7140]
    assert growth_sizes(3, 200, capped=True) == [GROWTH_START, 200]


def test_grown_network_is_algorithm_2_on_its_basis_sigma_and_alpha(data, grown):
    X, y, X_test, _ = data
    m = grown
    path = m.basis_growth_
    r = m.basis_.shape[0]
    n = grown_sizes(path)
    assert r in path["r"] and list(path["r"][:n]) == growth_sizes(3, path["r"][n - 1])
    kept = int(np.flatnonzero((path["r"] == r) & (path["sigma"] == m.sigma_))[0])
    assert m.alpha_ == path["alpha"][kept] and m.sigma_ == path["sigma"][kept]
    assert path["width"][kept] in WIDTHS
    assert np.all(path["width"][:n] == path["width"][0])  # chosen on the first size, kept
    # σ's next narrower multiple tried after the growth, on the size before the kept one
    # (and on the kept one only if it beat that size's error by the margin)
    checks = path["width"][n:]
    assert len(checks) <= 2 and np.all(checks == checks[:1]) and np.all(checks < path["width"][0])
    np.testing.assert_array_equal(m.basis_, X[m.basis_indices_])
    # σ: the width's multiple of the mean distance of the training rows to the basis
    dist = np.sqrt(((m.basis_[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    assert m.sigma_ == pytest.approx(path["width"][kept] * dist.mean(), rel=1e-10)
    want = weights_for(X, y, m.basis_, m.sigma_, m.alpha_)
    # a small λ (1e-11 here, σ twice the paper's) leaves the Gram's condition near 1e11:
    # the weights (of size 1e3–1e4) agree to 1e-4 of the largest, the outputs (of size 1)
    # to 1e-5
    np.testing.assert_allclose(m.weights_, want, atol=1e-4 * abs(want).max())
    F_hat, _ = predict_oracle(X_test, m.basis_, m.sigma_, want)
    np.testing.assert_allclose(np.asarray(m.decision_function(X_test)), F_hat.T, atol=1e-5)
    # the kept size's held-out errors: each fold's model from the other folds' rows and
    # the basis rows outside the fold
    folds = fold_of(np.arange(X.shape[0]), 5, 5)
    splits = [(np.flatnonzero(folds != f), np.flatnonzero(folds == f)) for f in range(5)]
    grid = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-7, 1e-9, 1e-11, 1e-13)
    expected = _brute_force_cv(X, y, m.basis_, m.sigma_, grid, splits, m.basis_indices_)
    tried = ~np.isnan(m.cv_error_)
    assert tried.sum() in (2, 3, 9)  # the whole grid, or the last best λ's neighbours
    np.testing.assert_allclose(m.cv_error_[tried], expected[tried], atol=1.5 / X.shape[0])
    assert path["cv_error"][kept] == np.nanmin(m.cv_error_) == min(path["cv_error"])
    assert m.score(X_test, data[3]) > 0.7  # overlapping classes (sep 0.8)


def grown_sizes(path) -> int:
    """How many entries of ``basis_growth_`` are the growth's sizes (the narrower width's
    tries follow them, at sizes already tried)."""
    back = np.flatnonzero(np.diff(path["r"]) <= 0)
    return int(back[0]) + 1 if back.size else len(path["r"])


def test_growth_stops_where_next_size_says(grown):
    n = grown_sizes(grown.basis_growth_)
    path = {key: value[:n] for key, value in grown.basis_growth_.items()}
    assert size_work(600, 600, 5, len(AUTO_ALPHA_GRID)) < CHEAP_WORK  # every size here is cheap
    # the work of each size as Search.grow prices it: the first with its six kernels and
    # nine λ, the others with the last best λ's neighbours (two at the grid's end)
    lams = [len(AUTO_ALPHA_GRID)] + [
        3 - (a in (AUTO_ALPHA_GRID[0], AUTO_ALPHA_GRID[-1])) for a in path["alpha"][:-1]
    ]
    works = [size_work(600, r, 5, k) for r, k in zip(path["r"], lams)]
    works[0] *= len(WIDTHS) * len(KERNELS)
    for tried in range(1, n):  # each size was wanted by the sizes before it
        assert next_size(path["cv_error"][:tried], works[tried], sum(works[:tried]))
    if path["r"][-1] < 600:  # fewer than every candidate: the last sizes said stop
        after = size_work(600, min(600, 2 * path["r"][-1]), 5, 3)
        assert not next_size(path["cv_error"], after, sum(works))


def _errors(*percent):
    return np.array(percent) / 100


def test_next_size_after_a_gain_and_after_a_miss():
    costly = 2 * CHEAP_WORK
    assert next_size(_errors(20.0), costly, 0.0)  # one size: nothing to judge yet
    # a loss (0.14 point worse than the best) after a gain: a cheap size is tried when it
    # costs at most SECOND_LOOK times the work spent (a cap just above a doubling), not
    # a doubling after three sizes (3.5-4.7 times) nor a costly size
    loss = _errors(20.29, 17.86, 18.0)
    assert next_size(loss, 2.0, 1.0)
    assert not next_size(loss, 4.0, 1.0)
    assert not next_size(loss, costly, costly)
    assert next_size(_errors(20.29, 17.86, 17.86), 4.0, 1.0)  # a tie: looked at again
    # two misses end even a cheap growth (0.06 point is a miss); a costly size needs a gain
    assert not next_size(_errors(20.29, 17.86, 18.0, 17.80), 1.0, 1.0)
    assert not next_size(_errors(20.0, 19.95), costly, costly)
    # a miss then a gain: growth goes on, on the gain alone
    assert next_size(_errors(20.29, 17.86, 18.0, 17.5), costly, 1.0)


def test_next_size_predicts_a_costly_size_from_the_last_two_gains():
    costly = 2 * CHEAP_WORK
    # sleep's path: gains 0.67, 0.79, 0.45, 0.19 point; 0.19·(0.19/0.45) = 0.08 < 0.1
    path = (25.96, 25.29, 24.50, 24.05, 23.86)
    assert not next_size(_errors(*path), costly, costly)
    assert next_size(_errors(*path), 4.0, 1.0)  # a cheap size is tried whatever the trend
    # 0.45·min(1, 0.45/0.79) = 0.26 > 0.1; a growing gain predicts itself (ratio ≤ 1)
    assert next_size(_errors(*path[:4]), costly, costly)
    assert next_size(_errors(30.0, 29.8, 29.5), costly, costly)


def test_size_work_is_the_gram_and_the_held_out_factors():
    assert size_work(1000, 100, 5, 3) == 1000 * 100**2 + 5 * 3 * 100**3 / 3


@pytest.mark.parametrize("chunks", [50, 173])
def test_grown_model_does_not_depend_on_chunks_or_scheduler(data, grown, chunks):
    X, y, X_test, _ = data
    with dask.config.set(scheduler="sync"):
        m = NRBFNClassifier(n_neighbors=7, random_state=5).fit(
            da.from_array(X, chunks=(chunks, -1)), da.from_array(y, chunks=chunks)
        )
    np.testing.assert_array_equal(m.basis_indices_, grown.basis_indices_)
    np.testing.assert_array_equal(m.basis_growth_["r"], grown.basis_growth_["r"])
    assert m.alpha_ == grown.alpha_
    # the Gram's sums in another order, through a solve at λ = 1e-11 (condition near
    # 1e11): weights to 1e-4 of the largest, the outputs (of size 1) to 1e-5, labels exactly
    np.testing.assert_allclose(m.weights_, grown.weights_, atol=1e-4 * abs(grown.weights_).max())
    np.testing.assert_allclose(
        np.asarray(m.decision_function(X_test)), grown.decision_function(X_test), atol=1e-5
    )
    np.testing.assert_array_equal(m.predict(X_test), grown.predict(X_test))


def test_distinct_first_moves_each_repeated_row_behind_the_distinct_ones():
    rng = np.random.default_rng(3)
    cells = rng.integers(0, 2, size=(6, 3)).astype(float) * 2 - 1
    rows = cells[rng.integers(0, 6, size=50)]
    order = rng.permutation(1000)[:50]
    got = soft_knn.distinct_first(rows, order)
    seen, first, repeats = set(), [], []
    for position, row in zip(order, map(tuple, rows)):  # the oracle: a plain loop
        (repeats if row in seen else first).append(position)
        seen.add(row)
    np.testing.assert_array_equal(got, first + repeats)
    assert soft_knn.distinct_first(rows[:0], order[:0]).size == 0


@pytest.fixture(scope="module")
def cells():
    """Twelve distinct rows repeated to about 1 200 with noisy labels (titanic's shape):
    two cells of 3 and 4 rows whose labels are all 1, the others mostly one class."""
    rng = np.random.default_rng(11)
    grid = rng.permutation(np.array(np.meshgrid(*[[-1.0, 1.0]] * 4)).reshape(4, -1).T)[:12]
    counts = np.r_[3, 4, rng.integers(40, 200, size=10)]
    share = np.r_[1.0, 1.0, rng.choice([0.1, 0.25, 0.7, 0.9], size=10)]
    X = np.repeat(grid, counts, axis=0)
    y = np.concatenate([rng.random(c) < q for c, q in zip(counts, share)]).astype(int)
    y[:7] = 1
    order = rng.permutation(y.size)
    return X[order], y[order], grid


@pytest.mark.parametrize("chunks", [None, 97, 400])
def test_a_grown_basis_holds_every_distinct_row_before_repeats(cells, chunks):
    X, y, grid = cells
    Xin = X if chunks is None else da.from_array(X, chunks=(chunks, -1))
    m = NRBFNClassifier(random_state=0).fit(Xin, y)
    np.testing.assert_array_equal(m.basis_, X[m.basis_indices_])
    # every cell has a centre, the two rarest (3 and 4 rows) included, whatever the size
    assert m.basis_.shape[0] in m.basis_growth_["r"]
    assert np.unique(np.r_[m.basis_, grid], axis=0).shape[0] == 12
    assert np.unique(m.basis_, axis=0).shape[0] == 12
    # the network predicts each large cell's majority (the two small ones may take their
    # neighbours' where held-out error prefers a smoother network)
    for cell in grid:
        on = np.all(X == cell, axis=1)
        if on.sum() >= 40:
            assert m.predict(cell[None, :])[0] == int(y[on].mean() > 0.5)
    if chunks is not None:  # the same model for any chunking
        ref = NRBFNClassifier(random_state=0).fit(X, y)
        np.testing.assert_array_equal(m.basis_indices_, ref.basis_indices_)


def test_max_basis_caps_the_growth(data):
    X, y, _, _ = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BasisCappedWarning)  # if it was still improving
        m = NRBFNClassifier(n_neighbors=7, max_basis=150, random_state=0).fit(X, y)
    assert list(m.basis_growth_["r"][: grown_sizes(m.basis_growth_)]) in ([128], [128, 150])
    assert m.basis_.shape[0] <= 150 and m.memory_plan_["max_basis"] == 150


def test_paper_protocol_is_unchanged_by_the_new_defaults(data):
    X, y, _, _ = data
    m = NRBFNClassifier(n_neighbors=7, alpha=1e-9, n_basis=None).fit(X, y)
    assert m.basis_growth_ is None and m.n_passes_ == 4 and m.cv_error_ is None


def test_a_growth_that_reaches_the_cap_with_its_error_falling_warns():
    # a wavy boundary: every size up to the cap beats the best before it
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(1500, 2))
    y = ((np.sin(2 * X[:, 0]) * np.sin(2 * X[:, 1])) > 0).astype(int)
    with pytest.warns(BasisCappedWarning, match="still falling"):
        m = NRBFNClassifier(max_basis=330, random_state=0).fit(X, y)
    errors = m.basis_growth_["cv_error"]
    assert list(m.basis_growth_["r"]) == [128, 256, 330]
    # the cap's own gain over 256 rows is small (74 rows more): it is not what decides
    assert errors[-1] == errors.min() and m.basis_.shape[0] == 330


@pytest.mark.parametrize(
    "case", ["50 rows", "a class of 3 rows", "constant columns", "one feature"]
)
def test_small_and_odd_data_get_a_fit(case):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 4))
    y = (X[:, 0] > 0).astype(int)
    if case == "50 rows":
        X, y = X[:50], y[:50]
    elif case == "a class of 3 rows":
        X[:3] += 6.0
        y[:3] = 2
    elif case == "constant columns":
        X = np.c_[X, np.ones((300, 2))]
    else:
        X = X[:, :1]
    m = NRBFNClassifier(random_state=0).fit(X, y)
    assert set(np.unique(y[m.basis_indices_])) == set(np.unique(y))  # each class has rows
    assert m.score(X, y) > 0.9
    if case == "a class of 3 rows":
        assert (m.predict(X[:3]) == 2).all()


@pytest.mark.parametrize("n_lams", [3, 9])  # by Cholesky per λ, and by one sytrd
def test_ridge_path_equals_ridge_solve_per_alpha(n_lams):
    rng = np.random.default_rng(0)
    A = rng.random((400, 60))
    M, B = np.tril(A.T @ A), rng.random((3, 60))
    lams = (1e-1, 1e-4, 1e-9, 1e-2, 1e-3, 1e-5, 1e-7, 1e-11, 1e-13)[:n_lams]
    W, problems = ridge_path(M, B, lams)
    for i, lam in enumerate(lams[:3]):
        np.testing.assert_allclose(W[i], ridge_solve(M, B, lam)[0], rtol=1e-8, atol=1e-10)
    assert problems == []
    Y, _, Q = ridge_path(M, B, lams, rotate=True)  # X* = Y Qᵀ, Q orthogonal (I per λ)
    np.testing.assert_allclose(Q.T @ Q, np.eye(60), atol=1e-12)
    np.testing.assert_allclose(Y @ Q.T, W, rtol=1e-8, atol=1e-10)
    v = np.arange(1.0, 6.0)
    singular = np.tril(np.outer(v, v))  # rank 1: at λ = 0 no factorisation, zero weights
    lams = (0.0, 1e-3) + (1e-1,) * (n_lams - 2)
    W, problems = ridge_path(singular, np.ones((2, 5)), lams)
    assert problems == [0.0] and not W[0].any() and W[1].any()
    np.testing.assert_allclose(W[1], ridge_solve(singular, np.ones((2, 5)), 1e-3)[0], rtol=1e-9)


def test_many_classes_score_held_out_rows_in_the_tridiagonal_factors_coordinates():
    """20 classes, 9 λ: each fold's weights stay in its Q's coordinates and the held-out
    rows' kernel is multiplied by Q (``network._rotates``); the errors equal the oracle's."""
    from sklearn.model_selection import KFold

    from scalenc.math.linalg import blas_threads
    from scalenc.nrbfn.network import _rotates

    X, y = make_blobs(120, 3, 20, seed=3, sep=2.0)
    cv = KFold(3, shuffle=True, random_state=0)
    m = NRBFNClassifier(n_neighbors=5, alpha=AUTO_ALPHA_GRID, cv=cv, n_basis=None).fit(X, y)
    assert _rotates(3, m.basis_.shape[0], len(AUTO_ALPHA_GRID), 20, 120)
    with blas_threads(1):  # 27 small inverses: threads cost seconds on a busy machine
        expected = _brute_force_cv(X, y, m.basis_, m.sigma_, AUTO_ALPHA_GRID, list(cv.split(X)))
    np.testing.assert_array_equal(m.cv_error_, expected)


@pytest.mark.parametrize("keep", [None, "every third out", "none out"])
def test_fold_gram_is_the_difference_on_kept_rows_and_ridge_path_reads_its_lower_triangle(keep):
    rng = np.random.default_rng(1)
    A = rng.random((700, 600))
    total, part = A.T @ A, A[:90].T @ A[:90]  # 600 rows: strips of 256 and a short last one
    keep = {
        None: None,
        "every third out": np.flatnonzero(np.arange(600) % 3),
        "none out": np.arange(600),
    }[keep]
    index = np.arange(600) if keep is None else keep
    oracle = (total - part)[np.ix_(index, index)]
    got = fold_gram(total, part, keep)
    assert got.shape == oracle.shape
    np.testing.assert_array_equal(np.tril(got), np.tril(oracle))
    B, lams = rng.random((3, index.size)), (1e-2, 1e-7)
    W, problems = ridge_path(got, B, lams)  # the upper triangle is left unset
    for i, lam in enumerate(lams):
        np.testing.assert_allclose(W[i], ridge_solve(oracle, B, lam)[0], rtol=1e-7, atol=1e-9)
    assert problems == []
    work = np.empty(600 * 600)  # formed again into one array for each λ: the same X*
    form = functools.partial(fold_gram, total, part, keep, out=work)
    np.testing.assert_array_equal(np.tril(form()), np.tril(got))
    np.testing.assert_array_equal(ridge_path(form(), B, lams, refill=form)[0], W)


@pytest.mark.parametrize("r", [1, 5, 256, 600])
def test_ridge_solves_condition_estimate_uses_the_symmetric_one_norm(r):
    from scalenc.math.linalg import _symmetric_one_norm

    A = np.random.default_rng(r).standard_normal((r, r))
    A += A.T
    assert _symmetric_one_norm(np.tril(A)) == pytest.approx(np.abs(A).sum(axis=0).max())


def test_ridge_solve_warns_of_an_ill_conditioned_system_and_falls_back_to_least_squares():
    M = np.diag([1.0, 1.0, 1e-18])  # factorisable, reciprocal condition 1e-18 < ε
    solution, problem = ridge_solve(M, np.ones((1, 3)), 0.0)
    assert problem is not None and "reciprocal condition" in problem
    np.testing.assert_allclose(solution, np.linalg.lstsq(M, np.ones(3), rcond=None)[0][None])


@pytest.fixture
def small_growth_sample(monkeypatch):
    """A growth sample of 150 rows: the 600 training rows are four times that."""
    from scalenc.nrbfn import network

    monkeypatch.setattr(network, "GROWTH_SAMPLE_ROWS", 150)
    return 150


def test_a_large_fit_grows_on_a_sample_and_keeps_the_network_of_every_row(
    data, small_growth_sample
):
    """Oracle of the growth sample: the sizes, σ's multiple and λ are chosen by the held-out
    errors of a class-stratified sample of rows (each scored by the model of the other
    folds' sampled rows, without the basis rows of its fold), and the kept size's σ and
    weights are Algorithm 2's on every training row."""
    from scalenc.math.sampling import stratified_sample

    X, y, X_test, y_test = data
    m = NRBFNClassifier(n_neighbors=7, random_state=5).fit(X, y)
    sample = stratified_sample(y, small_growth_sample, 3, 5)
    assert m.memory_plan_["basis"]["growth_rows"] == sample.size == small_growth_sample
    path, r = m.basis_growth_, m.basis_.shape[0]
    kept = list(path["r"]).index(r)
    width = path["width"][kept]
    dist = np.sqrt(((m.basis_[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    # the growth's σ is the sample's; the model's is every row's
    assert path["sigma"][kept] == pytest.approx(width * dist[:, sample].mean(), rel=1e-10)
    assert m.sigma_ == pytest.approx(width * dist.mean(), rel=1e-10)
    want = weights_for(X, y, m.basis_, m.sigma_, m.alpha_)
    np.testing.assert_allclose(m.weights_, want, atol=1e-4 * abs(want).max())
    # the kept size's held-out errors, on the sample
    Xs, ys, sigma_s = X[sample], y[sample], path["sigma"][kept]
    fold, basis_fold = fold_of(sample, 5, 5), fold_of(m.basis_indices_, 5, 5)
    F = np.eye(3)[ys].T
    tried = ~np.isnan(m.cv_error_)
    errors = np.zeros(tried.sum())
    for f in range(5):
        train, held, keep = fold != f, fold == f, basis_fold != f
        A = _oracle_kernel(Xs[train], m.basis_, sigma_s)[keep]
        B = _oracle_kernel(Xs[held], m.basis_, sigma_s)[keep]
        for a, lam in enumerate(np.asarray(AUTO_ALPHA_GRID)[tried]):
            W = F[:, train] @ A.T @ np.linalg.inv(A @ A.T + lam * (A**2).sum() * np.eye(A.shape[0]))
            errors[a] += np.count_nonzero((W @ B).argmax(axis=0) != ys[held])
    np.testing.assert_allclose(m.cv_error_[tried], errors / sample.size, atol=1.5 / sample.size)
    assert m.score(X_test, y_test) > 0.7
    # the growth's passes are over the sample in memory: X is read to gather it, then for
    # the kept size's σ and Gram
    assert m.n_passes_ == 5


def _oracle_kernel(A, G, sigma):
    W = np.exp(-((G[:, None, :] - A[None, :, :]) ** 2).sum(-1) / (2 * sigma**2))
    return W / W.sum(axis=0, keepdims=True)


@pytest.fixture
def sampled_reference(data, small_growth_sample):
    """The growth-sample fit on NumPy (the threaded scheduler, before any client)."""
    X, y, _, _ = data
    return NRBFNClassifier(n_neighbors=7, random_state=5).fit(X, y)


@pytest.mark.parametrize("chunks", [600, 77])
def test_the_growth_sample_does_not_depend_on_chunks(data, sampled_reference, chunks):
    with dask.config.set(scheduler="threads"):
        _same_growth(sampled_reference, data, chunks)


def test_the_growth_sample_on_a_cluster(data, sampled_reference, client):
    _same_growth(sampled_reference, data, 77)


def _same_growth(whole, data, chunks):
    X, y, X_test, _ = data
    m = NRBFNClassifier(n_neighbors=7, random_state=5).fit(
        da.from_array(X, chunks=(chunks, -1)), da.from_array(y, chunks=chunks)
    )
    assert m.memory_plan_["basis"]["growth_rows"] == 150
    np.testing.assert_array_equal(m.basis_indices_, whole.basis_indices_)
    np.testing.assert_allclose(m.basis_growth_["cv_error"], whole.basis_growth_["cv_error"])
    assert m.alpha_ == whole.alpha_ and m.sigma_ == pytest.approx(whole.sigma_, rel=1e-12)
    np.testing.assert_array_equal(m.predict(X_test), whole.predict(X_test))


def _search(errors=(0.50, 0.40, 0.38), width=0.5, normalize=True, scripted=()):
    """A :class:`Search` whose growth tried 128, 256 and 512 rows (``errors``, σ = 2.0 ×
    ``width``, λ 1e-9) and whose steps' held-out errors are then ``scripted``: one per
    call, or a function of (r, kernels). Grams are named "gram r width normalize"."""
    calls = []

    def run(r, kernels, lams, paper_sigma):
        error = scripted(r, kernels) if callable(scripted) else scripted[len(calls)]
        calls.append((r, kernels, lams, paper_sigma))
        trials = [
            Trial(r, w, paper_sigma * w, kind, lams, np.full(len(lams), error), 5, 10_000)
            for w, kind in kernels
        ]
        return trials, [f"gram {r} {w} {kind}" for w, kind in kernels]

    search = Search(run, AUTO_ALPHA_GRID, 10_000)
    search.steps = [
        Trial(r, width, 2.0 * width, normalize, (1e-9,), np.array([e]), 5, 10_000)
        for r, e in zip((128, 256, 512), errors)
    ]
    search.best = min(search.steps, key=lambda step: step.error)
    search.kept = f"gram {search.best.r} {width} {normalize}"
    search.first_widths = {True: 0.5, False: width}
    return search, calls


@pytest.mark.parametrize(
    "scripted, adopted",
    [((0.395,), False), ((0.30, 0.37), True), ((0.30, 0.39), False)],
    ids=["within the margin", "better twice", "better before, not on the kept size"],
)
def test_narrower_width_is_tried_before_the_kept_size_then_on_it(scripted, adopted):
    search, calls = _search(scripted=scripted)
    best = search.best
    search.narrower_width()
    # first the size before the kept one, at ×1/4 of its paper σ (2.0), λ around its own
    assert calls[0][:2] == (256, ((0.25, True),)) and calls[0][3] == pytest.approx(2.0)
    assert 1e-9 in calls[0][2] and len(calls) == len(scripted)
    if len(calls) > 1:  # then the kept size; where the width stays, its Gram is kept
        assert calls[1][:2] == (512, ((0.25, True),)) and calls[1][3] == pytest.approx(2.0)
        assert (search.best is best) is not adopted
    assert search.kept == ("gram 512 0.25 True" if adopted else "gram 512 0.5 True")
    assert (search.best.error < 0.38) is adopted
    # the tries follow the sizes in the records and in basis_growth_
    assert [step.r for step in search.steps[3:]] == [256, 512][: len(calls)]
    assert list(search.growth()["r"][3:]) == [256, 512][: len(calls)]


def test_narrower_width_is_not_tried_on_the_first_size_or_below_the_narrowest():
    for search, calls in [_search(errors=(0.3, 0.4)), _search(width=0.25)]:
        kept = search.kept
        search.narrower_width()
        assert calls == [] and search.kept == kept


@pytest.mark.parametrize(
    "narrower, adopted, n_rows", [(0.395, False, 2_000), (0.30, True, 2_000), (0.30, True, 600)]
)
def test_a_costly_last_size_is_bought_once_at_the_width_and_lambda_of_the_size_before(
    narrower, adopted, n_rows
):
    """Before a last size that is not cheap, σ's narrower multiple is tried on the size
    before it (and not again after the growth); the last size is fitted once, at the
    width that won, with one λ where its held-out factors outweigh its Gram and it has
    fewer rows than a fold's training rows (else the λ around the size before's)."""
    calls = []
    errors = {(128, 1.0): 0.50, (128, 0.5): 0.55, (128, 0.25): 0.6, (256, 1.0): 0.40}
    errors |= {(256, 0.5): narrower, (512, 1.0): 0.35, (512, 0.5): 0.28}

    def run(r, kernels, lams, paper_sigma):
        calls.append((r, kernels, lams, paper_sigma))
        sigma = 2.0 if paper_sigma is None else paper_sigma
        trials = [
            Trial(r, w, sigma * w, kind, lams, np.full(len(lams), errors[r, w]), 5, n_rows)
            for w, kind in kernels
        ]
        return trials, [f"gram {r} {w}" for w, _ in kernels]

    search = Search(run, AUTO_ALPHA_GRID, n_rows)  # 5 × 512 > 2 000 held-out rows
    assert not search.grow([128, 256, 512], (1.0, 0.5, 0.25), (True,), 100_000)
    search.narrower_width()
    width = 0.5 if adopted else 1.0
    assert [(r, kernels) for r, kernels, _, _ in calls[1:]] == [
        (256, ((1.0, True),)), (256, ((0.5, True),)), (512, ((width, True),))
    ]  # fmt: skip
    assert calls[2][3] == pytest.approx(2.0) and calls[3][3] is None  # 512 rows: own σ
    before = search.steps[2 - (not adopted)].alpha
    assert calls[3][2] == ((before,) if n_rows > 640 else calls[2][2])  # 512 ≥ 4/5 of 600
    assert search.kept == f"gram 512 {width}" and search.best.width == width
    assert list(search.growth()["r"]) == [128, 256, 256, 512]


def test_width_margin_is_three_standard_errors_at_least_the_tolerance():
    from scalenc.nrbfn.search import GROWTH_TOLERANCE

    assert width_margin(0.02, 1400) == pytest.approx(3 * np.sqrt(0.02 * 0.98 / 1400))
    assert 0.011 < width_margin(0.02, 1400) < 0.012  # mfeat's noise: a row or two is 0.1
    assert width_margin(0.0, 100) == GROWTH_TOLERANCE
    assert width_margin(0.39, 19_638) < 0.056  # krkopt's gap at 4 096 rows: 5.6 points


def _shell_and_ball(n, p, seed):
    """Ringnorm's two Gaussians (Breiman 1996): N(0, 4 I) and N(2/√p, I). The classes
    differ in spread: W̃, normalised, loses the kernel's mass, which tells them apart."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    X = np.where(
        y[:, None] == 0, 2.0 * rng.normal(size=(n, p)), rng.normal(size=(n, p)) + 2 / p**0.5
    )
    return X, y


def test_auto_kernel_keeps_the_plain_one_only_where_it_beats_the_normalised_by_the_margin(
    grown,
):
    X, y = _shell_and_ball(2400, 10, 0)
    X_test, y_test = _shell_and_ball(1200, 10, 1)
    auto = NRBFNClassifier(random_state=0).fit(X, y)
    paper = NRBFNClassifier(normalize=True, random_state=0).fit(X, y)
    path, paper_path = auto.basis_growth_, paper.basis_growth_
    n = grown_sizes(path)
    assert auto.normalize_ is False and not path["normalize"][:n].any()
    # W̃ tried again (after the sizes) before the kept size: its held-out error is higher
    tries = np.flatnonzero(path["normalize"])
    assert tries.size in (1, 2) and tries.min() >= n
    for again in tries:
        size = list(path["r"][:n]).index(path["r"][again])
        assert path["cv_error"][again] > path["cv_error"][size]
    assert paper.normalize_ is True and paper_path["normalize"].all()
    # the first size: the best of W̃'s widths is the normalised fit's own first size; W's
    # beats it by more than the margin
    assert path["r"][0] == paper_path["r"][0]
    normalised = paper_path["cv_error"][0]
    assert path["cv_error"][0] < normalised - width_margin(normalised, X.shape[0])
    assert auto.score(X_test, y_test) > paper.score(X_test, y_test) + 0.01  # 95.3 vs 93.9 %
    # on blobs W̃ and W are within the margin: the paper's kernel stays
    assert grown.normalize_ is True and grown.basis_growth_["normalize"].all()
    plain = NRBFNClassifier(normalize=False, random_state=0).fit(X, y)
    assert plain.normalize_ is False and not plain.basis_growth_["normalize"].any()


@pytest.mark.parametrize(
    "before_error, kept_error, adopted",
    [(0.41, None, False), (0.40, 0.38, True), (0.35, 0.37, True), (0.35, 0.39, False)],
    ids=["worse before", "tie before, tie on the kept size", "better twice", "better before"],
)
def test_the_paper_kernel_is_tried_again_before_the_kept_size_then_on_it(
    before_error, kept_error, adopted
):
    """A growth that chose W on its first size tries W̃ (its own first-size width) on the
    size before the kept one, then, if not worse there, on the kept size, and keeps it
    unless W's held-out error there is lower; W's kept Gram is held through the try."""

    def error(r, kernels):
        return {256: before_error, 512: kept_error}[r] if kernels[0][1] else 0.38

    # W's errors 0.50, 0.40, 0.38 on 128, 256, 512
    search, calls = _search(width=1.0, normalize=False, scripted=error)
    best = search.best
    search.paper_kernel_again()
    assert search.best.normalize is adopted
    # W̃ on the size before, at its own width (×1/2) of that size's paper σ (2.0)
    assert calls[0][:2] == (256, ((0.5, True),)) and calls[0][3] == pytest.approx(2.0)
    assert 1e-9 in calls[0][2]
    if kept_error is None:  # worse before: no try on the kept size, W's Gram kept
        assert len(calls) == 1 and search.best is best and search.kept == "gram 512 1.0 False"
        return
    assert calls[1][:2] == (512, ((0.5, True),))
    if adopted:
        assert len(calls) == 2 and search.kept == "gram 512 0.5 True"
        assert search.best.error == kept_error
    else:  # W stays, at its own width, with its Gram (not formed again)
        assert len(calls) == 2 and search.best is best and search.kept == "gram 512 1.0 False"


def test_the_paper_kernel_is_not_tried_again_when_the_first_size_is_kept():
    search, calls = _search(errors=(0.3, 0.4), width=1.0, normalize=False, scripted=())
    search.paper_kernel_again()
    assert calls == [] and search.kept == "gram 128 1.0 False"


def test_a_step_keeps_each_kernels_best_width_and_the_plain_kernel_only_by_the_margin():
    def trial(width, normalize, error):
        return Trial(128, width, width, normalize, (1e-9,), np.array([error]), 5, 1_000)

    search = Search(None, AUTO_ALPHA_GRID, 1_000)
    margin = width_margin(0.10, 1_000)
    trials = [trial(1.0, True, 0.12), trial(0.5, True, 0.10), trial(0.25, True, 0.10)]
    plain = [trial(1.0, False, 0.10 - margin / 2), trial(0.5, False, 0.10 - 2 * margin)]
    assert search.choose(trials) == 1  # ties to the first width
    assert search.choose(trials + plain[:1]) == 1  # W within the margin: W̃ stays
    assert search.choose(trials + plain) == 4
    assert search.first_widths == {True: 0.5, False: 1.0}  # the first step's


def test_a_steps_kernels_in_one_pass_or_one_at_a_time_give_the_same_model(data, monkeypatch):
    """The first size's six kernels (W, W̃ × three widths) share a Gram pass and a
    held-out pass while they fit BATCH_BYTES; one at a time they give the same model
    bit for bit, with four more passes per kernel beyond the first."""
    from scalenc.nrbfn import network

    X, y, X_test, _ = data
    together = NRBFNClassifier(n_neighbors=7, random_state=5).fit(X, y)
    monkeypatch.setattr(network, "BATCH_BYTES", 0)
    apart = NRBFNClassifier(n_neighbors=7, random_state=5).fit(X, y)
    assert apart.n_passes_ == together.n_passes_ + 2 * (len(WIDTHS) * 2 - 1)
    for key in ("r", "width", "sigma", "alpha", "cv_error", "normalize"):
        np.testing.assert_array_equal(apart.basis_growth_[key], together.basis_growth_[key])
    np.testing.assert_array_equal(apart.weights_, together.weights_)
    np.testing.assert_array_equal(apart.predict(X_test), together.predict(X_test))


def test_a_step_lets_go_of_the_grams_no_choice_can_keep():
    from scalenc.nrbfn.network import _release

    grams = ["a", "b", "c", "d", "e"]
    errors = [np.array([e]) for e in (0.3, 0.2, 0.2, 0.4, 0.1)]
    _release(grams, errors, (True, True, True, False, False))
    assert grams == [None, "b", None, None, "e"]  # each kernel's first of least error
