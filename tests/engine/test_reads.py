"""Passes over X counted by real reads of its blocks, not taken from ``n_passes_``.

X is a NumPy array behind a ``__getitem__`` that counts every call
(:mod:`_counting`); each task that reads a row block of the Dask array over it calls
``__getitem__`` once. A fit's passes over X are its reads divided by the number of row
blocks, after checking that every block was read equally often (a block computed twice
in one pass, or a pass that skips blocks, fails that check). Each count is compared with
the number the estimator's docstring (and the README) documents and with the
estimator's own ``n_passes_``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np
import pytest
from _counting import counted
from conftest import make_blobs

from scalenc import CCDR, CCDRClassifier, EncoderClassifier, LRClassifier, NRBFNClassifier
from scalenc.engine import passes

N, P, K = 1200, 6, 3
IRREGULAR = (350, 150, 450, 250)
REGULAR = (300, 300, 300, 300)
TRAIN = 900  # fitted models: rows [0, TRAIN) train, the rest are new rows
THREE_KERNELS = ("linear", "euclidean", "spearman")


@pytest.fixture(scope="module")
def data():
    # classes that overlap enough for CCDR's k-NN graph of a subsample to be connected
    return make_blobs(N, P, K, seed=11, sep=0.7, unlabeled=0.1)


@pytest.fixture(params=["threads", "sync"])
def local_scheduler(request):
    """Dask's threaded (default) and synchronous schedulers, in this process, where the
    counter sees every read."""
    with dask.config.set(scheduler=request.param):
        yield request.param


# --- the counter itself -----------------------------------------------------------------------


@pytest.mark.parametrize("chunks", [IRREGULAR, REGULAR, (N,)])
def test_one_compute_reads_each_block_once(data, chunks, local_scheduler):
    X, _ = data
    Xd, reads = counted(X, chunks)
    assert reads.reads == 0  # building the Dask array reads nothing
    np.testing.assert_allclose(Xd.sum().compute(), X.sum())
    assert reads.per_block() == [1] * len(chunks)
    assert reads.passes() == 1


def test_one_compute_shares_the_read_between_results(data, local_scheduler):
    X, _ = data
    Xd, reads = counted(X, IRREGULAR)
    np.testing.assert_allclose((Xd.sum() + Xd.mean()).compute(), X.sum() + X.mean())
    assert reads.per_block() == [1, 1, 1, 1]
    reads.reset()
    total, spread = dask.compute(Xd.sum(axis=0), Xd.std(axis=0))  # two outputs, one compute
    np.testing.assert_allclose(total, X.sum(axis=0))
    np.testing.assert_allclose(spread, X.std(axis=0))
    assert reads.per_block() == [1, 1, 1, 1]


def test_separate_computes_read_again(data, local_scheduler):
    X, _ = data
    Xd, reads = counted(X, IRREGULAR)
    Xd.sum().compute()
    Xd.mean().compute()
    assert reads.per_block() == [2, 2, 2, 2] and reads.passes() == 2 and reads.reads == 8


def test_counter_refuses_partial_and_unequal_reads(data):
    """The checks behind ``passes()`` can fail: a pass that skips blocks, or reads part of
    one, is not counted as a pass."""
    X, _ = data
    Xd, reads = counted(X, IRREGULAR)
    Xd[:350].sum().compute()  # the first block alone
    assert reads.per_block() == [1, 0, 0, 0]
    with pytest.raises(AssertionError, match="read unequally often"):
        reads.passes()
    reads.reset()
    np.testing.assert_array_equal(reads.array[10:20], X[10:20])  # 10 rows, not a block
    assert reads.reads == 1
    with pytest.raises(AssertionError, match=r"not whole row blocks: \['\(10, 20\)'\]"):
        reads.per_block()


def _block_sums(X, *, row_start):
    return X.sum(axis=0)


def test_graph_optimisation_keeps_the_reads_visible(data, local_scheduler):
    """An optimised graph (``dask.optimize``), the Delayed blocks of an optimised graph,
    and a pass of :func:`scalenc.engine.passes.reduce_rows` (whose block tasks fuse the read
    into the block function) still call ``__getitem__`` once per block: the data is
    never inlined into the graph, so no read escapes the counter."""
    X, _ = data
    Xd, reads = counted(X, IRREGULAR)
    (optimised,) = dask.optimize(Xd)
    np.testing.assert_array_equal(optimised.compute(), X)
    assert reads.per_block() == [1, 1, 1, 1]
    reads.reset()
    blocks = Xd.to_delayed(optimize_graph=True).ravel()
    parts = dask.compute(*blocks)
    np.testing.assert_array_equal(np.vstack(parts), X)
    assert reads.per_block() == [1, 1, 1, 1]
    reads.reset()
    (total,) = dask.compute(passes.reduce_rows(_block_sums, Xd, split_every=2))
    np.testing.assert_allclose(total, X.sum(axis=0))
    assert reads.per_block() == [1, 1, 1, 1]


# --- fits: real passes against the documented number and n_passes_ ------------------------


@dataclass(frozen=True)
class Case:
    make: Callable[[], object]
    documented: Callable[[int], int]  # passes over X, as a function of the row blocks n_b


def _const(n):
    return lambda n_b: n


CASES = {
    # EncoderClassifier: "Passes over X: 1 (linear kernel alone, p ≤ max_scatter_features),
    # 2 (one kernel), 2 plus one over the cached Z (several kernels; 3 over X with
    # cache_embedding=False)."
    "encoder-linear": Case(lambda: EncoderClassifier(kernels=("linear",)), _const(1)),
    "encoder-linear-p-above-max_scatter_features": Case(
        lambda: EncoderClassifier(kernels=("linear",), max_scatter_features=2), _const(2)
    ),
    "encoder-euclidean": Case(lambda: EncoderClassifier(kernels=("euclidean",)), _const(2)),
    "encoder-spearman": Case(lambda: EncoderClassifier(kernels=("spearman",)), _const(2)),
    "encoder-gaussian": Case(lambda: EncoderClassifier(kernels=("gaussian",)), _const(2)),
    "encoder-three-kernels-cached": Case(
        lambda: EncoderClassifier(kernels=THREE_KERNELS, cache_embedding=True), _const(2)
    ),
    "encoder-three-kernels-not-cached": Case(
        lambda: EncoderClassifier(kernels=THREE_KERNELS, cache_embedding=False), _const(3)
    ),
    # method="full": "2 (class means, then Z's moments), 3 with several kernels"; Z = A W
    # is one compute in which each block of X is read once and shared by its block pairs.
    "encoder-full-linear": Case(
        lambda: EncoderClassifier(kernels=("linear",), method="full"), _const(2)
    ),
    "encoder-full-two-kernels": Case(
        lambda: EncoderClassifier(method="full", kernels=("linear", "euclidean")), _const(3)
    ),
    # LRClassifier: "One pass over X"; n_passes_ "1".
    "lrc": Case(lambda: LRClassifier(), _const(1)),
    # NRBFNClassifier: "1 for soft-KNN (with a candidate sample; in the exact all-rows mode
    # by block-pair tasks in one compute, each block read once), plus 1 to gather the
    # candidate or basis rows, 1 for σ, 1 for the Gram, and 1 more to score the λ grid when
    # cross-validating".
    "nrbfn-exact": Case(lambda: NRBFNClassifier(n_neighbors=7, n_basis=60, alpha=1e-9), _const(4)),
    "nrbfn-exact-cv": Case(
        lambda: NRBFNClassifier(n_neighbors=7, n_basis=60, alpha="cv", cv=3, random_state=0),
        _const(5),
    ),
    "nrbfn-sampled": Case(
        lambda: NRBFNClassifier(
            n_neighbors=7, n_basis=60, alpha=1e-9, n_candidates=200, random_state=0
        ),
        _const(4),
    ),
    "nrbfn-sampled-cv": Case(
        lambda: NRBFNClassifier(
            n_neighbors=7, n_basis=60, alpha=(1e-3, 1e-9), cv=3, n_candidates=200, random_state=0
        ),
        _const(5),
    ),
    # CCDR: n_passes_ "1: the subsample rows are gathered and X is checked for NaN/inf in
    # the same read" — with one or several subsamples, and when S is all of X.
    "ccdr": Case(lambda: CCDR(n_components=3, subsample_size=400, random_state=0), _const(1)),
    "ccdr-two-subsamples": Case(
        lambda: CCDR(n_components=3, subsample_size=400, n_subsamples=2, random_state=0),
        _const(1),
    ),
    "ccdr-all-rows": Case(
        lambda: CCDR(n_components=3, subsample_size=N, random_state=0), _const(1)
    ),
    # CCDRClassifier: "CCDR's one, plus one for "linear" and "lda" ... unless S is all of X
    # ... "knn" needs no extra pass".
    **{
        f"ccdr-classifier-{head}": Case(
            lambda head=head: CCDRClassifier(
                n_components=3, subsample_size=400, classifier=head, random_state=0
            ),
            _const(1 if head == "knn" else 2),
        )
        for head in ("linear", "lda", "knn")
    },
    **{
        f"ccdr-classifier-{head}-all-rows": Case(
            lambda head=head: CCDRClassifier(
                n_components=3, subsample_size=N, classifier=head, random_state=0
            ),
            _const(1),
        )
        for head in ("linear", "lda", "knn")
    },
}


def _fit_counted(name, X, y, chunks):
    Xd, reads = counted(X, chunks)
    model = CASES[name].make().fit(Xd, y)
    return model, reads.passes(), reads.n_blocks


@pytest.mark.parametrize("chunks", [IRREGULAR, REGULAR], ids=["irregular", "regular"])
@pytest.mark.parametrize("name", list(CASES))
def test_fit_passes_equal_documented_and_n_passes(name, chunks, data, local_scheduler):
    X, y = data
    model, real, n_b = _fit_counted(name, X, y, chunks)
    documented = CASES[name].documented(n_b)
    assert (real, model.n_passes_) == (documented, documented)


@pytest.mark.parametrize("chunks", [IRREGULAR, REGULAR], ids=["irregular", "regular"])
def test_auto_cache_plan_reads_what_it_says(chunks, data, local_scheduler):
    """cache_embedding="auto" (the default) picks its plan from measured rates, so either
    plan may run here: the real reads equal the plan's own count and n_passes_."""
    X, y = data
    Xd, reads = counted(X, chunks)
    model = EncoderClassifier(kernels=THREE_KERNELS).fit(Xd, y)
    real = reads.passes()
    assert real == model.n_passes_ == model.fit_plan_["passes_over_X"]
    assert (model.fit_plan_["name"], real) in {("cache", 2), ("recompute", 3)}


@pytest.mark.parametrize(
    "kernels, documented",
    [(("linear",), 1), (("euclidean",), 2), (("linear", "euclidean"), 3)],
    ids=["linear", "euclidean", "two-kernels"],
)
def test_partial_fit_passes_over_the_batch(kernels, documented, data, local_scheduler):
    """EncoderClassifier.partial_fit: "Passes over the batch: 1 (linear, one-pass mode),
    2, or 3 (several kernels)" — for the first batch and for a later one."""
    X, y = data
    model = EncoderClassifier(kernels=kernels)
    for rows in (slice(0, 600), slice(600, N)):
        Xd, reads = counted(X[rows], (250, 150, 200))
        model.partial_fit(Xd, y[rows], classes=np.arange(K))
        assert (reads.passes(), model.n_passes_) == (documented, documented)


# --- fitted models: every block map reads X once ---------------------------------------------


FITTED = {
    "encoder": lambda: EncoderClassifier(kernels=THREE_KERNELS),
    "encoder-full": lambda: EncoderClassifier(kernels=("linear",), method="full"),
    "nrbfn": lambda: NRBFNClassifier(n_neighbors=7, n_basis=60, n_candidates=200, random_state=0),
    "lrc": lambda: LRClassifier(),
    "ccdr": lambda: CCDR(n_components=3, subsample_size=400, random_state=0),
    "ccdr-classifier": lambda: CCDRClassifier(n_components=3, subsample_size=400, random_state=0),
}

METHODS = {
    "encoder": ("predict", "predict_proba", "decision_function", "transform", "score"),
    "encoder-full": ("predict", "predict_proba", "decision_function", "transform", "score"),
    "nrbfn": ("predict", "predict_proba", "decision_function", "score"),
    "lrc": ("predict", "predict_proba", "decision_function", "score"),
    "ccdr": ("transform",),
    "ccdr-classifier": ("predict", "predict_proba", "decision_function", "transform", "score"),
}


@pytest.fixture(scope="module")
def fitted(data):
    X, y = data
    Xd = da.from_array(X[:TRAIN], chunks=(225, -1))
    return {name: make().fit(Xd, y[:TRAIN]) for name, make in FITTED.items()}


@pytest.mark.parametrize(
    "name, method", [(name, method) for name, methods in METHODS.items() for method in methods]
)
def test_block_maps_read_each_block_once(name, method, fitted, data, local_scheduler):
    """predict, predict_proba, decision_function, transform (lazy, then computed) and
    score (one reduction) of a fitted model: one read of every block of the new X."""
    X, y = data
    model = fitted[name]
    Xd, reads = counted(X[TRAIN:], (120, 60, 120))
    if method == "score":
        assert 0.0 <= model.score(Xd, y[TRAIN:]) <= 1.0
    else:
        out = getattr(model, method)(Xd)
        assert isinstance(out, da.Array) and reads.reads == 0  # lazy until computed
        assert out.compute().shape[0] == N - TRAIN
    assert reads.per_block() == [1, 1, 1]


def test_full_method_predict_reads_the_training_x_once(data, local_scheduler):
    """method='full' keeps the training X for predict (Z = A W against every training
    row): a predict reads each block of the new X once and each block of the training X
    once."""
    X, y = data
    X_train, train_reads = counted(X[:TRAIN], (225, 225, 300, 150))
    model = EncoderClassifier(method="full").fit(X_train, y[:TRAIN])
    train_reads.reset()
    X_new, new_reads = counted(X[TRAIN:], (120, 60, 120))
    model.predict(X_new).compute()
    assert new_reads.per_block() == [1, 1, 1]
    assert train_reads.per_block() == [1, 1, 1, 1]


@pytest.mark.parametrize("share", [0.0, 0.02])
def test_encoder_reads_small_labels_once_on_a_local_scheduler(
    data, local_scheduler, share, monkeypatch
):
    """A multi-kernel fit's labels are read once for its three passes while they fit the
    memory share (``LABELS_MEMORY_SHARE``), and once per pass without it."""
    import scalenc.encoder.estimator as encoder_estimator

    monkeypatch.setattr(encoder_estimator, "LABELS_MEMORY_SHARE", share)
    X, y = data
    Xd = da.from_array(X, chunks=(IRREGULAR, -1))
    yd, label_reads = counted(y, IRREGULAR)
    model = EncoderClassifier(kernels=("linear", "euclidean", "spearman")).fit(Xd, yd)
    if share:
        assert label_reads.passes() == 1
    else:  # once per pass over X or over the cached embedding
        assert label_reads.passes() >= model.n_passes_ >= 2
