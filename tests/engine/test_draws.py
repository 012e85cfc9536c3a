"""The engine's one sampler (by hash, per stratum) and one row gather, against plain NumPy."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from scalenc.engine import passes
from scalenc.engine.cluster import compute
from scalenc.math.sampling import class_shares, hashed_sample_block, row_hash


def _smallest_hashes(index, strata, shares, seed, rate=1.0):
    """Per stratum s, the shares[s] indices of smallest (hash, index) below rate, sorted."""
    key = row_hash(index, seed)
    kept = []
    for s, share in enumerate(shares):
        rows = [i for i in np.flatnonzero((strata == s) & (key < rate))]
        rows.sort(key=lambda i: (key[i], index[i]))
        kept += [index[i] for i in rows[:share]]
    return np.sort(np.array(kept, dtype=np.int64))


@pytest.mark.parametrize("chunks", [500, 37, (1, 200, 299)])
def test_stratified_sample_is_the_smallest_hashes_per_class(chunks):
    rng = np.random.default_rng(3)
    codes = rng.integers(-1, 4, 500)  # −1: unlabeled, never drawn
    counts = np.bincount(codes[codes >= 0], minlength=4)
    (drawn,) = compute(
        passes.stratified_sample_pass(da.from_array(codes, chunks=chunks), counts, 60, seed=9)
    )
    expected = _smallest_hashes(np.arange(500), codes, class_shares(counts, 60), 9)
    np.testing.assert_array_equal(drawn["index"], expected)  # in index order
    np.testing.assert_array_equal(drawn["code"], codes[expected])


@pytest.mark.parametrize("chunks", [400, 33])
def test_the_encoders_sample_is_the_smallest_hashes_below_its_rate(chunks):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(400, 3)).astype(np.float32)
    y = rng.integers(0, 3, 400)
    y[::7] = -1
    Xd, yd = da.from_array(X, chunks=(chunks, -1)), da.from_array(y, chunks=chunks)
    (first,) = compute(passes.labeled_moments_pass(Xd, yd, sample=(0.5, 50, 11)))
    sample = first["sample"]
    expected = _smallest_hashes(np.arange(400), np.where(y >= 0, 0, -1), [50], 11, rate=0.5)
    np.testing.assert_array_equal(sample["index"], expected)
    np.testing.assert_array_equal(sample["rows"], X[expected])
    assert sample["rows"].dtype == np.float32
    np.testing.assert_array_equal(sample["labels"], y[expected])


def test_a_stratum_smaller_than_its_share_gives_every_row():
    index = np.arange(10, 20)
    strata = np.array([0, 1, 1, -1, 0, 1, 1, 1, 1, 1])
    drawn = hashed_sample_block(index, strata, shares=[5, 2], seed=1)
    assert set(drawn["index"][drawn["code"] == 0]) == {10, 14}
    assert (drawn["code"] == 1).sum() == 2 and 13 not in drawn["index"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_gather_rows_keeps_the_dtype_and_counts_nonfinite_values(dtype):
    rng = np.random.default_rng(5)
    X = (rng.normal(size=(300, 4)) * 10).astype(dtype)
    if dtype != np.int64:
        X[[3, 150], 1] = [np.nan, np.inf]
    Xd = da.from_array(X, chunks=(47, -1))
    index = np.array([0, 3, 46, 47, 200, 299])
    rows = passes.gather_rows(Xd, index)
    assert rows.dtype == X.dtype
    np.testing.assert_array_equal(rows, X[index])
    (got,) = compute(passes.gather_rows_pass(Xd, index, nonfinite=True))
    assert int(got["nonfinite"].sum()) == (0 if dtype == np.int64 else 2)
    np.testing.assert_array_equal(got["index"], index)
