"""NRBFNClassifier and LRClassifier against plain NumPy transcriptions of the paper.

The oracle functions below follow Hu, Pan & Wu's Algorithms 1–3 and eqs. 1/14 line by
line on the whole (small) data matrix; the estimators must give the same basis, σ,
weights and predictions whatever the chunking and scheduler.
"""

from __future__ import annotations

import math

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import make_blobs
from sklearn.utils.estimator_checks import parametrize_with_checks

from scalenc import LRClassifier, NRBFNClassifier
from scalenc.base.estimator import expected_failed_checks
from scalenc.math.sampling import fold_of

# --- the oracle: Algorithms 1–3 on the full matrices (rows = samples) -------------------


def sknn_oracle(A, Y, k, t):
    """Algorithm 1 (SKNN). A: n×p (the paper's Aᵀ), Y: n labels 0..K-1."""
    n = A.shape[0]
    dist = np.sqrt(((A[:, None, :] - A[None, :, :]) ** 2).sum(-1))
    np.fill_diagonal(dist, np.inf)  # a sample is not its own neighbour
    neighbours = np.argsort(dist, axis=1, kind="stable")[:, :k]  # step 3
    Q = np.take_along_axis(dist, neighbours, 1)  # Q (n×k here, k×n in the paper)
    sigma = Q.sum() / (k * n)  # step 4
    W = np.exp(-(Q**2) / (2 * sigma**2))  # step 5
    W_tilde = W / W.sum(axis=1, keepdims=True)  # step 6 (columns of the paper's W)
    T = (W_tilde * (Y[neighbours] == Y[:, None])).sum(axis=1)  # step 7
    in_basis = T < t  # step 8
    for c in np.unique(Y):  # step 9
        if not in_basis[Y == c].any():
            rows = np.flatnonzero(Y == c)
            in_basis[rows[np.argmin(T[rows])]] = True
    return np.flatnonzero(in_basis), T, sigma


def train_oracle(A, Y, lam, k, t, basis_idx=None):
    """Algorithm 2. Returns basis indices, G, σ, X (K×r)."""
    if basis_idx is None:
        basis_idx, _, _ = sknn_oracle(A, Y, k, t)  # step 3
    G = A[basis_idx]
    Q = np.sqrt(((G[:, None, :] - A[None, :, :]) ** 2).sum(-1))  # step 4, r×n
    r, n = Q.shape
    sigma = Q.sum() / (r * n)  # step 5
    W = np.exp(-(Q**2) / (2 * sigma**2))  # step 6
    W_tilde = W / W.sum(axis=0, keepdims=True)  # step 7
    F = np.eye(Y.max() + 1)[Y].T  # step 8, K×n
    fro2 = (W_tilde**2).sum()
    X = F @ W_tilde.T @ np.linalg.inv(W_tilde @ W_tilde.T + lam * fro2 * np.eye(r))  # step 9
    return basis_idx, G, sigma, X


def weights_for(A, Y, G, sigma, lam, normalize=True):
    """Step 9 with a given basis and σ (for the cross-validation loop); with
    ``normalize=False``, of the plain Gaussian W (step 7 left out)."""
    Q2 = ((G[:, None, :] - A[None, :, :]) ** 2).sum(-1)
    W_tilde = np.exp(-Q2 / (2 * sigma**2))
    if normalize:
        W_tilde /= W_tilde.sum(axis=0, keepdims=True)
    F = np.eye(G.shape[0] and Y.max() + 1)[Y].T
    r = G.shape[0]
    return F @ W_tilde.T @ np.linalg.inv(W_tilde @ W_tilde.T + lam * (W_tilde**2).sum() * np.eye(r))


def predict_oracle(B, G, sigma, X, normalize=True):
    """Algorithm 3. Returns F̂ (K×m) and labels (step 4 left out with ``normalize=False``)."""
    W_B = np.exp(-((G[:, None, :] - B[None, :, :]) ** 2).sum(-1) / (2 * sigma**2))  # step 3
    W_B_tilde = W_B / W_B.sum(axis=0, keepdims=True) if normalize else W_B  # step 4
    F_hat = X @ W_B_tilde  # step 5
    return F_hat, F_hat.argmax(axis=0)  # step 6


def lrc_oracle(A, Y, lam, beta=1.0):
    """Eqs. 1 and 14: ridge on the mean-removed, √β-augmented data."""
    mean = A.mean(axis=0)
    A_tilde = np.vstack([np.sqrt(beta) * np.ones(A.shape[0]), (A - mean).T])  # (p+1)×n
    F = np.eye(Y.max() + 1)[Y].T
    lam_prime = lam * (A_tilde**2).sum()
    D = F @ A_tilde.T @ np.linalg.inv(A_tilde @ A_tilde.T + lam_prime * np.eye(A_tilde.shape[0]))
    return D, mean, A_tilde, F


def diagnostics_oracle(F, D, A):
    """Definitions 5 and 7 computed directly."""
    DA = D @ A
    epsilon = ((F - DA) ** 2).sum() / (DA**2).sum() + 1
    gamma = (D**2).sum() * (A**2).sum() / (DA**2).sum()
    return epsilon, gamma


# --- fixtures ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data():
    X, y = make_blobs(240, 5, 3, seed=3, sep=0.6)
    return X[:160], y[:160], X[160:], y[160:]


#: the paper's Algorithms 1–3 (its confidence rule for the basis, a fixed λ)
PARAMS = dict(n_neighbors=7, confidence_threshold=0.9, alpha=1e-9, n_basis=None)


@pytest.fixture(scope="module")
def reference(data):
    X, y, _, _ = data
    return NRBFNClassifier(**PARAMS).fit(X, y)


# --- oracle tests -------------------------------------------------------------------------


def test_nrbfn_equals_algorithms_1_to_3(data, reference):
    X, y, X_test, _ = data
    basis_idx, T, knn_sigma = sknn_oracle(
        X, y, PARAMS["n_neighbors"], PARAMS["confidence_threshold"]
    )
    _, G, sigma, W = train_oracle(X, y, PARAMS["alpha"], PARAMS["n_neighbors"], 0.9)
    F_hat, labels = predict_oracle(X_test, G, sigma, W)
    m = reference
    assert 0 < basis_idx.size < X.shape[0]
    np.testing.assert_allclose(m.confidence_, T, rtol=1e-10, atol=1e-12)
    assert m.knn_sigma_ == pytest.approx(knn_sigma, rel=1e-12)
    np.testing.assert_array_equal(m.basis_indices_, basis_idx)
    np.testing.assert_array_equal(m.basis_, G)
    assert m.sigma_ == pytest.approx(sigma, rel=1e-12)
    np.testing.assert_allclose(m.weights_, W, rtol=1e-6, atol=1e-6 * np.abs(W).max())
    np.testing.assert_allclose(m.decision_function(X_test), F_hat.T, atol=1e-6)
    np.testing.assert_array_equal(m.predict(X_test), labels)
    assert m.basis_fraction_ == pytest.approx(basis_idx.size / X.shape[0])


def test_plain_kernel_is_algorithms_2_and_3_without_the_normalisation(data, reference):
    """``normalize=False``: the same basis and σ (they do not depend on the kernel), the
    weights of the plain Gaussian W, and its scores (no row sums to one)."""
    X, y, X_test, _ = data
    m = NRBFNClassifier(**PARAMS, normalize=False).fit(X, y)
    assert m.normalize_ is False and reference.normalize_ is True
    np.testing.assert_array_equal(m.basis_indices_, reference.basis_indices_)
    assert m.sigma_ == reference.sigma_
    want = weights_for(X, y, m.basis_, m.sigma_, PARAMS["alpha"], normalize=False)
    np.testing.assert_allclose(m.weights_, want, rtol=1e-6, atol=1e-8 * abs(want).max())
    assert not np.allclose(m.weights_, reference.weights_, rtol=1e-3)
    F_hat, labels = predict_oracle(X_test, m.basis_, m.sigma_, want, normalize=False)
    np.testing.assert_allclose(np.asarray(m.decision_function(X_test)), F_hat.T, atol=1e-7)
    np.testing.assert_array_equal(m.predict(X_test), labels)
    proba = np.clip(F_hat.T, 0, None)
    np.testing.assert_allclose(
        m.predict_proba(X_test)[proba.sum(1) > 0],
        (proba / proba.sum(1, keepdims=True))[proba.sum(1) > 0],
        atol=1e-7,
    )


def test_diagnostics_equal_definitions(data, reference):
    X, y, _, _ = data
    m = reference
    G, sigma = m.basis_, m.sigma_
    W_tilde = np.exp(-((G[:, None] - X[None]) ** 2).sum(-1) / (2 * sigma**2))
    W_tilde /= W_tilde.sum(axis=0)
    F = np.eye(3)[y].T
    epsilon, gamma = diagnostics_oracle(F, m.weights_, W_tilde)
    assert m.fitting_error_ == pytest.approx(epsilon, rel=1e-6)
    assert m.spectral_risk_ == pytest.approx(gamma, rel=1e-6)
    assert m.fitting_error_ >= 1 and m.spectral_risk_ >= 1
    singular = np.linalg.svd(W_tilde, compute_uv=False)
    resolvable = np.sqrt(G.shape[0] * np.finfo(float).eps) * singular[0]
    assert abs(m.rank_ - np.count_nonzero(singular > resolvable)) <= 1


def test_cv_picks_the_brute_force_alpha(data):
    X, y, _, _ = data
    grid = [1e-1, 1e-3, 1e-9]
    m = NRBFNClassifier(n_neighbors=7, alpha=grid, cv=4, n_basis=None, random_state=11).fit(X, y)
    folds = fold_of(np.arange(X.shape[0]), 4, 11)
    errors = np.zeros(len(grid))
    for f in range(4):
        train, held = folds != f, folds == f
        for a, lam in enumerate(grid):
            W = weights_for(X[train], y[train], m.basis_, m.sigma_, lam)
            _, labels = predict_oracle(X[held], m.basis_, m.sigma_, W)
            errors[a] += np.count_nonzero(labels != y[held])
    np.testing.assert_allclose(m.cv_error_, errors / X.shape[0])
    assert m.alpha_ == grid[int(np.argmin(errors))]
    assert m.n_passes_ == 1 + 1 + 1 + 1 + 1  # k-NN (one block), basis, σ, Gram, CV scoring
    _, _, _, W_full = train_oracle(X, y, m.alpha_, 7, 0.9, basis_idx=m.basis_indices_)
    np.testing.assert_allclose(m.weights_, W_full, rtol=1e-6, atol=1e-6 * np.abs(W_full).max())


def test_cv_grid_size_does_not_add_passes(data):
    X, y, _, _ = data
    small = NRBFNClassifier(n_neighbors=7, alpha=[1e-3, 1e-9], random_state=0).fit(X, y)
    large = NRBFNClassifier(n_neighbors=7, alpha="cv", random_state=0).fit(X, y)
    assert small.n_passes_ == large.n_passes_
    assert large.alpha_ in (1e-5, 1e-9, 1e-13)


@pytest.mark.parametrize("chunks", [(37, 1, 52, 70), (160,), (13,) * 12 + (4,)])
def test_chunking_does_not_change_the_model(data, reference, chunks):
    X, y, X_test, _ = data
    Xd = da.from_array(X, chunks=(chunks, -1))
    yd = da.from_array(y, chunks=(chunks,))
    m = NRBFNClassifier(**PARAMS).fit(Xd, yd)
    np.testing.assert_array_equal(m.basis_indices_, reference.basis_indices_)
    assert m.sigma_ == pytest.approx(reference.sigma_, rel=1e-12)
    np.testing.assert_allclose(
        m.weights_, reference.weights_, rtol=1e-6, atol=1e-7 * np.abs(reference.weights_).max()
    )
    assert m.n_passes_ == 4  # k-NN (one compute, each block read once), basis, σ, Gram
    np.testing.assert_array_equal(m.predict(X_test), reference.predict(X_test))


def test_tiles_inside_blocks_do_not_change_the_model(data, reference, monkeypatch):
    from scalenc.math import neighbors, selection
    from scalenc.nrbfn import blocks as nrbfn

    monkeypatch.setattr(nrbfn, "KERNEL_TILE_ELEMENTS", 7 * 50)  # 7-row kernel pieces (r≈50)
    monkeypatch.setattr(nrbfn, "GRAM_TILE_ELEMENTS", 30 * 50)
    monkeypatch.setattr(nrbfn, "GRAM_STRIP", 13)  # Gram in 13-row strips: diagonal + GEMM parts
    monkeypatch.setattr(selection, "TILE_ELEMENTS", 9 * 80)
    monkeypatch.setattr(neighbors, "PAIR_TILE_ELEMENTS", 11 * 80)
    monkeypatch.setattr(selection, "THRESHOLD_SAMPLE", 16)  # bounded selection on 80-row blocks
    X, y, X_test, _ = data
    m = NRBFNClassifier(**PARAMS, chunk_rows=80).fit(X, y)
    np.testing.assert_array_equal(m.basis_indices_, reference.basis_indices_)
    assert m.sigma_ == pytest.approx(reference.sigma_, rel=1e-12)
    np.testing.assert_allclose(
        m.weights_, reference.weights_, rtol=1e-6, atol=1e-7 * np.abs(reference.weights_).max()
    )


def test_gram_strips_equal_a_full_product(monkeypatch):
    from scalenc.nrbfn import blocks as nrbfn

    rng = np.random.default_rng(5)
    W = rng.random((40, 29))
    for strip in (1, 7, 29, 64):
        monkeypatch.setattr(nrbfn, "GRAM_STRIP", strip)
        M = np.full((29, 29), 0.5)
        nrbfn._syrk_lower_into(M, W)
        np.testing.assert_allclose(np.tril(M), np.tril(W.T @ W + 0.5), rtol=1e-13)


def test_gram_partials_sum_like_the_generic_combine():
    from scalenc.math.moments import combine_partials
    from scalenc.nrbfn.blocks import sum_gram_partials

    rng = np.random.default_rng(8)
    parts = [
        {"M": rng.random((2, 5, 5)), "B": rng.random((2, 3, 5)), "count": rng.random(2)}
        for _ in range(4)
    ]
    kept = [{key: value.copy() for key, value in part.items()} for part in parts]
    total, expected = sum_gram_partials(*parts), combine_partials(*kept)
    for key in expected:
        np.testing.assert_array_equal(total[key], expected[key])
    for part, copy in zip(parts, kept):  # the inputs are left alone
        for key in part:
            np.testing.assert_array_equal(part[key], copy[key])


def test_schedulers_give_the_same_model(data, reference, scheduler):
    X, y, X_test, _ = data
    m = NRBFNClassifier(**PARAMS, chunk_rows=50).fit(X, y)
    np.testing.assert_array_equal(m.basis_indices_, reference.basis_indices_)
    np.testing.assert_allclose(
        m.weights_, reference.weights_, rtol=1e-6, atol=1e-7 * np.abs(reference.weights_).max()
    )
    np.testing.assert_array_equal(m.predict(X_test), reference.predict(X_test))


def test_distributed_cluster(data, reference, client):
    X, y, X_test, _ = data
    m = NRBFNClassifier(**PARAMS, chunk_rows=40).fit(da.from_array(X, chunks=(40, -1)), y)
    np.testing.assert_allclose(
        m.weights_, reference.weights_, rtol=1e-6, atol=1e-7 * np.abs(reference.weights_).max()
    )
    pred = m.predict(da.from_array(X_test, chunks=(30, -1)))
    assert isinstance(pred, da.Array)
    np.testing.assert_array_equal(pred.compute(), reference.predict(X_test))
    lrc = LRClassifier(chunk_rows=40).fit(X, y)
    np.testing.assert_allclose(lrc.weights_, LRClassifier().fit(X, y).weights_, rtol=1e-9)


def test_candidate_sample_of_all_rows_equals_exact(data, reference):
    X, y, X_test, _ = data
    m = NRBFNClassifier(**PARAMS, n_candidates=10**6, chunk_rows=33, random_state=0).fit(X, y)
    np.testing.assert_array_equal(m.candidate_indices_, np.arange(X.shape[0]))
    np.testing.assert_allclose(m.confidence_, reference.confidence_, rtol=1e-12)
    assert m.knn_sigma_ == pytest.approx(reference.knn_sigma_, rel=1e-12)
    np.testing.assert_array_equal(m.basis_indices_, reference.basis_indices_)
    assert m.sigma_ == pytest.approx(reference.sigma_, rel=1e-12)
    np.testing.assert_allclose(
        m.weights_, reference.weights_, rtol=1e-6, atol=1e-7 * np.abs(reference.weights_).max()
    )
    np.testing.assert_array_equal(m.predict(X_test), reference.predict(X_test))
    assert m.n_passes_ == 4  # candidate gather, one k-NN pass, σ, Gram


def test_candidate_sample_confidence_uses_the_whole_training_set(data, reference):
    X, y, _, _ = data
    sample = NRBFNClassifier(
        **PARAMS, n_candidates=X.shape[0] - 1, chunk_rows=33, random_state=0
    ).fit(X, y)
    assert sample.candidate_indices_.size == X.shape[0] - 1
    np.testing.assert_allclose(
        sample.confidence_,
        _confidence_with_sigma(X, y, sample.candidate_indices_, 7, sample.knn_sigma_),
        rtol=1e-10,
    )


def _confidence_with_sigma(X, y, rows, k, sigma):
    dist = np.sqrt(((X[rows, None] - X[None]) ** 2).sum(-1))
    dist[np.arange(rows.size), rows] = np.inf
    nb = np.argsort(dist, axis=1, kind="stable")[:, :k]
    W = np.exp(-(np.take_along_axis(dist, nb, 1) ** 2) / (2 * sigma**2))
    W /= W.sum(axis=1, keepdims=True)
    return (W * (y[nb] == y[rows, None])).sum(axis=1)


def test_candidate_sample_is_stratified_and_searches_all_rows(data):
    X, y, X_test, y_test = data
    m = NRBFNClassifier(**PARAMS, n_candidates=60, random_state=5, chunk_rows=45).fit(X, y)
    assert m.candidate_indices_.size == 60
    counts = np.bincount(y[m.candidate_indices_], minlength=3)
    np.testing.assert_allclose(counts, 60 * np.bincount(y) / y.size, atol=1)
    dist = np.sqrt(((X[m.candidate_indices_, None] - X[None]) ** 2).sum(-1))
    dist[np.arange(60), m.candidate_indices_] = np.inf
    q = np.sort(dist, axis=1)[:, :7]
    assert m.knn_sigma_ == pytest.approx(q.mean(), rel=1e-12)
    np.testing.assert_allclose(
        m.confidence_, _confidence_with_sigma(X, y, m.candidate_indices_, 7, q.mean()), rtol=1e-10
    )
    assert set(m.basis_indices_) <= set(m.candidate_indices_)
    again = NRBFNClassifier(**PARAMS, n_candidates=60, random_state=5, chunk_rows=17).fit(X, y)
    np.testing.assert_array_equal(again.candidate_indices_, m.candidate_indices_)
    assert m.n_passes_ == 4  # candidate gather, k-NN, σ, Gram (basis rows come with the candidates)
    assert m.score(X_test, y_test) > 0.8


def test_n_basis_takes_the_least_confident(data, reference):
    X, y, _, _ = data
    m = NRBFNClassifier(**{**PARAMS, "n_basis": 25}).fit(X, y)
    order = np.lexsort((np.arange(X.shape[0]), reference.confidence_))
    assert m.basis_indices_.size == 25
    np.testing.assert_array_equal(m.basis_indices_, np.sort(order[:25]))


def test_max_basis_warns_and_spreads_the_basis_over_the_confidence_order(data, reference):
    X, y, _, _ = data
    r = reference.basis_indices_.size
    with pytest.warns(UserWarning, match=r"more than max_basis=10; keeping 10 of them"):
        m = NRBFNClassifier(**PARAMS, max_basis=10).fit(X, y)
    assert r > 10 and m.basis_indices_.size == 10
    assert set(np.unique(y[m.basis_indices_])) == {0, 1, 2}
    # the least confident of each class, then ranks spread evenly over the rest of the
    # rule's basis in order of confidence (ties by position)
    conf = reference.confidence_
    order = np.lexsort((np.arange(conf.size), conf))
    reserve = [order[y[order] == c][0] for c in range(3)]
    rest = [i for i in order if conf[i] < 0.9 and i not in reserve]
    ranks = np.floor(np.linspace(0, len(rest) - 1, 10 - 3)).astype(int)
    want = np.union1d(reserve, np.array(rest)[ranks])
    np.testing.assert_array_equal(m.basis_indices_, want)
    assert conf[m.basis_indices_].max() > np.sort(conf)[9 + 2]  # not the 10 least confident


def test_unlabeled_rows_take_no_part(data, reference):
    X, y, X_test, _ = data
    rng = np.random.default_rng(0)
    extra = rng.normal(size=(40, X.shape[1])) * 5
    X_all = np.vstack([X, extra])
    y_all = np.concatenate([y, -np.ones(40, dtype=int)])
    perm = rng.permutation(X_all.shape[0])
    m = NRBFNClassifier(**PARAMS, chunk_rows=37).fit(X_all[perm], y_all[perm])
    np.testing.assert_array_equal(np.sort(perm[m.basis_indices_]), reference.basis_indices_)
    assert m.sigma_ == pytest.approx(reference.sigma_, rel=1e-12)
    np.testing.assert_array_equal(m.predict(X_test), reference.predict(X_test))


def test_float32_in_float32_out_and_labels_of_any_type(data):
    X, y, X_test, y_test = data
    names = np.array(["setosa", "versicolor", "virginica"], dtype=object)[y]
    m = NRBFNClassifier(**PARAMS).fit(X.astype(np.float32), names)
    assert m.predict_proba(X_test.astype(np.float32)).dtype == np.float32
    assert m.decision_function(X_test.astype(np.float32)).dtype == np.float32
    assert m.predict(X_test).dtype == object
    assert (
        m.score(X_test, np.array(["setosa", "versicolor", "virginica"], dtype=object)[y_test]) > 0.8
    )


def test_dask_in_dask_out_and_proba(data, reference):
    X, _, X_test, _ = data
    Xd = da.from_array(X_test, chunks=(25, -1))
    proba = reference.predict_proba(Xd)
    assert isinstance(proba, da.Array) and isinstance(reference.predict(Xd), da.Array)
    p = proba.compute()
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert (p >= 0).all()
    np.testing.assert_array_equal(p.argmax(axis=1), reference.predict(X_test))


# --- LRC -----------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha, beta", [(1e-4, 1.0), (1e-2, 3.0), (0.0, 1.0)])
def test_lrc_equals_a_direct_ridge_solve(data, alpha, beta):
    X, y, X_test, _ = data
    m = LRClassifier(alpha=alpha, beta=beta, chunk_rows=41).fit(X, y)
    D, mean, A_tilde, F = lrc_oracle(X, y, alpha, beta)
    np.testing.assert_allclose(m.weights_, D, rtol=1e-8, atol=1e-10)
    B_tilde = np.vstack([np.sqrt(beta) * np.ones(X_test.shape[0]), (X_test - mean).T])
    np.testing.assert_allclose(m.decision_function(X_test), (D @ B_tilde).T, atol=1e-9)
    np.testing.assert_array_equal(m.predict(X_test), (D @ B_tilde).argmax(axis=0))
    epsilon, gamma = diagnostics_oracle(F, D, A_tilde)
    assert m.fitting_error_ == pytest.approx(epsilon, rel=1e-8)
    assert m.spectral_risk_ == pytest.approx(gamma, rel=1e-8)
    assert m.rank_ == X.shape[1] + 1 and m.n_passes_ == 1
    # footnote 4 of the paper: 1ᵀD* = [1, 0, …, 0] without regularisation
    if alpha == 0:
        np.testing.assert_allclose(
            np.sqrt(beta) * D.sum(axis=0), np.r_[1.0, np.zeros(X.shape[1])], atol=1e-9
        )


def test_lrc_chunks_and_unlabeled_rows(data):
    X, y, X_test, _ = data
    ref = LRClassifier().fit(X, y)
    X_all = np.vstack([X, np.full((5, X.shape[1]), 100.0)])
    y_all = np.concatenate([y, [-1] * 5])
    m = LRClassifier().fit(da.from_array(X_all, chunks=((50, 3, 100, 12), -1)), y_all)
    np.testing.assert_allclose(m.weights_, ref.weights_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(m.predict_proba(X_test).sum(axis=1), 1.0)


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize("Est", [NRBFNClassifier, LRClassifier])
def test_nonfinite_values_are_refused(data, Est):
    X, y, _, _ = data
    for bad in (np.nan, np.inf):
        Xb = X.copy()
        Xb[7, 2] = bad
        with pytest.raises(ValueError, match=r"X contains 1 NaN or infinite value\(s\); impute"):
            Est(chunk_rows=50).fit(Xb, y)


@pytest.mark.parametrize("Est", [NRBFNClassifier, LRClassifier])
def test_bad_shapes_and_labels(data, Est):
    X, y, _, _ = data
    with pytest.raises(ValueError, match="X has 160 rows but y has 159 labels"):
        Est().fit(X, y[:-1])
    with pytest.raises(ValueError, match="only one class"):
        Est().fit(X, np.zeros(160, dtype=int))
    with pytest.raises(ValueError, match="All rows of y are unlabeled"):
        Est().fit(X, -np.ones(160, dtype=int))
    m = Est(**({"n_neighbors": 5} if Est is NRBFNClassifier else {})).fit(X, y)
    with pytest.raises(ValueError, match="X has 4 features, but .* is expecting 5 features"):
        m.predict(X[:, :4])


@pytest.mark.parametrize("value", [0.0, -0.1, 1.5, "high"])
def test_confidence_threshold_outside_0_1(data, value):
    X, y, _, _ = data
    with pytest.raises(
        ValueError,
        match=r"The 'confidence_threshold' parameter of NRBFNClassifier "
        r"must be a float in the range \(0.0, 1.0\]",
    ):
        NRBFNClassifier(confidence_threshold=value).fit(X, y)


def test_other_bad_parameters(data):
    X, y, _, _ = data
    with pytest.raises(
        ValueError, match=r"The 'alpha' parameter of NRBFNClassifier must be a float >= 0"
    ):
        NRBFNClassifier(alpha=-1.0).fit(X, y)
    with pytest.raises(ValueError, match=r"The 'alpha' parameter of NRBFNClassifier must be"):
        NRBFNClassifier(alpha=[]).fit(X, y)
    with pytest.raises(
        ValueError, match=r"The 'cv' parameter of NRBFNClassifier must be an int in the range \[2"
    ):
        NRBFNClassifier(cv=1).fit(X, y)
    with pytest.raises(
        ValueError, match=r"max_basis=2 is smaller than the number of classes \(3\)"
    ):
        NRBFNClassifier(max_basis=2).fit(X, y)
    with pytest.raises(
        ValueError, match=r"The 'beta' parameter of LRClassifier must be a float in the range \(0.0"
    ):
        LRClassifier(beta=0.0).fit(X, y)


def test_n_neighbors_not_below_training_rows(data):
    from scalenc.exceptions import DataWarning

    X, y, _, _ = data
    y_part = np.where(np.arange(y.size) < 20, y, -1)  # 20 labeled rows
    with pytest.warns(
        DataWarning,
        match=r"n_neighbors=20 is not smaller than the number of labeled training rows "
        r"\(20\).*n_neighbors=19 is used",
    ):
        m = NRBFNClassifier(n_neighbors=20).fit(X, y_part)
    assert m.n_neighbors_ == 19
    exact = NRBFNClassifier(n_neighbors=19).fit(X[:20], y[:20])
    np.testing.assert_allclose(m.confidence_, exact.confidence_, rtol=1e-12)
    auto = NRBFNClassifier().fit(X[:20], y[:20])  # the default reduces k without a warning
    assert auto.n_neighbors_ == 19
    assert NRBFNClassifier().fit(X, y).n_neighbors_ == 20  # the paper's k


def test_singular_system_names_alpha(data):
    X, y, _, _ = data
    X2, y2 = np.vstack([X[:40], X[:40]]), np.concatenate([y[:40], y[:40]])  # duplicated rows
    with pytest.warns(
        UserWarning, match=r"singular or ill-conditioned with alpha=0.0.*Increase alpha"
    ):
        m = NRBFNClassifier(n_neighbors=5, alpha=0.0, n_basis=80).fit(X2, y2)
    assert m.rank_ < 80
    assert m.score(X2, y2) > 0.8
    with pytest.warns(UserWarning, match=r"alpha=0.0"):
        LRClassifier(alpha=0.0).fit(np.hstack([X, X]), y)  # collinear columns


# --- scikit-learn contract ---------------------------------------------------------------


# Defaults (and LRClassifier) are checked in tests/base/test_estimator_checks.py; here a small
# k: the same contract on other parameters, in CI's slow run (6 s of nRBFN's searches)
@pytest.mark.slow
@parametrize_with_checks(
    [NRBFNClassifier(n_neighbors=3, random_state=0)],
    expected_failed_checks=expected_failed_checks,
)
def test_sklearn_compatible(estimator, check):
    with dask.config.set(scheduler="sync"):
        check(estimator)


def test_pipeline_and_grid_search(data):
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y, X_test, y_test = data
    pipe = make_pipeline(StandardScaler(), NRBFNClassifier(n_neighbors=5))
    search = GridSearchCV(pipe, {"nrbfnclassifier__confidence_threshold": [0.5, 0.9]}, cv=3)
    search.fit(X, y)
    assert search.score(X_test, y_test) > 0.8


def test_usps_reproduces_the_paper():
    """Table 2 / Table 5 on USPS: basis 19.9 %, test error 4.9 %, ε 1.056, γ 4.1e8."""
    from conftest import shared_dataset

    d = shared_dataset("usps")
    X = 2 * d["X"] - 1  # the classic [-1, 1] USPS scale
    train, test = d["train_idx"], d["test_idx"]
    paper = dict(alpha=1e-13, n_basis=None)  # the paper's λ and confidence rule
    m = NRBFNClassifier(chunk_rows=2000, **paper).fit(X[train], d["y"][train])
    assert m.basis_fraction_ == pytest.approx(0.199, abs=0.002)
    assert 1 - m.score(X[test], d["y"][test]) <= 0.050
    assert m.fitting_error_ == pytest.approx(1.056, abs=0.001)
    assert m.spectral_risk_ == pytest.approx(4.1e8, rel=0.05)


# --- memory-aware defaults ------------------------------------------------------------


def _quiet_fit(est, X, y, **kwargs):
    import warnings

    from scalenc.exceptions import BasisCappedWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BasisCappedWarning)
        return est.fit(X, y, **kwargs)


def test_defaults_run_the_exact_algorithm_when_it_fits(data, reference):
    X, y, _, _ = data
    m = NRBFNClassifier(n_neighbors=7, alpha=1e-9, n_basis=None).fit(X, y)  # no warning
    assert m.fit_mode_ == "exact"
    assert m.memory_plan_["soft_knn"]["mode"] == "exact"
    assert m.memory_plan_["basis"]["r"] == reference.basis_indices_.size
    np.testing.assert_array_equal(m.basis_indices_, reference.basis_indices_)
    np.testing.assert_allclose(m.weights_, reference.weights_, rtol=1e-12, atol=0)
    plan = m.memory_plan_
    assert plan["gram"]["client"] + plan["gram"]["worker"] <= plan["budget"]["client"]


def test_auto_cap_is_the_explicit_cap(data, reference, monkeypatch):
    from scalenc.exceptions import BasisCappedWarning
    from scalenc.nrbfn import plan as _nrbfn_plan

    X, y, _, _ = data
    r = reference.basis_indices_.size
    monkeypatch.setattr(_nrbfn_plan, "MAX_AUTO_BASIS", r // 2)
    with pytest.warns(BasisCappedWarning, match=rf"more than max_basis='auto' = {r // 2} \(the"):
        m = NRBFNClassifier(**PARAMS).fit(X, y)
    assert m.basis_indices_.size == r // 2 and m.fit_mode_ == "capped"
    assert m.memory_plan_["basis"] == {"wanted": r, "r": r // 2}
    # the cap keeps the same rows as an explicit max_basis of that size
    explicit = _quiet_fit(NRBFNClassifier(**PARAMS, max_basis=r // 2), X, y)
    np.testing.assert_array_equal(m.basis_indices_, explicit.basis_indices_)
    np.testing.assert_allclose(m.weights_, explicit.weights_, rtol=1e-12)


def test_cost_cap_is_the_gram_work_of_the_soft_knn(data, reference, monkeypatch):
    """max_basis="auto" keeps at most the r whose Gram work n·r² is GRAM_WORK_SHARE times
    the soft-KNN's n·c·(p + 784): here (160 rows, the exact search) r = √(share·160·789),
    set below the rule's basis; the rows kept are those of an explicit max_basis."""
    from scalenc.exceptions import BasisCappedWarning
    from scalenc.nrbfn import plan as P

    X, y, _, _ = data
    r_rule = reference.basis_indices_.size
    share = (r_rule // 2) ** 2 / (160 * (5 + P.SELECT_FLOPS_PER_SCORE))
    monkeypatch.setattr(P, "GRAM_WORK_SHARE", share)
    monkeypatch.setattr(P, "FREE_GRAM_WORK", 0.0)
    r_cost = math.isqrt(int(share * 160 * (5 + P.SELECT_FLOPS_PER_SCORE)))
    assert K_OF(y) < r_cost < r_rule
    with pytest.warns(
        BasisCappedWarning, match=rf"max_basis='auto' = {r_cost} \(the basis whose Gram"
    ):
        m = NRBFNClassifier(**PARAMS).fit(X, y)
    assert m.basis_indices_.size == r_cost and m.fit_mode_ == "capped"
    plan = m.memory_plan_
    assert plan["max_basis_source"] == "cost" and plan["cost_basis"] == r_cost
    assert plan["largest_basis_that_fits"] > r_rule  # memory would have allowed the rule's
    explicit = _quiet_fit(NRBFNClassifier(**PARAMS, max_basis=r_cost), X, y)
    np.testing.assert_array_equal(m.basis_indices_, explicit.basis_indices_)
    np.testing.assert_allclose(m.weights_, explicit.weights_, rtol=1e-12)
    # an explicit cap, or n_basis, is the user's: no cost cap
    assert (
        _quiet_fit(NRBFNClassifier(**PARAMS, max_basis=r_rule), X, y).basis_indices_.size == r_rule
    )
    assert NRBFNClassifier(**{**PARAMS, "n_basis": r_rule}).fit(X, y).basis_indices_.size == r_rule


def K_OF(y):
    return np.unique(y).size


def test_cost_basis_is_independent_of_n_and_grows_with_candidates_and_p():
    from scalenc.nrbfn import plan as P

    def problem(n, p):
        return P.Problem(n, n, p, 4, 3, 20, [n // 4] * 4, 2, 8, False)

    big = {"worker": 10**12, "client": 10**12}
    # the sampled search: c candidates, whatever n
    assert P.cost_basis(problem(10**6, 256), 10_000) == P.cost_basis(problem(10**8, 256), 10_000)
    assert P.cost_basis(problem(10**6, 256), 10_000) == int(np.sqrt(10_000 * (256 + 784)))
    assert P.cost_basis(problem(10**6, 16), 10_000) < P.cost_basis(problem(10**6, 256), 10_000)
    # the exact search: c = n; small problems keep FREE_GRAM_WORK
    assert P.cost_basis(problem(45_000, 42), None) == int(np.sqrt(45_000 * (42 + 784)))
    assert P.cost_basis(problem(1000, 4), None) >= 1000
    # plan_fit: the auto cap is the cost basis where it is the smaller, and sampled
    # candidates are max(MIN_CANDIDATES, 2 cap) for that cap
    params = dict(n_basis=None, max_basis="auto", n_candidates="auto", memory_limit=None,
                  split_every=8)  # fmt: skip
    plan = P.plan_fit(params, "NRBFN", problem(10**6, 256), big, "test", 1)
    assert plan.cap_source == "cost" and plan.max_basis == plan.r_cost == 3224
    assert plan.candidates == P.MIN_CANDIDATES
    plan = P.plan_fit({**params, "max_basis": 9000}, "NRBFN", problem(10**6, 256), big, "t", 1)
    assert plan.max_basis == 9000 and plan.cap_source is None


def test_memory_budget_sets_the_cap():
    from scalenc.nrbfn import plan as P

    X = np.random.default_rng(0).normal(size=(3000, 4))
    y = (X[:, 0] + np.random.default_rng(1).normal(size=3000) > 0).astype(int)  # overlapping
    problem = P.Problem(3000, 3000, 4, 8, 2, 20, [300] * 10, 1, 8, False)
    limit = max(P.basis_bytes(problem, 300).values())
    knn = P.knn_exact_bytes(problem)["client"]
    assert knn < limit  # the exact search fits; the basis of ~1500 rows does not
    rule = dict(alpha=1e-13, n_basis=None)  # the confidence rule's basis, no folds
    with dask.config.set(scheduler="sync"):
        with pytest.warns(BasisCappedWarning_(), match=r"max_basis='auto' = 300 \(the rows"):
            m = NRBFNClassifier(memory_limit=limit, chunk_rows=300, **rule).fit(X, y)
        assert m.basis_indices_.size == 300 and m.memory_plan_["largest_basis_that_fits"] == 300
        with pytest.raises(MemoryError, match=r"asks for a basis of r=\d+ rows.*at most r=300"):
            NRBFNClassifier(memory_limit=limit, max_basis=None, chunk_rows=300, **rule).fit(X, y)
        with pytest.raises(
            MemoryError, match=r"max_basis=1000 needs about .*Pass max_basis <= 300"
        ):
            NRBFNClassifier(memory_limit=limit, max_basis=1000, chunk_rows=300, **rule).fit(X, y)


def BasisCappedWarning_():
    from scalenc.exceptions import BasisCappedWarning

    return BasisCappedWarning


def test_too_small_memory_limit_is_refused_before_any_pass(data, monkeypatch):
    X, y, _, _ = data
    from scalenc.engine import passes as passes_module

    def no_pass(*args, **kwargs):  # pragma: no cover - must not run
        raise AssertionError("a pass over X ran")

    monkeypatch.setattr(passes_module, "kneighbors_all_rows", no_pass)
    monkeypatch.setattr(passes_module, "kneighbors_pass", no_pass)
    with pytest.raises(
        MemoryError, match=r"cannot fit in the memory budget of 1 kB .*memory_limit"
    ):
        NRBFNClassifier(memory_limit="1kB").fit(X, y)
    with pytest.raises(ValueError, match=r"The 'memory_limit' parameter of NRBFNClassifier must"):
        NRBFNClassifier(memory_limit="lots").fit(X, y)
    with pytest.raises(MemoryError, match=r"n_candidates=None \(the exact all-rows soft-KNN\)"):
        NRBFNClassifier(n_candidates=None, memory_limit=200_000).fit(X, y)


def test_auto_samples_candidates_when_the_exact_search_is_too_costly(data, monkeypatch):
    from scalenc.exceptions import BasisCappedWarning
    from scalenc.nrbfn import plan as _nrbfn_plan

    X, y, X_test, y_test = data
    monkeypatch.setattr(_nrbfn_plan, "EXACT_KNN_FLOPS", 160 * 5 * 100.0)  # c n p <= this
    monkeypatch.setattr(_nrbfn_plan, "MIN_CANDIDATES", 40)  # c <= EXACT_KNN_FLOPS / (2 n p) = 50
    with pytest.warns(BasisCappedWarning, match=r"sample of 50 soft-KNN candidates, not all"):
        m = NRBFNClassifier(**PARAMS, random_state=3, chunk_rows=45).fit(X, y)
    assert m.fit_mode_ in ("sampled", "sampled+capped")
    assert m.candidate_indices_.size == 50
    same = NRBFNClassifier(**PARAMS, n_candidates=50, random_state=3).fit(X, y)  # no warning
    np.testing.assert_array_equal(same.basis_indices_, m.basis_indices_)
    np.testing.assert_allclose(same.weights_, m.weights_, rtol=1e-9, atol=1e-12)
    assert m.score(X_test, y_test) > 0.8


def test_plan_estimates_grow_with_folds_blocks_and_fan_in():
    from scalenc.engine import memory
    from scalenc.nrbfn import plan as P

    base = P.Problem(10**6, 10**6, 50, 8, 3, 20, [10**5] * 10, 2, 8, False)
    one = P.gram_bytes(base, 5000)["client"]
    assert P.gram_bytes(base, 5000, n_folds=5)["client"] > 3 * one
    narrow = P.Problem(10**6, 10**6, 50, 8, 3, 20, [10**5] * 10, 2, 2, False)
    assert P.gram_bytes(narrow, 5000)["client"] < one
    budget = {"worker": 4 * 10**9, "client": 4 * 10**9}
    r = P.largest_basis(base, budget)
    assert max(P.basis_bytes(base, r).values()) <= 4e9 < max(P.basis_bytes(base, r + 1).values())
    affordable, why = P.exact_knn_affordable(base, budget)  # n² p = 5e13 flops
    assert not affordable
    # the message spells its numbers: n, p, the selection's constant and what it stands for
    assert "n² (p + 784) = 1000000² × (50 + 784) = 8.3e+14: n² p multiply-adds" in why
    assert "the selection of each row's k nearest, which costs what a product of 784" in why
    c = P.auto_candidates(base, budget, r)
    assert 2 * r <= c and 2.0 * c * 10**6 * 50 <= P.EXACT_KNN_FLOPS
    assert memory.parse_memory_limit("4GB") == 4 * 10**9 and memory.parse_memory_limit(123) == 123


@pytest.mark.parametrize("given", [False, True])
@pytest.mark.parametrize("chunk", [600, 97])
def test_gram_pass_of_one_fold_is_that_fold(chunk, given):
    """Oracle: a Gram pass of ``only_fold`` = f is fold f's slice of the all-folds pass
    (the rows of other folds and unlabeled rows left out), whatever the chunking."""
    from scalenc.nrbfn.passes import gram_pass

    rng = np.random.default_rng(4)
    X = rng.normal(size=(600, 4))
    codes = rng.integers(-1, 3, 600)  # a quarter unlabeled
    basis, n_folds = X[rng.choice(600, 40, replace=False)], 5
    folds = da.from_array(rng.integers(0, n_folds, 600), chunks=chunk) if given else None
    Xd, cd = da.from_array(X, chunks=(chunk, 4)), da.from_array(codes, chunks=chunk)
    kw = dict(n_folds=n_folds, seed=7, folds=folds)
    with dask.config.set(scheduler="threads"):
        (every,) = dask.compute(gram_pass(Xd, cd, basis, ((1.3, True),), 3, **kw))
        ones = dask.compute(
            *(gram_pass(Xd, cd, basis, ((1.3, True),), 3, **kw, only_fold=f) for f in range(5))
        )
    lower = np.tril_indices(40)
    for f, one in enumerate(ones):
        assert one["M"].shape == (1, 1, 40, 40) and one["B"].shape == (1, 1, 3, 40)
        np.testing.assert_allclose(one["M"][0, 0][lower], every["M"][0, f][lower], rtol=1e-12)
        np.testing.assert_allclose(one["B"][0, 0], every["B"][0, f], rtol=1e-12)
        assert one["count"][0] == every["count"][f] > 0
    assert sum(one["count"][0] for one in ones) == np.count_nonzero(codes >= 0)


def test_folds_that_do_not_fit_one_gram_pass_take_one_pass_each():
    """A basis whose n_folds Grams per partial exceed the budget, where one fold's fit, is
    fitted with one Gram pass per fold: the same model, four more passes, and the plan
    says so (MNIST's grown basis was capped at 4 300 rows by the 5-fold partials)."""
    from scalenc.nrbfn import plan as P
    from scalenc.nrbfn.network import problem_of

    X, y = make_blobs(600, 4, 3, seed=5, sep=0.4)
    params = dict(n_neighbors=7, n_basis=150, alpha="cv", random_state=0, chunk_rows=100)
    with dask.config.set(scheduler="threads", num_workers=2):
        Xd = da.from_array(X, chunks=(100, 4))
        problem = problem_of(Xd, 600, 3, 7)
        per_fold = P.gram_bytes(problem, 150, 5, per_fold=True)["client"]
        one_pass = P.gram_bytes(problem, 150, 5)["client"]
        limit = (per_fold + one_pass) // 2
        assert max(P.solve_bytes(problem, 150, 5)["client"], per_fold) < limit < one_pass
        roomy = NRBFNClassifier(**params).fit(X, y)
        lean = NRBFNClassifier(**params, memory_limit=limit).fit(X, y)
    assert roomy.memory_plan_["gram"]["per_fold"] is False
    assert lean.memory_plan_["gram"]["per_fold"] is True
    assert lean.memory_plan_["gram"]["client"] == per_fold
    assert lean.n_passes_ == roomy.n_passes_ + 4
    np.testing.assert_array_equal(lean.basis_indices_, roomy.basis_indices_)
    assert lean.alpha_ == roomy.alpha_
    np.testing.assert_allclose(lean.cv_error_, roomy.cv_error_)
    np.testing.assert_allclose(lean.weights_, roomy.weights_, rtol=1e-8, atol=1e-10)
    np.testing.assert_array_equal(lean.predict(X), roomy.predict(X))


def test_a_basis_of_folds_fits_where_one_pass_per_fold_does():
    """The plan sizes a basis with folds by the leaner Gram (one pass per fold): at the
    same budget a larger r than the partials of every fold allowed."""
    from scalenc.nrbfn import plan as P

    problem = P.Problem(60_000, 60_000, 784, 4, 10, 20, [10_000] * 6, 2, 8, False)
    budget = {"worker": 6 * 10**9, "client": 6 * 10**9}
    r = P.largest_basis(problem, budget, n_folds=5)
    assert P.gram_per_fold(problem, budget, r, 5)
    assert not P.fits(P.gram_bytes(problem, r, 5), budget)
    assert P.fits(P.gram_bytes(problem, r, 5, per_fold=True), budget)
    one_pass_r = max(q for q in range(1000, r, 50) if P.fits(P.gram_bytes(problem, q, 5), budget))
    assert r > 1.7 * one_pass_r
    assert not P.gram_per_fold(problem, budget, one_pass_r, 5)
    assert not P.gram_per_fold(problem, budget, r, 1)  # no folds: one pass


@pytest.mark.parametrize(
    "n, p, exact",
    [(60_000, 784, True), (45_038, 42, True), (67_312, 29, True), (329_346, 41, False)],
)
def test_exact_soft_knn_work_counts_the_selection(n, p, exact):
    """MNIST, Connect-4 and fars run the exact soft-KNN by default; the intrusion data's
    329 346 × 41 does not: its n² p (4.4e12) is small, but the k-nearest selection of its
    1.1e11 scores costs about what the product does at p = 784."""
    from scalenc.nrbfn import plan as P

    problem = P.Problem(n, n, p, 4, 10, 20, [n // 2, n - n // 2], 2, 8, False)
    budget = {"worker": 10**11, "client": 10**11}
    affordable, why = P.exact_knn_affordable(problem, budget)
    assert affordable is exact, why
    assert exact or "the selection of each row's k nearest" in why


# --- cross-validation splitters and the paper's per-fold refit ------------------------


def _normalized_kernel(A, G, sigma):
    """W̃ (r×n): the Gaussian kernel between basis and rows, normalised over the basis."""
    W = np.exp(-((G[:, None, :] - A[None, :, :]) ** 2).sum(-1) / (2 * sigma**2))
    return W / W.sum(axis=0, keepdims=True)


def _brute_force_cv(X, y, basis, sigma, grid, splits, basis_indices=None):
    """Each λ's held-out error rate, each split's model from its training rows. With
    ``basis_indices`` (a grown basis), a split's model leaves out the basis rows held out
    by it: the rows of W̃ (normalised over the whole basis) of the other basis rows."""
    errors = np.zeros(len(grid))
    F = np.eye(y.max() + 1)[y].T
    for train, held in splits:
        keep = np.ones(basis.shape[0], bool)
        if basis_indices is not None:
            keep = ~np.isin(basis_indices, np.arange(X.shape[0])[held])
        A = _normalized_kernel(X[train], basis, sigma)[keep]
        for a, lam in enumerate(grid):
            M = A @ A.T + lam * (A**2).sum() * np.eye(A.shape[0])
            W = F[:, train] @ A.T @ np.linalg.inv(M)
            scores = W @ _normalized_kernel(X[held], basis, sigma)[keep]
            errors[a] += np.count_nonzero(scores.argmax(axis=0) != y[held])
    return errors / X.shape[0]


@pytest.mark.parametrize("kind", ["kfold", "stratified", "iterable", "groups", "rule"])
def test_cv_splitters_equal_the_brute_force_search(data, kind):
    from sklearn.model_selection import GroupKFold, KFold, StratifiedKFold

    X, y, _, _ = data
    grid = [1e-1, 1e-3, 1e-9]
    groups = np.arange(X.shape[0]) % 7
    cv = {
        "kfold": KFold(4, shuffle=True, random_state=0),
        "stratified": StratifiedKFold(3),
        "iterable": list(KFold(3).split(X)),
        "groups": GroupKFold(3),
        "rule": KFold(4, shuffle=True, random_state=0),  # the confidence rule's basis
    }[kind]
    kwargs = {"groups": groups} if kind == "groups" else {}
    rule = {"n_basis": None} if kind == "rule" else {}  # else grown, the default
    m = NRBFNClassifier(n_neighbors=7, alpha=grid, cv=cv, **rule).fit(
        da.from_array(X, chunks=(45, -1)), y, **kwargs
    )
    splits = list(cv.split(X, y, kwargs.get("groups"))) if kind != "iterable" else cv
    own = None if rule else m.basis_indices_
    expected = _brute_force_cv(X, y, m.basis_, m.sigma_, grid, splits, own)
    tried = ~np.isnan(m.cv_error_)  # a grown basis's larger sizes try the best λ's neighbours
    np.testing.assert_allclose(m.cv_error_[tried], expected[tried], rtol=1e-12)
    assert m.alpha_ == np.asarray(grid)[tried][int(np.argmin(expected[tried]))]


def test_cv_splits_that_do_not_partition_are_refused(data):
    from sklearn.model_selection import ShuffleSplit

    X, y, _, _ = data
    with pytest.raises(ValueError, match=r"held-out rows of the splits disjoint.*Split 1 is not"):
        NRBFNClassifier(n_neighbors=7, alpha="cv", cv=ShuffleSplit(3, random_state=0)).fit(X, y)
    with pytest.raises(ValueError, match=r"groups were given but cv is an int"):
        NRBFNClassifier(n_neighbors=7, alpha="cv").fit(X, y, groups=np.zeros(len(y)))


def test_cv_refit_basis_runs_algorithm_2_on_each_fold(data):
    X, y, _, _ = data
    grid = [1e-1, 1e-3, 1e-9]
    m = NRBFNClassifier(n_neighbors=7, alpha=grid, cv=3, cv_refit_basis=True, random_state=4)
    m.fit(X, y)
    folds = fold_of(np.arange(X.shape[0]), 3, 4)
    errors = np.zeros(len(grid))
    for f in range(3):
        train, held = folds != f, folds == f
        for a, lam in enumerate(grid):
            _, G, sigma, W = train_oracle(X[train], y[train], lam, 7, 0.9)
            _, labels = predict_oracle(X[held], G, sigma, W)
            errors[a] += np.count_nonzero(labels != y[held])
    np.testing.assert_allclose(m.cv_error_, errors / X.shape[0])
    assert m.alpha_ == grid[int(np.argmin(errors))]
    _, _, _, W_full = train_oracle(X, y, m.alpha_, 7, 0.9)
    np.testing.assert_allclose(m.weights_, W_full, rtol=1e-6, atol=1e-6 * np.abs(W_full).max())
    assert m.n_passes_ == 3 * 4 + 1 + 4  # per fold: k-NN, basis, σ, Gram; scoring; final fit


# --- the kernel a row tile at a time: memory O(tile × r), not O(block × r) ----------------


def _plain_scores(X, basis, sigma, weights):
    """F̂ᵀ of Algorithm 3 in plain float64 NumPy: exp(−‖x − g‖²/(2σ²)), rows normalised."""
    d2 = ((X[:, None, :].astype(np.float64) - basis[None, :, :]) ** 2).sum(axis=2)
    W = np.exp(-(d2 - d2.min(axis=1, keepdims=True)) / (2 * sigma**2))
    return (W / W.sum(axis=1, keepdims=True)) @ weights.T


def test_scores_by_row_tiles_match_plain_numpy(monkeypatch):
    from scalenc.nrbfn import blocks as nb

    rng = np.random.default_rng(60)
    X, basis = rng.normal(size=(203, 5)), rng.normal(size=(40, 5))
    weights = rng.normal(size=(3, 40))
    expected = _plain_scores(X, basis, 1.3, weights)
    monkeypatch.setattr(nb, "_basis_tiles", lambda n_rows, r: 17)  # 12 tiles, the last short
    got = nb.nrbfn_scores(X, basis=basis, sigma=1.3, weights=weights)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("refit", [False, True])
def test_cv_errors_by_row_tiles_match_whole_blocks(monkeypatch, refit):
    """The CV error passes (basis once, or Algorithm 2 per fold) are the same with kernel
    tiles of 7 rows as with each block in one tile."""
    X, y = make_blobs(300, 4, 3, seed=61)
    Xd, yd = da.from_array(X, chunks=(120, -1)), da.from_array(y, chunks=120)
    params = {"alpha": "cv", "cv": 3, "cv_refit_basis": refit, "random_state": 0}
    whole = NRBFNClassifier(**params).fit(Xd, yd)
    monkeypatch.setattr("scalenc.nrbfn.blocks._basis_tiles", lambda n_rows, r: 7)
    tiled = NRBFNClassifier(**params).fit(Xd, yd)
    np.testing.assert_array_equal(tiled.cv_error_, whole.cv_error_)
    assert tiled.alpha_ == whole.alpha_
    np.testing.assert_array_equal(np.asarray(tiled.predict(Xd)), np.asarray(whole.predict(Xd)))


def test_scores_memory_is_a_tile_not_the_block():
    """A 20 000-row block against a basis of 4 000 rows: W̃ᵀ of the block would be 640 MB
    (and the products another 320 MB); a tile at a time the scores allocate a few MB."""
    import tracemalloc

    from scalenc.nrbfn import blocks as nb

    rng = np.random.default_rng(62)
    X = rng.normal(size=(20_000, 16)).astype(np.float32)
    basis, weights = rng.normal(size=(4_000, 16)), rng.normal(size=(3, 4_000))
    tracemalloc.start()
    try:
        scores = nb.nrbfn_scores(X, basis=basis, sigma=2.0, weights=weights)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert scores.shape == (20_000, 3) and np.isfinite(scores).all()
    assert peak < 80e6, f"{peak / 1e6:.0f} MB traced"


def test_a_grown_basis_is_capped_by_the_bytes_of_its_solves():
    """A grown basis stops where its solves take GROWN_BYTES, whatever a larger budget
    allows (letter's 14 000 rows: r = 7 282, not the 10 000 of a 6.1 GB budget); the
    confidence rule's basis keeps the budget's cap."""
    from scalenc.nrbfn import plan as P

    problem = P.Problem(14_000, 14_000, 16, 8, 26, 20, [14_000], 2, 8, False)
    budget = {"worker": 6_100_000_000, "client": 6_100_000_000}
    params = dict(n_basis="auto", max_basis="auto", n_candidates="auto", memory_limit=None,
                  split_every=8)  # fmt: skip
    fit_plan = P.plan_fit(params, "NRBFN", problem, budget, "test", 5)
    r = fit_plan.max_basis
    assert fit_plan.cap_source == "GROWN_BYTES" and r == P.grown_basis(problem, 5) == 7282
    assert P.solve_bytes(problem, r, 5)["client"] <= P.GROWN_BYTES
    assert P.solve_bytes(problem, r + 1, 5)["client"] > P.GROWN_BYTES
    rule = P.plan_fit({**params, "n_basis": None}, "NRBFN", problem, budget, "test", 5)
    assert rule.max_basis > r and rule.cap_source != "GROWN_BYTES"


def test_a_grown_basis_samples_candidates_for_the_one_pass_cap():
    """The soft-KNN candidates of a grown basis are twice the basis that one Gram pass
    allows, not the larger one that per-fold passes allow: the search is most of a large
    fit, and the growth seldom reaches the cap."""
    from scalenc.nrbfn import plan as P

    problem = P.Problem(10**6, 10**6, 64, 4, 5, 20, [25_000] * 40, 2, 8, False)
    budget = {"worker": 6 * 10**9, "client": 6 * 10**9}
    params = dict(n_basis="auto", max_basis="auto", n_candidates="auto", memory_limit=None,
                  split_every=8)  # fmt: skip
    fit_plan = P.plan_fit(params, "NRBFN", problem, budget, "test", 5)
    one_pass = P.largest_basis(problem, budget, 5, per_fold=False)
    assert fit_plan.max_basis == min(P.largest_basis(problem, budget, 5), P.MAX_AUTO_BASIS)
    assert one_pass < fit_plan.max_basis  # the per-fold passes allow a larger basis
    assert fit_plan.candidates == max(P.MIN_CANDIDATES, 2 * one_pass)
    # the confidence rule keeps its candidates for its cap
    rule = P.plan_fit({**params, "n_basis": None}, "NRBFN", problem, budget, "test", 1)
    assert rule.candidates == max(P.MIN_CANDIDATES, 2 * rule.max_basis)
