"""The streaming engine: tree reductions and block maps over row-chunked Dask arrays.

A *pass* is one read of X block by block. Each block yields a small partial (NumPy
arrays of size K×p, K×K, r×r, …, never n-sized); partials are merged pairwise in a tree
of fan-in ``split_every`` (never a linear chain, never a gather of n-sized data on the
client). Several statistics wanted from the same read go into one block function, so
they cost one pass together.

The fan-in comes from one configuration, read where a reduction is built, as Dask reads
its own ``split_every``: the Dask configuration key ``scalenc.split-every`` (default
:data:`SPLIT_EVERY`; :func:`fan_in`), e.g. ``dask.config.set({"scalenc.split-every": 4})``
around a fit. An estimator's ``split_every`` parameter, where it has one, is that
setting for its own fits (:func:`split_every_set`).

* :func:`reduce_rows` — the generic "sum of small per-block results" every pass uses.
* :func:`tree_reduce` — the tree merge of delayed partials.
* :func:`map_rows` — lazy block-wise outputs (predictions, probabilities, embeddings).
* :func:`keep_on_workers` and :class:`RowCache` — an input read by several passes, read once.

The named passes of each method are in :mod:`scalenc.engine.passes`, built on these.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence

import dask
import dask.array as da
import numpy as np
from dask._task_spec import DataNode
from dask.base import tokenize
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from dask.layers import ArrayBlockIdDep, ArraySliceDep

from scalenc.engine import checkpoint
from scalenc.engine.blocksize import BlockWork, churn_sized
from scalenc.engine.cluster import (
    active_client,
    in_process,
    no_workers_message,
    no_workers_timeout,
    uses_distributed,
)
from scalenc.engine.reads import dask_collections, note_computation, note_reader
from scalenc.engine.resend import SCATTERED, remember_scattered
from scalenc.exceptions import ClusterUnavailableError, InputError
from scalenc.math.moments import combine_partials
from scalenc.math.xp import host_tree, is_device_array, to_host

__all__ = [
    "from_numpy_rows",
    "SPLIT_EVERY",
    "SPLIT_EVERY_KEY",
    "fan_in",
    "split_every_set",
    "SCATTER_BYTES",
    "reduce_rows",
    "tree_reduce",
    "map_rows",
    "keep_on_workers",
    "RowCache",
]


#: The reductions' fan-in when the configuration does not set one.
SPLIT_EVERY = 8
#: The Dask configuration key of the reductions' fan-in.
SPLIT_EVERY_KEY = "scalenc.split-every"

#: On a distributed cluster, a block function's argument larger than this many bytes (a
#: basis, CCDR's subsample solutions, the folds' networks) is sent to the workers once with
#: ``Client.scatter`` instead of travelling inside every task graph (see :func:`_shared`).
SCATTER_BYTES = 1_000_000

#: A :class:`RowCache` of at most this many bytes keeps its blocks in this process's
#: memory (local schedulers): writing, reading back and removing files cost more (iris's
#: three-kernel embedding, 10.8 kB: about 3 ms of its 15 ms fit).
MEMORY_CACHE_BYTES = 2**20


def fan_in(split_every: int | None = None) -> int:
    """The fan-in of a reduction built now: ``split_every`` if given, else the Dask
    configuration's ``scalenc.split-every`` (:data:`SPLIT_EVERY_KEY`), else
    :data:`SPLIT_EVERY`.

    Examples
    --------
    >>> import dask
    >>> from scalenc.engine.reduce import fan_in
    >>> fan_in(), fan_in(3)
    (8, 3)
    >>> with dask.config.set({"scalenc.split-every": 4}):
    ...     fan_in()
    4
    """
    if split_every is None:
        split_every = dask.config.get(SPLIT_EVERY_KEY, None)
        split_every = SPLIT_EVERY if split_every is None else split_every
    if isinstance(split_every, bool) or int(split_every) != split_every or split_every < 2:
        raise InputError(f"split_every must be at least 2, an integer; got {split_every!r}.")
    return int(split_every)


def split_every_set(split_every: int | None):
    """A context in which reductions are built with fan-in ``split_every`` (the Dask
    configuration's ``scalenc.split-every``); None leaves the configuration as it is."""
    if split_every is None:
        return contextlib.nullcontext()
    return dask.config.set({SPLIT_EVERY_KEY: split_every})  # checked where it is read


def tree_reduce(
    partials: Sequence[Delayed],
    combine: Callable = combine_partials,
    *,
    split_every: int | None = None,
) -> Delayed:
    """Merge delayed partials in a tree of fan-in ``split_every`` (depth log_s(blocks));
    None: the configured fan-in (:func:`fan_in`)."""
    if not partials:
        raise InputError("Nothing to reduce: the input has no row blocks.")
    split_every = fan_in(split_every)
    combine_task = dask.delayed(combine, pure=True)
    partials = list(partials)
    while len(partials) > 1:
        groups = [partials[i : i + split_every] for i in range(0, len(partials), split_every)]
        partials = [combine_task(*group) if len(group) > 1 else group[0] for group in groups]
    return partials[0]


def _check_aligned(X: da.Array, aligned) -> None:
    if X.ndim == 2 and len(X.chunks[1]) != 1:
        raise InputError(
            f"X must have a single chunk along its columns for a pass; got column chunks "
            f"{X.chunks[1]}. Call X.rechunk({{1: -1}}) (scalenc.io.inputs.as_dask_array does this)."
        )
    for arr in aligned:
        if arr is not None and arr.chunks[0] != X.chunks[0]:
            raise InputError(
                f"Row chunks of an aligned array {arr.chunks[0]} differ from X's "
                f"{X.chunks[0]}; align them with arr.rechunk({{0: X.chunks[0]}})."
            )
        if arr is not None and arr.ndim == 2 and len(arr.chunks[1]) != 1:
            raise InputError(
                f"An aligned array must have a single chunk along its columns; got "
                f"{arr.chunks[1]}. Call arr.rechunk({{1: -1}})."
            )


def _block_partial(X, rows, *aligned, block_fn, absent, on_device=False, **kwargs):
    """One block's partial, called by :func:`reduce_rows`'s blockwise map. The partial of a
    device block (CuPy's) leaves the device here, so that merges and solves see NumPy —
    unless ``on_device``: then the tree merges it on the device and only the root leaves."""
    pieces = list(aligned)
    for position in absent:
        pieces.insert(position, None)
    partial = block_fn(X, *pieces, row_start=rows[0].start, **kwargs)
    return partial if on_device or isinstance(X, np.ndarray) else host_tree(partial)


def _shared(kwargs: dict) -> dict:
    """Block-function arguments as graph keys of their own, so every task refers to one copy.

    In-process (threads, sync, processes): each NumPy array becomes
    ``dask.delayed(array, pure=True)``, embedded once in the graph; other values pass as
    they are.

    On a distributed cluster, a value larger than :data:`SCATTER_BYTES` (and the largest
    others while together they are larger) — a NumPy array,
    a value the caller wrapped as ``dask.delayed(value)`` (CCDR's solutions), or a
    tuple/list/dict/dataclass of arrays (the folds' networks) — is scattered to every
    worker once (``Client.scatter(..., broadcast=True)``) and the graph refers to its
    Future: the graph sent to the scheduler stays small (no "Sending large graph"
    warning), and the same value (same token) asked for again while a graph still holds
    its Future is not sent again. The Future lives inside the graph
    that uses it, so a lazy output (``transform`` on a Dask array, streamed later by
    :func:`scalenc.write_output`) still finds the value when it is computed, and the
    workers drop it once the last graph referring to it is gone. Every worker receives a
    copy, but Dask's active memory manager (on by default, policy ``ReduceReplicas``)
    drops all but one within seconds, and Dask cannot compute scattered data again. So
    the client keeps the value while its Future lives (:func:`remember_scattered`): when
    the worker holding the last copy is lost, :func:`scalenc.engine.cluster.compute` sends it
    again under the same key and computes the graph again
    (:func:`scalenc.engine.resend.rescatter_lost`).
    """
    client = active_client() if uses_distributed() else None
    literals = {} if client is None else {key: _literal(value) for key, value in kwargs.items()}
    sizes = {k: checkpoint.nbytes_of(v) for k, v in literals.items() if v is not _NOT_A_VALUE}
    # each value over the threshold, then the largest others while together they are over
    # it (nRBFN's basis and its folds' weights, each under a megabyte, made a graph of 1.1 MB)
    rest, scattered = sum(sizes.values()), set()
    for key in sorted(sizes, key=sizes.get, reverse=True):
        if sizes[key] > SCATTER_BYTES or rest > SCATTER_BYTES:
            scattered.add(key)
            rest -= sizes[key]
    return {key: _share(value, client, key in scattered) for key, value in kwargs.items()}


_NOT_A_VALUE = object()


def _share(value, client, scatter: bool):
    """``value`` as the graph refers to it: with ``scatter``, a Future of it on every
    worker of ``client``'s cluster (:func:`scatter_values`; a plain value, see
    :func:`_literal`), else embedded once."""
    if not scatter:
        return dask.delayed(value, pure=True) if isinstance(value, np.ndarray) else value
    literal = _literal(value)
    key = (client.id, value.key if isinstance(value, Delayed) else _value_key(literal))
    future = SCATTERED.get(key)
    if future is None or future.status != "finished":
        # a fresh key each time: a value released with its last graph may be
        # forgotten by the scheduler after a new scatter under its old key arrives
        (future,) = scatter_values(client, [literal], broadcast=True)
        SCATTERED[key] = future
    return future


def scatter_values(client, values: list, *, broadcast: bool) -> list:
    """``values`` sent to the cluster with ``Client.scatter`` (fresh keys), as Futures,
    each remembered on the client (:func:`remember_scattered`) so that it can be sent
    again if lost with its worker; waits for workers as a computation does
    (:func:`scalenc.engine.cluster.no_workers_timeout`)."""
    wait = no_workers_timeout()
    try:
        futures = client.scatter(
            values, hash=False, broadcast=broadcast, **({} if wait is None else {"timeout": wait})
        )
    except TimeoutError as exc:
        if "No valid workers" not in str(exc):
            raise
        waited = wait if wait is not None else getattr(client, "_timeout", 0.0)
        raise ClusterUnavailableError(no_workers_message(client, waited)) from exc
    for future, value in zip(futures, values):
        remember_scattered(future, value, broadcast)
    return futures


def from_numpy_rows(A: np.ndarray, rows) -> da.Array:
    """An in-memory array as a Dask array of row blocks (``rows``: rows per block, or the
    row chunks), its other axes whole.

    With a distributed client, an array over :data:`SCATTER_BYTES` has
    its blocks scattered to the workers once (``Client.scatter``) and the graph refers to
    them; ``da.from_array`` would embed the data in every graph that reads it, sent to
    the scheduler at each pass ("Sending large graph"). Elsewhere, ``da.from_array``
    (no copy).

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc.engine.reduce import from_numpy_rows
    >>> from_numpy_rows(np.zeros((10, 3)), 4).chunks
    ((4, 4, 2), (3,))
    """
    device = is_device_array(A)  # CuPy's blocks stay CuPy's
    A = A if device else np.asarray(A)
    n = A.shape[0]
    if isinstance(rows, (int, np.integer)):
        step = max(int(rows), 1)
        rows = tuple(min(step, n - s) for s in range(0, n, step)) or (0,)
    chunks = (tuple(rows), *((size,) for size in A.shape[1:]))
    if not (uses_distributed() and A.nbytes > SCATTER_BYTES):
        return da.from_array(A, chunks=chunks, asarray=not device)
    starts = np.concatenate([[0], np.cumsum(rows)[:-1]])
    parts = [A[s : s + c] for s, c in zip(starts, rows)]
    futures = scatter_values(active_client(), parts, broadcast=False)
    blocks = [
        da.from_delayed(
            dask.delayed(future), shape=(c, *A.shape[1:]), meta=da.utils.meta_from_array(A)
        )
        for future, c in zip(futures, rows)
    ]
    return da.concatenate(blocks, axis=0)


def _literal(value):
    """The plain value behind ``value``: itself, or what ``dask.delayed(x)`` wraps; a
    sentinel for anything that has still to be computed (a task, a Dask array)."""
    if isinstance(value, Delayed):
        graph = dict(value.__dask_graph__())
        node = graph.get(value.key)
        if len(graph) == 1 and isinstance(node, DataNode):
            return node.value
        return _NOT_A_VALUE
    return _NOT_A_VALUE if any(True for _ in dask_collections([value])) else value


def _value_key(value) -> str:
    """The key ``dask.delayed(value, pure=True)`` (and ``Client.scatter(hash=True)``) gives."""
    return f"{type(value).__name__}-{tokenize(value)}"


def reduce_rows(
    block_fn: Callable,
    X: da.Array,
    *aligned: da.Array | None,
    combine: Callable = combine_partials,
    split_every: int | None = None,
    work: BlockWork | None = None,
    **kwargs,
) -> Delayed:
    """One pass: ``block_fn(X_b, *aligned_b, row_start=i0, **kwargs)`` per block, merged in a tree.

    Parameters
    ----------
    block_fn : callable
        Function of one row block returning a small partial (arrays, numbers, dicts or
        tuples of them). The block is an array of X's library: NumPy, or a device's
        (CuPy's), whose namespace the function takes from it
        (:func:`scalenc.math.xp.namespace`); the partial leaves a device as NumPy
        (unless ``block_fn.device_partials``). ``row_start`` is the global index of the
        block's first row, so random choices and folds can depend on global row indices
        only.
    X : dask array (n, p), one chunk along columns
    *aligned : dask arrays with the same row chunks as X (labels, weights), or None
    combine : callable
        Merges any number of partials; :func:`scalenc.math.moments.combine_partials` sums
        arrays and merges class moments exactly.
    split_every : int, optional
        The tree's fan-in; None (the default): the configured one (:func:`fan_in`).
    **kwargs
        Arguments shared by every block (U, a model). Each is put in the graph once, not
        per task; on a distributed cluster a large one is scattered to the workers once
        instead (:data:`SCATTER_BYTES`).

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
    split_every = fan_in(split_every)
    X, aligned = churn_sized(X, aligned, work)
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
    run = checkpoint.active_run()
    plan = None
    if run is not None:
        plan = _checkpoint_plan(run, block_fn, X, aligned, combine, split_every, kwargs)
        if plan is not None and plan.result is not None:
            # the pass finished before: its result is read back and X is not read
            run.reused["passes"] += 1
            run.reused["blocks"] += X.numblocks[0]
            result = dask.delayed(_load_result, pure=False)(plan.fs, plan.result)
            note_reader(X, result, read_back=True)
            return result
    # with a checkpoint, each block's partial comes with its seconds and is saved when
    # worth it (timed_block, told the pass's directory and the block's number)
    head = [_block_partial]
    # a large partial (nRBFN's r×r Gram) whose combine merges device arrays stays on the
    # device through the tree; a checkpoint saves NumPy partials, so not in a checkpoint
    on_device = plan is None and getattr(block_fn, "device_partials", False)
    if plan is not None:
        save = (plan.fs, plan.directory, plan.rule)
        block_id = ArrayBlockIdDep((X.chunks[0],))
        head = [checkpoint.timed_block, _block_partial, None, save, None, block_id, "i"]
    blocks = da.blockwise(
        *head[:1],
        out_index,
        *head[1:],
        *args,
        align_arrays=False,  # the 2-D inputs differ in their number of columns
        adjust_chunks={c: 1 for c in out_index},
        dtype=object,
        meta=np.empty((0,) * len(out_index), dtype=object),
        block_fn=block_fn,
        absent=absent,
        on_device=on_device,
        **_shared(kwargs),
    )
    # one row block in this process runs as it is (engine.cluster.compute): nothing to fuse
    fuse = X.numblocks[0] > 1 or not in_process()
    partials = list(blocks.to_delayed(optimize_graph=fuse).ravel())
    if plan is None:
        result = tree_reduce(partials, combine, split_every=split_every)
        if on_device:
            result = dask.delayed(host_tree, pure=True)(result)
        note_reader(X, result)
        return result
    root, computed = _checkpointed_tree(partials, combine, split_every, plan, run)
    run.computed["passes"] += 1
    run.computed["blocks"] += computed
    run.reused["blocks"] += len(partials) - computed
    result = dask.delayed(checkpoint.finish_pass, pure=False)(
        root, fs=plan.fs, path=plan.result_path
    )
    note_reader(X, result, read_back=not computed)
    return result


def _checkpoint_plan(run, block_fn, X, aligned, combine, split_every, kwargs):
    """The pass's checkpoint plan, or None where the pass cannot be fingerprinted (it is
    then computed as without a checkpoint)."""
    shapes = [None if a is None else (a.shape, a.chunks, str(a.dtype)) for a in (X, *aligned)]
    token = checkpoint.fingerprint(block_fn, combine, split_every, shapes, kwargs)
    if token is None:
        run.unkeyed += 1
        return None
    return run.plan_pass(token, X.numblocks[0], split_every)


def _load_result(fs, path):
    return checkpoint.load_node(fs, path).partial


def _checkpointed_tree(partials, combine, split_every, plan, run):
    """:func:`tree_reduce`'s tree, each node read back where the checkpoint holds it and
    merged by :func:`scalenc.engine.checkpoint.combine_node` (which saves it when worth
    it) elsewhere. Node (level, j) covers the nodes [j·s, (j+1)·s) of the level below: the
    same tree, merged in the same order, as without a checkpoint. Returns the root and
    the number of blocks still to compute."""
    sizes = [len(partials)]
    while sizes[-1] > 1:
        sizes.append(-(-sizes[-1] // split_every))

    def build(level: int, index: int):
        if (level, index) in plan.nodes:
            run.reused["groups"] += 1
            load = dask.delayed(checkpoint.load_node, pure=False)
            return load(plan.fs, plan.node_path(level, index)), 0
        if level == 0:
            return partials[index], 1
        below = range(index * split_every, min((index + 1) * split_every, sizes[level - 1]))
        children = [build(level - 1, j) for j in below]
        if len(children) == 1:  # a lone node passes up unchanged, as in tree_reduce
            return children[0]
        node = dask.delayed(checkpoint.combine_node, pure=False)(
            *[child for child, _ in children],
            combine=combine,
            fs=plan.fs,
            path=plan.node_path(level, index),
            rule=plan.rule,
        )
        return node, sum(count for _, count in children)

    return build(len(sizes) - 1, 0)


def keep_on_workers(arr: da.Array, *, local_bytes: float = 0.0) -> da.Array:
    """``arr`` read once for every pass of a fit (the labels), instead of once per pass.

    On a distributed cluster, persisted on the workers. On a local scheduler (threads,
    sync), persisted in this process's memory when its bytes are at most ``local_bytes``
    and its values are numbers (an object array's bytes are its pointers, not its
    strings); otherwise ``arr`` itself, read again by each pass (as it is when its blocks
    are in memory already). Nothing comes to the client on a cluster.
    """
    if uses_distributed():
        return active_client().persist(arr)
    graph = arr.__dask_graph__()
    if len(graph) == arr.npartitions and all(
        isinstance(node, (np.ndarray, DataNode)) for node in graph.values()
    ):
        return arr  # its blocks are in memory already (a NumPy array's, or persisted)
    if arr.dtype.kind in "biuf" and 0 < arr.nbytes <= local_bytes:
        return arr.persist()
    return arr


class RowCache:
    """Keep a lazily computed, row-chunked array for a second pass without recomputing it.

    On a distributed cluster the blocks are persisted on the workers (which spill them to
    their disks under memory pressure). With an in-process or multiprocessing scheduler
    the first pass keeps each block as it computes it: an array of at most
    :data:`MEMORY_CACHE_BYTES` in this process's memory (Dask's threads or its
    synchronous scheduler), a larger one (or one of worker processes) written through to a
    ``.npy`` file in a temporary directory (in Dask's ``temporary-directory``) that later
    passes read back memory-mapped. A block the first pass did not compute, because a
    resumed fit read its partial from a checkpoint, is computed from the source. The
    keeping happens inside the block's own task, so the first pass computes every block
    once (a separate store of the same lazy array would be optimised into a second graph
    that recomputes it), and blocks of any row chunking are kept as they are. Nothing goes
    through the client. Use as a context manager; the blocks and temporary files are
    dropped on exit.
    """

    def __init__(self, arr: da.Array):
        self._source = arr
        self._path = None
        self._blocks = None
        self._persisted = None
        self.distributed = uses_distributed()

    def __enter__(self):
        if self.distributed:
            note_computation([self._source])  # the persist reads it now
            self._persisted = active_client().persist(self._source)
        elif in_process() and self._source.nbytes <= MEMORY_CACHE_BYTES:
            self._blocks = _Blocks()
        else:
            root = dask.config.get("temporary-directory", None)
            self._path = tempfile.mkdtemp(prefix="scalenc-cache-", dir=root)
        return self

    def first_pass_input(self) -> da.Array:
        """The array the first pass should read: computing a block also caches it."""
        if self.distributed:
            return self._persisted
        return self._source.map_blocks(
            _keep_block,
            store=self._blocks if self._blocks is not None else self._path,
            dtype=self._source.dtype,
            meta=self._source._meta,
        )

    def cached(self) -> da.Array:
        """The cached array, for passes after the first."""
        if self.distributed:
            return self._persisted
        src = self._source
        name = f"scalenc-cached-{tokenize(src, self._path or id(self._blocks))}"
        graph, missing = {}, False
        for index in np.ndindex(*src.numblocks):
            if self._blocks is not None and index in self._blocks.by_index:
                graph[(name, *index)] = self._blocks.by_index[index]
            elif self._blocks is None and os.path.exists(path := _block_file(self._path, index)):
                graph[(name, *index)] = (_read_back, path)
            else:  # not computed by the first pass (a resumed fit read its partial back)
                graph[(name, *index)] = (src.name, *index)
                missing = True
        dependencies = [src] if missing else []
        return da.Array(
            HighLevelGraph.from_collections(name, graph, dependencies=dependencies),
            name,
            src.chunks,
            meta=src._meta,
        )

    def __exit__(self, *exc):
        self._persisted = self._blocks = None
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)


class _Blocks:
    """A row cache's blocks in this process's memory, by block index."""

    def __init__(self):
        self.by_index = {}

    def __dask_tokenize__(self):
        return ("scalenc-row-cache", id(self))


def _block_file(directory: str, index) -> str:
    return f"{directory}/block-{'-'.join(map(str, index))}.npy"


def _keep_block(block, *, store, block_info=None):
    index = block_info[0]["chunk-location"]
    if isinstance(store, _Blocks):
        store.by_index[index] = block
    else:
        np.save(_block_file(store, index), to_host(block), allow_pickle=False)
    return block


def _read_back(path: str) -> np.ndarray:
    return np.load(path, mmap_mode="r", allow_pickle=False)


def map_rows(func: Callable, X: da.Array, n_out: int | None, dtype, **kwargs) -> da.Array:
    """Lazy block-wise output: ``func(X_b, **kwargs)`` gives (b, n_out), or (b,) if n_out is None.

    Nothing is computed; the result streams to Zarr/Parquet or is computed by the caller.
    Array arguments (U, a basis of r×p, …) enter the graph once, not once per block; on a
    distributed cluster a large one is scattered to the workers once and the lazy result
    holds it (:data:`SCATTER_BYTES`).
    """
    dtype = np.dtype(dtype)
    shape = {"drop_axis": 1} if n_out is None else {"chunks": (X.chunks[0], (n_out,))}
    meta = _output_meta(X, (0,) if n_out is None else (0, n_out), dtype)
    return X.map_blocks(func, dtype=dtype, meta=meta, **shape, **_shared(kwargs))


def _output_meta(X: da.Array, shape: tuple, dtype: np.dtype):
    """An output's meta: numbers stay in X's array library (CuPy blocks give CuPy
    outputs), other labels (strings, objects) are NumPy."""
    if dtype.kind in "biuf" and not isinstance(X._meta, np.ndarray):
        return da.utils.meta_from_array(X._meta, ndim=len(shape), dtype=dtype)
    return np.empty(shape, dtype)
