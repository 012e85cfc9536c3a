"""Class labels: the unlabeled markers, the sorted class list, and class codes.

Plain NumPy, no dask. Labels are any hashable class values. A row is *unlabeled* when its
label is the estimator's ``unlabeled`` marker — ``-1`` by default, as in
:mod:`sklearn.semi_supervised` — or ``None``/NaN; unlabeled rows never enter a class
statistic. With ``marker=None`` (fully supervised data) no value is a marker: ``-1`` is an
ordinary class and ``None``/NaN labels are refused. Class codes are 0..K−1 in the order of
the sorted class list, −1 for an unlabeled row.

Every module that reads labels goes through these functions, so the markers, the order of
the classes and the encoding are defined once: the passes call them on each block of y,
the estimators on the class lists the passes return.

The class-finding pass also counts each block's rows per class and its rows labeled with
the marker (:func:`class_counts`, merged by :func:`merge_class_counts`), so that
:func:`warn_marker_as_class` can tell a −1 that is likely a class (labels −1, 0, 1) from
the unlabeled rows of semi-supervised data at no cost of another read of y.

A block's predictions meet its true labels in :func:`confusion_counts` (the evaluation's
pass), with the same markers and encoding.
"""

from __future__ import annotations

import numbers
import os
import sys
import warnings
from collections import Counter

import numpy as np

from scalenc.exceptions import DataWarning, InputError

__all__ = [
    "UNLABELED",
    "unlabeled_mask",
    "sorted_classes",
    "labeled_unique",
    "union",
    "encode",
    "check_class_values",
    "refuse_missing",
    "class_counts",
    "merge_class_counts",
    "marker_looks_like_class",
    "warn_marker_as_class",
    "user_stacklevel",
    "confusion_counts",
]


#: The class code of an unlabeled row.
UNLABELED = -1


def _is_marker(value, marker) -> bool:
    """Whether one object label equals the marker (numbers match numbers, not bools;
    strings match strings)."""
    if isinstance(value, bool) or isinstance(value, np.bool_):
        return False
    if isinstance(marker, str):
        return isinstance(value, str) and value == marker
    return isinstance(value, (int, float, np.integer, np.floating)) and value == marker


def unlabeled_mask(values: np.ndarray, marker=UNLABELED) -> np.ndarray:
    """True where a label means "unknown": the ``marker`` (``-1`` by default; ``None`` for
    no marker) and, unless ``marker`` is None, None/NaN."""
    values = np.asarray(values)
    kind = values.dtype.kind
    if marker is None:
        return np.zeros(values.shape, dtype=bool)
    numeric_marker = not isinstance(marker, str)
    if kind in "iu":
        return values == marker if numeric_marker else np.zeros(values.shape, dtype=bool)
    if kind == "f":
        nan = np.isnan(values)
        return nan | (values == marker) if numeric_marker else nan
    if kind in "US":
        if numeric_marker:
            return np.zeros(values.shape, dtype=bool)
        return values == (marker if kind == "U" else marker.encode())
    if kind == "O":
        out = np.fromiter(
            (
                v is None or (isinstance(v, float) and np.isnan(v)) or _is_marker(v, marker)
                for v in values.ravel()
            ),
            dtype=bool,
            count=values.size,
        )
        return out.reshape(values.shape)
    return np.zeros(values.shape, dtype=bool)


def _sort_key(value):
    return (type(value).__name__, value)


def sorted_classes(values) -> np.ndarray:
    """The distinct values, sorted (object labels by type name, then value)."""
    values = np.asarray(values)
    if values.dtype.kind == "O":
        return np.array(sorted(set(values.tolist()), key=_sort_key), dtype=object)
    return np.unique(values)


def refuse_missing(values: np.ndarray) -> None:
    """Refuse None/NaN labels where no label marks unlabeled rows (``marker=None``)."""
    if unlabeled_mask(values, np.nan).any():  # NaN as the marker: None/NaN alone
        raise InputError(
            "Input y contains None or NaN labels, and unlabeled=None says every row is "
            "labeled. Drop those rows, or pass unlabeled=-1 (the default) to treat "
            "None/NaN (and -1) as unlabeled rows."
        )


def labeled_unique(values, marker=UNLABELED) -> np.ndarray:
    """The sorted distinct labels of the labeled entries of ``values`` (with ``marker=None``,
    of all entries, None/NaN being refused)."""
    values = np.asarray(values)
    if marker is None:
        refuse_missing(values)
        return sorted_classes(values)
    return sorted_classes(values[~unlabeled_mask(values, marker)])


def union(*class_lists: np.ndarray) -> np.ndarray:
    """The sorted union of several class lists (associative: a tree merge of blocks)."""
    return sorted_classes(np.concatenate(class_lists))


def encode(
    values, classes: np.ndarray, *, unknown: int | None = None, marker=UNLABELED
) -> np.ndarray:
    """Class codes (int64) of ``values``: 0..K−1, −1 for an unlabeled value (see
    :func:`unlabeled_mask` for ``marker``).

    A labeled value that is not one of ``classes`` is an error naming it, or, with
    ``unknown``, gets that code (the evaluation of a model on labels it never saw).
    """
    values = np.asarray(values)
    labeled = ~unlabeled_mask(values, marker)
    every = bool(labeled.all())  # then no copy of the values, and the codes are `where`
    found = values.ravel() if every else values[labeled]
    lookup_by_value = (
        classes.dtype.kind == "O"
        or found.dtype.kind == "O"
        or (classes.dtype.kind in "US") != (found.dtype.kind in "US")
    )
    if lookup_by_value:
        lookup = {v: i for i, v in enumerate(classes.tolist())}
        missing = -2 if unknown is None else unknown
        where = np.fromiter((lookup.get(v, missing) for v in found.tolist()), np.int64, found.size)
        bad = where == missing if unknown is None else np.zeros(found.size, dtype=bool)
    else:
        span = _table_span(found, classes)
        if span is not None:  # integers of a small range: a lookup table, no search
            table = np.full(span[1] - span[0] + 1, -2, dtype=np.int64)
            table[classes.astype(np.int64) - span[0]] = np.arange(classes.size)
            where = table[_offsets(found, span[0])]
            bad = where == -2
        else:
            where = np.clip(np.searchsorted(classes, found), 0, max(classes.size - 1, 0))
            bad = classes[where] != found if classes.size else np.ones(found.size, dtype=bool)
        if unknown is not None:
            where = np.where(bad, unknown, where)
            bad = np.zeros(found.size, dtype=bool)
    if bad.any():
        value = found[bad][0]
        raise InputError(
            f"Label {getattr(value, 'item', lambda: value)()!r} is not one of the classes "
            f"{classes.tolist()}; declare every class (partial_fit's `classes`) or mark the "
            "row as unlabeled."
        )
    if every:
        return np.asarray(where, dtype=np.int64).reshape(values.shape)
    codes = np.full(values.shape, UNLABELED, dtype=np.int64)
    codes[labeled] = where
    return codes


def check_class_values(classes: np.ndarray) -> None:
    """Refuse infinite and continuous targets, as scikit-learn's classifiers do."""
    if classes.dtype.kind == "f" and not np.all(np.isfinite(classes)):
        raise InputError(
            f"Input y contains infinity or a value too large for {classes.dtype!r}; "
            "mark unknown labels with -1 or NaN instead."
        )
    if classes.dtype.kind == "f" and not np.all(np.mod(classes, 1) == 0):
        raise InputError(
            "Unknown label type: continuous. y holds non-integer floats such as "
            f"{classes[np.mod(classes, 1) != 0][0]!r}; a classifier needs class labels "
            "(for regression use another estimator)."
        )


# --- the marker −1 read as a class? ----------------------------------------------------------

#: The −1 rows look like one more class when they are at most this many times the rows of
#: the largest labeled class (see :func:`marker_looks_like_class`).
CLASS_SIZED = 1.5


def class_counts(values, marker=UNLABELED) -> dict:
    """One block of labels counted: ``classes`` (its sorted distinct labeled values, as
    :func:`labeled_unique`), ``counts`` (int64, its rows per class) and ``marker_rows``
    (its rows labeled ``marker`` itself, None/NaN rows not counted)."""
    values = np.asarray(values)
    if marker is None:
        refuse_missing(values)
        labeled, marker_rows = values, 0
    else:
        unlabeled = unlabeled_mask(values, marker)
        labeled = values[~unlabeled] if unlabeled.any() else values.ravel()
        marker_rows = int(unlabeled.sum() - unlabeled_mask(values[unlabeled], np.nan).sum())
    if labeled.dtype.kind == "O":
        tally = Counter(labeled.tolist())
        classes = np.array(sorted(tally, key=_sort_key), dtype=object)
        counts = np.array([tally[value] for value in classes.tolist()], dtype=np.int64)
    elif (span := _table_span(labeled)) is not None:  # integers of a small range: no sort
        counts = np.bincount(_offsets(labeled, span[0]), minlength=1)
        present = np.flatnonzero(counts)
        classes, counts = (present + span[0]).astype(labeled.dtype), counts[present]
    else:
        classes, counts = np.unique(labeled, return_counts=True)
    return {"classes": classes, "counts": counts.astype(np.int64), "marker_rows": marker_rows}


#: Integer labels whose values span fewer than this many integers are counted and coded
#: by table (:func:`class_counts`' ``bincount``, :func:`encode`'s lookup) instead of by
#: sorting and searching: a 200 000-row block's labels took 13 ms the sorted way.
TABLE_SPAN = 2**16


def _offsets(values: np.ndarray, low: int) -> np.ndarray:
    """``values − low`` as int64 (no copy of int64 values when ``low`` is 0)."""
    values = values.astype(np.int64, copy=False)
    return values - low if low else values


def _table_span(*arrays: np.ndarray) -> tuple[int, int] | None:
    """(lowest, highest) of integer arrays, at least one not empty, whose values span
    fewer than :data:`TABLE_SPAN` integers (all within int64); else None."""
    if any(a.dtype.kind not in "iu" for a in arrays) or not any(a.size for a in arrays):
        return None
    lo = min(int(a.min()) for a in arrays if a.size)
    hi = max(int(a.max()) for a in arrays if a.size)
    return (lo, hi) if hi - lo < TABLE_SPAN and -(2**62) < lo and hi < 2**62 else None


def merge_class_counts(*parts: dict) -> dict:
    """Merge :func:`class_counts` partials: the union of the classes, the counts of each
    class summed (associative: a tree merge of blocks)."""
    classes = union(*(part["classes"] for part in parts))
    counts = np.zeros(classes.size, dtype=np.int64)
    for part in parts:
        counts[encode(part["classes"], classes, marker=None)] += part["counts"]
    marker_rows = sum(part["marker_rows"] for part in parts)
    return {"classes": classes, "counts": counts, "marker_rows": marker_rows}


def _integer_classes(classes: np.ndarray) -> np.ndarray | None:
    """The classes as int64 when every one is an integer number (not a bool), else None."""
    if classes.dtype.kind in "iu":
        return classes.astype(np.int64)
    if classes.dtype.kind == "f":
        small = np.all(np.abs(classes) < 2.0**62)  # False for inf, NaN
        whole = small and np.all(np.mod(classes, 1) == 0)
        return classes.astype(np.int64) if whole else None
    if classes.dtype.kind == "O":
        values = classes.tolist()
        if all(
            isinstance(v, numbers.Real)
            and not isinstance(v, bool)
            and float(v).is_integer()
            and abs(v) < 2**62
            for v in values
        ):
            return np.array([int(v) for v in values], dtype=np.int64)
    return None


def marker_looks_like_class(classes, counts, marker_rows: int, marker=UNLABELED) -> bool:
    """Whether the rows labeled with the marker −1 look like one more class.

    True when all of these hold:

    * the marker is the number −1 (``unlabeled=-1``, the default) and labels some rows;
    * the labeled classes are at least two integers that −1 makes a signed encoding: with
      −1 they are symmetric about 0, as {−1, 0, 1} or {−2, −1, 0, 1, 2} (labeled classes
      {0, 1} or {−2, 0, 1, 2}). Not {0, 1, 2, …}, scikit-learn's semi-supervised labels,
      where −1 = min − 1 is the marker; never string classes;
    * the −1 rows are class-sized: at most :data:`CLASS_SIZED` (1.5) times the rows of the
      largest labeled class. Semi-supervised data has more unlabeled rows than that: with
      two balanced classes 0 and 1, data with more than 43% of its rows unlabeled is never
      taken for a class encoding.
    """
    if isinstance(marker, (bool, np.bool_, str)) or not isinstance(marker, numbers.Real):
        return False
    if marker != -1 or marker_rows <= 0:
        return False
    values = _integer_classes(np.asarray(classes))
    if values is None or values.size < 2:
        return False
    signed = np.union1d(values, [-1])
    symmetric = np.array_equal(signed, -signed[::-1])
    return bool(symmetric and marker_rows <= CLASS_SIZED * np.max(counts))


def user_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside scalenc, for a warning issued by the
    caller of this function: it points at the user's call (``fit``) at any depth."""
    package = os.path.dirname(os.path.dirname(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level


def warn_marker_as_class(classes, counts, marker_rows: int, marker=UNLABELED) -> None:
    """A :class:`~scalenc.exceptions.DataWarning` when the −1 rows look like a class
    (:func:`marker_looks_like_class`): they are fitted as unlabeled, not as class −1."""
    if not marker_looks_like_class(classes, counts, marker_rows, marker):
        return
    shown = np.asarray(classes).tolist()
    if len(shown) > 8:
        shown = f"{len(shown)} classes {shown[0]}..{shown[-1]}"
    warnings.warn(
        f"y holds the labels -1 and {shown}: the {marker_rows} rows labeled -1 are taken as "
        "unlabeled (unlabeled=-1, the default, as in sklearn.semi_supervised), so they are "
        "left out of the fit and never predicted. If -1 is a class, pass unlabeled=None "
        "(`--unlabeled none` on the command) to fit it as one.",
        DataWarning,
        stacklevel=user_stacklevel(),
    )


def confusion_counts(pred: np.ndarray, y: np.ndarray, classes: np.ndarray, *, marker=UNLABELED):
    """Confusion counts of one block of predictions and true labels.

    Returns the K×K matrix (rows: true class, columns: predicted), ``[rows whose label is
    not a class, unlabeled rows]`` and the predictions per class of the rows whose label is
    not a class. Unlabeled rows (the ``marker``, −1 by default, and None/NaN) are left out
    of the matrix.
    """
    y = np.asarray(y)
    unlabeled = unlabeled_mask(y, marker)
    K = classes.size
    p = encode(np.asarray(pred)[~unlabeled], classes, unknown=-2, marker=None)
    t = encode(y[~unlabeled], classes, unknown=-2, marker=None)
    known = t >= 0
    matrix = np.bincount(t[known] * K + p[known], minlength=K * K).reshape(K, K)
    other = np.bincount(p[~known], minlength=K)
    counts = np.array([int((~known).sum()), int(unlabeled.sum())])
    return matrix.astype(np.int64), counts, other.astype(np.int64)
