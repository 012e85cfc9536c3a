"""Row blocks short enough to survive churn (issue 40): a checkpointed fit on a cluster cuts
the row blocks of its long passes into pieces of a few seconds' estimated work
(:mod:`scalenc.engine.blocksize`), gives the unsplit model up to float rounding, resumes
from a checkpoint of its split layout, and never merges partials of one layout into a pass
of another. Threaded fits and fits without a checkpoint keep their blocks.

The cluster tests make blocks of a few hundred rows look long by lowering the assumed rate
(:data:`~scalenc.engine.blocksize.RATE`) on the client, where the layout is decided.
"""

from __future__ import annotations

import math

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import make_blobs
from test_checkpoint import SAVE_ALL, _cut_off

from scalenc import NRBFNClassifier
from scalenc.engine import blocksize
from scalenc.engine.blocksize import BlockWork, churn_sized, split_rows, target_seconds
from scalenc.engine.checkpoint import checkpointing
from scalenc.engine.cluster import compute
from scalenc.engine.passes import neighbors_work
from scalenc.nrbfn import passes as nrbfn_passes

PARAMS = {"n_basis": 30, "random_state": 0}
#: the assumed rate that makes the Gram's 600-row blocks about 25 s: 13 pieces each
SLOW_RATE = 1e5
DEFAULT_RATE = blocksize.RATE


@pytest.fixture(scope="module")
def data():
    X, y = make_blobs(n=1200, p=5, K=3, seed=3, sep=1.0, unlabeled=0.05)
    return X, y


@pytest.fixture(scope="module")
def reference(data):
    """The threaded fit without a checkpoint, its blocks as given."""
    X, y = data
    return NRBFNClassifier(**PARAMS).fit(da.from_array(X, chunks=(600, -1)), y)


def assert_same_network(model, ref, X_test):
    """The tolerances of the nRBFN chunking tests (sums over row blocks reassociated)."""
    np.testing.assert_array_equal(model.basis_indices_, ref.basis_indices_)
    assert model.sigma_ == pytest.approx(ref.sigma_, rel=1e-12)
    np.testing.assert_allclose(
        model.weights_, ref.weights_, rtol=1e-6, atol=1e-7 * np.abs(ref.weights_).max()
    )
    with dask.config.set(scheduler="sync"):
        np.testing.assert_array_equal(model.predict(X_test), ref.predict(X_test))


# --- the sizing rule ------------------------------------------------------------------------


def test_a_long_block_is_cut_into_equal_pieces_under_the_target():
    work = BlockWork(per_row=1e6)  # 100 000 rows: 5 s at 20 GFLOP/s
    rows = split_rows((100_000, 7), work, target=2.0, rate=20e9)
    assert rows[:3] == (33_334, 33_333, 33_333) and rows[3:] == (7,)
    assert sum(rows) == 100_007
    for target in (0.5, 1.0, 3.0):
        pieces = split_rows((100_000,), work, target=target, rate=20e9)
        assert max(pieces) * 1e6 / 20e9 <= target
        assert max(pieces) - min(pieces) <= 1
        # the fewest pieces: one fewer would exceed the target
        assert 100_000 / (len(pieces) - 1) * 1e6 / 20e9 > target


def test_a_block_under_the_target_stays_whole():
    assert split_rows((50, 40_000), BlockWork(per_row=1e6), target=2.0, rate=20e9) == (50, 40_000)
    assert split_rows((3,), BlockWork(per_row=1e12), target=2.0, rate=20e9) == (1, 1, 1)


def test_pieces_never_pay_more_than_their_share_for_their_partial():
    """nRBFN's per-fold Gram at r = 2048, 5 folds: a 168 MB partial per piece limits the
    pieces to those whose work is ten times its move and merge."""
    work = nrbfn_passes.gram_work(2048, 40, 5, n_folds=5)
    assert work.partial_bytes == 8 * 5 * (2048 * 2048 + 5 * 2048 + 1)
    assert work.per_row == pytest.approx(2048**2 + 5 * 2048 + 2048 * (40 + blocksize.PAIR_WORK))
    rows = split_rows((100_000,), work, target=2.0, rate=20e9)
    seconds = 100_000 * work.per_row / 20e9
    fixed = blocksize.TASK_SECONDS + work.partial_bytes / blocksize.PARTIAL_RATE
    assert len(rows) == int(seconds * blocksize.OVERHEAD_SHARE / fixed) < seconds / 2.0
    assert max(rows) * work.per_row / 20e9 * blocksize.OVERHEAD_SHARE >= fixed
    # without the partial the target alone decides
    alone = split_rows((100_000,), BlockWork(work.per_row), target=2.0, rate=20e9)
    assert len(alone) == math.ceil(seconds / 2.0) == 12 > len(rows) == 2


def test_the_neighbor_search_is_estimated_at_its_measured_rate_not_the_kernels():
    """The soft-KNN's search (100 000-row blocks against 10 000 candidates, p = 40, k =
    10) took about 2.7 s a block: estimated with the kernel passes' pair work it was 7 s
    and cut in four; at its own rate it is cut in two."""
    work = neighbors_work(10_000, 40, 10)
    assert work.per_row == 10_000 * (40 + blocksize.NEIGHBOR_PAIR_WORK)
    assert work.partial_bytes > 0
    assert 100_000 * work.per_row / 20e9 == pytest.approx(2.7)
    assert len(split_rows((100_000,), work, target=2.0, rate=20e9)) == 2
    kernel_like = BlockWork.pairs(10_000, 40, partial_bytes=work.partial_bytes)
    assert len(split_rows((100_000,), kernel_like, target=2.0, rate=20e9)) == 4


def test_the_target_is_the_dask_config_and_zero_turns_it_off():
    assert target_seconds() == blocksize.TARGET_SECONDS == 2.0
    with dask.config.set({"scalenc.checkpoint.block-seconds": 5}):
        assert target_seconds() == 5.0
    with dask.config.set({"scalenc.checkpoint.block-seconds": 0}):
        assert target_seconds() is None


def test_threaded_fits_and_fits_without_a_checkpoint_keep_their_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(blocksize, "RATE", SLOW_RATE)
    X = da.ones((1000, 4), chunks=(500, 4))
    y = da.ones(1000, chunks=500)
    heavy = BlockWork(per_row=1e6)
    assert churn_sized(X, (y,), heavy) == (X, (y,))  # no checkpoint
    with checkpointing(str(tmp_path / "ck"), {"test": 1}):
        assert churn_sized(X, (y, None), heavy) == (X, (y, None))  # threads
        assert churn_sized(X, (y,), None) == (X, (y,))  # a pass that does not say its work


# --- on a cluster -----------------------------------------------------------------------------


@pytest.mark.cluster
def test_a_checkpointed_fit_on_a_cluster_splits_its_long_blocks(
    client, data, reference, tmp_path, monkeypatch
):
    X, y = data
    Xd = da.from_array(X, chunks=(600, -1))
    unsplit = NRBFNClassifier(**PARAMS, checkpoint=str(tmp_path / "a")).fit(Xd, y)
    computed = unsplit.checkpoint_summary_
    assert computed["blocks_computed"] == 2 * computed["passes_computed"]  # two blocks each

    monkeypatch.setattr(blocksize, "RATE", SLOW_RATE)
    split = NRBFNClassifier(**PARAMS, checkpoint=str(tmp_path / "b")).fit(Xd, y)
    summary = split.checkpoint_summary_
    assert summary["passes_computed"] == computed["passes_computed"]
    assert summary["blocks_computed"] > 2 * summary["passes_computed"] + 20
    assert split.n_passes_ == unsplit.n_passes_  # pieces of one read: X read once a pass
    assert_same_network(split, reference, X[:300])
    with dask.config.set({"scalenc.checkpoint.block-seconds": 0}):
        off = NRBFNClassifier(**PARAMS, checkpoint=str(tmp_path / "c")).fit(Xd, y)
    assert off.checkpoint_summary_["blocks_computed"] == computed["blocks_computed"]


@pytest.mark.cluster
def test_a_fit_cut_off_in_its_split_last_pass_resumes_from_its_pieces(
    client, data, reference, tmp_path, monkeypatch
):
    X, y = data
    Xd = da.from_array(X, chunks=(600, -1))
    monkeypatch.setattr(blocksize, "RATE", SLOW_RATE)
    ck = str(tmp_path / "ck")
    with dask.config.set({**SAVE_ALL, "scalenc.checkpoint.keep": True}):
        first = NRBFNClassifier(**PARAMS, checkpoint=ck).fit(Xd, y)
    # the last pass, the λ grid's held-out errors: 9 λ × 3 classes × 30 scores and the
    # kernel per row, 12 pieces of each 600-row block
    cv_work = BlockWork.pairs(30, 5, extra=9 * 3 * 30)
    pieces = split_rows((600, 600), cv_work, rate=SLOW_RATE)
    assert len(pieces) == 24 and first.cv_error_.shape == (9,)
    _, kept = _cut_off(tmp_path / "ck", keep_nodes=1)  # one group of 8 pieces kept
    assert kept == [(1, 0)]
    resumed = NRBFNClassifier(**PARAMS, checkpoint=ck).fit(Xd, y)
    summary = resumed.checkpoint_summary_
    assert summary["resumed"] and resumed.n_passes_ == 1
    assert summary["groups_reused"] == 1 and summary["blocks_computed"] == len(pieces) - 8
    assert_same_network(resumed, reference, X[:300])
    np.testing.assert_array_equal(resumed.weights_, first.weights_)  # the same tree


@pytest.mark.cluster
def test_a_pass_of_one_layout_is_never_merged_into_another(client, data, tmp_path, monkeypatch):
    """The checkpoint keys a pass by its inputs' row chunks: the split layout's partials
    live apart from the unsplit one's, each pass computed afresh by the other layout and
    read back by its own."""
    X, y = data
    Xd, codes = da.from_array(X, chunks=(600, -1)), da.from_array(np.maximum(y, 0), chunks=600)
    basis = X[:30]

    settings = {"keep": True, "rule": (0.0, 1e12)}

    def gram(rate):
        monkeypatch.setattr(blocksize, "RATE", rate)
        with checkpointing(str(tmp_path / "ck"), {"test": "layouts"}, settings=settings) as run:
            (out,) = compute(nrbfn_passes.gram_pass(Xd, codes, basis, ((2.0, True),), 3))
        return out, run.summary()

    split, first = gram(SLOW_RATE)
    assert first["blocks_computed"] == 26 and first["passes_reused"] == 0
    whole, second = gram(DEFAULT_RATE)
    assert second["passes_reused"] == 0 and second["blocks_computed"] == 2
    again, third = gram(SLOW_RATE)
    assert third["passes_reused"] == 1 and third["blocks_computed"] == 0
    np.testing.assert_array_equal(again["M"], split["M"])
    np.testing.assert_allclose(split["M"], whole["M"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(split["B"], whole["B"], rtol=1e-12, atol=1e-12)


@pytest.mark.cluster
def test_ccdr_extension_pass_is_split_and_gives_the_threaded_head(
    client, data, tmp_path, monkeypatch
):
    from scalenc import CCDRClassifier

    X, y = data
    Xd = da.from_array(X, chunks=(600, -1))
    params = {"subsample_size": 150, "random_state": 0}
    with dask.config.set(scheduler="threads"):
        ref = CCDRClassifier(**params).fit(Xd, y)
    monkeypatch.setattr(blocksize, "RATE", SLOW_RATE)
    model = CCDRClassifier(**params, checkpoint=str(tmp_path / "ck")).fit(Xd, y)
    # the extension: 150 reference rows × (5 + PAIR_WORK) per row; the other passes short
    pieces = split_rows((600, 600), BlockWork.pairs(150, 5), rate=SLOW_RATE)
    assert len(pieces) == 96
    summary = model.checkpoint_summary_
    assert summary["blocks_computed"] == 2 * (summary["passes_computed"] - 1) + len(pieces)
    scale = np.abs(ref.head_.coef).max()
    np.testing.assert_allclose(model.head_.coef, ref.head_.coef, rtol=1e-6, atol=1e-7 * scale)
    with dask.config.set(scheduler="sync"):
        np.testing.assert_array_equal(model.predict(X[:300]), ref.predict(X[:300]))
