"""nRBFN's passes over the data (Hu, Pan & Wu): σ from the k-NN distances to the basis,
the r×r normal equations ΦᵀΦ and ΦᵀY (per fold for cross-validation), and the folds'
held-out errors, for one kernel or several at once. Each returns a Delayed; the
per-block math is in :mod:`scalenc.nrbfn.blocks`.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
from dask.delayed import Delayed

from scalenc.engine.blocksize import BlockWork
from scalenc.engine.reduce import (
    reduce_rows,
)
from scalenc.nrbfn import blocks as _nrbfn_blocks

__all__ = [
    "sigma_pass",
    "gram_pass",
    "cv_error_pass",
    "cv_error_refit_pass",
    "gram_work",
]


def sigma_pass(X: da.Array, codes: da.Array, basis: np.ndarray) -> Delayed:
    """Σ ‖G_i − x_j‖ over the labeled rows and the basis, and the number of those rows
    (:func:`scalenc.nrbfn.blocks.sigma_block`; Algorithm 2, step 5)."""
    work = BlockWork.pairs(basis.shape[0], X.shape[1])
    return reduce_rows(_nrbfn_blocks.sigma_block, X, codes, basis=basis, work=work)


def gram_pass(
    X: da.Array,
    codes: da.Array,
    basis: np.ndarray,
    kernels: tuple,
    n_classes: int,
    *,
    n_folds: int = 1,
    seed: int = 0,
    folds: da.Array | None = None,
    only_fold: int | None = None,
    allowed=None,
) -> Delayed:
    """Per kernel of ``kernels`` ((σ, normalize) pairs; normalize False: W, the kernel not
    normalised) and fold, M = W̃W̃ᵀ (r×r, lower triangle), B = F W̃ᵀ (K×r), shapes
    (n_kernels, n_folds, …), and the rows of each fold
    (:func:`scalenc.nrbfn.blocks.gram_block`), summed in place at each tree node: one
    pass serves a basis's kernels (W and W̃, σ's multiples).

    A row's fold is a hash of its global index, or its entry of ``folds`` (row-aligned
    with X, fold numbers 0..n_folds−1) when the splits were given. With ``only_fold``,
    fold ``only_fold``'s rows alone (the partials hold one fold). ``allowed``: whether the
    memory plan admits a layout of row blocks, when a checkpointed fit on a cluster would
    split them (:func:`gram_work`)."""
    r, p = basis.shape
    one = gram_work(r, p, n_classes, 1 if only_fold is not None else n_folds, allowed)
    return reduce_rows(
        _nrbfn_blocks.gram_block,
        X,
        codes,
        folds,
        basis=basis,
        kernels=tuple(kernels),
        n_classes=n_classes,
        n_folds=n_folds,
        seed=seed,
        only_fold=only_fold,
        combine=_nrbfn_blocks.sum_gram_partials,
        work=BlockWork(len(kernels) * one.per_row, len(kernels) * one.partial_bytes, allowed),
    )


def gram_work(r: int, n_features: int, n_classes: int, n_folds: int = 1, allowed=None):
    """What a row of the Gram pass costs (:class:`~scalenc.engine.blocksize.BlockWork`):
    its kernel against the r basis rows, r² for its rank-one update of M (the unit
    :data:`~scalenc.engine.blocksize.RATE` was measured in) and K r for B; its partial,
    ``n_folds`` r×r and K×r float64 whatever the block's rows."""
    partial = 8 * n_folds * (r * r + n_classes * r + 1)
    work = BlockWork.pairs(r, n_features, extra=float(r) * r + n_classes * r, partial_bytes=partial)
    return BlockWork(work.per_row, work.partial_bytes, allowed)


def cv_error_pass(
    X: da.Array,
    codes: da.Array,
    basis: np.ndarray,
    kernels: tuple,
    weights: np.ndarray,
    seed: int,
    folds: da.Array | None = None,
    rotations: np.ndarray | None = None,
) -> Delayed:
    """Misclassified labeled rows per λ for each of ``kernels`` ((σ, normalize) pairs,
    ``weights[v]`` the v-th's X* per fold and λ, shape (n_kernels, n_folds, n_alphas, K,
    r), in the coordinates of ``rotations[v]`` per fold where given), each row scored by
    its own fold's model (:func:`scalenc.nrbfn.blocks.cv_error_block`; folds as in
    :func:`gram_pass`), in one pass: (n_kernels, n_alphas)."""
    scores = float(np.prod(weights.shape[2:])) * len(kernels)
    if rotations is not None:
        scores += float(weights.shape[-1]) ** 2 * len(kernels)
    return reduce_rows(
        _nrbfn_blocks.cv_error_block,
        X,
        codes,
        folds,
        basis=basis,
        kernels=tuple(kernels),
        weights=weights,
        seed=seed,
        rotations=rotations,
        work=BlockWork.pairs(len(kernels) * basis.shape[0], X.shape[1], extra=scores),
    )


def cv_error_refit_pass(
    X: da.Array,
    codes: da.Array,
    models: tuple,
    n_folds: int,
    seed: int,
    *,
    folds: da.Array | None = None,
    normalize: bool = True,
) -> Delayed:
    """Misclassified held-out rows per λ, each fold scored by its own network
    (``models[f]`` = basis, σ and weights fitted without fold f;
    :func:`scalenc.nrbfn.blocks.cv_error_refit_block`). One pass."""
    r = max(int(basis.shape[0]) for basis, _, _ in models)  # a row meets one fold's
    scores = max(float(np.prod(weights.shape)) for _, _, weights in models)
    return reduce_rows(
        _nrbfn_blocks.cv_error_refit_block,
        X,
        codes,
        folds,
        models=models,
        n_folds=n_folds,
        seed=seed,
        normalize=normalize,
        work=BlockWork.pairs(r, X.shape[1], extra=scores),
    )
