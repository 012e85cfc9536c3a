"""The streaming engine: tree reductions and block maps over row-chunked Dask arrays.

A *pass* is one read of X block by block. Each block yields a small partial (NumPy
arrays of size K×p, K×K, r×r, …, never n-sized); partials are merged pairwise in a tree
of fan-in ``split_every`` (never a linear chain, never a gather of n-sized data on the
client). Several statistics wanted from the same read go into one block function, so
they cost one pass together.

* :func:`reduce_rows` — the generic "sum of small per-block results" every pass uses.
* :func:`tree_reduce` — the tree merge of delayed partials.
* :func:`map_rows` — lazy block-wise outputs (predictions, probabilities, embeddings).
* :func:`keep_on_workers` and :class:`RowCache` — an input read by several passes, read once.

The named passes of each method are in :mod:`scalenc.passes`, built on these.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from dask.layers import ArraySliceDep

from . import _blocks
from .cluster import active_client, uses_distributed

__all__ = [
    "SPLIT_EVERY",
    "reduce_rows",
    "tree_reduce",
    "map_rows",
    "keep_on_workers",
    "RowCache",
]

SPLIT_EVERY = 8


def tree_reduce(
    partials: Sequence[Delayed],
    combine: Callable = _blocks.combine_partials,
    *,
    split_every: int = SPLIT_EVERY,
) -> Delayed:
    """Merge delayed partials in a tree of fan-in ``split_every`` (depth log_s(blocks))."""
    if not partials:
        raise ValueError("Nothing to reduce: the input has no row blocks.")
    if split_every < 2:
        raise ValueError(f"split_every must be at least 2; got {split_every}.")
    combine_task = dask.delayed(combine, pure=True)
    partials = list(partials)
    while len(partials) > 1:
        groups = [partials[i : i + split_every] for i in range(0, len(partials), split_every)]
        partials = [combine_task(*group) if len(group) > 1 else group[0] for group in groups]
    return partials[0]


def _check_aligned(X: da.Array, aligned) -> None:
    if X.ndim == 2 and len(X.chunks[1]) != 1:
        raise ValueError(
            f"X must have a single chunk along its columns for a pass; got column chunks "
            f"{X.chunks[1]}. Call X.rechunk({{1: -1}}) (scalenc.data.as_dask_array does this)."
        )
    for arr in aligned:
        if arr is not None and arr.chunks[0] != X.chunks[0]:
            raise ValueError(
                f"Row chunks of an aligned array {arr.chunks[0]} differ from X's "
                f"{X.chunks[0]}; align them with arr.rechunk({{0: X.chunks[0]}})."
            )
        if arr is not None and arr.ndim == 2 and len(arr.chunks[1]) != 1:
            raise ValueError(
                f"An aligned array must have a single chunk along its columns; got "
                f"{arr.chunks[1]}. Call arr.rechunk({{1: -1}})."
            )


def _block_partial(X, rows, *aligned, block_fn, absent, **kwargs):
    """One block's partial, called by :func:`reduce_rows`'s blockwise map."""
    pieces = list(aligned)
    for position in absent:
        pieces.insert(position, None)
    return block_fn(X, *pieces, row_start=rows[0].start, **kwargs)


def _shared(kwargs: dict) -> dict:
    """NumPy arguments as graph keys of their own, so that every task refers to one copy."""
    return {
        key: dask.delayed(value, pure=True) if isinstance(value, np.ndarray) else value
        for key, value in kwargs.items()
    }


def reduce_rows(
    block_fn: Callable,
    X: da.Array,
    *aligned: da.Array | None,
    combine: Callable = _blocks.combine_partials,
    split_every: int = SPLIT_EVERY,
    **kwargs,
) -> Delayed:
    """One pass: ``block_fn(X_b, *aligned_b, row_start=i0, **kwargs)`` per block, merged in a tree.

    Parameters
    ----------
    block_fn : callable
        NumPy function of one row block returning a small partial (arrays, numbers,
        dicts or tuples of them). ``row_start`` is the global index of the block's first
        row, so random choices and folds can depend on global row indices only.
    X : dask array (n, p), one chunk along columns
    *aligned : dask arrays with the same row chunks as X (labels, weights), or None
    combine : callable
        Merges any number of partials; :func:`scalenc._blocks.combine_partials` sums
        arrays and merges class moments exactly.
    **kwargs
        Small NumPy arguments (U, a model). Each is put in the graph once, not per task.

    Returns
    -------
    Delayed
        The merged partial.

    Notes
    -----
    Memory: one block plus ``split_every`` partials per worker thread; nothing n-sized.

    The graph is optimised per pass: each block's reads of X and of the aligned arrays
    (and whatever block-wise steps lead to them, such as label encoding) are fused into
    the block's one task. Two passes computed together therefore each read X; to share
    an expensive input between passes, persist it (:func:`keep_on_workers`) or cache it
    (:class:`RowCache`).
    """
    _check_aligned(X, aligned)
    # Every 2-D input has one column chunk, so all share the index "ij" and the map has
    # no contracted index: a single blockwise layer that the graph optimisation fuses
    # with the block-wise steps before it (the reads of X and y, the label encoding), one
    # task per block instead of one per input and step.
    index = {1: "i", 2: "ij"}
    args = [X, index[X.ndim], ArraySliceDep((X.chunks[0],)), "i"]  # each block's rows
    for arr in aligned:
        if arr is not None:
            args += [arr, index[arr.ndim]]
    out_index = "ij" if any(a.ndim == 2 for a in [X, *aligned] if a is not None) else "i"
    absent = tuple(position for position, arr in enumerate(aligned) if arr is None)
    blocks = da.blockwise(
        _block_partial,
        out_index,
        *args,
        align_arrays=False,  # the 2-D inputs differ in their number of columns
        adjust_chunks={c: 1 for c in out_index},
        dtype=object,
        meta=np.empty((0,) * len(out_index), dtype=object),
        block_fn=block_fn,
        absent=absent,
        **_shared(kwargs),
    )
    partials = list(blocks.to_delayed(optimize_graph=True).ravel())
    return tree_reduce(partials, combine, split_every=split_every)


def keep_on_workers(arr: da.Array) -> da.Array:
    """On a distributed cluster, ``arr`` persisted on the workers (for an array every pass
    of a fit reads, such as the labels: read once instead of once per pass); otherwise
    ``arr`` itself. Nothing comes to the client either way."""
    return active_client().persist(arr) if uses_distributed() else arr


class RowCache:
    """Keep a lazily computed, row-chunked array for a second pass without recomputing it.

    On a distributed cluster the blocks are persisted on the workers (which spill them to
    their disks under memory pressure). With an in-process or multiprocessing scheduler
    the first pass writes each block through to a ``.npy`` file in a temporary directory
    (in Dask's ``temporary-directory``) as it computes it, and later passes read the files
    back memory-mapped. The write happens inside the block's own task, so the first pass
    computes every block once (a separate store of the same lazy array would be
    optimised into a second graph that recomputes it), and blocks of any row chunking
    are kept as they are. Nothing goes through the client. Use as a context manager; the
    temporary files are removed on exit.
    """

    def __init__(self, arr: da.Array):
        self._source = arr
        self._path = None
        self._persisted = None
        self.distributed = uses_distributed()

    def __enter__(self):
        if self.distributed:
            self._persisted = active_client().persist(self._source)
        else:
            root = dask.config.get("temporary-directory", None)
            self._path = tempfile.mkdtemp(prefix="scalenc-cache-", dir=root)
        return self

    def first_pass_input(self) -> da.Array:
        """The array the first pass should read: computing a block also caches it."""
        if self.distributed:
            return self._persisted
        return self._source.map_blocks(
            _write_through,
            directory=self._path,
            dtype=self._source.dtype,
            meta=self._source._meta,
        )

    def cached(self) -> da.Array:
        """The cached array, for passes after the first."""
        if self.distributed:
            return self._persisted
        src = self._source
        name = f"scalenc-cached-{tokenize(src, self._path)}"
        graph = {
            (name, *index): (_read_back, _block_file(self._path, index))
            for index in np.ndindex(*src.numblocks)
        }
        return da.Array(
            HighLevelGraph.from_collections(name, graph), name, src.chunks, meta=src._meta
        )

    def __exit__(self, *exc):
        self._persisted = None
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)


def _block_file(directory: str, index) -> str:
    return f"{directory}/block-{'-'.join(map(str, index))}.npy"


def _write_through(block, *, directory, block_info=None):
    np.save(_block_file(directory, block_info[0]["chunk-location"]), block, allow_pickle=False)
    return block


def _read_back(path: str) -> np.ndarray:
    return np.load(path, mmap_mode="r", allow_pickle=False)


def map_rows(func: Callable, X: da.Array, n_out: int | None, dtype, **kwargs) -> da.Array:
    """Lazy block-wise output: ``func(X_b, **kwargs)`` gives (b, n_out), or (b,) if n_out is None.

    Nothing is computed; the result streams to Zarr/Parquet or is computed by the caller.
    Array arguments (U, a basis of r×p, …) enter the graph once, not once per block.
    """
    dtype = np.dtype(dtype)
    kwargs = _shared(kwargs)
    if n_out is None:
        return X.map_blocks(func, drop_axis=1, dtype=dtype, meta=np.empty((0,), dtype), **kwargs)
    return X.map_blocks(
        func,
        chunks=(X.chunks[0], (n_out,)),
        dtype=dtype,
        meta=np.empty((0, n_out), dtype),
        **kwargs,
    )
