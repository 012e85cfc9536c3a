"""The encoder's passes over the data (Shen): the embedding's class moments and the
kernels' cross-entropies, the cached-embedding passes, and Section 2's full embedding.
Each returns a Delayed unless its docstring says otherwise; the per-block math is in
:mod:`scalenc.encoder.blocks` and :mod:`scalenc.encoder.kernels`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed

from scalenc.encoder import blocks
from scalenc.encoder.kernels import Kernel, embed, embedding_buffer
from scalenc.engine.reduce import (
    map_rows,
    reduce_rows,
    tree_reduce,
)
from scalenc.math.linalg import LDAModel, stacked_class_scores
from scalenc.math.moments import (
    class_moments,
    combine_partials,
    merge_moment_tuples,
    merge_partials,
)
from scalenc.math.softmax import labeled_log_likelihood
from scalenc.math.tiles import add_tuples, over_row_tiles
from scalenc.math.xp import namespace, to_host

__all__ = [
    "embedding_moments_pass",
    "cross_entropy_pass",
    "embed_all",
    "stacked_moments_pass",
    "stacked_cross_entropy_pass",
    "full_embedding",
    "moments_pass",
    "graph_moments_pass",
    "log_likelihood_pass",
]


def _embedding_buffer(x, width: int):
    """A NumPy tile's embedding (rows × ``width`` float64, column-major) in a per-thread
    buffer: on a Dask worker a fresh one is mapped and page-faulted in per tile
    (:mod:`scalenc.math.buffers`); None for a device tile."""
    return embedding_buffer(namespace(x), "encoder.embedding", x.shape[0], width)


def _embedding_block(X, codes, *, row_start, kernels, U, n_classes, scores=None):
    # a row tile at a time: the embedding of a whole block is (M·K·8)/(p·4) times the block
    M = len(kernels)

    def tile(x, c):
        Z = embed(kernels, x, U, out=_embedding_buffer(x, M * n_classes))
        moments = blocks.stacked_class_moments(Z, c, M, n_classes)
        if scores is None:
            return moments
        return {"moments": moments, "loss": blocks.stacked_loss_gradients(Z, c, *scores, M)}

    merge = merge_moment_tuples if scores is None else merge_partials

    rows = blocks.tile_rows(namespace(X), M * n_classes)
    return over_row_tiles(tile, merge, X, to_host(codes), rows)


def embedding_moments_pass(
    X: da.Array,
    codes: da.Array,
    kernels: Sequence[Kernel],
    U: np.ndarray,
    *,
    models: Sequence[LDAModel] | None = None,
    whiten: Sequence[np.ndarray] | None = None,
) -> Delayed:
    """For every kernel at once: class moments of Z_m = δ_m(X, U) over labeled rows.

    One pass over X; returns a tuple of moment dicts (``n``, ``mean`` K×K, ``scatter`` K×K).
    With ``models`` (an LDA per kernel, fitted elsewhere), the same pass also sums
    log T_m(i, y_i) under them, as :func:`cross_entropy_pass`, and the gradient of c_m
    in their class scores (:func:`scalenc.encoder.blocks.stacked_loss_gradients`, with
    ``whiten``): it returns ``{"moments": …, "loss": …}``.
    """
    scores = None
    if models is not None:
        scores = (*stacked_class_scores(models, U.shape[0]), tuple(whiten))
    return reduce_rows(
        _embedding_block,
        X,
        codes,
        kernels=tuple(kernels),
        U=U,
        n_classes=U.shape[0],
        scores=scores,
    )


def _cross_entropy_block(X, codes, *, row_start, kernels, U, coef, intercept):
    def tile(x, c):
        Z = embed(kernels, x, U, out=_embedding_buffer(x, coef.shape[0]))
        return blocks.stacked_log_likelihood(Z, c, coef, intercept, len(kernels))

    rows = blocks.tile_rows(namespace(X), coef.shape[0])
    return over_row_tiles(tile, add_tuples, X, to_host(codes), rows)


def cross_entropy_pass(
    X: da.Array,
    codes: da.Array,
    kernels: Sequence[Kernel],
    U: np.ndarray,
    models: Sequence[LDAModel],
) -> Delayed:
    """Σ_i log T_m(i, y_i) over labeled rows, for every kernel m (one pass).

    Minus the result is Shen's cross-entropy c_m (Section 3, Step 4).
    """
    coef, intercept = stacked_class_scores(models, U.shape[0])
    return reduce_rows(
        _cross_entropy_block,
        X,
        codes,
        kernels=tuple(kernels),
        U=U,
        coef=coef,
        intercept=intercept,
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
    return blocks.stacked_class_moments(Z, codes, n_kernels, n_classes)


def stacked_moments_pass(Z: da.Array, codes: da.Array, n_kernels: int, n_classes: int) -> Delayed:
    """Class moments of each kernel's K columns of a stacked embedding (one pass over Z)."""
    return reduce_rows(
        _stacked_moments_block,
        Z,
        codes,
        n_kernels=n_kernels,
        n_classes=n_classes,
    )


def _stacked_cross_entropy_block(Z, codes, *, row_start, coef, intercept, n_kernels):
    return blocks.stacked_log_likelihood(Z, codes, coef, intercept, n_kernels)


def stacked_cross_entropy_pass(
    Z: da.Array,
    codes: da.Array,
    models: Sequence[LDAModel],
    n_classes: int,
) -> Delayed:
    """Σ log T_m(i, y_i) per kernel from a stacked embedding (one pass over Z, not X)."""
    coef, intercept = stacked_class_scores(models, n_classes)
    return reduce_rows(
        _stacked_cross_entropy_block,
        Z,
        codes,
        coef=coef,
        intercept=intercept,
        n_kernels=len(models),
    )


# --- the encoder's Section 2: the full kernel matrix, block × block ------------------------


def full_embedding(
    X: da.Array,
    X_fit: da.Array,
    codes_fit: da.Array,
    kernel: Callable,
    counts: np.ndarray,
) -> da.Array:
    """Lazy Z = A W (Shen's Section 2): row block b of X gets Σ_c δ(X_b, X_fit,c) W_c.

    Each row block of X is compared with every block of the training data, the partials
    summed in a tree: reading Z once reads X_fit once per row block of X (O(n²p) work,
    O(chunk²) memory per task). Returns an (n, K) float64 Dask array.
    """
    K = counts.size
    counts = np.asarray(counts, dtype=np.float64)
    col_blocks = list(zip(X_fit.to_delayed().ravel(), codes_fit.to_delayed().ravel()))
    fn = dask.delayed(blocks.full_embedding_block, pure=True)
    rows = []
    for xb, size in zip(X.to_delayed().ravel(), X.chunks[0]):
        parts = [fn(xb, xc, cc, kernel=kernel, n_classes=K, counts=counts) for xc, cc in col_blocks]
        total = tree_reduce(parts, combine_partials)
        rows.append(da.from_delayed(total, shape=(size, K), dtype=np.float64))
    return da.concatenate(rows, axis=0)


def _plain_moments_block(Z, codes, *, row_start, n_classes):
    return class_moments(Z, codes, n_classes, scatter=True)


def moments_pass(Z: da.Array, codes: da.Array, n_classes: int) -> Delayed:
    """Class counts, means and pooled scatter of Z over labeled rows (no NaN check)."""
    return reduce_rows(_plain_moments_block, Z, codes, n_classes=n_classes)


def _graph_moments_block(Z, codes, *, row_start, n_classes):
    xp = namespace(Z)
    zero_rows = int(xp.sum(xp.astype(~xp.any(Z != 0, axis=1), xp.int64)))
    return class_moments(Z, codes, n_classes, scatter=True), np.array(zero_rows)


def graph_moments_pass(Z: da.Array, codes: da.Array, n_classes: int) -> Delayed:
    """:func:`moments_pass` of a graph fit's candidate embedding, with its rows of zeros
    (nodes with no labeled neighbour, in the graph's part): ``(moments, zero_rows)``."""
    return reduce_rows(_graph_moments_block, Z, codes, n_classes=n_classes)


def _log_likelihood_block(Z, codes, *, row_start, model):
    return np.array(labeled_log_likelihood(blocks.log_proba(model, Z), to_host(codes))[0])


def log_likelihood_pass(Z: da.Array, codes: da.Array, model: LDAModel) -> Delayed:
    """Σ log T(i, y_i) of one LDA model over the labeled rows of Z."""
    return reduce_rows(_log_likelihood_block, Z, codes, model=model)
