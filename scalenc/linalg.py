"""Small driver-side algebra on summaries (K×K, r×r, p×p): no data-sized arrays here.

* :func:`lda_from_moments` — linear discriminant analysis from class counts, class
  means and the pooled within-class scatter; the same algorithm as scikit-learn's
  ``LinearDiscriminantAnalysis(solver="svd")``, written on the sufficient statistics
  instead of on the centred data matrix.
* :func:`lda_decision` / :func:`lda_log_proba` — its decision function and posteriors.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from ._blocks import log_softmax

__all__ = ["LDAModel", "lda_from_moments", "lda_decision", "lda_log_proba", "lda_proba"]


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
            UserWarning,
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


def lda_log_proba(model: LDAModel, Z: np.ndarray) -> np.ndarray:
    """Log posteriors (b, K): softmax of the scores, or the logistic for two classes."""
    coef, intercept = class_scores(model)
    return log_softmax(np.asarray(Z, dtype=np.float64) @ coef.T + intercept)


def lda_proba(model: LDAModel, Z: np.ndarray) -> np.ndarray:
    """Posteriors (b, K); rows sum to one."""
    return np.exp(lda_log_proba(model, Z))
