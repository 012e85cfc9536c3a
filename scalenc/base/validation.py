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

import os
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
    "TABLE_CONSTRAINTS",
    "CHECKPOINT_CONSTRAINTS",
    "document_table_parameters",
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


#: The constraints of the table parameters every estimator has (:mod:`scalenc.io.tables`).
TABLE_CONSTRAINTS: dict = {
    "categorical": [StrOptions({"onehot", "ordinal", "error"})],
    "handle_unknown": [StrOptions({"error", "ignore"})],
    "handle_missing": [StrOptions({"error", "impute"})],
}

_TABLE_TOKEN = "    {table parameters}\n"

_TABLE_DOC = """\
    categorical : {"onehot", "ordinal", "error"}, default="onehot"
        String, categorical and boolean feature columns of a DataFrame, Parquet or CSV
        file: one-hot encoded (one feature per category; the categories are learned in one
        pass over a Dask table, or taken from a pandas ``category`` dtype), ``"ordinal"``
        (one feature holding the category's code), or ``"error"`` (refused). Numeric
        columns come first in the encoded features (see :mod:`scalenc.io.tables`).
    handle_unknown : {"error", "ignore"}, default="error"
        A category at predict that the fit never saw: an error naming the column and
        values, or ``"ignore"`` (all zeros in one-hot, code −1 in ordinal).
    handle_missing : {"error", "impute"}, default="error"
        Missing feature values (NaN, None, NA): refused, naming the columns, or
        ``"impute"``: replaced by the column's mean (numeric) or most frequent category,
        learned over the fit's rows (scikit-learn's ``SimpleImputer``); for an array, one
        more pass over X.
"""


#: The constraint of the ``checkpoint`` parameter every estimator has.
CHECKPOINT_CONSTRAINTS: dict = {"checkpoint": [None, str, os.PathLike]}

_CHECKPOINT_TOKEN = "    {checkpoint parameter}\n"

_CHECKPOINT_DOC = """\
    checkpoint : str or path-like, default=None
        A directory (local path or fsspec URL, such as ``s3://bucket/prefix``) where the
        fit writes what its passes have computed: the merged statistics of completed
        groups of row blocks and each finished pass's result. Running the same fit again
        with the same checkpoint, after a kill, reads them back and computes only the
        rest; the model is the same as an uninterrupted fit's. The checkpoint is keyed to
        the input (its files' sizes and modification times, its row chunking), the
        parameters and the scalenc version: another fit's checkpoint is refused with
        :class:`~scalenc.exceptions.CheckpointMismatchError` saying what changed, and a
        damaged file is computed again, never merged. It is removed when the fit
        succeeds; ``checkpoint_summary_`` then says what the fit read back and what it
        computed (``n_passes_`` counts the passes it computed). Settings in the Dask
        config (:mod:`scalenc.engine.checkpoint`): ``scalenc.checkpoint.on-change``
        (``"restart"`` starts another fit's checkpoint afresh), ``scalenc.checkpoint.keep``,
        ``scalenc.checkpoint.storage-options``. On a cluster, give a location every
        worker can write (a shared file system or an object store). None: no checkpoint.
"""


def document_table_parameters(cls):
    """Class decorator: the table parameters' and the checkpoint's documentation in place
    of the docstring's ``{table parameters}`` and ``{checkpoint parameter}`` lines (one
    text for every estimator)."""
    for token, text in ((_TABLE_TOKEN, _TABLE_DOC), (_CHECKPOINT_TOKEN, _CHECKPOINT_DOC)):
        cls.__doc__ = cls.__doc__ and cls.__doc__.replace(token, text)
    return cls
