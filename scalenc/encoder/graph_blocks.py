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
(:func:`embedding_parts`, a sparse part per node block, O(edges) in size), the parts of a
node block are summed densely (:func:`sum_parts`, O(block × K)), and the node block is
finished on its own (:func:`finish_embedding`: self-loops, normalisation). Degrees go the
same way (:func:`degree_parts`, :func:`degree_scale`).
"""

from __future__ import annotations

import numpy as np

from scalenc.exceptions import InputError

__all__ = [
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


def edge_endpoints(ids, weights, *, row_start: int, n_nodes: int, nonnegative: bool = False):
    """(a, b, w) of one edge block as int64, int64 and float64 arrays (w None when every
    edge weighs 1), checked.

    Raises :class:`~scalenc.exceptions.InputError` naming the first bad edge (its row in
    the edge list): an id that is negative, not a whole number, or not below ``n_nodes``
    (the number of labels); a weight that is NaN or infinite, or negative when
    ``nonnegative`` (the Laplacian's degrees).
    """
    ids = np.asarray(ids)
    if ids.dtype.kind == "f":
        finite = np.isfinite(ids).all(axis=1)
        bad = ~finite
        bad[finite] = (ids[finite] != np.floor(ids[finite])).any(axis=1)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InputError(
                f"Edge {row_start + row} has node ids {ids[row].tolist()}: node ids must be "
                "whole numbers 0 … n−1."
            )
    a = ids[:, 0].astype(np.int64, copy=False)
    b = ids[:, 1].astype(np.int64, copy=False)
    low = np.minimum(a, b)
    if low.size and low.min() < 0:
        row = int(np.flatnonzero(low < 0)[0])
        raise InputError(
            f"Edge {row_start + row} joins nodes {a[row]} and {b[row]}: node ids must be "
            "0 … n−1, never negative."
        )
    high = np.maximum(a, b)
    if high.size and high.max() >= n_nodes:
        row = int(np.flatnonzero(high >= n_nodes)[0])
        raise InputError(
            f"Edge {row_start + row} joins nodes {a[row]} and {b[row]}, but the labels "
            f"cover only {n_nodes} nodes (ids 0 … {n_nodes - 1}). Give one label per node "
            f"— at least {int(high.max()) + 1} here, the unlabeled marker for the nodes "
            "without a label — or drop the edges of nodes outside the graph."
        )
    if weights is None:
        w = None
    else:
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


def _split(rows, cols, vals, bounds, width: int) -> tuple:
    """Contributions (row, col, value) grouped by the node block of their row: one sparse
    part ``(flat index within the block, values)`` per node block, the index int32 when a
    block's cells allow (12 bytes a contribution instead of 16)."""
    cells = int(np.diff(bounds).max()) * width
    index = np.int32 if cells < 2**31 else np.int64
    if len(bounds) == 2:  # one node block: nothing to group
        return ((((rows - bounds[0]) * width + cols).astype(index), vals),)
    block = np.searchsorted(bounds[1:], rows, side="right")
    flat = ((rows - bounds[block]) * width + cols).astype(index)
    # a stable sort of small integers is a radix sort in NumPy: O(contributions)
    small = np.int16 if len(bounds) <= 2**15 else np.int64
    order = np.argsort(block.astype(small), kind="stable")
    flat, vals, block = flat[order], vals[order], block[order]
    edges = np.searchsorted(block, np.arange(len(bounds)))
    return tuple(
        (flat[edges[i] : edges[i + 1]], vals[edges[i] : edges[i + 1]])
        for i in range(len(bounds) - 1)
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
    """One edge block's contributions to Z = A W, one sparse part per node block.

    ``bounds`` are the node blocks' first rows and n (length blocks + 1); ``codes`` every
    node's class code (−1 unlabeled); ``inverse`` 1/n_k; ``scale`` d^−½ per node for the
    Laplacian (None: the adjacency). Each edge (a, b, w) adds w·W[b] to row a and, when
    a ≠ b, w·W[a] to row b (columns K… for a directed graph's receiver embedding).
    """
    n_nodes = int(bounds[-1])
    a, b, w = edge_endpoints(
        ids, weights, row_start=row_start, n_nodes=n_nodes, nonnegative=nonnegative
    )
    if scale is not None:
        w = scale[a] * scale[b] if w is None else w * scale[a] * scale[b]
    K = inverse.size
    width = 2 * K if directed else K
    code_a, code_b = codes[a], codes[b]  # the codes' small dtype until compressed
    out_b = code_b >= 0  # row a gets b's label
    out_a = (code_a >= 0) & (a != b)  # row b gets a's label
    to_a, to_b = code_b[out_b].astype(np.int64), code_a[out_a].astype(np.int64)
    rows = np.concatenate([a[out_b], b[out_a]])
    cols = np.concatenate([to_a, to_b + K] if directed else [to_a, to_b])
    vals = inverse[np.concatenate([to_a, to_b])]
    if w is not None:
        vals *= np.concatenate([w[out_b], w[out_a]])
    return _split(rows, cols, vals, bounds, width)


def degree_parts(ids, weights, *, row_start: int, bounds: np.ndarray) -> tuple:
    """One edge block's weighted degrees, one sparse part per node block: each edge
    (a, b, w) adds w to d_a and, when a ≠ b, to d_b (the symmetric view, as GraphEmd)."""
    a, b, w = edge_endpoints(
        ids, weights, row_start=row_start, n_nodes=int(bounds[-1]), nonnegative=True
    )
    other = a != b
    w = np.ones(a.size) if w is None else w
    rows = np.concatenate([a, b[other]])
    vals = np.concatenate([w, w[other]])
    return _split(rows, np.zeros_like(rows), vals, bounds, 1)


def sum_parts(*parts, size: int, width: int) -> np.ndarray:
    """Parts of one node block (sparse parts or dense sums) summed: (size, width) float64."""
    total = None
    for part in parts:
        if isinstance(part, np.ndarray):
            dense = part
        else:
            index, vals = part
            dense = np.bincount(index, weights=vals, minlength=size * width)
            # (NumPy's bincount of no entries is int64 even with weights)
            dense = dense.astype(np.float64, copy=False).reshape(size, width)
        if total is None:  # never the caller's array: partials are not changed in place
            total = dense.copy() if dense is part else dense
        else:
            total += dense
    return np.zeros((size, width)) if total is None else total


def degree_scale(total, *, size: int, self_loops: bool) -> np.ndarray:
    """d^−½ of a node block's degrees (plus 1 each with the self-loops); 0 where d = 0,
    a node without edges, whose row stays zero."""
    d = sum_parts(total, size=size, width=1)[:, 0]
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
    """A node block of Z from its summed parts: the self-loops of diagonal augmentation
    (node i, labeled k, adds s_i²/n_k to Z[i, k]; s_i = 1 without the Laplacian), then row
    normalisation (each K-column half on its own; zero rows stay zero)."""
    K = inverse.size
    width = 2 * K if directed else K
    Z = sum_parts(total, size=size, width=width)
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
            norm = np.sqrt((cols * cols).sum(axis=1, keepdims=True))
            np.divide(cols, norm, out=cols, where=norm > 0)
    return Z
