"""Class scores to log-probabilities: the log-softmax of a block's scores, and the sum of
log-probabilities of its labeled rows' own classes (the terms of the cross-entropy of
Shen's Section 3, Step 4). NumPy or device blocks alike (:mod:`scalenc.math.xp`).
"""

from __future__ import annotations

import numpy as np

from scalenc.math.buffers import scratch
from scalenc.math.xp import like, namespace, to_host

__all__ = ["log_softmax", "labeled_log_likelihood"]


def log_softmax(scores: np.ndarray, axis: int = 1, *, overwrite: bool = False) -> np.ndarray:
    """Log of the softmax of ``scores`` along ``axis`` (rows of (b, K) by default), stably.

    With ``overwrite`` the result is written into ``scores`` (a float array).
    """
    xp = namespace(scores)
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
