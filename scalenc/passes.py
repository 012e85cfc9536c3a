"""Every pass over the data, by what it accumulates: the estimators only call these and solve.

A *pass* is one read of X (or of y, or of a cached embedding) block by block, each block
reduced to a small partial and the partials merged in a tree (:mod:`scalenc._engine`).
The per-block NumPy math comes from the blocks modules (:mod:`scalenc._blocks`,
:mod:`scalenc.kernels`, :mod:`scalenc.neighbors`, :mod:`scalenc._sampling`,
:mod:`scalenc._nrbfn_blocks`, :mod:`scalenc._ccdr_blocks`); this module only wires it into
Dask graphs. Each function returns a Delayed (computed by the caller, which counts the
pass) unless its docstring says otherwise.

Labels and evaluation
    :func:`classes_pass` / :func:`find_classes`, :func:`label_counts_pass`,
    :func:`confusion_pass`.
Encoder (Shen)
    :func:`labeled_moments_pass` (pass 1 with the class list), :func:`class_moments_pass`,
    :func:`embedding_moments_pass`, :func:`cross_entropy_pass`, the cached-embedding
    passes :func:`embed_all`, :func:`stacked_moments_pass`,
    :func:`stacked_cross_entropy_pass`, and Section 2's :func:`full_embedding` with
    :func:`moments_pass` and :func:`log_likelihood_pass` over it.
nRBFN (Hu, Pan & Wu)
    :func:`stratified_sample_pass`, :func:`kneighbors_pass`, :func:`kneighbors_all_rows`,
    :func:`gather_rows`, :func:`sigma_pass`, :func:`gram_pass`, :func:`cv_error_pass`,
    :func:`cv_error_refit_pass`.
CCDR (Raich, Costa, Damelin & Hero)
    :func:`stratum_counts_pass`, :func:`select_rows_pass`, :func:`gather_rows_pass`,
    :func:`embedding_stats_pass`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed

from . import _blocks, _ccdr_blocks, _nrbfn_blocks, _sampling, labels
from ._engine import SPLIT_EVERY, RowCache, keep_on_workers, map_rows, reduce_rows, tree_reduce
from .cluster import compute
from .kernels import Kernel, embed
from .linalg import LDAModel, lda_log_proba, stacked_class_scores
from .neighbors import kneighbors_block, kneighbors_pair, labeled_rows, merge_neighbors

__all__ = [
    # the engine, re-exported
    "SPLIT_EVERY",
    "reduce_rows",
    "tree_reduce",
    "map_rows",
    "keep_on_workers",
    "RowCache",
    # labels and evaluation
    "classes_pass",
    "find_classes",
    "label_counts_pass",
    "confusion_pass",
    # encoder
    "class_moments_pass",
    "labeled_moments_pass",
    "embedding_moments_pass",
    "cross_entropy_pass",
    "embed_all",
    "stacked_moments_pass",
    "stacked_cross_entropy_pass",
    "full_embedding",
    "moments_pass",
    "log_likelihood_pass",
    # nRBFN
    "stratified_sample_pass",
    "kneighbors_pass",
    "kneighbors_all_rows",
    "gather_rows",
    "sigma_pass",
    "gram_pass",
    "cv_error_pass",
    "cv_error_refit_pass",
    # CCDR
    "stratum_counts_pass",
    "select_rows_pass",
    "gather_rows_pass",
    "embedding_stats_pass",
]


# --- the encoder's passes -------------------------------------------------------------


def _moments_block(X, codes, *, row_start, n_classes, scatter, sqnorm):
    return _blocks.checked_class_moments(X, codes, n_classes, scatter=scatter, sqnorm=sqnorm)


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


def _labeled_moments_block(X, y, *, row_start, scatter, sqnorm, marker=labels.UNLABELED):
    """Class moments of one block keyed by the block's own label values."""
    classes = labels.labeled_unique(y, marker)
    codes = labels.encode(y, classes, marker=marker)
    moments = _moments_block(
        X, codes, row_start=row_start, n_classes=classes.size, scatter=scatter, sqnorm=sqnorm
    )
    return {"classes": classes, "moments": moments}


def _align_classes(part: dict, classes: np.ndarray) -> dict:
    """A block's class moments spread onto the positions of ``classes`` (a superset)."""
    moments = part["moments"]
    if np.array_equal(part["classes"], classes):
        return moments
    where = labels.encode(part["classes"], classes)
    out = dict(moments)
    for key in ("n", "mean", "sqnorm"):
        if key in moments:
            full = np.zeros((classes.size, *moments[key].shape[1:]))
            full[where] = moments[key]
            out[key] = full
    return out


def _merge_labeled(*parts: dict) -> dict:
    """Merge label-keyed partials: the union of their classes, moments aligned to it."""
    classes = labels.union(*(part["classes"] for part in parts))
    moments = _blocks.combine_partials(*(_align_classes(part, classes) for part in parts))
    return {"classes": classes, "moments": moments}


def labeled_moments_pass(
    X: da.Array,
    y: da.Array,
    *,
    scatter: bool = False,
    sqnorm: bool = False,
    marker=labels.UNLABELED,
    split_every: int = SPLIT_EVERY,
) -> Delayed:
    """The class list and :func:`class_moments_pass`'s statistics in one pass over (X, y).

    Each block keys its moments by its own label values (the unlabeled ``marker``, −1 by
    default, and None/NaN are unlabeled: :func:`scalenc.labels.unlabeled_mask`);
    the tree merge aligns them on the union of the classes. Returns ``{"classes": sorted
    distinct labels, "moments": {...}}`` with the moments in the order of ``classes`` —
    what :func:`find_classes` followed by :func:`class_moments_pass` give,
    without a separate read of y and a round trip to the client between the two.
    """
    return reduce_rows(
        _labeled_moments_block,
        X,
        y,
        combine=_merge_labeled,
        scatter=scatter,
        sqnorm=sqnorm,
        marker=marker,
        split_every=split_every,
    )


def _classes_block(y, *, row_start, marker=labels.UNLABELED):
    return labels.labeled_unique(y, marker)


def classes_pass(
    y: da.Array, *, marker=labels.UNLABELED, split_every: int = SPLIT_EVERY
) -> Delayed:
    """The sorted distinct labeled values of y (the unlabeled ``marker`` and None/NaN left
    out): one pass over y (not X), merged in a tree."""
    return reduce_rows(
        _classes_block, y, combine=labels.union, marker=marker, split_every=split_every
    )


def find_classes(
    y: da.Array, *, marker=labels.UNLABELED, split_every: int = SPLIT_EVERY
) -> np.ndarray:
    """:func:`classes_pass` computed, and checked to be class labels (not continuous)."""
    (classes,) = compute(classes_pass(y, marker=marker, split_every=split_every))
    labels.check_class_values(classes)
    return classes


def _confusion_block(pred, y, *, row_start, classes, marker=labels.UNLABELED):
    return _blocks.confusion_counts(pred, y, classes, marker=marker)


def confusion_pass(
    pred: da.Array,
    y: da.Array,
    classes: np.ndarray,
    *,
    marker=labels.UNLABELED,
    split_every: int = SPLIT_EVERY,
) -> Delayed:
    """Confusion counts of lazy predictions against y (:func:`scalenc._blocks.confusion_counts`),
    summed in a tree: one pass over whatever ``pred`` reads (X, for a model's predictions)."""
    return reduce_rows(
        _confusion_block, pred, y, classes=classes, marker=marker, split_every=split_every
    )


def _embedding_block(X, codes, *, row_start, kernels, U, n_classes):
    # a row tile at a time: the embedding of a whole block is (M·K·8)/(p·4) times the block
    def tile(x, c):
        return _blocks.stacked_class_moments(embed(kernels, x, U), c, len(kernels), n_classes)

    rows = _blocks.stacked_tile_rows(len(kernels) * n_classes)
    return _blocks.over_row_tiles(tile, _blocks.merge_moment_tuples, X, np.asarray(codes), rows)


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


def _cross_entropy_block(X, codes, *, row_start, kernels, U, coef, intercept):
    def tile(x, c):
        Z = embed(kernels, x, U)
        return _blocks.stacked_log_likelihood(Z, c, coef, intercept, len(kernels))

    rows = _blocks.stacked_tile_rows(coef.shape[0])
    return _blocks.over_row_tiles(tile, _blocks.add_tuples, X, np.asarray(codes), rows)


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
    coef, intercept = stacked_class_scores(models, U.shape[0])
    return reduce_rows(
        _cross_entropy_block,
        X,
        codes,
        kernels=tuple(kernels),
        U=U,
        coef=coef,
        intercept=intercept,
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
    return _blocks.stacked_class_moments(Z, codes, n_kernels, n_classes)


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


def _stacked_cross_entropy_block(Z, codes, *, row_start, coef, intercept, n_kernels):
    return _blocks.stacked_log_likelihood(Z, codes, coef, intercept, n_kernels)


def stacked_cross_entropy_pass(
    Z: da.Array,
    codes: da.Array,
    models: Sequence[LDAModel],
    n_classes: int,
    *,
    split_every: int = SPLIT_EVERY,
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
        split_every=split_every,
    )


# --- the encoder's Section 2: the full kernel matrix, block × block ------------------------


def full_embedding(
    X: da.Array,
    X_fit: da.Array,
    codes_fit: da.Array,
    kernel: Callable,
    counts: np.ndarray,
    *,
    split_every: int = SPLIT_EVERY,
) -> da.Array:
    """Lazy Z = A W (Shen's Section 2): row block b of X gets Σ_c δ(X_b, X_fit,c) W_c.

    Each row block of X is compared with every block of the training data, the partials
    summed in a tree: reading Z once reads X_fit once per row block of X (O(n²p) work,
    O(chunk²) memory per task). Returns an (n, K) float64 Dask array.
    """
    K = counts.size
    counts = np.asarray(counts, dtype=np.float64)
    col_blocks = list(zip(X_fit.to_delayed().ravel(), codes_fit.to_delayed().ravel()))
    fn = dask.delayed(_blocks.full_embedding_block, pure=True)
    rows = []
    for xb, size in zip(X.to_delayed().ravel(), X.chunks[0]):
        parts = [fn(xb, xc, cc, kernel=kernel, n_classes=K, counts=counts) for xc, cc in col_blocks]
        total = tree_reduce(parts, _blocks.combine_partials, split_every=split_every)
        rows.append(da.from_delayed(total, shape=(size, K), dtype=np.float64))
    return da.concatenate(rows, axis=0)


def _plain_moments_block(Z, codes, *, row_start, n_classes):
    return _blocks.class_moments(Z, codes, n_classes, scatter=True)


def moments_pass(
    Z: da.Array, codes: da.Array, n_classes: int, *, split_every: int = SPLIT_EVERY
) -> Delayed:
    """Class counts, means and pooled scatter of Z over labeled rows (no NaN check)."""
    return reduce_rows(_plain_moments_block, Z, codes, n_classes=n_classes, split_every=split_every)


def _log_likelihood_block(Z, codes, *, row_start, model):
    return np.array(_blocks.labeled_log_likelihood(lda_log_proba(model, Z), codes)[0])


def log_likelihood_pass(
    Z: da.Array, codes: da.Array, model: LDAModel, *, split_every: int = SPLIT_EVERY
) -> Delayed:
    """Σ log T(i, y_i) of one LDA model over the labeled rows of Z."""
    return reduce_rows(_log_likelihood_block, Z, codes, model=model, split_every=split_every)


# --- nRBFN: soft-KNN, σ, the Gram and the λ grid ----------------------------------------


def _label_counts_block(codes, *, row_start, n_classes):
    return _sampling.label_counts_block(codes, row_start=row_start, n_classes=n_classes)


def label_counts_pass(
    codes: da.Array, n_classes: int, *, split_every: int = SPLIT_EVERY
) -> Delayed:
    """Labeled rows per class (K,), one pass over the class codes (not X)."""
    return reduce_rows(_label_counts_block, codes, n_classes=n_classes, split_every=split_every)


def stratified_sample_pass(codes, counts, size: int, seed: int, *, split_every: int = SPLIT_EVERY):
    """:func:`scalenc._sampling.stratified_sample` from Dask labels in one pass over them:
    each block keeps its smallest hashes per class, merged in a tree; only the sample
    reaches the client.

    ``counts`` are the labeled rows per class (from :func:`label_counts_pass`). Returns a
    Delayed of ``{"index", "code", "key"}``, one entry per sampled row, in no set order.
    """
    shares = _sampling.class_shares(counts, size)
    return reduce_rows(
        _sampling.sample_block,
        codes,
        combine=_sampling.KeepSmallest(shares),
        shares=shares,
        seed=seed,
        split_every=split_every,
    )


def kneighbors_pass(
    X,
    codes,
    candidates,
    candidate_index,
    n_neighbors: int,
    *,
    split_every: int = SPLIT_EVERY,
):
    """One pass over X: the k nearest labeled rows (global indices) of every candidate.

    ``candidates`` and ``candidate_index`` may be NumPy arrays or Delayed objects (a row
    block of X itself, for the exact all-rows search). Returns a Delayed dict as
    :func:`kneighbors_block`. Memory per task: one block, one distance tile and O(c·k).
    """
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


def kneighbors_all_rows(X, codes, n_neighbors: int, *, split_every: int = SPLIT_EVERY) -> list:
    """Exact k-NN of EVERY labeled row among all labeled rows, block pair by block pair.

    For row blocks i < j one task computes both directions from one product
    (:func:`kneighbors_pair`); block i against itself uses :func:`kneighbors_block`.
    Each block's partials are merged in a tree. Returns, per row block, a Delayed
    ``(neighbours, global indices, codes)`` of its labeled rows.

    Notes
    -----
    n_b(n_b + 1)/2 block-pair tasks for n_b row blocks, computed together: every block is
    read once and shared by its pairs (one pass), and the distance work is n²p instead of
    2n²p. Memory per task: two blocks, one distance tile and O(b k); each block stays in
    memory until its pairs are done (O(n p) in all: the exact mode is for moderate n).
    """
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


def gather_rows(X: da.Array, index: np.ndarray) -> np.ndarray:
    """The rows of X at the sorted global indices ``index``, computed (one pass over X;
    only the blocks that hold them are read)."""
    (rows,) = compute(X[index])
    return rows


def sigma_pass(
    X: da.Array, codes: da.Array, basis: np.ndarray, *, split_every: int = SPLIT_EVERY
) -> Delayed:
    """Σ ‖G_i − x_j‖ over the labeled rows and the basis, and the number of those rows
    (:func:`scalenc._nrbfn_blocks.sigma_block`; Algorithm 2, step 5)."""
    return reduce_rows(_nrbfn_blocks.sigma_block, X, codes, basis=basis, split_every=split_every)


def gram_pass(
    X: da.Array,
    codes: da.Array,
    basis: np.ndarray,
    sigma: float,
    n_classes: int,
    *,
    n_folds: int = 1,
    seed: int = 0,
    folds: da.Array | None = None,
    split_every: int = SPLIT_EVERY,
) -> Delayed:
    """Per fold, M = W̃W̃ᵀ (r×r, lower triangle), B = F W̃ᵀ (K×r) and the row count
    (:func:`scalenc._nrbfn_blocks.gram_block`), summed in place at each tree node.

    A row's fold is a hash of its global index, or its entry of ``folds`` (row-aligned
    with X, fold numbers 0..n_folds−1) when the splits were given."""
    return reduce_rows(
        _nrbfn_blocks.gram_block,
        X,
        codes,
        folds,
        basis=basis,
        sigma=sigma,
        n_classes=n_classes,
        n_folds=n_folds,
        seed=seed,
        combine=_nrbfn_blocks.sum_gram_partials,
        split_every=split_every,
    )


def cv_error_pass(
    X: da.Array,
    codes: da.Array,
    basis: np.ndarray,
    sigma: float,
    weights: np.ndarray,
    seed: int,
    *,
    folds: da.Array | None = None,
    split_every: int = SPLIT_EVERY,
) -> Delayed:
    """Misclassified labeled rows per λ, each row scored by its own fold's model
    (:func:`scalenc._nrbfn_blocks.cv_error_block`; folds as in :func:`gram_pass`)."""
    return reduce_rows(
        _nrbfn_blocks.cv_error_block,
        X,
        codes,
        folds,
        basis=basis,
        sigma=sigma,
        weights=weights,
        seed=seed,
        split_every=split_every,
    )


def cv_error_refit_pass(
    X: da.Array,
    codes: da.Array,
    models: tuple,
    n_folds: int,
    seed: int,
    *,
    folds: da.Array | None = None,
    split_every: int = SPLIT_EVERY,
) -> Delayed:
    """Misclassified held-out rows per λ, each fold scored by its own network
    (``models[f]`` = basis, σ and weights fitted without fold f;
    :func:`scalenc._nrbfn_blocks.cv_error_refit_block`). One pass."""
    return reduce_rows(
        _nrbfn_blocks.cv_error_refit_block,
        X,
        codes,
        folds,
        models=models,
        n_folds=n_folds,
        seed=seed,
        split_every=split_every,
    )


# --- CCDR: the subsamples, and the statistics of the classifier heads --------------------


def stratum_counts_pass(
    codes: da.Array, n_classes: int, *, split_every: int = SPLIT_EVERY
) -> Delayed:
    """Per block, rows per stratum (unlabeled, class 0, …, class L−1) keyed by the block's
    first row: ``{"starts": (n_b,), "counts": (n_b, L+1)}`` in no set order."""
    return reduce_rows(
        _sampling.stratum_counts_block,
        codes,
        combine=_sampling.concat_tables,
        n_classes=n_classes,
        split_every=split_every,
    )


def select_rows_pass(
    codes: da.Array,
    starts: np.ndarray,
    offsets: np.ndarray,
    ranks: tuple,
    *,
    split_every: int = SPLIT_EVERY,
) -> Delayed:
    """Global indices (``s{b}``) and strata (``c{b}``) of every subsample's rows, found
    block by block from the drawn within-stratum ranks (:func:`scalenc._sampling.select_block`)."""
    return reduce_rows(
        _sampling.select_block,
        codes,
        combine=_sampling.concat_tables,
        starts=starts,
        offsets=offsets,
        ranks=ranks,
        split_every=split_every,
    )


def gather_rows_pass(X: da.Array, wanted: np.ndarray, *, split_every: int = SPLIT_EVERY) -> Delayed:
    """The rows of X at the sorted global indices ``wanted`` (float64) and a NaN/inf
    count of all of X, in one pass."""
    return reduce_rows(
        _sampling.gather_block,
        X,
        combine=_sampling.combine_gather,
        wanted=wanted,
        split_every=split_every,
    )


def embedding_stats_pass(
    X: da.Array,
    codes: da.Array,
    head: str,
    solutions,
    n_classes: int,
    *,
    split_every: int = SPLIT_EVERY,
) -> Delayed:
    """Statistics of the training embedding f(x_i, c_i) over the labeled rows for a
    classifier head: ``"linear"`` (the least-squares Gram and cross term) or ``"lda"``
    (class moments). ``solutions`` may be a Delayed of the fitted subsamples."""
    block = _ccdr_blocks.linear_stats_block if head == "linear" else _ccdr_blocks.lda_stats_block
    return reduce_rows(
        block, X, codes, solutions=solutions, n_classes=n_classes, split_every=split_every
    )
