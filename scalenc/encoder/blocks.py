"""The encoder's per-block math: the stacked moments and log-likelihoods of several
kernels' embeddings, Section 2's full embedding, and the output maps (embedding, scores,
probabilities, predictions) tile by tile.

Blocks may be NumPy arrays or device arrays (CuPy's on a GPU, :mod:`scalenc.math.xp`).
The output maps return arrays of the block's namespace; the LDA model's small NumPy
arrays are moved to the block's device. The partials (moments, log-likelihoods) come
back as NumPy, for the driver's merges.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scalenc.encoder import blocks
from scalenc.encoder.kernels import Kernel
from scalenc.math.buffers import Workspace, arange, gather, scratch
from scalenc.math.linalg import LDAModel, class_scores
from scalenc.math.moments import (
    centred_class_sums,
    check_finite,
    merge_moment_tuples,
    merge_partials,
    moments_about,
)
from scalenc.math.softmax import log_softmax
from scalenc.math.tiles import add_tuples, map_row_tiles, over_row_tiles
from scalenc.math.xp import (
    device_of,
    dtype_in,
    host_or_device,
    index_dtype,
    like,
    matmul,
    namespace,
    rows_per_tile,
    take_classes,
    to_host,
)

__all__ = [
    "stacked_class_moments",
    "stacked_log_likelihood",
    "stacked_row_losses",
    "stacked_loss_gradients",
    "full_embedding_block",
    "linear_embedding_moments",
    "choose_kernel",
]


# --- per-block outputs (module level so that they pickle for any scheduler) ------------


def embed_block(X, *, kernel, U, out_dtype):
    check_finite(X)
    xp = namespace(X)
    dtype = dtype_in(xp, out_dtype)
    return by_row_tiles(lambda x: xp.astype(kernel(x, U), dtype, copy=False), X, U)


def decision_block(X, *, kernel, U, model, out_dtype):
    check_finite(X)
    xp = namespace(X)
    dtype = dtype_in(xp, out_dtype)

    def tile(x):
        return xp.astype(decision_scores(model, kernel(x, U)), dtype, copy=False)

    return by_row_tiles(tile, X, U)


def proba_block(X, *, kernel, U, model, out_dtype):
    check_finite(X)
    xp = namespace(X)
    dtype = dtype_in(xp, out_dtype)

    def tile(x):
        return xp.astype(xp.exp(log_proba(model, kernel(x, U))), dtype, copy=False)

    return by_row_tiles(tile, X, U)


def predict_block(X, *, kernel, U, model, classes):
    check_finite(X)
    xp = namespace(X)

    def tile(x):
        scores = decision_scores(model, kernel(x, U))
        if scores.shape[1] == 1:
            index = xp.astype(scores[:, 0] > 0, index_dtype(xp))
        else:
            index = xp.argmax(scores, axis=1)
        return take_classes(xp, classes, index)

    return by_row_tiles(tile, X, U)


def decision_scores(model: LDAModel, Z):
    """``Z @ coef.T + intercept`` (:func:`scalenc.math.linalg.lda_decision`) for a NumPy or
    device embedding block, the model's arrays moved to its device."""
    return _scores(Z, model.coef, model.intercept)


def log_proba(model: LDAModel, Z):
    """Log posteriors (:func:`scalenc.math.linalg.lda_log_proba`) of a NumPy or device
    embedding block."""
    return log_softmax(_scores(Z, *class_scores(model)))


def _scores(Z, coef, intercept):
    xp = namespace(Z)
    Z = xp.astype(Z, xp.float64, copy=False)
    return Z @ like(xp, coef, Z).T + like(xp, intercept, Z)


def by_row_tiles(func, X, U):
    """A block's output computed a row tile at a time: the embedding and the class scores
    (K float64 columns each) stay about :data:`scalenc.encoder.blocks.STACKED_TILE_BYTES`
    (on a device, :data:`scalenc.math.xp.DEVICE_TILE_ELEMENTS` elements)."""
    return map_row_tiles(func, X, tile_rows(namespace(X), U.shape[0]))


def apply_to_embedding(Z, *, block_fn, **kwargs):
    """Apply an output block function to a precomputed embedding (method='full')."""
    return block_fn(Z, kernel=IdentityEmbedding(), U=np.empty((Z.shape[1], 0)), **kwargs)


def apply_to_graph_alone(Z, *, block_fn, unreached, **kwargs):
    """:func:`apply_to_embedding` for the graph embedding alone: a row of zeros (a node
    with no labeled neighbour, of which the graph says nothing) gets ``unreached``, the
    output of the class priors (None: the output as computed, as for ``transform``)."""
    out = apply_to_embedding(Z, block_fn=block_fn, **kwargs)
    if unreached is None:
        return out
    xp = namespace(out)
    zero = ~namespace(Z).any(Z != 0, axis=1)
    zero = to_host(zero) if xp is np else zero  # labels that are not numbers are NumPy
    zero = zero[:, None] if out.ndim == 2 else zero
    return xp.where(zero, like(xp, unreached, out, dtype=out.dtype), out)


@dataclass(frozen=True, repr=False)
class IdentityEmbedding(Kernel):
    """The kernel of a precomputed embedding: δ(Z, ·) = Z (float64, of Z's namespace)."""

    name = "identity"
    tiled = False

    def __call__(self, Z, U):
        xp = namespace(Z)
        return xp.astype(Z, xp.float64, copy=False)


#: Bytes of one row tile of a stacked embedding (M·K float64 columns). The multi-kernel
#: passes work through a block a tile at a time, so that their temporaries (the embedding,
#: its centred copy, the class scores; the per-thread scratch buffers keep the largest)
#: stay near this size whatever the block's rows: a 250 000-row block with p = 16 and
#: K = 100 held 1.8 GB per task for three kernels when it was embedded whole. Tiles of
#: 2 MiB keep them in a core's cache: a 200 000 × 50 block's pass-2 work (two kernels,
#: K = 5) took 0.078 s, against 0.107 s in tiles of 8 MiB and 0.097 s in tiles of 256 KiB.
STACKED_TILE_BYTES = 2 * 2**20


def stacked_tile_rows(width: int) -> int:
    """Rows of a row tile of a (·, ``width``) float64 array of :data:`STACKED_TILE_BYTES`."""
    return max(256, STACKED_TILE_BYTES // (8 * max(width, 1)))


def tile_rows(xp, width: int) -> int:
    """:func:`stacked_tile_rows` for NumPy blocks; a device tile of about
    :data:`scalenc.math.xp.DEVICE_TILE_ELEMENTS` elements."""
    host = blocks.stacked_tile_rows(width)
    return rows_per_tile(xp, host, width, host_elements=STACKED_TILE_BYTES // 8, least=256)


def stacked_class_moments(Z: np.ndarray, codes: np.ndarray, n_kernels: int, n_classes: int):
    """Each kernel's class moments (K×K) from a stacked embedding block [Z_1 | … | Z_M].

    The class sums of all M·K columns come from one product with the class indicator;
    the scatter only for each kernel's own K columns (its diagonal block): M·K² products
    per row instead of (M·K)². Everything in float64, about each row tile's mean (as
    :func:`scalenc.math.moments.class_moments`'s float64 path), so the merge loses nothing to
    cancellation;
    tiles of :func:`stacked_tile_rows` rows, merged by Chan's update. A device block's
    tiles are :func:`scalenc.math.moments.centred_class_sums`; NumPy partials either way.
    """
    xp = namespace(Z)
    tile = host_or_device(xp, _stacked_class_moments_on_host, _stacked_class_moments_on_device)
    return over_row_tiles(
        lambda z, c: tile(z, c, n_kernels, n_classes),
        merge_moment_tuples,
        Z,
        to_host(codes),
        tile_rows(xp, Z.shape[1]),
    )


def _stacked_class_moments_on_device(Z, codes, n_kernels: int, n_classes: int):
    K = n_classes
    kernels = [slice(m * K, (m + 1) * K) for m in range(n_kernels)]
    part = centred_class_sums(Z, codes, K, blocks=kernels)
    n, centre, sums = part["n"], part["centre"], part["sums"]
    return tuple(
        moments_about(n, centre[cols], sums[:, cols], scatter)
        for cols, scatter in zip(kernels, part["scatters"])
    )


def _stacked_class_moments_on_host(Z, codes, n_kernels: int, n_classes: int):
    # columns by row: each of the M·K columns is a contiguous vector when Z is column-major,
    # :func:`scalenc.encoder.kernels.embed`'s layout (any layout gives the same sums)
    ZT = np.asarray(Z, dtype=np.float64).T
    codes = np.asarray(codes)
    K = n_classes
    labeled = codes >= 0
    cols, row_codes = (ZT, codes) if labeled.all() else (ZT[:, labeled], codes[labeled])
    n = np.bincount(row_codes, minlength=K).astype(np.float64)
    # the temporaries in per-thread buffers (see :mod:`scalenc.math.buffers`): the class
    # indicator (K × rows, dense: the class sums are one small product) and the centred
    # columns
    indicator = scratch("stacked.indicator", (K, row_codes.size), np.float64)
    indicator.fill(0.0)
    indicator[row_codes, arange(row_codes.size)] = 1.0
    sums = matmul(np, indicator, cols.T)
    total = n.sum()
    centre = sums.sum(axis=0) / total if total else np.zeros(ZT.shape[0])
    sums -= np.outer(n, centre)  # class sums about the block mean
    centred = np.subtract(
        cols, centre[:, None], out=scratch("stacked.centred", cols.shape, np.float64)
    )
    out = []
    for m in range(n_kernels):
        own = slice(m * K, (m + 1) * K)
        part = centred[own]  # the kernel's K columns, each contiguous
        out.append(moments_about(n, centre[own], sums[:, own], matmul(np, part, part.T)))
    return tuple(out)


def stacked_log_likelihood(Z, codes, coef, intercept, n_kernels: int) -> tuple:
    """Σ log T_m(i, y_i) over a block's labeled rows, for every kernel m at once.

    ``coef`` (M·K × M·K, block diagonal) and ``intercept`` (M·K) give every kernel's K
    class scores from the stacked embedding, one product per diagonal block
    (:func:`scalenc.math.linalg.stacked_class_scores`); T_m is their softmax over each
    kernel's K classes. The scores are laid out class by row ((M, K, b), rows
    contiguous), so that the max and the sum over a kernel's K classes are element-wise
    operations on long vectors rather than reductions over short rows. The cross-entropy
    of Shen's Section 3, Step 4, is minus the total over all blocks. Row tiles of
    :func:`stacked_tile_rows` rows. NumPy totals (0-d float64), also for a device block.
    """
    xp = namespace(Z)
    tile = host_or_device(xp, _stacked_log_likelihood_on_host, _stacked_log_likelihood_on_device)
    return over_row_tiles(
        lambda z, c: tile(z, c, coef, intercept, n_kernels),
        add_tuples,
        Z,
        to_host(codes),
        tile_rows(xp, Z.shape[1]),
    )


def _stacked_log_likelihood_on_device(Z, codes, coef, intercept, n_kernels: int) -> tuple:
    """:func:`_stacked_log_likelihood_on_host` with the array API standard's calls: each
    kernel's (b, K) scores, their log-softmax over the K classes, and the labeled rows'
    own class picked by ``take_along_axis``."""
    xp = namespace(Z)
    K = coef.shape[0] // n_kernels
    Z = xp.astype(Z, xp.float64)
    codes = like(xp, codes, Z)
    labeled = codes >= 0
    own = xp.where(labeled, codes, 0)[:, None]
    totals = []
    for m in range(n_kernels):
        cols = slice(m * K, (m + 1) * K)
        scores = Z[:, cols] @ like(xp, coef[cols, cols], Z) + like(xp, intercept[cols], Z)
        picked = xp.take_along_axis(log_softmax(scores, overwrite=True), own, axis=1)[:, 0]
        totals.append(xp.sum(xp.where(labeled, picked, 0.0)))
    return tuple(np.array(v) for v in to_host(xp.stack(totals)))


def _stacked_log_likelihood_on_host(Z, codes, coef, intercept, n_kernels: int) -> tuple:
    picked = _stacked_own_log_proba(Z, codes, coef, intercept, n_kernels)
    return tuple(np.array(v) for v in picked.sum(axis=1))


def _stacked_own_log_proba(Z, codes, coef, intercept, n_kernels: int) -> np.ndarray:
    """log T_m(i, y_i) of a NumPy tile's labeled rows, (M, b)."""
    M = n_kernels
    K = coef.shape[0] // M
    codes = np.asarray(codes)
    labeled = codes >= 0
    Z = np.asarray(Z, dtype=np.float64)
    if not labeled.all():
        Z, codes = Z[labeled], codes[labeled]
    # each kernel's own K×K block of the block-diagonal coef: M·K² products per row,
    # not (M·K)²
    scores = scratch("stacked.scores", (M, K, Z.shape[0]), np.float64)  # (M, K, b)
    for m in range(M):
        cols = slice(m * K, (m + 1) * K)
        matmul(np, coef[cols, cols].T, Z[:, cols].T, out=scores[m])
    scores += intercept.reshape(M, K, 1)
    log_proba = log_softmax(scores, axis=1, overwrite=True)
    return log_proba[:, codes, np.arange(codes.size)]  # (M, b): each row's own class


#: Upper edges of the bands of whitened row length ‖x_iᵀV‖ by which
#: :func:`stacked_loss_gradients` sums its well-classified rows: a band's share of the
#: curvature bound grows as e^{2δ·edge}, so typical rows (about √(K+1) long) are not
#: charged for the longest. Rows longer than the last edge count as badly classified.
NEAR_BANDS = (2.0, 3.0, 4.0, 6.0, 12.0)

#: Rows whose odds against their own class, (1 − p_y)/p_y, are at most this count as
#: well classified in :func:`stacked_loss_gradients`.
NEAR_ODDS = 0.01

#: Well-classified rows whose odds are at most this count in
#: :func:`stacked_loss_gradients` by their squared whitened length alone.
TINY_ODDS = 1e-8
TINY_LOSS = float(np.log1p(TINY_ODDS))
NEAR_LOSS = float(np.log1p(NEAR_ODDS))  # a row's loss at most this: well classified


def stacked_loss_gradients(Z, codes, coef, intercept, whiten, n_kernels: int) -> tuple:
    """For every kernel m, what :func:`scalenc.encoder.choice.cross_entropy_bounds` needs
    of a block's labeled rows under the class scores s_i = x_iᵀ[W; b] (x_i = [z_i; 1],
    W the K×K diagonal block of ``coef``): ``"loglik"``, Σ log T_m(i, y_i);
    ``"gradient"``, Σ_i x_i (p_i − e_{y_i})ᵀ, the gradient of c_m = −Σ log T_m(i, y_i)
    in [W; b] ((K+1) × K); with r_i = (1 − p_{i,y_i}) / p_{i,y_i} the odds against the
    row's own class and ‖x_iᵀV_m‖ its whitened length (V_m = ``whiten[m]``), ``"near"``
    = Σ r_i x_i x_iᵀ over the rows with :data:`TINY_ODDS` < r_i ≤ :data:`NEAR_ODDS`, by
    band of length (:data:`NEAR_BANDS`; (bands, K+1, K+1)), ``"tiny"`` = Σ ‖x_iᵀV_m‖²
    over the rows with smaller odds, by band (bands,), and ``"far"`` =
    Σ x_i x_iᵀ over the others.
    Row tiles of :func:`stacked_tile_rows` rows; NumPy partials (sums), also for a device
    block."""
    xp = namespace(Z)
    K = coef.shape[0] // n_kernels

    def tile(z, c):
        c = to_host(c)
        labeled = np.flatnonzero(c >= 0)
        z = xp.astype(z, xp.float64, copy=False)
        if labeled.size < c.size:
            z, c = xp.take(z, like(xp, labeled, z), axis=0), c[labeled]
        b = z.shape[0]
        # rows by column: x_i = [z_i; 1] is column i of xT, (K+1, b), and each kernel's
        # scores are classes by row, (K, b), so that the softmax's max and sum over K are
        # element-wise on long vectors (as in :func:`stacked_log_likelihood`) and every
        # product below reads contiguous operands (row-major x, gathered and transposed
        # per kernel, took twice as long). The temporaries are a :class:`Workspace`'s.
        ws = Workspace(xp, "loss", z)
        own = np.multiply(c, b, out=scratch("loss.own", (b,), np.int64))
        own += arange(b)
        own = like(xp, own, z)  # each row's own class, flat in (K, b)
        xT = ws.buffer("x", (K + 1, b))
        xT[K, :] = 1.0
        out = []
        for m in range(n_kernels):
            cols = slice(m * K, (m + 1) * K)
            xT[:K, :] = z[:, cols].T
            augmented = np.concatenate([coef[cols, cols], intercept[None, cols]])  # [W; b]
            parts = _loss_gradient(ws, xT, own, augmented, whiten[m])
            out.append({key: np.asarray(to_host(value)) for key, value in parts.items()})
        return tuple(out)

    return over_row_tiles(tile, merge_partials, Z, to_host(codes), tile_rows(xp, Z.shape[1]))


def _loss_gradient(ws, xT, own, augmented, whiten) -> dict:
    """One kernel's sums of :func:`stacked_loss_gradients` over a tile's rows ``xT``
    ((K+1) × b, x_i = [z_i; 1] by column), each row's own class ``own`` (flat in (K, b)),
    the kernel's [W; b] (``augmented``) and V (``whiten``), in ``ws``'s buffers."""
    xp = ws.xp
    (K1, b), K = xT.shape, augmented.shape[1]
    weights = like(xp, np.ascontiguousarray(augmented.T), xT)
    # the log-softmax over the K classes, its exponentials kept: p_i = e_i / Σ e_i
    shifted = ws.into(xp.matmul, weights, xT, out=ws.buffer("scores", (K, b)))
    shifted -= ws.into(xp.max, shifted, axis=0, keepdims=True, out=ws.buffer("top", (1, b)))
    residual = ws.into(xp.exp, shifted, out=ws.buffer("residual", (K, b)))
    total = ws.into(xp.sum, residual, axis=0, keepdims=True, out=ws.buffer("total", (1, b)))
    residual /= total
    # −log T(i, y_i) = log Σ e_i − (s_{i,y_i} − max s_i)
    picked = gather("loss.loss", xp.reshape(shifted, (-1,)), own)
    log_total = xp.reshape(ws.into(xp.log, total, out=total), (-1,))
    loss = ws.into(xp.subtract, log_total, picked, out=picked)
    # p − e_y: ∂(−log T(i, y_i)) / ∂scores, its own class's entry p_y − 1 = expm1(−loss)
    # written (an in-place subtraction reads and writes: 2.5× slower)
    own_entry = ws.into(xp.negative, loss, out=ws.buffer("own_p", (b,)))
    residual = ws.put(residual, own, ws.into(xp.expm1, own_entry, out=own_entry))
    V = like(xp, np.ascontiguousarray(whiten.T), xT)
    whitened = ws.into(xp.matmul, V, xT, out=ws.buffer("whitened", (K1, b)))
    whitened *= whitened
    sq = ws.into(xp.sum, whitened, axis=0, keepdims=True, out=ws.buffer("sq", (1, b)))
    near_sums, tiny_sums, x_far = _near_rows(ws, xT, loss, xp.reshape(sq, (-1,)))
    return {
        "loglik": -xp.sum(loss),
        "gradient": matmul(xp, xT, residual.T),
        "near": near_sums,
        "tiny": tiny_sums,
        "far": matmul(xp, x_far, x_far.T),
    }


def _near_rows(ws, xT, loss, sq) -> tuple:
    """``"near"`` and ``"tiny"`` of :func:`stacked_loss_gradients` for a tile's rows
    ``xT`` with their losses and squared whitened lengths ``sq`` (‖L⁻¹x_i‖², whose band
    is how many edges² it exceeds), and the columns of the others (the far rows)."""
    xp = ws.xp
    reach = [edge * edge for edge in NEAR_BANDS]  # the bands' edges, squared
    bands, K1 = len(reach), xT.shape[0]
    near = (loss <= NEAR_LOSS) & (sq <= reach[-1])
    near_sums = xp.zeros((bands, K1, K1), dtype=xp.float64)
    if not bool(xp.any(near)):
        return near_sums, xp.zeros(bands, dtype=xp.float64), xT
    # the rows with odds below TINY_ODDS (most, on nearly separable classes) count by
    # Σ ‖L⁻¹x_i‖² alone, by band: the sums over the rows beyond each inner edge (one
    # product with the 0/1 rows "beyond edge k") differenced; the others by band, one
    # product per band
    tiny = near & (loss <= TINY_LOSS)
    counted = ws.masked(sq, tiny, "tiny")
    edges = like(xp, np.array(reach[:-1])[:, None], sq)
    beyond = ws.into(
        xp.greater, sq[None, :], edges, out=ws.buffer("beyond", (bands - 1, sq.shape[0]))
    )
    outer = xp.concat([xp.reshape(xp.sum(counted), (1,)), matmul(xp, beyond, counted)])
    tiny_sums = outer - xp.concat([outer[1:], xp.zeros(1, dtype=xp.float64)])
    some = xp.nonzero(near & ~tiny)[0]
    if some.shape[0]:
        band = xp.sum(xp.take(beyond, some, axis=1), axis=0)  # edges exceeded, 0 … bands − 1
        odds = xp.expm1(loss[some])
        for k in range(bands):
            mine = band == k
            if bool(xp.any(mine)):
                rows = xp.take(xT, some[mine], axis=1)
                near_sums[k, ...] = matmul(xp, rows * odds[mine], rows.T)
    return near_sums, tiny_sums, xp.take(xT, xp.nonzero(~near)[0], axis=1)


def stacked_row_losses(Z, codes, coef, intercept, n_kernels: int) -> np.ndarray:
    """−log T_m(i, y_i) for every kernel m and labeled row i of a NumPy stacked embedding,
    shape (M, labeled rows): the terms of :func:`stacked_log_likelihood`'s sums, one by
    one (the encoder's kernel choice on a sample needs their spread). Row tiles of
    :func:`stacked_tile_rows` rows.
    """
    codes = np.asarray(codes)
    rows = stacked_tile_rows(Z.shape[1])
    tiles = [
        -_stacked_own_log_proba(Z[i : i + rows], codes[i : i + rows], coef, intercept, n_kernels)
        for i in range(0, Z.shape[0], rows)
    ]
    return np.concatenate(tiles, axis=1) if tiles else np.zeros((n_kernels, 0))


def full_embedding_block(X_rows, X_cols, codes_cols, *, kernel, n_classes, counts):
    """Σ_j δ(x_i, x_j) W(j, k) over one column block: Shen's Section 2, Z = A W."""
    A = kernel(X_rows, X_cols)
    class_sums = host_or_device(namespace(A), _class_sums_on_host, _class_sums_on_device)
    return class_sums(A, codes_cols, n_classes, counts)


def _class_sums_on_host(A, codes, n_classes: int, counts):
    """Σ_j A(i, j) W(j, k): each column added to its class's (``np.add.at``)."""
    labeled = codes >= 0
    out = np.zeros((A.shape[0], n_classes))
    np.add.at(out.T, codes[labeled], A[:, labeled].T)
    return out / counts


def _class_sums_on_device(A, codes, n_classes: int, counts):
    """Σ_j A(i, j) W(j, k) as one product with the (columns × K) class indicator."""
    xp = namespace(A)
    codes = like(xp, to_host(codes), A)
    indicator = codes[:, None] == xp.arange(n_classes, device=device_of(A))[None, :]
    return (A @ xp.astype(indicator, xp.float64)) / like(xp, counts, A)


def linear_embedding_moments(moments: dict) -> dict:
    """The linear kernel's embedding statistics from X's class moments, with no pass.

    Z = X Uᵀ with U the class means, so the class means of Z are U Uᵀ and its within-class
    scatter is U S_w Uᵀ (S_w the within-class scatter of X): Shen's one-pass linear fit.
    """
    U, Sw = moments["mean"], moments["scatter"]
    return {"n": moments["n"], "mean": U @ U.T, "scatter": U @ Sw @ U.T}


def choose_kernel(cross_entropy: np.ndarray, min_improvement: float) -> int:
    """Index of the kernel chosen by Shen's rule.

    The first kernel is the benchmark; another replaces it only if its cross-entropy is
    at most ``(1 − min_improvement)`` times the benchmark's, and then the smallest such
    cross-entropy wins. With one kernel (or NaN cross-entropies) the first is chosen.

    Examples
    --------
    >>> from scalenc.encoder.blocks import choose_kernel
    >>> choose_kernel([10.0, 7.5, 8.0], min_improvement=0.3)  # 25 % better: not enough
    0
    >>> choose_kernel([10.0, 7.0, 6.0], min_improvement=0.3)  # both qualify: smallest wins
    2
    """
    ce = np.asarray(cross_entropy, dtype=float)
    if ce.size <= 1 or np.isnan(ce).all():
        return 0
    threshold = (1.0 - min_improvement) * ce[0]
    better = np.flatnonzero(ce <= threshold)
    better = better[better > 0]
    if better.size == 0:
        return 0
    return int(better[np.argmin(ce[better])])
