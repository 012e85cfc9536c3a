"""What every scalenc classifier shares: accuracy over labeled rows, streamed for Dask input."""

from __future__ import annotations

import contextlib
import time

import dask.array as da
import numpy as np

from .cluster import compute
from .data import check_xy, encode_labels, unlabeled_mask

__all__ = ["StreamingClassifierMixin", "fit_stage"]


@contextlib.contextmanager
def fit_stage(estimator, stage: str):
    """Record the wall-clock seconds of a fit stage in ``estimator.stage_times_[stage]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        estimator.stage_times_[stage] = time.perf_counter() - start


class StreamingClassifierMixin:
    """``score`` as accuracy over the labeled rows, and the no-NaN input tag.

    Put it before scikit-learn's ``ClassifierMixin`` in the bases. For Dask input the
    accuracy is one reduction over the lazy predictions (nothing n-sized reaches the
    client); for NumPy input, or with ``sample_weight``, it is computed in memory.
    """

    def score(self, X, y, sample_weight=None):
        """Accuracy over the labeled rows of (X, y); unlabeled rows (−1/None/NaN) are left out."""
        if sample_weight is not None or not isinstance(X, da.Array):
            y_arr = np.asarray(compute(y)[0] if isinstance(y, da.Array) else y)
            keep = ~unlabeled_mask(y_arr)
            pred = self.predict(X)
            pred = np.asarray(compute(pred)[0] if isinstance(pred, da.Array) else pred)
            weights = None if sample_weight is None else np.asarray(sample_weight)[keep]
            return float(np.average(pred[keep] == y_arr[keep], weights=weights))
        Xd, yd = check_xy(X, y, chunk_rows=getattr(self, "chunk_rows", None))
        codes = encode_labels(yd, self.classes_)
        pred_codes = encode_labels(self.predict(Xd), self.classes_)
        labeled = codes >= 0
        correct, total = compute((pred_codes == codes)[labeled].sum(), labeled.sum())
        return float(correct) / float(total)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags
