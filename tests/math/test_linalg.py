"""LDA from sufficient statistics against scikit-learn's LinearDiscriminantAnalysis."""

import numpy as np
import pytest
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from scalenc.math.linalg import lda_decision, lda_from_moments, lda_proba
from scalenc.math.moments import class_moments


@pytest.mark.parametrize("K,d", [(2, 3), (3, 5), (6, 4), (4, 1)])
def test_lda_from_moments_equals_sklearn(K, d):
    rng = np.random.default_rng(K * 10 + d)
    y = rng.integers(0, K, 400)
    Z = rng.normal(size=(K, d))[y] * 2 + rng.normal(size=(400, d)) @ rng.normal(size=(d, d))
    m = class_moments(Z, y, K)
    model = lda_from_moments(m["n"], m["mean"], m["scatter"])
    ref = LinearDiscriminantAnalysis().fit(Z, y)
    np.testing.assert_allclose(model.coef, ref.coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(model.intercept, ref.intercept_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(lda_proba(model, Z), ref.predict_proba(Z), atol=1e-10)
    scores = lda_decision(model, Z)
    pred = (scores[:, 0] > 0).astype(int) if K == 2 else scores.argmax(1)
    np.testing.assert_array_equal(pred, ref.predict(Z))


def test_rank_deficient_scatter_matches_sklearn():
    # Z has a constant column and a duplicated column: S_w is singular.
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, 300)
    base = rng.normal(size=(300, 2)) + y[:, None]
    Z = np.column_stack([base, base[:, 0], np.full(300, 5.0)])
    m = class_moments(Z, y, 3)
    model = lda_from_moments(m["n"], m["mean"], m["scatter"])
    ref = LinearDiscriminantAnalysis().fit(Z, y)
    np.testing.assert_allclose(lda_proba(model, Z), ref.predict_proba(Z), atol=1e-8)
