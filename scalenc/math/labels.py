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
"""

from __future__ import annotations

import numpy as np

from scalenc.exceptions import InputError

__all__ = [
    "UNLABELED",
    "unlabeled_mask",
    "sorted_classes",
    "labeled_unique",
    "union",
    "encode",
    "check_class_values",
    "refuse_missing",
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
    if values.dtype.kind == "f":
        missing = np.isnan(values).any()
    elif values.dtype.kind == "O":
        missing = any(v is None or (isinstance(v, float) and np.isnan(v)) for v in values.flat)
    else:
        missing = False
    if missing:
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
    codes = np.full(values.shape, UNLABELED, dtype=np.int64)
    labeled = ~unlabeled_mask(values, marker)
    found = values[labeled]
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
