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

from scalenc.encoder.ranks import average_ranks, centre_and_scale, ranks_and_tied_rows
from scalenc.exceptions import InputError
from scalenc.math import buffers
from scalenc.math.buffers import into
from scalenc.math.distances import row_sq_norms, sq_distances_from_inner
from scalenc.math.xp import (
    as_block,
    device_of,
    host_or_device,
    is_numpy,
    like,
    matmul,
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
    "embedding_array",
    "embedding_buffer",
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
    distances = Tile(X, Means(U, X)).sq_distances  # a NumPy tile's: a per-thread buffer
    return namespace(distances).asarray(distances, copy=True)


#: Elements (rows × features) per row tile in :func:`embed`: the float64 copy of a tile
#: (2 MiB) and its K-wide products and results are per-thread buffers, so a tile's size
#: only trades its calls' overhead against cache. 2¹⁸ rather than 2¹⁶: linear and
#: euclidean on a 200 000 × 50 block (K = 5) 20.2 → 15.3 ms, at p = 16 (K = 10) and
#: p = 256 (K = 5, 10) 8–28 % less, the three kernels −11 % to +3 % (one thread, with
#: the Dask nanny's ``MALLOC_TRIM_THRESHOLD_``; before the buffers, fresh products over
#: 64 KiB made 2¹⁷ slower than 2¹⁶ there).
EMBED_TILE_ELEMENTS = 2**18


def embed_tile_rows(n_features: int) -> int:
    """Rows of one row tile of :func:`embed` for rows of ``n_features``.

    Examples
    --------
    >>> from scalenc.encoder.kernels import embed_tile_rows
    >>> embed_tile_rows(16), embed_tile_rows(256), embed_tile_rows(1024)
    (16384, 1024, 256)
    """
    return max(1, EMBED_TILE_ELEMENTS // max(n_features, 1))


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
        return centre_and_scale(average_ranks(self.U))


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

    def buffer(self, name: str):
        """A (rows, K) float64 per-thread buffer for a NumPy tile's products and kernel
        results (:func:`embedding_buffer`: column-major, :func:`embed`'s layout), valid
        until the thread's next tile (a kernel's :meth:`Kernel.tile` must not evaluate
        kernels through :func:`embed` itself); None for a device tile.

        Examples
        --------
        >>> import numpy as np
        >>> from scalenc.encoder.kernels import Means, Tile
        >>> tile = Tile(np.ones((3, 2)), Means(np.eye(2)))
        >>> out = tile.buffer("mine")
        >>> out.shape, out.flags.f_contiguous
        ((3, 2), True)
        """
        return embedding_buffer(self.xp, f"tile.{name}", self.X.shape[0], self.U.shape[0])

    @functools.cached_property
    def inner(self) -> np.ndarray:
        """X·Uᵀ in float64; a NumPy tile's in a per-thread buffer (:meth:`buffer`)."""
        out = self.buffer("inner")
        if out is None:
            return self.x64 @ self.means.u64.T
        matmul(np, self.means.u64, self.x64.T, out=out.T)
        return out

    @functools.cached_property
    def sq_distances(self) -> np.ndarray:
        """‖x_i − u_j‖² (:func:`scalenc.math.neighbors.sq_distances_from_inner`), clipped at
        0; a NumPy tile's in a per-thread buffer (:meth:`buffer`)."""
        x_sq = row_sq_norms(
            self.x64, out=buffers.host_scratch(self.xp, "tile.x_sq", (self.X.shape[0],), np.float64)
        )
        return sq_distances_from_inner(
            self.inner, x_sq, self.means.sq_norms, out=self.buffer("sq_distances")
        )


def embedding_array(xp, rows: int, width: int, device=None):
    """An empty embedding of ``rows`` × ``width`` float64 for :func:`embed`: column-major
    for NumPy, so that each kernel's K columns are K long rows of memory; a device's in
    its library's default layout.

    The per-row arithmetic of the embedding and of what reads it (squared distances from
    the products, square roots, the class moments' centring, the class scores) then runs
    over long contiguous vectors: in row-major (b, K) arrays NumPy's loops run K elements
    at a time and take most of the time. A 200 000 × 50 block's two-kernel embedding
    (K = 5) took 23 ms row-major.

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc.encoder.kernels import embedding_array
    >>> Z = embedding_array(np, 4, 3)
    >>> Z.shape, Z.flags.f_contiguous
    ((4, 3), True)
    """
    if is_numpy(xp):
        return np.empty((width, rows)).T
    return xp.empty((rows, width), dtype=xp.float64, device=device)


def embedding_buffer(xp, name: str, rows: int, width: int):
    """:func:`embedding_array`'s layout in the per-thread buffer ``name`` for a NumPy block
    (:func:`scalenc.math.buffers.scratch`: valid until the thread asks for ``name``
    again); None for a device block, whose library allocates its own.

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc.encoder.kernels import embedding_buffer
    >>> embedding_buffer(np, "doc.example", 4, 3).flags.f_contiguous
    True
    """
    if not is_numpy(xp):
        return None
    return buffers.scratch(name, (width, rows), np.float64).T


def embed(kernels, X: np.ndarray, U: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """[δ_1(X, U) | … | δ_M(X, U)] for one block, shape (b, M·K), float64.

    Computed a row tile at a time; within a tile the kernels share the float64 copy, X·Uᵀ
    and the squared distances, and across tiles what they derive from U. Written into
    ``out`` when given (the passes' per-thread buffer, :func:`scalenc.math.buffers.scratch`).

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
    if out is None:
        out = embedding_array(xp, X.shape[0], len(kernels) * K, device_of(X))
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
        out = tile.buffer("euclidean")
        distances = into(tile.xp.sqrt, tile.sq_distances, out=out)
        return into(tile.xp.negative, distances, out=out)


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
    return centre_and_scale(average_ranks(tile.X)) @ tile.means.centred_ranks.T


def _spearman_on_host(tile):
    """Spearman's kernel of a NumPy tile: rows without ties skip the centring and scaling
    (their mean and norm are constants)."""
    ranks_u = tile.means.centred_ranks
    n_cols = tile.X.shape[1]
    # the tile's float64 copy, if another kernel made one, saves a conversion
    ranks, tied = ranks_and_tied_rows(tile.X, scratch=True, as_float64=tile.__dict__.get("x64"))
    # A row without ties ranks as a permutation of 1..p: mean (p+1)/2 and norm
    # sqrt(p(p²−1)/12) are constants, and the mean drops out against the centred U.
    norm = np.sqrt(n_cols * (n_cols**2 - 1) / 12.0) if n_cols > 1 else 1.0
    Z = tile.buffer("spearman")
    matmul(np, ranks_u, ranks.T, out=Z.T)
    Z /= norm
    if tied.size:
        Z[tied] = centre_and_scale(ranks[tied]) @ ranks_u.T
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
        out = tile.buffer("gaussian")
        scaled = into(tile.xp.divide, tile.sq_distances, -2.0 * self.sigma**2, out=out)
        return into(tile.xp.exp, scaled, out=out)

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
