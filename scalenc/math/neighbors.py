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

Selection: within a block, each candidate's k nearest are the k smallest (distance,
global row index), the distance ‖c − x‖² summed from the two rows in the ranking
precision (float64 for float64 data), so exact ties — identical rows above all — are
broken the same way for any chunking and tiling. Rows are ranked by the scores
‖x‖² − 2 c·x of one matrix product, but a product rounds the same two rows differently
depending on where they sit in it (BLAS treats a tile's edges apart: identical rows can
score an ulp apart), so the scores only select: an entry more than twice their rounding
bound above the k-th smallest score cannot be a neighbour, and where more than k entries
lie within it their distances decide (:meth:`_Search.select`); scores of integer data
small enough to be exact are used as they are. Most of a score row cannot hold a
neighbour: the k-th smallest of a sample of the row (or, down the columns of a block
pair, the running k-th distance of the tiles already seen), plus that bound, bounds it,
and only entries under the bound — found by one vectorised comparison — are selected
among (:func:`_smallest_k`), which keeps the search exact.

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

from scalenc.math.buffers import arange, gather, scratch, scratch_take
from scalenc.math.distances import (
    GATHER_ELEMENTS,
    duplicate_rank,
    pairwise_sq_distances,
    ranking_dtype,
    row_sq_norms,
    score_bound,
    sq_distances_from_inner,
)
from scalenc.math.moments import check_magnitude, count_nonfinite
from scalenc.math.nearest import _nearest_exact
from scalenc.math.xp import (
    argpartition_rows,
    device_of,
    dtype_in,
    host_dtype,
    host_or_device,
    lexsort_rows,
    like,
    namespace,
    take_rows,
    tile_elements,
    to_host,
)

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
#: Scores per query that a device's search selects beyond the k smallest
#: (:func:`_nearest_on_device`): queries whose (k + slack)-th score is within the rounding
#: bound of the k-th select again among twice as many.
DEVICE_SLACK = 8
#: Columns of a score row whose minimum a device's search takes first: only the groups
#: whose minima rank among the smallest are read again (:func:`_select_in_groups`).
DEVICE_GROUP = 32


def labeled_rows(X, codes: np.ndarray, row_start: int = 0):
    """The labeled rows of a block: ``(rows, global indices, codes)``.

    The rows are an array of X's namespace (on X's device; X itself there when every row
    is labeled); the indices and codes are NumPy, as ``codes`` is.
    """
    keep = np.flatnonzero(np.asarray(codes) >= 0)
    index, kept_codes = (row_start + keep).astype(np.int64), np.asarray(codes)[keep]
    return take_rows(namespace(X), X, keep), index, kept_codes


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


def _finite(A):
    """A with its NaN and inf entries set to 0 (A itself when it has none)."""
    xp = namespace(A)
    return A if bool(xp.all(xp.isfinite(A))) else xp.where(xp.isfinite(A), A, 0.0)


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


def _survivors(score, bound, axis, k, head, few=None):
    """Entries of ``score`` that can be among their row's (axis 1) or column's (axis 0)
    k nearest, given the limit ``bound`` per owner (in the scores' dtype): entries
    strictly below it survive.

    ``head`` > 0 only for exact scores (:func:`_exact_scores`), where equal scores are
    equal distances: ``bound`` is then the owner's k-th smallest in its first ``head``
    positions, and an entry equal to it after the head has k entries before it that are as
    near and come first: it can never be selected, nor can an equal entry in the head
    after the owner's first k. So of those equal to the bound only each owner's first k
    in the head survive. ``few`` (None, or which positions have at most k identical rows
    before them, :meth:`_Search.few_copies`) drops the other copies of repeated rows:
    without this, a row repeated thousands of times (every copy at distance 0 from each
    other) kept all its copies as survivors and the selection among them grew as their
    square.

    Returns (values, owner, position): owner = the row (axis 1) or column (axis 0) an
    entry is ranked in, position = its place along that row or column. All three are
    per-thread buffers (:func:`scalenc.math.buffers.scratch`), valid until this thread's
    next call.
    """
    limit = bound[:, None] if axis == 1 else bound[None, :]
    keep = np.less(score, limit, out=scratch("neighbors.keep", score.shape, bool))
    if head:
        part = (slice(None), slice(0, head)) if axis == 1 else (slice(0, head), slice(None))
        equal = score[part] == limit
        equal &= np.cumsum(equal, axis=axis, dtype=np.int32) <= k
        keep[part] |= equal
    if few is not None:
        keep &= few[None, :] if axis == 1 else few[:, None]
    flat = np.flatnonzero(keep)  # 1-D: several times faster than a 2-D nonzero
    # into per-thread buffers, valid until the next tile's call (as ``keep``): fresh
    # survivor arrays per tile were 1.2× the soft-KNN block on a Dask worker (page faults)
    rows = scratch("neighbors.rows", flat.shape, flat.dtype)
    cols = scratch("neighbors.cols", flat.shape, flat.dtype)
    np.divmod(flat, score.shape[1], out=(rows, cols))
    values = scratch_take("neighbors.values", score.reshape(-1), flat)
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
    slot = scratch_take("neighbors.slot", np.cumsum(counts) - counts, owner)
    np.subtract(arange(owner.size), slot, out=slot)
    width = int(counts.max()) if n_owners else 0
    # per-thread buffers (a fresh array per tile is page-faulted in on a Dask worker)
    P = scratch("neighbors.select_values", (n_owners, width), values.dtype)
    Q = scratch("neighbors.select_positions", (n_owners, width), np.int64)
    P.fill(np.inf)
    Q.fill(-1)
    P[owner, slot], Q[owner, slot] = values, position
    if prev is not None:
        P, Q = np.hstack([prev[0], P]), np.hstack([prev[1], Q])
    elif width <= k:  # _k_smallest would return them as they are: not the buffers
        P, Q = P.copy(), Q.copy()
    return _pad_k(*_k_smallest(P, Q, min(k, P.shape[1])), k)


def _pad_k(vals, pos, k):
    if vals.shape[1] < k:
        pad = ((0, 0), (0, k - vals.shape[1]))
        vals = np.pad(vals, pad, constant_values=np.inf)
        pos = np.pad(pos, pad, constant_values=-1)
    return vals, pos


def _kth_smallest(sample, k, axis):
    """The k-th smallest entry of each row (axis 1) or column (axis 0) of ``sample``,
    partitioned in a per-thread copy (:func:`scalenc.math.buffers.scratch`):
    ``np.partition``'s own copy is a fresh megabyte-sized array per tile, mapped and
    page-faulted in each time on a Dask worker, whose nanny sets
    ``MALLOC_TRIM_THRESHOLD_``."""
    work = scratch("neighbors.sample", sample.shape, sample.dtype)
    work[...] = sample
    work.partition(k - 1, axis=axis)
    return (work[:, k - 1] if axis == 1 else work[k - 1]).copy()


def _sample_size(b: int, k: int) -> int:
    """Entries sampled to bound the k-th smallest of b: at most a quarter of them (0: none)."""
    sample = min(THRESHOLD_SAMPLE, b // 4)
    return sample if sample >= 2 * k else 0


def _limit(bound, dtype, inclusive):
    """A float64 bound per owner as a limit in the scores' ``dtype`` (scores strictly
    below it survive): never below the bound; with ``inclusive``, scores equal to the
    bound survive too."""
    with np.errstate(over="ignore"):
        limit = np.asarray(bound).astype(dtype)
    up = dtype.type(np.inf)
    limit = np.where(limit < bound, np.nextafter(limit, up), limit)
    return np.nextafter(limit, up) if inclusive else limit


def _exact_scores(dtype, *blocks) -> bool:
    """Whether every ranking score ‖r‖² − 2 q·r of these rows, and every distance, is
    computed exactly in ``dtype`` whatever order a matrix product sums in: integer values
    x with 4 p max|x|² at most 2^(mantissa digits), so that every product, partial sum and
    squared norm is an integer the dtype holds. Then equal scores are equal distances."""
    digits = np.finfo(dtype).nmant + 1
    peak = 0.0
    for A in blocks:
        if A.size == 0:
            continue
        if not np.issubdtype(A.dtype, np.integer):
            if not np.array_equal(A[:64], np.rint(A[:64])):  # continuous data: decided at once
                return False
            if not np.array_equal(A, np.rint(A)):
                return False
        peak = max(peak, float(np.abs(A).max()))
    p = max(A.shape[1] for A in blocks)
    return 4.0 * p * peak * peak <= 2.0**digits


class _Search:
    """What a selection by ranking scores needs besides the scores: the queries Q (whose
    rows own the scores) and the rows R ranked (the positions), to compute the distances
    of the few entries selected; the ranking's rounding bound δ per query (None when the
    scores are exact, :func:`_exact_scores`); which rows of R repeat an earlier row.

    A matrix product rounds the same two rows differently depending on where they sit in
    it (BLAS kernels treat the edges of a tile apart): two identical rows of R can get
    scores an ulp apart, and the copy at a tile's edge would win a tie it should lose. So
    the scores only select, within their rounding bound, and the distances — computed
    from the rows, the same for the same two rows anywhere — decide.
    """

    def __init__(self, Q, R, q_norms, r_norms, k, dtype, exact=None):
        self.Q, self.R, self.q_norms, self.r_norms, self.k = Q, R, q_norms, r_norms, k
        self.dtype = np.dtype(dtype)
        if exact is None:
            exact = _exact_scores(dtype, Q, R)
        max_norm2 = float(r_norms.max()) if r_norms.size else 0.0
        self.delta = None if exact else score_bound(q_norms, max_norm2, Q.shape[1], dtype)
        self._few = False  # not yet known

    def few_copies(self, start=0, stop=None) -> np.ndarray | None:
        """Which of R's rows ``start`` … ``stop`` have at most k identical rows before them,
        or None where all do (computed once: a sort of the squared norms, equal for
        identical rows, and only where more than k + 1 norms are equal a sort of the rows).
        The others never rank among the k nearest: k + 1 identical rows, at the same
        distance, come first, and at most one of them is excluded (the query itself).
        Exact scores need none of this: identical rows tie, as :func:`_survivors` uses."""
        if self._few is False:
            self._few = None if self.delta is None else _few_copies(self.R, self.r_norms, self.k)
        return None if self._few is None else self._few[start:stop]

    def distances(self, owner, position) -> np.ndarray:
        """‖q − r‖² = Σ (q_t − r_t)² in the ranking precision (float64 for float64 data,
        float32 rounding for float32 data), returned as float64, for the queries ``owner``
        and the rows ``position`` of R: no matrix product, so the same two rows give the
        same value in any block, tile or place. Gathers of at most :data:`GATHER_ELEMENTS`
        elements."""
        return _pair_distances(self.Q, self.R, owner, position, self.dtype)

    def select(self, values, owner, position, queries, k, prev=None, *, final=True):
        """The k nearest by (distance, position) among survivors ranked by approximate
        distances.

        ``values`` (float64) are ‖q‖² + score of the survivors (``owner``, ``position``)
        of n owners, the queries ``queries`` (n indices into Q): each within δ of its
        distance (exactly it for exact scores); so are ``prev``'s (n×k values and
        positions). :func:`_select` gives the k + 1 smallest of both: an entry more than
        2δ above the k-th is farther than all k, so where the (k+1)-th is not within 2δ of
        the k-th the k are the k nearest; the rare others (near-ties, identical rows) are
        decided by the distances of every entry within 2δ. Returns (values, positions),
        n×k, the k smallest (distance, position) in no particular order, padded with
        (inf, −1); the values are the distances where ``final`` (else approximate, as
        ``values``). +inf (an excluded row) is never a neighbour.
        """
        n = queries.size
        if self.delta is None:  # exact: the values are the distances
            dist, at = _select(values, owner, position, n, k, prev)
            at[np.isinf(dist)] = -1  # padding, or +inf: an excluded row
            return dist, at
        vals, pos = _select(values, owner, position, n, k + 1, prev)
        rows = np.arange(n)
        last = vals.argmax(axis=1)  # set the (k+1)-th smallest (or padding) aside
        after = vals[rows, last]
        vals[rows, last], pos[rows, last] = vals[:, k], pos[:, k]
        dist, at = vals[:, :k], pos[:, :k]  # fresh (_select): updated in place
        lim = dist.max(axis=1) + 2.0 * self.delta[queries]
        short = np.isinf(lim)  # fewer than k: all are selected, none in doubt
        if short.any():
            at[np.isinf(dist)] = -1  # padding, or +inf: an excluded row
            lim[short] = -np.inf
        doubt = np.flatnonzero(after <= lim)
        if final:
            new = at >= 0
            new[doubt] = False
            rows, slots = np.divmod(np.flatnonzero(new), k)
            dist[rows, slots] = self.distances(queries[rows], at[rows, slots])
        if doubt.size:  # every entry within 2δ of the k-th: their distances decide
            in_doubt = np.zeros(n, dtype=bool)
            in_doubt[doubt] = True
            pick = np.flatnonzero(in_doubt[owner])
            pick = pick[values[pick] <= lim[owner[pick]]]
            o, j = owner[pick], position[pick]
            if prev is not None:
                po, ps = np.nonzero(prev[0][doubt] <= lim[doubt, None])
                o = np.concatenate([o, doubt[po]])
                j = np.concatenate([j, prev[1][doubt[po], ps]])
            d = self.distances(queries[o], j)
            order = np.lexsort((j, d, o))
            o, j, d = o[order], j[order], d[order]
            counts = np.bincount(o, minlength=n)
            slot = np.arange(o.size) - np.repeat(np.cumsum(counts) - counts, counts)
            first = slot < k  # a row in doubt has more than k: all its k slots are filled
            dist[o[first], slot[first]], at[o[first], slot[first]] = d[first], j[first]
        return dist, at

    def finish(self, found):
        """Distances for approximate values (:meth:`select` with ``final`` false), in
        order (:func:`_in_order`)."""
        dist, at = found
        if self.delta is not None:
            rows, slots = np.nonzero(at >= 0)
            dist[rows, slots] = self.distances(rows, at[rows, slots])
        return _in_order(dist, at)


def _few_copies(R, r_norms, k) -> np.ndarray | None:
    """Which rows of R have at most k identical rows before them (NumPy booleans), or None
    where all do (:meth:`_Search.few_copies`): a count of equal squared norms, and only
    where more than k + 1 norms are equal a sort of the rows (on the host)."""
    if r_norms.shape[0] <= k + 1:
        return None
    xp = namespace(r_norms)
    if int(xp.max(xp.unique_counts(r_norms).counts)) <= k + 1:
        return None
    few = duplicate_rank(to_host(R)) <= k
    return None if few.all() else few


def _pair_distances(Q, R, owner, position, dtype):
    """‖q − r‖² = Σ (q_t − r_t)² in ``dtype``, as float64, for the rows ``owner`` of Q and
    ``position`` of R (1-D, of Q's and R's namespace): no matrix product, each pair
    summed alone, so the same two rows give the same value in any block, tile or place.
    Gathers of :data:`GATHER_ELEMENTS` elements (a device's :func:`tile_elements`)."""
    xp = namespace(Q, R)
    out = xp.empty(owner.shape[0], dtype=dtype, device=device_of(R))
    step = max(1, tile_elements(xp, GATHER_ELEMENTS) // max(1, Q.shape[1]))
    with np.errstate(over="ignore"):
        for start in range(0, owner.shape[0], step):
            stop = min(owner.shape[0], start + step)
            # NumPy's gathers into per-thread buffers (page faults, as in _survivors)
            diff = gather("neighbors.pair_q", Q, owner[start:stop], dtype)
            diff -= gather("neighbors.pair_r", R, position[start:stop], dtype)
            diff *= diff
            out[start:stop] = xp.sum(diff, axis=1)
    return xp.astype(out, xp.float64, copy=False)


def _in_order(dist, at):
    """Each row's neighbours sorted by (distance, position), padding (inf, −1) last."""
    xp = namespace(dist, at)
    order = lexsort_rows(xp, dist, xp.where(at < 0, np.iinfo(np.int64).max, at))
    return xp.take_along_axis(dist, order, axis=1), xp.take_along_axis(at, order, axis=1)


def _smallest_k(score, k, search: _Search, offset=0):
    """Per row of ``score`` (c×b, the ranking scores of queries ``offset`` … of
    ``search``), its k nearest by (distance, column).

    The k-th smallest of a row's first :data:`THRESHOLD_SAMPLE` columns (at most a
    quarter of the row), plus twice the rounding bound, bounds its k-th nearest overall;
    only entries under the bound (a vectorised comparison rejects most of a long row) are
    selected among, and :meth:`_Search.select` decides near-ties on distances, so the
    result is exact. Short rows are selected among whole. Returns (distances,
    positions), each c×k, sorted, padded with (inf, −1).
    """
    c, b = score.shape
    sample = _sample_size(b, k)
    if sample:
        tau = _kth_smallest(score[:, :sample], k, axis=1)
    else:
        tau = np.full(c, np.inf, dtype=score.dtype)
    if search.delta is None:  # exact scores: equal scores are equal distances
        bound, head = tau, sample or b
    else:
        delta = search.delta[offset : offset + c]
        bound, head = _limit(tau + 2.0 * delta, score.dtype, True), 0
    values, rows, cols = _survivors(score, bound, 1, k, head, search.few_copies())
    queries = np.arange(offset, offset + c)
    near = scratch_take("neighbors.near", search.q_norms[queries], rows)
    values = np.add(near, values, out=near)  # ≈ distances, float64
    return _in_order(*search.select(values, rows, cols, queries, k))


def _smallest_k_columns(score, k, *, base, prev, search: _Search):
    """As :func:`_smallest_k` down the columns of ``score`` (b×c: rows ``base`` … of R
    against every query), merged with ``prev``.

    ``prev`` is the result for the rows above (None for the first tile): its k-th
    values, less ‖q‖², plus twice the rounding bound, are the running bounds. Without it,
    the k-th smallest of the first :data:`THRESHOLD_SAMPLE` rows bounds each column.
    Returns (values, positions), each c×k: the k nearest, in no particular order, with
    values within δ of their distances (:meth:`_Search.finish` gives the distances).
    """
    b, c = score.shape
    sample = _sample_size(b, k)
    exact = search.delta is None
    head = 0  # with prev: its k entries (earlier positions) are at or below its k-th value
    if prev is not None:  # its values are within δ of their distances
        bound = prev[0].max(axis=1) - search.q_norms
        bound = _limit(bound if exact else bound + 2.0 * search.delta, score.dtype, not exact)
    elif sample:
        tau = _kth_smallest(score[:sample], k, axis=0)
        if exact:
            bound, head = tau, sample
        else:
            bound = _limit(tau + 2.0 * search.delta, score.dtype, True)
    else:
        bound = np.full(c, np.inf, dtype=score.dtype)
        head = b if exact else 0  # no bound: in the head, equal ones (inf) k at most
    values, cols, rows = _survivors(score, bound, 0, k, head, search.few_copies(base, base + b))
    values = search.q_norms[cols] + values  # ≈ distances, float64
    if prev is None:
        return search.select(values, cols, rows + base, np.arange(c), k, final=False)
    owners = np.flatnonzero(np.bincount(cols, minlength=c))  # the columns with survivors
    if owners.size:
        local = np.empty(c, dtype=np.int64)
        local[owners] = np.arange(owners.size)
        mine = prev[0][owners], prev[1][owners]
        found = search.select(values, local[cols], rows + base, owners, k, mine, final=False)
        prev[0][owners], prev[1][owners] = found
    return prev


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


# --- exact search against a short reference set (CCDR's subsample) --------------------------


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
    X : array (b, p), one row block (NumPy, or a device's); codes : ndarray (b,), −1 for
        unlabeled rows
    row_start : int, global index of the block's first row
    candidates : array (c, p), moved to X's device; candidate_index : ndarray (c,) their
        global row indices
    n_neighbors : int, k

    Returns
    -------
    dict with ``dist2`` (c, k) squared distances (inf where the block has fewer than k
    labeled rows), ``index`` (c, k) global row indices (−1 for padding), ``label``
    (c, k) class codes, and ``nonfinite`` (NaN/inf count of the block); NumPy arrays
    whatever X's device.

    Notes
    -----
    Rows are ranked by ‖x‖² − 2 c·x, a matrix product in the data's precision (float32
    data keeps BLAS at float32 speed); the k kept distances are Σ (c_t − x_t)² from the
    two rows (for float32 data they carry float32 rounding), which decide ties and
    near-ties of the ranking (:func:`nearest`). Candidates are processed in tiles of at
    most :data:`TILE_ELEMENTS` distances (a device's :func:`tile_elements`), so memory is
    O(TILE_ELEMENTS + c·k).
    """
    nonfinite = count_nonfinite(X)
    check_magnitude(X)
    rows, index, labels = labeled_rows(_finite(X), codes, row_start)
    # their NaN/inf are counted where their block is X
    candidates = _finite(like(namespace(X), candidates, X))
    c, b = candidates.shape[0], rows.shape[0]
    if b == 0 or c == 0:
        return {**_empty_neighbors(c, n_neighbors), "nonfinite": nonfinite}
    candidate_index = np.asarray(candidate_index)
    self_pos = np.minimum(np.searchsorted(index, candidate_index), b - 1)
    exclude = np.where(index[self_pos] == candidate_index, self_pos, -1)  # never oneself
    pos, dist2 = nearest(candidates, rows, n_neighbors, exclude=exclude)
    return _partial(to_host(pos), to_host(dist2), index, labels, nonfinite)


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
    the tiles, whose k-th distance bounds what the next tile must select among. Distances
    and ties are those of :func:`kneighbors_block`.
    Memory: two blocks, two tiles and O((b_i + b_j) k).

    Blocks on a device are searched each way apart (:func:`nearest`, twice the products
    of the NumPy path, each a large kernel); the partials come back as NumPy.
    """
    rows_i, index_i, labels_i = labeled_rows(_finite(X_i), codes_i, start_i)
    rows_j, index_j, labels_j = labeled_rows(_finite(X_j), codes_j, start_j)
    bi, bj = rows_i.shape[0], rows_j.shape[0]
    if bi == 0 or bj == 0:
        return _empty_neighbors(bi, n_neighbors), _empty_neighbors(bj, n_neighbors)
    if namespace(rows_i, rows_j) is not np:  # one search each way (_nearest_on_device)
        pos_i, d2_i = nearest(rows_i, rows_j, n_neighbors)
        pos_j, d2_j = nearest(rows_j, rows_i, n_neighbors)
        return (
            _partial(to_host(pos_i), to_host(d2_i), index_j, labels_j),
            _partial(to_host(pos_j), to_host(d2_j), index_i, labels_i),
        )
    dtype = np.result_type(rows_i.dtype, rows_j.dtype, np.float32)
    norms_i, norms_j = row_sq_norms(rows_i), row_sq_norms(rows_j)
    norms_i32, norms_j32 = norms_i.astype(dtype), norms_j.astype(dtype)
    minus_two_i = rows_i.astype(dtype) * dtype.type(-2.0)  # exact: −2 x_i·x_j from BLAS
    rows_j_t = rows_j.astype(dtype).T
    exact = _exact_scores(dtype, rows_i, rows_j)
    search_i = _Search(rows_i, rows_j, norms_i, norms_j, n_neighbors, dtype, exact)
    search_j = _Search(rows_j, rows_i, norms_j, norms_i, n_neighbors, dtype, exact)
    tile = min(bi, max(1, PAIR_TILE_ELEMENTS // bj))
    buffers = np.empty((2, tile, bj), dtype=dtype)  # reused: no page faults per tile
    parts_i = []
    found_j = None  # running (distances, positions in block i) of j's rows, bj × k
    for start in range(0, bi, tile):
        stop = min(bi, start + tile)
        cross = np.matmul(minus_two_i[start:stop], rows_j_t, out=buffers[0, : stop - start])
        score_i = np.add(cross, norms_j32, out=buffers[1, : stop - start])
        d2, pos = _smallest_k(score_i, n_neighbors, search_i, start)
        parts_i.append(_partial(pos, d2, index_j, labels_j))
        cross += norms_i32[start:stop, None]  # j's scores ‖x_i‖² − 2 x_j·x_i, transposed
        found_j = _smallest_k_columns(cross, n_neighbors, base=start, prev=found_j, search=search_j)
    out_i = {key: np.concatenate([p[key] for p in parts_i]) for key in ("dist2", "index", "label")}
    out_i["nonfinite"] = 0
    dist_j, pos_j = search_j.finish(found_j)
    return out_i, _partial(pos_j, dist_j, index_i, labels_i)


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
    the k smallest (distance, position) are selected among the entries under a sampled
    bound (:func:`_smallest_k`). The distances are Σ (q_t − r_t)² in ``dtype`` (float32
    rounding for float32 data), the same for the same two rows wherever they sit; they
    decide where scores are within their rounding bound. Queries go in tiles of at most
    :data:`TILE_ELEMENTS` scores: memory O(TILE_ELEMENTS + len(Q)·k).

    With ``refine``, the neighbours and their order are those of the float64 distances
    ‖q‖² + ‖r‖² − 2 q·r (ties by position) whatever ``dtype`` ranks them
    (:func:`_nearest_exact_tile`): a query whose k+1 smallest scores are apart by more
    than twice the ranking's rounding bound keeps the ranking's order and its distances
    ‖q‖² + score; the others (near-ties, distance ≈ 0) are recomputed in float64 among
    every candidate within the bound. Memory O(:data:`EXACT_TILE_ELEMENTS` + len(Q)·k).

    Q and R may be a device's arrays (Q is moved to R's device): the same neighbours and
    distances as arrays of that device (:func:`_nearest_on_device`).
    """
    xp = namespace(Q, R)
    c, b = Q.shape[0], R.shape[0]
    if b == 0 or c == 0:
        return _no_neighbors(xp, c, k, R)
    dtype = (
        ranking_dtype(xp, Q.dtype, R.dtype) if dtype is None else dtype_in(xp, host_dtype(dtype))
    )
    if refine:
        return _nearest_exact(Q, R, k, exclude, dtype)
    return host_or_device(xp, _nearest_on_host, _nearest_on_device)(xp, Q, R, k, exclude, dtype)


def _nearest_on_host(xp, Q, R, k, exclude, dtype):
    """:func:`nearest` of NumPy rows: tiles of :data:`TILE_ELEMENTS` scores in a reused
    buffer, the k smallest of each row by :func:`_smallest_k`."""
    c, b = Q.shape[0], R.shape[0]
    pos_out = np.full((c, k), -1, dtype=np.int64)
    d2_out = np.full((c, k), np.inf)
    q_norms, r_norms = row_sq_norms(Q), row_sq_norms(R)
    search = _Search(np.asarray(Q), np.asarray(R), q_norms, r_norms, k, dtype)
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
        d2_out[start:stop], pos_out[start:stop] = _smallest_k(score, k, search, start)
    return pos_out, d2_out


def _no_neighbors(xp, c, k, ref):
    """Positions and distances of c queries with no neighbours: (−1, inf) everywhere."""
    device = device_of(ref)
    return (
        xp.full((c, k), -1, dtype=xp.int64, device=device),
        xp.full((c, k), xp.inf, dtype=xp.float64, device=device),
    )


def _nearest_on_device(xp, Q, R, k, exclude, dtype):
    """:func:`nearest` on a device (Q moved to R's): the same neighbours (the k smallest
    (distance, position), distances Σ (q_t − r_t)² in ``dtype``), found as a GPU finds
    them best.

    Where it differs from the NumPy path (:func:`_smallest_k`): no sampled bound nor
    compaction of survivors into ragged lists, which serve a CPU's caches; every step is
    a kernel over a whole tile. A tile of queries, as large as :func:`tile_elements`
    allows, is one product of ranking scores s = ‖r‖² − 2 q·r. Per query, the minima of
    groups of :data:`DEVICE_GROUP` columns select the groups that can hold a neighbour
    (:func:`_select_in_groups`); among their columns the m = 2k + :data:`DEVICE_SLACK`
    smallest scores (:func:`argpartition_rows`) have their distances computed from the
    rows (:func:`_pair_distances`) and sorted by (distance, position) (:func:`_in_order`).

    Exact: ‖q‖² + s is within δ (:func:`score_bound`) of the distance, so the k smallest
    scores have distances at most ‖q‖² + s_k + δ, and an entry scored above s_k + 2δ is
    farther than all k. Where the m-th smallest score (or group minimum) is not above the
    k-th (the k-th group minimum, at least s_k) plus 2δ, the query selects again among
    twice as many, up to its whole row. Rows with more than k identical rows before them
    never rank (:func:`_few_copies`, which keeps rows repeated thousands of times from
    filling the selection); their scores, like the excluded rows', are +inf.

    Memory: a few score tiles of :func:`tile_elements` elements. Returns device arrays:
    positions (int64) and distances (float64), c×k.
    """
    Q = like(xp, Q, R)
    c, b = Q.shape[0], R.shape[0]
    device = device_of(R)
    q_norms, r_norms = row_sq_norms(Q), row_sq_norms(R)
    delta = score_bound(q_norms, xp.max(r_norms), Q.shape[1], dtype)
    ranked = xp.astype(r_norms, dtype)
    few = _few_copies(R, r_norms, k)
    if few is not None:
        ranked = xp.where(like(xp, few, R), ranked, xp.inf)
    minus_two_R = xp.astype(R, dtype) * -2.0
    columns = xp.arange(b, device=device)
    tile = min(c, max(1, tile_elements(xp, TILE_ELEMENTS) // b))
    pos_out, d2_out = _no_neighbors(xp, c, k, R)
    for start in range(0, c, tile):
        stop = min(c, start + tile)
        score = xp.astype(Q[start:stop, :], dtype) @ minus_two_R.T
        score += ranked
        if exclude is not None:
            mine = like(xp, np.asarray(exclude[start:stop], dtype=np.int64), R)
            score = xp.where(columns == mine[:, None], xp.inf, score)
        search = (xp.arange(start, stop, device=device), Q, R, q_norms, delta, dtype)
        pos, d2 = _select_in_groups(xp, score, min(k, b), search)
        pos_out[start:stop, : pos.shape[1]], d2_out[start:stop, : d2.shape[1]] = pos, d2
    return pos_out, d2_out


def _select_in_groups(xp, score, k, search):
    """The k nearest of each score row, selected among the columns of the groups of
    :data:`DEVICE_GROUP` columns with the m smallest minima (and the last, shorter
    group's): where the m-th smallest minimum is above the k-th plus 2δ, no other group
    holds a neighbour (:func:`_nearest_on_device`); the other rows are searched whole.
    Short rows are searched whole. Returns (positions, distances), c × k, sorted."""
    t, b = score.shape
    size, m = DEVICE_GROUP, 2 * k + DEVICE_SLACK
    g = b // size
    if g <= 2 * m:
        return _select_on_device(xp, score, None, k, search)
    minima = xp.min(xp.reshape(score[:, : g * size], (t, g, size)), axis=2)
    groups = argpartition_rows(xp, minima, m)
    ranks = xp.astype(xp.sort(xp.take_along_axis(minima, groups, axis=1), axis=1), xp.float64)
    kth, mth = ranks[:, k - 1], ranks[:, m - 1]
    queries, delta = search[0], search[4]
    whole = (mth <= kth + 2.0 * xp.take(delta, queries)) & xp.isfinite(kth)
    device = device_of(score)
    cols = groups[:, :, None] * size + xp.arange(size, device=device)
    cols = xp.reshape(cols, (t, m * size))
    if g * size < b:  # the last, shorter group: always read
        rest = xp.broadcast_to(xp.arange(g * size, b, device=device)[None, :], (t, b - g * size))
        cols = xp.concat([cols, rest], axis=1)
    if not bool(xp.any(whole)):
        return _select_on_device(xp, xp.take_along_axis(score, cols, axis=1), cols, k, search)
    found = []  # (rows of the tile, positions, distances) of the rows of each kind
    for rows, grouped in ((xp.nonzero(~whole)[0], True), (xp.nonzero(whole)[0], False)):
        if rows.shape[0]:
            part = (xp.take(queries, rows), *search[1:])
            sub = xp.take(score, rows, axis=0)
            sub_cols = xp.take(cols, rows, axis=0) if grouped else None
            if grouped:
                sub = xp.take_along_axis(sub, sub_cols, axis=1)
            found.append((rows, *_select_on_device(xp, sub, sub_cols, k, part)))
    return _in_row_order(xp, found)


def _select_on_device(xp, score, columns, k, search):
    """The k nearest (positions, distances) of each score row, sorted, among its m
    smallest scores, m doubled for the rows in doubt (:func:`_nearest_on_device`).

    ``columns`` (c×w, or None where the columns are R's rows in order) maps the scores'
    columns to R's rows: they hold every entry that can be a neighbour. ``search`` is
    (the rows of Q owning the score rows, Q, R, ‖q‖² and δ of every row of Q, dtype).
    Returns c × k arrays."""
    queries, Q, R, q_norms, delta, dtype = search
    b = score.shape[1]
    m = min(b, 2 * k + DEVICE_SLACK)
    found = []  # (rows of the tile, their positions, their distances) per round
    todo = xp.arange(score.shape[0], device=device_of(score))  # rows of the tile unsettled
    while todo.shape[0]:
        rows = xp.take(score, todo, axis=0) if todo.shape[0] < score.shape[0] else score
        cols = argpartition_rows(xp, rows, m)
        owners = xp.take(queries, todo)
        near = xp.astype(xp.take_along_axis(rows, cols, axis=1), xp.float64)
        near += xp.take(q_norms, owners)[:, None]
        ranks = xp.sort(near, axis=1)
        kth, mth = ranks[:, k - 1], ranks[:, m - 1]
        doubt = (mth <= kth + 2.0 * xp.take(delta, owners)) & xp.isfinite(kth)
        if m == b or not bool(xp.any(doubt)):
            doubt = xp.zeros_like(doubt)
        settle = xp.nonzero(~doubt)[0]
        cols, near = xp.take(cols, settle, axis=0), xp.take(near, settle, axis=0)
        if columns is not None:  # R's rows
            cols = xp.take_along_axis(xp.take(columns, xp.take(todo, settle), axis=0), cols, axis=1)
        pairs = xp.reshape(xp.broadcast_to(xp.take(owners, settle)[:, None], cols.shape), (-1,))
        d2 = _pair_distances(Q, R, pairs, xp.reshape(cols, (-1,)), dtype)
        d2 = xp.where(xp.isinf(near), xp.inf, xp.reshape(d2, cols.shape))  # +inf: never
        d2, at = _in_order(d2, xp.where(xp.isinf(near), -1, cols))
        found.append((xp.take(todo, settle), at[:, :k], d2[:, :k]))
        todo = xp.take(todo, xp.nonzero(doubt)[0])
        m = min(b, 2 * m)
    return _in_row_order(xp, found)


def _in_row_order(xp, found):
    """(positions, distances) of a tile's rows from ``found``'s (rows, positions,
    distances) parts, the rows back in order."""
    if len(found) == 1:  # every row settled at once, in order
        return found[0][1], found[0][2]
    order = xp.argsort(xp.concat([rows for rows, _, _ in found]))
    pos = xp.take(xp.concat([at for _, at, _ in found], axis=0), order, axis=0)
    return pos, xp.take(xp.concat([d2 for _, _, d2 in found], axis=0), order, axis=0)
