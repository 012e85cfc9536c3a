"""EncoderClassifier against the plain NumPy + scikit-learn computation (Shen, Section 3)."""

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import make_blobs
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from scalenc import EncoderClassifier
from scalenc.encoder import choose_kernel
from scalenc.encoder.kernels import Gaussian, get_kernel

KERNELS = ["linear", "euclidean", "spearman", "gaussian"]
#: the linear kernel alone (its one-pass mode); the default is the paper's three kernels
LINEAR = ("linear",)


def oracle(X, y, kernel, labeled_only=True):
    """Shen's algorithm in plain NumPy: U = Wᵀ X, Z = δ(X, U), LDA on labeled Z."""
    classes = np.unique(y[y != -1]) if y.dtype.kind in "iu" else np.unique(y[y != None])  # noqa: E711
    lab = np.isin(y, classes)
    W = np.zeros((len(y), len(classes)))
    for k, c in enumerate(classes):
        W[y == c, k] = 1.0 / np.sum(y == c)
    U = W.T @ X.astype(np.float64)
    Z = kernel(X, U)
    lda = LinearDiscriminantAnalysis(tol=EncoderClassifier().tol).fit(Z[lab], y[lab])
    return U, Z, lda


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("chunks", [None, 61, (1, 150, 7, 99, 143)])
def test_matches_numpy_sklearn_oracle(kernel, chunks):
    X, y = make_blobs(400, 7, 4, seed=3, unlabeled=0.25)
    if isinstance(chunks, tuple):
        Xin, yin = da.from_array(X, chunks=(chunks, -1)), da.from_array(y, chunks=50)
    else:
        Xin, yin = X, y
    model = EncoderClassifier(
        kernels=(kernel,), chunk_rows=chunks if isinstance(chunks, int) else None
    )
    model.fit(Xin, yin)
    U, Z, lda = oracle(X, y, model.kernel_)
    np.testing.assert_allclose(model.class_means_, U, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(model.class_counts_, np.bincount(y[y >= 0]))
    np.testing.assert_allclose(np.asarray(model.transform(Xin)), Z, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(np.asarray(model.predict(Xin)), lda.predict(Z))
    np.testing.assert_allclose(
        np.asarray(model.predict_proba(Xin)), lda.predict_proba(Z), atol=1e-9
    )
    np.testing.assert_allclose(model.coef_, lda.coef_, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(
        np.asarray(model.decision_function(Xin)), lda.decision_function(Z), rtol=1e-7, atol=1e-7
    )


def test_passes_linear_one_multi():
    X, y = make_blobs(300, 5, 3)
    assert EncoderClassifier(kernels=LINEAR).fit(X, y).n_passes_ == 1
    assert EncoderClassifier(kernels=LINEAR, max_scatter_features=2).fit(X, y).n_passes_ == 2
    assert EncoderClassifier(kernels=("euclidean",)).fit(X, y).n_passes_ == 2
    assert EncoderClassifier(kernels=KERNELS).fit(X, y).n_passes_ == 2  # + 1 over cached Z
    assert EncoderClassifier(kernels=KERNELS, cache_embedding=False).fit(X, y).n_passes_ == 3


def test_nearly_collinear_embedding_keeps_its_discriminative_directions():
    # Shen's "normal transformed" simulation: X Q with Q uniform makes Z's columns nearly
    # parallel; the class information lives in directions ~3e-6 below the largest one.
    from scalenc.simulate import simulate_rows

    X, y = simulate_rows("normal_transformed", 0, 500, 5000, 5, 123)
    model = EncoderClassifier(kernels=LINEAR).fit(X[:400], y[:400])
    assert 1 - model.score(X[400:], y[400:]) < 0.2
    Z = model.transform(X[:400])
    ref = LinearDiscriminantAnalysis(tol=1e-7).fit(Z, y[:400])
    np.testing.assert_array_equal(model.predict(X[400:]), ref.predict(model.transform(X[400:])))
    # scikit-learn's default tol
    truncated = EncoderClassifier(kernels=LINEAR, tol=1e-4).fit(X[:400], y[:400])
    assert 1 - truncated.score(X[400:], y[400:]) > 0.5


def test_one_pass_linear_equals_two_pass():
    X, y = make_blobs(300, 5, 3, seed=2)
    a = EncoderClassifier(kernels=LINEAR).fit(X, y)
    b = EncoderClassifier(kernels=LINEAR, max_scatter_features=0).fit(X, y)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-9)
    np.testing.assert_allclose(a.predict_proba(X), b.predict_proba(X), atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_in_equals_dtype_out(dtype):
    X, y = make_blobs(200, 4, 3, dtype=dtype)
    model = EncoderClassifier(kernels=LINEAR).fit(X, y)
    assert model.transform(X).dtype == dtype
    assert model.transform(da.from_array(X, chunks=50)).dtype == dtype
    U, Z, lda = oracle(X, y, get_kernel("linear"))
    np.testing.assert_allclose(model.class_means_, U, rtol=1e-6 if dtype == np.float32 else 1e-12)
    np.testing.assert_array_equal(model.predict(X), lda.predict(Z))
    assert model.predict_proba(X).dtype == np.float64


def test_string_labels_and_unlabeled_none():
    X, yi = make_blobs(300, 5, 3, seed=4, unlabeled=0.2)
    names = np.array(["cat", "dog", "emu"], dtype=object)
    y = np.where(yi >= 0, names[np.clip(yi, 0, 2)], None).astype(object)
    model = EncoderClassifier(kernels=("linear", "spearman")).fit(X, y)
    assert list(model.classes_) == ["cat", "dog", "emu"]
    ref = EncoderClassifier(kernels=("linear", "spearman")).fit(X, yi)
    np.testing.assert_array_equal(model.predict(X), names[ref.predict(X)])
    np.testing.assert_allclose(model.cross_entropy_, ref.cross_entropy_, rtol=1e-12)


def test_semi_supervised_rows_do_not_change_class_statistics():
    X, y = make_blobs(300, 5, 3, seed=5, unlabeled=0.3)
    lab = y >= 0
    semi = EncoderClassifier(kernels=("euclidean",)).fit(X, y)
    sup = EncoderClassifier(kernels=("euclidean",)).fit(X[lab], y[lab])
    np.testing.assert_allclose(semi.class_means_, sup.class_means_, rtol=1e-12)
    np.testing.assert_allclose(semi.coef_, sup.coef_, rtol=1e-9)
    # unlabeled rows are still embedded and predicted
    assert semi.predict(X[~lab]).shape == ((~lab).sum(),)


def test_multi_kernel_choice_follows_cross_entropy_rule():
    # Rows rescaled by random positive factors: rank correlation is immune, inner product is not.
    rng = np.random.default_rng(0)
    X, y = make_blobs(600, 30, 4, seed=6, sep=1.0)
    X = (X - X.min()) * np.exp(rng.normal(scale=1.5, size=(600, 1)))
    model = EncoderClassifier(kernels=("linear", "euclidean", "spearman")).fit(X, y)
    lab = np.ones(600, bool)
    ce = []
    for name in ("linear", "euclidean", "spearman"):
        _, Z, lda = oracle(X, y, get_kernel(name))
        ce.append(-np.sum(np.log(lda.predict_proba(Z)[lab, y])))
    np.testing.assert_allclose(model.cross_entropy_, ce, rtol=1e-6)
    assert model.kernel_.name == ["linear", "euclidean", "spearman"][choose_kernel(ce, 0.3)]
    assert model.kernel_.name != "linear"
    # a huge threshold keeps the benchmark kernel
    keep = EncoderClassifier(
        kernels=("linear", "euclidean", "spearman"), min_improvement=0.999999
    ).fit(X, y)
    assert keep.kernel_.name == "linear"


def test_choose_kernel_rule():
    assert choose_kernel([10.0, 7.5, 8.0], 0.3) == 0  # 25% better is not enough
    assert choose_kernel([10.0, 7.0, 6.0], 0.3) == 2  # both qualify: smallest wins
    assert choose_kernel([10.0, 11.0, 6.9], 0.3) == 2
    assert choose_kernel([np.nan], 0.3) == 0


def test_gaussian_width_parameter_is_used():
    X, y = make_blobs(200, 4, 3)
    model = EncoderClassifier(kernels=(Gaussian(sigma=0.7),)).fit(X, y)
    assert model.kernel_.sigma == 0.7
    auto = EncoderClassifier(kernels=("gaussian",)).fit(X, y)
    assert auto.kernel_.sigma > 0 and auto.kernel_.sigma != 0.7


def test_callable_kernel():
    X, y = make_blobs(200, 4, 3)

    def cosine(A, U):
        A = A / np.linalg.norm(A, axis=1, keepdims=True)
        return A @ (U / np.linalg.norm(U, axis=1, keepdims=True)).T

    model = EncoderClassifier(kernels=(cosine,)).fit(X, y)
    _, Z, lda = oracle(X, y, cosine)
    np.testing.assert_array_equal(model.predict(X), lda.predict(Z))


@pytest.mark.parametrize("kernel", ["linear", "euclidean"])
def test_full_method_matches_section2_numpy(kernel):
    X, y = make_blobs(150, 4, 3, seed=8, unlabeled=0.1)
    delta = get_kernel(kernel)
    A = delta(X, X)
    W = np.zeros((150, 3))
    for k in range(3):
        W[y == k, k] = 1.0 / np.sum(y == k)
    Z = A @ W
    lab = y >= 0
    lda = LinearDiscriminantAnalysis().fit(Z[lab], y[lab])
    model = EncoderClassifier(kernels=(kernel,), method="full", chunk_rows=40).fit(X, y)
    np.testing.assert_allclose(model.transform(X), Z, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(model.predict(X), lda.predict(Z))
    np.testing.assert_allclose(model.predict_proba(X), lda.predict_proba(Z), atol=1e-9)


def test_full_equals_fast_for_linear_kernel():
    # Shen, Section 3: with M = 1 and the inner product, both algorithms coincide.
    X, y = make_blobs(200, 6, 4, seed=9)
    full = EncoderClassifier(kernels=LINEAR, method="full", chunk_rows=64).fit(X, y)
    fast = EncoderClassifier(kernels=LINEAR).fit(X, y)
    np.testing.assert_allclose(full.transform(X), fast.transform(X), rtol=1e-10)
    np.testing.assert_array_equal(full.predict(X), fast.predict(X))


def test_partial_fit_linear_equals_fit():
    X, y = make_blobs(500, 6, 3, seed=10, unlabeled=0.1)
    batches = np.split(np.arange(500), [90, 91, 300])
    model = EncoderClassifier(kernels=LINEAR)
    for idx in batches:
        model.partial_fit(X[idx], y[idx], classes=[0, 1, 2])
    ref = EncoderClassifier(kernels=LINEAR).fit(X, y)
    np.testing.assert_allclose(model.class_means_, ref.class_means_, rtol=1e-12)
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-8)
    np.testing.assert_array_equal(model.predict(X), ref.predict(X))


def test_partial_fit_nonlinear_approaches_fit():
    X, y = make_blobs(3000, 6, 3, seed=11, sep=1.5)
    model = EncoderClassifier(kernels=("linear", "euclidean"))
    for idx in np.array_split(np.arange(3000), 6):
        model.partial_fit(X[idx], y[idx], classes=[0, 1, 2])
    ref = EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y)
    np.testing.assert_allclose(model.class_means_, ref.class_means_, rtol=1e-12)
    assert np.mean(model.predict(X) == ref.predict(X)) > 0.98


def test_partial_fit_waits_for_every_class():
    X, y = make_blobs(200, 4, 3, seed=12)
    model = EncoderClassifier(kernels=LINEAR).partial_fit(X[y < 2], y[y < 2], classes=[0, 1, 2])
    with pytest.raises(ValueError, match=r"Class\(es\) \[2\] have no labeled rows"):
        model.predict(X)
    model.partial_fit(X[y == 2], y[y == 2])
    linear = EncoderClassifier(kernels=LINEAR).fit(X, y)
    np.testing.assert_array_equal(model.predict(X), linear.predict(X))


def test_numpy_in_numpy_out_dask_in_dask_out():
    X, y = make_blobs(200, 4, 3)
    model = EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y)
    Xd = da.from_array(X, chunks=70)
    for method in ("predict", "predict_proba", "decision_function", "transform"):
        out_np, out_da = getattr(model, method)(X), getattr(model, method)(Xd)
        assert isinstance(out_np, np.ndarray) and isinstance(out_da, da.Array)
        np.testing.assert_allclose(
            np.asarray(out_da.compute(), dtype=float), np.asarray(out_np, dtype=float), rtol=1e-12
        )
    assert model.score(Xd, da.from_array(y, chunks=70)) == pytest.approx(model.score(X, y))


def test_results_do_not_depend_on_scheduler(scheduler):
    X, y = make_blobs(300, 5, 3, seed=13, unlabeled=0.1)
    Xd, yd = da.from_array(X, chunks=(70, 5)), da.from_array(y, chunks=70)
    model = EncoderClassifier(kernels=("linear", "euclidean", "spearman")).fit(Xd, yd)
    with dask.config.set(scheduler="sync"):
        ref = EncoderClassifier(kernels=("linear", "euclidean", "spearman")).fit(X, y)
    np.testing.assert_allclose(model.cross_entropy_, ref.cross_entropy_, rtol=1e-10)
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-9)
    np.testing.assert_array_equal(model.predict(Xd).compute(), ref.predict(X))


def test_distributed_local_cluster(client):
    X, y = make_blobs(400, 5, 4, seed=14, unlabeled=0.1)
    Xd, yd = da.from_array(X, chunks=(90, 5)), da.from_array(y, chunks=90)
    model = EncoderClassifier(kernels=("linear", "euclidean")).fit(Xd, yd)
    _, Z, lda = oracle(X, y, model.kernel_)
    np.testing.assert_array_equal(model.predict(Xd).compute(), lda.predict(Z))
    np.testing.assert_allclose(model.predict_proba(Xd).compute(), lda.predict_proba(Z), atol=1e-9)


# --- bad input ---------------------------------------------------------------------


@pytest.fixture
def data():
    return make_blobs(100, 4, 3)


def test_nan_in_X_is_refused(data):
    X, y = data
    X = X.copy()
    X[5, 1] = np.nan
    X[7, 2] = np.inf
    with pytest.raises(ValueError, match=r"X contains 2 NaN or infinite value\(s\); impute"):
        EncoderClassifier().fit(X, y)
    model = EncoderClassifier().fit(*data)
    with pytest.raises(ValueError, match="NaN or infinite"):
        model.predict(X)


def test_length_mismatch(data):
    X, y = data
    with pytest.raises(ValueError, match=r"X has 100 rows but y has 99 labels"):
        EncoderClassifier().fit(X, y[:99])
    with pytest.raises(ValueError, match=r"X has 100 rows but y has 99 labels"):
        EncoderClassifier().fit(da.from_array(X, chunks=30), da.from_array(y[:99], chunks=30))


def test_unknown_chunks_are_refused(data):
    X, y = data
    Xd = da.from_array(X, chunks=30)
    Xd = Xd[Xd[:, 0] > -np.inf]  # boolean indexing: unknown chunk sizes
    with pytest.raises(ValueError, match=r"unknown row chunk sizes.*compute_chunk_sizes"):
        EncoderClassifier().fit(Xd, y)


def test_misaligned_chunks_are_aligned(data):
    X, y = data
    a = EncoderClassifier().fit(da.from_array(X, chunks=(33, 4)), da.from_array(y, chunks=17))
    b = EncoderClassifier().fit(X, y)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-10)


def test_one_class_only(data):
    X, _ = data
    with pytest.raises(ValueError, match=r"only one class \(1\).*at least 2 classes"):
        EncoderClassifier().fit(X, np.ones(100, int))


def test_all_unlabeled(data):
    X, _ = data
    with pytest.raises(ValueError, match=r"All rows of y are unlabeled"):
        EncoderClassifier().fit(X, -np.ones(100, int))


def test_partial_fit_needs_classes(data):
    with pytest.raises(ValueError, match=r"classes must be passed on the first call"):
        EncoderClassifier().partial_fit(*data)


def test_label_outside_declared_classes(data):
    X, y = data
    with pytest.raises(ValueError, match=r"Label 2 is not one of the classes \[0, 1\]"):
        EncoderClassifier().partial_fit(X, y, classes=[0, 1])


def test_wrong_number_of_features_at_predict(data):
    model = EncoderClassifier().fit(*data)
    with pytest.raises(ValueError, match=r"X has 3 features, but EncoderClassifier is expecting 4"):
        model.predict(data[0][:, :3])


def test_unknown_kernel_name(data):
    with pytest.raises(ValueError, match=r"Unknown kernel 'poly'. Valid names are"):
        EncoderClassifier(kernels=("linear", "poly")).fit(*data)


@pytest.mark.parametrize(
    "param,value,msg",
    [
        (
            "min_improvement",
            1.0,
            r"The 'min_improvement' parameter of EncoderClassifier must be a float in the range \[0.0, 1.0\)",
        ),
        (
            "method",
            "slow",
            r"The 'method' parameter of EncoderClassifier must be a str among \{'f.*'\}",
        ),
        (
            "chunk_rows",
            0,
            r"The 'chunk_rows' parameter of EncoderClassifier must be an int in the range \[1, inf\)",
        ),
        (
            "kernels",
            (),
            r"The 'kernels' parameter of EncoderClassifier must be a non-empty sequence",
        ),
    ],
)
def test_bad_parameters(data, param, value, msg):
    with pytest.raises(ValueError, match=msg):
        EncoderClassifier(**{param: value}).fit(*data)


def test_non_numeric_X(data):
    _, y = data
    with pytest.raises(ValueError, match=r"could not convert string to float"):
        EncoderClassifier().fit(np.full((100, 2), "a"), y)


def test_1d_X(data):
    _, y = data
    with pytest.raises(ValueError, match=r"Expected 2D array, got 1D array instead"):
        EncoderClassifier().fit(np.arange(100.0), y)
    with pytest.raises(ValueError, match=r"X must be 2-D \(rows, features\); got shape \(100,\)"):
        EncoderClassifier().fit(da.arange(100.0, chunks=10), y)


def test_y_missing_or_continuous(data):
    X, y = data
    with pytest.raises(ValueError, match=r"requires y to be passed, but the target y is None"):
        EncoderClassifier().fit(X, None)
    with pytest.raises(ValueError, match=r"Unknown label type: continuous"):
        EncoderClassifier().fit(X, y + 0.5)
    with pytest.raises(ValueError, match=r"Found array with 0 feature\(s\)"):
        EncoderClassifier().fit(X[:, :0], y)


def test_partial_fit_after_fit_extends_the_sums():
    X, y = make_blobs(400, 5, 3, seed=21)
    model = EncoderClassifier(kernels=LINEAR).fit(X[:250], y[:250]).partial_fit(X[250:], y[250:])
    ref = EncoderClassifier(kernels=LINEAR).fit(X, y)
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-8)


def test_cached_embedding_equals_recomputed(scheduler, tmp_path):
    X, y = make_blobs(400, 6, 3, seed=30, unlabeled=0.1)
    Xd, yd = da.from_array(X, chunks=(90, 6)), da.from_array(y, chunks=90)
    with dask.config.set({"temporary-directory": str(tmp_path)}):
        cached = EncoderClassifier(kernels=KERNELS).fit(Xd, yd)
    recomputed = EncoderClassifier(kernels=KERNELS, cache_embedding=False).fit(Xd, yd)
    np.testing.assert_allclose(cached.cross_entropy_, recomputed.cross_entropy_, rtol=1e-12)
    assert cached.kernel_index_ == recomputed.kernel_index_
    assert list(tmp_path.iterdir()) == []  # the temporary store is gone


def test_cached_embedding_on_a_cluster(client):
    X, y = make_blobs(400, 6, 3, seed=31)
    Xd, yd = da.from_array(X, chunks=(90, 6)), da.from_array(y, chunks=90)
    cached = EncoderClassifier(kernels=KERNELS).fit(Xd, yd)
    with dask.config.set(scheduler="sync"):
        ref = EncoderClassifier(kernels=KERNELS, cache_embedding=False).fit(X, y)
    np.testing.assert_allclose(cached.cross_entropy_, ref.cross_entropy_, rtol=1e-10)


def test_stage_times_name_the_passes_made():
    X, y = make_blobs(300, 4, 3, seed=40)
    assert list(EncoderClassifier(kernels=LINEAR).fit(X, y).stage_times_) == ["class_means"]
    times = EncoderClassifier(kernels=KERNELS).fit(X, y).stage_times_
    assert list(times) == ["class_means", "embedding", "cross_entropy"]
    assert all(t > 0 for t in times.values())


# --- the fit plan (issue 15): cache or recompute the embedding, chosen by measured costs ---


def _numpy_cross_entropy(X, y, kernel):
    """c_m in plain NumPy/scikit-learn: −Σ log T(i, y_i) of the LDA on labeled Z."""
    _, Z, lda = oracle(X, y, kernel)
    lab = y >= 0
    proba = lda.predict_proba(Z[lab])
    index = np.searchsorted(lda.classes_, y[lab])
    return -np.log(proba[np.arange(lab.sum()), index]).sum()


@pytest.mark.parametrize("plan", [True, False, "auto"])
@pytest.mark.parametrize("chunks", [None, (1, 150, 7, 99, 143)])
def test_every_plan_matches_the_numpy_oracle(plan, chunks):
    X, y = make_blobs(400, 7, 4, seed=50, unlabeled=0.2)
    if chunks is None:
        Xin, yin = X, y
    else:
        Xin, yin = da.from_array(X, chunks=(chunks, -1)), da.from_array(y, chunks=50)
    model = EncoderClassifier(kernels=KERNELS, cache_embedding=plan).fit(Xin, yin)
    expected = [_numpy_cross_entropy(X, y, k) for k in model.kernels_]
    np.testing.assert_allclose(model.cross_entropy_, expected, rtol=1e-8)
    assert model.kernel_index_ == choose_kernel(np.array(expected), model.min_improvement)
    _, Z, lda = oracle(X, y, model.kernel_)
    np.testing.assert_array_equal(np.asarray(model.predict(Xin)), lda.predict(Z))
    assert model.fit_plan_["passes_over_X"] == model.n_passes_
    assert model.fit_plan_["name"] == {True: "cache", False: "recompute"}.get(
        plan, model.fit_plan_["name"]
    )


@pytest.mark.parametrize("cache_cost, name, passes", [(1e3, "recompute", 3), (0.0, "cache", 2)])
def test_auto_plan_follows_the_measured_costs(monkeypatch, cache_cost, name, passes):
    """With writing Z made dear (or free), "auto" computes it again (or caches it); both
    give the plain-NumPy model and say so in fit_plan_ and n_passes_."""
    monkeypatch.setattr("scalenc.encoder.plan.cache_seconds_per_byte", lambda: cache_cost)
    monkeypatch.setattr("scalenc.encoder.plan.SMALL_CACHE_BYTES", 0)  # measured, however small
    X, y = make_blobs(300, 5, 3, seed=51)
    model = EncoderClassifier(kernels=("linear", "euclidean", "spearman")).fit(X, y)
    plan = model.fit_plan_
    assert (plan["name"], plan["passes_over_X"], model.n_passes_) == (name, passes, passes)
    assert plan["kernel_s_per_row"] > 0 and plan["read_s"] > 0
    assert plan["cache_s_per_row"] == pytest.approx(3 * 3 * 8 * cache_cost)
    expected = [_numpy_cross_entropy(X, y, k) for k in model.kernels_]
    np.testing.assert_allclose(model.cross_entropy_, expected, rtol=1e-8)


def test_a_small_embedding_is_cached_unmeasured():
    X, y = make_blobs(300, 5, 3, seed=51)
    plan = EncoderClassifier(kernels=("linear", "euclidean", "spearman")).fit(X, y).fit_plan_
    assert plan == {"name": "cache", "passes_over_X": 2, "cache_bytes": 300 * 9 * 8}


def test_choose_cache_plan_compares_the_two_costs():
    from scalenc.encoder.plan import choose_cache_plan

    wide = choose_cache_plan(
        n_rows=10**6, read_seconds=1.0, kernel_seconds=1e-6, cache_seconds=3e-6
    )
    assert (wide["name"], wide["cache_s"], wide["recompute_s"]) == ("recompute", 3.0, 2.0)
    narrow = choose_cache_plan(
        n_rows=10**6, read_seconds=1.0, kernel_seconds=1e-6, cache_seconds=1e-7
    )
    assert narrow["name"] == "cache"


def test_plans_on_a_cluster(client, monkeypatch):
    monkeypatch.setattr("scalenc.encoder.plan.SMALL_CACHE_BYTES", 0)  # measured, however small
    X, y = make_blobs(400, 6, 3, seed=52, unlabeled=0.1)
    Xd, yd = da.from_array(X, chunks=(90, 6)), da.from_array(y, chunks=90)
    expected = None
    for cost in (1e3, 0.0):
        monkeypatch.setattr("scalenc.encoder.plan.cache_seconds_per_byte", lambda c=cost: c)
        model = EncoderClassifier(kernels=KERNELS).fit(Xd, yd)
        if expected is None:
            expected = [_numpy_cross_entropy(X, y, k) for k in model.kernels_]
        np.testing.assert_allclose(model.cross_entropy_, expected, rtol=1e-8)
        assert model.fit_plan_["name"] == ("recompute" if cost else "cache")


def test_fit_plan_is_saved_and_loaded(tmp_path):
    from scalenc import load_model, save_model

    X, y = make_blobs(200, 5, 3, seed=53)
    model = EncoderClassifier(kernels=("linear", "spearman")).fit(X, y)
    loaded = load_model(save_model(model, tmp_path / "model"))
    assert loaded.fit_plan_ == model.fit_plan_
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


@pytest.mark.parametrize("plan", [True, False])
def test_row_tiles_of_the_embedding_match_the_numpy_oracle(monkeypatch, plan):
    """Blocks worked through in row tiles (tiles made 7 rows here, so that every block
    spans several and the last is short): the moments merged across tiles and the summed
    log-likelihoods give the plain-NumPy cross-entropy and predictions."""
    monkeypatch.setattr("scalenc.encoder.blocks.stacked_tile_rows", lambda width: 7)
    X, y = make_blobs(400, 7, 4, seed=52, unlabeled=0.2)
    Xd, yd = da.from_array(X, chunks=((150, 7, 99, 144), -1)), da.from_array(y, chunks=50)
    model = EncoderClassifier(kernels=KERNELS, cache_embedding=plan).fit(Xd, yd)
    expected = [_numpy_cross_entropy(X, y, k) for k in model.kernels_]
    np.testing.assert_allclose(model.cross_entropy_, expected, rtol=1e-8)
    _, Z, lda = oracle(X, y, model.kernel_)
    np.testing.assert_array_equal(np.asarray(model.predict(Xd)), lda.predict(Z))
    # the output maps too go a row tile at a time
    np.testing.assert_allclose(np.asarray(model.predict_proba(Xd)), lda.predict_proba(Z))
    np.testing.assert_allclose(
        np.asarray(model.decision_function(Xd)), lda.decision_function(Z), rtol=1e-9, atol=1e-9
    )
    np.testing.assert_allclose(np.asarray(model.transform(Xd)), Z, rtol=1e-12)


def test_auto_plan_recomputes_when_the_cache_would_not_fit(monkeypatch):
    """A block of Z larger than half of a task's budget: "auto" computes Z again (and says
    why in fit_plan_), even when caching is free."""
    monkeypatch.setattr("scalenc.encoder.plan.cache_seconds_per_byte", lambda: 0.0)
    monkeypatch.setattr(
        "scalenc.encoder.estimator.memory_budget",
        lambda est: ({"worker": 4000, "client": 4000}, "test"),
    )
    X, y = make_blobs(300, 5, 3, seed=53)
    model = EncoderClassifier(kernels=("linear", "euclidean", "spearman")).fit(X, y)
    assert model.fit_plan_["name"] == "recompute" and model.n_passes_ == 3
    assert "task may hold" in model.fit_plan_["memory"]
    expected = [_numpy_cross_entropy(X, y, k) for k in model.kernels_]
    np.testing.assert_allclose(model.cross_entropy_, expected, rtol=1e-8)


def test_multi_kernel_memory_per_task_is_bounded_by_row_tiles():
    """p = 16, K = 60, four kernels, one 100 000-row block (6.4 MB): Z of the block would
    be 192 MB, and embedding it whole held several times that. Worked through in row tiles,
    the fit allocates a small multiple of the block (traced by tracemalloc)."""
    import tracemalloc

    rng = np.random.default_rng(54)
    y = rng.integers(0, 60, 100_000)
    X = (rng.normal(size=(60, 16))[y] + rng.normal(size=(100_000, 16))).astype(np.float32)
    with dask.config.set(scheduler="sync"):
        tracemalloc.start()
        try:
            EncoderClassifier(kernels=KERNELS, cache_embedding=False).fit(
                da.from_array(X, chunks=(100_000, -1)), da.from_array(y, chunks=100_000)
            )
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 60e6, f"{peak / 1e6:.0f} MB traced"
