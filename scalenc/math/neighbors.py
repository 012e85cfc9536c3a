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
lie within it their distances decide (:mod:`scalenc.math.selection`); scores of integer
data small enough to be exact are used as they are. Most of a score row cannot hold a
neighbour: the k-th smallest of a sample of the row (or, down the columns of a block
pair, the running k-th distance of the tiles already seen), plus that bound, bounds it,
and only entries under the bound — found by one vectorised comparison — are selected
among (:func:`scalenc.math.selection.smallest_k`), which keeps the search exact.

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

from scalenc.math import selection
from scalenc.math.distances import (
    pairwise_sq_distances,
    ranking_dtype,
    row_sq_norms,
    sq_distances_from_inner,
)
from scalenc.math.moments import check_magnitude, count_nonfinite
from scalenc.math.nearest import nearest_exact
from scalenc.math.neighbors_device import nearest_on_device
from scalenc.math.selection import (
    Search,
    exact_scores,
    no_neighbors,
    smallest_k,
    smallest_k_columns,
)
from scalenc.math.xp import (
    dtype_in,
    host_dtype,
    host_or_device,
    like,
    namespace,
    take_rows,
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


#: Distance tile of a block pair (rows of the first block × the second block); two float32
#: buffers of 8M = 64 MB per thread.
PAIR_TILE_ELEMENTS = 8 * 2**20


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


def _finite(A):
    """A with its NaN and inf entries set to 0 (A itself when it has none)."""
    xp = namespace(A)
    return A if bool(xp.all(xp.isfinite(A))) else xp.where(xp.isfinite(A), A, 0.0)


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
    most :data:`~scalenc.math.selection.TILE_ELEMENTS` distances (a device's
    :func:`scalenc.math.xp.tile_elements`), so memory is O(TILE_ELEMENTS + c·k).
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
    pair = host_or_device(namespace(rows_i, rows_j), _pair_on_host, _pair_on_device)
    return pair(rows_i, index_i, labels_i, rows_j, index_j, labels_j, n_neighbors)


def _pair_on_device(rows_i, index_i, labels_i, rows_j, index_j, labels_j, n_neighbors):
    """:func:`kneighbors_pair` of device blocks: one search each way
    (:func:`~scalenc.math.neighbors_device.nearest_on_device`)."""
    pos_i, d2_i = nearest(rows_i, rows_j, n_neighbors)
    pos_j, d2_j = nearest(rows_j, rows_i, n_neighbors)
    return (
        _partial(to_host(pos_i), to_host(d2_i), index_j, labels_j),
        _partial(to_host(pos_j), to_host(d2_j), index_i, labels_i),
    )


def _pair_on_host(rows_i, index_i, labels_i, rows_j, index_j, labels_j, n_neighbors):
    """:func:`kneighbors_pair` of NumPy blocks: one product per tile serving both
    directions."""
    bi, bj = rows_i.shape[0], rows_j.shape[0]
    dtype = np.result_type(rows_i.dtype, rows_j.dtype, np.float32)
    norms_i, norms_j = row_sq_norms(rows_i), row_sq_norms(rows_j)
    norms_i32, norms_j32 = norms_i.astype(dtype), norms_j.astype(dtype)
    minus_two_i = rows_i.astype(dtype) * dtype.type(-2.0)  # exact: −2 x_i·x_j from BLAS
    rows_j_t = rows_j.astype(dtype).T
    exact = exact_scores(dtype, rows_i, rows_j)
    search_i = Search(rows_i, rows_j, norms_i, norms_j, n_neighbors, dtype, exact)
    search_j = Search(rows_j, rows_i, norms_j, norms_i, n_neighbors, dtype, exact)
    tile = min(bi, max(1, PAIR_TILE_ELEMENTS // bj))
    buffers = np.empty((2, tile, bj), dtype=dtype)  # reused: no page faults per tile
    parts_i = []
    found_j = None  # running (distances, positions in block i) of j's rows, bj × k
    for start in range(0, bi, tile):
        stop = min(bi, start + tile)
        cross = np.matmul(minus_two_i[start:stop], rows_j_t, out=buffers[0, : stop - start])
        score_i = np.add(cross, norms_j32, out=buffers[1, : stop - start])
        d2, pos = smallest_k(score_i, n_neighbors, search_i, start)
        parts_i.append(_partial(pos, d2, index_j, labels_j))
        cross += norms_i32[start:stop, None]  # j's scores ‖x_i‖² − 2 x_j·x_i, transposed
        found_j = smallest_k_columns(cross, n_neighbors, base=start, prev=found_j, search=search_j)
    out_i = {key: np.concatenate([p[key] for p in parts_i]) for key in ("dist2", "index", "label")}
    out_i["nonfinite"] = 0
    dist_j, pos_j = search_j.finish(found_j)
    return out_i, _partial(pos_j, dist_j, index_i, labels_i)


def merge_neighbors(*parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Merge k-NN partials of several blocks: the k nearest of their union (associative),
    each row's k smallest by (distance, global index), in that order."""
    joined = {
        key: np.concatenate([p[key] for p in parts], axis=1) for key in ("dist2", "index", "label")
    }
    order = np.lexsort((joined["index"], joined["dist2"]), axis=-1)[:, : parts[0]["dist2"].shape[1]]
    out = {key: np.take_along_axis(values, order, 1) for key, values in joined.items()}
    return {**out, "nonfinite": sum(int(p["nonfinite"]) for p in parts)}


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
    bound (:func:`scalenc.math.selection.smallest_k`). The distances are Σ (q_t − r_t)²
    in ``dtype`` (float32 rounding for float32 data), the same for the same two rows
    wherever they sit; they decide where scores are within their rounding bound. Queries
    go in tiles of at most :data:`~scalenc.math.selection.TILE_ELEMENTS` scores: memory
    O(TILE_ELEMENTS + len(Q)·k).

    With ``refine``, the neighbours and their order are those of the float64 distances
    ‖q‖² + ‖r‖² − 2 q·r (ties by position) whatever ``dtype`` ranks them
    (:func:`scalenc.math.nearest._nearest_exact_tile`): a query whose k+1 smallest scores are apart
    by more
    than twice the ranking's rounding bound keeps the ranking's order and its distances
    ‖q‖² + score; the others (near-ties, distance ≈ 0) are recomputed in float64 among
    every candidate within the bound. Memory O(:data:`scalenc.math.nearest.EXACT_TILE_ELEMENTS` +
    len(Q)·k).

    Q and R may be a device's arrays (Q is moved to R's device): the same neighbours and
    distances as arrays of that device (:func:`nearest_on_device`).
    """
    xp = namespace(Q, R)
    c, b = Q.shape[0], R.shape[0]
    if b == 0 or c == 0:
        return no_neighbors(xp, c, k, R)
    dtype = (
        ranking_dtype(xp, Q.dtype, R.dtype) if dtype is None else dtype_in(xp, host_dtype(dtype))
    )
    if refine:
        return nearest_exact(Q, R, k, exclude, dtype)
    return host_or_device(xp, _nearest_on_host, nearest_on_device)(xp, Q, R, k, exclude, dtype)


def _nearest_on_host(xp, Q, R, k, exclude, dtype):
    """:func:`nearest` of NumPy rows: tiles of
    :data:`~scalenc.math.selection.TILE_ELEMENTS` scores in a reused buffer, the k
    smallest of each row by :func:`~scalenc.math.selection.smallest_k`."""
    c, b = Q.shape[0], R.shape[0]
    pos_out, d2_out = no_neighbors(np, c, k, R)
    q_norms, r_norms = row_sq_norms(Q), row_sq_norms(R)
    search = Search(np.asarray(Q), np.asarray(R), q_norms, r_norms, k, dtype)
    with np.errstate(over="ignore"):  # rows beyond the ranking precision rank last (inf)
        minus_two_R = (-2.0 * np.asarray(R)).astype(dtype)
        r_norms_d = r_norms.astype(dtype)
    tile = min(c, max(1, selection.TILE_ELEMENTS // b))
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
        d2_out[start:stop], pos_out[start:stop] = smallest_k(score, k, search, start)
    return pos_out, d2_out
