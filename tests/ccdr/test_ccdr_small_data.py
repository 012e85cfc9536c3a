"""CCDR on data too small for its k-NN graph: refused, stating the minimum, rather than a
confident wrong answer."""

from __future__ import annotations

import numpy as np
import pytest

from scalenc import CCDR, CCDRClassifier
from scalenc.exceptions import InputError


@pytest.mark.parametrize("estimator", [CCDRClassifier, CCDR])
def test_fewer_rows_than_the_graph_needs_are_refused(estimator):
    X, y = np.array([[0.0, 1.0, 2.0], [3.0, 1.0, 0.0]]), np.array([0, 1])
    with pytest.raises(
        InputError,
        match=rf"{estimator.__name__}'s k-NN graph joins each of its 2 subsample rows to its "
        r"n_neighbors=4 nearest others, so it needs at least 5 rows; X has 2\. Give more "
        r"rows, or lower n_neighbors to at most 1\.",
    ):
        estimator().fit(X, y)


def test_a_subsample_smaller_than_the_graph_needs_is_refused():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 3)), np.repeat([0, 1], 20)
    with pytest.raises(InputError, match=r"at least 5 rows; subsample_size=3\. Give more rows"):
        CCDRClassifier(subsample_size=3).fit(X, y)


def test_the_smallest_graph_fits_and_predicts_its_rows():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(3, 3)), rng.normal(size=(3, 3)) + 5.0])
    y = np.repeat([0, 1], 3)
    model = CCDRClassifier(n_neighbors=5, random_state=0).fit(X, y)
    np.testing.assert_array_equal(model.predict(X), y)
