"""CCDR on data too small for its k-NN graph: refused, stating the minimum, rather than a
confident wrong answer."""

from __future__ import annotations

import numpy as np
import pytest

from scalenc import CCDR, CCDRClassifier
from scalenc.exceptions import DataWarning, InputError


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


def _clusters(per_class: int, seed: int):
    """Three well separated clusters (4 apart), ``per_class`` rows each."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(3), per_class)
    return rng.normal(size=(y.size, 3)) + 4.0 * y[:, None], y


def test_two_rows_a_class_that_only_the_labels_separate_are_warned_of():
    """Two rows a class: the embedding keeps the classes apart only through the labels, and
    predict (which embeds a row without its label) puts the clusters on other classes'
    centres. The fit says so, with the share its own rows get right; before, it predicted
    them wrongly without a word (the probe of issue 51)."""
    X, y = _clusters(2, seed=4)
    with pytest.warns(
        DataWarning,
        match=r"CCDRClassifier predicts 0% of 6 of its labeled subsample rows right when they "
        r"are embedded as predict embeds new rows \(without their labels\): no better than "
        r"the most frequent class \(33%\)\..* as few as 2\)\. Give more labeled rows",
    ):
        model = CCDRClassifier(random_state=0).fit(X, y)
    assert (model.predict(X) == y).mean() == 0.0  # what the warning says


@pytest.mark.filterwarnings("ignore::scalenc.exceptions.GraphWarning")  # three components
def test_enough_rows_a_class_fit_without_the_warning():
    X, y = _clusters(20, seed=4)  # a DataWarning would be an error in this test run
    assert (CCDRClassifier(random_state=0).fit(X, y).predict(X) == y).all()
