"""Small driver-side algebra on summaries (K×K, r×r, p×p, s×s): no data-sized arrays here.

* :func:`lda_from_moments` — linear discriminant analysis from class counts, class
  means and the pooled within-class scatter; the same algorithm as scikit-learn's
  ``LinearDiscriminantAnalysis(solver="svd")``, written on the sufficient statistics
  instead of on the centred data matrix (the encoder, CCDR's LDA head).
* :func:`lda_decision` / :func:`lda_log_proba` — its decision function and posteriors.
* :func:`ridge_solve`, :func:`regression_diagnostics`, :func:`numerical_rank` — the
  regularised least squares D* = F Aᵀ (A Aᵀ + λ‖A‖²_F I)⁻¹ of nRBFN and LRC from A Aᵀ and
  F Aᵀ, with the paper's fitting error and spectral risk.
* :func:`graph_eigenvectors` — the smallest non-trivial solutions of L u = λ D u for a
  graph G (CCDR's eq. 15), component by component, in a reproducible basis.
* :func:`procrustes` — the orthogonal rotation aligning two embeddings.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.linalg.blas
import scipy.sparse as sp
import scipy.sparse.csgraph
import scipy.sparse.linalg
from threadpoolctl import ThreadpoolController

from scalenc.exceptions import ConvergenceWarning, InputError, NumericalWarning
from scalenc.math.softmax import log_softmax
from scalenc.math.xp import as_block, like, namespace

__all__ = [
    "LDAModel",
    "lda_from_moments",
    "lda_decision",
    "lda_log_proba",
    "lda_proba",
    "class_scores",
    "stacked_class_scores",
    "ridge_solve",
    "ridge_path",
    "warn_singular",
    "fold_gram",
    "regression_diagnostics",
    "numerical_rank",
    "MAX_RANK_BASIS",
    "blas_threads",
    "graph_eigenvectors",
    "procrustes",
]


@dataclass(frozen=True)
class LDAModel:
    """A fitted LDA: ``decision(z) = z @ coef.T + intercept`` (binary: one column)."""

    coef: np.ndarray  # (K, d), or (1, d) for two classes
    intercept: np.ndarray  # (K,), or (1,)
    means: np.ndarray  # (K, d) class means of the input
    priors: np.ndarray  # (K,)
    scalings: np.ndarray  # (d, rank)
    xbar: np.ndarray  # (d,)
    explained_variance_ratio: np.ndarray


def lda_from_moments(
    counts: np.ndarray, means: np.ndarray, scatter: np.ndarray, *, tol: float = 1e-4
) -> LDAModel:
    """LDA from sufficient statistics, as ``LinearDiscriminantAnalysis(solver="svd")``.

    Parameters
    ----------
    counts : ndarray of shape (K,)
        Labeled rows per class, all > 0.
    means : ndarray of shape (K, d)
        Class means μ_k.
    scatter : ndarray of shape (d, d)
        Pooled within-class scatter S_w = Σ_k Σ_{y_i=k} (z_i − μ_k)(z_i − μ_k)ᵀ.
    tol : float
        Relative threshold below which singular values are discarded (sklearn's ``tol``).

    Notes
    -----
    scikit-learn takes the SVD of the within-class centred data ``Xc`` scaled by its
    column standard deviations. Its right singular vectors and singular values are the
    eigenvectors and square roots of the eigenvalues of ``D⁻¹ S_w D⁻¹ / n``, which only
    needs S_w; the between-class step works on the K class means. So the streamed
    statistics give the same discriminant (predictions identical, probabilities equal to
    rounding) without the n×d matrix.
    """
    counts = np.asarray(counts, dtype=np.float64)
    means = np.asarray(means, dtype=np.float64)
    scatter = np.asarray(scatter, dtype=np.float64)
    n_samples = counts.sum()
    n_classes = counts.size
    priors = counts / n_samples
    xbar = priors @ means

    # 1) within-class scaling by the pooled standard deviations
    std = np.sqrt(np.clip(np.diag(scatter), 0.0, None) / n_samples)
    std[std == 0] = 1.0
    scaled = scatter / np.outer(std, std) / n_samples
    eigvals, eigvecs = scipy.linalg.eigh((scaled + scaled.T) / 2.0)
    order = np.argsort(eigvals)[::-1]
    sing = np.sqrt(np.clip(eigvals[order], 0.0, None))
    vt = eigvecs[:, order].T
    rank = int(np.sum(sing > tol))
    if rank == 0:
        warnings.warn(
            "The within-class scatter is zero: every class is a single point in this space. "
            "LDA falls back to the nearest class mean (Euclidean metric).",
            NumericalWarning,
            stacklevel=2,
        )
        scalings = np.eye(means.shape[1])
    else:
        scalings = (vt[:rank] / std).T / sing[:rank]

    # 2) between-class scaling
    fac = 1.0 if n_classes == 1 else 1.0 / (n_classes - 1)
    between = (np.sqrt(counts * fac) * (means - xbar).T).T @ scalings
    _, sing_b, vt_b = scipy.linalg.svd(between, full_matrices=False)
    max_components = min(n_classes - 1, means.shape[1])
    total = np.sum(sing_b**2)
    explained = (sing_b**2 / total if total > 0 else np.zeros_like(sing_b))[:max_components]
    rank_b = int(np.sum(sing_b > tol * sing_b[0])) if sing_b.size and sing_b[0] > 0 else 0
    scalings = scalings @ vt_b.T[:, :rank_b]

    coef = (means - xbar) @ scalings
    intercept = -0.5 * np.sum(coef**2, axis=1) + np.log(priors)
    coef = coef @ scalings.T
    intercept = intercept - xbar @ coef.T
    if n_classes == 2:
        coef = (coef[1] - coef[0])[None, :]
        intercept = np.array([intercept[1] - intercept[0]])
    return LDAModel(coef, intercept, means, priors, scalings, xbar, explained)


def lda_decision(model: LDAModel, Z: np.ndarray) -> np.ndarray:
    """Decision scores ``Z @ coef.T + intercept`` of shape (b, K), or (b, 1) for two classes."""
    return np.asarray(Z, dtype=np.float64) @ model.coef.T + model.intercept


def class_scores(model: LDAModel) -> tuple[np.ndarray, np.ndarray]:
    """(coef, intercept) of the K class scores whose softmax is the posterior: the LDA's
    own, or for two classes 0 and its log-odds of class 1."""
    coef, intercept = model.coef, model.intercept
    if coef.shape[0] == 1:
        coef = np.vstack([np.zeros_like(coef), coef])
        intercept = np.concatenate([[0.0], intercept])
    return coef, intercept


def stacked_class_scores(models, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """One block-diagonal (M·K × M·K) matrix and offsets giving every model's K class
    scores (:func:`class_scores`) from a stacked embedding [Z_1 | … | Z_M]."""
    K, M = n_classes, len(models)
    W, b = np.zeros((M * K, M * K)), np.zeros(M * K)
    for m, model in enumerate(models):
        coef, intercept = class_scores(model)
        W[m * K : (m + 1) * K, m * K : (m + 1) * K] = coef.T
        b[m * K : (m + 1) * K] = intercept
    return W, b


def lda_log_proba(model: LDAModel, Z: np.ndarray) -> np.ndarray:
    """Log posteriors (b, K): softmax of the scores, or the logistic for two classes;
    an array of Z's namespace (the small coefficients move to a device block's device)."""
    xp = namespace(Z)
    coef, intercept = (like(xp, a, Z) for a in class_scores(model))
    return log_softmax(xp.astype(as_block(xp, Z), xp.float64, copy=False) @ coef.T + intercept)


def lda_proba(model: LDAModel, Z: np.ndarray) -> np.ndarray:
    """Posteriors (b, K); rows sum to one."""
    return namespace(Z).exp(lda_log_proba(model, Z))


# --- ridge regression (nRBFN and LRC) -------------------------------------------------------


def ridge_solve(M: np.ndarray, B: np.ndarray, lam: float) -> tuple[np.ndarray, str | None]:
    """X* = B (M + λ' I)⁻¹ with λ' = λ tr(M) = λ‖A‖²_F (Algorithm 2 step 9, eq. 14).

    ``M`` is symmetric; only its lower triangle is read (the Gram pass fills only that).
    Solved by Cholesky (LAPACK ``potrf``/``potrs``) with LAPACK's condition estimate.
    Returns the solution and None, or — if the system is singular or its reciprocal
    condition is below ε — the minimum-norm least-squares solution and a message for the
    caller to warn with.
    """
    with _solve_threads(np.shape(M)[0]):
        return _ridge_solve(M, B, lam)


def warn_singular(owner: str, alpha, detail: str) -> None:
    """The :class:`~scalenc.exceptions.NumericalWarning` of a ridge solve that fell back
    (:func:`ridge_solve`'s ``problem``): ``owner``'s regularised system is singular or
    ill-conditioned at ``alpha``; it points at the user's call."""
    from scalenc.math.labels import user_stacklevel

    warnings.warn(
        f"{owner}: the regularised system A Aᵀ + λ‖A‖²_F I is singular or ill-conditioned "
        f"with alpha={alpha!r} ({detail}); the minimum-norm least-squares solution is used. "
        "Increase alpha (e.g. alpha=1e-13 or larger) for a well-posed solve.",
        NumericalWarning,
        stacklevel=user_stacklevel(),
    )


def _ridge_solve(M, B, lam):
    system = np.tril(np.asarray(M, dtype=np.float64))
    system[np.diag_indices_from(system)] += lam * np.trace(M)
    anorm = _symmetric_one_norm(system)
    # the C-ordered lower triangle is the upper triangle of the Fortran-ordered transpose
    factor, info = scipy.linalg.lapack.dpotrf(system.T, lower=0, clean=0, overwrite_a=1)
    if info == 0:
        rcond, _ = scipy.linalg.lapack.dpocon(factor, anorm, uplo="U")
        if rcond >= np.finfo(np.float64).eps:
            solution, _ = scipy.linalg.lapack.dpotrs(factor, np.asarray(B, np.float64).T, lower=0)
            return solution.T, None
        problem = f"reciprocal condition number {rcond:.2g}"
    else:
        problem = f"the Cholesky factorisation failed at pivot {info}"
    full = _symmetrize_lower(np.asarray(M, dtype=np.float64))
    full[np.diag_indices_from(full)] += lam * np.trace(M)
    return scipy.linalg.lstsq(full, np.asarray(B, np.float64).T)[0].T, problem


def _symmetric_one_norm(lower: np.ndarray) -> float:
    """‖A‖₁ of the symmetric A whose lower triangle the C-ordered ``lower`` holds (its
    upper triangle zero), in strips of rows: no r×r temporary (a whole ``abs`` of a fresh
    r = 9 221 array took 1.5 s, half a factorisation)."""
    r = lower.shape[0]
    rows, cols = np.zeros(r), np.zeros(r)
    for a in range(0, r, STRIP_ROWS):
        b = min(r, a + STRIP_ROWS)
        strip = np.abs(lower[a:b, :b])
        rows[a:b] = strip.sum(axis=1)
        cols[:b] += strip.sum(axis=0)
    return float((rows + cols - np.abs(np.diag(lower))).max()) if r else 0.0


def ridge_path(M: np.ndarray, B: np.ndarray, lams, *, rotate: bool = False, refill=None):
    """X* = B (M + λ tr(M) I)⁻¹ for every λ of ``lams`` (shape (len(lams),) + B's), for
    cross-validation, without :func:`ridge_solve`'s least-squares fallback (an SVD, 20–60
    times a factorisation: tens of them made a 5-fold, 9-λ search on 1 400 rows take 20 s).
    A λ whose factorisation fails (M + λ' I not positive definite to working precision)
    gets zero weights (its held-out error is then that of predicting one class). Returns
    the solutions and those λ, for the caller to warn. Only the lower triangle of the
    C-ordered ``M`` is read.

    From :data:`TRIDIAGONAL_LAMS` λ on, one M = Q T Qᵀ (``sytrd``: about five Cholesky
    factorisations; an eigendecomposition costs twenty) serves every λ: a tridiagonal
    solve each, one Q for all. Fewer λ: a Cholesky factorisation each, in one work array
    (a fresh r×r array per λ took 3 of connect_4's 28 s of factorisations).

    ``rotate``: Y with X* = Y Qᵀ, and Q (the identity on the Cholesky path): a caller
    scoring rows Φ forms Φ Q once, not Q times each λ's K×r solution. ``refill``: a
    function writing M into its array again; the Cholesky path then factorises there.
    """
    M = np.asarray(M, dtype=np.float64)
    shifts = [lam * float(np.diag(M).sum()) for lam in lams]
    tridiagonal = len(lams) >= TRIDIAGONAL_LAMS and M.shape[0] > 1
    out, problems, Q = np.zeros((len(lams),) + np.shape(B)), [], None
    with _solve_threads(M.shape[0]):
        rhs = np.asarray(B, np.float64).T
        if tridiagonal:
            solutions, Q = _by_tridiagonal(M, rhs, shifts, rotate)
        else:
            solutions = _by_cholesky(M, rhs, shifts, refill)
        for i, solution in enumerate(solutions):
            if solution is None or not np.isfinite(solution).all():
                problems.append(lams[i])
            else:
                out[i] = solution.T
    if not rotate:
        return out, problems
    return out, problems, np.eye(M.shape[0]) if Q is None else Q


#: λ from which :func:`ridge_path` reduces M to tridiagonal form once rather than
#: factorising M + λ' I per λ (measured break-even: 6–7 λ at r = 128–512).
TRIDIAGONAL_LAMS = 7


def _by_cholesky(M, rhs, shifts, refill=None):
    """(M + s I)⁻¹ rhs per shift s, a Cholesky factorisation each (None where it fails),
    in one work array, or in M itself, ``refill``-ed before each shift after the first."""
    diagonal = np.diag(M).copy()
    work = M if refill else np.empty_like(M, order="C")
    on_diagonal = work.reshape(-1)[:: M.shape[0] + 1]  # a view: an index per λ took 1/3
    for i, shift in enumerate(shifts):
        if refill is None:
            np.copyto(work, M)
        elif i:
            refill()
        np.add(diagonal, shift, out=on_diagonal)
        # the C-ordered lower triangle is the upper triangle of the Fortran-ordered
        # transpose, which LAPACK factorises in place
        factor, info = scipy.linalg.lapack.dpotrf(work.T, lower=0, clean=0, overwrite_a=1)
        yield None if info else scipy.linalg.lapack.dpotrs(factor, rhs, lower=0)[0]


def _by_tridiagonal(M, rhs, shifts, rotate=False):
    """(M + s I)⁻¹ rhs per shift s from one M = Q T Qᵀ, r > 1 (NaN where T + s I is not
    positive definite), and None; with ``rotate``, Qᵀ of each and Q (formed from its
    reflectors). Q is ``sytrd``'s reflectors below the subdiagonal, a QR's of M's rows
    2…r (as LAPACK's ``ormtr`` applies them)."""
    r, k = rhs.shape
    lwork = int(scipy.linalg.lapack.dsytrd_lwork(r, lower=1)[0])
    reduced, d, e, tau, _ = scipy.linalg.lapack.dsytrd(M, lower=1, lwork=lwork)
    reflectors = reduced[1:, :-1]
    ormqr = scipy.linalg.lapack.dormqr

    def apply(trans, c):  # Qᵀ c or Q c, in place
        c[1:] = ormqr(b"L", trans, reflectors, tau, c[1:], max(1, 64 * c.shape[1]))[0]
        return c

    c = apply(b"T", np.array(rhs, order="F"))
    solved = np.full((r, len(shifts) * k), np.nan, order="F")  # NaN where ptsv fails
    for i, shift in enumerate(shifts):
        *_, x, info = scipy.linalg.lapack.dptsv(d + shift, e, c)
        if not info:
            solved[:, i * k : (i + 1) * k] = x
    Q = None
    if rotate:
        Q = np.zeros((r, r))
        Q[0, 0] = 1.0
        Q[1:, 1:] = scipy.linalg.lapack.dorgqr(reflectors, tau, lwork=max(1, 64 * r))[0]
    else:
        solved = apply(b"N", solved)  # Q acts on each column alone
    return [solved[:, i * k : (i + 1) * k] for i in range(len(shifts))], Q


def fold_gram(total: np.ndarray, part: np.ndarray, keep=None, *, out=None) -> np.ndarray:
    """``total − part`` on the rows and columns ``keep`` (all when None), lower triangle
    only (the upper is left unset): a cross-validation fold's training Gram from the Gram
    of every row and the fold's own, for :func:`ridge_path`. Formed in strips of rows,
    so no r×r temporary beside the result: ``out``'s first k² elements as k×k (a new
    array when None; the pages of its upper triangle are not touched)."""
    r = total.shape[0]
    keep = np.arange(r) if keep is None else np.asarray(keep)
    k = keep.size
    out = np.empty((k, k)) if out is None else np.ndarray((k, k), buffer=out)
    for a in range(0, k, STRIP_ROWS):
        b = min(k, a + STRIP_ROWS)
        at = np.ix_(keep[a:b], keep[:b])  # the strip's part of the lower triangle alone
        np.subtract(total[at], part[at], out=out[a:b, :b])
    return out


#: Rows of a strip of :func:`fold_gram` and :func:`_symmetric_one_norm`.
STRIP_ROWS = 256


#: Systems smaller than this are solved on one BLAS thread by :func:`ridge_path`,
#: :func:`ridge_solve` and :func:`numerical_rank`: small factorisations gain little from
#: BLAS threads, and lose many times their time to them on a busy machine (r = 512:
#: 0.13 s on one thread, 0.93 s on two; r = 1 024, three λ: 0.11 s against 3.0 s, which
#: made 18 s of a digits fit at load 10).
SMALL_SOLVE = 2048


@functools.cache
def _controller() -> ThreadpoolController:
    """The BLAS/OpenMP pools of this process, found once: ``threadpool_limits`` looks
    for them again at each call (5 ms, 56 of them made half of a 0.5 s fit of iris)."""
    return ThreadpoolController()


def blas_threads(limit: int | None):
    """A context in which the BLAS/OpenMP pools run ``limit`` threads (None: as they are),
    through the pools found once by :func:`_controller`.

    Examples
    --------
    >>> from threadpoolctl import threadpool_info
    >>> from scalenc.math.linalg import blas_threads
    >>> with blas_threads(1):
    ...     print(all(pool["num_threads"] == 1 for pool in threadpool_info()))
    True
    """
    return contextlib.nullcontext() if limit is None else _controller().limit(limits=limit)


def _solve_threads(r: int):
    """One BLAS thread for a system of fewer than :data:`SMALL_SOLVE` rows."""
    return blas_threads(1 if r < SMALL_SOLVE else None)


def regression_diagnostics(M: np.ndarray, B: np.ndarray, D: np.ndarray, n_rows: float) -> dict:
    """The paper's Section 5 measures of a fitted regression F ≈ D A, from A Aᵀ and F Aᵀ.

    With ‖F‖²_F = n (one indicator per labeled row), ‖DA‖²_F = tr(D M Dᵀ) and
    ‖F − DA‖²_F = n − 2 tr(D Bᵀ) + ‖DA‖²_F:

    * fitting error ε = ‖F − DA‖²_F / ‖DA‖²_F + 1            (Definition 7, eq. 23)
    * spectral risk γ = ‖D‖²_F ‖A‖²_F / ‖DA‖²_F              (Definition 5, eq. 19)

    Only the lower triangle of the symmetric M is read.
    """
    M_t, D_t = np.asarray(M, np.float64).T, np.asarray(D, np.float64).T
    MD = scipy.linalg.blas.dsymm(1.0, M_t, D_t, side=0, lower=0)
    fit_sq = float(np.sum(MD.T * D))
    residual = float(n_rows) - 2.0 * float(np.sum(D * B)) + fit_sq
    with np.errstate(divide="ignore", invalid="ignore"):
        epsilon = residual / fit_sq + 1.0 if fit_sq > 0 else np.nan
        gamma = float(np.sum(D * D)) * float(np.trace(M)) / fit_sq if fit_sq > 0 else np.nan
    return {"fitting_error": epsilon, "spectral_risk": gamma, "residual": residual, "fit": fit_sq}


#: Largest basis whose rank is computed in ``fit`` (pivoted Cholesky, O(r³/3)).
MAX_RANK_BASIS = 4096


def numerical_rank(M: np.ndarray) -> int:
    """Numerical rank of A from its Gram M = A Aᵀ (pivoted Cholesky, O(r³/3)).

    Counts the singular values of A above √(r ε) σ₁ — the smallest that the Gram can
    resolve in float64. Only the lower triangle of M is read.
    """
    if M.size == 0 or not np.any(M):
        return 0
    tol = M.shape[0] * np.finfo(np.float64).eps * float(np.max(np.diag(M)))
    lower = np.tril(np.asarray(M, dtype=np.float64))
    with _solve_threads(M.shape[0]):
        _, _, rank, _ = scipy.linalg.lapack.dpstrf(lower.T, tol=tol, lower=0, overwrite_a=1)
    return int(rank)


def _symmetrize_lower(M: np.ndarray) -> np.ndarray:
    return np.tril(M) + np.tril(M, -1).T


# --- the generalised symmetric eigenproblem of a graph (CCDR) ----------------------------

#: Components with at most this many nodes are solved densely (``scipy.linalg.eigh``);
#: larger ones iteratively (Lanczos, then shift-invert: :func:`_component_eigs`).
DENSE_MAX = 1000

#: Eigenvalues closer than this are treated as one repeated eigenvalue.
EIG_TOL = 1e-8


def _component_eigs(G: sp.csr_matrix, d: np.ndarray, k: int):
    """The k smallest (λ, u) of L u = λ D u on one connected component (D-orthonormal u).

    With A = D^{-1/2} G D^{-1/2}, the problem is L_sym v = λ v for L_sym = I − A, and
    u = D^{-1/2} v. Small components are solved densely. Larger ones are solved by
    :func:`_lanczos_eigs` (the largest μ = 1 − λ of A), then shift-invert, then dense, each
    tried only when the one before fails to converge.
    """
    n = G.shape[0]
    k = min(k, n)
    inv_sqrt = 1.0 / np.sqrt(d)
    A = normalised_adjacency(G, d)
    if n > DENSE_MAX and k < n - 1:
        solved = _lanczos_eigs(A, k)
        if solved is None:
            solved = _shift_invert_eigs(A, k)
        if solved is not None:
            lam, V = solved
            order = np.argsort(lam, kind="stable")
            return np.clip(lam[order], 0.0, None), V[:, order] * inv_sqrt[:, None]
    Lsym = sp.identity(n, format="csr") - A
    lam, V = scipy.linalg.eigh(Lsym.toarray(), subset_by_index=[0, k - 1])
    return np.clip(lam, 0.0, None), V * inv_sqrt[:, None]


def normalised_adjacency(G: sp.spmatrix, d: np.ndarray) -> sp.csr_matrix:
    """A = D^{-1/2} G D^{-1/2} for the degrees ``d`` (all > 0), symmetrised against
    rounding; L_sym = I − A."""
    inv_sqrt = 1.0 / np.sqrt(d)
    A = sp.diags(inv_sqrt) @ G @ sp.diags(inv_sqrt)
    return ((A + A.T) * 0.5).tocsr()


#: Most restarts (ARPACK's ``maxiter``) of :func:`_lanczos_eigs` before the spectrum is
#: handed to shift-invert. CCDR's graphs of the papers' datasets and of the roofline
#: simulations converge in 4–17; graphs of a low-dimensional manifold with few labeled
#: rows (where shift-invert's LU stays sparse and cheap) need hundreds.
LANCZOS_MAX_RESTARTS = 40


def _lanczos_eigs(A: sp.csr_matrix, k: int):
    """The k smallest eigenpairs of I − A as the k largest (``which="LA"``) of A, by ARPACK.

    Each Lanczos step is one product with the sparse A (a few entries per row), with no
    factorisation: on CCDR's graphs of 5 000 subsample rows this is 2–16× faster than
    shift-invert, and 58–108× at 20 000, since shift-invert's sparse LU of I − A fills in
    almost completely on data of more than a few dimensions
    (``benchmarks/ccdr_eigen.py``). λ = 1 − μ.

    Returns None when ARPACK does not converge within :data:`LANCZOS_MAX_RESTARTS`
    restarts (small λ clustered against the spread of the spectrum), or when
    :func:`_missed_eigenvalue` finds an eigenvalue it skipped.
    """
    v0 = np.random.default_rng(0).standard_normal(A.shape[0])
    try:
        mu, V = scipy.sparse.linalg.eigsh(
            A, k=k, which="LA", v0=v0, tol=1e-12, maxiter=LANCZOS_MAX_RESTARTS
        )
    except (scipy.sparse.linalg.ArpackError, scipy.sparse.linalg.ArpackNoConvergence):
        return None
    if _missed_eigenvalue(A, mu, V):
        return None
    return 1.0 - mu, V


#: Lanczos vectors of :func:`_missed_eigenvalue`'s run (ARPACK's default of 20 needed
#: hundreds of restarts where the eigenvalues after the k-th are a few 10⁻⁴ apart).
CHECK_LANCZOS_VECTORS = 40


def _missed_eigenvalue(A: sp.csr_matrix, mu: np.ndarray, V: np.ndarray) -> bool:
    """Whether A may have an eigenvalue above min(μ) (by more than :data:`EIG_TOL`)
    outside the span of the eigenvectors V found.

    Lanczos from one start vector sees one direction of each eigenspace, so a converged
    run can skip copies of a repeated eigenvalue (a graph with symmetries: four identical
    chains from one node). They are the eigenvectors of A restricted to V's orthogonal
    complement whose eigenvalues exceed min(μ); one more Lanczos run on that restriction
    finds its largest. True also when that run does not converge.
    """

    def restricted(x):
        x = x - V @ (V.T @ x)
        y = A @ x
        return y - V @ (V.T @ y)

    op = scipy.sparse.linalg.LinearOperator(A.shape, matvec=restricted, dtype=np.float64)
    v0 = np.random.default_rng(1).standard_normal(A.shape[0])
    try:
        top = scipy.sparse.linalg.eigsh(
            op,
            k=1,
            which="LA",
            v0=v0,
            ncv=min(A.shape[0], CHECK_LANCZOS_VECTORS),
            tol=1e-10,
            maxiter=LANCZOS_MAX_RESTARTS,
            return_eigenvectors=False,
        )
    except (scipy.sparse.linalg.ArpackError, scipy.sparse.linalg.ArpackNoConvergence):
        return True
    return bool(top[0] > mu.min() + EIG_TOL)


def _shift_invert_eigs(A: sp.csr_matrix, k: int):
    """The k smallest eigenpairs of L_sym = I − A by ARPACK in shift-invert mode around
    σ = −10⁻³ (a sparse LU of L_sym − σI, then one solve per step); None, with a warning,
    when ARPACK fails."""
    n = A.shape[0]
    Lsym = (sp.identity(n, format="csr") - A).tocsr()
    try:
        v0 = np.random.default_rng(0).standard_normal(n)
        return scipy.sparse.linalg.eigsh(Lsym, k=k, sigma=-1e-3, which="LM", v0=v0, tol=1e-12)
    except (
        scipy.sparse.linalg.ArpackError,
        scipy.sparse.linalg.ArpackNoConvergence,
        RuntimeError,
    ) as exc:
        warnings.warn(
            f"scipy.sparse.linalg.eigsh failed on a graph component of {n} nodes ({exc}); "
            "falling back to the dense scipy.linalg.eigh, which costs O(n³) time and "
            "O(n²) memory. Lower subsample_size if this is too slow.",
            ConvergenceWarning,
            stacklevel=4,
        )
        return None


def _canonical_basis(U: np.ndarray, lam: np.ndarray, n_classes: int) -> np.ndarray:
    """Fix the arbitrary parts of the eigenvectors so that results are reproducible.

    Within a repeated eigenvalue (|Δλ| ≤ EIG_TOL) any D-orthonormal basis of the eigenspace
    is a solution; rotate it to the principal axes of its rows (eigenvectors of UᵀU,
    largest first). Then fix each vector's sign: its largest-magnitude class-centre entry
    (or, if the centres are all 0, its largest entry overall) is positive.
    """
    U = U.copy()
    start = 0
    while start < lam.size:
        stop = start + 1
        while stop < lam.size and lam[stop] - lam[stop - 1] <= EIG_TOL:
            stop += 1
        if stop - start > 1:
            block = U[:, start:stop]
            _, Q = np.linalg.eigh(block.T @ block)
            U[:, start:stop] = block @ Q[:, ::-1]
        start = stop
    for j in range(U.shape[1]):
        centres = U[:n_classes, j]
        ref = centres if np.abs(centres).max() > 1e-12 * np.abs(U[:, j]).max() else U[:, j]
        if ref[np.argmax(np.abs(ref))] < 0:
            U[:, j] = -U[:, j]
    return U


def graph_eigenvectors(G: sp.csr_matrix, n_components: int, n_classes: int):
    """The m smallest non-trivial solutions of L u = λ D u, L = D − G, D = diag(G 1).

    CCDR's eq. (15); the first ``n_classes`` nodes are the class centres (they fix the
    eigenvectors' signs, see :func:`_canonical_basis`).

    Returns ``(lam (m,), U (L+s, m), info)``; U is D-orthonormal and D-orthogonal to 1.
    Nodes of zero degree (isolated unlabeled points) get 0 in every eigenvector.

    Disconnected graphs are solved component by component (the spectrum of G is the
    union of the components' spectra). λ = 0 then has one eigenvector per component;
    the constant vector (the paper's u₁) is removed from their span and the remaining
    ``components − 1`` directions — which place each component at its own point — are
    the first coordinates of the embedding, as the minimisation (14) prescribes.
    """
    N = G.shape[0]
    d = np.asarray(G.sum(axis=1)).ravel()
    active = np.flatnonzero(d > 0)
    isolated = N - active.size
    n_comp, labels = scipy.sparse.csgraph.connected_components(G[active][:, active], directed=False)
    usable = active.size - 1
    if n_components > usable:
        raise InputError(
            f"n_components={n_components} is too large: the CCDR graph has {active.size} "
            f"connected nodes (L class centres + subsample rows), so at most {usable} "
            "non-trivial eigenvectors exist. Lower n_components or raise subsample_size."
        )
    m = n_components
    # λ = 0: one D-normalised indicator per component
    vol = np.bincount(labels, weights=d[active], minlength=n_comp)
    null = np.zeros((N, n_comp))
    null[active, labels] = 1.0 / np.sqrt(vol[labels])
    # coordinates orthogonal to the constant vector Σ_c sqrt(vol_c/vol) χ̂_c
    w = np.sqrt(vol / vol.sum())
    Q = scipy.linalg.null_space(w[None, :]) if n_comp > 1 else np.zeros((1, 0))
    lams = [np.zeros(n_comp - 1)]
    vecs = [null @ Q]
    for c in range(n_comp):
        nodes = active[labels == c]
        if nodes.size < 2:
            continue
        want = min(nodes.size, m + 2)
        lam_c, V_c = _component_eigs(G[nodes][:, nodes], d[nodes], want)
        full = np.zeros((N, lam_c.size - 1))
        full[nodes] = V_c[:, 1:]  # drop the component's own constant vector (λ = 0)
        lams.append(lam_c[1:])
        vecs.append(full)
    lam = np.concatenate(lams)
    U = np.hstack(vecs)
    order = np.argsort(lam, kind="stable")
    lam, U = lam[order], U[:, order]
    gap_tied = lam.size > m and lam[m] - lam[m - 1] <= EIG_TOL
    lam, U = lam[:m], U[:, :m]
    U = _canonical_basis(U, lam, n_classes)
    info = {
        "n_graph_components": int(n_comp),
        "n_isolated": int(isolated),
        "gap_tied": bool(gap_tied),
    }
    return lam, U, info


def procrustes(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The orthogonal R minimising ‖source R − target‖_F (Schönemann).

    R = U Vᵀ from the SVD U Σ Vᵀ of sourceᵀ target.
    """
    U, _, Vt = np.linalg.svd(source.T @ target)
    return U @ Vt
