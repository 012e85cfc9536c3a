"""Squared Euclidean distances from inner products, written once, and the rounding bounds of
the scores a float product gives (what the exact searches of :mod:`scalenc.math.neighbors`
and :mod:`scalenc.math.nearest` widen their bounds by).

Each takes its namespace from its arrays (:mod:`scalenc.math.xp`): NumPy's runs the calls
it always ran; a device's the array API standard's, with the same results to rounding.
"""

from __future__ import annotations

import numpy as np

from scalenc.math.buffers import scratch
from scalenc.math.xp import device_of, dtype_in, host_dtype, like, namespace


def row_sq_norms(A, *, copy: bool = True, out=None):
    """‖a_i‖² of every row, float64 (each row summed alone: identical rows, equal norms).

    ``copy=False`` sums a NumPy block's products in float64 without a float64 copy of the
    block (``einsum``'s ``dtype``; its own rounding, not the copy's): for the callers
    that ask for the norms of a whole block. A device block is converted either way.
    ``out``: a NumPy block's result buffer (for a device block, None).
    """
    xp = namespace(A)
    if xp is np:
        if not copy:
            return np.einsum("ij,ij->i", A, A, dtype=np.float64, out=out)
        A = np.asarray(A, dtype=np.float64)
        return np.einsum("ij,ij->i", A, A, out=out)
    A = xp.astype(A, xp.float64, copy=False)
    return xp.sum(A * A, axis=1)


def ranking_dtype(xp, *dtypes):
    """The precision scores of rows of these dtypes are ranked in: their common one, at
    least float32 (float32 data keeps BLAS at float32 speed), as ``xp``'s dtype."""
    common = np.result_type(*(host_dtype(d) for d in dtypes), np.float32)
    return dtype_in(xp, common)


def sq_distances_from_inner(
    inner: np.ndarray,
    a_sq: np.ndarray,
    b_sq: np.ndarray,
    *,
    zero_below: float | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """‖a_i − b_j‖² = ‖a_i‖² − 2⟨a_i, b_j⟩ + ‖b_j‖² from the inner products, clipped at 0.

    The one place the expansion is written. The result has ``out``'s dtype (default
    float64, or the dtype of ``inner`` when ``out`` is ``inner`` itself). With
    ``zero_below`` = the working precision's ε, values below the expansion's rounding
    error 8 ε (‖a‖² + max ‖b‖²) are set to 0, so a row's distance to itself is exactly 0
    (it matters under a square root).

    On a device, ``out`` is written in place as well (slice assignments); the norms join
    in ``out``'s precision (the standard's in-place arithmetic keeps the left dtype).
    """
    xp = namespace(inner)
    host = xp is np
    if out is None:
        out = xp.empty(inner.shape, dtype=xp.float64, device=device_of(inner))
    if host:
        np.multiply(inner, -2.0, out=out)
    else:
        out[...] = xp.astype(inner, out.dtype) * -2.0
        a_sq, b_sq = like(xp, a_sq, out, out.dtype), like(xp, b_sq, out, out.dtype)
    out += a_sq[:, None]
    out += b_sq[None, :]
    if host:
        np.maximum(out, 0.0, out=out)
    else:
        out[...] = xp.clip(out, min=0.0)
    if zero_below is not None and out.size:
        tol = (8.0 * zero_below * (a_sq + xp.max(b_sq)))[:, None]
        if host:  # the mask in a per-thread buffer (buffers.scratch), not a fresh tile
            out[np.less(out, tol, out=scratch("distances.below", out.shape, bool))] = 0.0
        else:
            out[...] = xp.where(out < tol, 0.0, out)
    return out


def pairwise_sq_distances(A, B):
    """‖a_i − b_j‖² (len(A)×len(B), float64, clipped at 0).

    The cross term ``A Bᵀ`` is a matrix product in the inputs' common precision (float32
    data keeps BLAS at its float32 speed); row norms and the sum are float64. Values below
    the expansion's rounding error are set to 0 (:func:`sq_distances_from_inner`).
    """
    xp = namespace(A, B)
    dtype = ranking_dtype(xp, A.dtype, B.dtype)
    cross = like(xp, A, B, dtype) @ like(xp, B, A, dtype).T
    eps = xp.finfo(dtype).eps
    return sq_distances_from_inner(cross, row_sq_norms(A), row_sq_norms(B), zero_below=eps)


def score_bound(q_norms, max_norm2, p, dtype) -> np.ndarray:
    """δ per query: |(‖q‖² + ranking score) − ‖q − r‖²| ≤ δ for every row r with
    ‖r‖² ≤ ``max_norm2``, ‖q − r‖² computed by any formula in float64 or the ranking
    precision.

    The score ‖r‖² − 2 q·r is a (p+1)-term product in the ranking precision (unit
    roundoff u, inputs rounded once), the distance a sum of p terms: both err by
    at most about (p+3)·u·(‖q‖² + ‖r‖² + 2‖q‖‖r‖) (the classic bound of a length-p dot
    product, any summation order). Doubled for safety. ``q_norms`` may be a device's
    array (so is δ then); ``dtype`` any library's.
    """
    xp = namespace(q_norms)
    u = float(np.finfo(host_dtype(dtype)).eps / 2 + np.finfo(np.float64).eps / 2)
    scale = q_norms + max_norm2 + 2.0 * xp.sqrt(q_norms * max_norm2)
    return 2.0 * (p + 3) * u * scale


def duplicate_rank(R: np.ndarray) -> np.ndarray:
    """For each row of R, how many identical rows come before it (a sort of the rows)."""
    size = R.shape[0]
    if size == 0:
        return np.zeros(0, dtype=np.int64)
    _, group = np.unique(R, axis=0, return_inverse=True)
    order = np.argsort(group.ravel(), kind="stable")
    sorted_group = group.ravel()[order]
    first = np.r_[True, sorted_group[1:] != sorted_group[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(size), 0))
    rank = np.empty(size, dtype=np.int64)
    rank[order] = np.arange(size) - start
    return rank


#: Elements of one gather of reference rows for the float64 recomputation (8 MB).
GATHER_ELEMENTS = 2**20
