"""The exact k-NN search of many rows against a short reference set (CCDR's subsample, for
its Nyström extension and k-NN head): a float32 product and the k + 1 smallest scores of
each query, and the rows whose ranking is in doubt recomputed in float64.

The queries may be a device block (CuPy's, see :mod:`scalenc.math.xp`); the reference set
is NumPy and goes to the block's device once per call. NumPy blocks take k + 1 row-wise
argmin passes over a cache-sized tile; a device block one selection
(:func:`~scalenc.math.xp.argpartition_rows`) over a tile of
:data:`~scalenc.math.xp.DEVICE_TILE_ELEMENTS`. Either way the neighbours are those of the
float64 distances, ties by position.

The search of every row block against every other (nRBFN's soft-KNN) is
:mod:`scalenc.math.neighbors`'s.
"""

from __future__ import annotations

import copy

import numpy as np

from scalenc.math.buffers import gather, host_scratch, scratch, scratch_take
from scalenc.math.distances import GATHER_ELEMENTS, duplicate_rank, row_sq_norms, score_bound
from scalenc.math.selection import no_neighbors
from scalenc.math.xp import (
    argpartition_rows,
    device_of,
    host_dtype,
    host_or_device,
    lexsort_rows,
    like,
    namespace,
    tile_elements,
)

#: Ranking scores of one query tile against a short reference set (:func:`nearest` with
#: ``refine``): 512K elements, 2 MB float32, so that the product and the selection passes
#: over it stay in cache.
EXACT_TILE_ELEMENTS = 2**19


#: Survivors per query in doubt and per neighbour (k + 1) above which they are checked
#: for duplicate reference rows (typically about one per neighbour survives).
DUPLICATE_SURVIVORS = 8


class _Reference:
    """What every query tile needs of the reference rows R (s×p), computed once.

    ``scores_t`` = [−2R, ‖r‖²] (s × (p+1), ranking dtype): one product with a query tile
    [Q, 1] gives the ranking scores ‖r‖² − 2 q·r, transposed (s × tile). ``R``, ``norms``
    and ``scores_t`` are arrays of ``xp`` (NumPy's, or a device's: :meth:`on`); ``rows``
    is R as NumPy float64.
    """

    def __init__(self, R: np.ndarray, dtype):
        self.rows = np.asarray(R, dtype=np.float64)
        self.R = self.rows
        self.norms = row_sq_norms(self.R)
        self.dtype = host_dtype(dtype)
        self.size, self.p = self.R.shape
        with np.errstate(over="ignore"):
            self.scores_t = np.hstack([-2.0 * self.R, self.norms[:, None]]).astype(self.dtype)
        self.max_norm2 = float(self.norms.max()) if self.size else 0.0
        self.xp = np
        self.rank_dtype = self.dtype
        self._ranks = None

    def on(self, xp, ref) -> _Reference:
        """These rows as arrays of ``xp`` on the device of the array ``ref`` (itself for
        NumPy)."""
        if xp is self.xp:
            return self
        moved = copy.copy(self)
        moved.xp = xp
        moved.R, moved.norms, moved.scores_t = (
            like(xp, a, ref) for a in (self.rows, self.norms, self.scores_t)
        )
        moved.rank_dtype = moved.scores_t.dtype
        return moved

    def duplicate_rank(self) -> np.ndarray:
        """For each row, how many identical rows come before it (computed once, when
        first asked for: a sort of the rows), as NumPy."""
        if self._ranks is None:
            self._ranks = duplicate_rank(self.rows)
        return self._ranks


def _exact_d2(Q64, q_norms, ref: _Reference, cols):
    """‖q‖² + ‖r‖² − 2 q·r in float64 (clipped at 0) for the reference rows ``cols`` of
    each query (c×w, −1 = none → inf); the (rows, w, p) gathers go in slices of at most
    :data:`GATHER_ELEMENTS` elements (a device's tile on a device)."""
    return host_or_device(ref.xp, _exact_d2_on_host, _exact_d2_on_device)(Q64, q_norms, ref, cols)


def _exact_d2_on_device(Q64, q_norms, ref: _Reference, cols):
    """:func:`_exact_d2` with the standard's calls, in device-sized slices."""
    xp = ref.xp
    c, w = cols.shape
    d2 = xp.full(cols.shape, xp.inf, dtype=xp.float64, device=device_of(cols))
    real = cols >= 0
    at = xp.where(real, cols, 0)
    step = max(1, tile_elements(xp, GATHER_ELEMENTS) // max(1, w * ref.p))
    for start in range(0, c, step):
        stop = min(c, start + step)
        flat = xp.reshape(at[start:stop, :], (-1,))
        rows = xp.reshape(xp.take(ref.R, flat, axis=0), (stop - start, w, ref.p))
        cross = xp.vecdot(Q64[start:stop, None, :], rows, axis=-1)
        norms = xp.reshape(xp.take(ref.norms, flat), (stop - start, w))
        d2[start:stop, :] = q_norms[start:stop, None] + norms - 2.0 * cross
    return xp.clip(xp.where(real, d2, xp.inf), min=0.0)


def _exact_d2_on_host(Q64, q_norms, ref: _Reference, cols):
    """:func:`_exact_d2` for NumPy tiles of about a hundred queries (NumPy's fancy
    indexing and in-place writes), where the per-call overhead of the device path's
    generic calls cost 5 % of CCDR's extension."""
    d2 = np.full(cols.shape, np.inf)
    real = cols >= 0
    at = np.where(real, cols, 0)
    step = max(1, GATHER_ELEMENTS // max(1, cols.shape[1] * ref.p))
    for start in range(0, cols.shape[0], step):
        stop = min(cols.shape[0], start + step)
        rows = scratch_take("nearest.rows", ref.R, at[start:stop])
        cross = np.einsum("ip,iwp->iw", Q64[start:stop], rows)
        here = q_norms[start:stop, None] + ref.norms[at[start:stop]] - 2.0 * cross
        np.copyto(d2[start:stop], here, where=real[start:stop])
    return np.maximum(d2, 0.0, out=d2)


def _smallest_by_extraction(score, m):
    """The m smallest entries of each row of ``score`` (c×s), ties by position: (values
    float64, positions), each c×m, ascending; ``score`` is left with them set to +inf.

    m passes of a row-wise ``argmin`` (a vectorised scan of a cache-resident tile; it
    returns the first of equal minima) each followed by masking the minimum. For the few
    neighbours of CCDR's Nyström extension this costs a fraction of the product that
    made the tile, where a partition or sort per row costs more than the product.
    """
    c = score.shape[0]
    rows = np.arange(c)
    vals = np.empty((c, m))
    pos = np.empty((c, m), dtype=np.int64)
    for j in range(m):
        at = score.argmin(axis=1)
        pos[:, j] = at
        vals[:, j] = score[rows, at]
        score[rows, at] = np.inf
    return vals, pos


def _smallest(xp, score, m):
    """The m smallest entries of each row of ``score``, ascending: (values float64,
    positions). NumPy: :func:`_smallest_by_extraction` (``score`` keeps +inf there); a
    device: one selection, ordered by (value, position), ``score`` unchanged (a tie at the
    m-th place may pick another of the tied positions: it leaves the values as they are,
    and a tie among the k + 1 smallest sends the row to the float64 recomputation)."""
    return host_or_device(xp, _smallest_by_extraction, _smallest_on_device)(score, m)


def _smallest_on_device(score, m):
    """:func:`_smallest` of a device tile: one selection, then a sort of the m."""
    xp = namespace(score)
    pos = xp.sort(argpartition_rows(xp, score, m), axis=1)
    vals = xp.take_along_axis(score, pos, axis=1)
    order = xp.argsort(vals, axis=1, stable=True)
    vals = xp.astype(xp.take_along_axis(vals, order, axis=1), xp.float64)
    return vals, xp.take_along_axis(pos, order, axis=1)


def _rows_of(xp, score, mask):
    """``score[mask]``; for NumPy into a per-thread buffer (:func:`scalenc.math.buffers.scratch`).

    A fresh copy per query tile, on a Dask worker (whose nanny sets
    ``MALLOC_TRIM_THRESHOLD_``), is mapped and page-faulted in each time: with the float64
    gathers of :func:`_exact_d2_on_host`, 84 000 faults per 25 000-row block of CCDR's
    extension at p = 256, where a third of the rows are in doubt (1.2× the block's time).
    """
    return gather("nearest.doubt", score, xp.nonzero(mask)[0])


def _doubt_survivors(score, P, J, thr, ref: _Reference, k):
    """Every reference row that can be among the k nearest of each row in doubt: the
    extracted entries (``P``, ``J``) and the entries left in ``score`` at or below
    ``thr``, as a padded matrix of positions (−1 = none), one row per query."""
    survivors = host_or_device(ref.xp, _doubt_survivors_on_host, _doubt_survivors_on_device)
    return survivors(score, P, J, thr, ref, k)


def _doubt_survivors_on_host(score, P, J, thr, ref: _Reference, k):
    """:func:`_doubt_survivors` of a NumPy tile, whose ``score`` holds +inf where
    :func:`_smallest_by_extraction` took the entries ``P``, ``J``."""
    d = score.shape[0]
    below = np.less_equal(score, thr[:, None], out=scratch("nearest.below", score.shape, bool))
    query, cols = np.nonzero(below)
    q_ex, j_ex = np.nonzero(P <= thr[:, None])
    query = np.concatenate([q_ex, query])
    cols = np.concatenate([J[q_ex, j_ex], cols])
    if query.size > DUPLICATE_SURVIVORS * (k + 1) * d:
        # many survivors: usually exact duplicates among the reference rows, tied at one
        # distance. A row with k + 1 identical rows before it never ranks among the k
        # nearest (they tie with it and come first; one may be excluded), so it is dropped
        # before the float64 recomputation (a query on a row repeated 1900 times kept all
        # 1900 as survivors, each recomputed).
        keep = ref.duplicate_rank()[cols] <= k
        query, cols = query[keep], cols[keep]
    order = np.argsort(query, kind="stable")
    query, cols = query[order], cols[order]
    counts = np.bincount(query, minlength=d)
    slot = np.arange(query.size) - np.repeat(np.cumsum(counts) - counts, counts)
    out = np.full((d, max(int(counts.max(initial=0)), k)), -1, dtype=np.int64)
    out[query, slot] = cols
    return out


def _doubt_survivors_on_device(score, P, J, thr, ref: _Reference, k):
    """:func:`_doubt_survivors` of a device tile, whose ``score`` still holds every entry:
    the w smallest entries of each row, w the most survivors of a row, those above
    ``thr`` marked −1 (the same rule for duplicate reference rows)."""
    xp = ref.xp
    d = score.shape[0]
    below = score <= thr[:, None]
    if int(xp.sum(xp.astype(below, xp.int64))) > DUPLICATE_SURVIVORS * (k + 1) * d:
        below = below & (like(xp, ref.duplicate_rank(), score) <= k)[None, :]
    w = max(int(xp.max(xp.sum(xp.astype(below, xp.int64), axis=1))), k)
    cols = argpartition_rows(xp, xp.where(below, score, xp.inf), w)
    return xp.where(xp.take_along_axis(below, cols, axis=1), cols, -1)


def _scores(xp, Q, ref: _Reference, buffer):
    """The ranking scores ‖r‖² − 2 q·r of a query tile (c×s): one product of [Q, 1] with
    ``scores_t``, into ``buffer`` for NumPy."""
    c = Q.shape[0]
    if xp is np:
        Qa = scratch("nearest.query", (c, ref.p + 1), ref.dtype)
        Qa[:, :-1], Qa[:, -1] = Q, 1.0
        return np.matmul(Qa, ref.scores_t.T, out=buffer[: c * ref.size].reshape(c, ref.size))
    ones = xp.ones((c, 1), dtype=ref.rank_dtype, device=device_of(Q))
    Qa = xp.concat([xp.astype(Q, ref.rank_dtype), ones], axis=1)
    return Qa @ ref.scores_t.T


def _exclude(xp, score, exclude):
    """Scores of the excluded positions (``exclude[i]`` ≥ 0 for query i) set to +inf."""
    if xp is np:
        local = np.flatnonzero(exclude >= 0)
        score[local, exclude[local]] = np.inf
        return score
    columns = xp.arange(score.shape[1], device=device_of(score))[None, :]
    return xp.where(columns == like(xp, exclude, score)[:, None], xp.inf, score)


def _nearest_exact_tile(Q, k, ref: _Reference, buffer, exclude=None):
    """The exact k nearest reference rows of a tile of queries: (positions, d2), each c×k,
    sorted by (float64 distance, position)."""
    xp = ref.xp
    c = Q.shape[0]
    s = ref.size
    q_norms = row_sq_norms(Q, copy=False)
    # δ per query: |(‖q‖² + ranking score) − the float64 expansion| ≤ δ for every r
    delta = like(xp, score_bound(q_norms, ref.max_norm2, ref.p, ref.dtype), q_norms)
    limit = float(np.finfo(ref.dtype).max) / 8
    if ref.dtype != np.float64 and not (float(xp.max(q_norms)) + ref.max_norm2) * 4 < limit:
        return nearest_exact(Q, ref.rows, k, exclude)  # beyond the ranking range: float64
    score = _scores(xp, Q, ref, buffer)
    if exclude is not None:
        score = _exclude(xp, score, exclude)
    m = min(k + 1, s)
    device = device_of(score)
    P = xp.full((c, k + 1), xp.inf, dtype=xp.float64, device=device)
    J = xp.full((c, k + 1), -1, dtype=xp.int64, device=device)
    P[:, :m], J[:, :m] = _smallest(xp, score, m)
    J = xp.where(xp.isinf(P), -1, J)  # excluded rows (+inf) are never neighbours
    # certain: the k+1 smallest scores are apart by more than 2δ (then the float64 order
    # is theirs) and the nearest is not within 2δ of distance 0
    with np.errstate(invalid="ignore"):  # inf − inf: padding, or excluded rows
        gaps = P[:, 1:] - P[:, :-1]
        apart = xp.all(gaps > 2.0 * delta[:, None], axis=1)
        certain = apart & (q_norms + P[:, 0] > 2.0 * delta)
    pos = xp.asarray(J[:, :k], copy=True)
    d2 = xp.clip(q_norms[:, None] + P[:, :k], min=0.0)
    doubt = ~certain
    if bool(xp.any(doubt)):  # recompute in float64 every candidate of the rows in doubt
        floor = -q_norms[doubt]  # scores of distance 0: every row there ties at d2 = 0
        thr = xp.astype(xp.maximum(P[doubt][:, k - 1], floor) + 2.0 * delta[doubt], ref.rank_dtype)
        thr = xp.nextafter(thr, xp.asarray(xp.inf, dtype=thr.dtype))  # rounded up
        thr = xp.clip(thr, max=float(np.finfo(ref.dtype).max))  # +inf never survives
        cols = _doubt_survivors(_rows_of(xp, score, doubt), P[doubt], J[doubt], thr, ref, k)
        exact = _exact_d2(xp.astype(Q[doubt], xp.float64), q_norms[doubt], ref, cols)
        redo = lexsort_rows(xp, exact, xp.where(cols >= 0, cols, s))[:, :k]  # by (d2, position)
        pos[doubt] = xp.take_along_axis(cols, redo, axis=1)
        d2[doubt] = xp.take_along_axis(exact, redo, axis=1)
    return pos, xp.where(pos < 0, xp.inf, d2)


def nearest_exact(Q, R, k, exclude=None, dtype=None):
    """Exact k nearest rows of R (NumPy, or a prepared :class:`_Reference`) for each row of
    Q (NumPy or a device block; the results are Q's arrays)."""
    xp = namespace(Q)
    ref = R if isinstance(R, _Reference) else _Reference(R, dtype or np.float64)
    ref = ref.on(xp, Q)
    c, s = Q.shape[0], ref.size
    k_in = min(k, s)
    pos_out, d2_out = no_neighbors(xp, c, k, Q)
    if c == 0 or s == 0:
        return pos_out, d2_out
    tile = min(c, max(1, tile_elements(xp, EXACT_TILE_ELEMENTS) // s))
    buffer = host_scratch(xp, "nearest.scores", (tile * s,), ref.dtype)
    for start in range(0, c, tile):
        stop = min(c, start + tile)
        excl = None if exclude is None else exclude[start:stop]
        pos, d2 = _nearest_exact_tile(Q[start:stop, :], k_in, ref, buffer, excl)
        pos_out[start:stop, :k_in], d2_out[start:stop, :k_in] = pos, d2
    return pos_out, d2_out
