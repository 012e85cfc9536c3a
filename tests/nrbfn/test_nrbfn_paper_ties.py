"""Algorithm 1, step 9 ("add the sample with the lowest confidence in this class") when
several candidates share the lowest confidence: the first position wins, as MATLAB's
``min`` (the paper's implementation language) and NumPy's ``argmin`` return the first
index.

The iris test pins the measured cause of the one figure of Hu, Pan & Wu's Table 4 the
library does not reproduce (iris, fixed λ: 6.7 % vs 8.0 %, benchmarks/README.md): on the
first half of iris no setosa row has confidence below t and all 25 have confidence exactly
1, a tie the paper does not resolve; the library takes the first row, for float32 and
float64 input alike (the paper's figure came from one rounding outcome of its own code).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import shared_dataset

from scalenc import NRBFNClassifier
from scalenc.nrbfn.soft_knn import select_basis


def basis_oracle(T, Y, t, n_classes):
    """Algorithm 1, steps 8–9, line by line; ties by first position (``np.argmin``)."""
    in_basis = T < t  # step 8
    for c in range(n_classes):  # step 9
        rows = np.flatnonzero(Y == c)
        if rows.size and not in_basis[rows].any():
            in_basis[rows[np.argmin(T[rows])]] = True
    return np.flatnonzero(in_basis)


def n_basis_oracle(T, Y, size, n_classes):
    """The ``size`` least confident, the least confident of each class first (Section
    7.1.3); ties by first position (a stable sort)."""
    order = np.argsort(T, kind="stable")
    reserve = [order[Y[order] == c][0] for c in range(n_classes) if np.any(Y == c)]
    fill = [p for p in order if p not in reserve][: max(0, size - len(reserve))]
    return np.union1d(reserve, fill)


def tied_confidences(rng, n):
    """Confidences with many exact ties: a few distinct values, 1.0 the most common."""
    return rng.choice([0.25, 0.5, 0.9, 0.95, 1.0, 1.0, 1.0], size=n)


@pytest.mark.parametrize("seed", range(50))
def test_step_9_ties_go_to_the_first_position(seed):
    rng = np.random.default_rng(seed)
    n, K = int(rng.integers(5, 40)), int(rng.integers(2, 5))
    T, Y = tied_confidences(rng, n), rng.integers(0, K, n)
    t = float(rng.choice([0.3, 0.9, 0.96]))
    pos, capped = select_basis(T, Y, t, K)
    np.testing.assert_array_equal(pos, basis_oracle(T, Y, t, K))
    assert not capped


@pytest.mark.parametrize("seed", range(50))
def test_n_basis_ties_go_to_the_first_positions(seed):
    rng = np.random.default_rng(seed)
    n, K = int(rng.integers(5, 40)), int(rng.integers(2, 5))
    T, Y = tied_confidences(rng, n), rng.integers(0, K, n)
    size = int(rng.integers(1, n + 1))
    pos, _ = select_basis(T, Y, 0.9, K, n_basis=size)
    np.testing.assert_array_equal(pos, n_basis_oracle(T, Y, size, K))


def test_all_equal_class_gives_its_first_row():
    # class 1 has no row below t and all its confidences are exactly 1: its first row
    T = np.array([0.2, 1.0, 0.5, 1.0, 1.0, 0.7])
    Y = np.array([0, 1, 0, 1, 1, 0])
    np.testing.assert_array_equal(select_basis(T, Y, 0.9, 2)[0], [0, 1, 2, 5])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_iris_setosa_step_9_is_an_exact_tie_to_the_first_row(dtype):
    d = shared_dataset("iris")
    X, y = d["X"].astype(dtype), d["y"]
    train = np.zeros(y.size, dtype=bool)
    for c in np.unique(y):  # the paper's split: the first half of each class
        rows = np.flatnonzero(y == c)
        train[rows[: (rows.size + 1) // 2]] = True
    Xtr, ytr = X[train], y[train]
    model = NRBFNClassifier(
        20, confidence_threshold=0.9, alpha=1e-13, n_candidates=None, max_basis=None, n_basis=None
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # λ = 1e-13 may warn about conditioning
        model.fit(Xtr, ytr)
    T = model.confidence_
    setosa = np.flatnonzero(ytr[model.candidate_indices_] == ytr.min())
    # every setosa row's 20 neighbours are setosa: T = 1 exactly, for any input precision
    assert setosa.size == 25 and np.all(T[setosa] == 1.0)
    # the basis is the 31 rows below t plus the first setosa row
    codes = np.searchsorted(model.classes_, ytr[model.candidate_indices_])
    expected = model.candidate_indices_[basis_oracle(T, codes, 0.9, 3)]
    np.testing.assert_array_equal(np.sort(model.basis_indices_), expected)
    assert model.candidate_indices_[setosa[0]] in expected
    assert expected.size == 32  # 42.7 % of 75, the paper's Table 2
