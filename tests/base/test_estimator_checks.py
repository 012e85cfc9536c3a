"""scikit-learn's estimator checks, with each expected failure named and explained."""

import dask
import pytest
from sklearn.utils.estimator_checks import check_param_validation, parametrize_with_checks

from scalenc import CCDR, CCDRClassifier, EncoderClassifier, LRClassifier, NRBFNClassifier
from scalenc.base.estimator import expected_failed_checks

# Every estimator with its defaults, and each classifier with unlabeled=None (where -1 is a
# class, so check_classifiers_classes passes too). The expected failures and their reasons
# live in one place: scalenc.base.estimator.expected_failed_checks.
DEFAULTS = [EncoderClassifier(), NRBFNClassifier(), LRClassifier(), CCDR(), CCDRClassifier()]
FULLY_SUPERVISED = [
    EncoderClassifier(unlabeled=None),
    EncoderClassifier(kernels=("linear", "euclidean", "spearman"), unlabeled=None),
    NRBFNClassifier(unlabeled=None),
    LRClassifier(unlabeled=None),
    CCDRClassifier(unlabeled=None),
]


# Spearman correlation of 2-feature rows is ±1, so tiny check datasets can have zero
# within-class scatter; the LDA then warns loudly before falling back to nearest mean.
# Tiny check datasets can also split the CCDR graph into components (a GraphWarning), and
# their random labels leave CCDRClassifier no better than the priors (a DataWarning).
@pytest.mark.filterwarnings("ignore:The within-class scatter is zero")
@pytest.mark.filterwarnings("ignore:The CCDR graph of the subsample has")
@pytest.mark.filterwarnings("ignore:CCDRClassifier predicts .* of its labeled subsample rows right")
@parametrize_with_checks(DEFAULTS + FULLY_SUPERVISED, expected_failed_checks=expected_failed_checks)
def test_sklearn_compatible(estimator, check):
    with dask.config.set(scheduler="sync"):
        check(estimator)


def test_expected_failures_are_only_the_unlabeled_marker():
    """The named failures: the unlabeled marker's for classifiers with unlabeled=-1, and
    nRBFN's clipped probabilities (ties where its decision values differ)."""
    proba = {"check_decision_proba_consistency"}
    for est in DEFAULTS:
        expected = set(expected_failed_checks(est))
        want = set() if isinstance(est, CCDR) else {"check_classifiers_classes"}
        assert expected == want | (proba if isinstance(est, NRBFNClassifier) else set())
    for est in FULLY_SUPERVISED:
        want = proba if isinstance(est, NRBFNClassifier) else set()
        assert set(expected_failed_checks(est)) == want
    assert expected_failed_checks(EncoderClassifier(unlabeled="?")) == {}


def test_pipeline_and_grid_search():
    from sklearn.datasets import load_iris
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = load_iris(return_X_y=True)
    pipe = make_pipeline(StandardScaler(), EncoderClassifier())
    search = GridSearchCV(pipe, {"encoderclassifier__kernels": [("linear",), ("euclidean",)]}, cv=3)
    search.fit(X, y)
    assert search.best_score_ > 0.8
    assert pytest.approx(search.score(X, y), abs=0.1) == search.best_estimator_.score(X, y)


@pytest.mark.parametrize(
    "estimator",
    [
        EncoderClassifier(),
        NRBFNClassifier(n_neighbors=3),
        LRClassifier(),
        CCDR(n_components=2),
        CCDRClassifier(n_components=2),
    ],
    ids=lambda est: type(est).__name__,
)
def test_parameter_constraints_as_scikit_learn_checks_them(estimator):
    """scikit-learn's own check of declared constraints (it runs on scikit-learn's estimators,
    not in check_estimator): every parameter has a constraint, and fit raises
    InvalidParameterError with the standard message for a value of a wrong type and for an
    invalid value of each declared constraint."""
    check_param_validation(type(estimator).__name__, estimator)


def test_invalid_parameter_error_is_scikit_learns():
    from sklearn.utils._param_validation import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="The 'method' parameter of EncoderClassifier"):
        EncoderClassifier(method="slow").fit([[0.0], [1.0]], [0, 1])
    with pytest.raises(InvalidParameterError, match="The 'alpha' parameter of NRBFNClassifier"):
        NRBFNClassifier(alpha=[]).fit([[0.0], [1.0]], [0, 1])
