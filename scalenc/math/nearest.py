"""The exact k-NN search of many rows against a short reference set (CCDR's subsample, for
its Nyström extension and k-NN head): a float32 product and k + 1 row-wise argmin passes
over a cache-sized tile, and the rows whose ranking is in doubt recomputed in float64.

The search of every row block against every other (nRBFN's soft-KNN) is
:mod:`scalenc.math.neighbors`'s.
"""

from __future__ import annotations

import numpy as np

from scalenc.math.distances import GATHER_ELEMENTS, duplicate_rank, row_sq_norms, score_bound

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
    [Q, 1] gives the ranking scores ‖r‖² − 2 q·r, transposed (s × tile).
    """

    def __init__(self, R: np.ndarray, dtype):
        self.R = np.asarray(R, dtype=np.float64)
        self.norms = row_sq_norms(self.R)
        self.dtype = np.dtype(dtype)
        self.size, self.p = self.R.shape
        with np.errstate(over="ignore"):
            self.scores_t = np.hstack([-2.0 * self.R, self.norms[:, None]]).astype(self.dtype)
        self.max_norm2 = float(self.norms.max()) if self.size else 0.0
        self._ranks = None

    def duplicate_rank(self) -> np.ndarray:
        """For each row, how many identical rows come before it (computed once, when
        first asked for: a sort of the rows)."""
        if self._ranks is None:
            self._ranks = duplicate_rank(self.R)
        return self._ranks


def _rounding_bound(q_norms, ref: _Reference) -> np.ndarray:
    """δ per query: |(‖q‖² + ranking score) − the float64 expansion| ≤ δ for every r
    (:func:`score_bound`)."""
    return score_bound(q_norms, ref.max_norm2, ref.p, ref.dtype)


def _exact_d2(Q64, q_norms, ref: _Reference, cols):
    """‖q‖² + ‖r‖² − 2 q·r in float64 (clipped at 0) for the reference rows ``cols`` of
    each query (c×w, −1 = none → inf); the (rows, w, p) gathers go in slices of at most
    :data:`GATHER_ELEMENTS` elements."""
    c, w = cols.shape
    d2 = np.full(cols.shape, np.inf)
    real = cols >= 0
    at = np.where(real, cols, 0)
    step = max(1, GATHER_ELEMENTS // max(1, w * ref.p))
    for start in range(0, c, step):
        stop = min(c, start + step)
        cross = np.einsum("ip,iwp->iw", Q64[start:stop], ref.R[at[start:stop]])
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


def _doubt_survivors(score, P, J, thr, ref: _Reference, k):
    """Every reference row that can be among the k nearest of each row in doubt: the
    extracted entries (``P``, ``J``) and the entries left in ``score`` at or below
    ``thr``, as a padded matrix of positions (−1 = none), one row per query."""
    d = score.shape[0]
    query, cols = np.nonzero(score <= thr[:, None])
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


def _nearest_exact_tile(Q, k, ref: _Reference, buffer, exclude=None):
    """The exact k nearest reference rows of a tile of queries: (positions, d2), each c×k,
    sorted by (float64 distance, position)."""
    c = Q.shape[0]
    s = ref.size
    q_norms = np.einsum("ij,ij->i", Q, Q, dtype=np.float64)
    delta = _rounding_bound(q_norms, ref)
    limit = np.finfo(ref.dtype).max / 8
    if ref.dtype != np.float64 and not (q_norms.max() + ref.max_norm2) * 4 < limit:
        return _nearest_exact(Q, ref.R, k, exclude)  # beyond the ranking range: float64
    ones = np.ones((c, 1), dtype=ref.dtype)
    Qa = np.hstack([np.asarray(Q, dtype=ref.dtype), ones])
    score = np.matmul(Qa, ref.scores_t.T, out=buffer[: c * s].reshape(c, s))
    if exclude is not None:
        local = np.flatnonzero(exclude >= 0)
        score[local, exclude[local]] = np.inf
    m = min(k + 1, s)
    P = np.full((c, k + 1), np.inf)
    J = np.full((c, k + 1), -1, dtype=np.int64)
    P[:, :m], J[:, :m] = _smallest_by_extraction(score, m)
    J[np.isinf(P)] = -1  # excluded rows (+inf) are never neighbours
    # certain: the k+1 smallest scores are apart by more than 2δ (then the float64 order
    # is theirs) and the nearest is not within 2δ of distance 0
    gaps = np.diff(P, axis=1)
    with np.errstate(invalid="ignore"):
        certain = (gaps > 2.0 * delta[:, None]).all(axis=1) & (q_norms + P[:, 0] > 2.0 * delta)
    pos, d2 = J[:, :k].copy(), np.maximum(q_norms[:, None] + P[:, :k], 0.0)
    doubt = np.flatnonzero(~certain)
    if doubt.size:  # recompute in float64 every candidate of the rows in doubt
        floor = -q_norms[doubt]  # scores of distance 0: every row there ties at d2 = 0
        thr = (np.maximum(P[doubt, k - 1], floor) + 2.0 * delta[doubt]).astype(ref.dtype)
        thr = np.nextafter(thr, np.inf)  # rounded up: never below the float64 bound
        thr = np.minimum(thr, np.finfo(ref.dtype).max)  # +inf (excluded) never survives
        cols = _doubt_survivors(score[doubt], P[doubt], J[doubt], thr, ref, k)
        exact = _exact_d2(np.asarray(Q[doubt], np.float64), q_norms[doubt], ref, cols)
        keys = np.where(cols >= 0, cols, s)
        redo = np.lexsort((keys, exact), axis=-1)[:, :k]
        pos[doubt] = np.take_along_axis(cols, redo, 1)
        d2[doubt] = np.take_along_axis(exact, redo, 1)
    d2[pos < 0] = np.inf
    return pos, d2


def _nearest_exact(Q, R, k, exclude=None, dtype=None):
    """Exact k nearest rows of R (or a prepared :class:`_Reference`) for each row of Q."""
    ref = R if isinstance(R, _Reference) else _Reference(R, dtype or np.float64)
    c, s = Q.shape[0], ref.size
    k_in = min(k, s)
    pos_out = np.full((c, k), -1, dtype=np.int64)
    d2_out = np.full((c, k), np.inf)
    if c == 0 or s == 0:
        return pos_out, d2_out
    tile = min(c, max(1, EXACT_TILE_ELEMENTS // s))
    buffer = np.empty(tile * s, dtype=ref.dtype)  # reused
    for start in range(0, c, tile):
        stop = min(c, start + tile)
        excl = None if exclude is None else exclude[start:stop]
        pos, d2 = _nearest_exact_tile(Q[start:stop], k_in, ref, buffer, excl)
        pos_out[start:stop, :k_in], d2_out[start:stop, :k_in] = pos, d2
    return pos_out, d2_out
