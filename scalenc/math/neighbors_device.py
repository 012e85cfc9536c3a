"""The exact k-NN search of :func:`scalenc.math.neighbors.nearest` on a device block (CuPy's
on a GPU; :mod:`scalenc.math.xp`), as a GPU finds them best: large score tiles, the
minima of groups of :data:`DEVICE_GROUP` columns first, and only the groups whose minima
rank among the smallest read again; :data:`DEVICE_SLACK` more scores than k selected, the
rows in doubt selecting again among twice as many. The same neighbours and distances as
the NumPy search (:mod:`scalenc.math.selection`'s rules: distances summed from the two
rows, ties by position).
"""

from __future__ import annotations

import numpy as np

from scalenc.math import selection
from scalenc.math.distances import row_sq_norms, score_bound
from scalenc.math.selection import few_copies, in_order, no_neighbors, pair_distances
from scalenc.math.xp import argpartition_rows, device_of, like, tile_elements

__all__ = ["DEVICE_SLACK", "DEVICE_GROUP", "nearest_on_device"]


#: Scores per query that a device's search selects beyond the k smallest
#: (:func:`nearest_on_device`): queries whose (k + slack)-th score is within the rounding
#: bound of the k-th select again among twice as many.
DEVICE_SLACK = 8


#: Columns of a score row whose minimum a device's search takes first: only the groups
#: whose minima rank among the smallest are read again (:func:`_select_in_groups`).
DEVICE_GROUP = 32


def nearest_on_device(xp, Q, R, k, exclude, dtype):
    """:func:`nearest` on a device (Q moved to R's): the same neighbours (the k smallest
    (distance, position), distances Σ (q_t − r_t)² in ``dtype``), found as a GPU finds
    them best.

    Where it differs from the NumPy path (:func:`scalenc.math.selection.smallest_k`): no sampled
    bound nor
    compaction of survivors into ragged lists, which serve a CPU's caches; every step is
    a kernel over a whole tile. A tile of queries, as large as :func:`tile_elements`
    allows, is one product of ranking scores s = ‖r‖² − 2 q·r. Per query, the minima of
    groups of :data:`DEVICE_GROUP` columns select the groups that can hold a neighbour
    (:func:`_select_in_groups`); among their columns the m = 2k + :data:`DEVICE_SLACK`
    smallest scores (:func:`argpartition_rows`) have their distances computed from the
    rows (:func:`pair_distances`) and sorted by (distance, position) (:func:`in_order`).

    Exact: ‖q‖² + s is within δ (:func:`score_bound`) of the distance, so the k smallest
    scores have distances at most ‖q‖² + s_k + δ, and an entry scored above s_k + 2δ is
    farther than all k. Where the m-th smallest score (or group minimum) is not above the
    k-th (the k-th group minimum, at least s_k) plus 2δ, the query selects again among
    twice as many, up to its whole row. Rows with more than k identical rows before them
    never rank (:func:`few_copies`, which keeps rows repeated thousands of times from
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
    few = few_copies(R, r_norms, k)
    if few is not None:
        ranked = xp.where(like(xp, few, R), ranked, xp.inf)
    minus_two_R = xp.astype(R, dtype) * -2.0
    columns = xp.arange(b, device=device)
    tile = min(c, max(1, tile_elements(xp, selection.TILE_ELEMENTS) // b))
    pos_out, d2_out = no_neighbors(xp, c, k, R)
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
    holds a neighbour (:func:`nearest_on_device`); the other rows are searched whole.
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
    smallest scores, m doubled for the rows in doubt (:func:`nearest_on_device`).

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
        d2 = pair_distances(Q, R, pairs, xp.reshape(cols, (-1,)), dtype)
        d2 = xp.where(xp.isinf(near), xp.inf, xp.reshape(d2, cols.shape))  # +inf: never
        d2, at = in_order(d2, xp.where(xp.isinf(near), -1, cols))
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
