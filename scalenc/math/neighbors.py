"""Exact k nearest neighbours, block by block, in plain NumPy — no dask here.

Used by nRBFN's soft-KNN (Hu, Pan & Wu, Algorithm 1) and by CCDR's k-NN graph and Nyström
extension. The k-NN search is exact. A set of *candidate* rows C (c×p) is compared with every row
block of the training data X: each block yields, for every candidate, its k nearest
labeled rows **within the block** (a c×k partial of squared distances, global row indices
and labels); partials are merged by keeping the k smallest, which is associative, so a
tree reduction over the blocks gives the k nearest rows in the whole of X. A candidate
is never its own neighbour (rows are told apart by global row index).

:mod:`scalenc.engine.passes` runs it two ways: a candidate sample held in memory against every
block of X (:func:`scalenc.engine.passes.kneighbors_pass`, one pass), or every labeled row as a
candidate (:func:`scalenc.engine.passes.kneighbors_all_rows`): row blocks compared pair by pair,
one product X_i X_jᵀ serving both blocks' searches (:func:`kneighbors_pair`).

Selection: within a block, each candidate's k nearest are the k smallest ranking scores
(‖x‖² − 2 c·x), ties broken by global row index, and they are then ordered by
(distance, global row index), so exact ties are broken the same way for any chunking and
tiling. Most of a score row cannot hold a neighbour: the k-th smallest of a sample of the
row (or, down the columns of a block pair, the running k-th of the tiles already seen)
bounds it, and only entries at or below the bound — found by one vectorised comparison —
are selected among (:func:`_smallest_k`), which keeps the search exact.

Against a short reference set (CCDR's subsample S, s rows; :func:`nearest` with
``refine``) the result is the float64 one whatever precision ranks it: the scores of a
query tile are one product [Q, 1]·[−2S, ‖s‖²]ᵀ, transposed so that the minima of g groups
of S's rows are contiguous reductions; the k-th smallest group minimum bounds the k-th
smallest score, and only the groups under it are read again. A query whose k+1 smallest
scores are apart by more than twice the ranking's rounding bound keeps its order; the
rare others (near-ties, duplicates, distance ≈ 0) are recomputed in float64.
"""

from __future__ import annotations

import numpy as np

from scalenc.math import moments as _blocks

__all__ = [
    "nearest",
    "sq_distances_from_inner",
    "pairwise_sq_distances",
    "row_sq_norms",
    "labeled_rows",
    "kneighbors_block",
    "merge_neighbors",
    "kneighbors_pair",
]


#: Elements of one distance tile (candidates × rows); 4M float64 = 32 MB per worker thread.
TILE_ELEMENTS = 4 * 2**20
#: Distance tile of a block pair (rows of the first block × the second block); two float32
#: buffers of 8M = 64 MB per thread.
PAIR_TILE_ELEMENTS = 8 * 2**20
#: Columns of a score row whose k-th smallest value bounds the row's k-th smallest overall
#: (:func:`_smallest_k`); only entries at or below the bound go to selection.
THRESHOLD_SAMPLE = 2048
#: Ranking scores of one query tile against a short reference set (:func:`nearest` with
#: ``refine``): 512K elements, 2 MB float32, so that the product and the selection passes
#: over it stay in cache.
EXACT_TILE_ELEMENTS = 2**19
#: Elements of one gather of reference rows for the float64 recomputation (8 MB).
GATHER_ELEMENTS = 2**20
#: Survivors per query in doubt and per neighbour (k + 1) above which they are checked
#: for duplicate reference rows (typically about one per neighbour survives).
DUPLICATE_SURVIVORS = 8


def row_sq_norms(A: np.ndarray) -> np.ndarray:
    """‖a_i‖² of every row, float64."""
    A = np.asarray(A, dtype=np.float64)
    return np.einsum("ij,ij->i", A, A)


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
    """
    if out is None:
        out = np.empty(inner.shape)
    np.multiply(inner, -2.0, out=out)
    out += a_sq[:, None]
    out += b_sq[None, :]
    np.maximum(out, 0.0, out=out)
    if zero_below is not None and out.size:
        tol = 8.0 * zero_below * (a_sq + b_sq.max())
        out[out < tol[:, None]] = 0.0
    return out


def pairwise_sq_distances(A: np.ndarray, B: np.ndarray, *, tol_zero: bool = True) -> np.ndarray:
    """‖a_i − b_j‖² (len(A)×len(B), float64, clipped at 0).

    The cross term ``A Bᵀ`` is a matrix product in the inputs' common precision (float32
    data keeps BLAS at its float32 speed); row norms and the sum are float64. With
    ``tol_zero``, values below the expansion's rounding error are set to 0
    (:func:`sq_distances_from_inner`).
    """
    dtype = np.result_type(A.dtype, B.dtype, np.float32)
    cross = np.asarray(A, dtype=dtype) @ np.asarray(B, dtype=dtype).T
    eps = np.finfo(dtype).eps if tol_zero else None
    return sq_distances_from_inner(cross, row_sq_norms(A), row_sq_norms(B), zero_below=eps)


def labeled_rows(X: np.ndarray, codes: np.ndarray, row_start: int = 0):
    """The labeled rows of a block: ``(rows, global indices, codes)``."""
    keep = np.flatnonzero(np.asarray(codes) >= 0)
    return np.asarray(X)[keep], (row_start + keep).astype(np.int64), np.asarray(codes)[keep]


def _empty_neighbors(c: int, k: int) -> dict[str, np.ndarray]:
    return {
        "dist2": np.full((c, k), np.inf),
        "index": np.full((c, k), -1, dtype=np.int64),
        "label": np.full((c, k), -1, dtype=np.int64),
        "nonfinite": 0,
    }


def _sorted_k(dist2, index, label, k):
    """Keep the k smallest of each row by (distance, global index), in that order."""
    order = np.lexsort((index, dist2), axis=-1)[:, :k]
    take = np.take_along_axis
    return take(dist2, order, 1), take(index, order, 1), take(label, order, 1)


def _finite(A: np.ndarray) -> np.ndarray:
    return A if np.all(np.isfinite(A)) else np.where(np.isfinite(A), A, 0.0)


def _k_smallest(P, Q, k):
    """The k smallest entries of each row of P by (value, Q) — ties broken by Q.

    P (c×w) values and Q (c×w) positions, w ≥ k. Returns (values, positions), c×k, in no
    particular order. ``numpy.argpartition`` picks any of several equal k-th values; the
    rows where that choice matters (the k-th value also outside the selection) are redone
    by a full (value, position) sort.
    """
    if P.shape[1] == k:
        return P, Q
    take = np.take_along_axis
    sel = np.argpartition(P, k - 1, axis=1)[:, :k]
    vals, pos = take(P, sel, 1), take(Q, sel, 1)
    kth = vals.max(axis=1, keepdims=True)
    tie = np.flatnonzero((P == kth).sum(axis=1) > (vals == kth).sum(axis=1))
    if tie.size:
        order = np.lexsort((Q[tie], P[tie]), axis=-1)[:, :k]
        vals[tie], pos[tie] = take(P[tie], order, 1), take(Q[tie], order, 1)
    return vals, pos


def _survivors(score, tau, axis, k, head):
    """Entries of ``score`` that can be among their row's (axis 1) or column's (axis 0)
    k smallest by (value, position), given the bound ``tau`` per owner.

    ``head`` says where ``tau`` comes from: the owner's first ``head`` positions hold at
    least k entries at or below it (its k-th smallest there), or, with ``head`` = 0,
    entries ranked before this score (smaller positions) hold them. An entry equal to
    ``tau`` after the head then has k entries before it that are as small and come
    first: it can never be selected, nor can an equal entry in the head after the
    owner's first k. So entries strictly below the bound survive, and of those equal to
    it only each owner's first k in the head. Without this, a row repeated thousands of
    times (every copy at distance 0 from each other) kept all its copies as survivors and
    the selection among them grew as their square.

    Returns (values, owner, position): owner = the row (axis 1) or column (axis 0) an
    entry is ranked in, position = its place along that row or column.
    """
    bound = tau[:, None] if axis == 1 else tau[None, :]
    keep = np.less(score, bound)
    if head:
        part = (slice(None), slice(0, head)) if axis == 1 else (slice(0, head), slice(None))
        equal = score[part] == bound
        equal &= np.cumsum(equal, axis=axis, dtype=np.int32) <= k
        keep[part] |= equal
    flat = np.flatnonzero(keep)  # 1-D: several times faster than a 2-D nonzero
    rows, cols = np.divmod(flat, score.shape[1])
    values = score.reshape(-1)[flat]
    return (values, rows, cols) if axis == 1 else (values, cols, rows)


def _select(values, owner, position, n_owners, k, prev=None):
    """Per owner, the k smallest (value, position) of the given entries and of ``prev``.

    Returns (values, positions), each n_owners × k, padded with (inf, −1).
    """
    if owner.size and np.any(owner[1:] < owner[:-1]):
        small = np.uint16 if n_owners <= 2**16 else np.int64  # 16-bit keys: a radix sort
        order = np.argsort(owner.astype(small), kind="stable")
        values, owner, position = values[order], owner[order], position[order]
    counts = np.bincount(owner, minlength=n_owners)
    slot = np.arange(owner.size) - np.repeat(np.cumsum(counts) - counts, counts)
    width = int(counts.max()) if n_owners else 0
    P = np.full((n_owners, width), np.inf, dtype=values.dtype)
    Q = np.full((n_owners, width), -1, dtype=np.int64)
    P[owner, slot], Q[owner, slot] = values, position
    if prev is not None:
        P, Q = np.hstack([prev[0], P]), np.hstack([prev[1], Q])
    return _pad_k(*_k_smallest(P, Q, min(k, P.shape[1])), k)


def _pad_k(vals, pos, k):
    if vals.shape[1] < k:
        pad = ((0, 0), (0, k - vals.shape[1]))
        vals = np.pad(vals, pad, constant_values=np.inf)
        pos = np.pad(pos, pad, constant_values=-1)
    return vals, pos


def _sample_size(b: int, k: int) -> int:
    """Entries sampled to bound the k-th smallest of b: at most a quarter of them (0: none)."""
    sample = min(THRESHOLD_SAMPLE, b // 4)
    return sample if sample >= 2 * k else 0


def _smallest_k(score, k, *, base=0):
    """Per row of ``score`` (c×b), the k smallest entries by (value, base + column).

    The k-th smallest of a row's first :data:`THRESHOLD_SAMPLE` columns (at most a
    quarter of the row) bounds its k-th smallest overall; only entries at or below the
    bound (a vectorised comparison rejects most of a long row) are selected among, so
    the result is exact. Short rows are selected among whole. Returns (values,
    positions), each c×k, padded with (inf, −1).
    """
    c, b = score.shape
    sample = _sample_size(b, k)
    if not sample:
        P, Q = score, np.broadcast_to(np.arange(base, base + b), (c, b))
        return _pad_k(*_k_smallest(P, Q, min(k, b)), k)
    tau = np.partition(score[:, :sample], k - 1, axis=1)[:, k - 1]
    values, rows, cols = _survivors(score, tau, 1, k, sample)
    return _select(values, rows, cols + base, c, k)


def _smallest_k_columns(score, k, *, base, prev):
    """As :func:`_smallest_k` down the columns of ``score`` (b×c), merged with ``prev``.

    ``prev`` is the result for the rows above (None for the first tile): its k-th
    values are the running bounds. Without it, the k-th smallest of the first
    :data:`THRESHOLD_SAMPLE` rows bounds each column.
    """
    b, c = score.shape
    sample = _sample_size(b, k)
    head = 0  # with prev: its k entries (earlier positions) are at or below its k-th value
    if prev is not None:
        tau = prev[0].max(axis=1)
    elif sample:
        tau = np.partition(score[:sample], k - 1, axis=0)[k - 1]
        head = sample
    else:
        tau = np.full(c, np.inf, dtype=score.dtype)
        head = b  # no bound: every entry is "in the head", equal ones (inf) k at most
    values, cols, rows = _survivors(score, tau, 0, k, head)
    return _select(values, cols, rows + base, c, k, prev)


def _complete(vals, pos, q_norms, r_norms, dtype):
    """Squared distances of selected entries: (positions, distances), sorted by
    (distance, position), padded and excluded entries as (−1, inf).

    ``vals`` are the selected ranking scores ‖r‖² − 2 q·r (inf = excluded) at positions
    ``pos`` (−1 = none) of R. The distance is ‖q‖² + score in float64, values below the
    expansion's rounding error set to 0.
    """
    real = pos >= 0
    at = np.where(real, pos, 0)
    d2 = vals.astype(np.float64)
    excluded = np.isinf(d2) | ~real
    d2 += q_norms[:, None]
    np.maximum(d2, 0.0, out=d2)
    d2[d2 < 8.0 * np.finfo(dtype).eps * (q_norms[:, None] + r_norms[at])] = 0.0
    d2[excluded] = np.inf
    pos = np.where(excluded, -1, pos)
    order = np.lexsort((np.where(excluded, np.iinfo(np.int64).max, pos), d2), axis=-1)
    return np.take_along_axis(pos, order, 1), np.take_along_axis(d2, order, 1)


def _partial(pos, d2, index, labels, nonfinite=0) -> dict:
    """Neighbour partial from positions in the block's labeled rows: global indices and
    labels (−1 where there is no neighbour)."""
    real = pos >= 0
    at = np.where(real, pos, 0)
    return {
        "dist2": d2,
        "index": np.where(real, index[at], -1),
        "label": np.where(real, labels[at], -1),
        "nonfinite": nonfinite,
    }


def _neighbors_of(vals, pos, cand_norms, rows_norms, index, labels, dtype):
    """Neighbour partial (global indices and labels) from selected scores ‖x‖² − 2 c·x."""
    return _partial(*_complete(vals, pos, cand_norms, rows_norms, dtype), index, labels)


def _top_k(score, cand_norms, rows_norms, index, labels, k, dtype):
    """Select the k best of each row of ``score`` = ‖x‖² − 2 c·x (c×b, inf = excluded)."""
    vals, pos = _smallest_k(score, k)
    return _neighbors_of(vals, pos, cand_norms, rows_norms, index, labels, dtype)


# --- exact search against a short reference set (CCDR's subsample) --------------------------


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
        self._duplicate_rank = None

    def duplicate_rank(self) -> np.ndarray:
        """For each row, how many identical rows come before it (computed once, when
        first asked for: a sort of the rows)."""
        if self._duplicate_rank is None:
            _, group = np.unique(self.R, axis=0, return_inverse=True)
            order = np.argsort(group.ravel(), kind="stable")
            sorted_group = group.ravel()[order]
            first = np.r_[True, sorted_group[1:] != sorted_group[:-1]]
            start = np.maximum.accumulate(np.where(first, np.arange(self.size), 0))
            rank = np.empty(self.size, dtype=np.int64)
            rank[order] = np.arange(self.size) - start
            self._duplicate_rank = rank
        return self._duplicate_rank


def _rounding_bound(q_norms, ref: _Reference) -> np.ndarray:
    """δ per query: |(‖q‖² + ranking score) − the float64 expansion| ≤ δ for every r.

    The score ‖r‖² − 2 q·r is a (p+1)-term product in the ranking precision (unit
    roundoff u, inputs rounded once), the expansion ‖q‖² + ‖r‖² − 2 q·r a float64 sum of
    p terms: both err by at most about (p+3)·u·(‖q‖² + ‖r‖² + 2‖q‖‖r‖) (the classic
    bound of a length-p dot product, any summation order). Doubled for safety.
    """
    u = np.finfo(ref.dtype).eps / 2 + np.finfo(np.float64).eps / 2
    scale = q_norms + ref.max_norm2 + 2.0 * np.sqrt(q_norms * ref.max_norm2)
    return 2.0 * (ref.p + 3) * u * scale


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


def nearest(
    Q: np.ndarray,
    R: np.ndarray,
    k: int,
    *,
    exclude: np.ndarray | None = None,
    dtype=None,
    refine: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The exact k nearest rows of R for each row of Q: (positions, squared distances).

    Each of shape (len(Q), k), sorted by (distance, position), padded with (−1, inf) where
    R has fewer than k rows. ``exclude[i]`` ≥ 0 is a position of R that row i of Q never
    lists (itself). Rows are ranked by ‖r‖² − 2 q·r, one matrix product in ``dtype``
    (default: the inputs' common precision, float32 for float32 data: BLAS speed), and
    the k smallest scores are selected among the entries under a sampled bound
    (:func:`_smallest_k`), ties by position. Their distances are ‖q‖² + score in float64
    (float32 rounding for float32 data). Queries go in tiles of at most
    :data:`TILE_ELEMENTS` scores: memory O(TILE_ELEMENTS + len(Q)·k).

    With ``refine``, the neighbours and their order are those of the float64 distances
    ‖q‖² + ‖r‖² − 2 q·r (ties by position) whatever ``dtype`` ranks them
    (:func:`_nearest_exact_tile`): a query whose k+1 smallest scores are apart by more
    than twice the ranking's rounding bound keeps the ranking's order and its distances
    ‖q‖² + score; the others (near-ties, distance ≈ 0) are recomputed in float64 among
    every candidate within the bound. Memory O(:data:`EXACT_TILE_ELEMENTS` + len(Q)·k).
    """
    c, b = Q.shape[0], R.shape[0]
    pos_out = np.full((c, k), -1, dtype=np.int64)
    d2_out = np.full((c, k), np.inf)
    if b == 0 or c == 0:
        return pos_out, d2_out
    dtype = np.result_type(Q.dtype, R.dtype, np.float32) if dtype is None else np.dtype(dtype)
    if refine:
        return _nearest_exact(Q, R, k, exclude, dtype)
    q_norms, r_norms = row_sq_norms(Q), row_sq_norms(R)
    with np.errstate(over="ignore"):  # rows beyond the ranking precision rank last (inf)
        minus_two_R = (-2.0 * np.asarray(R)).astype(dtype)
        r_norms_d = r_norms.astype(dtype)
    tile = min(c, max(1, TILE_ELEMENTS // b))
    buffer = np.empty((tile, b), dtype=dtype)  # reused: no page faults per tile
    for start in range(0, c, tile):
        stop = min(c, start + tile)
        score = np.matmul(
            np.asarray(Q[start:stop], dtype=dtype), minus_two_R.T, out=buffer[: stop - start]
        )
        score += r_norms_d
        if exclude is not None:
            local = np.flatnonzero(exclude[start:stop] >= 0)
            score[local, exclude[start:stop][local]] = np.inf
        vals, pos = _smallest_k(score, k)
        pos_out[start:stop], d2_out[start:stop] = _complete(
            vals, pos, q_norms[start:stop], r_norms, dtype
        )
    return pos_out, d2_out


def kneighbors_block(
    X: np.ndarray,
    codes: np.ndarray,
    *,
    row_start: int,
    candidates: np.ndarray,
    candidate_index: np.ndarray,
    n_neighbors: int,
) -> dict[str, np.ndarray]:
    """The k nearest labeled rows of one block, for every candidate.

    Parameters
    ----------
    X : ndarray (b, p), one row block; codes : ndarray (b,), −1 for unlabeled rows
    row_start : int, global index of the block's first row
    candidates : ndarray (c, p); candidate_index : ndarray (c,) their global row indices
    n_neighbors : int, k

    Returns
    -------
    dict with ``dist2`` (c, k) squared distances (inf where the block has fewer than k
    labeled rows), ``index`` (c, k) global row indices (−1 for padding), ``label``
    (c, k) class codes, and ``nonfinite`` (NaN/inf count of the block).

    Notes
    -----
    Rows are ranked by ‖x‖² − 2 c·x, a matrix product in the data's precision (float32
    data keeps BLAS at float32 speed), and the k kept distances are ‖c‖² + ‖x‖² − 2 c·x
    in float64 from it (for float32 data they carry float32 rounding, about 1e-7 of
    ‖c‖²). Candidates are processed in tiles of at most :data:`TILE_ELEMENTS` distances,
    so memory is O(TILE_ELEMENTS + c·k).
    """
    nonfinite = _blocks.count_nonfinite(X)
    _blocks.check_magnitude(X)
    rows, index, labels = labeled_rows(_finite(X), codes, row_start)
    candidates = _finite(candidates)  # their NaN/inf are counted where their block is X
    c, b = candidates.shape[0], rows.shape[0]
    if b == 0 or c == 0:
        return {**_empty_neighbors(c, n_neighbors), "nonfinite": nonfinite}
    self_pos = np.minimum(np.searchsorted(index, candidate_index), b - 1)
    exclude = np.where(index[self_pos] == candidate_index, self_pos, -1)  # never oneself
    pos, dist2 = nearest(candidates, rows, n_neighbors, exclude=exclude)
    return _partial(pos, dist2, index, labels, nonfinite)


def kneighbors_pair(
    X_i: np.ndarray,
    codes_i: np.ndarray,
    X_j: np.ndarray,
    codes_j: np.ndarray,
    *,
    start_i: int,
    start_j: int,
    n_neighbors: int,
) -> tuple[dict, dict]:
    """Two different row blocks: neighbours of i's labeled rows among j's and of j's
    among i's, from ONE product X_i X_jᵀ (half the work of two :func:`kneighbors_block`).

    Returns the two partials (as :func:`kneighbors_block`, ``nonfinite`` 0: each block's
    NaN/inf are counted by its own diagonal task).

    Notes
    -----
    The product is formed in tiles of rows of X_i (:data:`PAIR_TILE_ELEMENTS`). Each tile
    gives i's rows their k nearest in j at once; j's rows keep a running k nearest over
    the tiles, whose k-th distance bounds what the next tile must select among.
    Memory: two blocks, two tiles and O((b_i + b_j) k).
    """
    rows_i, index_i, labels_i = labeled_rows(_finite(X_i), codes_i, start_i)
    rows_j, index_j, labels_j = labeled_rows(_finite(X_j), codes_j, start_j)
    bi, bj = rows_i.shape[0], rows_j.shape[0]
    if bi == 0 or bj == 0:
        return _empty_neighbors(bi, n_neighbors), _empty_neighbors(bj, n_neighbors)
    dtype = np.result_type(rows_i.dtype, rows_j.dtype, np.float32)
    norms_i, norms_j = row_sq_norms(rows_i), row_sq_norms(rows_j)
    norms_i32, norms_j32 = norms_i.astype(dtype), norms_j.astype(dtype)
    minus_two_i = rows_i.astype(dtype) * dtype.type(-2.0)  # exact: −2 x_i·x_j from BLAS
    rows_j_t = rows_j.astype(dtype).T
    tile = min(bi, max(1, PAIR_TILE_ELEMENTS // bj))
    buffers = np.empty((2, tile, bj), dtype=dtype)  # reused: no page faults per tile
    parts_i = []
    found_j = None  # running (scores, positions in block i) of j's rows, bj × k
    for start in range(0, bi, tile):
        stop = min(bi, start + tile)
        cross = np.matmul(minus_two_i[start:stop], rows_j_t, out=buffers[0, : stop - start])
        score_i = np.add(cross, norms_j32, out=buffers[1, : stop - start])
        parts_i.append(
            _top_k(score_i, norms_i[start:stop], norms_j, index_j, labels_j, n_neighbors, dtype)
        )
        cross += norms_i32[start:stop, None]  # j's scores ‖x_i‖² − 2 x_j·x_i, transposed
        found_j = _smallest_k_columns(cross, n_neighbors, base=start, prev=found_j)
    out_i = {key: np.concatenate([p[key] for p in parts_i]) for key in ("dist2", "index", "label")}
    out_i["nonfinite"] = 0
    return out_i, _neighbors_of(*found_j, norms_j, norms_i, index_i, labels_i, dtype)


def merge_neighbors(*parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Merge k-NN partials of several blocks: the k nearest of their union (associative)."""
    k = parts[0]["dist2"].shape[1]
    dist2, index, label = (
        np.concatenate([p[key] for p in parts], axis=1) for key in ("dist2", "index", "label")
    )
    dist2, index, label = _sorted_k(dist2, index, label, k)
    return {
        "dist2": dist2,
        "index": index,
        "label": label,
        "nonfinite": sum(int(p["nonfinite"]) for p in parts),
    }
