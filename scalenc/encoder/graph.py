"""The graph encoder embedding out of core: one pass over the edges, Z reduced by node blocks.

Z = A W (:mod:`scalenc.encoder.graph_blocks` has the formula and GraphEmd's options) is
built as a lazy Dask array with the node blocks of the labels: every edge block's task
turns its edges into sparse contributions grouped by node block, each node block folds
the contributions of the edge blocks into its running sum, the configured fan-in of edge
blocks a step, and is then finished on its own (self-loops, row normalisation). Neither
the edges nor the n × K embedding is ever in one task: a task holds one edge block, or
one node block's (rows × K) sum and the sparse parts it merges — so memory does not grow
with the number of edges. The class codes of all n nodes (one to four bytes each) travel
to every edge task, as one task's output shared by the edge tasks on a worker, and with the
Laplacian the n degrees' d^−½ (eight bytes each): that is O(n) bytes per worker, never
O(nK), and nothing n-sized reaches the client.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import dask
import dask.array as da
import numpy as np
import pandas as pd

from scalenc.encoder import graph_blocks
from scalenc.engine.reduce import fan_in
from scalenc.exceptions import InputError
from scalenc.io.edges import EdgeList

__all__ = ["GraphOptions", "NodeLookup", "graph_embedding", "embedding_width", "code_dtype"]


@dataclass(frozen=True)
class GraphOptions:
    """GraphEmd's options that change the embedding.

    Attributes
    ----------
    laplacian : bool
        D^−½ A D^−½ instead of A (GraphEmd's ``Laplacian``); one more pass over the edges,
        for the degrees.
    normalize : bool
        Each row of Z scaled to unit norm (GraphEmd's ``Normalize``, its Python port's
        ``Correlation``).
    self_loops : bool
        A + I: a self-loop of weight 1 at every node (GraphEmd's ``DiagA``).
    directed : bool
        Z = [A W | Aᵀ W], the sender and receiver embeddings (GraphEmd's ``Directed``);
        False counts every edge in both directions.
    """

    laplacian: bool = False
    normalize: bool = True
    self_loops: bool = False
    directed: bool = False


def embedding_width(n_classes: int, options: GraphOptions) -> int:
    """Columns of Z: K, or 2K for a directed graph."""
    return 2 * n_classes if options.directed else n_classes


def code_dtype(n_classes: int):
    """The smallest signed integer dtype of the class codes −1 … K−1 (one byte a node for
    fewer than 128 classes)."""
    return np.int8 if n_classes < 2**7 else np.int16 if n_classes < 2**15 else np.int32


def _edge_blocks(edges: EdgeList, index=None):
    """(ids block, weights block or None, first row) per edge block, as Delayed; with
    ``index`` (a Delayed :class:`pandas.Index` of node ids) the ids mapped to positions."""
    ids = edges.ids.to_delayed().ravel()
    weights = [None] * len(ids) if edges.weights is None else edges.weights.to_delayed().ravel()
    starts = [int(s) for s in np.cumsum((0,) + edges.ids.chunks[0][:-1])]
    if index is not None:
        to_positions = dask.delayed(graph_blocks.map_ids, pure=True)
        ids = [to_positions(block, index, row_start=s) for block, s in zip(ids, starts)]
    return list(zip(ids, weights, starts))


class NodeLookup:
    """Node ids to positions by a hash table (:func:`graph_blocks.map_ids`' ``lookup``),
    built once per worker: one task's output, shared by the edge tasks there.

    Integer ids go through a :class:`pandas.Index` (about 8 M edges a second on two
    cores); string ids through Arrow's ``index_in`` (pandas hashes Python strings about
    three times slower), whose set is built per edge block: each block's two columns are
    looked up in one call.
    """

    def __init__(self, node_ids: np.ndarray):
        self.strings = node_ids.dtype.kind == "U"
        self.size = int(node_ids.size)
        if self.strings:
            import pyarrow as pa

            self.table = pa.array(node_ids)
        else:
            self.table = pd.Index(node_ids)

    def __len__(self) -> int:
        return self.size

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        if self.strings:
            if ids.dtype.kind not in "OU":  # numbers are never among string ids
                return np.full(ids.size, -1, dtype=np.int64)
            import pyarrow as pa
            import pyarrow.compute as pc

            try:
                values = pa.array(ids, type=pa.string())
            except (pa.ArrowInvalid, pa.ArrowTypeError):  # not all strings: look up as str
                values = pa.array(ids.astype(str))
            found = pc.index_in(values, value_set=self.table)
            return found.fill_null(-1).to_numpy(zero_copy_only=False)
        if ids.dtype.kind == "O" and ids.size:
            try:  # a column of Python ints read as objects
                ids = ids.astype(self.table.dtype)
            except (TypeError, ValueError):  # strings are never among integer ids
                return np.full(ids.size, -1, dtype=np.int64)
        return self.table.get_indexer(ids)


def _node_lookup(node_ids: np.ndarray) -> NodeLookup:
    return NodeLookup(node_ids)


def _node_sums(parts, bounds, width: int) -> list:
    """Each node block's sum of the edge blocks' parts, as a Delayed (rows × width).

    A fold over groups of edge blocks, as many as the reductions' configured fan-in
    (:func:`scalenc.engine.reduce.fan_in`), not a tree: a node block's sum is
    dense (rows × width × 8 bytes; with 10⁶ nodes and 10 classes all node blocks' sums
    weigh as much as the sparse parts of 2·10⁷ edges), so a tree of fan-in s would hold
    up to (s − 1) × its depth of them per node block, more as the edges grow. Each step
    of the fold adds one group's parts to the running sum (one ``bincount``). The node
    blocks take each step together (a step waits for every node block's previous one):
    an edge block's parts are then merged by every node block soon after it is read,
    where a node block folding all edge blocks before the next would keep every edge
    block's parts. So the pass holds the running sums and the parts of about one group,
    whatever the number of edge blocks.
    """
    fan = fan_in()
    n_blocks = len(bounds) - 1
    steps = [
        dask.delayed(
            partial(_fold_step, size=int(bounds[j + 1] - bounds[j]), width=width), pure=True
        )
        for j in range(n_blocks)
    ]
    sums, done = [None] * n_blocks, None
    for start in range(0, len(parts), fan):
        group = parts[start : start + fan]
        sums = [steps[j](total, *(p[j] for p in group), after=done) for j, total in enumerate(sums)]
        done = dask.delayed(_all_done, pure=True)(*sums)
    return sums


def _fold_step(total, *parts, size: int, width: int, after=None):
    """A node block's running sum (None before the first step) plus one group's parts;
    ``after`` only orders the step after every node block's previous one."""
    return graph_blocks.sum_parts(*parts, size=size, width=width, start=total)


def _all_done(*sums) -> None:
    """Nothing: a step of the fold that waits for this waits for every node block's
    previous step."""
    return None


def _degree_scales(edges, bounds, options, index) -> list:
    """d^−½ per node block (Delayed), from one pass over the edges."""
    fn = dask.delayed(graph_blocks.degree_parts, pure=True, nout=len(bounds) - 1)
    blocks = _edge_blocks(edges, index)
    parts = [fn(i, w, row_start=start, bounds=bounds) for i, w, start in blocks]
    finish = dask.delayed(graph_blocks.degree_scale, pure=True)
    return [
        finish(total, size=int(bounds[j + 1] - bounds[j]), self_loops=options.self_loops)
        for j, total in enumerate(_node_sums(parts, bounds, 1))
    ]


def graph_embedding(
    edges: EdgeList,
    codes: da.Array,
    counts: np.ndarray,
    options: GraphOptions,
    *,
    node_ids: np.ndarray | None = None,
) -> da.Array:
    """Lazy Z = A W of the graph ``edges`` (GraphEmd's embedding), (n, K) or (n, 2K).

    Parameters
    ----------
    edges : EdgeList
        Node ids 0 … n−1 (n = ``codes.shape[0]``), or ids among ``node_ids``; checked
        block by block as they are read.
    codes : dask.array.Array of shape (n,)
        Every node's class code, −1 for an unlabeled node; its chunks are Z's node blocks.
    counts : ndarray of shape (K,)
        Labeled nodes per class, n_k (all positive).
    options : GraphOptions
    node_ids : ndarray of shape (n,), optional
        The id of each node (row of ``codes``) when the edges name nodes by id (default
        ``edges.nodes``): each edge
        block is mapped to positions by a hash index of them (:func:`~scalenc.encoder.
        graph_blocks.map_ids`), built once per worker.

    Returns
    -------
    dask.array.Array
        float64, with ``codes``' row chunks and one column chunk.

    Notes
    -----
    Computing Z reads the edges once (twice with the Laplacian: the degrees first) and
    the codes once per node block plus once for the edge tasks. Memory per task: one edge
    block and its contributions (4 bytes each unweighted, 12 weighted; about two per
    edge), or one node block's running sum (rows × width × 8 bytes) with the parts of
    the edge blocks it adds (as many as the configured fan-in); per worker, the n class
    codes (and with the
    Laplacian n float64 scales) shared by its edge tasks. None of it grows with the number
    of edges. Nothing n-sized is computed on the client.
    """
    K = int(np.asarray(counts).size)
    width = embedding_width(K, options)
    bounds = np.cumsum((0,) + tuple(int(c) for c in codes.chunks[0]))
    small = codes.astype(code_dtype(K))
    code_blocks = small.to_delayed().ravel()
    all_codes = small.rechunk({0: -1}).to_delayed().ravel()[0]
    inverse = graph_blocks.inverse_counts(counts)
    index = None
    node_ids = edges.nodes if node_ids is None else node_ids
    if node_ids is None and edges.ids.dtype.kind not in "iuf":
        raise InputError(
            f"Node ids must be integers 0 … n−1, or ids listed by nodes=; the edge list's id "
            f"columns have dtype {edges.ids.dtype}. Pass nodes=, the id of each node in the "
            "labels' order (as_edge_list(edges, nodes=ids), or --node-column on the command "
            "line)."
        )
    if node_ids is not None:
        if len(node_ids) != codes.shape[0]:
            raise InputError(
                f"{len(node_ids)} node ids for {codes.shape[0]} labels: give one id per label."
            )
        index = dask.delayed(_node_lookup, pure=True)(node_ids)
    scales, all_scales = [None] * len(code_blocks), None
    if options.laplacian:
        scales = _degree_scales(edges, bounds, options, index)
        all_scales = dask.delayed(np.concatenate, pure=True)(scales)
    fn = dask.delayed(graph_blocks.embedding_parts, pure=True, nout=len(bounds) - 1)
    parts = [
        fn(
            ids,
            w,
            row_start=start,
            bounds=bounds,
            codes=all_codes,
            inverse=inverse,
            scale=all_scales,
            directed=options.directed,
            nonnegative=options.laplacian,
        )
        for ids, w, start in _edge_blocks(edges, index)
    ]
    finish = dask.delayed(graph_blocks.finish_embedding, pure=True)
    blocks = []
    for j, total in enumerate(_node_sums(parts, bounds, width)):
        size = int(bounds[j + 1] - bounds[j])
        Z = finish(
            total,
            code_blocks[j],
            size=size,
            inverse=inverse,
            scale=scales[j],
            self_loops=options.self_loops,
            normalize=options.normalize,
            directed=options.directed,
        )
        blocks.append(da.from_delayed(Z, shape=(size, width), dtype=np.float64))
    return da.concatenate(blocks, axis=0)
