"""Kernels δ(x, u) between the rows of a data block and the K class means U.

A kernel maps a block ``X`` (b×p) and ``U`` (K×p) to the embedding block
``Z = δ(X, U)`` (b×K) in float64. Blocks may be NumPy arrays or device arrays (CuPy's on
a GPU: :mod:`scalenc.math.xp`): ``U`` is moved to the block's device, and the kernels are
written with the array API standard's calls, NumPy keeping its own faster routines
(``einsum``, scratch buffers, the float32 rank sort) where it has them. Kernels are
looked up by name in :data:`KERNELS`; a user callable ``f(X_block, U) -> (b, K)`` is
wrapped as a :class:`CallableKernel`.

:func:`embed` evaluates several kernels on a block a row tile at a time, and the work they
share — the float64 copy of the tile, the product X·Uᵀ, the squared distances — is done
once per tile (a :class:`Tile` computes each on first use).

==============  ===========================================================  ===========
name            δ(x, u)                                                      parameters
==============  ===========================================================  ===========
``linear``      ⟨x, u⟩ (Shen's inner product)
``euclidean``   −‖x − u‖ (the distance-induced kernel; LDA is affine-
                invariant, so −d serves for Shen's "max − d" transform)
``spearman``    Spearman rank correlation of the vectors x and u
``gaussian``    exp(−‖x − u‖² / (2σ²))                                       ``sigma``
==============  ===========================================================  ===========
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from scalenc.exceptions import InputError
from scalenc.math import buffers
from scalenc.math.distances import row_sq_norms, sq_distances_from_inner
from scalenc.math.xp import (
    as_block,
    device_of,
    host_or_device,
    like,
    namespace,
    rows_per_tile,
    to_host,
)

__all__ = [
    "Kernel",
    "Linear",
    "Euclidean",
    "Spearman",
    "Gaussian",
    "CallableKernel",
    "KERNELS",
    "get_kernel",
    "squared_distances",
    "average_ranks",
    "embed",
    "Means",
    "Tile",
]


def squared_distances(X: np.ndarray, U: np.ndarray) -> np.ndarray:
    """‖x_i − u_j‖² for the rows of X (b×p) and U (K×p), in float64, clipped at 0.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [1.0, 2.0], [3.0, 1.0]])
    >>> U = np.array([[0.0, 0.0], [1.0, 1.0]])
    >>> from scalenc.encoder.kernels import squared_distances
    >>> squared_distances(X, U)
    array([[ 0.,  2.],
           [ 5.,  1.],
           [10.,  4.]])
    """
    return Tile(X, Means(U, X)).sq_distances


#: Elements (rows × features) per row tile in :func:`embed`: every per-tile temporary
#: stays in L2 cache (256 rows of 256 features). Wide rows get at least
#: :data:`EMBED_MIN_TILE_ROWS` rows a tile (up to :data:`EMBED_MAX_TILE_ELEMENTS`): a tile
#: of 32 rows of 1024 features paid its per-tile calls, and the three kernels ran 14 %
#: faster with 256 rows (p = 256: 9 %). 2¹⁶ rather than 2¹⁵ elements: the linear and
#: euclidean kernels 6–13 % less CPU at p = 16–50, the three kernels 5–13 % (one thread,
#: K = 5 and 10, median of 7; 2¹⁷ was slower for three kernels at p = 16, K = 10).
EMBED_TILE_ELEMENTS = 2**16
EMBED_MIN_TILE_ROWS = 256
EMBED_MAX_TILE_ELEMENTS = 2**18


def embed_tile_rows(n_features: int) -> int:
    """Rows of one row tile of :func:`embed` for rows of ``n_features``.

    Examples
    --------
    >>> from scalenc.encoder.kernels import embed_tile_rows
    >>> embed_tile_rows(16), embed_tile_rows(256), embed_tile_rows(1024)
    (4096, 256, 256)
    """
    p = max(n_features, 1)
    return max(1, EMBED_TILE_ELEMENTS // p, min(EMBED_MIN_TILE_ROWS, EMBED_MAX_TILE_ELEMENTS // p))


class Means:
    """The class means U (K×p) and what kernels derive from them, computed once per block.

    Each derived array is computed on first use and kept.

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc.encoder.kernels import Means
    >>> means = Means(np.array([[0.0, 0.0], [1.0, 1.0]], dtype=np.float32))
    >>> means.u64.dtype, means.sq_norms
    (dtype('float64'), array([0., 2.]))
    >>> Means(np.array([[1.0, 3.0, 2.0]])).centred_ranks.round(3)
    array([[-0.707,  0.707,  0.   ]])
    """

    def __init__(self, U, like_block=None):
        #: The namespace of the block the means meet (``numpy`` without one).
        self.xp = namespace(like_block)
        self.U = like(self.xp, as_block(self.xp, U), like_block)

    @functools.cached_property
    def u64(self):
        """U in float64."""
        return self.xp.astype(self.U, self.xp.float64, copy=False)

    @functools.cached_property
    def sq_norms(self):
        """‖u_k‖² per class, float64."""
        return row_sq_norms(self.u64)

    @functools.cached_property
    def centred_ranks(self) -> np.ndarray:
        """Row-wise average ranks, centred and scaled to unit norm (Spearman's U side)."""
        return _centre_and_scale(average_ranks(self.U))


class Tile:
    """A row tile of X with the class means, and the products its kernels share.

    Each product is computed on first use and kept for the other kernels of the tile; the
    float64 copy of a NumPy X lives in a per-thread scratch buffer (valid until the next
    tile). A device tile's :class:`Means` must be on its device (``Means(U, X)``).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [1.0, 2.0], [3.0, 1.0]])
    >>> U = np.array([[0.0, 0.0], [1.0, 1.0]])
    >>> from scalenc.encoder.kernels import Means, Tile
    >>> tile = Tile(X, Means(U))
    >>> tile.inner  # X Uᵀ
    array([[0., 0.],
           [0., 3.],
           [0., 4.]])
    >>> tile.sq_distances
    array([[ 0.,  2.],
           [ 5.,  1.],
           [10.,  4.]])
    """

    def __init__(self, X, means: Means):
        self.xp = namespace(X)
        self.X = as_block(self.xp, X)
        self.means = means

    @property
    def U(self) -> np.ndarray:
        """The class means U (K×p), as given to :class:`Means`.

        Examples
        --------
        >>> import numpy as np
        >>> from scalenc.encoder.kernels import Means, Tile
        >>> Tile(np.ones((3, 2)), Means(np.eye(2))).U
        array([[1., 0.],
               [0., 1.]])
        """
        return self.means.U

    @functools.cached_property
    def x64(self) -> np.ndarray:
        """The tile's rows in float64 (X itself when it is float64 already)."""
        return buffers.scratch_astype("tile.x64", self.X, np.float64)

    @functools.cached_property
    def inner(self) -> np.ndarray:
        """X·Uᵀ in float64."""
        return self.x64 @ self.means.u64.T

    @functools.cached_property
    def sq_distances(self) -> np.ndarray:
        """‖x_i − u_j‖² (:func:`scalenc.math.neighbors.sq_distances_from_inner`), clipped at 0."""
        return sq_distances_from_inner(self.inner, row_sq_norms(self.x64), self.means.sq_norms)


def embed(kernels, X: np.ndarray, U: np.ndarray) -> np.ndarray:
    """[δ_1(X, U) | … | δ_M(X, U)] for one block, shape (b, M·K), float64.

    Computed a row tile at a time; within a tile the kernels share the float64 copy, X·Uᵀ
    and the squared distances, and across tiles what they derive from U.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [1.0, 2.0], [3.0, 1.0]])
    >>> U = np.array([[0.0, 0.0], [1.0, 1.0]])
    >>> from scalenc.encoder.kernels import Euclidean, Linear, embed
    >>> Z = embed([Linear(), Euclidean()], X, U)  # K columns per kernel
    >>> Z.shape
    (3, 4)
    >>> bool(np.allclose(Z[:, 2:], Euclidean()(X, U)))
    True
    """
    xp = namespace(X)
    X = as_block(xp, X)
    means = Means(U, X)
    K = means.U.shape[0]
    out = xp.empty((X.shape[0], len(kernels) * K), dtype=xp.float64, device=device_of(X))
    tiled = [m for m, kernel in enumerate(kernels) if kernel.tiled]
    for m, kernel in enumerate(kernels):
        if not kernel.tiled:  # a user function sees the whole block, once
            out[:, m * K : (m + 1) * K] = kernel(X, means.U)
    # a device tile's temporaries: rows × p and rows × K
    width = max(X.shape[1], K, 1)
    rows = rows_per_tile(xp, embed_tile_rows(X.shape[1]), width, host_elements=EMBED_TILE_ELEMENTS)
    for start in range(0, X.shape[0] if tiled else 0, rows):
        stop = min(start + rows, X.shape[0])
        tile = Tile(X[start:stop, ...], means)
        for m in tiled:
            out[start:stop, m * K : (m + 1) * K] = kernels[m].tile(tile)
    return out


def average_ranks(A: np.ndarray) -> np.ndarray:
    """Row-wise ranks 1..p, ties given their average rank (as ``scipy.stats.rankdata``).

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import rankdata
    >>> from scalenc.encoder.kernels import average_ranks
    >>> A = np.array([[3.0, 1.0, 3.0, 2.0], [0.5, 0.25, 0.75, 1.0]])
    >>> average_ranks(A)
    array([[3.5, 1. , 3.5, 2. ],
           [2. , 1. , 3. , 4. ]])
    >>> bool((average_ranks(A) == rankdata(A, axis=1)).all())
    True
    """
    return host_or_device(namespace(A), _average_ranks_on_host, _average_ranks_on_device)(A)


def _average_ranks_on_host(A):
    """:func:`average_ranks` of a NumPy block (:func:`_ranks_and_tied_rows`)."""
    return _ranks_and_tied_rows(A)[0]


def _average_ranks_on_device(A):
    """:func:`average_ranks` with the array API standard's calls (a device block's ranks).

    Each row is sorted (``argsort``); its runs of equal values are numbered by a
    cumulative sum of where the sorted values change, and each run's first and last
    positions found by one ``searchsorted`` of those numbers, made increasing over the
    whole flattened array by a per-row offset. A run's average rank goes back to the
    row's columns through the inverse permutation (a second ``argsort``).
    """
    xp = namespace(A)
    n_rows, n_cols = A.shape
    if A.size == 0:
        return xp.zeros((n_rows, n_cols), dtype=xp.float64, device=device_of(A))
    order = xp.argsort(A, axis=1, stable=True)
    sorted_values = xp.take_along_axis(A, order, axis=1)
    first = xp.ones((n_rows, 1), dtype=xp.int64, device=device_of(A))
    change = xp.astype(sorted_values[:, 1:] != sorted_values[:, :-1], xp.int64)
    runs = xp.cumulative_sum(xp.concat([first, change], axis=1), axis=1)  # 1..p in each row
    offset = xp.arange(n_rows, dtype=xp.int64, device=device_of(A))[:, None] * (n_cols + 1)
    keys = xp.reshape(runs + offset, (-1,))
    start = xp.searchsorted(keys, keys, side="left")  # flat positions of each run's ends
    stop = xp.searchsorted(keys, keys, side="right")
    row_start = xp.reshape(xp.arange(n_rows, dtype=xp.int64, device=device_of(A)) * n_cols, (-1, 1))
    ranks = xp.reshape(xp.astype(start + stop + 1, xp.float64) / 2.0, (n_rows, n_cols))
    ranks -= xp.astype(row_start, xp.float64)
    return xp.take_along_axis(ranks, xp.argsort(order, axis=1), axis=1)


def _ranks_and_tied_rows(
    A: np.ndarray, *, scratch: bool = False, as_float64: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks of each row (float64), and the indices of the rows that have ties.

    Rows are ranked in their own dtype: float32 rows (the usual on-disk dtype) by one sort
    of float64 keys that carry their index, other dtypes by an argsort. Rows with ties (a
    few per thousand in continuous float32 data) are then re-ranked alone with average
    ranks. ``scratch=True`` returns the ranks in a per-thread buffer that the next call
    overwrites (for a row-tile loop that consumes them at once); ``as_float64``, A already
    made float64, saves the float32 rows' conversion.
    """
    A = np.asarray(A)
    n_rows, n_cols = A.shape
    if A.dtype == np.float32 and 0 < A.size <= _INDEX_BITS:
        ranked, sorted_values = _float32_ordinal_ranks(A, scratch, as_float64)
    else:
        order = np.argsort(A, axis=1)
        sorted_values = np.take_along_axis(A, order, axis=1)
        ranked = np.empty((n_rows, n_cols))
        ranked[np.arange(n_rows)[:, None], order] = np.arange(1.0, n_cols + 1)
    tied = _rows_with_ties(sorted_values)
    if tied.size:
        ranked[tied] = _tied_average_ranks(A[tied])
    return ranked, tied


def _rows_with_ties(sorted_values: np.ndarray) -> np.ndarray:
    """Indices of the rows of a row-sorted array that hold two equal values.

    One comparison of each element with the next over the flat (C-contiguous) array, and
    pairs that straddle two rows dropped: much faster than a row-by-row comparison of
    short rows, and ties are rare enough that finding their rows costs nothing.
    """
    n_rows, n_cols = sorted_values.shape
    if n_cols < 2:
        return np.empty(0, dtype=np.intp)
    flat = np.ascontiguousarray(sorted_values).reshape(-1)
    equal = buffers.scratch("ranks.equal", (flat.size - 1,), bool)
    np.equal(flat[1:], flat[:-1], out=equal)
    if not equal.any():
        return np.empty(0, dtype=np.intp)
    pairs = np.flatnonzero(equal)
    pairs = pairs[(pairs + 1) % n_cols != 0]  # a row's last element against the next row's first
    return np.unique(pairs // n_cols)


def _float32_ordinal_ranks(
    A: np.ndarray, scratch: bool, as_float64: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Ranks 1..p of float32 rows (ties in column order), and the sorted rows' value keys.

    Each row is sorted once as float64 keys: the float32 value made float64 exactly (−0
    made +0), with the element's flat index written into the 29 low mantissa bits that a
    float32 does not use. The index bits cannot reorder two different values, the sort is
    SIMD in NumPy (about 2.5× faster than an argsort), and the sorted keys give both the
    tie check (equal high bits) and where each rank goes (the low bits).
    """
    n_rows, n_cols = A.shape
    keys = buffers.scratch("ranks.keys", A.shape, np.float64)
    if as_float64 is None:
        keys[...] = A  # a plain cast (np.add with a float64 output dtype is 3× slower)
        keys += 0.0  # −0 made +0
    else:
        np.add(as_float64, 0.0, out=keys)  # −0 made +0
    bits = keys.view(np.int64)
    bits |= _flat_index(n_rows, n_cols)
    keys.sort(axis=1)
    values = np.bitwise_and(
        bits, ~_INDEX_BITS, out=buffers.scratch("ranks.values", A.shape, np.int64)
    )
    bits &= _INDEX_BITS
    ranked = buffers.scratch("ranks.ranked", A.shape, np.float64) if scratch else np.empty(A.shape)
    ranked.reshape(-1)[bits.reshape(-1)] = _ordinal_ranks(n_rows, n_cols)
    return ranked, values


#: The float64 mantissa bits below a float32's 24: free to hold a flat index.
_INDEX_BITS = np.int64(2**29 - 1)


@functools.lru_cache(maxsize=8)
def _flat_index(n_rows: int, n_cols: int) -> np.ndarray:
    index = np.arange(n_rows * n_cols, dtype=np.int64).reshape(n_rows, n_cols)
    index.flags.writeable = False
    return index


@functools.lru_cache(maxsize=8)
def _ordinal_ranks(n_rows: int, n_cols: int) -> np.ndarray:
    ranks = np.tile(np.arange(1.0, n_cols + 1), n_rows)
    ranks.flags.writeable = False
    return ranks


def _tied_average_ranks(A: np.ndarray) -> np.ndarray:
    """Average ranks of rows with ties: each run of equal values gets its mean position."""
    n_rows, n_cols = A.shape
    order = np.argsort(A, axis=1, kind="stable")
    sorted_values = np.take_along_axis(A, order, axis=1)
    new_run = np.ones((n_rows, n_cols), dtype=bool)
    np.not_equal(sorted_values[:, 1:], sorted_values[:, :-1], out=new_run[:, 1:])
    index = np.arange(n_cols)
    start = np.maximum.accumulate(np.where(new_run, index, 0), axis=1)
    run_end = np.ones((n_rows, n_cols), dtype=bool)
    run_end[:, :-1] = new_run[:, 1:]
    end = np.minimum.accumulate(np.where(run_end, index, n_cols)[:, ::-1], axis=1)[:, ::-1]
    ranked = np.empty((n_rows, n_cols))
    ranked[np.arange(n_rows)[:, None], order] = (start + end) / 2.0 + 1.0
    return ranked


class Kernel:
    """Base class: ``kernel(X_block, U) -> Z_block`` of shape (b, K), float64.

    Subclasses implement :meth:`tile` (one row tile, using the tile's shared products) or
    override ``__call__``.

    Examples
    --------
    A kernel of one's own, −‖x − u‖², from the tile's shared squared distances:

    >>> import numpy as np
    >>> from scalenc import EncoderClassifier
    >>> from scalenc.encoder.kernels import Kernel
    >>> class NegativeSquared(Kernel):
    ...     name = "negative_squared"
    ...     def tile(self, tile):
    ...         return -tile.sq_distances
    >>> X = np.array([[0.0, 0.0], [1.0, 2.0], [3.0, 1.0]])
    >>> NegativeSquared()(X, np.array([[1.0, 1.0]]))
    array([[-2.],
           [-1.],
           [-4.]])

    It goes to :class:`~scalenc.EncoderClassifier` like a name (for a cluster, define it in
    an importable module, so that it pickles):

    >>> rng = np.random.default_rng(0)
    >>> X = np.vstack([rng.normal(0, 1, (30, 2)), rng.normal(4, 1, (30, 2))])
    >>> y = np.repeat([0, 1], 30)
    >>> model = EncoderClassifier(kernels=NegativeSquared()).fit(X, y)
    >>> model.kernel_.name, float(model.score(X, y)) > 0.9
    ('negative_squared', True)
    """

    name = "kernel"
    #: Whether :func:`embed` evaluates the kernel a row tile at a time (else on the block).
    tiled = True
    #: Whether :meth:`resolve` needs the per-class sums of squared row norms of pass 1.
    needs_sqnorm = False

    def __call__(self, X: np.ndarray, U: np.ndarray) -> np.ndarray:
        return embed((self,), X, U)

    def tile(self, tile: Tile) -> np.ndarray:
        """δ(X, U) for one :class:`Tile`.

        Examples
        --------
        >>> import numpy as np
        >>> from scalenc.encoder.kernels import Linear, Means, Tile
        >>> tile = Tile(np.array([[1.0, 2.0], [3.0, 1.0]]), Means(np.eye(2)))
        >>> Linear().tile(tile)  # ⟨x, u⟩ = X Uᵀ
        array([[1., 2.],
               [3., 1.]])
        """
        if type(self).__call__ is Kernel.__call__:  # pragma: no cover - abstract
            raise NotImplementedError(f"{type(self).__name__} must implement tile or __call__")
        return self(tile.X, tile.U)

    def resolve(self, stats: dict) -> Kernel:
        """Return a copy with data-dependent defaults filled from pass-1 statistics.

        ``stats`` holds the per-class counts ``n`` (K,), means ``mean`` (K×p) and, when
        :attr:`needs_sqnorm`, sums of squared row norms ``sqnorm`` (K,). Kernels without
        such defaults return themselves.

        Examples
        --------
        >>> from scalenc.encoder.kernels import Gaussian, Linear
        >>> kernel = Linear()
        >>> kernel.resolve({}) is kernel
        True
        >>> Gaussian(sigma=2.0).resolve({})
        gaussian(sigma=2)
        """
        return self

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, repr=False)
class Linear(Kernel):
    """⟨x, u⟩, Shen's inner-product kernel: the embedding is X Uᵀ.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [1.0, 2.0], [3.0, 1.0]])
    >>> U = np.array([[0.0, 0.0], [1.0, 1.0]])
    >>> from scalenc.encoder.kernels import Linear
    >>> Linear()(X, U)
    array([[0., 0.],
           [0., 3.],
           [0., 4.]])
    """

    name = "linear"

    def tile(self, tile):
        return tile.inner


@dataclass(frozen=True, repr=False)
class Euclidean(Kernel):
    """−‖x − u‖, the distance-induced kernel (LDA is affine-invariant, so −d serves for
    Shen's "max − d" transform).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [1.0, 2.0], [3.0, 1.0]])
    >>> U = np.array([[0.0, 0.0], [1.0, 1.0]])
    >>> from scalenc.encoder.kernels import Euclidean
    >>> Euclidean()(X, U).round(3)
    array([[-0.   , -1.414],
           [-2.236, -1.   ],
           [-3.162, -2.   ]])
    """

    name = "euclidean"

    def tile(self, tile):
        return -tile.xp.sqrt(tile.sq_distances)


def _centre_and_scale(ranks):
    xp = namespace(ranks)
    ranks -= xp.mean(ranks, axis=1, keepdims=True)
    norms = xp.linalg.vector_norm(ranks, axis=1, keepdims=True)  # NumPy's: its linalg.norm
    return xp.where(norms > 0, ranks / xp.where(norms > 0, norms, 1.0), 0.0)


@dataclass(frozen=True, repr=False)
class Spearman(Kernel):
    """Spearman's rank correlation: the Pearson correlation of the rows' average ranks.

    The block's rows are ranked in their own dtype (float32 from disk ranks exactly and
    faster than a float64 copy).

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc.encoder.kernels import Spearman
    >>> X = np.array([[1.0, 2.0, 3.0], [30.0, 20.0, 10.0], [1.0, 3.0, 2.0]])
    >>> Spearman()(X, np.array([[1.0, 2.0, 3.0]]))
    array([[ 1. ],
           [-1. ],
           [ 0.5]])
    """

    name = "spearman"

    def tile(self, tile):
        return host_or_device(tile.xp, _spearman_on_host, _spearman_on_device)(tile)


def _spearman_on_device(tile):
    """Spearman's kernel of a device tile: every row's ranks centred and scaled, with or
    without ties."""
    return _centre_and_scale(average_ranks(tile.X)) @ tile.means.centred_ranks.T


def _spearman_on_host(tile):
    """Spearman's kernel of a NumPy tile: rows without ties skip the centring and scaling
    (their mean and norm are constants)."""
    ranks_u = tile.means.centred_ranks
    n_cols = tile.X.shape[1]
    # the tile's float64 copy, if another kernel made one, saves a conversion
    ranks, tied = _ranks_and_tied_rows(tile.X, scratch=True, as_float64=tile.__dict__.get("x64"))
    # A row without ties ranks as a permutation of 1..p: mean (p+1)/2 and norm
    # sqrt(p(p²−1)/12) are constants, and the mean drops out against the centred U.
    norm = np.sqrt(n_cols * (n_cols**2 - 1) / 12.0) if n_cols > 1 else 1.0
    Z = (ranks @ ranks_u.T) / norm
    if tied.size:
        Z[tied] = _centre_and_scale(ranks[tied]) @ ranks_u.T
    return Z


@dataclass(frozen=True, repr=False)
class Gaussian(Kernel):
    """exp(−‖x − u‖²/(2σ²)).

    ``sigma=None`` takes σ² = the mean of ‖x_i − u_k‖² over the labeled training rows i
    and all classes k (computed from the first pass's statistics, no extra pass).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [1.0, 2.0], [3.0, 1.0]])
    >>> U = np.array([[0.0, 0.0], [1.0, 1.0]])
    >>> from scalenc.encoder.kernels import Gaussian
    >>> Gaussian(sigma=1.0)(X, U).round(3)
    array([[1.   , 0.368],
           [0.082, 0.607],
           [0.007, 0.135]])
    """

    sigma: float | None = None
    name = "gaussian"

    @property
    def needs_sqnorm(self) -> bool:  # type: ignore[override]
        """Whether σ is left to :meth:`resolve` (``sigma=None``).

        Examples
        --------
        >>> from scalenc.encoder.kernels import Gaussian
        >>> Gaussian().needs_sqnorm, Gaussian(sigma=1.0).needs_sqnorm
        (True, False)
        """
        return self.sigma is None

    def tile(self, tile):
        if self.sigma is None:
            raise InputError("The Gaussian kernel's width sigma is not set; fit resolves it.")
        return tile.xp.exp(tile.sq_distances / (-2.0 * self.sigma**2))

    def resolve(self, stats):
        """σ from pass 1's per-class counts, means and sums of squared norms (no pass).

        Examples
        --------
        >>> import numpy as np
        >>> from scalenc.encoder.kernels import Gaussian
        >>> X = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 4.0], [2.0, 4.0]])
        >>> y = np.array([0, 0, 1, 1])
        >>> stats = {
        ...     "n": np.bincount(y).astype(float),
        ...     "mean": np.array([X[y == k].mean(axis=0) for k in (0, 1)]),
        ...     "sqnorm": np.array([(X[y == k] ** 2).sum() for k in (0, 1)]),
        ... }
        >>> Gaussian().resolve(stats)  # σ² = mean of ‖x_i − u_k‖² over rows and classes
        gaussian(sigma=3)
        >>> float(np.sqrt(((X[:, None, :] - stats["mean"]) ** 2).sum(axis=2).mean()))
        3.0
        """
        if self.sigma is not None:
            return self
        n, mean, sqnorm = stats["n"], stats["mean"], stats["sqnorm"]
        total = n.sum()
        xbar = (n @ mean) / total
        mean_sq = sqnorm.sum() / total - 2.0 * xbar @ mean.mean(axis=0) + (mean**2).sum(1).mean()
        return Gaussian(sigma=float(np.sqrt(max(mean_sq, np.finfo(float).tiny))))

    def __repr__(self):
        return "gaussian" if self.sigma is None else f"gaussian(sigma={self.sigma:.4g})"


@dataclass(frozen=True, repr=False)
class CallableKernel(Kernel):
    """A user function ``f(X_block, U) -> (b, K)``; it must be picklable for clusters.

    The function sees each block whole, once (not a row tile at a time), as NumPy arrays:
    a device block (CuPy's) is copied to the host for it, and its result copied back to
    the block's device.

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc.encoder.kernels import CallableKernel
    >>> def cosine(X, U):
    ...     return (X @ U.T) / np.outer(np.linalg.norm(X, axis=1), np.linalg.norm(U, axis=1))
    >>> kernel = CallableKernel(cosine)
    >>> kernel(np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([[2.0, 0.0]])).round(3)
    array([[1.   ],
           [0.707]])

    Its output shape is checked:

    >>> def row_sums(X, U):
    ...     return X.sum(axis=1)
    >>> CallableKernel(row_sums)(np.ones((2, 2)), np.ones((3, 2)))
    Traceback (most recent call last):
    ...
    scalenc.exceptions.InputError: The kernel callable 'row_sums' must return ...; it returned (2,).
    """

    func: Callable[[np.ndarray, np.ndarray], np.ndarray]
    tiled = False

    @property
    def name(self):  # type: ignore[override]
        """The function's ``__name__``.

        Examples
        --------
        >>> from scalenc.encoder.kernels import CallableKernel
        >>> def my_kernel(X, U):
        ...     return X @ U.T
        >>> CallableKernel(my_kernel).name
        'my_kernel'
        """
        return getattr(self.func, "__name__", "callable")

    def __call__(self, X, U):
        xp = namespace(X)
        Z = np.asarray(self.func(to_host(X), to_host(U)), dtype=np.float64)
        if Z.shape != (X.shape[0], U.shape[0]):
            raise InputError(
                f"The kernel callable {self.name!r} must return an array of shape "
                f"(rows, K) = {(X.shape[0], U.shape[0])}; it returned {Z.shape}."
            )
        return like(xp, Z, X)


KERNELS: dict[str, type[Kernel]] = {
    "linear": Linear,
    "euclidean": Euclidean,
    "spearman": Spearman,
    "gaussian": Gaussian,
}


def get_kernel(spec) -> Kernel:
    """A :class:`Kernel` from a name, a :class:`Kernel` instance or a callable.

    Examples
    --------
    >>> from scalenc.encoder.kernels import Gaussian, get_kernel
    >>> get_kernel("spearman"), get_kernel(Gaussian(sigma=2.0))
    (spearman, gaussian(sigma=2))
    >>> def inner(X, U):
    ...     return X @ U.T
    >>> get_kernel(inner)
    inner
    >>> get_kernel("cosine")
    Traceback (most recent call last):
    ...
    scalenc.exceptions.InputError: Unknown kernel 'cosine'. Valid names are [...
    """
    if isinstance(spec, Kernel):
        return spec
    if isinstance(spec, str):
        try:
            return KERNELS[spec]()
        except KeyError:
            raise InputError(
                f"Unknown kernel {spec!r}. Valid names are {sorted(KERNELS)}, "
                "or pass a callable f(X_block, U) -> (rows, K)."
            ) from None
    if callable(spec):
        return CallableKernel(spec)
    raise InputError(
        f"A kernel must be a name in {sorted(KERNELS)}, a scalenc.encoder.kernels.Kernel or a "
        f"callable f(X_block, U) -> (rows, K); got {spec!r}."
    )
