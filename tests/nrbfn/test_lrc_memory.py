"""LRC plans its p×p statistics before the pass, as the other estimators plan theirs: a fit
whose scatter and solve would not fit the memory budget is refused, with the sizes and the
fix, before anything p×p is allocated."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from scalenc import LRClassifier
from scalenc.exceptions import MemoryBudgetError
from scalenc.nrbfn.lrc import lrc_memory


def test_many_features_are_refused_before_the_pass():
    """20 rows × 5 000 float32 features: (5 001)² float64 is 200 MB a matrix, the fit about
    1 GB; with memory_limit='300MB' it is refused before X is read."""
    rng = np.random.default_rng(0)
    X = da.from_array(rng.normal(size=(20, 5000)).astype(np.float32), chunks=(10, 5000))
    X = X.map_blocks(_never_read, dtype=X.dtype)
    y = np.arange(20) % 2
    with pytest.raises(
        MemoryBudgetError,
        match=r"LRClassifier on 5000 features holds \(p\+1\)×\(p\+1\) float64 matrices of "
        r"200 MB each: about 600 MB per worker \(a row block and 3 p×p scatters.*\) and "
        r"1 GB on the client .* more than the worker's memory budget of 300 MB "
        r"\(memory_limit='300MB'\)\. Reduce the features first",
    ):
        LRClassifier(memory_limit="300MB").fit(X, y)


def _never_read(block):
    raise AssertionError("X was read before the memory check")


def test_the_estimate_counts_the_matrices_of_a_fit():
    need = lrc_memory(50_000, 20, 4, 2)
    assert need["square"] == 8 * 50_001**2  # 18.6 GiB: the matrix the fit allocated
    assert need["client"] == 5 * need["square"]
    assert need["worker"] == 20 * 50_000 * 4 + 2 * need["square"]


def test_a_fit_within_the_budget_is_unchanged():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(200, 30)), np.arange(200) % 3
    limited = LRClassifier(memory_limit="50MB").fit(X, y)
    np.testing.assert_array_equal(limited.coef_, LRClassifier().fit(X, y).coef_)
