"""Tables as users have them: string, categorical and boolean feature columns encoded inside
scalenc, and missing values refused or imputed.

A :class:`Table` is a lazy table of feature columns that are not all numbers (what
:func:`scalenc.load` returns for such a Parquet or CSV file); pandas and Dask DataFrames are
taken as they are. :func:`fit_features` learns a :class:`FeatureEncoder` in one pass over
the table — the categories, the missing values of each column, the means and modes that
imputation uses, and each partition's rows (so no separate row count is needed) — and
:func:`encode_features` applies it block by block.

The encoded columns are laid out as scikit-learn's
``ColumnTransformer([("num", …, numeric), ("cat", OneHotEncoder(), categorical)])`` lays
them out: the numeric columns first, in the table's order, then each categorical column's
one-hot block (its categories in order) or, with ``categorical="ordinal"``, its code.

Categories: a pandas ``category`` column with known categories keeps its dtype's
categories, in their order (from the metadata, as declared, even those no row holds);
every other string, object, boolean or unknown-category column takes the values its
rows hold, sorted. A column with more than :data:`MAX_CATEGORIES` values is refused
(an identifier column, most likely): one-hot would make it that many features.

Missing values (None, NaN, pandas' NA) are refused by default, naming the columns;
with ``handle_missing="impute"`` a numeric column's are replaced by the column's mean
and a categorical column's by its most frequent category (the first in category order
on a tie), both over the fit's rows: scikit-learn's ``SimpleImputer`` with
``strategy="mean"`` and ``strategy="most_frequent"``.
"""

from __future__ import annotations

import dataclasses
import operator
import weakref
from collections import Counter

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize

from scalenc.engine.cluster import compute
from scalenc.engine.reduce import from_numpy_rows, reduce_rows, tree_reduce
from scalenc.exceptions import InputError

__all__ = [
    "CATEGORICAL",
    "HANDLE_UNKNOWN",
    "HANDLE_MISSING",
    "MAX_CATEGORIES",
    "Table",
    "FeatureEncoder",
    "column_kind",
    "is_frame",
    "is_dask_frame",
    "remember_columns",
    "column_names",
    "select_columns",
    "frame_statistics",
    "merge_statistics",
    "encode_frame",
    "fit_features",
    "encode_features",
]

#: Values of the estimators' ``categorical`` parameter.
CATEGORICAL = ("onehot", "ordinal", "error")
#: Values of ``handle_unknown``: categories not seen in ``fit``, at predict.
HANDLE_UNKNOWN = ("error", "ignore")
#: Values of ``handle_missing``.
HANDLE_MISSING = ("error", "impute")
#: Most categories a column may have.
MAX_CATEGORIES = 1000


def column_kind(dtype) -> str:
    """``"numeric"``, ``"categorical"`` (strings, objects, booleans, pandas categories) or
    ``"other"`` (dates, durations, complex numbers) for a column's dtype."""
    import pandas as pd  # deferred: pandas is imported only for tables

    if isinstance(dtype, pd.CategoricalDtype):
        return "categorical"
    kind = getattr(dtype, "kind", "O")
    if kind in "iuf":
        return "numeric"
    if kind in "bOSU":
        return "categorical"
    return "other"


def is_dask_frame(obj) -> bool:
    """A Dask DataFrame or Series (lazy, partitioned).

    Examples
    --------
    >>> import pandas as pd
    >>> import dask.dataframe as dd
    >>> from scalenc.io.tables import is_dask_frame
    >>> frame = pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0]})
    >>> is_dask_frame(dd.from_pandas(frame, npartitions=1)), is_dask_frame(frame)
    (True, False)
    """
    return type(obj).__module__.startswith("dask") and hasattr(obj, "to_dask_array")


def is_frame(obj) -> bool:
    """A pandas or Dask DataFrame, or a :class:`Table`."""
    return isinstance(obj, Table) or (hasattr(obj, "columns") and hasattr(obj, "dtypes"))


class Table:
    """A table of feature columns read lazily, some of them not numbers.

    :func:`scalenc.load` returns one for a Parquet or CSV file with string, categorical or
    boolean feature columns; every estimator takes it as X and encodes it (see the
    estimators' ``categorical`` parameter). It has the shape and row chunks of the table
    (``chunks[0]``: each block's rows, NaN where not known yet).

    Parameters
    ----------
    frame : pandas or Dask DataFrame
        The feature columns; each Dask partition is a row block.
    lengths : tuple of int, optional
        The rows of each partition, when known (Parquet: from the footers).

    Examples
    --------
    >>> import os, tempfile
    >>> import pandas as pd
    >>> from scalenc import LRClassifier, load
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "people.parquet")
    >>> pd.DataFrame(
    ...     {"age": [31, 45, 27, 52] * 25, "city": ["Oslo", "Rome", "Oslo", "Lima"] * 25,
    ...      "y": [0, 1, 0, 1] * 25}
    ... ).to_parquet(path, row_group_size=40)
    >>> X, y = load(path, label_column="y")
    >>> X, X.chunks[0]
    (Table(100 rows × 2 columns: 1 categorical, 1 numeric), (40, 40, 20))
    >>> model = LRClassifier().fit(X, y)
    >>> model.feature_encoder_.feature_names_out
    ['age', 'city=Lima', 'city=Oslo', 'city=Rome']
    >>> model.predict(X).chunks  # lazy, one block per row group
    ((40, 40, 20),)
    >>> folder.cleanup()
    """

    ndim = 2
    dtype = np.dtype(object)

    def __init__(self, frame, lengths=None):
        self.frame = frame
        if lengths is None and not hasattr(frame, "npartitions"):
            lengths = (len(frame),)
        self.lengths = None if lengths is None else tuple(int(n) for n in lengths)

    @property
    def columns(self):
        return self.frame.columns

    @property
    def dtypes(self):
        return self.frame.dtypes

    @property
    def chunks(self) -> tuple:
        rows = self.lengths or (np.nan,) * self.frame.npartitions
        return (rows, (len(self.columns),))

    @property
    def numblocks(self) -> tuple:
        return (len(self.chunks[0]), 1)

    @property
    def shape(self) -> tuple:
        rows = sum(self.lengths) if self.lengths is not None else np.nan
        return (rows, len(self.columns))

    @property
    def meta(self):
        """An empty pandas DataFrame with the table's columns and dtypes."""
        return self.frame._meta if hasattr(self.frame, "npartitions") else self.frame.iloc[:0]

    def parts(self) -> list:
        """The row blocks as delayed pandas DataFrames (one, in memory, for pandas)."""
        if hasattr(self.frame, "to_delayed"):
            return list(self.frame.to_delayed())
        return [dask.delayed(self.frame, traverse=False)]

    def __dask_tokenize__(self):
        return ("scalenc.Table", tokenize(self.frame), self.lengths)

    def column_kinds(self) -> str:
        """The columns by kind, such as ``"1 categorical, 2 numeric"``."""
        kinds = Counter(column_kind(t) for t in self.dtypes)
        return ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))

    def __repr__(self) -> str:
        return f"Table({self.shape[0]} rows × {self.shape[1]} columns: {self.column_kinds()})"


@dataclasses.dataclass(frozen=True, eq=False)
class FeatureEncoder:
    """What a fit learned about a table's columns, applied to every block at predict.

    Attributes
    ----------
    columns : list
        The input's feature columns, in its order (positions for an array).
    numeric, categorical : list of int
        Positions in ``columns`` of the numeric and the categorical columns.
    categories : list of ndarray
        Each categorical column's categories, in the order of its one-hot block.
    numeric_fill : ndarray (len(numeric),)
        The value imputed for a missing numeric entry (the column's mean); NaN where
        missing values are refused.
    categorical_fill : list
        The category imputed for a missing categorical entry (the most frequent), or None.
    encoding, handle_unknown, handle_missing : str
        The estimator's ``categorical``, ``handle_unknown`` and ``handle_missing``.
    dtype : str
        The encoded blocks' dtype: float32 when every numeric column is, else float64.
    """

    columns: list
    numeric: list
    categorical: list
    categories: list
    numeric_fill: np.ndarray
    categorical_fill: list
    encoding: str
    handle_unknown: str
    handle_missing: str
    dtype: str

    @property
    def n_output(self) -> int:
        """The number of encoded features."""
        if self.encoding == "ordinal":
            return len(self.numeric) + len(self.categorical)
        return len(self.numeric) + sum(len(c) for c in self.categories)

    @property
    def feature_names_out(self) -> list[str]:
        """The encoded features' names: numeric columns as they are, one-hot columns as
        ``column=value`` (scikit-learn writes ``column_value``)."""
        names = [str(self.columns[i]) for i in self.numeric]
        for position, categories in zip(self.categorical, self.categories):
            name = str(self.columns[position])
            if self.encoding == "ordinal":
                names.append(name)
            else:
                names.extend(f"{name}={value}" for value in categories)
        return names


# --- column names --------------------------------------------------------------------------

#: id of a Dask array → (a weak reference to it, the names of the table columns it holds):
#: what :func:`scalenc.load` read from a numeric Parquet or CSV file, so that a model fitted
#: on it checks them by name. Kept by identity, not by the array's name: an array of the
#: same numbers read from a file without names (``.npz``) has the same Dask name.
_COLUMNS: dict[int, tuple] = {}


def remember_columns(X, names) -> None:
    """Remember that the Dask array ``X`` holds the table columns ``names``, in order
    (for as long as X lives)."""
    if isinstance(X, da.Array) and names is not None and len(names) == X.shape[1]:
        key = id(X)
        ref = weakref.ref(X, lambda _, key=key: _COLUMNS.pop(key, None))
        _COLUMNS[key] = (ref, tuple(names))


def column_names(X) -> list | None:
    """X's column names: a DataFrame's or a :class:`Table`'s, those :func:`remember_columns`
    kept for a Dask array read from a table, else None (an array's columns are positions).

    Examples
    --------
    >>> import dask.array as da
    >>> from scalenc.io.tables import column_names, remember_columns
    >>> X = da.zeros((4, 2), chunks=2)
    >>> column_names(X) is None
    True
    >>> remember_columns(X, ["a", "b"])
    >>> column_names(X), column_names(da.zeros((4, 2), chunks=2))
    (['a', 'b'], None)
    """
    if isinstance(X, da.Array):
        ref, names = _COLUMNS.get(id(X), (None, None))
        return list(names) if ref is not None and ref() is X else None
    return list(X.columns) if is_frame(X) else None


def select_columns(X, names: list):
    """The columns ``names`` of X (a DataFrame, a :class:`Table` or a Dask array whose
    columns :func:`column_names` knows), in that order."""
    if isinstance(X, Table):
        return Table(X.frame[names], X.lengths)
    if isinstance(X, da.Array):
        current = column_names(X)
        out = X[:, [current.index(name) for name in names]]
        remember_columns(out, names)
        return out
    return X[names]


# --- block functions -----------------------------------------------------------------------


def _numeric_values(frame, names) -> np.ndarray:
    """The numeric columns as float64 with NaN for missing entries (pandas' NA included)."""
    if not names:
        return np.empty((len(frame), 0))
    try:
        return frame[list(names)].to_numpy(dtype=np.float64, na_value=np.nan)
    except (ValueError, TypeError):
        _refuse_non_numbers(frame, names)
        raise


def _refuse_non_numbers(frame, names) -> None:
    """Name the first numeric column holding a value that is not a number, and the value."""
    import pandas as pd  # deferred: pandas is imported only for tables

    for name in names:
        column = frame[name]
        bad = pd.to_numeric(column, errors="coerce").isna() & column.notna()
        if bad.any():
            value = column[bad].iloc[0]
            raise InputError(
                f"Feature column {name!r} holds {value!r} ({int(bad.sum())} such value(s)), "
                "not a number; the model was fitted on it as a numeric column. Correct or "
                "remove those values (an empty cell is a missing value), or refit on data "
                "where the column is text to encode it as categories."
            )


def _plain(value):
    """A NumPy scalar as the Python scalar a model file can hold."""
    return value.item() if isinstance(value, np.generic) else value


def frame_statistics(frame, numeric, categorical, *, limit: int = MAX_CATEGORIES) -> dict:
    """One block's partial: its rows, the numeric columns' sums, counts and missing entries,
    and each categorical column's value counts (at most ``limit + 1`` values kept: enough
    to tell that a column has too many) and missing entries."""
    values = _numeric_values(frame, numeric)
    counts = []
    cat_missing = np.zeros(len(categorical), dtype=np.int64)
    for j, name in enumerate(categorical):
        column = frame[name]
        absent = column.isna().to_numpy()
        cat_missing[j] = absent.sum()
        tally = column[~absent].value_counts(sort=False)
        counts.append({_plain(v): int(c) for v, c in list(tally.items())[: limit + 1]})
    return {
        "rows": len(frame),
        **_column_sums_block(values),
        "values": counts,
        "cat_missing": cat_missing,
        "limit": limit,
    }


def merge_statistics(*parts: dict) -> dict:
    """Partials of :func:`frame_statistics` merged (one node of the tree)."""
    out = dict(parts[0])
    out["values"] = [Counter(v) for v in parts[0]["values"]]
    for part in parts[1:]:
        for key in ("rows", "sum", "count", "missing", "cat_missing"):
            out[key] = out[key] + part[key]
        for tally, more in zip(out["values"], part["values"]):
            tally.update(more)
    limit = out["limit"]
    out["values"] = [dict(list(t.items())[: limit + 1]) for t in out["values"]]
    return out


def _check_missing(name, absent: np.ndarray, encoder: FeatureEncoder) -> None:
    if absent.any() and encoder.handle_missing != "impute":
        raise InputError(
            f"Feature column {name!r} has {int(absent.sum())} missing value(s). Drop those "
            "rows, or refit with handle_missing='impute' (--handle-missing impute) to "
            "impute them as the fit learned."
        )


def encode_frame(frame, encoder: FeatureEncoder) -> np.ndarray:
    """One block of a table as the encoded features (rows × ``encoder.n_output``)."""
    import pandas as pd  # deferred: pandas is imported only for tables

    absent_columns = [c for c in encoder.columns if c not in frame.columns]
    if absent_columns:
        raise InputError(
            f"The data has no column(s) {absent_columns[:10]}, which the model was fitted on."
        )
    out = np.zeros((len(frame), encoder.n_output), dtype=encoder.dtype)
    q = len(encoder.numeric)
    values = _numeric_values(frame, [encoder.columns[i] for i in encoder.numeric])
    if encoder.handle_missing == "impute":
        values = np.where(np.isnan(values), encoder.numeric_fill, values)
    out[:, :q] = values
    offset = q
    for j, position in enumerate(encoder.categorical):
        name, categories = encoder.columns[position], encoder.categories[j]
        column = frame[name]
        index = pd.Index(np.asarray(categories, dtype=object), dtype=object)
        codes = np.asarray(index.get_indexer(column.astype(object)), dtype=np.int64)
        absent = column.isna().to_numpy()
        _check_missing(name, absent, encoder)
        if absent.any():
            codes[absent] = index.get_loc(encoder.categorical_fill[j])
        unknown = (codes < 0) & ~absent
        if unknown.any() and encoder.handle_unknown == "error":
            seen = sorted({str(v) for v in column[unknown].tolist()})
            raise InputError(
                f"Feature column {name!r} holds {int(unknown.sum())} value(s) the fit never "
                f"saw: {seen[:5]}{' …' if len(seen) > 5 else ''}. Refit on data that has "
                "them, or fit with handle_unknown='ignore' (--handle-unknown ignore): "
                "then an unknown value is encoded as all zeros (one-hot) or -1 (ordinal)."
            )
        if encoder.encoding == "ordinal":
            out[:, offset] = codes
            offset += 1
            continue
        rows = np.flatnonzero(codes >= 0)
        out[rows, offset + codes[rows]] = 1.0
        offset += len(categories)
    return out


def _column_sums_block(X, *, row_start=0):
    """Each column's sum and count of the values present, and its missing values."""
    missing = np.isnan(X)
    return {
        "sum": np.where(missing, 0.0, X).sum(axis=0, dtype=np.float64),
        "count": (~missing).sum(axis=0),
        "missing": missing.sum(axis=0),
    }


def _fill_block(X, fill):
    return np.where(np.isnan(X), fill.astype(X.dtype), X)


# --- learning the encoder ------------------------------------------------------------------


def _frame_of(X):
    """(frame, its partitions' rows where known) of a table-like X, else (None, None)."""
    if isinstance(X, Table):
        return X.frame, X.lengths
    if not is_frame(X):
        return None, None
    return X, ((len(X),) if in_memory(X) else None)


def in_memory(frame) -> bool:
    return not hasattr(frame, "npartitions")


def _ordered(tally: dict, dtype) -> list:
    """A column's categories: a ``category`` dtype's own (a Dask frame's when known; a
    Parquet file's meta holds none, its row groups each their own), else the values seen."""
    import pandas as pd  # deferred: pandas is imported only for tables

    if isinstance(dtype, pd.CategoricalDtype) and len(dtype.categories):
        return [_plain(v) for v in dtype.categories]
    values = list(tally)
    try:
        return sorted(values)
    except TypeError:  # mixed types in an object column
        return sorted(values, key=lambda v: (type(v).__name__, str(v)))


def _refuse_other(frame, source) -> None:
    other = [c for c, t in frame.dtypes.items() if column_kind(t) == "other"]
    if other:
        kinds = sorted({str(frame.dtypes[c]) for c in other})
        raise InputError(
            f"{source}: feature column(s) {other[:10]} hold {', '.join(kinds)} values, which "
            "scalenc does not encode. Convert them to numbers (e.g. seconds since an epoch) "
            "or leave them out with feature_columns= (--feature-columns)."
        )


def _encoder_from(stats, frame, numeric, categorical, params, source) -> FeatureEncoder:
    """The encoder of a table's merged statistics, refusing what the parameters do not
    allow (missing values, too many categories)."""
    columns = list(frame.columns)
    missing = {
        **{c: int(m) for c, m in zip(numeric, stats["missing"]) if m},
        **{c: int(m) for c, m in zip(categorical, stats["cat_missing"]) if m},
    }
    if missing and params["handle_missing"] != "impute":
        listed = ", ".join(f"{c!r} ({m})" for c, m in list(missing.items())[:10])
        raise InputError(
            f"{source}: feature column(s) with missing values: {listed}. Drop those rows, "
            "or pass handle_missing='impute' (--handle-missing impute) to replace them "
            "by the column's mean (numeric) or most frequent value (categorical)."
        )
    empty = [c for c, n in zip(numeric, stats["count"]) if n == 0] + [
        c for c, tally in zip(categorical, stats["values"]) if not tally
    ]
    if empty and params["handle_missing"] == "impute":
        raise InputError(
            f"{source}: feature column(s) {empty[:10]} have no value at all to impute from; "
            "leave them out with feature_columns= (--feature-columns)."
        )
    categories, fills = [], []
    for name, tally in zip(categorical, stats["values"]):
        if len(tally) > stats["limit"]:
            raise InputError(
                f"{source}: feature column {name!r} has more than {stats['limit']} distinct "
                "values (an identifier?); one-hot would make each a feature. Leave it out "
                "with feature_columns= (--feature-columns), or encode it yourself."
            )
        order = _ordered(tally, frame.dtypes[name])
        categories.append(np.array(order + [None], dtype=object)[:-1])
        counts = [tally.get(v, 0) for v in order]
        fills.append(order[int(np.argmax(counts))] if counts else None)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.asarray(stats["sum"], dtype=np.float64) / stats["count"]
    floats = [frame.dtypes[c] for c in numeric]
    single = bool(floats) and all(getattr(t, "name", "") == "float32" for t in floats)
    impute = params["handle_missing"] == "impute"
    return FeatureEncoder(
        columns=columns,
        numeric=[columns.index(c) for c in numeric],
        categorical=[columns.index(c) for c in categorical],
        categories=categories,
        numeric_fill=means if impute else np.full(len(numeric), np.nan),
        categorical_fill=fills if impute else [None] * len(categorical),
        encoding=params["categorical"],
        handle_unknown=params["handle_unknown"],
        handle_missing=params["handle_missing"],
        dtype="float32" if single else "float64",
    )


def _encoded_in_memory(X, frame, encoder: FeatureEncoder):
    """A pandas frame encoded: a NumPy array for a DataFrame, and for a :class:`Table` (a
    CSV file's) a Dask array in the table's row blocks, which its labels were given."""
    encoded = encode_frame(frame, encoder)
    return from_numpy_rows(encoded, X.lengths) if isinstance(X, Table) else encoded


def _encoded_blocks(parts, encoder: FeatureEncoder, lengths) -> da.Array:
    encode = dask.delayed(encode_frame, pure=True)
    blocks = [
        da.from_delayed(encode(part, encoder), shape=(rows, encoder.n_output), dtype=encoder.dtype)
        for part, rows in zip(parts, lengths)
    ]
    return da.concatenate(blocks, axis=0)


def fit_features(X, params: dict, *, source: str = "X"):
    """(X with its features encoded, the :class:`FeatureEncoder`) for ``fit``.

    X is returned as it is, with no encoder, unless it is a table (pandas or Dask
    DataFrame, :class:`Table`) with a string, categorical or boolean feature column, or
    ``params["handle_missing"]`` is ``"impute"`` and X is a table; arrays are imputed by
    :func:`impute_array` once they are Dask arrays. ``params`` holds the estimator's
    ``categorical``, ``handle_unknown`` and ``handle_missing``.

    One pass over a Dask table (its statistics and partition rows, merged in a tree of
    the configured fan-in); a pandas DataFrame is encoded in memory. The encoded X is a
    NumPy array (pandas) or a Dask array with one row block per partition.
    """
    frame, lengths = _frame_of(X)
    if frame is None:
        return X, None
    _refuse_other(frame, source)
    kinds = {c: column_kind(t) for c, t in frame.dtypes.items()}
    categorical = [c for c, k in kinds.items() if k == "categorical"]
    numeric = [c for c, k in kinds.items() if k == "numeric"]
    if not categorical and params["handle_missing"] != "impute":
        return (X.frame if isinstance(X, Table) else X), None
    if categorical and params["categorical"] == "error":
        raise InputError(
            f"{source}: feature column(s) {categorical[:10]} are not numeric and "
            "categorical='error'. Pass categorical='onehot' (--categorical onehot) to "
            "encode them, or leave them out with feature_columns= (--feature-columns)."
        )
    if in_memory(frame):
        stats = frame_statistics(frame, numeric, categorical)
        encoder = _encoder_from(stats, frame, numeric, categorical, params, source)
        return _encoded_in_memory(X, frame, encoder), encoder
    parts = Table(frame, lengths).parts()
    statistics = dask.delayed(frame_statistics, pure=True)
    partials = [statistics(part, numeric, categorical) for part in parts]
    merged = tree_reduce(partials, merge_statistics)
    rows = [dask.delayed(operator.getitem, pure=True)(p, "rows") for p in partials]
    stats, rows = compute(merged, rows)
    encoder = _encoder_from(stats, frame, numeric, categorical, params, source)
    return _encoded_blocks(parts, encoder, rows), encoder


def impute_array(X: da.Array, params: dict):
    """(X with missing entries imputed, the encoder) for a numeric Dask array X when
    ``params["handle_missing"]`` is ``"impute"``, else (X, None): each column's NaN
    replaced by its mean over the non-missing entries, learned in one pass."""
    if params["handle_missing"] != "impute":
        return X, None
    (stats,) = compute(reduce_rows(_column_sums_block, X))
    p = X.shape[1]
    empty = np.flatnonzero(stats["count"] == 0)
    if empty.size:
        raise InputError(
            f"X's column(s) {empty[:10].tolist()} have no value at all to impute from; "
            "leave them out."
        )
    encoder = FeatureEncoder(
        columns=list(range(p)),
        numeric=list(range(p)),
        categorical=[],
        categories=[],
        numeric_fill=stats["sum"] / stats["count"],
        categorical_fill=[],
        encoding=params["categorical"],
        handle_unknown=params["handle_unknown"],
        handle_missing="impute",
        dtype=str(X.dtype),
    )
    return fill_array(X, encoder), encoder


def fill_array(X: da.Array, encoder: FeatureEncoder) -> da.Array:
    """A numeric Dask array with its NaN replaced by the encoder's column means."""
    return X.map_blocks(_fill_block, fill=encoder.numeric_fill, dtype=X.dtype)


def encode_features(X, encoder: FeatureEncoder, *, known_lengths: bool = False):
    """X encoded as ``encoder`` learned in ``fit`` (predict, transform, score).

    A table gives a NumPy array (pandas) or a lazy Dask array (one block per partition,
    rows unknown until computed for a Dask DataFrame, unless ``known_lengths``: then its
    partitions' rows are counted first, one pass). An array is returned as it is when
    the encoder is for arrays (imputation is applied once X is a Dask array, by
    :func:`fill_array`); an array given to a model fitted on categorical columns is refused.
    """
    frame, lengths = _frame_of(X)
    if frame is None:
        if encoder.categorical:
            names = [encoder.columns[i] for i in encoder.categorical]
            raise InputError(
                f"This model was fitted on a table with categorical column(s) {names[:10]}; "
                "pass the data as a DataFrame (or a file) with the same columns, not as an "
                "array."
            )
        return X
    if in_memory(frame):
        return _encoded_in_memory(X, frame, encoder)
    parts = Table(frame, lengths).parts()
    if lengths is None and known_lengths:
        (lengths,) = compute([dask.delayed(len, pure=True)(part) for part in parts])
    return _encoded_blocks(parts, encoder, lengths or [np.nan] * len(parts))
