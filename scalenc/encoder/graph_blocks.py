"""The graph encoder embedding's per-block math (GraphEmd's edge-list algorithm), NumPy only.

Shen, Wang and Priebe's graph encoder embedding is Z = A W: W (n × K) holds the one-hot
labels scaled by the class counts, W[j, k] = 1/n_k when node j is labeled k, and 0 for an
unlabeled node. GraphEmd computes it from an edge list in O(s + nK): each edge (a, b, w)
adds

* w · W[b] to row a (when b is labeled), and
* w · W[a] to row b (when a is labeled and a ≠ b) — into the same K columns for an
  undirected graph, into the second K columns (the receiver's embedding AᵀW) for a
  directed one.

So an undirected edge list gives Z = (A + Aᵀ − diag A) W, a directed one
[A W | (Aᵀ − diag A) W]; a self-loop counts once, duplicate edges add up. Options, as
GraphEmd's: diagonal augmentation (``DiagA``: one self-loop of weight 1 at every node),
Laplacian normalisation (each weight times d_a^−½ d_b^−½, d the weighted degrees of the
symmetric view with self-loops counted once; a node without edges keeps a zero row), and
row normalisation (``Normalize``/``Correlation``: each row, each K-column half of a
directed embedding separately, scaled to unit norm; zero rows stay zero).

The out-of-core pass (:mod:`scalenc.encoder.graph`) splits this by edge blocks and node
blocks: an edge block's contributions are grouped by the node block of the row they go to
(:func:`embedding_parts`, a sparse part per node block, O(edges) in size: the flat cells
(row, class) as int32, and the weights — none for an unweighted graph, whose contributions
are counts, 4 bytes each), the parts of a node block are summed densely (:func:`sum_parts`,
one ``bincount``, O(block × K)), and the node block is finished on its own
(:func:`finish_embedding`: the 1/n_k of W, self-loops, normalisation). Degrees go the
same way (:func:`degree_parts`, :func:`degree_scale`).
"""

from __future__ import annotations

import numpy as np

from scalenc.exceptions import InputError

__all__ = [
    "map_ids",
    "edge_endpoints",
    "embedding_parts",
    "degree_parts",
    "sum_parts",
    "degree_scale",
    "finish_embedding",
    "inverse_counts",
]


def inverse_counts(counts) -> np.ndarray:
    """1/n_k per class (the nonzero entries of W), float64."""
    return 1.0 / np.asarray(counts, dtype=np.float64)


def map_ids(ids, lookup, *, row_start: int) -> np.ndarray:
    """One edge block's (s, 2) node ids as their positions (int64).

    ``lookup`` maps a 1-D array of ids to their positions among the node ids, −1 for an
    id not among them, and has ``len`` the number of node ids
    (:class:`scalenc.encoder.graph.NodeLookup`: a hash table built once per worker).

    Raises :class:`~scalenc.exceptions.InputError` naming the first edge (its row in the
    edge list) with an id that is not among the node ids.
    """
    ids = np.asarray(ids)
    flat = np.asarray(lookup(ids.reshape(-1)), dtype=np.int64)
    if ids.size and flat.min() < 0:
        where = int(np.flatnonzero(flat < 0)[0])
        row, column = divmod(where, 2)
        a, b = ids[row].tolist()
        raise InputError(
            f"Edge {row_start + row} ({a!r}, {b!r}) names node {(a, b)[column]!r}, which "
            f"is not among the {len(lookup)} node ids of nodes=. "
            "Add it to nodes= (with the unlabeled marker as its label, or a row of X), or "
            "drop its edges."
        )
    return flat.reshape(ids.shape)


def edge_endpoints(ids, weights, *, row_start: int, n_nodes: int, nonnegative: bool = False):
    """(a, b, w) of one edge block: the two id columns (views of ``ids`` when it holds
    int64), and w float64, or None when every edge weighs 1; checked.

    Raises :class:`~scalenc.exceptions.InputError` naming the first bad edge (its row in
    the edge list): an id that is negative, not a whole number, or not below ``n_nodes``
    (the number of labels); a weight that is NaN or infinite, or negative when
    ``nonnegative`` (the Laplacian's degrees).
    """
    ids = np.asarray(ids)
    if ids.dtype.kind == "f":
        _check_whole(ids, row_start)
    a = ids[:, 0].astype(np.int64, copy=False)
    b = ids[:, 1].astype(np.int64, copy=False)
    if ids.size and (ids.min() < 0 or ids.max() >= n_nodes):  # one read of the ids when right
        _refuse_ids(a, b, row_start, n_nodes)
    if weights is None:
        return a, b, None
    w = np.asarray(weights, dtype=np.float64)
    bad = ~np.isfinite(w)
    if nonnegative:
        bad |= w < 0
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        need = "finite and non-negative (the Laplacian's degrees)" if nonnegative else "finite"
        raise InputError(
            f"Edge {row_start + row} ({a[row]}, {b[row]}) has weight {w[row]}: edge "
            f"weights must be {need}."
        )
    return a, b, w


def _check_whole(ids, row_start: int):
    finite = np.isfinite(ids).all(axis=1)
    bad = ~finite
    bad[finite] = (ids[finite] != np.floor(ids[finite])).any(axis=1)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"Edge {row_start + row} has node ids {ids[row].tolist()}: node ids must be "
            "whole numbers 0 … n−1."
        )


def _refuse_ids(a, b, row_start: int, n_nodes: int):
    """The error of the first edge with an id out of 0 … n−1."""
    low = np.minimum(a, b)
    if low.min() < 0:
        row = int(np.flatnonzero(low < 0)[0])
        raise InputError(
            f"Edge {row_start + row} joins nodes {a[row]} and {b[row]}: node ids must be "
            "0 … n−1, never negative."
        )
    high = np.maximum(a, b)
    row = int(np.flatnonzero(high >= n_nodes)[0])
    raise InputError(
        f"Edge {row_start + row} joins nodes {a[row]} and {b[row]}, but the graph has "
        f"{n_nodes} nodes (ids 0 … {n_nodes - 1}): one per label at fit; at predict one "
        "per row of X, or the training nodes of a model fitted on the graph alone. Give "
        f"every node up to {int(high.max())} a label at fit (the unlabeled marker for one "
        "without) or a row of X, or drop the edges of nodes outside the graph."
    )


def cell_dtype(n_nodes: int, width: int):
    """int32 when the n × width cells of Z can be numbered in it (4 bytes a contribution),
    else int64."""
    return np.int32 if n_nodes * width < 2**31 else np.int64


def _concat_kept(arrays, masks) -> np.ndarray:
    """The entries of each array where its mask holds, one after another, in the first
    array's dtype (``np.compress`` into one buffer: faster than boolean indexing)."""
    sizes = [int(np.count_nonzero(m)) for m in masks]
    out = np.empty(sum(sizes), dtype=arrays[0].dtype)
    start = 0
    for values, mask, size in zip(arrays, masks, sizes):
        np.compress(mask, values, out=out[start : start + size])
        start += size
    return out


def _split(cells, vals, bounds: np.ndarray, width: int) -> tuple:
    """Contributions (their flat cells of the n × width embedding, their values or None
    for a count of 1 each) grouped by node block: one sparse part ``(cells within the
    block, values or None)`` per node block.

    Grouping is NumPy's stable sort of the small block numbers, a radix sort:
    O(contributions); the block of a cell is a division when the node blocks are of one
    size (all but the last), else a binary search of the blocks' first cells."""
    n_blocks = len(bounds) - 1
    if n_blocks == 1:
        return ((cells, vals),)
    firsts = (bounds * width).astype(cells.dtype)
    sizes = np.diff(bounds)
    if (sizes[:-1] == sizes[0]).all() and sizes[-1] <= sizes[0]:
        block = cells // firsts[1]
    else:
        block = np.searchsorted(firsts[1:], cells, side="right")
    small = np.int8 if n_blocks <= 2**7 else np.int16 if n_blocks <= 2**15 else np.int64
    order = np.argsort(block.astype(small, copy=False), kind="stable")
    ends = np.cumsum(np.bincount(block, minlength=n_blocks))
    starts = np.concatenate([[0], ends[:-1]])
    cells = cells[order]
    vals = None if vals is None else vals[order]
    return tuple(
        (
            cells[starts[j] : ends[j]] - firsts[j],
            None if vals is None else vals[starts[j] : ends[j]],
        )
        for j in range(n_blocks)
    )


def embedding_parts(
    ids,
    weights,
    *,
    row_start: int,
    bounds: np.ndarray,
    codes: np.ndarray,
    inverse: np.ndarray,
    scale: np.ndarray | None,
    directed: bool,
    nonnegative: bool = False,
) -> tuple:
    """One edge block's contributions to A·onehot(labels), one sparse part per node block.

    ``bounds`` are the node blocks' first rows and n (length blocks + 1); ``codes`` every
    node's class code (−1 unlabeled); ``inverse`` 1/n_k (it sets the width only: the
    columns are scaled by 1/n_k when the node block is finished); ``scale`` d^−½ per node
    for the Laplacian (None: the adjacency). Each edge (a, b, w) adds w to cell
    (a, code b) when b is labeled and, when a ≠ b, w to cell (b, code a) — column
    K + code a for a directed graph's receiver embedding — when a is labeled. Unweighted
    contributions are counts: a part is then its cells alone (4 bytes a contribution).
    """
    n_nodes = int(bounds[-1])
    a, b, w = edge_endpoints(
        ids, weights, row_start=row_start, n_nodes=n_nodes, nonnegative=nonnegative
    )
    if scale is not None:
        w = scale[a] * scale[b] if w is None else w * scale[a] * scale[b]
    K = inverse.size
    width = 2 * K if directed else K
    code_a, code_b = codes[a], codes[b]  # the codes' small dtype
    out_b = code_b >= 0  # row a gets b's label
    out_a = code_a >= 0  # row b gets a's label, once for a self-loop
    out_a &= a != b
    to_a = a.astype(cell_dtype(n_nodes, width))  # every edge's cell, then the kept ones
    to_a *= width
    to_a += code_b
    to_b = b.astype(to_a.dtype)
    to_b *= width
    to_b += code_a
    if directed:
        to_b += K
    cells = _concat_kept((to_a, to_b), (out_b, out_a))
    vals = None if w is None else _concat_kept((w, w), (out_b, out_a))
    return _split(cells, vals, bounds, width)


def degree_parts(ids, weights, *, row_start: int, bounds: np.ndarray) -> tuple:
    """One edge block's weighted degrees, one sparse part per node block: each edge
    (a, b, w) adds w to d_a and, when a ≠ b, to d_b (the symmetric view, as GraphEmd)."""
    n_nodes = int(bounds[-1])
    a, b, w = edge_endpoints(ids, weights, row_start=row_start, n_nodes=n_nodes, nonnegative=True)
    other = a != b
    keep = (np.ones(a.size, dtype=bool), other)
    cells = _concat_kept((a.astype(cell_dtype(n_nodes, 1)), b), keep)
    vals = None if w is None else _concat_kept((w, w), keep)
    return _split(cells, vals, bounds, 1)


def sum_parts(*parts, size: int, width: int, start: np.ndarray | None = None) -> np.ndarray:
    """Parts of one node block (sparse parts or dense sums), and ``start`` when given,
    summed: (size, width), int64 when every part counts unweighted contributions (exact),
    else float64.

    The sparse parts are counted in one ``bincount`` (O(contributions + size·width)),
    whatever their number."""
    sparse = [p for p in parts if not isinstance(p, np.ndarray)]
    dense = [p for p in parts if isinstance(p, np.ndarray)]
    if start is not None:
        dense.append(start)
    if sparse:
        cells = np.concatenate([c for c, _ in sparse])
        vals = None
        if any(v is not None for _, v in sparse):
            vals = np.concatenate([np.ones(c.size) if v is None else v for c, v in sparse])
        total = np.bincount(cells, weights=vals, minlength=size * width)
        if vals is not None:  # NumPy's bincount of no entries is int64 even with weights
            total = total.astype(np.float64, copy=False)
        total = total.reshape(size, width)
    elif len(dense) > 1:  # a new array: partials are never changed in place
        total = np.add(dense.pop(), dense.pop())
    elif dense:
        total = dense.pop().copy()
    else:
        return np.zeros((size, width), dtype=np.int64)
    for part in dense:
        if part.dtype.kind == "f" and total.dtype.kind != "f":
            total = total.astype(np.float64)
        total += part
    return total


def degree_scale(total, *, size: int, self_loops: bool) -> np.ndarray:
    """d^−½ of a node block's degrees (plus 1 each with the self-loops); 0 where d = 0,
    a node without edges, whose row stays zero."""
    d = sum_parts(total, size=size, width=1)[:, 0].astype(np.float64, copy=False)
    if self_loops:
        d += 1.0
    out = np.zeros(size)
    np.divide(1.0, np.sqrt(d), out=out, where=d > 0)
    return out


def finish_embedding(
    total,
    codes,
    *,
    size: int,
    inverse: np.ndarray,
    scale: np.ndarray | None,
    self_loops: bool,
    normalize: bool,
    directed: bool,
) -> np.ndarray:
    """A node block of Z from its summed parts (A·onehot(labels), the edges' weights per
    class): each column k (and K + k) scaled by 1/n_k — W's entries —, the self-loops of
    diagonal augmentation (node i, labeled k, adds s_i²/n_k to Z[i, k]; s_i = 1 without
    the Laplacian), then row normalisation (each K-column half on its own; zero rows stay
    zero)."""
    K = inverse.size
    width = 2 * K if directed else K
    if not isinstance(total, np.ndarray):  # the sparse part of a single edge block
        total = sum_parts(total, size=size, width=width)
    Z = total * np.tile(inverse, width // K)  # a new float64 array: total is not changed
    if self_loops:
        codes = np.asarray(codes, dtype=np.int64)
        labeled = np.flatnonzero(codes >= 0)
        loop = inverse[codes[labeled]]
        if scale is not None:
            loop = loop * scale[labeled] ** 2
        Z[labeled, codes[labeled]] += loop
    if normalize:
        for half in range(width // K):
            cols = Z[:, half * K : (half + 1) * K]
            norm = np.sqrt(np.einsum("ij,ij->i", cols, cols))
            norm[norm == 0] = 1.0
            cols /= norm[:, None]
    return Z
