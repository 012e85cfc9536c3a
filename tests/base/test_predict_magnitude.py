"""Values too large for the dtype's statistics are refused at predict as ``fit`` refuses
them, naming the column and the value, not turned into NaN probabilities (CCDR, which
works in float64, takes them at both)."""

from __future__ import annotations

import numpy as np
import pytest

from scalenc import CCDRClassifier, EncoderClassifier, LRClassifier, NRBFNClassifier
from scalenc.exceptions import InputError

ESTIMATORS = {
    "lrc": lambda: LRClassifier(),
    "nrbfn": lambda: NRBFNClassifier(random_state=0),
    "encoder": lambda: EncoderClassifier(),
}


@pytest.fixture(scope="module")
def clean_float32():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 100)
    X = (rng.normal(size=(200, 3)) + 3.0 * y[:, None]).astype(np.float32)
    return X, y


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_a_float32_value_of_3e38_is_refused_at_predict_as_at_fit(clean_float32, name):
    X, y = clean_float32
    huge = X.copy()
    huge[5, 2] = 3e38
    with pytest.raises(InputError, match=r"X column 2 .*, too large for float32 statistics"):
        ESTIMATORS[name]().fit(huge, y)
    message = r"X column 2 holds 3e\+38, too large for float32 statistics"
    model = ESTIMATORS[name]().fit(X, y)
    for method in ("predict", "predict_proba"):
        with pytest.raises(InputError, match=message):
            getattr(model, method)(huge)
    assert np.isfinite(model.predict_proba(X)).all()


def test_ccdr_takes_huge_values_at_predict_as_at_fit(clean_float32):
    """CCDR's subsample, graph and Nyström extension are float64: a row of 3e38 is far
    from every other, at fit as at predict, and its probabilities stay finite."""
    X, y = clean_float32
    huge = X.copy()
    huge[5, 2] = 3e38
    CCDRClassifier(random_state=0).fit(huge, y)
    proba = CCDRClassifier(random_state=0).fit(X, y).predict_proba(huge)
    assert np.isfinite(proba).all()
