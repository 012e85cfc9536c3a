"""A fitted model evaluated on data: accuracy, per-class precision, recall and F1 and the
confusion matrix (:func:`evaluate`) from one pass over X, a tree sum of per-block
confusion counts (nothing n-sized reaches the client); and the rows a report plots
(:func:`sample_rows`).
"""

from __future__ import annotations

import time

import dask.array as da
import numpy as np

from scalenc.engine import passes
from scalenc.engine.cluster import compute
from scalenc.exceptions import InputError
from scalenc.math.labels import UNLABELED
from scalenc.report.describe import jsonable

__all__ = [
    "evaluate",
    "confusion_summary",
    "sample_rows",
]


def evaluate(estimator, X, y, *, graph=None) -> dict:
    """Accuracy, per-class report and confusion matrix of a classifier on (X, y).

    Parameters
    ----------
    estimator : fitted classifier with ``predict`` and ``classes_``
    X : Dask array (n, p), y : Dask array (n,) with X's row chunks.
        Unlabeled rows (−1/None/NaN) are left out; a label that is not one of the model's
        classes counts as an error (``unknown_label_rows``).
    graph : edge list, optional
        For an encoder fitted with a graph: its ``predict(X, graph=graph)`` (X None for a
        graph alone), y one label per node.

    Returns
    -------
    dict with ``accuracy``, ``balanced_accuracy``, ``per_class`` (precision, recall, F1,
    support per class), ``macro_avg``, ``weighted_avg``, ``confusion_matrix`` (rows:
    true class, columns: predicted), ``labeled_rows``, ``unlabeled_rows``,
    ``unknown_label_rows``, ``seconds``, ``rows_per_second`` and ``passes`` (1).

    Notes
    -----
    One pass over X: the predictions are a block map, each block is reduced to K×K
    counts, and the counts are summed in a tree of the configured fan-in
    (:func:`scalenc.engine.reduce.fan_in`: Dask's configuration ``scalenc.split-every``).

    Examples
    --------
    >>> import dask.array as da
    >>> from sklearn.datasets import load_iris
    >>> from scalenc import LRClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> model = LRClassifier().fit(X, y)
    >>> from scalenc.report import evaluate
    >>> result = evaluate(model, da.from_array(X, chunks=50), da.from_array(y, chunks=50))
    >>> result["accuracy"] == model.score(X, y), result["passes"]
    (True, 1)
    >>> result["confusion_matrix"][0]  # true class 0, by predicted class
    [50, 0, 0]
    """
    classes = np.asarray(estimator.classes_)
    pred = estimator.predict(X) if graph is None else estimator.predict(X, graph=graph)
    if graph is not None:  # one label per node, in the node blocks of the predictions
        pred, y = da.asarray(pred), da.asarray(y)
        if y.shape[0] != pred.shape[0]:
            raise InputError(
                f"The labels cover {y.shape[0]} nodes but the model predicts "
                f"{pred.shape[0]}; give one label per node (the unlabeled marker where "
                "unknown)."
            )
        y = y.rechunk({0: pred.chunks[0]})
    t0 = time.perf_counter()
    marker = getattr(estimator, "unlabeled", UNLABELED)
    (result,) = compute(passes.confusion_pass(pred, y, classes, marker=marker))
    seconds = time.perf_counter() - t0
    matrix, counts, other = result
    return confusion_summary(
        matrix,
        classes,
        unknown=int(counts[0]),
        unlabeled=int(counts[1]),
        unknown_predicted=other,
        seconds=seconds,
        rows=int(pred.shape[0]),
    )


def confusion_summary(
    matrix, classes, *, unknown=0, unlabeled=0, unknown_predicted=None, seconds=None, rows=None
) -> dict:
    """Scores from a K×K confusion matrix (rows true, columns predicted).

    The keys are :func:`evaluate`'s; ``unknown`` counts labeled rows whose label is not a
    class (errors), ``unknown_predicted`` (K,) the predictions of those rows.

    Examples
    --------
    >>> from scalenc.report import confusion_summary
    >>> summary = confusion_summary([[5, 1], [0, 4]], ["cat", "dog"])
    >>> summary["accuracy"], summary["per_class"]["dog"]["precision"]
    (0.9, 0.8)
    >>> round(summary["balanced_accuracy"], 4)
    0.9167
    """
    matrix = np.asarray(matrix, dtype=np.int64)
    support = matrix.sum(axis=1)
    predicted = matrix.sum(axis=0) + (0 if unknown_predicted is None else unknown_predicted)
    tp = np.diag(matrix)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted > 0, tp / predicted, 0.0)
        recall = np.where(support > 0, tp / support, 0.0)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    labeled = int(support.sum()) + unknown
    scores = {"precision": precision, "recall": recall, "f1": f1}
    per_class = {
        str(c): {**{k: float(v[i]) for k, v in scores.items()}, "support": int(support[i])}
        for i, c in enumerate(np.asarray(classes).tolist())
    }
    weights = support / support.sum() if support.sum() else np.zeros_like(support, dtype=float)
    present = support > 0
    out = {
        "accuracy": float(tp.sum() / labeled) if labeled else None,
        "balanced_accuracy": float(recall[present].mean()) if present.any() else None,
        "per_class": per_class,
        "macro_avg": {k: float(v.mean()) for k, v in scores.items()},
        "weighted_avg": {k: float(weights @ v) for k, v in scores.items()},
        "classes": jsonable(np.asarray(classes), max_items=10**6),
        "confusion_matrix": matrix.tolist(),
        "labeled_rows": labeled,
        "unlabeled_rows": unlabeled,
        "unknown_label_rows": unknown,
        "passes": 1,
    }
    if seconds is not None:
        out["seconds"] = round(seconds, 4)
        if rows:
            out["rows_per_second"] = round(rows / seconds, 1) if seconds > 0 else None
    return out


def sample_rows(X, y=None, *, n: int = 2000, random_state: int = 0):
    """A uniform sample of at most ``n`` rows of (X, y) as NumPy arrays (reads the blocks
    the sampled rows fall in).

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from scalenc.report import sample_rows
    >>> X = da.from_array(np.arange(200.0).reshape(100, 2), chunks=(25, 2))
    >>> y = da.from_array(np.arange(100) % 3, chunks=25)
    >>> xs, ys = sample_rows(X, y, n=5, random_state=0)
    >>> xs.shape, ys.shape
    ((5, 2), (5,))
    >>> bool((ys == (xs[:, 0] // 2) % 3).all())  # rows and labels stay paired
    True
    """
    total = X.shape[0]
    rng = np.random.default_rng(random_state)
    idx = np.sort(rng.choice(total, size=min(n, total), replace=False))
    if y is None:
        (xs,) = compute(X[idx])
        return np.asarray(xs), None
    xs, ys = compute(X[idx], y[idx])
    return np.asarray(xs), np.asarray(ys)
