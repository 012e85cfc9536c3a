"""A graph's edges in: an edge list as row-chunked Dask arrays of node ids and weights.

:func:`as_edge_list` takes every form the encoder's graph input accepts (GraphEmd's s × 2
and s × 3 edge lists as NumPy, Dask or Zarr arrays; a SciPy sparse adjacency; a pandas or
Dask DataFrame; a Parquet dataset, ``.npy`` file or Zarr array by path or URL) and gives an
:class:`EdgeList`: the ids (s, 2) and the weights (s,) with the same row chunks. Nothing
is read but metadata (Parquet footers, a Zarr array's shape); the ids are checked block by
block when a pass reads them (:func:`scalenc.encoder.graph_blocks.edge_endpoints`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import dask.array as da
import numpy as np
import pandas as pd

from scalenc.exceptions import InputError, InputTypeError
from scalenc.io import readers
from scalenc.io.tables import is_dask_frame

__all__ = ["EdgeList", "as_edge_list", "node_ids", "EDGE_CHUNK"]

#: Edges per row block for in-memory input: 2**22 edges are 64 MB of int64 ids.
EDGE_CHUNK = 2**22


@dataclass(frozen=True)
class EdgeList:
    """A graph's edges as Dask arrays with the same row chunks.

    Attributes
    ----------
    ids : dask.array.Array of shape (s, 2)
        Source and target node ids (an integer dtype, or a float dtype whose values the
        pass checks to be whole numbers), one column chunk.
    weights : dask.array.Array of shape (s,) or None
        float64 edge weights; None when every edge weighs 1.
    nodes : ndarray of shape (n,) or None
        The id of each node, in the order of the labels (and of X's rows), when the edges
        name nodes by id (:func:`node_ids`: int64 or str, unique); None when the ids are
        the positions 0 … n−1.
    """

    ids: da.Array
    weights: da.Array | None = None
    nodes: np.ndarray | None = None

    @property
    def n_edges(self) -> int:
        return int(self.ids.shape[0])


def as_edge_list(
    edges,
    *,
    source=0,
    target=1,
    weight=None,
    chunk_edges: int | None = None,
    storage_options: dict | None = None,
    nodes=None,
) -> EdgeList:
    """A graph's edges as an :class:`EdgeList` (lazily: nothing but metadata is read).

    Parameters
    ----------
    edges : array-like, Dask array, Zarr array, SciPy sparse matrix, DataFrame, path or EdgeList
        * an array of shape (s, 2) or (s, 3) (NumPy, Dask, Zarr, or a ``.npy`` file / Zarr
          array by path or URL): columns ``source`` and ``target`` hold node ids, and a
          third column, when there is one, the weights (GraphEmd's s × 3 edge list);
        * a SciPy sparse adjacency (n × n): each stored entry A[i, j] is the edge
          (i, j, A[i, j]), as GraphEmd turns an adjacency into an edge list — so a
          symmetric matrix lists every undirected edge twice (pass ``scipy.sparse.triu(A)``
          to list it once);
        * a pandas or Dask DataFrame, or a Parquet file or dataset by path or URL: the
          columns ``source``, ``target`` and (only when given) ``weight``, by name or by
          position.
    source, target : int or str, default=0, 1
        The columns holding the two endpoints.
    weight : int, str or None, default=None
        The weight column. None: an array's third column when it has three, else every
        edge weighs 1.
    chunk_edges : int, optional
        Edges per row block for in-memory input (default :data:`EDGE_CHUNK`), or to
        rechunk a Dask or Zarr array. Parquet keeps its row groups.
    storage_options : dict, optional
        Passed to fsspec for URLs.
    nodes : array-like of shape (n,), optional
        The id of each node in the order of the labels (and of X's rows): strings, or
        integers of any range, unique. The edges then name their endpoints by these ids
        (each edge block is mapped to positions as a pass reads it; an id not among
        ``nodes`` is an error naming the edge). Without it, the ids are the positions
        0 … n−1. The ids are read into memory (n of them, as the model keeps them).

    Returns
    -------
    EdgeList

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc.io.edges import as_edge_list
    >>> edges = as_edge_list(np.array([[0, 1], [1, 2], [2, 0]]), chunk_edges=2)
    >>> edges.ids.chunks, edges.weights
    (((2, 1), (2,)), None)
    >>> as_edge_list(np.array([[0, 1, 0.5], [1, 2, 2.0]])).weights.compute()
    array([0.5, 2. ])

    Nodes named by id:

    >>> named = as_edge_list(np.array([["ann", "bo"], ["bo", "cy"]]), nodes=["cy", "bo", "ann"])
    >>> named.nodes
    array(['cy', 'bo', 'ann'], dtype='<U3')
    """
    named = None if nodes is None else node_ids(nodes)
    if isinstance(edges, EdgeList):
        out = edges
    else:
        if isinstance(edges, (str, os.PathLike)):
            edges = _open(os.fspath(edges), storage_options)
        if isinstance(edges, _ParquetEdges):
            out = _from_parquet(edges, source, target, weight)
        elif _is_sparse(edges):
            out = _from_sparse(edges, chunk_edges)
        elif is_dask_frame(edges) or _is_pandas_frame(edges):
            out = _from_frame(edges, source, target, weight, chunk_edges)
        else:
            if readers.is_zarr_array(edges):
                edges = readers.from_zarr(edges)
            out = _from_array(edges, source, target, weight, chunk_edges)
    return out if named is None else replace(out, nodes=named)


def node_ids(nodes) -> np.ndarray:
    """Node ids as :class:`EdgeList` keeps them: a 1-D array in memory, int64 for
    integers and str for strings, checked unique.

    Examples
    --------
    >>> node_ids([10, 3, 7])
    array([10,  3,  7])
    >>> node_ids(["a", "b", "a"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    scalenc.exceptions.InputError: Node ids must be unique, one per node; 'a' is given twice ...
    """
    if isinstance(nodes, da.Array) or is_dask_frame(nodes):
        nodes = nodes.compute()
    values = np.asarray(nodes)
    if values.ndim != 1:
        raise InputError(f"nodes= must be 1-D, one id per node; got shape {values.shape}.")
    if values.dtype.kind == "O" and all(isinstance(v, str) for v in values.tolist()):
        values = values.astype(str)
    if values.dtype.kind in "iu":
        if values.dtype.kind == "u" and values.size and values.max() >= 2**63:
            raise InputError("Node ids must fit in int64; the largest given does not.")
        values = values.astype(np.int64, copy=False)
    elif values.dtype.kind not in "U":
        raise InputError(
            f"Node ids must be integers or strings; got dtype {values.dtype}. Convert them "
            "(e.g. to str) first."
        )
    index = pd.Index(values)
    if not index.is_unique:
        first = index[index.duplicated()][0]
        first = first.item() if isinstance(first, np.generic) else first
        where = np.flatnonzero(values == first)[:2].tolist()
        raise InputError(
            f"Node ids must be unique, one per node; {first!r} is given twice "
            f"(at {where[0]} and {where[1]})."
        )
    return values


def _open(url: str, storage_options):
    fs, path = readers.filesystem(url, storage_options)
    if not fs.exists(path):
        raise InputError(f"No edge list at {url!r}: nothing exists at that path.")
    kind = readers.kind_of(fs, path)
    if kind == "parquet":
        return _ParquetEdges(fs, path, url)
    if kind == "npy":
        return readers.read_npy(fs, path, rows_per_block=EDGE_CHUNK)
    if kind == "zarr":
        return readers.open_zarr(url, storage_options)
    raise InputError(
        f"An edge list must be a Parquet dataset, a .npy file or a Zarr array; {url!r} "
        f"reads as {kind}."
    )


@dataclass(frozen=True)
class _ParquetEdges:
    """A Parquet file or dataset of edges, not read yet."""

    fs: object
    path: str
    url: str


def _from_parquet(table: _ParquetEdges, source, target, weight) -> EdgeList:
    """The edge columns, each row group one edge block read by pyarrow."""

    def pick(names):
        groups = [[_column(source, names, "source"), _column(target, names, "target")]]
        if weight is not None:
            groups.append([_column(weight, names, "weight")])
        return groups

    ids, *weights = readers.read_parquet_columns(table.fs, table.path, pick, source=table.url)
    ids = _check_ids(ids)
    return EdgeList(ids, _check_weights(weights[0][:, 0], ids) if weights else None)


def _is_sparse(value) -> bool:
    if not type(value).__module__.startswith("scipy.sparse"):
        return False
    import scipy.sparse as sp

    return sp.issparse(value)


def _is_pandas_frame(value) -> bool:
    return type(value).__module__.startswith("pandas") and hasattr(value, "columns")


def _rows(total: int, chunk_edges: int | None) -> int:
    return max(1, min(chunk_edges or EDGE_CHUNK, max(total, 1)))


def _from_sparse(A, chunk_edges) -> EdgeList:
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise InputError(
            f"A sparse adjacency must be square (n × n); got shape {A.shape}. Pass an edge "
            "list of shape (s, 2) or (s, 3) instead."
        )
    coo = A.tocoo()
    ids = np.column_stack([coo.row, coo.col]).astype(np.int64, copy=False)
    rows = _rows(ids.shape[0], chunk_edges)
    weights = np.asarray(coo.data, dtype=np.float64)
    return EdgeList(da.from_array(ids, chunks=(rows, 2)), da.from_array(weights, chunks=(rows,)))


def _column(name, columns, role: str):
    """The column named ``name``, or at position ``name``."""
    if isinstance(name, (int, np.integer)) and not isinstance(name, bool):
        if not 0 <= name < len(columns):
            raise InputError(
                f"The {role} column is position {name}, but the edge table has "
                f"{len(columns)} columns {list(columns)}."
            )
        return columns[int(name)]
    if name not in columns:
        raise InputError(
            f"The edge table has no {role} column {name!r}; its columns are {list(columns)}. "
            f"Pass {role}= a column name or position."
        )
    return name


def _from_frame(frame, source, target, weight, chunk_edges) -> EdgeList:
    columns = list(frame.columns)
    picked = [_column(source, columns, "source"), _column(target, columns, "target")]
    lazy = is_dask_frame(frame)
    rows = None if lazy else _rows(len(frame), chunk_edges)

    def array(part):  # a Dask frame's partitions, or in-memory columns in blocks of rows
        return part.to_dask_array(lengths=True) if lazy else da.from_array(part.to_numpy(), rows)

    ids = _check_ids(array(frame[picked]))
    if weight is None:
        return EdgeList(ids)
    return EdgeList(ids, _check_weights(array(frame[_column(weight, columns, "weight")]), ids))


def _from_array(edges, source, target, weight, chunk_edges) -> EdgeList:
    if not isinstance(edges, da.Array):
        try:
            edges = np.asarray(edges)
        except (TypeError, ValueError) as exc:
            raise InputTypeError(f"Cannot read the edges as an array: {exc}") from None
        edges = da.from_array(edges, chunks=(_rows(edges.shape[0], chunk_edges), -1))
    elif chunk_edges is not None:
        edges = edges.rechunk({0: chunk_edges})
    if edges.ndim != 2 or edges.shape[1] not in (2, 3):
        hint = ""
        if edges.ndim == 2 and edges.shape[0] in (2, 3) and edges.shape[1] > 3:
            hint = " It looks transposed: pass edges.T."
        raise InputError(
            "An edge list array must have shape (s, 2) (source, target) or (s, 3) "
            f"(source, target, weight); got shape {edges.shape}.{hint}"
        )
    edges = edges.rechunk({1: -1})
    ncols = edges.shape[1]
    columns = list(range(ncols))
    picked = [_column(source, columns, "source"), _column(target, columns, "target")]
    if weight is None and ncols == 3:
        weight = 2
    ids = _check_ids(edges[:, picked])
    w = None if weight is None else edges[:, _column(weight, columns, "weight")]
    return EdgeList(ids, None if w is None else _check_weights(w, ids))


def _check_ids(ids: da.Array) -> da.Array:
    if ids.dtype.kind not in "iufUSO":
        raise InputError(
            f"Node ids must be integers or strings; the edge list's id columns have dtype "
            f"{ids.dtype}."
        )
    if any(np.isnan(c) for c in ids.chunks[0]):
        ids = ids.compute_chunk_sizes()
    if ids.shape[0] == 0:
        raise InputError("The graph has no edges (an edge list of 0 rows); give at least one.")
    return ids.rechunk({1: -1})


def _check_weights(weights: da.Array, ids: da.Array) -> da.Array:
    if weights.dtype.kind not in "iuf":
        raise InputError(f"Edge weights must be numbers; got dtype {weights.dtype}.")
    return weights.astype(np.float64).rechunk({0: ids.chunks[0]})
