"""Cross-validation folds of the rows, as row-aligned Dask arrays: built where they belong.

An int ``cv`` gives hash folds of the global row index (:func:`scalenc.math.sampling.fold_of`),
computed on the workers block by block; nothing goes to the client. A scikit-learn
splitter (or an iterable of splits) is run on the client over the labels (8 bytes a row,
at most :data:`MAX_SPLIT_ROWS` rows) and its held-out fold of each row sent back as a Dask
array aligned with X. Every estimator that cross-validates from sums of per-fold partials
(nRBFN's Gram, the held-out errors) takes its folds from here.
"""

from __future__ import annotations

import numbers

import dask.array as da
import numpy as np
from sklearn.model_selection import check_cv

from scalenc.engine.cluster import compute
from scalenc.engine.reduce import from_numpy_rows
from scalenc.exceptions import InputError
from scalenc.math.sampling import fold_of

__all__ = ["MAX_SPLIT_ROWS", "row_folds", "held_out"]

#: Most rows for which a splitter or an iterable of splits is accepted as ``cv``: their
#: fold of every row is built on the client (8 bytes a row).
MAX_SPLIT_ROWS = 10_000_000


def row_folds(cv, X: da.Array, codes: da.Array, groups, *, owner: str):
    """(folds, n_folds) for ``cv``: ``folds`` None for the hash folds of an int ``cv``,
    else a Dask array of each row's held-out fold, row-aligned with X.

    A splitter's splits must partition the labeled rows (each split's training rows are
    all labeled rows outside its held-out rows, and the held-out rows of the splits are
    disjoint), because ``owner`` cross-validates from the sums of per-fold partials.

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from sklearn.model_selection import KFold
    >>> from scalenc.engine.folds import row_folds
    >>> X = da.zeros((6, 2), chunks=(3, 2))
    >>> codes = da.from_array(np.array([0, 1, 0, 1, 0, 1]), chunks=3)
    >>> row_folds(3, X, codes, None, owner="NRBFNClassifier")
    (None, 3)
    >>> folds, n_folds = row_folds(KFold(2), X, codes, None, owner="NRBFNClassifier")
    >>> folds.compute(), n_folds
    (array([0, 0, 0, 1, 1, 1]), 2)
    """
    if isinstance(cv, numbers.Integral):
        if groups is not None:
            raise InputError(
                "groups were given but cv is an int (hash folds of the row index); pass a "
                "group splitter such as cv=GroupKFold(5) to use them."
            )
        return None, int(cv)
    n = X.shape[0]
    if n > MAX_SPLIT_ROWS:
        raise InputError(
            f"cv={cv!r} needs the row indices of every split on the client, but X has "
            f"{n} rows (more than {MAX_SPLIT_ROWS}). Pass an int cv: its folds are a hash "
            "of the global row index, computed on the workers block by block."
        )
    (code_values,) = compute(codes)
    code_values = np.asarray(code_values)
    if groups is not None:
        groups = np.asarray(compute(groups)[0] if isinstance(groups, da.Array) else groups)
    fold, n_splits = _partition(
        check_cv(cv, code_values, classifier=True), cv, code_values, groups, owner
    )
    return from_numpy_rows(fold, X.chunks[0]), n_splits


def _partition(splits, cv, code_values, groups, owner):
    """Each row's held-out split, checking that the splits partition the labeled rows."""
    n = code_values.shape[0]
    fold = np.full(n, -1, dtype=np.int64)
    labeled = code_values >= 0
    n_splits = 0
    dummy = np.zeros((n, 0))
    for s, (train, test) in enumerate(splits.split(dummy, code_values, groups)):
        test, train = np.asarray(test), np.asarray(train)
        held, rest = np.zeros((2, n), dtype=bool)
        held[test], rest[train] = True, True
        overlap = (fold[test] >= 0) & labeled[test]
        if overlap.any() or not np.array_equal(rest & labeled, ~held & labeled):
            raise InputError(
                f"cv={cv!r}: {owner} cross-validates λ from the Gram of all rows "
                "minus the held-out rows' Gram, so each split's training rows must be all "
                "labeled rows outside its held-out rows, and the held-out rows of the "
                "splits disjoint (KFold, StratifiedKFold, GroupKFold, LeaveOneGroupOut, "
                f"PredefinedSplit without -1). Split {s} is not of that kind."
            )
        fold[test] = s
        n_splits += 1
    missing = labeled & (fold < 0)
    if missing.any():
        raise InputError(
            f"cv={cv!r} leaves {int(missing.sum())} labeled rows in no held-out set; every "
            "labeled row must be held out once (the splits must partition the rows)."
        )
    if n_splits < 2:
        raise InputError(f"cv={cv!r} gives {n_splits} split(s); at least 2 are needed.")
    return fold, n_splits


def held_out(codes: da.Array, folds, f: int, n_folds: int, seed: int) -> da.Array:
    """Dask boolean array, aligned with ``codes``: the rows of held-out fold ``f`` (of
    ``folds``, or of the hash folds when ``folds`` is None)."""
    if folds is not None:
        return folds == f
    return codes.map_blocks(
        _hash_fold_block,
        n_folds=n_folds,
        seed=seed,
        fold=f,
        dtype=bool,
        meta=np.empty(0, dtype=bool),
    )


def _hash_fold_block(codes, *, n_folds, seed, fold, block_info=None):
    """Whether each row of a block is in the hash fold ``fold`` (:func:`fold_of`)."""
    start = block_info[0]["array-location"][0][0]
    return fold_of(np.arange(start, start + codes.shape[0]), n_folds, seed) == fold
