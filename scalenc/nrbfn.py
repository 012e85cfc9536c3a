"""Hu, Pan & Wu's normalized RBF network (nRBFN) and linear regression classifier (LRC).

Paper: "nRBFN and LRC from spectral graph theory" (shared/seeds/nrbfn-lrc-spectral-graph.txt),
Sections 3–5 and Algorithms 1–3. Both are ridge regressions of the class indicator matrix
F (K×n) on a data matrix A (r×n):

    D* = F Aᵀ (A Aᵀ + λ‖A‖²_F I)⁻¹                                        (eqs. 14, 15)

nRBFN takes A = W̃, the column-normalised Gaussian kernel between a basis G (r rows chosen
by soft-KNN) and the training rows; LRC takes A = Ã, the mean-removed data with a row of
√β on top. Both only need the r×r Gram A Aᵀ and the K×r cross term F Aᵀ, which are sums
over rows and so are accumulated block by block in one pass (float64) and merged in a
tree. The paper's fitting error ε (Definition 7) and spectral risk γ (Definition 5) follow
from the same two matrices without another pass.

The block math is in :mod:`scalenc._nrbfn_blocks` (soft-KNN, W̃, the Gram), the exact k-NN
search in :mod:`scalenc.neighbors`, the ridge solve and diagnostics in
:mod:`scalenc.linalg`; the passes are :mod:`scalenc.passes`'.
"""

from __future__ import annotations

import numbers
import warnings

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from . import _nrbfn_blocks as nb
from . import passes
from ._base import StreamingClassifierMixin, fit_stage, map_output, prepare_fit, refuse_nonfinite
from ._validation import Integral, Interval, Real, invalid
from .cluster import compute
from .exceptions import BasisCappedWarning, NumericalWarning
from .linalg import MAX_RANK_BASIS, numerical_rank, regression_diagnostics, ridge_solve

__all__ = ["NRBFNClassifier", "LRClassifier", "DEFAULT_ALPHA_GRID"]

#: The paper's cross-validation grid for λ (Section 7.1.1).
DEFAULT_ALPHA_GRID = (1e-5, 1e-9, 1e-13)


# --- shared estimator plumbing -----------------------------------------------------------


class _RegressionClassifier(StreamingClassifierMixin, ClassifierMixin, BaseEstimator):
    """Validation, class handling and block-wise prediction shared by nRBFN and LRC."""

    def _prepare_fit(self, X, y):
        return prepare_fit(self, X, y)

    def _score_kwargs(self) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _map(self, X, block_fn, n_out, dtype, **kwargs):
        check_is_fitted(self, "classes_")
        return map_output(self, X, block_fn, n_out, dtype, **self._score_kwargs(), **kwargs)

    def decision_function(self, X):
        """F̂ᵀ, shape (n, K): the regression's estimate of the class indicators.

        For two classes, shape (n,) with F̂₂ − F̂₁ (scikit-learn's binary convention:
        positive means ``classes_[1]``). One lazy block map over X; dtype follows X.
        """
        check_is_fitted(self, "classes_")
        binary = self.classes_.size == 2
        out = self._map(
            X,
            nb.decision_block,
            1 if binary else self.classes_.size,
            None,
            out_dtype=None,
            binary=binary,
        )
        return out[:, 0] if binary else out

    def predict_proba(self, X):
        """F̂ᵀ clipped at zero and renormalised per row (see :func:`scores_to_proba`).

        Rows sum to one and the argmax is the prediction. These are not calibrated
        posteriors: F̂ is a least-squares fit to the class indicators.
        """
        check_is_fitted(self, "classes_")
        return self._map(X, nb.proba_block, self.classes_.size, None, out_dtype=None)

    def predict_log_proba(self, X):
        """Log of :meth:`predict_proba` (−inf where the probability is 0)."""
        proba = self.predict_proba(X)
        with np.errstate(divide="ignore"):
            return da.log(proba) if isinstance(proba, da.Array) else np.log(proba)

    def predict(self, X):
        """Class labels, argmax_k F̂_k (Algorithm 3 step 6; eq. 2 for LRC). One lazy block map."""
        check_is_fitted(self, "classes_")
        return self._map(X, nb.predict_block, None, self.classes_.dtype, classes=self.classes_)


def _warn_singular(owner, alpha, detail):
    warnings.warn(
        f"{owner}: the regularised system A Aᵀ + λ‖A‖²_F I is singular or ill-conditioned "
        f"with alpha={alpha!r} ({detail}); the minimum-norm least-squares solution is used. "
        "Increase alpha (e.g. alpha=1e-13 or larger) for a well-posed solve.",
        NumericalWarning,
        stacklevel=3,
    )


# --- nRBFN --------------------------------------------------------------------------------


class NRBFNClassifier(_RegressionClassifier):
    """Normalized RBF network with soft-KNN basis selection (Hu, Pan & Wu, Algorithms 1–3).

    Fitting:

    1. **Soft-KNN** (Algorithm 1): the k nearest labeled rows of every candidate, searched
       exactly in the whole training set; confidence T = weight of same-label neighbours;
       basis G = candidates with T < t, plus the least confident row of any class left out.
    2. **Width** σ = mean distance of the labeled training rows to the basis (Algorithm 2
       step 5), one pass.
    3. **Gram pass**: M = W̃W̃ᵀ (r×r), B = F W̃ᵀ (K×r), per cross-validation fold when λ is
       cross-validated, one pass, float64.
    4. **Solve** X* = B (M + λ‖W̃‖²_F I)⁻¹ (Cholesky), and the diagnostics ε and γ.

    Parameters
    ----------
    n_neighbors : int, default=20
        k of soft-KNN. Must be smaller than the number of labeled training rows.
    confidence_threshold : float in (0, 1], default=0.9
        t: candidates with confidence below t join the basis.
    alpha : float ≥ 0, sequence of floats, or "cv", default=1e-13
        λ, relative to ‖W̃‖²_F. A sequence is a grid chosen by ``cv``-fold
        cross-validation (held-out error rate; ties go to the earlier value); ``"cv"`` is
        the paper's grid (1e-5, 1e-9, 1e-13).
    cv : int ≥ 2, default=5
        Folds for the λ search. A row's fold is a hash of its global row index.
    n_basis : int or None, default=None
        Exactly this many least-confident candidates as basis (one per class reserved)
        instead of the threshold — the paper's "same basis size as SVM" mode.
    max_basis : int or None, default=None
        Cap on r. A larger threshold basis is cut to the ``max_basis`` least confident
        rows (one per class reserved) with a warning.
    n_candidates : int or None, default=None
        None: every labeled row is a soft-KNN candidate (the paper's algorithm exactly;
        O(n² p) time; each block of X is read once and kept on the workers while its
        block pairs run, so O(n p) worker memory in all). An int: a class-stratified
        sample of that many labeled rows (by hash of the global row index and
        ``random_state``; all of them if it is at least their number) whose neighbours
        are still searched in the whole training set in ONE pass. The candidates are
        held in memory (c×p); the basis is drawn from them.
    random_state : int, RandomState or None, default=None
        Seeds the candidate sample and the folds (an int is used as the seed itself).
        None or a RandomState draws a seed from that generator at each fit.
    unlabeled : int, float, str or None, default=-1
        The label that marks an unlabeled row, as in :mod:`sklearn.semi_supervised`: such
        rows (and rows labeled None or NaN) never enter a class statistic. ``None``
        for fully supervised data: then ``-1`` is an ordinary class and None/NaN labels are
        refused.
    chunk_rows : int or None, default=None
        Rows per block for NumPy input (None: about 64 MB blocks).
    split_every : int, default=8
        Fan-in of the tree reductions.

    Attributes
    ----------
    classes_ : ndarray (K,)
    n_features_in_ : int
    candidate_indices_ : ndarray (c,)
        Global row indices of the soft-KNN candidates.
    confidence_ : ndarray (c,)
        Soft-KNN confidence T of each candidate.
    knn_sigma_ : float
        Width used by soft-KNN (Algorithm 1 step 4).
    basis_indices_ : ndarray (r,)
        Global row indices of the basis, ascending.
    basis_ : ndarray (r, p)
        G, in X's dtype.
    sigma_ : float
        Gaussian width σ (Algorithm 2 step 5).
    weights_ : ndarray (K, r)
        X*, the paper's weight matrix.
    alpha_ : float
        λ used for ``weights_`` (the chosen one when cross-validated).
    cv_error_ : ndarray (n_alphas,) or None
        Held-out error rate of every λ of the grid.
    fitting_error_ : float
        ε (Definition 7) of the training fit.
    spectral_risk_ : float
        γ (Definition 5).
    rank_ : int or None
        Numerical rank of W̃ (see :func:`numerical_rank`); None when r exceeds
        :data:`MAX_RANK_BASIS` (4096), where the pivoted Cholesky would cost as much as
        the solve itself.
    basis_fraction_ : float
        r / number of labeled training rows.
    n_passes_ : int
        Passes over X made by ``fit``.
    stage_times_ : dict
        Wall-clock seconds of the fit stages: ``soft_knn`` (with the basis gather),
        ``sigma``, ``gram``, ``cv`` (solves and scoring of the λ grid) and ``solve``.

    Notes
    -----
    Passes over X: 1 for soft-KNN (with a candidate sample; in the exact all-rows mode by
    n_b(n_b+1)/2 block-pair tasks in one compute, n p (n + b) flops, each block read once
    and held until its pairs are done), plus 1 to gather the candidate or basis rows, 1 for
    σ, 1 for the Gram, and 1 more to score the λ grid when cross-validating — whatever the
    grid size: 4, or 5 with cross-validation. Memory per task: one block (two for a k-NN
    block pair and its distance tiles), one W̃ tile of at most
    :data:`GRAM_TILE_ELEMENTS` float64, and n_folds·(r² + K r) float64; on the client
    O(n_folds·r² + r p) plus,
    in the exact all-rows mode, the n×k neighbour table and n-vectors of labels and
    confidences (with ``n_candidates``, c×k and c-vectors). Unlabeled rows (−1/None/NaN)
    take no part in training. float32 data keeps its distance and kernel products in
    float32 (BLAS speed); W̃W̃ᵀ, F W̃ᵀ, σ and every sum are float64.
    """

    def __init__(
        self,
        n_neighbors=20,
        *,
        confidence_threshold=0.9,
        alpha=1e-13,
        cv=5,
        n_basis=None,
        max_basis=None,
        n_candidates=None,
        random_state=None,
        unlabeled=-1,
        chunk_rows=None,
        split_every=8,
    ):
        self.n_neighbors = n_neighbors
        self.confidence_threshold = confidence_threshold
        self.alpha = alpha
        self.cv = cv
        self.n_basis = n_basis
        self.max_basis = max_basis
        self.n_candidates = n_candidates
        self.random_state = random_state
        self.unlabeled = unlabeled
        self.chunk_rows = chunk_rows
        self.split_every = split_every

    # --- parameters ---------------------------------------------------------------

    _parameter_constraints: dict = {
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "confidence_threshold": [Interval(Real, 0.0, 1.0, closed="right")],
        "alpha": "no_validation",  # a float, a sequence of floats or "cv": see _alpha_grid
        "cv": [Interval(Integral, 2, None, closed="left")],
        "n_basis": [Interval(Integral, 1, None, closed="left"), None],
        "max_basis": [Interval(Integral, 1, None, closed="left"), None],
        "n_candidates": [Interval(Integral, 2, None, closed="left"), None],
        "random_state": ["random_state"],
        "unlabeled": [Real, str, None],
        "chunk_rows": [Interval(Integral, 1, None, closed="left"), None],
        "split_every": [Interval(Integral, 2, None, closed="left")],
    }

    def _check_params(self) -> tuple[float, ...]:
        self._validate_params()
        return self._alpha_grid()

    def _alpha_grid(self) -> tuple[float, ...]:
        """The λ grid: one value, the given sequence, or the paper's for ``"cv"``."""

        def real(v):
            number = isinstance(v, numbers.Real) and not isinstance(v, bool)
            return number and np.isfinite(v) and v >= 0

        if isinstance(self.alpha, str) and self.alpha == "cv":
            return DEFAULT_ALPHA_GRID
        if real(self.alpha):
            return (float(self.alpha),)
        try:
            grid = [] if isinstance(self.alpha, str) else list(self.alpha)
        except TypeError:
            grid = []
        if not grid or not all(real(a) for a in grid):
            expectation = 'a float >= 0, a non-empty sequence of them, or "cv"'
            raise invalid(self, "alpha", expectation, self.alpha)
        return tuple(float(a) for a in grid)

    def _seed(self) -> int:
        if isinstance(self.random_state, numbers.Integral):
            return int(self.random_state)
        return int(check_random_state(self.random_state).randint(0, 2**31 - 1))

    # --- fit ----------------------------------------------------------------------

    def fit(self, X, y):
        """Fit the network (Algorithm 2) from (X, y); rows labeled −1/None/NaN are ignored.

        Parameters
        ----------
        X : array-like, Dask array or Zarr array of shape (n, p)
        y : array-like or Dask array of shape (n,)

        Returns
        -------
        self
        """
        grid = self._check_params()
        X, codes = self._prepare_fit(X, y)
        seed = self._seed()
        (counts,) = compute(
            passes.label_counts_pass(codes, self.classes_.size, split_every=self.split_every)
        )
        self._check_sizes(counts)
        self.n_passes_ = 0
        self.stage_times_ = {}
        with fit_stage(self, "soft_knn"):
            candidates, cand_index, cand_codes = self._soft_knn(X, codes, counts, seed)
            self._choose_basis(X, candidates, cand_index, cand_codes)
        with fit_stage(self, "sigma"):
            self.sigma_ = self._sigma_pass(X, codes)
        if not self.sigma_ > 0:
            raise ValueError(
                "Every labeled row is at distance 0 from every basis row (sigma_ = 0): the "
                "training rows are identical, so the Gaussian basis has no width. Check the "
                "data (a constant X, or one row repeated), or use LRClassifier."
            )
        n_folds = self.cv if len(grid) > 1 else 1
        with fit_stage(self, "gram"):
            gram = self._gram_pass(X, codes, n_folds, seed)
        with fit_stage(self, "cv"):
            self.alpha_, self.cv_error_ = self._choose_alpha(X, codes, gram, grid, seed)
        with fit_stage(self, "solve"):
            self._solve(gram, self.alpha_)
        return self

    def _check_sizes(self, counts):
        n_labeled = int(counts.sum())
        if self.n_neighbors >= n_labeled:
            raise ValueError(
                f"n_neighbors={self.n_neighbors} must be smaller than the number of labeled "
                f"training rows ({n_labeled}): each row's neighbours are the other rows. "
                f"Pass n_neighbors <= {n_labeled - 1}."
            )
        K = self.classes_.size
        for name in ("n_basis", "max_basis"):
            value = getattr(self, name)
            if value is not None and value < K:
                raise ValueError(
                    f"{name}={value} is smaller than the number of classes ({K}); the basis "
                    f"needs one row per class. Pass {name} >= {K}."
                )
        if self.n_candidates is not None and self.n_candidates < K:
            raise ValueError(
                f"n_candidates={self.n_candidates} is smaller than the number of classes ({K}); "
                f"the stratified sample needs one row per class. Pass n_candidates >= {K}."
            )
        self._n_labeled = n_labeled

    # --- step 1: soft-KNN -----------------------------------------------------------

    def _soft_knn(self, X, codes, counts, seed):
        """Neighbours of the candidates and their confidence; returns the candidates."""
        if self.n_candidates is None:
            candidates = None
            neighbors, cand_index, cand_codes = self._knn_all_rows(X, codes)
        else:
            size = min(self.n_candidates, self._n_labeled)
            (sample,) = compute(
                passes.stratified_sample_pass(
                    codes, counts, size, seed, split_every=self.split_every
                )
            )
            order = np.argsort(sample["index"])
            cand_index, cand_codes = sample["index"][order], sample["code"][order]
            candidates = passes.gather_rows(X, cand_index)
            self.n_passes_ += 1
            (neighbors,) = compute(
                passes.kneighbors_pass(
                    X, codes, candidates, cand_index, self.n_neighbors, split_every=self.split_every
                )
            )
            self.n_passes_ += 1
        refuse_nonfinite(neighbors["nonfinite"])
        self.knn_sigma_ = nb.knn_sigma(neighbors["dist2"])
        self.confidence_ = nb.soft_knn_confidence(
            neighbors["dist2"], neighbors["label"], cand_codes, self.knn_sigma_
        )
        self.candidate_indices_ = cand_index
        return candidates, cand_index, cand_codes

    def _knn_all_rows(self, X, codes):
        """Exact search for every labeled row: block pairs, one pass per row block of X."""
        (results,) = compute(
            passes.kneighbors_all_rows(X, codes, self.n_neighbors, split_every=self.split_every)
        )
        self.n_passes_ += 1  # one compute: each block is read once, shared by its pairs
        neighbors = {
            key: np.concatenate([res[0][key] for res in results])
            for key in ("dist2", "index", "label")
        }
        neighbors["nonfinite"] = sum(int(res[0]["nonfinite"]) for res in results)
        return (
            neighbors,
            np.concatenate([res[1] for res in results]),
            np.concatenate([res[2] for res in results]),
        )

    def _choose_basis(self, X, candidates, cand_index, cand_codes):
        positions, capped = nb.select_basis(
            self.confidence_,
            cand_codes,
            self.confidence_threshold,
            self.classes_.size,
            n_basis=self.n_basis,
            max_basis=self.max_basis,
        )
        if capped:
            wanted = int(np.count_nonzero(self.confidence_ < self.confidence_threshold))
            warnings.warn(
                f"The soft-KNN basis has {wanted} rows with confidence below "
                f"confidence_threshold={self.confidence_threshold}, more than "
                f"max_basis={self.max_basis}; keeping the {self.max_basis} least confident "
                "(one per class reserved). Raise max_basis or lower confidence_threshold.",
                BasisCappedWarning,
                stacklevel=3,
            )
        self.basis_indices_ = cand_index[positions]
        if candidates is not None:
            self.basis_ = candidates[positions]
        else:
            self.basis_ = passes.gather_rows(X, self.basis_indices_)
            self.n_passes_ += 1
        self.basis_fraction_ = positions.size / self._n_labeled

    # --- steps 2–4 ---------------------------------------------------------------------

    def _sigma_pass(self, X, codes) -> float:
        (stats,) = compute(passes.sigma_pass(X, codes, self.basis_, split_every=self.split_every))
        self.n_passes_ += 1
        return float(stats["dist_sum"]) / (float(stats["rows"]) * self.basis_.shape[0])

    def _gram_pass(self, X, codes, n_folds, seed) -> dict:
        (gram,) = compute(
            passes.gram_pass(
                X,
                codes,
                self.basis_,
                self.sigma_,
                self.classes_.size,
                n_folds=n_folds,
                seed=seed,
                split_every=self.split_every,
            )
        )
        self.n_passes_ += 1
        return gram  # M holds lower triangles; the solves read only those

    def _choose_alpha(self, X, codes, gram, grid, seed):
        if len(grid) == 1:
            return grid[0], None
        M_all, B_all = gram["M"].sum(axis=0), gram["B"].sum(axis=0)
        weights = np.empty((self.cv, len(grid)) + B_all.shape)
        problems = []
        for f in range(self.cv):
            M_train, B_train = M_all - gram["M"][f], B_all - gram["B"][f]
            for a, lam in enumerate(grid):
                weights[f, a], problem = ridge_solve(M_train, B_train, lam)
                if problem:
                    problems.append(lam)
        if problems:
            _warn_singular(type(self).__name__, sorted(set(problems)), "in cross-validation")
        (errors,) = compute(
            passes.cv_error_pass(
                X, codes, self.basis_, self.sigma_, weights, seed, split_every=self.split_every
            )
        )
        self.n_passes_ += 1
        cv_error = errors / self._n_labeled
        return grid[int(np.argmin(cv_error))], cv_error

    def _solve(self, gram, lam):
        M, B = gram["M"].sum(axis=0), gram["B"].sum(axis=0)
        self.weights_, problem = ridge_solve(M, B, lam)
        if problem:
            _warn_singular(type(self).__name__, lam, problem)
        diag = regression_diagnostics(M, B, self.weights_, gram["count"].sum())
        self.fitting_error_ = diag["fitting_error"]
        self.spectral_risk_ = diag["spectral_risk"]
        self.rank_ = numerical_rank(M) if M.shape[0] <= MAX_RANK_BASIS else None

    def _score_kwargs(self):
        return {
            "score_fn": nb.nrbfn_scores,
            "basis": self.basis_,
            "sigma": self.sigma_,
            "weights": self.weights_,
        }


# --- LRC ------------------------------------------------------------------------------------


class LRClassifier(_RegressionClassifier):
    """Regularised linear regression classifier (Hu, Pan & Wu, eqs. 1 and 14), one pass.

    Ridge regression of the class indicators F on the augmented data
    Ã = [√β 1ᵀ; A], A = the labeled training rows with their mean removed:
    D* = F Ãᵀ (ÃÃᵀ + λ‖Ã‖²_F I)⁻¹, and a row b is classified by argmax_k (D* b̃)_k,
    b̃ = [√β; b − x̄].

    Parameters
    ----------
    alpha : float ≥ 0, default=1e-4
        λ, relative to ‖Ã‖²_F (λ' = λ‖Ã‖²_F).
    beta : float > 0, default=1.0
        β of the augmentation (the paper uses β = 1 in practice).
    unlabeled : int, float, str or None, default=-1
        The label that marks an unlabeled row, as in :mod:`sklearn.semi_supervised`: such
        rows (and rows labeled None or NaN) never enter a class statistic. ``None``
        for fully supervised data: then ``-1`` is an ordinary class and None/NaN labels are
        refused.
    chunk_rows : int or None, default=None
    split_every : int, default=8

    Attributes
    ----------
    classes_, n_features_in_
    mean_ : ndarray (p,)
        x̄, the mean of the labeled training rows.
    weights_ : ndarray (K, p + 1)
        D*, first column for the √β row.
    coef_ : ndarray (K, p); intercept_ : ndarray (K,)
        The same model as scores = X coef_ᵀ + intercept_.
    fitting_error_, spectral_risk_ : float
        ε (Definition 7) and γ (Definition 5) of the training fit.
    rank_ : int or None
        Numerical rank of Ã; None when p + 1 exceeds :data:`MAX_RANK_BASIS`.
    n_passes_ : int
        1.

    Notes
    -----
    One pass over X accumulates the class counts, class means and pooled within-class
    scatter (Chan et al.'s pairwise merge, no cancellation); ÃÃᵀ and FÃᵀ follow exactly:
    ÃÃᵀ = diag(βn, S_w + Σ_k n_k (μ_k − x̄)(μ_k − x̄)ᵀ), FÃᵀ = [√β n_k, n_k (μ_k − x̄)].
    Memory per task: one block plus O(p² + K p). The solve is (p+1)×(p+1).
    """

    def __init__(self, alpha=1e-4, *, beta=1.0, unlabeled=-1, chunk_rows=None, split_every=8):
        self.alpha = alpha
        self.beta = beta
        self.unlabeled = unlabeled
        self.chunk_rows = chunk_rows
        self.split_every = split_every

    _parameter_constraints: dict = {
        "alpha": [Interval(Real, 0.0, None, closed="left")],
        "beta": [Interval(Real, 0.0, None, closed="neither")],
        "unlabeled": [Real, str, None],
        "chunk_rows": [Interval(Integral, 1, None, closed="left"), None],
        "split_every": [Interval(Integral, 2, None, closed="left")],
    }

    def fit(self, X, y):
        """Fit from (X, y) in one pass; rows labeled −1/None/NaN are ignored.

        Returns
        -------
        self
        """
        self._validate_params()
        X, codes = self._prepare_fit(X, y)
        (moments,) = compute(
            passes.class_moments_pass(
                X, codes, self.classes_.size, scatter=True, split_every=self.split_every
            )
        )
        self.n_passes_ = 1
        refuse_nonfinite(moments["nonfinite"])
        gram, cross = self._augmented_gram(moments)
        self._solve(gram, cross, moments["n"].sum())
        return self

    def _augmented_gram(self, moments):
        """ÃÃᵀ ((p+1)×(p+1)) and FÃᵀ (K×(p+1)) from class moments."""
        counts, means = moments["n"], moments["mean"]
        total = counts.sum()
        self.mean_ = counts @ means / total
        centred = means - self.mean_
        scatter = moments["scatter"] + (centred * counts[:, None]).T @ centred
        p = means.shape[1]
        gram = np.zeros((p + 1, p + 1))
        gram[0, 0] = self.beta * total
        gram[1:, 1:] = (scatter + scatter.T) / 2.0
        cross = np.hstack([np.sqrt(self.beta) * counts[:, None], counts[:, None] * centred])
        return gram, cross

    def _solve(self, gram, cross, n_rows):
        self.weights_, problem = ridge_solve(gram, cross, self.alpha)
        if problem:
            _warn_singular(type(self).__name__, self.alpha, problem)
        diag = regression_diagnostics(gram, cross, self.weights_, n_rows)
        self.fitting_error_ = diag["fitting_error"]
        self.spectral_risk_ = diag["spectral_risk"]
        self.rank_ = numerical_rank(gram) if gram.shape[0] <= MAX_RANK_BASIS else None
        self.coef_ = self.weights_[:, 1:]
        self.intercept_ = np.sqrt(self.beta) * self.weights_[:, 0] - self.coef_ @ self.mean_

    def _score_kwargs(self):
        return {"score_fn": nb.lrc_scores, "coef": self.coef_, "intercept": self.intercept_}
