"""Extreme but finite values and degenerate data: a clear error or a sound model, never a
scipy traceback from inside the statistics or a silent one-class model (issue 17)."""

import numpy as np
import pytest

from scalenc import CCDRClassifier, EncoderClassifier, LRClassifier, NRBFNClassifier
from scalenc.exceptions import DataWarning

ESTIMATORS = [
    EncoderClassifier(),
    EncoderClassifier(kernels=("linear", "euclidean", "spearman")),
    LRClassifier(),
    NRBFNClassifier(n_candidates=500, random_state=0),
    NRBFNClassifier(n_neighbors=5),
]


def _blobs(n=3000, p=8, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    X = (rng.normal(size=(n, p)) + y[:, None]).astype(dtype)
    return X, y


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=repr)
def test_ten_rows_of_1e30_in_float32_name_the_column_and_value(estimator):
    X, y = _blobs()
    X[:10, 2] = 1e30
    with pytest.raises(ValueError, match=r"X column 2 (holds|has a class mean of) \S+e\+[23]\d"):
        estimator.fit(X, y)


@pytest.mark.parametrize("estimator", ESTIMATORS[:3], ids=repr)
def test_float64_values_whose_squares_overflow_are_refused(estimator):
    X, y = _blobs(dtype=np.float64)
    X[5:9, 4] = -1e200
    with pytest.raises(ValueError, match=r"X column 4 .* too large for float64 statistics"):
        estimator.fit(X, y)


def test_large_values_that_fit_the_dtype_are_fitted_as_usual():
    """1e15 squared is 1e30, well inside float32: no error, the same predictions as on the
    data scaled down (LDA is scale-invariant)."""
    X, y = _blobs(dtype=np.float64)
    scaled = EncoderClassifier().fit(X * 1e15, y).predict(X * 1e15)
    np.testing.assert_array_equal(scaled, EncoderClassifier().fit(X, y).predict(X))


def test_ccdr_classifier_is_as_accurate_on_the_clean_rows_with_huge_rows():
    """CCDR works on a float64 subsample and a k-NN graph: rows of 1e30 are far from
    everything and do not move the clean rows' embedding."""
    X, y = _blobs()
    clean = CCDRClassifier(random_state=0).fit(X[10:], y[10:]).score(X[10:], y[10:])
    X[:10, 2] = 1e30
    dirty = CCDRClassifier(random_state=0).fit(X, y).score(X[10:], y[10:])
    assert dirty >= clean - 0.01


def test_nrbfn_on_identical_rows_says_the_basis_has_no_width():
    X, y = np.ones((200, 4)), np.arange(200) % 2
    with pytest.raises(ValueError, match=r"training rows are identical.*sigma_ = 0|sigma_ = 0"):
        NRBFNClassifier().fit(X, y)


DEGENERATE = {
    "identical rows": (np.ones((200, 4)), np.arange(200) % 2),
    "a constant column": (
        np.column_stack([np.random.default_rng(0).normal(size=(200, 3)), np.ones(200)]),
        np.arange(200) % 2,
    ),
    "one point per class": (np.repeat(np.eye(2, 3), 100, axis=0), np.repeat([0, 1], 100)),
}


@pytest.mark.filterwarnings("ignore:The within-class scatter is zero:UserWarning")
@pytest.mark.filterwarnings("ignore:The CCDR graph of the subsample has:UserWarning")
@pytest.mark.parametrize("case", list(DEGENERATE))
@pytest.mark.parametrize(
    "make",
    [
        EncoderClassifier,
        lambda: EncoderClassifier(kernels=("linear", "euclidean", "spearman")),
        LRClassifier,
        NRBFNClassifier,
        lambda: CCDRClassifier(n_components=1),
    ],
    ids=["encoder", "encoder-3", "lrc", "nrbfn", "ccdr-classifier"],
)
def test_degenerate_data_gets_a_clear_error_or_a_defined_result(case, make):
    """Identical rows carry no information (chance accuracy, or nRBFN's clear error), a
    constant column is ignored, and one point per class is separated exactly."""
    X, y = DEGENERATE[case]
    estimator = make()
    if case == "identical rows" and isinstance(estimator, NRBFNClassifier):
        with pytest.raises(ValueError, match="training rows are identical"):
            estimator.fit(X, y)
        return
    if case == "identical rows" and isinstance(estimator, CCDRClassifier):
        with pytest.warns(DataWarning, match=r"predicts 50% of 200 of its .*no better than"):
            accuracy = estimator.fit(X, y).score(X, y)
    else:
        accuracy = estimator.fit(X, y).score(X, y)
    expected = {"identical rows": 0.5, "one point per class": 1.0}.get(case)
    if expected is None:
        assert 0.5 <= accuracy <= 1.0
    else:
        assert accuracy == expected
