"""Kernels δ(x, u) between the rows of a data block and the K class means U.

Pure NumPy. A kernel maps a block ``X`` (b×p) and ``U`` (K×p) to the embedding block
``Z = δ(X, U)`` (b×K) in float64. Kernels are looked up by name in :data:`KERNELS`;
a user callable ``f(X_block, U) -> (b, K)`` is wrapped as a :class:`CallableKernel`.

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

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

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
]


def squared_distances(X: np.ndarray, U: np.ndarray) -> np.ndarray:
    """‖x_i − u_j‖² for the rows of X (b×p) and U (K×p), in float64, clipped at 0."""
    X = np.asarray(X, dtype=np.float64)
    U = np.asarray(U, dtype=np.float64)
    d2 = X @ (-2.0 * U.T)
    d2 += np.einsum("ij,ij->i", X, X)[:, None]
    d2 += np.einsum("ij,ij->i", U, U)[None, :]
    return np.maximum(d2, 0.0, out=d2)


def average_ranks(A: np.ndarray) -> np.ndarray:
    """Row-wise ranks 1..p, ties given their average rank (as ``scipy.stats.rankdata``).

    One argsort per row block; rows without ties take a fast path (an inverse permutation).
    """
    return _ranks_and_ties(A)[0]


def _ranks_and_ties(A: np.ndarray) -> tuple[np.ndarray, bool]:
    """Average ranks of each row, and whether any row had ties.

    Ranks are computed in the input's dtype (float32 from disk sorts faster than a float64
    copy and ranks identically) and returned as float64.
    """
    A = np.asarray(A)
    n_rows, n_cols = A.shape
    sorted_values = np.sort(A, axis=1)  # vectorised sort: a cheaper tie check than a gather
    tied = bool(np.any(sorted_values[:, 1:] == sorted_values[:, :-1]))
    order = np.argsort(A, axis=1)
    rows = np.arange(n_rows)[:, None]
    ranked = np.empty((n_rows, n_cols), dtype=np.float64)
    if not tied:
        ranked[rows, order] = np.arange(1.0, n_cols + 1)
        return ranked, False
    new_run = np.ones((n_rows, n_cols), dtype=bool)
    np.not_equal(sorted_values[:, 1:], sorted_values[:, :-1], out=new_run[:, 1:])
    index = np.arange(n_cols)
    start = np.maximum.accumulate(np.where(new_run, index, 0), axis=1)
    run_end = np.ones((n_rows, n_cols), dtype=bool)
    run_end[:, :-1] = new_run[:, 1:]
    end = np.minimum.accumulate(np.where(run_end, index, n_cols)[:, ::-1], axis=1)[:, ::-1]
    ranked[rows, order] = (start + end) / 2.0 + 1.0
    return ranked, True


class Kernel:
    """Base class: ``kernel(X_block, U) -> Z_block`` of shape (b, K), float64."""

    name = "kernel"

    def __call__(self, X: np.ndarray, U: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def resolve(self, stats: dict) -> Kernel:
        """Return a copy with data-dependent defaults filled from pass-1 statistics."""
        return self

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, repr=False)
class Linear(Kernel):
    name = "linear"

    def __call__(self, X, U):
        return np.asarray(X, dtype=np.float64) @ np.asarray(U, dtype=np.float64).T


@dataclass(frozen=True, repr=False)
class Euclidean(Kernel):
    name = "euclidean"

    def __call__(self, X, U):
        return -np.sqrt(squared_distances(X, U))


def _centre_and_scale(ranks: np.ndarray) -> np.ndarray:
    ranks -= ranks.mean(axis=1, keepdims=True)
    norms = np.linalg.norm(ranks, axis=1, keepdims=True)
    return np.divide(ranks, norms, out=np.zeros_like(ranks), where=norms > 0)


def _centred_ranks(A: np.ndarray) -> np.ndarray:
    """Row-wise average ranks, centred and scaled to unit norm (0 for constant rows)."""
    return _centre_and_scale(average_ranks(A))


@dataclass(frozen=True, repr=False)
class Spearman(Kernel):
    name = "spearman"
    rank_based = True

    def __call__(self, X, U):
        X = np.asarray(X)
        ranks_u = _centred_ranks(np.asarray(U))
        out = np.empty((X.shape[0], ranks_u.shape[0]))
        # Row tiles keep every temporary in cache: block-sized temporaries are page-faulted
        # afresh on each call, and those faults serialise the threads of a Dask worker.
        for start in range(0, X.shape[0], RANK_TILE):
            out[start : start + RANK_TILE] = _spearman_rows(X[start : start + RANK_TILE], ranks_u)
        return out


RANK_TILE = 1024


def _spearman_rows(X: np.ndarray, ranks_u: np.ndarray) -> np.ndarray:
    n_cols = X.shape[1]
    ranks, tied = _ranks_and_ties(X)
    if not tied:
        # Without ties a row's ranks are a permutation of 1..p: mean (p+1)/2 and norm
        # sqrt(p(p²−1)/12) are constants, and the mean drops out against the centred U.
        norm = np.sqrt(n_cols * (n_cols**2 - 1) / 12.0) if n_cols > 1 else 1.0
        return (ranks @ ranks_u.T) / norm
    return _centre_and_scale(ranks) @ ranks_u.T


@dataclass(frozen=True, repr=False)
class Gaussian(Kernel):
    """exp(−‖x − u‖²/(2σ²)).

    ``sigma=None`` takes σ² = the mean of ‖x_i − u_k‖² over the labeled training rows i
    and all classes k (computed from the first pass's statistics, no extra pass).
    """

    sigma: float | None = None
    name = "gaussian"

    def __call__(self, X, U):
        if self.sigma is None:
            raise ValueError("The Gaussian kernel's width sigma is not set; fit resolves it.")
        return np.exp(-squared_distances(X, U) / (2.0 * self.sigma**2))

    def resolve(self, stats):
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
    """A user function ``f(X_block, U) -> (b, K)``; it must be picklable for clusters."""

    func: Callable[[np.ndarray, np.ndarray], np.ndarray]

    @property
    def name(self):  # type: ignore[override]
        return getattr(self.func, "__name__", "callable")

    def __call__(self, X, U):
        Z = np.asarray(self.func(X, U), dtype=np.float64)
        if Z.shape != (X.shape[0], U.shape[0]):
            raise ValueError(
                f"The kernel callable {self.name!r} must return an array of shape "
                f"(rows, K) = {(X.shape[0], U.shape[0])}; it returned {Z.shape}."
            )
        return Z


KERNELS: dict[str, type[Kernel]] = {
    "linear": Linear,
    "euclidean": Euclidean,
    "spearman": Spearman,
    "gaussian": Gaussian,
}


def get_kernel(spec) -> Kernel:
    """A :class:`Kernel` from a name, a :class:`Kernel` instance or a callable."""
    if isinstance(spec, Kernel):
        return spec
    if isinstance(spec, str):
        try:
            return KERNELS[spec]()
        except KeyError:
            raise ValueError(
                f"Unknown kernel {spec!r}. Valid names are {sorted(KERNELS)}, "
                "or pass a callable f(X_block, U) -> (rows, K)."
            ) from None
    if callable(spec):
        return CallableKernel(spec)
    raise ValueError(
        f"A kernel must be a name in {sorted(KERNELS)}, a scalenc.kernels.Kernel or a "
        f"callable f(X_block, U) -> (rows, K); got {spec!r}."
    )
