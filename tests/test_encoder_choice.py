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
from scalenc.encoder.blocks import choose_kernel
from scalenc.engine import passes
from scalenc.engine.cluster import compute
from scalenc.math.sampling import row_hash


def _exact(**params):
    return EncoderClassifier(choice_sample=None, **params)


def _clear_blobs():
    """The linear kernel wins by far (the sample drops the other two)."""
    return make_blobs(12000, 8, 4, seed=1, sep=1.0, unlabeled=0.1)


def _spearman_data():
    """A monotone transform of blobs: the rank kernel wins by far."""
    X, y = make_blobs(12000, 30, 3, seed=5, sep=1.0)
    return np.exp(2.5 * X), y


@pytest.mark.parametrize("make", [_clear_blobs, _spearman_data], ids=["linear", "spearman"])
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
    """With margins too wide for any decision the sample drops nothing, and the paper's
    passes over every row give its choice and cross-entropies."""
    monkeypatch.setattr(choice, "LDA_MARGIN", 10.0)
    X, y = make_blobs(6000, 6, 3, seed=2, sep=0.7, unlabeled=0.1)
    Xd, reads = counted(X, 700)
    model = EncoderClassifier(choice_sample=1500).fit(Xd, y)
    exact = _exact().fit(X, y)
    plan = model.fit_plan_
    assert plan["dropped_by_sample"] == []
    assert plan["compared_over_every_row"] == ["linear", "euclidean", "spearman"]
    assert plan["every_row"]["name"] == exact.fit_plan_["name"]
    assert reads.passes() == model.n_passes_ == plan["passes_over_X"]
    np.testing.assert_allclose(model.cross_entropy_, exact.cross_entropy_, rtol=1e-9)
    assert model.kernel_index_ == exact.kernel_index_
    for ours, theirs in zip(model.lda_models_, exact.lda_models_):
        np.testing.assert_allclose(ours.coef, theirs.coef, rtol=1e-9, atol=1e-12)


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
