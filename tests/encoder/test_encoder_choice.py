"""The encoder's kernel choice for large n (issue 36): the kernels compared on a fixed
sample of rows first, then over every row for those left.

Oracles: the same fit with every row deciding (``choice_sample=None``, the paper's
passes), Shen's rule itself (``choose_kernel``) on exact cross-entropies, and the sample
drawn in NumPy from the row hashes.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from _counting import counted
from conftest import make_blobs

from scalenc import EncoderClassifier, load_model, save_model
from scalenc.encoder import choice
from scalenc.encoder import passes as encoder_passes
from scalenc.encoder.blocks import choose_kernel
from scalenc.encoder.kernels import embed, get_kernel
from scalenc.engine import passes
from scalenc.engine.cluster import compute
from scalenc.math.sampling import row_hash
from scalenc.simulate import simulate


def _exact(**params):
    return EncoderClassifier(choice_sample=None, **params)


def _clear_blobs():
    """The linear kernel wins by far (the sample drops the other two)."""
    return make_blobs(12000, 8, 4, seed=1, sep=1.0, unlabeled=0.1)


def _spearman_data():
    """A monotone transform of blobs: the rank kernel wins by far."""
    X, y = make_blobs(12000, 30, 3, seed=5, sep=1.0)
    return np.exp(2.5 * X), y


def _many_classes():
    """Linear wins by far with more classes than features: its statistics left alone come
    from X's p×p scatter (``EncoderClassifier._linear_statistics``)."""
    return make_blobs(12000, 6, 12, seed=1, sep=1.0, unlabeled=0.1)


@pytest.mark.parametrize(
    "make", [_clear_blobs, _spearman_data, _many_classes], ids=["linear", "spearman", "p<K"]
)
def test_the_sample_drops_kernels_and_every_row_decides_among_the_others(make):
    X, y = make()
    Xd, reads = counted(X, 1500)
    model = EncoderClassifier(choice_sample=2000).fit(Xd, y)
    exact = _exact().fit(X, y)
    plan = model.fit_plan_
    assert plan["name"] == "sample" and plan["sample_rows"] == 2000
    assert plan["dropped_by_sample"]  # not every kernel is evaluated on every row
    assert reads.passes() == model.n_passes_ == plan["passes_over_X"]
    assert model.kernel_.name == exact.kernel_.name
    np.testing.assert_allclose(model.coef_, exact.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(model.predict(X), exact.predict(X))
    compared = [
        m for m, k in enumerate(model.kernels_) if k.name in plan["compared_over_every_row"]
    ]
    dropped = [m for m, k in enumerate(model.kernels_) if k.name in plan["dropped_by_sample"]]
    np.testing.assert_allclose(
        model.cross_entropy_[compared], exact.cross_entropy_[compared], rtol=1e-9
    )
    assert set(model.cross_entropy_kind_[compared]) <= {"exact"}
    assert set(model.cross_entropy_kind_[dropped]) == {"sample"}
    assert np.isnan(model.cross_entropy_bounds_[dropped]).all()
    assert set(exact.cross_entropy_kind_) == {"exact"}
    np.testing.assert_array_equal(exact.cross_entropy_bounds_.T, [exact.cross_entropy_] * 2)
    # the sample's own estimates for the kernels it dropped: far from being chosen
    assert all(
        model.cross_entropy_[m] > (1 - model.min_improvement) * exact.cross_entropy_[0]
        or model.cross_entropy_[m] > exact.cross_entropy_[model.kernel_index_]
        for m in dropped
    )
    if not compared:  # one kernel left: its statistics in one more pass, nothing cached
        assert reads.passes() == 2
        assert list(model.stage_times_) == ["class_means", "sample", "embedding"]


def test_close_comparisons_keep_every_kernel(monkeypatch):
    """With margins too wide for any decision the sample drops nothing, and the passes
    over every row give the paper's choice and cross-entropies."""
    monkeypatch.setattr(choice, "LDA_MARGIN", 10.0)
    monkeypatch.setattr(choice, "excluded_within", lambda *args, **kwargs: set())
    X, y = make_blobs(6000, 6, 3, seed=2, sep=0.7, unlabeled=0.1)
    Xd, reads = counted(X, 700)
    model = EncoderClassifier(choice_sample=1500).fit(Xd, y)
    exact = _exact().fit(X, y)
    plan = model.fit_plan_
    assert plan["dropped_by_sample"] == [] and plan["decided_by_bounds"] == {}
    assert plan["compared_over_every_row"] == ["linear", "euclidean", "spearman"]
    assert reads.passes() == model.n_passes_ == plan["passes_over_X"] == 3
    np.testing.assert_allclose(model.cross_entropy_, exact.cross_entropy_, rtol=1e-9)
    assert model.kernel_index_ == exact.kernel_index_
    for ours, theirs in zip(model.lda_models_, exact.lda_models_):
        np.testing.assert_allclose(ours.coef, theirs.coef, rtol=1e-9, atol=1e-12)


def _separable_blobs():
    """Nearly separable classes: each c_m is made by a few rows, which a sample hardly
    sees."""
    return make_blobs(20000, 10, 4, seed=3, sep=4.0)


def _benchmark_like():
    """``encoder_scale.py``'s simulated stores, smaller: nearly separable classes where
    linear and Euclidean are close (c_m 7.96 and 7.50: the rule keeps linear)."""
    X, y = simulate("normal_noise", 200_000, 20, 5, random_state=0)
    return np.asarray(X), np.asarray(y)


def _first_look(X, y, kernels, U, rows):
    """What a sample of ``rows`` says (its LDAs), with the whitening of pass 2's bounds
    for every kernel (the sample gives it for the kernels it leaves, two or more)."""
    first = choice.sample_choice(
        X[rows], y[rows], kernels, U, np.bincount(y[y >= 0]), tol=1e-4, min_improvement=0.3
    )
    Z, K = embed(kernels, X[rows], U), U.shape[0]
    first.whiten = [choice.whitening(Z[:, m * K : (m + 1) * K]) for m in range(len(kernels))]
    return first


def _loss_sums_oracle(Z, codes, coef, intercept, whiten, n_kernels):
    """``stacked_loss_gradients``' sums written row by row in plain NumPy: each kernel's
    class scores, log-softmax, gradient, odds, whitened length, band and the sums of the
    rows of each kind."""
    from scalenc.encoder.blocks import NEAR_BANDS, NEAR_ODDS, TINY_ODDS

    K = coef.shape[0] // n_kernels
    keep = codes >= 0
    Z, codes = Z[keep], codes[keep]
    out = []
    for m in range(n_kernels):
        cols = slice(m * K, (m + 1) * K)
        x = np.hstack([Z[:, cols], np.ones((Z.shape[0], 1))])
        scores = Z[:, cols] @ coef[cols, cols] + intercept[cols]
        log_p = scores - scores.max(axis=1, keepdims=True)
        log_p -= np.log(np.exp(log_p).sum(axis=1, keepdims=True))
        loss = -log_p[np.arange(codes.size), codes]
        residual = np.exp(log_p)
        residual[np.arange(codes.size), codes] -= 1.0
        odds = np.expm1(loss)
        length = np.linalg.norm(x @ whiten[m], axis=1)
        near = (odds <= NEAR_ODDS) & (length <= NEAR_BANDS[-1])
        tiny = near & (odds <= TINY_ODDS)
        band = np.searchsorted(NEAR_BANDS, length)
        near_sums = np.zeros((len(NEAR_BANDS), K + 1, K + 1))
        tiny_sums = np.zeros(len(NEAR_BANDS))
        for i in np.flatnonzero(near):
            if tiny[i]:
                tiny_sums[band[i]] += length[i] ** 2
            else:
                near_sums[band[i]] += odds[i] * np.outer(x[i], x[i])
        far = x[~near]
        out.append(
            {
                "loglik": -loss.sum(),
                "gradient": x.T @ residual,
                "near": near_sums,
                "tiny": tiny_sums,
                "far": far.T @ far,
                "kinds": (int(tiny.sum()), int((near & ~tiny).sum()), int((~near).sum())),
            }
        )
    return out


@pytest.mark.parametrize("tile_bytes", [2**20, 4096 * 8])
@pytest.mark.parametrize("layout", ["C", "F"])
def test_pass_two_sums_equal_the_row_by_row_oracle(monkeypatch, tile_bytes, layout):
    """The sums pass 2 makes for the bounds (log-likelihood, gradient, the well-classified
    rows by band, the tiny ones, the others) equal the plain per-row computation, in
    row tiles of any size and for embeddings of either layout; the rows cover every
    kind and several bands."""
    from scalenc.encoder import blocks

    monkeypatch.setattr(blocks, "STACKED_TILE_BYTES", tile_bytes)
    X, y = make_blobs(6000, 6, 3, seed=4, sep=1.2, unlabeled=0.1)
    model = _exact(kernels=("linear", "euclidean")).fit(X, y)
    Z = np.asarray(
        blocks.embed_block(X, kernel=model.kernels_[0], U=model.class_means_, out_dtype=np.float64)
    )
    Z = np.hstack([Z, model.kernels_[1](X, model.class_means_)])
    Z = np.asfortranarray(Z) if layout == "F" else np.ascontiguousarray(Z)
    codes = np.where(y >= 0, np.searchsorted(model.classes_, y), -1)
    coef, intercept = encoder_passes.stacked_class_scores(model.lda_models_, 3)
    coef = coef * np.array([3.0, 0.7]).repeat(3)[:, None]  # sharper and flatter scores
    whiten = [choice.whitening(Z[:2000, m * 3 : (m + 1) * 3]) for m in range(2)]
    found = blocks.stacked_loss_gradients(Z, codes, coef, intercept, whiten, 2)
    expected = _loss_sums_oracle(Z, codes, coef, intercept, whiten, 2)
    assert all(min(e["kinds"]) > 0 for e in expected)  # tiny, near and far rows, both kernels
    assert all(np.count_nonzero(e["tiny"]) > 1 for e in expected)
    for ours, theirs in zip(found, expected):
        for key in ("loglik", "gradient", "near", "tiny", "far"):
            scale = np.abs(theirs[key]).max()
            np.testing.assert_allclose(ours[key], theirs[key], rtol=0, atol=1e-11 * scale)


@pytest.mark.parametrize(
    "make, rows",
    [(_clear_blobs, 2000), (_spearman_data, 2000), (_separable_blobs, 4000), (_clear_blobs, 60)],
    ids=["blobs", "spearman", "separable", "sixty-rows"],
)
def test_pass_two_bounds_hold_the_exact_cross_entropies(make, rows):
    """The oracle: every kernel's c_m under its exact LDA over every row (the paper's
    pass). Pass 2's bounds, from the sums under LDAs fitted on a sample (also one of 60
    rows, far from the exact LDA), hold it, across chunkings."""
    X, y = make()
    exact = _exact().fit(X, y)
    kernels, U = exact.kernels_, exact.class_means_
    drawn = np.sort(np.random.default_rng(1).choice(np.flatnonzero(y >= 0), rows, replace=False))
    first = _first_look(X, y, kernels, U, drawn)
    widths = []
    for chunks in (997, 6000):
        (found,) = compute(
            encoder_passes.embedding_moments_pass(
                da.from_array(X, chunks=(chunks, -1)), da.from_array(y, chunks=chunks),
                kernels, U, models=first.models, whiten=first.whiten,
            )
        )  # fmt: skip
        lower, upper = choice.cross_entropy_bounds(
            found["loss"], first.models, exact.lda_models_, first.whiten
        )
        c = exact.cross_entropy_
        assert np.all(lower <= c * (1 + 1e-9)) and np.all(c <= upper * (1 + 1e-9))
        widths.append(upper - lower)
    np.testing.assert_allclose(widths[0], widths[1], rtol=1e-4)


def test_the_sample_keeps_what_only_every_row_can_decide():
    """On the benchmark-like store the LDA fitted on a 65 536-row sample scores the
    sample far better than it scores other rows (the classes are nearly separable), and
    its in-sample cross-entropies alone dropped linear, which the rule over every row
    chooses. The sample's held-out half keeps both; pass 2's bounds choose linear."""
    X, y = _benchmark_like()
    model = EncoderClassifier(choice_sample=65_536).fit(X, y)
    exact = _exact().fit(X, y)
    assert exact.kernel_.name == "linear"
    assert model.fit_plan_["dropped_by_sample"] == ["spearman"]
    assert sorted(model.fit_plan_["decided_by_bounds"]) == ["euclidean", "linear"]
    assert model.kernel_.name == "linear" and model.n_passes_ == 2
    np.testing.assert_allclose(model.coef_, exact.coef_, rtol=1e-9, atol=1e-12)


def test_pass_two_decides_where_its_bounds_do_in_two_passes(monkeypatch):
    """Nearly separable classes, no kernel dropped by the sample: pass 2's bounds tell
    them apart, and the fit is the rule's choice over every row with the exact model, in
    two passes over X."""
    monkeypatch.setattr(choice, "CHOICE_Z", 1e6)  # brackets so wide the sample drops none
    X, y = _benchmark_like()
    Xd, reads = counted(X, 25_000)
    model = EncoderClassifier(choice_sample=65_536).fit(Xd, y)
    exact = _exact().fit(X, y)
    plan = model.fit_plan_
    assert plan["dropped_by_sample"] == [] and plan["compared_over_every_row"] == []
    assert sorted(plan["decided_by_bounds"]) == ["euclidean", "linear", "spearman"]
    assert reads.passes() == model.n_passes_ == plan["passes_over_X"] == 2
    assert list(model.stage_times_) == ["class_means", "sample", "embedding"]
    assert model.kernel_index_ == exact.kernel_index_
    np.testing.assert_allclose(model.coef_, exact.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(model.predict(X), exact.predict(X))
    for m, kernel in enumerate(model.kernels_):
        low, high = plan["decided_by_bounds"][kernel.name]
        assert low <= exact.cross_entropy_[m] * (1 + 1e-9) <= high * (1 + 2e-9)
        assert model.cross_entropy_[m] == pytest.approx((low + high) / 2)
        assert model.cross_entropy_kind_[m] == "interval"
        assert model.cross_entropy_bounds_[m].tolist() == [low, high]


def test_pass_two_leaves_close_kernels_to_their_exact_cross_entropies(monkeypatch):
    """Where the bounds cannot decide (here: made too wide), pass 3 computes the exact
    cross-entropies of the kernels left and the rule chooses among them."""
    monkeypatch.setattr(choice, "LDA_MARGIN", 10.0)  # the sample drops nothing
    real = choice.cross_entropy_bounds

    def wide(*args):
        lower, upper = real(*args)
        return lower - 1e9, upper + 1e9

    monkeypatch.setattr(choice, "cross_entropy_bounds", wide)
    X, y = _clear_blobs()
    model = EncoderClassifier(choice_sample=2000).fit(X, y)
    exact = _exact().fit(X, y)
    plan = model.fit_plan_
    assert plan["decided_by_bounds"] == {} and plan["dropped_by_sample"] == []
    assert plan["compared_over_every_row"] == ["linear", "euclidean", "spearman"]
    assert model.n_passes_ == plan["passes_over_X"] == 3
    np.testing.assert_allclose(model.cross_entropy_, exact.cross_entropy_, rtol=1e-9)
    assert model.kernel_index_ == exact.kernel_index_


def test_excluded_within_keeps_what_the_bounds_cannot_tell_apart():
    """Against the benchmark (linear, c_0) a kernel qualifies when c_m < 0.7 c_0: one
    whose interval lies clearly on one side of that line is decided, one across it not."""
    out = choice.excluded_within
    assert out([100.0, 100.0], [101.0, 106.0], range(2), min_improvement=0.3) == {1}
    assert out([100.0, 50.0], [101.0, 52.0], range(2), min_improvement=0.3) == {0}
    assert out([100.0, 69.0], [101.0, 72.0], range(2), min_improvement=0.3) == set()
    # between two kernels that both qualify, the smaller c wins unless the bounds overlap
    assert out([100.0, 40, 60], [100.0, 41, 61], range(3), min_improvement=0.3) == {0, 2}
    assert out([100.0, 40, 40.5], [100.0, 41, 41.5], range(3), min_improvement=0.3) == {0}


@pytest.mark.parametrize("n", [999, 1000])
def test_the_sample_halves_hold_its_embedding_row_for_row(n):
    """The sample's embedding held as its halves: even rows in one, odd in the other, as
    written whole or by parts, and its row tiles and columns read back in order."""
    rng = np.random.default_rng(0)
    X, U = rng.normal(size=(n, 5)), rng.normal(size=(3, 5))
    Z = embed([get_kernel(k) for k in ("linear", "euclidean", "spearman")], X, U)
    whole, parts = choice.Halves(n, 9), choice.Halves(n, 9)
    whole[:, :] = Z
    for start, stop in ((0, 301), (301, 302), (302, n)):
        parts.part(start, stop)[: stop - start, 2:9] = Z[start:stop, 2:9]
        parts.part(start, stop)[:, :2] = Z[start:stop, :2]
    for held in (whole, parts):
        for h in (0, 1):
            np.testing.assert_array_equal(held.halves[h], Z[h::2])
        for start, stop in ((0, 300), (301, 700), (n - 5, n), (7, 8)):
            np.testing.assert_array_equal(held[start:stop], Z[start:stop])
        np.testing.assert_array_equal(held.columns(3, 6), Z[:, 3:6])


def test_the_sample_on_two_threads_says_the_same(monkeypatch):
    """Its embedding's tiles, halves' moments and row losses side by side: the same values."""
    monkeypatch.setattr(choice, "CHOICE_Z", 1e6)  # none dropped: every kernel's whitening
    X, y = _clear_blobs()
    X, y = X[:3001], y[:3001]
    U = np.stack([X[y == k].mean(axis=0) for k in range(y.max() + 1)])
    kernels = [get_kernel(k) for k in ("linear", "euclidean", "spearman")]
    look = [
        choice.sample_choice(
            X,
            y,
            kernels,
            U,
            np.bincount(y[y >= 0]) * 10,
            tol=1e-4,
            min_improvement=0.3,
            threads=threads,
        )  # fmt: skip
        for threads in (1, 2)
    ]
    assert look[0].dropped == look[1].dropped == set() and len(look[1].whiten) == 3
    np.testing.assert_array_equal(look[0].cross_entropy, look[1].cross_entropy)
    for m, V in look[0].whiten.items():
        np.testing.assert_array_equal(V, look[1].whiten[m])
        np.testing.assert_array_equal(look[0].models[m].coef, look[1].models[m].coef)


def test_sample_and_results_do_not_depend_on_chunking():
    X, y = _clear_blobs()
    a = EncoderClassifier(choice_sample=2000).fit(da.from_array(X, chunks=(997, -1)), y)
    b = EncoderClassifier(choice_sample=2000).fit(da.from_array(X, chunks=(4096, -1)), y)
    assert a.fit_plan_ == b.fit_plan_
    np.testing.assert_allclose(a.cross_entropy_, b.cross_entropy_, rtol=1e-10)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-10)


@pytest.mark.parametrize("chunks", [613, 5000])
def test_pass_one_draws_the_rows_of_smallest_hash(chunks):
    """The sample is the labeled rows of smallest hash among those below the rate, in
    index order, for any chunking (the oracle hashes every row in NumPy)."""
    X, y = make_blobs(6000, 4, 3, seed=7, unlabeled=0.3)
    rate, size, seed = 0.2, 700, 11
    (first,) = compute(
        passes.labeled_moments_pass(
            da.from_array(X, chunks=(chunks, -1)),
            da.from_array(y, chunks=chunks),
            sample=(rate, size, seed),
        )
    )
    key = row_hash(np.arange(len(y)), seed)
    candidates = np.flatnonzero((key < rate) & (y >= 0))
    want = np.sort(candidates[np.lexsort((candidates, key[candidates]))[:size]])
    drawn = first["sample"]
    np.testing.assert_array_equal(drawn["index"], want)
    np.testing.assert_array_equal(drawn["rows"], X[want])
    np.testing.assert_array_equal(drawn["labels"], y[want])
    assert drawn["rows"].dtype == X.dtype


def test_a_class_too_rare_in_the_sample_leaves_every_row_deciding():
    X, y = _clear_blobs()
    y = y.copy()
    y[np.flatnonzero(y == 3)[20:]] = 2  # 20 rows of class 3: hardly any in the sample
    model = EncoderClassifier(choice_sample=1000).fit(X, y)
    exact = _exact().fit(X, y)
    assert model.fit_plan_["name"] in ("cache", "recompute")
    assert "fewer than 10 sampled rows" in model.fit_plan_["sample"]
    np.testing.assert_allclose(model.cross_entropy_, exact.cross_entropy_, rtol=1e-9)
    assert model.kernel_.name == exact.kernel_.name


def test_string_labels_unlabeled_rows_and_a_saved_model_that_updates(tmp_path):
    X, y = _clear_blobs()
    names = np.array(["ant", "bee", "cat", "dog"], dtype=object)
    labels = np.where(y >= 0, names[np.maximum(y, 0)], None)
    model = EncoderClassifier(choice_sample=2000).fit(X[:10000], labels[:10000])
    assert model.fit_plan_["name"] == "sample"
    assert model.classes_.tolist() == names.tolist()
    loaded = load_model(save_model(model, tmp_path / "m"))
    assert loaded.fit_plan_ == model.fit_plan_
    np.testing.assert_array_equal(loaded.predict(X[10000:]), model.predict(X[10000:]))
    before = model.class_counts_.copy()
    loaded.partial_fit(X[10000:], labels[10000:])
    added = [int(np.sum(labels[10000:] == name)) for name in names]
    np.testing.assert_array_equal(loaded.class_counts_, before + added)
    assert loaded.n_updates_ == 1


@pytest.mark.parametrize("seed", range(40))
def test_excluded_never_drops_the_rules_choice(seed):
    """Whatever the true cross-entropies within the margins of the estimates, the kernel
    the rule chooses from them is never among those excluded; with no margin one kernel
    is left, the rule's own choice."""
    rng = np.random.default_rng(seed)
    M = int(rng.integers(2, 5))
    true = rng.uniform(1.0, 10.0, M)
    threshold = 0.7
    left = set(range(M)) - choice.excluded(true, lambda a, b, w: 0.0, threshold, range(M))
    assert left == {choose_kernel(true, 1 - threshold)}
    errors = rng.uniform(0.0, 1.0, M)
    estimate = true + rng.uniform(-1, 1, M) * errors

    def margin(a, b, w):
        return errors[a] + w * errors[b]

    left = set(range(M)) - choice.excluded(estimate, margin, threshold, range(M))
    assert choose_kernel(true, 1 - threshold) in left
    assert choice.rule_among(true, left, 1 - threshold) == choose_kernel(true, 1 - threshold)


def test_sample_plan_sizes():
    assert choice.sample_plan(None, 10**8, 50, 4) is None
    assert choice.sample_plan("auto", 8 * 65536 - 1, 50, 4) is None
    rate, size, _ = choice.sample_plan("auto", 8 * 65536, 50, 4)
    assert size == 65536 and rate == pytest.approx(0.25)
    assert choice.sample_plan("auto", 10**7, 1024, 4)[1] == 2**26 // 4096  # 64 MB of rows
    assert choice.sample_plan(500, 500, 3, 8) is None
