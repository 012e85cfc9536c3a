"""Parameter constraints, declared as scikit-learn declares them.

Each estimator lists its parameters' constraints in a class attribute
``_parameter_constraints`` (name → list of constraints, scikit-learn's vocabulary:
``Interval``, ``StrOptions``, ``"boolean"``, ``"random_state"``, ``None``, …) and calls
``self._validate_params()`` (scikit-learn's ``BaseEstimator``) first thing in ``fit``. A
violated constraint raises scikit-learn's ``InvalidParameterError`` (a ``ValueError`` and
a ``TypeError``) with its message format::

    The 'x' parameter of Y must be <expectation>. Got <value> instead.

scikit-learn keeps this machinery (and the ``feature_names_in_`` check,
:func:`check_feature_names`) in private names; they are imported here only, so a change
there is mended in one place. :func:`invalid` raises the same error for checks
that constraints cannot express (a parameter's elements, a relation between parameters).
"""

from __future__ import annotations

from numbers import Integral, Real

from sklearn.utils._param_validation import Interval, InvalidParameterError, StrOptions
from sklearn.utils.validation import _check_feature_names as check_feature_names

from scalenc.exceptions import ScalencError

__all__ = [
    "ParameterError",
    "Integral",
    "Real",
    "Interval",
    "StrOptions",
    "InvalidParameterError",
    "invalid",
    "check_feature_names",
]


class ParameterError(ScalencError, InvalidParameterError):
    """A parameter value an estimator cannot use, for the checks that constraints cannot
    express: scikit-learn's ``InvalidParameterError`` (a ``ValueError`` and a ``TypeError``)
    and a :class:`~scalenc.exceptions.ScalencError`, in scikit-learn's message format."""


def invalid(estimator, name: str, expectation: str, value) -> ParameterError:
    """The error for ``estimator``'s parameter ``name``, in scikit-learn's format."""
    return ParameterError(
        f"The {name!r} parameter of {type(estimator).__name__} must be {expectation}. "
        f"Got {value!r} instead."
    )
