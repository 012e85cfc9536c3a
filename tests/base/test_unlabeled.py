"""The ``unlabeled`` parameter: which label marks an unlabeled row, or none (``None``).

Oracle: a fit with a marker equals the fit with the labels recoded so that the default
marker (-1) means the same rows; a fit with ``unlabeled=None`` on classes {-1, 1} equals the
fit on classes {0, 1}.
"""

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone

from scalenc import CCDR, CCDRClassifier, EncoderClassifier, LRClassifier, NRBFNClassifier
from scalenc.math.labels import encode, labeled_unique, unlabeled_mask
from scalenc.report import evaluate

CLASSIFIERS = [
    EncoderClassifier(kernels=("linear", "euclidean")),
    NRBFNClassifier(n_neighbors=5, random_state=0),
    LRClassifier(),
    CCDRClassifier(n_components=3, n_neighbors=10, random_state=0),
]
ALL = [*CLASSIFIERS, CCDR(n_components=3, n_neighbors=10, random_state=0)]


def _ids(est):
    return type(est).__name__


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    centres = rng.normal(scale=1.5, size=(3, 5))
    y = rng.integers(0, 3, 240)
    X = centres[y] + rng.standard_normal((240, 5))
    return X, y


def test_mask_default_marker_and_missing_values():
    assert unlabeled_mask(np.array([-1, 0, 2])).tolist() == [True, False, False]
    assert unlabeled_mask(np.array([-1.0, np.nan, 1.0])).tolist() == [True, True, False]
    assert unlabeled_mask(np.array(["a", "-1"])).tolist() == [False, False]
    objs = np.array([None, -1, "a", True, np.nan, 1.5], dtype=object)
    assert unlabeled_mask(objs).tolist() == [True, True, False, False, True, False]


def test_mask_other_markers():
    assert unlabeled_mask(np.array([-1, 0, 9]), marker=9).tolist() == [False, False, True]
    assert unlabeled_mask(np.array([-1.0, np.nan]), marker=None).tolist() == [False, False]
    names = np.array(["cat", "?", "dog"])
    assert unlabeled_mask(names, marker="?").tolist() == [False, True, False]
    assert unlabeled_mask(names.astype(bytes), marker="?").tolist() == [False, True, False]
    objs = np.array(["?", None, -1, 3], dtype=object)
    assert unlabeled_mask(objs, marker="?").tolist() == [True, True, False, False]
    assert labeled_unique(np.array([-1, 0, 1]), marker=None).tolist() == [-1, 0, 1]
    assert encode(np.array([-1, 1, 1]), np.array([-1, 1]), marker=None).tolist() == [0, 1, 1]


@pytest.mark.parametrize("est", CLASSIFIERS, ids=_ids)
def test_minus_one_as_a_class_with_unlabeled_none(est, data):
    X, y = data
    binary = np.where(y == 0, -1, 1)
    with pytest.raises(ValueError, match=r"only one class \(1\).*unlabeled=None"):
        clone(est).fit(X, binary)
    model = clone(est).set_params(unlabeled=None).fit(X, binary)
    assert model.classes_.tolist() == [-1, 1]
    oracle = type(est)(**{**est.get_params(), "unlabeled": -1}).fit(X, (binary + 1) // 2)
    np.testing.assert_array_equal(model.predict(X), np.where(oracle.predict(X) == 0, -1, 1))
    np.testing.assert_allclose(model.predict_proba(X), oracle.predict_proba(X), atol=1e-10)
    assert model.score(X, binary) == oracle.score(X, (binary + 1) // 2)


@pytest.mark.parametrize("est", ALL, ids=_ids)
def test_custom_marker_equals_recoded_default(est, data):
    X, y = data
    y_part = np.where(np.arange(y.size) % 4 == 0, -1, y)
    names = np.array(["a", "b", "c"])[np.maximum(y_part, 0)].astype(object)
    names[y_part < 0] = "?"
    with_marker = type(est)(**{**est.get_params(), "unlabeled": "?"}).fit(X, names)
    default = type(est)(**est.get_params()).fit(X, y_part)
    assert with_marker.classes_.tolist() == ["a", "b", "c"]
    np.testing.assert_allclose(
        with_marker.transform(X) if isinstance(est, CCDR) else with_marker.predict_proba(X),
        default.transform(X) if isinstance(est, CCDR) else default.predict_proba(X),
        atol=1e-10,
    )


@pytest.mark.parametrize("est", CLASSIFIERS[:2], ids=_ids)
def test_dask_input_and_score_use_the_marker(est, data):
    X, y = data
    y9 = np.where(np.arange(y.size) % 5 == 0, 9, y)
    Xd, yd = da.from_array(X, chunks=60), da.from_array(y9, chunks=60)
    model = type(est)(**{**est.get_params(), "unlabeled": 9}).fit(Xd, yd)
    assert model.classes_.tolist() == [0, 1, 2]
    keep = y9 != 9
    expected = float(np.mean(model.predict(X)[keep] == y9[keep]))
    assert model.score(Xd, yd) == pytest.approx(expected)
    assert model.score(X, y9) == pytest.approx(expected)
    result = evaluate(model, Xd, yd)
    assert result["unlabeled_rows"] == int((~keep).sum())
    assert result["accuracy"] == pytest.approx(expected)


@pytest.mark.parametrize("est", CLASSIFIERS[:1], ids=_ids)
def test_unlabeled_none_refuses_missing_labels(est, data):
    X, y = data
    y_nan = y.astype(float)
    y_nan[3] = np.nan
    with pytest.raises(ValueError, match="None or NaN labels.*unlabeled=None"):
        type(est)(**{**est.get_params(), "unlabeled": None}).fit(X, y_nan)
    y_obj = y.astype(object)
    y_obj[5] = None
    with pytest.raises(ValueError, match="None or NaN labels"):
        type(est)(**{**est.get_params(), "unlabeled": None}).fit(X, y_obj)


def test_all_unlabeled_message_names_the_marker(data):
    X, _ = data
    with pytest.raises(ValueError, match=r"All rows of y are unlabeled.*unlabeled=7"):
        EncoderClassifier(unlabeled=7).fit(X, np.full(X.shape[0], 7))
