"""The streaming layer: tree reductions and block maps over row-chunked Dask arrays.

A *pass* is one read of X block by block. Each block yields a small partial (NumPy
arrays of size K×p, K×K, r×r, …, never n-sized); partials are merged pairwise in a tree
of fan-in ``split_every`` (never a linear chain, never a gather of n-sized data on the
client). Several statistics wanted from the same read go into one block function, so
they cost one pass together.

* :func:`reduce_rows` — the generic "sum of small per-block results" every method uses.
* :func:`class_moments_pass` — class counts and means (U = S/n), optionally the pooled
  within-class scatter (p×p) and squared norms; also counts non-finite entries of X.
* :func:`labeled_moments_pass` — the same keyed by label values, with the class list from
  the same pass (no separate scan of y first).
* :func:`embedding_moments_pass` — class moments of Z_m = δ_m(X, U) for several kernels
  at once (K×K each).
* :func:`cross_entropy_pass` — Σ log T_m(i, y_i) over labeled rows for several LDA models.
* :func:`map_rows` — lazy block-wise outputs (predictions, probabilities, embeddings).

The block functions come from :mod:`scalenc._blocks`, :mod:`scalenc.kernels` and
:mod:`scalenc.linalg`; this module only wires them into Dask graphs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from dask.layers import ArraySliceDep

from . import _blocks
from .kernels import Kernel, embed
from .linalg import LDAModel, class_scores

__all__ = [
    "SPLIT_EVERY",
    "reduce_rows",
    "tree_reduce",
    "class_moments_pass",
    "labeled_moments_pass",
    "embedding_moments_pass",
    "cross_entropy_pass",
    "map_rows",
    "embed_all",
    "stacked_moments_pass",
    "stacked_cross_entropy_pass",
    "RowCache",
    "keep_on_workers",
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


# --- the encoder's passes -------------------------------------------------------------


def _moments_block(X, codes, *, row_start, n_classes, scatter, sqnorm):
    out = None
    if not scatter or X.dtype == np.float32:  # these paths see every row's values anyway
        out = _blocks.class_moments(
            X, codes, n_classes, scatter=scatter, sqnorm=sqnorm, check_finite=True
        )
    nonfinite = 0 if out is not None and out.pop("all_finite") else _blocks.count_nonfinite(X)
    if nonfinite:  # the fit will refuse X; keep the statistics finite until then
        X = np.where(np.isfinite(X), X, 0.0)
        out = None
    if out is None:
        out = _blocks.class_moments(X, codes, n_classes, scatter=scatter, sqnorm=sqnorm)
    out["nonfinite"] = nonfinite
    out["rows"] = X.shape[0]
    return out


def class_moments_pass(
    X: da.Array,
    codes: da.Array,
    n_classes: int,
    *,
    scatter: bool = False,
    sqnorm: bool = False,
    split_every: int = SPLIT_EVERY,
) -> Delayed:
    """Class counts ``n`` (K,), means ``mean`` (K×p) and optionally the pooled scatter (p×p).

    One pass over X. Also returns ``nonfinite`` (NaN/inf count) and ``rows``.
    Memory per task: one block plus O(Kp) (O(p²) with ``scatter``).
    """
    return reduce_rows(
        _moments_block,
        X,
        codes,
        n_classes=n_classes,
        scatter=scatter,
        sqnorm=sqnorm,
        split_every=split_every,
    )


def _labeled_moments_block(X, y, *, row_start, scatter, sqnorm):
    """Class moments of one block keyed by the block's own label values."""
    from .data import _encode_block, _labeled_unique

    classes = _labeled_unique(y)
    codes = _encode_block(y, classes)
    moments = _moments_block(
        X, codes, row_start=row_start, n_classes=classes.size, scatter=scatter, sqnorm=sqnorm
    )
    return {"classes": classes, "moments": moments}


def _align_classes(part: dict, classes: np.ndarray) -> dict:
    """A block's class moments spread onto the positions of ``classes`` (a superset)."""
    from .data import _encode_block

    moments = part["moments"]
    if np.array_equal(part["classes"], classes):
        return moments
    where = _encode_block(part["classes"], classes)
    out = dict(moments)
    for key in ("n", "mean", "sqnorm"):
        if key in moments:
            full = np.zeros((classes.size, *moments[key].shape[1:]))
            full[where] = moments[key]
            out[key] = full
    return out


def _merge_labeled(*parts: dict) -> dict:
    """Merge label-keyed partials: the union of their classes, moments aligned to it."""
    from .data import _union

    classes = _union(*(part["classes"] for part in parts))
    moments = _blocks.combine_partials(*(_align_classes(part, classes) for part in parts))
    return {"classes": classes, "moments": moments}


def labeled_moments_pass(
    X: da.Array,
    y: da.Array,
    *,
    scatter: bool = False,
    sqnorm: bool = False,
    split_every: int = SPLIT_EVERY,
) -> Delayed:
    """The class list and :func:`class_moments_pass`'s statistics in one pass over (X, y).

    Each block keys its moments by its own label values (−1, None and NaN are unlabeled);
    the tree merge aligns them on the union of the classes. Returns ``{"classes": sorted
    distinct labels, "moments": {...}}`` with the moments in the order of ``classes`` —
    what :func:`scalenc.data.find_classes` followed by :func:`class_moments_pass` give,
    without a separate read of y and a round trip to the client between the two.
    """
    return reduce_rows(
        _labeled_moments_block,
        X,
        y,
        combine=_merge_labeled,
        scatter=scatter,
        sqnorm=sqnorm,
        split_every=split_every,
    )


def _embedding_block(X, codes, *, row_start, kernels, U, n_classes):
    return _stacked_moments_block(
        embed(kernels, X, U),
        codes,
        row_start=row_start,
        n_kernels=len(kernels),
        n_classes=n_classes,
    )


def embedding_moments_pass(
    X: da.Array,
    codes: da.Array,
    kernels: Sequence[Kernel],
    U: np.ndarray,
    *,
    split_every: int = SPLIT_EVERY,
) -> Delayed:
    """For every kernel at once: class moments of Z_m = δ_m(X, U) over labeled rows.

    One pass over X; returns a tuple of moment dicts (``n``, ``mean`` K×K, ``scatter`` K×K).
    """
    return reduce_rows(
        _embedding_block,
        X,
        codes,
        kernels=tuple(kernels),
        U=U,
        n_classes=U.shape[0],
        split_every=split_every,
    )


def _cross_entropy_block(X, codes, *, row_start, kernels, U, models):
    return _stacked_cross_entropy_block(
        embed(kernels, X, U), codes, row_start=row_start, models=models, n_classes=U.shape[0]
    )


def cross_entropy_pass(
    X: da.Array,
    codes: da.Array,
    kernels: Sequence[Kernel],
    U: np.ndarray,
    models: Sequence[LDAModel],
    *,
    split_every: int = SPLIT_EVERY,
) -> Delayed:
    """Σ_i log T_m(i, y_i) over labeled rows, for every kernel m (one pass).

    Minus the result is Shen's cross-entropy c_m (Section 3, Step 4).
    """
    return reduce_rows(
        _cross_entropy_block,
        X,
        codes,
        kernels=tuple(kernels),
        U=U,
        models=tuple(models),
        split_every=split_every,
    )


# --- the embedding cache: Z computed once for passes 2 and 3 ------------------------------


def _embed_all_block(X, *, kernels, U):
    return embed(kernels, X, U)


def embed_all(X: da.Array, kernels: Sequence[Kernel], U: np.ndarray) -> da.Array:
    """Lazy Z = [δ_1(X, U) | … | δ_M(X, U)], shape (n, M·K), float64."""
    return map_rows(
        _embed_all_block, X, len(kernels) * U.shape[0], np.float64, kernels=tuple(kernels), U=U
    )


def _stacked_moments_block(Z, codes, *, row_start, n_kernels, n_classes):
    """Each kernel's class moments from one pass over its K columns: the moments of all
    M·K columns at once, split into the kernels' diagonal blocks."""
    both = _blocks.class_moments(Z, codes, n_classes, scatter=True)
    return tuple(
        {
            "n": both["n"],
            "mean": both["mean"][:, m * n_classes : (m + 1) * n_classes],
            "scatter": both["scatter"][
                m * n_classes : (m + 1) * n_classes, m * n_classes : (m + 1) * n_classes
            ],
        }
        for m in range(n_kernels)
    )


def stacked_moments_pass(
    Z: da.Array, codes: da.Array, n_kernels: int, n_classes: int, *, split_every: int = SPLIT_EVERY
) -> Delayed:
    """Class moments of each kernel's K columns of a stacked embedding (one pass over Z)."""
    return reduce_rows(
        _stacked_moments_block,
        Z,
        codes,
        n_kernels=n_kernels,
        n_classes=n_classes,
        split_every=split_every,
    )


def _stacked_decision(models: Sequence[LDAModel], n_classes: int):
    """One block-diagonal (M·K × M·K) matrix and offsets giving every kernel's K class
    scores from the stacked embedding (two classes: scores 0 and the LDA's one score)."""
    K, M = n_classes, len(models)
    W, b = np.zeros((M * K, M * K)), np.zeros(M * K)
    for m, model in enumerate(models):
        coef, intercept = class_scores(model)
        W[m * K : (m + 1) * K, m * K : (m + 1) * K] = coef.T
        b[m * K : (m + 1) * K] = intercept
    return W, b


def _stacked_cross_entropy_block(Z, codes, *, row_start, models, n_classes):
    """Σ log T_m(i, y_i) over the block's labeled rows, for every kernel m at once: one
    product for all kernels' scores, then a log-softmax over each kernel's K classes.

    The scores are laid out class by row ((M, K, b), rows contiguous), so that the max
    and the sum over a kernel's K classes are element-wise operations on long vectors
    rather than reductions over short rows.
    """
    K, M = n_classes, len(models)
    labeled = codes >= 0
    Z = np.asarray(Z, dtype=np.float64)
    if not labeled.all():
        Z, codes = Z[labeled], codes[labeled]
    W, b = _stacked_decision(models, K)
    scores = np.matmul(W.T, Z.T).reshape(M, K, -1)  # (M, K, b)
    scores += b.reshape(M, K, 1)
    scores -= scores.max(axis=1, keepdims=True)
    picked = scores[:, codes, np.arange(codes.size)]  # (M, b): each row's own class
    np.exp(scores, out=scores)
    log_likelihood = (picked - np.log(scores.sum(axis=1))).sum(axis=1)
    return tuple(np.array(v) for v in log_likelihood)


def stacked_cross_entropy_pass(
    Z: da.Array,
    codes: da.Array,
    models: Sequence[LDAModel],
    n_classes: int,
    *,
    split_every: int = SPLIT_EVERY,
) -> Delayed:
    """Σ log T_m(i, y_i) per kernel from a stacked embedding (one pass over Z, not X)."""
    return reduce_rows(
        _stacked_cross_entropy_block,
        Z,
        codes,
        models=tuple(models),
        n_classes=n_classes,
        split_every=split_every,
    )


def keep_on_workers(arr: da.Array) -> da.Array:
    """On a distributed cluster, ``arr`` persisted on the workers (for an array every pass
    of a fit reads, such as the labels: read once instead of once per pass); otherwise
    ``arr`` itself. Nothing comes to the client either way."""
    from .cluster import active_client, uses_distributed

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
        from .cluster import uses_distributed

        self._source = arr
        self._path = None
        self._persisted = None
        self.distributed = uses_distributed()

    def __enter__(self):
        if self.distributed:
            from .cluster import active_client

            self._persisted = active_client().persist(self._source)
        else:
            import tempfile

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
        import shutil

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
