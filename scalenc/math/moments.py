"""Class moments of a row block, their merges, and the checks of a block's values.

Nothing here imports dask. Every function takes one row block (a NumPy array, or a device
array such as CuPy's: see :mod:`scalenc.math.xp`) and returns a small partial result:
class counts, class means and pooled within-class scatter matrices, accumulated in
float64 whatever the input dtype (a float32 block's scatter, and with it the class sums,
come from float32 products over row tiles, each added to the float64 total: see
:func:`class_moments`). Partials of two blocks are merged with :func:`merge_moments`,
which is associative, so the passes can combine them in any tree order and get the same
result to rounding.

Class moments use Chan, Golub & LeVeque's pairwise update (means and centred scatter,
not raw sums of squares), so merging many blocks does not lose precision to
cancellation when class means are large compared to the spread within a class.

A device block's class moments (:func:`class_moments` on a non-NumPy block) are one
float64 product with a dense class indicator per tile of
:data:`~scalenc.math.xp.DEVICE_TILE_ELEMENTS`, written with the array API standard; the
small results (K×d, d×d) come back to NumPy for the merges, which only ever see NumPy.
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.sparse as sp

from scalenc.exceptions import InputError
from scalenc.math.buffers import scratch
from scalenc.math.tiles import over_row_tiles
from scalenc.math.xp import (
    device_of,
    host_or_device,
    host_tree,
    like,
    matmul,
    namespace,
    tile_elements,
    to_host,
)

__all__ = [
    "class_moments",
    "moments_about",
    "merge_moments",
    "merge_partials",
    "combine_partials",
    "count_nonfinite",
    "check_finite",
    "magnitude_limit",
    "check_magnitude",
    "checked_class_moments",
    "onehot",
    "centred_class_sums",
    "device_tile_rows",
]


def onehot(codes: np.ndarray, n_classes: int) -> sp.csr_matrix:
    """Sparse K×b indicator of the labeled rows of a block (codes < 0 are unlabeled)."""
    rows = np.flatnonzero(codes >= 0)
    data = np.ones(rows.size)
    return sp.csr_matrix((data, (codes[rows], rows)), shape=(n_classes, codes.size))


def class_moments(
    X: np.ndarray,
    codes: np.ndarray,
    n_classes: int,
    *,
    scatter: bool = True,
    sqnorm: bool = False,
    check_finite: bool = False,
) -> dict[str, np.ndarray]:
    """Class counts, class means and pooled within-class scatter of one block.

    Parameters
    ----------
    X : ndarray of shape (b, d)
        One row block (any float dtype; the statistics are float64).
    codes : ndarray of shape (b,)
        Class codes 0..K-1, or -1 for an unlabeled row (ignored).
    n_classes : int
        K.
    scatter : bool
        Also return the pooled within-class scatter
        ``S_w = Σ_k Σ_{y_i=k} (x_i - μ_k)(x_i - μ_k)ᵀ`` (d×d).
    sqnorm : bool
        Also return the per-class sums of squared row norms Σ_{y_i=k} ‖x_i‖² (K,).
    check_finite : bool
        Also return ``all_finite``: True when every row of the block was seen to be finite
        on the way (from float64 column totals, which cannot overflow for float32 rows),
        False when that is not known — then :func:`count_nonfinite` must decide.

    Precision: float64 blocks, and the class sums without ``scatter`` or with ``sqnorm``,
    are float64 throughout. A float32 block with ``scatter`` (and no ``sqnorm``) takes the
    scatter and the class sums from one float32 product per tile of centred rows: their
    error is float32 rounding relative to the spread of the data (≈ 1e-8 of a feature's
    standard deviation for the means), about what the float32 values themselves carry.

    Returns
    -------
    dict with ``n`` (K,), ``mean`` (K, d) and, if asked, ``scatter`` (d, d),
    ``sqnorm`` (K,) and ``all_finite``.
    A class with no row in the block has count 0 and mean 0. Always NumPy arrays, also
    for a device block (whose moments are float64 throughout, and always say
    ``all_finite`` exactly: see :func:`centred_class_sums`).
    """
    moments = host_or_device(namespace(X), _class_moments_on_host, _class_moments_on_device)
    return moments(X, codes, n_classes, scatter=scatter, sqnorm=sqnorm, check_finite=check_finite)


def _class_moments_on_host(X, codes, n_classes, *, scatter, sqnorm, check_finite) -> dict:
    """:func:`class_moments` of a NumPy block: a float64 copy of the labeled rows centred
    at their mean, or float32 products per tile (:func:`_float32_moments`), or the class
    sums alone (:func:`_class_sums`)."""
    codes = np.asarray(codes)
    labeled = codes >= 0
    n = np.bincount(codes[labeled], minlength=n_classes).astype(np.float64)
    all_labeled = bool(labeled.all())
    if scatter and np.asarray(X).dtype == np.float32:
        return _float32_moments(X, codes, n, labeled, all_labeled, sqnorm, check_finite)
    if scatter:
        # one float64 copy of the labeled rows, centred in place at their block mean m;
        # S_w = Cᵀ C − Σ_k n_k (μ_k − m)(μ_k − m)ᵀ avoids gathering μ_{y_i} for every row
        indicator = onehot(codes, n_classes)
        if not all_labeled:
            indicator = indicator[:, labeled]
        centred = np.array(X if all_labeled else X[labeled], dtype=np.float64, copy=True)
        sums = np.asarray(indicator @ centred)
        total = n.sum()
        block_mean = sums.sum(axis=0) / total if total else np.zeros(centred.shape[1])
        sums -= np.outer(n, block_mean)  # class sums of the centred rows
        centred -= block_mean
        out = moments_about(n, block_mean, sums, matmul(np, centred.T, centred))
        if sqnorm:
            centred += block_mean
            out["sqnorm"] = indicator @ np.einsum("ij,ij->i", centred, centred)
        if check_finite:
            out["all_finite"] = False
        return out
    sums, sq, all_finite = _class_sums(np.asarray(X), codes, n_classes, sqnorm, check_finite)
    mean = np.divide(sums, n[:, None], out=np.zeros_like(sums), where=n[:, None] > 0)
    out = {"n": n, "mean": mean}
    if sqnorm:
        out["sqnorm"] = sq
    if check_finite:
        out["all_finite"] = all_finite
    return out


def _class_moments_on_device(X, codes, n_classes, *, scatter, sqnorm, check_finite) -> dict:
    """:func:`class_moments` of a device block: tiles of :func:`centred_class_sums`,
    merged on the host by Chan's update."""
    all_finite = True

    def tile(x, c):
        nonlocal all_finite
        blocks = (slice(None),) if scatter else ()
        part = centred_class_sums(x, c, n_classes, blocks=blocks, sqnorm=sqnorm)
        all_finite = all_finite and part["all_finite"]
        d = part["centre"].size
        out = moments_about(
            part["n"],
            part["centre"],
            part["sums"],
            part["scatters"][0] if scatter else np.zeros((d, d)),
        )
        if not scatter:
            del out["scatter"]
        if sqnorm:
            out["sqnorm"] = part["sqnorm"]
        return out

    rows = device_tile_rows(namespace(X), max(X.shape[1], n_classes))
    out = over_row_tiles(tile, merge_moments, X, to_host(codes), rows)
    if check_finite:
        out["all_finite"] = all_finite
    return out


def device_tile_rows(xp, width: int) -> int:
    """Rows of a device tile whose temporaries (rows × ``width`` float64) hold about
    :data:`~scalenc.math.xp.DEVICE_TILE_ELEMENTS` elements."""
    return max(1, tile_elements(xp, SUMS_TILE) // max(width, 1))


def centred_class_sums(
    X, codes, n_classes: int, *, blocks=(slice(None),), sqnorm: bool = False
) -> dict:
    """The class sums and scatters of a device block's labeled rows about their mean,
    with the array API standard's calls; NumPy results.

    One float64 product of the K×b class indicator (``codes == arange(K)``) with the
    block gives the counts, the class sums and the labeled rows' mean c; the scatter
    Σ(x−c)(x−c)ᵀ is taken for each column slice in ``blocks`` (the whole row by default;
    each kernel's K columns of a stacked embedding). Unlabeled rows are set to 0 before
    any product, so that their values (NaN included) count nowhere.

    Returns a dict of NumPy arrays: ``n`` (K,), ``centre`` c (d,), ``sums`` Σ(x−c) per
    class (K×d), ``scatters`` (one per slice), with ``sqnorm`` Σ‖x‖² per class (K,), and
    ``all_finite`` (whether every value of the block, unlabeled rows included, is finite).
    """
    xp = namespace(X)
    X = xp.astype(X, xp.float64, copy=False)
    codes = like(xp, to_host(codes), X)
    labeled = codes >= 0
    all_finite = bool(xp.all(xp.isfinite(X)))
    X = xp.where(labeled[:, None], X, 0.0)
    indicator = xp.astype(
        codes[None, :] == xp.arange(n_classes, device=device_of(X))[:, None], xp.float64
    )
    n = xp.sum(indicator, axis=1)
    sums = indicator @ X
    centre = xp.sum(sums, axis=0) / xp.maximum(xp.sum(n), 1.0)
    sums -= n[:, None] * centre  # about the centre
    out = {"n": n, "centre": centre, "sums": sums, "scatters": []}
    if sqnorm:
        out["sqnorm"] = indicator @ xp.sum(X * X, axis=1)
    if blocks:
        centred = xp.where(labeled[:, None], X - centre, 0.0)
        for cols in blocks:
            part = centred[:, cols]
            out["scatters"].append(part.T @ part)
    out = host_tree(out)
    out["all_finite"] = all_finite
    return out


SCATTER_TILE = 4096
#: Above K = this · d, a float32 block's class sums are not taken from the augmented
#: scatter product (:func:`_float32_moments`): K² float32 products per row against 2Kd
#: float64 ones, a float64 product costing about twice a float32 one on this machine's
#: BLAS (177 against 360 GFLOP/s, benchmarks/README.md): K² < 4Kd.
AUGMENT_MAX_CLASSES_PER_FEATURE = 4
SUMS_TILE = 512
#: Elements of a tile of :func:`_class_sums` (at least :data:`SUMS_TILE` rows): 1 MB of
#: float64. With 512-row tiles at p ≤ 50 the tiles' small products and copies ran no
#: faster on two threads than on one (at p = 16 slower: 17 against 12 ms for eight
#: 32 768-row blocks); with 2¹⁷-element tiles 6 and 14 ms at p = 16 and 50 (24.5 before),
#: the same at p ≥ 256 (benchmarks/README.md, "Roofline").
SUMS_TILE_ELEMENTS = 2**17
#: From this many classes on, class sums come from a sparse indicator
#: (:func:`_class_sums_sparse`), in tiles of ``SPARSE_SUMS_TILE`` rows.
SPARSE_SUMS_MIN_CLASSES = 32
SPARSE_SUMS_TILE = 32768


def _as_float64(tile: np.ndarray) -> np.ndarray:
    """A float64 view or copy of a row tile; a copy goes to a per-thread scratch buffer."""
    if tile.dtype == np.float64:
        return tile
    out = scratch("moments.float64", tile.shape, np.float64)
    out[...] = tile
    return out


def _class_sums(X, codes, n_classes, sqnorm, check_finite):
    """Per-class sums of the labeled rows (K×d, float64), a tile of about
    :data:`SUMS_TILE_ELEMENTS` elements (at least ``SUMS_TILE`` rows) at a time; with
    ``sqnorm`` the per-class sums of squared row norms; with ``check_finite`` whether every
    row (labeled or not) is finite.

    The float64 copy of a tile (1 MB) stays in L2 and a dense indicator makes the sums one
    BLAS product per tile. For ``check_finite`` the indicator has one more row of ones: the
    column totals of all the tile's rows, which NaN or ±inf anywhere makes non-finite
    under any summation order (float32 rows summed in float64 cannot overflow; for float64
    rows an overflow only sends the caller to :func:`count_nonfinite`).
    """
    if n_classes >= SPARSE_SUMS_MIN_CLASSES:
        return _class_sums_sparse(X, codes, n_classes, sqnorm, check_finite)
    sums = np.zeros((n_classes, X.shape[1]))
    sq = np.zeros(n_classes)
    all_finite = True
    classes = np.arange(n_classes + 1 if check_finite else n_classes)[:, None]
    rows = max(SUMS_TILE, SUMS_TILE_ELEMENTS // max(X.shape[1], 1))
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/inf rows: the caller counts them
        for start in range(0, X.shape[0], rows):
            tile = _as_float64(X[start : start + rows])
            indicator = (codes[start : start + rows] == classes).astype(np.float64)
            if check_finite:
                indicator[n_classes] = 1.0  # the row of totals over every row of the tile
            part = matmul(np, indicator, tile)
            sums += part[:n_classes]
            if check_finite:
                all_finite = all_finite and bool(np.isfinite(part[n_classes]).all())
            if sqnorm:
                sq += matmul(np, indicator[:n_classes], np.einsum("ij,ij->i", tile, tile))
    return sums, sq, all_finite


def _class_sums_sparse(X, codes, n_classes, sqnorm, check_finite):
    """:func:`_class_sums` for many classes: a sparse K×rows indicator (one entry per
    labeled row, no sort needed in CSC form) times each float64 tile, d additions a row
    whatever K, where the dense indicator product costs 2Kd multiply-adds in small,
    inefficient products (3× faster for K = 100, measured for d = 16 to 1024). The column
    totals for ``check_finite`` and the squared norms are separate float64 reductions."""
    sums = np.zeros((n_classes, X.shape[1]))
    sq = np.zeros(n_classes)
    all_finite = True
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/inf rows: the caller counts them
        for start in range(0, X.shape[0], SPARSE_SUMS_TILE):
            tile = X[start : start + SPARSE_SUMS_TILE]
            tile_codes = codes[start : start + SPARSE_SUMS_TILE]
            labeled = tile_codes >= 0
            indptr = np.zeros(tile.shape[0] + 1, dtype=np.int64)
            np.cumsum(labeled, out=indptr[1:])
            indicator = sp.csc_matrix(
                (np.ones(int(indptr[-1])), tile_codes[labeled], indptr),
                shape=(n_classes, tile.shape[0]),
            )
            tile64 = np.asarray(tile, dtype=np.float64)
            sums += indicator @ tile64
            if check_finite:
                totals = np.add.reduce(tile64, axis=0)
                all_finite = all_finite and bool(np.isfinite(totals).all())
            if sqnorm:
                norms = np.einsum("ij,ij->i", tile64, tile64)
                sq += np.bincount(tile_codes[labeled], norms[labeled], minlength=n_classes)
    return sums, sq, all_finite


def _float32_moments(X, codes, n, labeled, all_labeled, sqnorm, check_finite):
    """Class moments of a float32 block from float32 products over tiles of
    ``SCATTER_TILE`` rows, each added to a float64 total.

    Each tile's labeled rows, less a centre c (the first tile's mean, as float32), are
    augmented with their K class-indicator columns; one symmetric product of that
    (rows × (d+K)) matrix gives the centred scatter Σ(x−c)(x−c)ᵀ and the class sums
    Σ(x−c) together. Centring keeps the float32 sums exact in their leading digits when
    the means are large against the spread; rounding is bounded by the tile (≈ √4096 ·
    6e-8 ≈ 4e-6 relative to the spread per tile), at half the memory traffic and twice
    the BLAS rate of float64, and with no separate pass for the class sums.

    With ``sqnorm`` (not in that product), or with many classes for few features
    (K > ``AUGMENT_MAX_CLASSES_PER_FEATURE`` · d: the K indicator columns would add K²
    float32 products per row where a float64 indicator product costs 2Kd), the class
    sums (and squared norms) come from float64 tiles instead (:func:`_class_sums`), and
    the product is of the centred rows only.
    """
    K, n_cols = n.size, X.shape[1]
    rows = X if all_labeled else X[labeled]
    row_codes = codes if all_labeled else codes[labeled]
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/inf rows: the caller counts them
        if sqnorm or K > AUGMENT_MAX_CLASSES_PER_FEATURE * n_cols:
            sums, sq, all_finite = _class_sums(X, codes, K, sqnorm, check_finite)
            total = n.sum()
            centre = (sums.sum(axis=0) / total if total else np.zeros(n_cols)).astype(np.float32)
            scatter = _centred_gram(rows, row_codes, centre, 0)
            sums -= np.outer(n, centre.astype(np.float64))  # about the centre
        else:
            head = rows[:SCATTER_TILE]
            centre = np.add.reduce(head, axis=0, dtype=np.float64) / max(head.shape[0], 1)
            centre = centre.astype(np.float32)
            gram = _centred_gram(rows, row_codes, centre, K)
            scatter, sums = gram[:n_cols, :n_cols], gram[n_cols:, :n_cols]
            # NaN/inf in a labeled row makes its diagonal non-finite (so may a square
            # beyond float32's range: then count_nonfinite decides); unlabeled rows here
            all_finite = check_finite and bool(np.isfinite(np.diagonal(gram)).all())
            if all_finite and not all_labeled:
                all_finite = bool(np.isfinite(X[~labeled]).all())
    out = moments_about(n, centre.astype(np.float64), sums, scatter)
    if sqnorm:
        out["sqnorm"] = sq
    if check_finite:
        out["all_finite"] = all_finite
    return out


def _centred_gram(rows, row_codes, centre, n_classes):
    """Σ aᵢaᵢᵀ over the rows, aᵢ = [xᵢ − c, one-hot(yᵢ) (K columns)], as float32 products
    over tiles of ``SCATTER_TILE`` rows summed in float64; (d+K)×(d+K)."""
    n_rows, n_cols = rows.shape
    width = n_cols + n_classes
    classes = np.arange(n_classes, dtype=row_codes.dtype)
    gram = np.zeros((width, width))
    for start in range(0, n_rows, SCATTER_TILE):
        tile = rows[start : start + SCATTER_TILE]
        aug = scratch("moments.augmented", (tile.shape[0], width), np.float32)
        np.subtract(tile, centre, out=aug[:, :n_cols])
        if n_classes:
            np.equal(row_codes[start : start + SCATTER_TILE, None], classes, out=aug[:, n_cols:])
        gram += matmul(np, aug.T, aug)
    return gram


def moments_about(n, centre, sums, scatter):
    """Class moments from the class sums Σ(x−c) (K×d) and the pooled scatter
    Σ(x−c)(x−c)ᵀ (d×d) of the labeled rows about a centre c."""
    shifted = np.divide(sums, n[:, None], out=np.zeros_like(sums), where=n[:, None] > 0)
    scatter = scatter - (shifted * n[:, None]).T @ shifted  # μ_k − c = shifted
    mean = np.where(n[:, None] > 0, shifted + centre, 0.0)
    return {"n": n, "mean": mean, "scatter": scatter}


def merge_moments(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Merge two class-moment partials (Chan et al.'s pairwise update).

    Keys other than ``n``, ``mean`` and ``scatter`` are summed.
    """
    n = a["n"] + b["n"]
    delta = b["mean"] - a["mean"]
    frac = np.divide(b["n"], n, out=np.zeros_like(n), where=n > 0)
    out = {"n": n, "mean": a["mean"] + delta * frac[:, None]}
    if "scatter" in a:
        weight = np.divide(a["n"] * b["n"], n, out=np.zeros_like(n), where=n > 0)
        out["scatter"] = a["scatter"] + b["scatter"] + (delta * weight[:, None]).T @ delta
    for key in a.keys() - {"n", "mean", "scatter"}:
        out[key] = merge_partials(a[key], b[key])
    return out


def merge_partials(a, b):
    """Merge two partials of any pass.

    Class-moment dicts (keys ``n`` and ``mean``) merge by :func:`merge_moments`; other
    dicts, tuples and lists merge key by key; arrays and numbers are summed.
    """
    if isinstance(a, dict) and "n" in a and "mean" in a:
        return merge_moments(a, b)
    if isinstance(a, dict):
        return {key: merge_partials(a[key], b[key]) for key in a}
    if isinstance(a, (tuple, list)):
        return type(a)(merge_partials(x, y) for x, y in zip(a, b))
    return a + b


def combine_partials(*partials):
    """Merge any number of partials (one node of a tree reduction)."""
    return functools.reduce(merge_partials, partials)


def checked_class_moments(X, codes, n_classes, *, scatter, sqnorm) -> dict:
    """:func:`class_moments` of a block that may hold NaN/inf, with their count.

    Returns the moments plus ``nonfinite`` (NaN/inf entries of the block) and ``rows``.
    The float32 and scatter-free paths see every value on the way and say whether all
    were finite; otherwise (or when some were not) the entries are counted. Non-finite
    entries are read as 0 so the statistics stay finite until the caller refuses X.
    """
    xp = namespace(X)
    out = None
    # these paths see every row's values anyway (a device block's always does)
    if not scatter or xp is not np or X.dtype == np.float32:
        out = class_moments(X, codes, n_classes, scatter=scatter, sqnorm=sqnorm, check_finite=True)
    all_finite = out is not None and out.pop("all_finite")
    nonfinite = 0 if all_finite else count_nonfinite(X)
    if nonfinite:  # the fit will refuse X; keep the statistics finite until then
        X = xp.where(xp.isfinite(X), X, 0.0)
        out = None
    if out is None:
        with np.errstate(over="ignore", invalid="ignore"):
            out = class_moments(X, codes, n_classes, scatter=scatter, sqnorm=sqnorm)
    if not all_finite and not nonfinite and not all(np.isfinite(v).all() for v in out.values()):
        check_magnitude(X)  # finite values whose products overflowed: name them
    out["nonfinite"] = nonfinite
    out["rows"] = X.shape[0]
    return out


def merge_moment_tuples(a: tuple, b: tuple) -> tuple:
    """Merge two tuples of per-kernel class moments, kernel by kernel."""
    return tuple(merge_moments(x, y) for x, y in zip(a, b))


def check_finite(X, *, magnitude: bool = True) -> None:
    """Refuse a block holding NaN or infinite values and, with ``magnitude``, values too
    large for its dtype's statistics, as ``fit`` refuses them (:func:`check_magnitude`;
    CCDR's fit and outputs work in float64 and take them): the per-block check of every
    output map; any array of the array API (:func:`count_nonfinite`)."""
    bad = count_nonfinite(X)
    if bad:
        raise InputError(
            f"X contains {bad} NaN or infinite value(s) in a block of {X.shape[0]} rows; "
            "impute or drop them before predicting or transforming."
        )
    xp = namespace(X)
    if magnitude and X.size and xp.isdtype(X.dtype, "real floating"):
        # two reductions without a temporary (finite values: NaN was refused above)
        high, low = to_host(xp.max(X)), to_host(xp.min(X))  # NumPy, in X's dtype
        if max(float(high), -float(low)) > magnitude_limit(high.dtype):
            check_magnitude(X)  # names the column and the value


def magnitude_limit(dtype) -> float:
    """The largest |x| whose square the dtype holds: second-order statistics (scatters,
    distances, Gram matrices) of larger values overflow or lose every other row's digits."""
    return float(np.sqrt(np.finfo(dtype).max))


def check_magnitude(X: np.ndarray) -> None:
    """Refuse a block holding a finite value too large for its dtype's statistics
    (:func:`magnitude_limit`), naming the column and the value."""
    xp = namespace(X)
    if not xp.isdtype(X.dtype, "real floating") or X.size == 0:
        return
    with np.errstate(invalid="ignore"):
        # the column peaks (p values) come to the host, in X's dtype
        peaks = to_host(xp.max(xp.where(xp.isfinite(X), xp.abs(X), 0.0), axis=0))
    limit = magnitude_limit(peaks.dtype)
    if np.any(peaks > limit):
        column = int(np.argmax(peaks))
        raise too_large(column, f"holds {peaks[column]:.3g}", peaks.dtype)


def too_large(column: int, what: str, dtype) -> InputError:
    """The error for a column whose values are too large for ``dtype``'s statistics."""
    return InputError(
        f"X column {column} {what}, too large for {np.dtype(dtype)} statistics: squares of "
        f"values beyond {magnitude_limit(dtype):.3g} overflow. Scale or clip that feature "
        "(e.g. sklearn.preprocessing.RobustScaler), drop the rows, or cast X to float64."
    )


def count_nonfinite(X) -> int:
    """Number of NaN or infinite entries of a block (NumPy or any array API array)."""
    xp = namespace(X)
    if xp.isdtype(X.dtype, "integral"):
        return 0
    return int(X.size - xp.count_nonzero(xp.isfinite(X)))
