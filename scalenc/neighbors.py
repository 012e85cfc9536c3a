"""Exact block-wise k nearest neighbours and Hu, Pan & Wu's soft-KNN confidence.

Paper: Hu, Pan & Wu, nRBFN and LRC from spectral graph theory
(shared/seeds/nrbfn-lrc-spectral-graph.txt), Algorithm 1 (SKNN).

The k-NN search is exact. A set of *candidate* rows C (c×p) is compared with every row
block of the training data X: each block yields, for every candidate, its k nearest
labeled rows **within the block** (a c×k partial of squared distances, global row indices
and labels); partials are merged by keeping the k smallest, which is associative, so a
tree reduction over the blocks gives the k nearest rows in the whole of X. A candidate
is never its own neighbour (rows are told apart by global row index).

Two ways to run it:

* :func:`kneighbors_pass` — a candidate sample held in memory against every block of X,
  one pass with :func:`scalenc.passes.reduce_rows` (the large-n mode);
* :func:`kneighbors_all_rows` — every labeled row is a candidate (the paper's algorithm
  exactly): row blocks are compared pair by pair, one product X_i X_jᵀ serving both
  blocks' searches, and each block's partials are merged in a tree.

Block functions (:func:`kneighbors_block`, :func:`kneighbors_pair`, :func:`merge_neighbors`,
the soft-KNN formulas) are NumPy only; the two wiring functions import dask lazily.

Selection: within a block, each candidate's k nearest are the k smallest ranking scores
(‖x‖² − 2 c·x), ties broken by global row index, and they are then ordered by
(distance, global row index), so exact ties are broken the same way for any chunking and
tiling. Most of a score row cannot hold a neighbour: the k-th smallest of a sample of the
row (or, down the columns of a block pair, the running k-th of the tiles already seen)
bounds it, and only entries at or below the bound — found by one vectorised comparison —
are selected among (:func:`_smallest_k`), which keeps the search exact.
"""

from __future__ import annotations

import numpy as np

from . import _blocks

__all__ = [
    "pairwise_sq_distances",
    "row_sq_norms",
    "labeled_rows",
    "kneighbors_block",
    "merge_neighbors",
    "kneighbors_pair",
    "kneighbors_pass",
    "kneighbors_all_rows",
    "knn_sigma",
    "soft_knn_confidence",
    "select_basis",
    "stratified_sample",
    "stratified_sample_pass",
    "class_shares",
    "label_counts_block",
    "row_hash",
]

#: Elements of one distance tile (candidates × rows); 4M float64 = 32 MB per worker thread.
TILE_ELEMENTS = 4 * 2**20
#: Distance tile of a block pair (rows of the first block × the second block); two float32
#: buffers of 8M = 64 MB per thread.
PAIR_TILE_ELEMENTS = 8 * 2**20
#: Columns of a score row whose k-th smallest value bounds the row's k-th smallest overall
#: (:func:`_smallest_k`); only entries at or below the bound go to selection.
THRESHOLD_SAMPLE = 2048


def pairwise_sq_distances(A: np.ndarray, B: np.ndarray, *, tol_zero: bool = True) -> np.ndarray:
    """‖a_i − b_j‖² (len(A)×len(B), float64, clipped at 0).

    The cross term ``A Bᵀ`` is a matrix product in the inputs' common precision (float32
    data keeps BLAS at its float32 speed); row norms and the sum are float64. With
    ``tol_zero``, values below the expansion's rounding error, 8 ε (‖a‖² + max ‖b‖²), are set
    to 0, so a row's distance to itself is exactly 0 (it matters under a square root).
    """
    dtype = np.result_type(A.dtype, B.dtype, np.float32)
    cross = np.asarray(A, dtype=dtype) @ np.asarray(B, dtype=dtype).T
    a_norms, b_norms = row_sq_norms(A), row_sq_norms(B)
    d2 = np.multiply(cross, -2.0, dtype=np.float64)
    d2 += a_norms[:, None]
    d2 += b_norms[None, :]
    np.maximum(d2, 0.0, out=d2)
    if tol_zero and d2.size:  # below the rounding error of the expansion: a zero distance
        tol = 8.0 * np.finfo(dtype).eps * (a_norms + b_norms.max())
        d2[d2 < tol[:, None]] = 0.0
    return d2


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


def _survivors(score, tau, axis):
    """Entries of ``score`` at or below their row's (axis 1) or column's (axis 0) bound.

    Returns (values, owner, position): owner = the row (axis 1) or column (axis 0) an
    entry is ranked in, position = its place along that row or column.
    """
    bound = tau[:, None] if axis == 1 else tau[None, :]
    flat = np.flatnonzero(score <= bound)  # 1-D: several times faster than a 2-D nonzero
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
    values, rows, cols = _survivors(score, tau, axis=1)
    return _select(values, rows, cols + base, c, k)


def _smallest_k_columns(score, k, *, base, prev):
    """As :func:`_smallest_k` down the columns of ``score`` (b×c), merged with ``prev``.

    ``prev`` is the result for the rows above (None for the first tile): its k-th
    values are the running bounds. Without it, the k-th smallest of the first
    :data:`THRESHOLD_SAMPLE` rows bounds each column.
    """
    b, c = score.shape
    sample = _sample_size(b, k)
    if prev is not None:
        tau = prev[0].max(axis=1)
    elif sample:
        tau = np.partition(score[:sample], k - 1, axis=0)[k - 1]
    else:
        tau = np.full(c, np.inf, dtype=score.dtype)
    values, cols, rows = _survivors(score, tau, axis=0)
    return _select(values, cols, rows + base, c, k, prev)


def _neighbors_of(vals, pos, cand_norms, rows_norms, index, labels, dtype):
    """Neighbour partial from selected scores ‖x‖² − 2 c·x and positions (−1 = none).

    Distances are ‖c‖² + score in float64, with values below the expansion's rounding
    error set to 0; sorted by (distance, global index); excluded (inf) entries get
    index −1, and padding also label −1.
    """
    real = pos >= 0
    at = np.where(real, pos, 0)
    d2 = vals.astype(np.float64)
    excluded = np.isinf(d2)
    d2 += cand_norms[:, None]
    np.maximum(d2, 0.0, out=d2)
    d2[d2 < 8.0 * np.finfo(dtype).eps * (cand_norms[:, None] + rows_norms[at])] = 0.0
    dist2, index, label = _sorted_k(
        d2, np.where(excluded | ~real, -1, index[at]), np.where(real, labels[at], -1), vals.shape[1]
    )
    return {"dist2": dist2, "index": index, "label": label, "nonfinite": 0}


def _top_k(score, cand_norms, rows_norms, index, labels, k, dtype):
    """Select the k best of each row of ``score`` = ‖x‖² − 2 c·x (c×b, inf = excluded).

    Returns (dist2, index, label), each (c, k) padded with (inf, −1, −1), sorted by
    (distance, global index); the k are the smallest scores, ties by row position
    (:func:`_smallest_k`).
    """
    vals, pos = _smallest_k(score, k)
    return _neighbors_of(vals, pos, cand_norms, rows_norms, index, labels, dtype)


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
    rows, index, labels = labeled_rows(_finite(X), codes, row_start)
    candidates = _finite(candidates)  # their NaN/inf are counted where their block is X
    c, b = candidates.shape[0], rows.shape[0]
    if b == 0 or c == 0:
        return {**_empty_neighbors(c, n_neighbors), "nonfinite": nonfinite}
    self_pos = np.minimum(np.searchsorted(index, candidate_index), b - 1)
    is_self = index[self_pos] == candidate_index
    dtype = np.result_type(rows.dtype, candidates.dtype, np.float32)
    minus_two_rows = (-2.0 * rows).astype(dtype)
    rows_norms = row_sq_norms(rows)
    cand_norms = row_sq_norms(candidates)
    rows_norms_d = rows_norms.astype(dtype)
    tile = min(c, max(1, TILE_ELEMENTS // b))
    buffer = np.empty((tile, b), dtype=dtype)  # reused: no page faults per tile
    parts = []
    for start in range(0, c, tile):
        stop = min(c, start + tile)
        score = np.matmul(
            np.asarray(candidates[start:stop], dtype=dtype),
            minus_two_rows.T,
            out=buffer[: stop - start],
        )
        score += rows_norms_d
        local = np.flatnonzero(is_self[start:stop])
        score[local, self_pos[start:stop][local]] = np.inf  # never one's own neighbour
        parts.append(
            _top_k(score, cand_norms[start:stop], rows_norms, index, labels, n_neighbors, dtype)
        )
    out = {key: np.concatenate([p[key] for p in parts]) for key in ("dist2", "index", "label")}
    out["nonfinite"] = nonfinite
    return out


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


def kneighbors_all_rows(X, codes, n_neighbors: int, *, split_every: int = 8) -> list:
    """Exact k-NN of EVERY labeled row among all labeled rows, block pair by block pair.

    For row blocks i < j one task computes both directions from one product
    (:func:`kneighbors_pair`); block i against itself uses :func:`kneighbors_block`.
    Each block's partials are merged in a tree. Returns, per row block, a Delayed
    ``(neighbours, global indices, codes)`` of its labeled rows.

    Notes
    -----
    n_b(n_b + 1)/2 block-pair tasks for n_b row blocks: every block is read n_b times
    (counted as n_b passes), and the distance work is n²p instead of 2n²p.
    Memory per task: two blocks, one distance tile and O(b k).
    """
    import dask

    from .passes import tree_reduce

    starts = np.concatenate([[0], np.cumsum(X.chunks[0])[:-1]]).astype(int)
    xs, cs = X.to_delayed().ravel(), codes.to_delayed().ravel()
    rows_of = dask.delayed(labeled_rows, pure=True, nout=3)
    pair = dask.delayed(kneighbors_pair, pure=True, nout=2)
    block = dask.delayed(kneighbors_block, pure=True)
    n_b = len(xs)
    partials: list[list] = [[] for _ in range(n_b)]
    labeled = [rows_of(xs[i], cs[i], int(starts[i])) for i in range(n_b)]
    for i in range(n_b):
        partials[i].append(
            block(
                xs[i],
                cs[i],
                row_start=int(starts[i]),
                candidates=labeled[i][0],
                candidate_index=labeled[i][1],
                n_neighbors=n_neighbors,
            )
        )
        for j in range(i + 1, n_b):
            to_i, to_j = pair(
                xs[i],
                cs[i],
                xs[j],
                cs[j],
                start_i=int(starts[i]),
                start_j=int(starts[j]),
                n_neighbors=n_neighbors,
            )
            partials[i].append(to_i)
            partials[j].append(to_j)
    return [
        (
            tree_reduce(partials[i], merge_neighbors, split_every=split_every),
            labeled[i][1],
            labeled[i][2],
        )
        for i in range(n_b)
    ]


def row_sq_norms(A: np.ndarray) -> np.ndarray:
    """‖a_i‖² of every row, float64."""
    A = np.asarray(A, dtype=np.float64)
    return np.einsum("ij,ij->i", A, A)


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


def kneighbors_pass(
    X,
    codes,
    candidates,
    candidate_index,
    n_neighbors: int,
    *,
    split_every: int = 8,
):
    """One pass over X: the k nearest labeled rows (global indices) of every candidate.

    ``candidates`` and ``candidate_index`` may be NumPy arrays or Delayed objects (a row
    block of X itself, for the exact all-rows search). Returns a Delayed dict as
    :func:`kneighbors_block`. Memory per task: one block, one distance tile and O(c·k).
    """
    from .passes import reduce_rows

    return reduce_rows(
        kneighbors_block,
        X,
        codes,
        candidates=candidates,
        candidate_index=candidate_index,
        n_neighbors=n_neighbors,
        combine=merge_neighbors,
        split_every=split_every,
    )


# --- soft-KNN (Algorithm 1) -----------------------------------------------------------


def knn_sigma(dist2: np.ndarray) -> float:
    """Algorithm 1, step 4: σ = Σ_ij Q_ij / (k n), the mean neighbour distance."""
    return float(np.sqrt(dist2).mean())


def soft_knn_confidence(
    dist2: np.ndarray,
    neighbor_labels: np.ndarray,
    labels: np.ndarray,
    sigma: float,
) -> np.ndarray:
    """Algorithm 1, steps 5–7: the soft-KNN confidence T of each candidate.

    W_ij = exp(−Q_ij² / (2σ²)) over the k neighbours of candidate j, normalised to sum to
    one (W̃ = W diag(1ᵀW)⁻¹); T_j = Σ of W̃ over the neighbours that share j's label.
    The smallest Q_ij² of each candidate is subtracted inside the exponential, which the
    normalisation cancels exactly, so T is defined even when every W_ij underflows.
    """
    scale = 2.0 * sigma**2 if sigma > 0 else 1.0
    logits = -(dist2 - dist2.min(axis=1, keepdims=True)) / scale
    W = np.exp(logits)
    W /= W.sum(axis=1, keepdims=True)
    same = neighbor_labels == np.asarray(labels)[:, None]
    return (W * same).sum(axis=1)


def _by_confidence(confidence: np.ndarray) -> np.ndarray:
    """Positions ordered by increasing confidence, ties by position."""
    return np.lexsort((np.arange(confidence.size), confidence))


def _least_confident_per_class(confidence, labels, n_classes) -> np.ndarray:
    order = _by_confidence(confidence)
    first = {}
    for pos in order:
        first.setdefault(int(labels[pos]), pos)
        if len(first) == n_classes:
            break
    return np.array(sorted(first.values()), dtype=np.intp)


def select_basis(
    confidence: np.ndarray,
    labels: np.ndarray,
    threshold: float,
    n_classes: int,
    *,
    n_basis: int | None = None,
    max_basis: int | None = None,
) -> tuple[np.ndarray, bool]:
    """Algorithm 1, steps 8–9: positions (into the candidates) of the basis, ascending.

    Without ``n_basis``: every candidate with T < ``threshold``, plus the least confident
    candidate of any class left out. With ``n_basis`` (the paper's "same basis size as
    SVM" mode, Section 7.1.3): exactly the ``n_basis`` least confident candidates, one per
    class reserved first. ``max_basis`` caps the size the same way. Returns the positions
    and whether the cap cut the basis.
    """
    labels = np.asarray(labels)
    reserve = _least_confident_per_class(confidence, labels, n_classes)
    size = n_basis
    if size is None:
        chosen = np.union1d(np.flatnonzero(confidence < threshold), reserve)
        if max_basis is None or chosen.size <= max_basis:
            return chosen, False
        size = max_basis
    reserved = np.zeros(confidence.size, dtype=bool)
    reserved[reserve] = True
    order = _by_confidence(confidence)
    fill = order[~reserved[order]][: max(0, size - reserve.size)]
    chosen = np.union1d(reserve, fill)
    return chosen, n_basis is None


# --- random choices from global row indices --------------------------------------------


def row_hash(index: np.ndarray, seed: int) -> np.ndarray:
    """A uniform number in [0, 1) per global row index (splitmix64 of index and seed).

    Depends only on the index and the seed, so random choices made with it do not depend
    on chunking or scheduler.
    """
    with np.errstate(over="ignore"):
        golden = np.uint64(0x9E3779B97F4A7C15)
        z = np.asarray(index, dtype=np.uint64) + np.uint64(seed % 2**63) * golden
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(2**53)


def class_shares(counts: np.ndarray, size: int) -> np.ndarray:
    """Rows of each class in a stratified sample of ``size``: proportional to ``counts``
    (largest remainders), at least one per class that has rows, at most its count."""
    counts = np.asarray(counts, dtype=np.int64)
    exact = size * counts / counts.sum()
    share = np.minimum(np.maximum(np.floor(exact).astype(np.int64), counts > 0), counts)
    order = np.argsort(-(exact - np.floor(exact)), kind="stable")
    for k in order:
        if share.sum() >= size:
            break
        if share[k] < counts[k]:
            share[k] += 1
    return share


def _smallest_per_class(index, code, key, shares) -> dict[str, np.ndarray]:
    """For each class k, the ``shares[k]`` rows with the smallest (key, index)."""
    keep = []
    for k, share in enumerate(shares):
        rows = np.flatnonzero(code == k)
        keep.append(rows[np.lexsort((index[rows], key[rows]))[:share]])
    keep = np.concatenate(keep)
    return {"index": index[keep], "code": code[keep], "key": key[keep]}


def sample_block(codes, *, row_start, shares, seed):
    """One block's candidates for :func:`stratified_sample`: per class, its rows with the
    smallest :func:`row_hash` (at most the class's share; global row indices)."""
    codes = np.asarray(codes)
    labeled = np.flatnonzero(codes >= 0)
    index = (row_start + labeled).astype(np.int64)
    return _smallest_per_class(index, codes[labeled], row_hash(index, seed), shares)


class _KeepSmallest:
    """Tree-reduction combine of :func:`sample_block` partials (picklable, holds the shares)."""

    def __init__(self, shares):
        self.shares = shares

    def __call__(self, *parts):
        both = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
        return _smallest_per_class(both["index"], both["code"], both["key"], self.shares)


def stratified_sample(codes: np.ndarray, size: int, n_classes: int, seed: int) -> np.ndarray:
    """Global indices of a class-stratified sample of ``size`` labeled rows, ascending.

    Class k gets a share of ``size`` proportional to its count (:func:`class_shares`);
    within a class the rows with the smallest :func:`row_hash` are taken (ties by index).
    In memory; :func:`stratified_sample_pass` draws the same rows from Dask labels.
    """
    codes = np.asarray(codes)
    counts = np.bincount(codes[codes >= 0], minlength=n_classes)
    picked = sample_block(codes, row_start=0, shares=class_shares(counts, size), seed=seed)
    return np.sort(picked["index"])


def label_counts_block(codes, *, row_start, n_classes):
    """Labeled rows per class in one block (summed across blocks by the tree reduction)."""
    codes = np.asarray(codes)
    return np.bincount(codes[codes >= 0], minlength=n_classes).astype(np.int64)


def stratified_sample_pass(codes, counts, size: int, seed: int, *, split_every: int = 8):
    """:func:`stratified_sample` from Dask labels in one pass over them: each block keeps
    its smallest hashes per class, merged in a tree; only the sample reaches the client.

    ``counts`` are the labeled rows per class (from :func:`label_counts_block`). Returns a
    Delayed of ``{"index", "code", "key"}``, one entry per sampled row, in no set order.
    """
    from .passes import reduce_rows

    shares = class_shares(counts, size)
    return reduce_rows(
        sample_block,
        codes,
        combine=_KeepSmallest(shares),
        shares=shares,
        seed=seed,
        split_every=split_every,
    )
