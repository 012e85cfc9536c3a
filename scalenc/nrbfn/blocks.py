"""The formulas of Hu, Pan & Wu's nRBFN and LRC on one row block, in plain NumPy — no dask here.

Paper: "nRBFN and LRC from spectral graph theory" (shared/seeds/nrbfn-lrc-spectral-graph.txt).
The basis comes from soft-KNN (Algorithm 1, :mod:`scalenc.nrbfn.soft_knn`).

* the network (Algorithms 2 and 3): W̃, the column-normalised Gaussian kernel between the
  basis and a block (:func:`normalized_kernel`), and the block functions of the passes:
  σ (:func:`sigma_block`), the Gram M = W̃W̃ᵀ and B = F W̃ᵀ per fold (:func:`gram_block`),
  the held-out errors of the λ grid (:func:`cv_error_block`);
* the scores of both classifiers and their probabilities.

The ridge solve and the paper's diagnostics work on the r×r summaries and live in
:mod:`scalenc.math.linalg`; :mod:`scalenc.engine.passes` wires these block functions into passes.
"""

from __future__ import annotations

import numpy as np

from scalenc.math.buffers import host_scratch, scratch
from scalenc.math.distances import ranking_dtype, row_sq_norms, sq_distances_from_inner
from scalenc.math.moments import check_finite, onehot
from scalenc.math.neighbors import labeled_rows
from scalenc.math.sampling import fold_of
from scalenc.math.xp import (
    as_block,
    device_of,
    dtype_in,
    host_or_device,
    like,
    matmul,
    namespace,
    rows_per_tile,
    take_classes,
    take_rows,
    tile_elements,
    to_host,
)

__all__ = [
    "normalized_kernel",
    "kernels_of_width",
    "prepare_basis",
    "kernel_tiles",
    "sigma_block",
    "gram_block",
    "sum_gram_partials",
    "cv_error_block",
    "cv_error_refit_block",
    "nrbfn_scores",
    "lrc_scores",
    "scores_to_proba",
    "decision_block",
    "proba_block",
    "predict_block",
]


#: Elements of one kernel tile (basis × rows) inside a block; 4M float64 = 32 MB.
KERNEL_TILE_ELEMENTS = 4 * 2**20
#: Elements of the kernel normalised at a time (float64 rows that stay in a core's cache).
NORMALISE_ELEMENTS = 2**16
#: Rows × r of W̃ per update of the Gram: at most 64M float64 = 512 MB per worker thread
#: (a block's rows are split into equal steps under it). An update reads and writes the
#: whole r×r Gram, so it must cover many rows (≥ 2000 for r ≈ 9000) to be bound by
#: arithmetic rather than memory.
GRAM_TILE_ELEMENTS = 64 * 2**20
#: Rows of the Gram per strip of :func:`_syrk_lower_into` (the temporary product of a
#: strip is GRAM_STRIP × r float64: 72 MB for r ≈ 9000).
GRAM_STRIP = 1024


# --- the network (Algorithms 2 and 3) ----------------------------------------------------


def prepare_basis(basis: np.ndarray, sigma: float, dtype, ref=None) -> tuple:
    """What :func:`normalized_kernel` derives from the basis, computed once per block
    rather than once per row tile: the basis scaled by 1/σ² in the products' ``dtype``,
    and ‖g‖²/(2σ²) per basis row (float64), on the device of the block ``ref`` (NumPy
    when it is None or NumPy)."""
    basis64 = np.asarray(basis, dtype=np.float64)
    scaled_basis = (basis64 / sigma**2).astype(dtype)
    basis_term = np.einsum("ij,ij->i", basis64, basis64) * (0.5 / sigma**2)
    xp = namespace(ref)
    return np.dtype(dtype), like(xp, scaled_basis, ref), like(xp, basis_term, ref)


def _products_dtype(X, basis) -> np.dtype:
    """The precision of the kernel's products: the data's, at least float32."""
    return ranking_dtype(np, X.dtype, basis.dtype)


def normalized_kernel(
    X: np.ndarray,
    basis: np.ndarray,
    sigma: float,
    *,
    out: np.ndarray | None = None,
    prepared: tuple | None = None,
    normalize: bool = True,
) -> np.ndarray:
    """W̃ᵀ for a block: Gaussian kernel to the basis, each row normalised to sum to one.

    ``W_ij = exp(−‖G_i − x_j‖² / (2σ²))`` and ``W̃ = W diag(1ᵀW)⁻¹`` (Algorithm 2 steps
    6–7, Algorithm 3 steps 3–4). Returned transposed, shape (b, r), float64, written into
    ``out`` when given. The smallest squared distance of each row is subtracted inside
    the exponential, which the normalisation cancels exactly, so rows far from every
    basis vector do not underflow. After the one matrix product, the exponentials and
    normalisation run on cache-sized groups of rows (:data:`NORMALISE_ELEMENTS`).
    ``prepared`` is :func:`prepare_basis` of (basis, sigma), for callers that call this
    on many row tiles. ``normalize=False``: Wᵀ itself, the plain Gaussian RBF network's
    kernel (a row beyond about 38σ of every basis row underflows to zeros).
    """
    return kernels_of_width(X, basis, sigma, (normalize,), [out], prepared)[0]


def kernels_of_width(X, basis, sigma, normalizes, outs, prepared=None) -> list:
    """:func:`normalized_kernel` of each of ``normalizes`` (W̃ where True, else W) into
    ``outs`` (None: a new array), all from one matrix product: W and W̃ of one σ differ
    only after it."""
    xp = namespace(X)
    dtype = _products_dtype(X, basis)
    if prepared is None or prepared[0] != dtype:
        prepared = prepare_basis(basis, sigma, dtype, X)
    # −‖x − g‖²/(2σ²) = (2 x·g − ‖g‖²)/(2σ²) − ‖x‖²/(2σ²); the last term is constant along
    # the row and cancels in the normalisation, as does the row maximum subtracted below.
    _, scaled_basis, basis_term = prepared
    products = xp.astype(X, dtype_in(xp, dtype), copy=False) @ scaled_basis.T
    row_term = None if all(normalizes) else row_sq_norms(X) * (0.5 / sigma**2)
    kernel = host_or_device(xp, _normalise_on_host, _normalise_on_device)
    return [
        kernel(products, basis_term, out, None if normalize else row_term)
        for normalize, out in zip(normalizes, outs)
    ]


def _by_width(kernels, most: int | None = None) -> list:
    """``kernels`` ((σ, normalize) pairs) grouped by σ, each group of at most ``most``:
    [(σ, [(position, normalize), …]), …]."""
    groups = {}
    for v, (sigma, normalize) in enumerate(kernels):
        groups.setdefault(sigma, []).append((v, normalize))
    most = most or max(1, len(kernels))
    return [
        (sigma, own[i : i + most])
        for sigma, own in groups.items()
        for i in range(0, len(own), most)
    ]


def _normalise_on_device(products, basis_term, out, row_term=None):
    """exp(products − ‖g‖²/(2σ²) − the row maximum), each row divided by its sum: one
    kernel per step over the whole block (no cache to fit). With ``row_term``
    (‖x‖²/(2σ²) per row), exp(products − ‖g‖²/(2σ²) − ‖x‖²/(2σ²)), not normalised."""
    xp = namespace(products)
    logits = xp.astype(products, xp.float64) - basis_term
    if row_term is not None:
        logits = xp.exp(logits - row_term[:, None])
    else:
        logits = xp.exp(logits - xp.max(logits, axis=1, keepdims=True))
        logits /= xp.sum(logits, axis=1, keepdims=True)
    if out is None:
        return logits
    out[...] = logits
    return out


def _normalise_on_host(products, basis_term, out, row_term=None):
    """:func:`_normalise_on_device` in place in ``out`` (float64), on cache-sized groups
    of rows (:data:`NORMALISE_ELEMENTS`)."""
    W = np.empty(products.shape) if out is None else out
    step = max(1, NORMALISE_ELEMENTS // max(products.shape[1], 1))
    for start in range(0, products.shape[0], step):
        logits = W[start : start + step]
        np.subtract(products[start : start + step], basis_term, out=logits)
        if row_term is not None:
            logits -= row_term[start : start + step, None]
            np.exp(logits, out=logits)
            continue
        logits -= logits.max(axis=1, keepdims=True)
        np.exp(logits, out=logits)
        logits /= logits.sum(axis=1, keepdims=True)
    return W


def kernel_tiles(rows: np.ndarray, basis: np.ndarray, sigma: float, normalizes=(True,)):
    """(start, stop, [W̃ᵀ or Wᵀ of rows[start:stop] for each of ``normalizes``]) over row
    tiles of :func:`_basis_tiles` rows (:func:`kernels_of_width`: one product per tile).

    Memory O(tile × r) per kernel whatever the block's rows (a 20 000-row block against a
    basis of 8 787 took 2 GB when W̃ᵀ was formed whole); each tile is a per-thread scratch
    buffer, valid until the next one is yielded.
    """
    xp = namespace(rows)
    r = basis.shape[0]
    prepared = prepare_basis(basis, sigma, _products_dtype(rows, basis), rows)
    step = _tile_rows(xp, rows.shape[0], r)
    for start in range(0, rows.shape[0], step):
        stop = min(rows.shape[0], start + step)
        outs = [
            host_scratch(xp, f"nrbfn.kernel_tile{i}", (stop - start, r), np.float64)
            for i in range(len(normalizes))
        ]
        yield (
            start,
            stop,
            kernels_of_width(rows[start:stop, ...], basis, sigma, normalizes, outs, prepared),
        )


def _syrk_lower_into(M: np.ndarray, W: np.ndarray) -> None:
    """M += Wᵀ W on the lower triangle of the C-ordered M (W is rows × r), in place.

    The lower triangle is cut into strips of :data:`GRAM_STRIP` rows: each strip's
    diagonal square is a NumPy ``Wₐᵀ Wₐ`` (which NumPy runs as BLAS ``syrk``) and the
    part left of it one GEMM ``Wₐᵀ W[:, :a]``. The work is that of one ``dsyrk`` (r² flops
    per row of W, half a GEMM), and W is read in place (no Fortran-ordered copy). Only
    the lower triangle is meaningful afterwards (the diagonal squares also add to part
    of the upper one, which nothing reads).

    NumPy's matmul releases the GIL while BLAS runs; SciPy's ``scipy.linalg.blas.dsyrk``
    wrapper does not, so with it the Gram updates of the threaded scheduler's worker
    threads ran one at a time.
    """
    r = W.shape[1]
    for a in range(0, r, GRAM_STRIP):
        end = min(r, a + GRAM_STRIP)
        Wa = W[:, a:end]
        M[a:end, a:end] += Wa.T @ Wa
        if a:
            M[a:end, :a] += Wa.T @ W[:, :a]


# --- block functions of the passes ------------------------------------------------------


def _basis_tiles(n_rows: int, r: int) -> int:
    return int(np.clip(KERNEL_TILE_ELEMENTS // max(r, 1), 1, 8192))


def _tile_rows(xp, n_rows: int, r: int) -> int:
    """Rows of a kernel tile: :func:`_basis_tiles` on the host, a device-sized tile on an
    accelerator (:func:`scalenc.math.xp.tile_elements`)."""
    return rows_per_tile(xp, _basis_tiles(n_rows, r), r, host_elements=KERNEL_TILE_ELEMENTS)


def sigma_block(X, codes, *, row_start, basis):
    """Σ_ij ‖G_i − x_j‖ over the labeled rows of a block, and their number (Algorithm 2, step 5).

    Distances are formed in the data's precision (‖x‖² + ‖g‖² − 2 x·g, float32 for
    float32 data, values below the expansion's rounding error set to 0) and summed in
    float64.
    """
    rows, _, _ = labeled_rows(X, codes, row_start)
    xp = namespace(rows)
    dtype = _products_dtype(rows, basis)
    basis_d = np.asarray(basis, np.float64).astype(dtype)
    basis_norms = row_sq_norms(basis).astype(dtype)
    eps = np.finfo(dtype).eps
    basis_d, basis_norms = like(xp, basis_d, rows), like(xp, basis_norms, rows)
    return host_or_device(xp, _sigma_on_host, _sigma_on_device)(rows, basis_d, basis_norms, eps)


def _sigma_on_host(rows, basis, basis_norms, eps):
    """:func:`sigma_block` of NumPy rows: cache-sized tiles in a per-thread buffer."""
    dtype = basis.dtype
    total = 0.0
    step = _tile_rows(np, rows.shape[0], basis.shape[0])
    row_norms = row_sq_norms(rows).astype(dtype)
    for start in range(0, rows.shape[0], step):
        stop = min(start + step, rows.shape[0])
        # into a per-thread buffer: a fresh tile per step is page-faulted in each time on
        # a Dask worker, whose nanny sets MALLOC_TRIM_THRESHOLD_ (1.3× the stage at p = 32)
        out = scratch("nrbfn.sigma", (stop - start, basis.shape[0]), dtype)
        d2 = np.matmul(rows[start:stop].astype(dtype, copy=False), basis.T, out=out)
        sq_distances_from_inner(d2, row_norms[start:stop], basis_norms, zero_below=eps, out=d2)
        total += float(np.sqrt(d2, out=d2).sum(dtype=np.float64))
    return {"dist_sum": np.array(total), "rows": np.array(rows.shape[0])}


def _sigma_on_device(rows, basis, basis_norms, eps):
    """:func:`sigma_block` on a device block: one product per tile of
    :func:`_tile_rows` rows (the whole block, as a rule), the distances by
    :func:`scalenc.math.distances.sq_distances_from_inner` as on the host."""
    xp, eps = namespace(rows), float(eps)
    rows = xp.astype(rows, basis.dtype, copy=False)
    row_norms = xp.astype(row_sq_norms(rows), basis.dtype)
    total = xp.zeros((), dtype=xp.float64, device=device_of(rows))
    step = _tile_rows(xp, rows.shape[0], basis.shape[0])
    for start in range(0, rows.shape[0], step):
        stop = min(rows.shape[0], start + step)
        d2 = sq_distances_from_inner(
            rows[start:stop, ...] @ basis.T,
            row_norms[start:stop],
            basis_norms,
            zero_below=eps,
        )
        total += xp.sum(xp.sqrt(xp.astype(d2, xp.float64)))
    return {"dist_sum": total, "rows": np.array(rows.shape[0])}


def _folds_of_block(index, codes, folds, n_folds, seed):
    """The fold of each labeled row of a block: its entry of the aligned ``folds`` block
    when the splits were given, else :func:`fold_of` its global row index."""
    if folds is not None:
        return np.asarray(folds)[np.asarray(codes) >= 0].astype(np.int64)
    if n_folds > 1:
        return fold_of(index, n_folds, seed)
    return np.zeros(index.size, np.int64)


def gram_block(
    X, codes, folds=None, *, row_start, basis, kernels, n_classes, n_folds, seed, only_fold=None
):  # fmt: skip
    """Per kernel of ``kernels`` ((σ, normalize) pairs: W̃ of width σ, or W, the kernel not
    normalised, where normalize is False) and fold: M_f = W̃W̃ᵀ (r×r, lower triangle) and
    B_f = F W̃ᵀ (K×r), shapes (n_kernels, n_folds, …); and the rows of each fold.

    One fold (``n_folds=1``) for a plain fit. Only labeled rows enter (F has one column
    per labeled row). A row's fold is :func:`fold_of` its global index, or its entry of
    the aligned ``folds`` block when the splits were given (the held-out sets then
    partition the labeled rows: the solves take M − M_f as fold f's training Gram).
    With ``only_fold`` = f, only fold f's rows enter and the partial holds M_f, B_f and
    their count alone (fold axis of length 1): one pass per fold, for a basis whose
    n_folds Grams per partial would not fit in memory. The kernels of one σ share their
    products (:func:`kernels_of_width`), each summed as its own pass would sum it.
    Memory: a W̃ tile per kernel of one σ (together within :data:`GRAM_TILE_ELEMENTS`,
    else one kernel at a time), one strip product (:data:`GRAM_STRIP` × r) and
    n_kernels × n_folds (r² + K r) float64.
    """
    rows, index, labels = labeled_rows(X, codes, row_start)
    folds = _folds_of_block(to_host(index), codes, folds, n_folds, seed)
    if only_fold is not None:
        mine = np.flatnonzero(folds == only_fold)
        rows, labels = take_rows(namespace(rows), rows, mine), to_host(labels)[mine]
        folds, n_folds = np.zeros(mine.size, np.int64), 1
    count = np.bincount(folds[folds >= 0], minlength=n_folds).astype(np.float64)
    gram = host_or_device(namespace(rows), _gram_on_host, _gram_on_device)
    M, B = gram(rows, folds, to_host(labels), basis, tuple(kernels), n_classes, n_folds)
    return {"M": M, "B": B, "count": count}


def _gram_on_host(rows, folds, labels, basis, kernels, n_classes, n_folds):
    """M_f and B_f of :func:`gram_block` for NumPy rows: the rows grouped by fold (a stable
    sort), then each fold's W̃ᵀ in cache-sized pieces of equal steps, each fold's M_f on
    its lower triangle (:func:`_syrk_lower_into`). Grouped, each product has up to a
    tile's rows of its fold, not the fold's share of a mixed tile, and copies none: a
    letter-sized block (14 000 rows against 9 172 centres, five folds) took 21.0 s in
    mixed tiles and takes 18.0 s (one fold: 15.1 s)."""
    r = basis.shape[0]
    M = np.zeros((len(kernels), n_folds, r, r))
    B = np.zeros((len(kernels), n_folds, n_classes, r))
    order = np.argsort(folds, kind="stable")
    rows, folds, labels = rows[order], folds[order], labels[order]
    n_steps = -(-rows.shape[0] // max(1, GRAM_TILE_ELEMENTS // max(r, 1)))
    step = max(1, -(-rows.shape[0] // max(n_steps, 1)))  # equal steps under the tile size
    sub = _basis_tiles(step, r)
    dtype = np.result_type(rows.dtype, basis.dtype, np.float32)
    values, starts = np.unique(folds, return_index=True)
    ends = np.append(starts[1:], folds.size)
    # kernels share products while their tiles take one tile's cap (GRAM_TILE_ELEMENTS)
    most = max(1, GRAM_TILE_ELEMENTS // max(r * min(step, rows.shape[0]), 1))
    for sigma, members in _by_width(kernels, most):
        prepared = prepare_basis(basis, sigma, dtype)
        normalizes = [normalize for _, normalize in members]
        tiles = [np.empty((min(step, rows.shape[0]), r)) for _ in members]
        for f, first, last in zip(values, starts, ends):
            for start in range(first, last, step):
                stop = min(last, start + step)
                for s0 in range(start, stop, sub):  # the kernels in cache-sized pieces
                    s1 = min(stop, s0 + sub)
                    outs = [tile[s0 - start : s1 - start] for tile in tiles]
                    kernels_of_width(rows[s0:s1], basis, sigma, normalizes, outs, prepared)
                indicator = onehot(labels[start:stop], n_classes)
                for (v, _), tile in zip(members, tiles):
                    _syrk_lower_into(M[v, f], tile[: stop - start])
                    B[v, f] += indicator @ tile[: stop - start]
    return M, B


def _gram_on_device(rows, folds, labels, basis, kernels, n_classes, n_folds):
    """M_f and B_f of :func:`gram_block` on a device block: W̃ᵀ of a tile of rows
    (:func:`scalenc.math.xp.tile_elements`, the whole block as a rule) in one kernel, and
    each fold's update as one product. The whole square of M is formed (a GPU's GEMM
    outruns the strips of a triangle); the solve reads the lower triangle as on the host."""
    xp = namespace(rows)
    r, device = basis.shape[0], device_of(rows)
    M = xp.zeros((len(kernels), n_folds, r, r), dtype=xp.float64, device=device)
    B = xp.zeros((len(kernels), n_folds, n_classes, r), dtype=xp.float64, device=device)
    classes = xp.arange(n_classes, device=device)
    step = max(1, tile_elements(xp, GRAM_TILE_ELEMENTS) // max(r, 1))
    most = max(1, tile_elements(xp, GRAM_TILE_ELEMENTS) // max(r * min(step, rows.shape[0]), 1))
    for sigma, members in _by_width(kernels, most):
        prepared = prepare_basis(basis, sigma, _products_dtype(rows, basis), rows)
        normalizes = [normalize for _, normalize in members]
        for start in range(0, rows.shape[0], step):
            stop = min(rows.shape[0], start + step)
            tile = rows[start:stop, ...]
            Ws = kernels_of_width(tile, basis, sigma, normalizes, [None] * len(members), prepared)
            fold_tile, label_tile = folds[start:stop], labels[start:stop]
            for f in np.unique(fold_tile):
                mine = np.flatnonzero(fold_tile == f)
                at = None if mine.size == fold_tile.size else like(xp, mine, rows)
                indicator = like(xp, label_tile[mine], rows)[:, None] == classes
                indicator = xp.astype(indicator, xp.float64)
                for (v, _), Wt in zip(members, Ws):
                    Wf = Wt if at is None else xp.take(Wt, at, axis=0)
                    M[v, int(f), ...] += Wf.T @ Wf
                    B[v, int(f), ...] += indicator.T @ Wf
    return M, B


#: The Gram pass's partials (n_kernels × n_folds × r² float64) stay on a device through
#: the tree (:func:`sum_gram_partials` adds device arrays): only the root comes to the host.
gram_block.device_partials = True


def sum_gram_partials(*partials):
    """Tree node of the Gram pass: the sum of partials of :func:`gram_block`.

    Adds into one copy of the first partial, left to right (the order of
    :func:`scalenc.math.moments.combine_partials`, so the same sums), instead of a new r×r
    array per addition: each is n_folds × 617 MB for r ≈ 9000.
    """
    total = {key: namespace(value).asarray(value, copy=True) for key, value in partials[0].items()}
    for part in partials[1:]:
        for key in total:
            total[key] += part[key]
    return total


def cv_error_block(
    X, codes, folds=None, *, row_start, basis, kernels, weights, seed, rotations=None
):  # fmt: skip
    """Misclassified labeled rows per kernel and λ, each row scored by its own fold's
    model: (n_kernels, n_alphas).

    ``kernels`` as in :func:`gram_block`; ``weights`` has shape (n_kernels, n_folds,
    n_alphas, K, r): ``weights[v, f]`` the v-th kernel's X* solved without fold f, or,
    with ``rotations`` (n_kernels, n_folds, r, r), Y of X* = Y Qᵀ, Q = ``rotations[v, f]``
    (the rows' kernel is multiplied by Q once for every λ). Folds as in
    :func:`gram_block`; the kernels of one σ share their products.
    """
    rows, index, labels = labeled_rows(X, codes, row_start)
    n_folds, n_alphas = weights.shape[1:3]
    errors = np.zeros((len(kernels), n_alphas))
    if rows.shape[0] == 0:
        return errors
    xp = namespace(rows)
    folds = _folds_of_block(to_host(index), codes, folds, n_folds, seed)
    labels = like(xp, to_host(labels), rows)
    weights_d = like(xp, weights, rows)
    rotations_d = None if rotations is None else like(xp, rotations, rows)
    for sigma, members in _by_width(kernels):
        normalizes = tuple(normalize for _, normalize in members)
        for start, stop, Ws in kernel_tiles(rows, basis, sigma, normalizes):
            tile_folds, tile_labels = folds[start:stop], labels[start:stop]
            for f in np.unique(tile_folds):
                mine = like(xp, np.flatnonzero(tile_folds == f), rows)
                held = xp.take(tile_labels, mine)
                for (v, _), Wt in zip(members, Ws):
                    Wf = xp.take(Wt, mine, axis=0)
                    if rotations_d is not None:
                        Wf = Wf @ rotations_d[v, int(f), ...]
                    scores = xp.reshape(
                        xp.reshape(weights_d[v, int(f), ...], (-1, weights.shape[-1])) @ Wf.T,
                        (n_alphas, -1, Wf.shape[0]),
                    )  # (n_alphas, K, rows)
                    wrong = xp.argmax(scores, axis=1) != held
                    errors[v] += to_host(xp.sum(xp.astype(wrong, xp.int64), axis=1))
    return errors


def cv_error_refit_block(
    X, codes, folds=None, *, row_start, models, n_folds, seed, normalize=True
):  # fmt: skip
    """Misclassified held-out rows per λ when each fold has a network of its own.

    ``models[f]`` is ``(basis, sigma, weights)`` of the network fitted without fold f
    (Algorithm 2 re-run on the fold's training rows), ``weights`` of shape
    (n_alphas, K, r_f). Folds and ``normalize`` as in :func:`gram_block`.
    """
    rows, index, labels = labeled_rows(X, codes, row_start)
    errors = np.zeros(models[0][2].shape[0])
    if rows.shape[0] == 0:
        return errors
    xp = namespace(rows)
    folds = _folds_of_block(to_host(index), codes, folds, n_folds, seed)
    labels = like(xp, to_host(labels), rows)
    for f in np.unique(folds):
        basis, sigma, weights = models[f]
        mine = like(xp, np.flatnonzero(folds == f), rows)
        held, held_labels = xp.take(rows, mine, axis=0), xp.take(labels, mine)
        weights_d = like(xp, weights, rows)
        for start, stop, (Wt,) in kernel_tiles(held, basis, sigma, (normalize,)):
            if xp is np:
                scores = np.einsum("akr,br->akb", weights, Wt)  # (n_alphas, K, rows)
            else:
                scores = weights_d @ Wt.T
            wrong = xp.argmax(scores, axis=1) != held_labels[start:stop, ...]
            errors += to_host(xp.sum(xp.astype(wrong, xp.int64), axis=1))
    return errors


def nrbfn_scores(X, *, basis, sigma, weights, normalize=True):
    """F̂ᵀ = (X* W̃_B)ᵀ for a block, shape (b, K), float64 (Algorithm 3 step 5), a row tile
    at a time (:func:`kernel_tiles`; W_B, not normalised, with ``normalize=False``)."""
    check_finite(X)
    xp = namespace(X)
    weights = like(xp, weights, X)
    out = xp.empty((X.shape[0], weights.shape[0]), dtype=xp.float64, device=device_of(X))
    for start, stop, (Wt,) in kernel_tiles(as_block(xp, X), basis, sigma, (normalize,)):
        matmul(xp, Wt, weights.T, out=out[start:stop, ...])
    return out


def lrc_scores(X, *, coef, intercept):
    """(D* b̃)ᵀ for a block, shape (b, K) (eq. 2): X coefᵀ + intercept."""
    check_finite(X)
    xp = namespace(X)
    return xp.astype(X, xp.float64) @ like(xp, coef, X).T + like(xp, intercept, X)


def scores_to_proba(scores: np.ndarray) -> np.ndarray:
    """Probabilities from F̂: negative entries clipped to 0, each row renormalised.

    F̂ approximates an indicator and its columns sum to about one, but entries may be
    negative (the paper's "quasi-probability"). Clipping keeps the argmax, so the most
    probable class is always the predicted one; a row with no positive entry gets all
    its mass on its argmax.
    """
    xp = namespace(scores)
    proba = xp.clip(scores, 0.0, None)
    total = xp.sum(proba, axis=1, keepdims=True)
    empty = total <= 0
    if bool(xp.any(empty)):
        classes = xp.arange(scores.shape[1], device=device_of(scores))
        top = xp.astype(xp.argmax(scores, axis=1, keepdims=True) == classes, proba.dtype)
        proba = xp.where(empty, top, proba)
        total = xp.where(empty, xp.ones_like(total), total)
    return proba / total


def decision_block(X, *, score_fn, out_dtype, binary, **kwargs):
    scores = score_fn(X, **kwargs)
    if binary:
        scores = scores[:, 1:2] - scores[:, 0:1]
    xp = namespace(scores)
    return xp.astype(scores, dtype_in(xp, out_dtype), copy=False)


def proba_block(X, *, score_fn, out_dtype, **kwargs):
    proba = scores_to_proba(score_fn(X, **kwargs))
    xp = namespace(proba)
    return xp.astype(proba, dtype_in(xp, out_dtype), copy=False)


def predict_block(X, *, score_fn, classes, **kwargs):
    scores = score_fn(X, **kwargs)
    xp = namespace(scores)
    return take_classes(xp, classes, xp.argmax(scores, axis=1))
