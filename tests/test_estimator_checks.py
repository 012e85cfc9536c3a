"""scikit-learn's estimator checks, with each expected failure named and explained."""

import pytest
from sklearn.utils.estimator_checks import check_param_validation, parametrize_with_checks

from scalenc import CCDR, CCDRClassifier, EncoderClassifier, LRClassifier, NRBFNClassifier

# Every expected failure with the reason it does not apply.
ENCODER_EXPECTED_FAILURES: dict[str, str] = {
    "check_classifiers_classes": (
        "The check labels a binary problem with the classes -1 and 1. scalenc follows "
        "sklearn.semi_supervised: -1 marks an unlabeled row, so that problem has one class. "
        "(scikit-learn exempts its own semi-supervised estimators from this check by name.)"
    ),
}


# Spearman correlation of 2-feature rows is ±1, so tiny check datasets can have zero
# within-class scatter; the LDA then warns loudly before falling back to nearest mean.
@pytest.mark.filterwarnings("ignore:The within-class scatter is zero:UserWarning")
@parametrize_with_checks(
    [EncoderClassifier(), EncoderClassifier(kernels=("linear", "euclidean", "spearman"))],
    expected_failed_checks=lambda est: ENCODER_EXPECTED_FAILURES,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


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
