"""Class scores to log-probabilities: the log-softmax of a block's scores, and the sum of
log-probabilities of its labeled rows' own classes (the terms of the cross-entropy of
Shen's Section 3, Step 4). NumPy or device blocks alike (:mod:`scalenc.math.xp`).
"""

from __future__ import annotations

import numpy as np

from scalenc.math.buffers import scratch
from scalenc.math.xp import like, namespace, to_host

__all__ = ["log_softmax", "labeled_log_likelihood"]


#: Classes up to which the log-softmax of a NumPy (b, K) array along its rows is computed
#: on a classes-by-row copy (:func:`log_softmax`): NumPy's reductions over rows of K
#: elements run K at a time. 10⁶ scores: K = 2 30.9 → 9.0 ms, K = 5 15.9 → 7.8, K = 10
#: 9.9 → 7.7; from K = 26 the rows are long enough (6.3 against 8.1).
FEW_CLASSES = 16


def log_softmax(scores: np.ndarray, axis: int = 1, *, overwrite: bool = False) -> np.ndarray:
    """Log of the softmax of ``scores`` along ``axis`` (rows of (b, K) by default), stably.

    With ``overwrite`` the result is written into ``scores`` (a float array).

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc.math.softmax import log_softmax
    >>> np.exp(log_softmax(np.array([[0.0, np.log(3.0)], [1000.0, 1000.0]])))
    array([[0.25, 0.75],
           [0.5 , 0.5 ]])
    """
    xp = namespace(scores)
    if xp is np and np.ndim(scores) == 2 and axis % 2 == 1 and np.shape(scores)[1] <= FEW_CLASSES:
        return _log_softmax_by_class(np.asarray(scores), overwrite)
    shifted = scores if overwrite else xp.astype(xp.asarray(scores), xp.float64, copy=True)
    if xp is not np:
        shifted -= xp.max(shifted, axis=axis, keepdims=True)
        shifted -= xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))
        return shifted
    # the temporaries in per-thread buffers: a fresh one the size of the scores, or of a
    # row of them, is page-faulted in on every call on a Dask worker (see :func:`scratch`)
    reduced = tuple(1 if i == axis % shifted.ndim else n for i, n in enumerate(shifted.shape))
    edge = scratch("log_softmax.reduced", reduced, shifted.dtype)
    shifted -= np.max(shifted, axis=axis, keepdims=True, out=edge)
    expd = np.exp(shifted, out=scratch("log_softmax.exp", shifted.shape, shifted.dtype))
    total = np.sum(expd, axis=axis, keepdims=True, out=edge)
    shifted -= np.log(total, out=total)
    return shifted


def _log_softmax_by_class(scores: np.ndarray, overwrite: bool) -> np.ndarray:
    """:func:`log_softmax` along the rows of a NumPy (b, K) array of few classes, computed
    on a (K, b) copy in a per-thread buffer, whose max and sum over the K classes are
    element-wise operations on long rows; the same values."""
    out = scores if overwrite else np.empty(scores.shape, dtype=np.float64)
    by_class = scratch("log_softmax.by_class", scores.shape[::-1], out.dtype)
    by_class[...] = scores.T
    log_softmax(by_class, axis=0, overwrite=True)
    out[...] = by_class.T
    return out


def labeled_log_likelihood(log_proba: np.ndarray, codes: np.ndarray) -> tuple[float, int]:
    """Sum of ``log T(i, y_i)`` over the labeled rows of a block, and their number.

    The cross-entropy of Shen's Section 3, Step 4, is minus the total over all blocks.
    """
    xp = namespace(log_proba)
    codes = like(xp, to_host(codes), log_proba)
    labeled = xp.nonzero(codes >= 0)[0]
    # log_proba[labeled, codes[labeled]], as positions in the flattened (b, K) array
    at = labeled * log_proba.shape[1] + xp.take(codes, labeled)
    picked = xp.take(xp.reshape(log_proba, (-1,)), at)
    return float(xp.sum(picked)), int(labeled.shape[0])
