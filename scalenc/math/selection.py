"""The exact selection of each query's k nearest rows from a tile of ranking scores.

The k-NN searches of :mod:`scalenc.math.neighbors` (NumPy) and
:mod:`scalenc.math.neighbors_device` rank rows by the scores ‖x‖² − 2 c·x of one matrix
product, which round the same two rows differently depending on where they sit in it;
the scores therefore only select. An entry more than twice their rounding bound above
the k-th smallest score cannot be a neighbour; the k-th smallest of a sample of the row
(:data:`THRESHOLD_SAMPLE` columns), or down the columns of a block pair the running k-th
distance, plus that bound, bounds the rest (:func:`smallest_k`, :func:`smallest_k_columns`).
The survivors' distances are summed from the two rows (:func:`pair_distances`), so that
identical rows tie exactly wherever they sit, and ties go by global row index
(:class:`Search`). Rows repeated more than k times before a row never rank
(:func:`few_copies`). Plain NumPy, except for the pieces the device search shares.
"""

from __future__ import annotations

import numpy as np

from scalenc.math.buffers import arange, gather, scratch, scratch_take
from scalenc.math.distances import GATHER_ELEMENTS, duplicate_rank, score_bound
from scalenc.math.xp import device_of, lexsort_rows, namespace, tile_elements, to_host

__all__ = [
    "TILE_ELEMENTS",
    "THRESHOLD_SAMPLE",
    "Search",
    "smallest_k",
    "smallest_k_columns",
    "exact_scores",
    "few_copies",
    "pair_distances",
    "in_order",
    "no_neighbors",
]


#: Elements of one distance tile (candidates × rows); 4M float64 = 32 MB per worker thread.
TILE_ELEMENTS = 4 * 2**20


#: Columns of a score row whose k-th smallest value bounds the row's k-th smallest overall
#: (:func:`smallest_k`); only entries at or below the bound go to selection.
THRESHOLD_SAMPLE = 2048


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

    ``head`` > 0 only for exact scores (:func:`exact_scores`), where equal scores are
    equal distances: ``bound`` is then the owner's k-th smallest in its first ``head``
    positions, and an entry equal to it after the head has k entries before it that are as
    near and come first: it can never be selected, nor can an equal entry in the head
    after the owner's first k. So of those equal to the bound only each owner's first k
    in the head survive. ``few`` (None, or which positions have at most k identical rows
    before them, :meth:`Search.few_copies`) drops the other copies of repeated rows:
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


def exact_scores(dtype, *blocks) -> bool:
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


class Search:
    """What a selection by ranking scores needs besides the scores: the queries Q (whose
    rows own the scores) and the rows R ranked (the positions), to compute the distances
    of the few entries selected; the ranking's rounding bound δ per query (None when the
    scores are exact, :func:`exact_scores`); which rows of R repeat an earlier row.

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
            exact = exact_scores(dtype, Q, R)
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
            self._few = None if self.delta is None else few_copies(self.R, self.r_norms, self.k)
        return None if self._few is None else self._few[start:stop]

    def distances(self, owner, position) -> np.ndarray:
        """‖q − r‖² = Σ (q_t − r_t)² in the ranking precision (float64 for float64 data,
        float32 rounding for float32 data), returned as float64, for the queries ``owner``
        and the rows ``position`` of R: no matrix product, so the same two rows give the
        same value in any block, tile or place. Gathers of at most :data:`GATHER_ELEMENTS`
        elements."""
        return pair_distances(self.Q, self.R, owner, position, self.dtype)

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
        order (:func:`in_order`)."""
        dist, at = found
        if self.delta is not None:
            rows, slots = np.nonzero(at >= 0)
            dist[rows, slots] = self.distances(rows, at[rows, slots])
        return in_order(dist, at)


def few_copies(R, r_norms, k) -> np.ndarray | None:
    """Which rows of R have at most k identical rows before them (NumPy booleans), or None
    where all do (:meth:`Search.few_copies`): a count of equal squared norms, and only
    where more than k + 1 norms are equal a sort of the rows (on the host)."""
    if r_norms.shape[0] <= k + 1:
        return None
    xp = namespace(r_norms)
    if int(xp.max(xp.unique_counts(r_norms).counts)) <= k + 1:
        return None
    few = duplicate_rank(to_host(R)) <= k
    return None if few.all() else few


def pair_distances(Q, R, owner, position, dtype):
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


def in_order(dist, at):
    """Each row's neighbours sorted by (distance, position), padding (inf, −1) last."""
    xp = namespace(dist, at)
    order = lexsort_rows(xp, dist, xp.where(at < 0, np.iinfo(np.int64).max, at))
    return xp.take_along_axis(dist, order, axis=1), xp.take_along_axis(at, order, axis=1)


def smallest_k(score, k, search: Search, offset=0):
    """Per row of ``score`` (c×b, the ranking scores of queries ``offset`` … of
    ``search``), its k nearest by (distance, column).

    The k-th smallest of a row's first :data:`THRESHOLD_SAMPLE` columns (at most a
    quarter of the row), plus twice the rounding bound, bounds its k-th nearest overall;
    only entries under the bound (a vectorised comparison rejects most of a long row) are
    selected among, and :meth:`Search.select` decides near-ties on distances, so the
    result is exact. Short rows are selected among whole. Returns (distances,
    positions), each c×k, sorted, padded with (inf, −1).
    """
    c, b = score.shape
    sample = _sample_size(b, k)
    tau = _kth_smallest(score[:, :sample], k, axis=1) if sample else np.full(c, np.inf, score.dtype)
    if search.delta is None:  # exact scores: equal scores are equal distances
        bound, head = tau, sample or b
    else:
        delta = search.delta[offset : offset + c]
        bound, head = _limit(tau + 2.0 * delta, score.dtype, True), 0
    values, rows, cols = _survivors(score, bound, 1, k, head, search.few_copies())
    queries = np.arange(offset, offset + c)
    near = scratch_take("neighbors.near", search.q_norms[queries], rows)
    values = np.add(near, values, out=near)  # ≈ distances, float64
    return in_order(*search.select(values, rows, cols, queries, k))


def smallest_k_columns(score, k, *, base, prev, search: Search):
    """As :func:`smallest_k` down the columns of ``score`` (b×c: rows ``base`` … of R
    against every query), merged with ``prev``.

    ``prev`` is the result for the rows above (None for the first tile): its k-th
    values, less ‖q‖², plus twice the rounding bound, are the running bounds. Without it,
    the k-th smallest of the first :data:`THRESHOLD_SAMPLE` rows bounds each column.
    Returns (values, positions), each c×k: the k nearest, in no particular order, with
    values within δ of their distances (:meth:`Search.finish` gives the distances).
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


def no_neighbors(xp, c, k, ref):
    """Positions and distances of c queries with no neighbours: (−1, inf) everywhere."""
    device = device_of(ref)
    return (
        xp.full((c, k), -1, dtype=xp.int64, device=device),
        xp.full((c, k), xp.inf, dtype=xp.float64, device=device),
    )
