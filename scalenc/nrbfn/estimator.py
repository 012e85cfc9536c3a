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

The block math is in :mod:`scalenc.nrbfn.blocks` (soft-KNN, W̃, the Gram), the exact k-NN
search in :mod:`scalenc.math.neighbors`, the ridge solve and diagnostics in
:mod:`scalenc.math.linalg`; the passes are :mod:`scalenc.engine.passes`'.
"""

from __future__ import annotations

import numbers
import warnings

import dask.array as da
import numpy as np
from sklearn.base import clone
from sklearn.model_selection import check_cv
from sklearn.utils import check_random_state

from scalenc.base.estimator import (
    fit_stage,
    memory_budget,
    refuse_nonfinite,
)
from scalenc.base.validation import Integral, Interval, Real, StrOptions, invalid
from scalenc.engine import memory, passes
from scalenc.engine.cluster import compute, task_threads, uses_distributed
from scalenc.exceptions import BasisCappedWarning, DataWarning
from scalenc.io.inputs import from_numpy_rows
from scalenc.math.linalg import MAX_RANK_BASIS, numerical_rank, regression_diagnostics, ridge_solve
from scalenc.nrbfn import blocks as nb
from scalenc.nrbfn import passes as nrbfn_passes
from scalenc.nrbfn import plan
from scalenc.nrbfn.regression import _RegressionClassifier, _warn_singular

__all__ = [
    "NRBFNClassifier",
    "DEFAULT_ALPHA_GRID",
]


#: The paper's cross-validation grid for λ (Section 7.1.1).
DEFAULT_ALPHA_GRID = (1e-5, 1e-9, 1e-13)

#: k of ``n_neighbors="auto"``: the paper's k = 20 (Section 7.1.1), at most the labeled
#: rows − 1.
AUTO_NEIGHBORS = 20

#: Most rows for which a splitter or an iterable of splits is accepted as ``cv``: their
#: fold of every row is built on the client (8 bytes a row).
MAX_SPLIT_ROWS = 10_000_000


def _hash_fold_block(codes, *, n_folds, seed, fold, block_info=None):
    """Whether each row of a block is in the hash fold ``fold`` (:func:`fold_of`)."""
    start = block_info[0]["array-location"][0][0]
    return nb.fold_of(np.arange(start, start + codes.shape[0]), n_folds, seed) == fold


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
    n_neighbors : int or "auto", default="auto"
        k of soft-KNN. ``"auto"``: the paper's k = 20, or the number of labeled training
        rows − 1 if that is smaller (each row's neighbours are the other rows; with
        ``cv_refit_basis`` the rule applies to each fold's training rows). An int is used
        as given, reduced to the rows − 1 with a :class:`~scalenc.exceptions.DataWarning`
        when the training set is smaller (scikit-learn's ``KNeighborsClassifier`` refuses
        such a k instead; the paper only needs k < n).
    confidence_threshold : float in (0, 1], default=0.9
        t: candidates with confidence below t join the basis.
    alpha : float ≥ 0, sequence of floats, or "cv", default=1e-13
        λ, relative to ‖W̃‖²_F. A sequence is a grid chosen by ``cv``-fold
        cross-validation (held-out error rate; ties go to the earlier value); ``"cv"`` is
        the paper's grid (1e-5, 1e-9, 1e-13).
    cv : int ≥ 2, cross-validation splitter, iterable of (train, test) or None, default=5
        Folds for the λ search (None: 5). An int: a row's fold is a hash of its global
        row index, computed block by block (any number of rows, chunk-invariant). A
        splitter (``KFold``, ``StratifiedKFold``, ``GroupKFold`` with ``groups`` passed to
        ``fit``, ``LeaveOneGroupOut``, ``PredefinedSplit``) or an iterable of index
        splits, as :func:`sklearn.model_selection.check_cv` takes them: their held-out
        sets must partition the labeled rows, each split training on all the others
        (the λ search subtracts a fold's Gram from the total), and the splits are built
        on the client, so X may have at most :data:`MAX_SPLIT_ROWS` rows.
    cv_refit_basis : bool, default=False
        False: the basis and σ are computed once on all training rows and only X* is
        refitted per fold (one Gram pass for every fold and λ). True: the paper's
        protocol, Algorithm 2 (soft-KNN, basis, σ, Gram) re-run on each fold's training
        rows — about four more passes over X per fold.
    n_basis : int or None, default=None
        Exactly this many least-confident candidates as basis (one per class reserved)
        instead of the threshold — the paper's "same basis size as SVM" mode.
    max_basis : int, "auto" or None, default="auto"
        Cap on r. A larger threshold basis is cut to ``max_basis`` rows with a
        :class:`~scalenc.exceptions.BasisCappedWarning`: the least confident row of each
        class, then rows at evenly spaced ranks of the rest in order of confidence (on
        data where the rule asks for most rows, this fitted better than the least
        confident rows: 0.2–0.65 point lower error at the same r on Connect-4 and fars,
        within noise on adult and a simulated problem).
        ``"auto"``: the largest r whose Gram pass (r×r float64 partials alive in the
        tree of fan-in ``split_every``, per fold when cross-validating) and solve fit the
        memory budget, at most :data:`~scalenc.nrbfn.plan.MAX_AUTO_BASIS` (10 000). None: no cap; a
        basis that cannot fit the budget is refused before the Gram pass. An int larger
        than what fits is refused before the first pass.
    n_candidates : int, "auto" or None, default="auto"
        ``"auto"``: the exact all-rows search (None) while its work n² (p + 784) (the
        products and the k-nearest selections) stays under
        :data:`~scalenc.nrbfn.plan.EXACT_KNN_FLOPS` (2e13) and its memory fits the
        budget; otherwise a class-stratified sample of max(10 000, 2 ``max_basis``)
        candidates (fewer if the budget asks), with a
        :class:`~scalenc.exceptions.BasisCappedWarning`.
        None: every labeled row is a soft-KNN candidate (the paper's algorithm exactly;
        O(n² p) time; each block of X is read once and kept on the workers while its
        block pairs run, so O(n p) worker memory in all). An int: a class-stratified
        sample of that many labeled rows (by hash of the global row index and
        ``random_state``; all of them if it is at least their number) whose neighbours
        are still searched in the whole training set in ONE pass. The candidates are
        held in memory (c×p); the basis is drawn from them.
    memory_limit : int, str or None, default=None
        Bytes the fit may use in one process (an int, or a string such as ``"4GB"``).
        None: with a distributed client active, what a worker can add before Dask pauses
        it (the smallest ``memory_limit`` of its workers times Dask's pause fraction, 0.8,
        less the memory a worker holds with scalenc imported) for the block tasks;
        otherwise (and for the client's solve)
        :data:`~scalenc.engine.memory.MEMORY_FRACTION` (a quarter) of the memory the
        machine has available when ``fit`` starts. Before the first pass every stage's
        peak is estimated (``memory_plan_``); the ``"auto"`` defaults choose what fits,
        and a fit that cannot fit raises :class:`MemoryError` naming the parameter to
        change.
    random_state : int, RandomState or None, default=None
        Seeds the candidate sample and the folds (an int is used as the seed itself).
        None or a RandomState draws a seed from that generator at each fit.
    unlabeled : int, float, str or None, default=-1
        The label that marks an unlabeled row, as in :mod:`sklearn.semi_supervised`: such
        rows (and rows labeled None or NaN) never enter a class statistic. ``None``
        for fully supervised data: then ``-1`` is an ordinary class and None/NaN labels are
        refused.
    chunk_rows : int or None, default=None
        Rows per block for NumPy input (None: about 64 MB blocks, at least one per core).
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
    n_neighbors_ : int
        k used by soft-KNN.
    fit_mode_ : str
        ``"exact"`` (the paper's algorithm: all labeled rows candidates, the basis the
        confidence rule asks for), ``"sampled"`` (a candidate sample), ``"capped"``
        (the basis cut by ``max_basis``) or ``"sampled+capped"``.
    memory_plan_ : dict
        The plan made before the first pass: the ``budget`` (bytes per worker process
        and on the client) and its ``budget_source``, ``threads``, ``n_folds``, the
        ``soft_knn`` mode with its reason, estimated bytes and flops,
        ``largest_basis_that_fits``, ``max_basis`` used, and after soft-KNN the
        ``basis`` wanted and taken and the ``gram`` and ``solve`` estimates.
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

    Before the first pass the fit estimates every stage's peak memory from the sizes
    alone (:mod:`scalenc.nrbfn.plan`: the k-NN tables and held blocks, the r×r Gram
    partials alive in the tree of fan-in ``split_every`` — ``n_folds`` each when
    cross-validating — with each thread's tiles, and the solve's copies; MNIST's fit was
    estimated 14 % above its measured peak) and keeps the ``"auto"`` defaults within
    ``memory_limit``: the paper's exact algorithm while it fits, a candidate sample and a
    capped basis beyond (``fit_mode_``, ``memory_plan_``, a
    :class:`~scalenc.exceptions.BasisCappedWarning`). With ``cv_refit_basis=True`` the
    passes are 4 per fold, 1 to score the folds, and 4 for the final fit.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from scalenc import NRBFNClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> model = NRBFNClassifier().fit(X, y)
    >>> model.basis_.shape, model.n_passes_
    ((38, 4), 4)
    >>> round(model.basis_fraction_, 2), round(model.fitting_error_, 2)
    (0.25, 1.05)
    >>> float(model.score(X, y)) > 0.95
    True

    λ chosen by 5-fold cross-validation on the paper's grid, in one more pass:

    >>> model = NRBFNClassifier(alpha="cv", random_state=0).fit(X, y)
    >>> model.alpha_, model.n_passes_
    (1e-09, 5)
    """

    def __init__(
        self,
        n_neighbors="auto",
        *,
        confidence_threshold=0.9,
        alpha=1e-13,
        cv=5,
        cv_refit_basis=False,
        n_basis=None,
        max_basis="auto",
        n_candidates="auto",
        memory_limit=None,
        random_state=None,
        unlabeled=-1,
        chunk_rows=None,
        split_every=8,
    ):
        self.n_neighbors = n_neighbors
        self.confidence_threshold = confidence_threshold
        self.alpha = alpha
        self.cv = cv
        self.cv_refit_basis = cv_refit_basis
        self.n_basis = n_basis
        self.max_basis = max_basis
        self.n_candidates = n_candidates
        self.memory_limit = memory_limit
        self.random_state = random_state
        self.unlabeled = unlabeled
        self.chunk_rows = chunk_rows
        self.split_every = split_every

    # --- parameters ---------------------------------------------------------------

    _parameter_constraints: dict = {
        "n_neighbors": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "confidence_threshold": [Interval(Real, 0.0, 1.0, closed="right")],
        "alpha": "no_validation",  # a float, a sequence of floats or "cv": see _alpha_grid
        "cv": ["cv_object"],
        "cv_refit_basis": ["boolean"],
        "n_basis": [Interval(Integral, 1, None, closed="left"), None],
        "max_basis": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
        "n_candidates": [Interval(Integral, 2, None, closed="left"), StrOptions({"auto"}), None],
        "memory_limit": [Interval(Integral, 1, None, closed="left"), str, None],
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

    def fit(self, X, y, groups=None):
        """Fit the network (Algorithm 2) from (X, y); rows labeled −1/None/NaN are ignored.

        Parameters
        ----------
        X : array-like, Dask array or Zarr array of shape (n, p)
        y : array-like or Dask array of shape (n,)
        groups : array-like of shape (n,), optional
            Group labels of the rows, for a group splitter given as ``cv``
            (e.g. :class:`~sklearn.model_selection.GroupKFold`).

        Returns
        -------
        self

        Examples
        --------
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import NRBFNClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> model = NRBFNClassifier().fit(X, y)
        >>> model.classes_, model.basis_.shape, model.n_passes_
        (array([0, 1, 2]), (38, 4), 4)

        λ chosen by a group splitter, the rows' groups passed to ``fit``:

        >>> import numpy as np
        >>> from sklearn.model_selection import GroupKFold
        >>> groups = np.arange(len(y)) % 5
        >>> model = NRBFNClassifier(alpha="cv", cv=GroupKFold(3)).fit(X, y, groups=groups)
        >>> model.alpha_, model.cv_error_.shape  # the error of each λ of the grid
        (1e-05, (3,))
        """
        grid = self._check_params()
        X, codes = self._prepare_fit(X, y)
        seed = self._seed()
        self.n_passes_ = 0
        self.stage_times_ = {}
        (counts,) = compute(
            passes.label_counts_pass(codes, self.classes_.size, split_every=self.split_every)
        )
        self._check_sizes(counts)
        folds, n_folds = self._cv_folds(X, codes, groups, grid, seed)
        refit = n_folds > 1 and self.cv_refit_basis
        self._plan_fit(X, 1 if refit else n_folds)
        if refit:
            with fit_stage(self, "cv"):
                self.alpha_, self.cv_error_ = self._cv_refit(X, codes, folds, n_folds, grid, seed)
            gram = self._network(X, codes, counts, seed, 1)
        else:
            gram = self._network(X, codes, counts, seed, n_folds, folds)
            with fit_stage(self, "cv"):
                self.alpha_, self.cv_error_ = self._choose_alpha(X, codes, gram, grid, seed, folds)
        with fit_stage(self, "solve"):
            self._solve(gram, self.alpha_)
        del self._plan  # the working plan (memory_plan_ keeps its figures)
        return self

    def _network(self, X, codes, counts, seed, n_folds, folds=None) -> dict:
        """Steps 1–3 on the labeled rows of ``codes``: soft-KNN and the basis, σ, the Gram."""
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
        with fit_stage(self, "gram"):
            return self._gram_pass(X, codes, n_folds, seed, folds)

    def _check_sizes(self, counts):
        n_labeled = int(counts.sum())
        K = self.classes_.size
        for name in ("n_basis", "max_basis"):
            value = getattr(self, name)
            if isinstance(value, numbers.Integral) and value < K:
                raise ValueError(
                    f"{name}={value} is smaller than the number of classes ({K}); the basis "
                    f"needs one row per class. Pass {name} >= {K}."
                )
        if isinstance(self.n_candidates, numbers.Integral) and self.n_candidates < K:
            raise ValueError(
                f"n_candidates={self.n_candidates} is smaller than the number of classes ({K}); "
                f"the stratified sample needs one row per class. Pass n_candidates >= {K}."
            )
        self._n_labeled = n_labeled
        self.n_neighbors_ = self._neighbors_for(n_labeled)

    def _neighbors_for(self, n_rows: int) -> int:
        """k for a soft-KNN over ``n_rows`` labeled rows: each row's neighbours are the
        other rows, so at most ``n_rows − 1`` (``"auto"``: the paper's 20, or fewer)."""
        if self.n_neighbors == "auto":
            return min(AUTO_NEIGHBORS, n_rows - 1)
        if self.n_neighbors >= n_rows:
            warnings.warn(
                f"n_neighbors={self.n_neighbors} is not smaller than the number of labeled "
                f"training rows ({n_rows}); each row's neighbours are the other rows, so "
                f"n_neighbors={n_rows - 1} is used. Pass n_neighbors <= {n_rows - 1} (or "
                "'auto') to silence this warning.",
                DataWarning,
                stacklevel=4,
            )
            return n_rows - 1
        return int(self.n_neighbors)

    # --- the plan: what fits the memory budget ------------------------------------

    def _problem(self, X) -> plan.Problem:
        threads, _ = task_threads()
        distributed = uses_distributed()
        return plan.Problem(
            n_rows=int(X.shape[0]),
            n_labeled=self._n_labeled,
            n_features=int(X.shape[1]),
            itemsize=int(X.dtype.itemsize),
            n_classes=int(self.classes_.size),
            n_neighbors=self.n_neighbors_,
            block_rows=[int(c) for c in X.chunks[0]],
            threads=threads,
            split_every=int(self.split_every),
            distributed=distributed,
        )

    def _plan_fit(self, X, n_folds: int) -> None:
        """Before the first pass over X: the soft-KNN mode, the largest basis that fits the
        budget, and a refusal if even the sampled mode cannot fit (``memory_plan_``)."""
        problem = self._problem(X)
        budget, source = memory_budget(self)
        fmt = memory.format_bytes
        limit_hint = (
            "raise memory_limit"
            if self.memory_limit is not None
            else "pass a larger memory_limit (bytes or e.g. '8GB')"
        )
        r_fit = plan.largest_basis(problem, budget, n_folds)
        K = problem.n_classes
        folds_note = f" with {n_folds} cross-validation folds" if n_folds > 1 else ""
        if r_fit < K:
            need = plan.basis_bytes(problem, K, n_folds)
            raise MemoryError(
                f"{type(self).__name__} cannot fit in the memory budget of {fmt(budget['client'])}"
                f" ({source}): even the smallest basis (one row per class, r={K}) needs "
                f"about {fmt(max(need.values()))} for the Gram pass{folds_note} (per-thread "
                f"tiles, split_every={self.split_every} partials). {limit_hint.capitalize()}, "
                "or lower split_every or chunk_rows."
            )
        for name in ("n_basis", "max_basis"):
            value = getattr(self, name)
            if isinstance(value, numbers.Integral) and value > r_fit:
                need = plan.basis_bytes(problem, int(value), n_folds)
                raise MemoryError(
                    f"{name}={value} needs about {fmt(max(need.values()))} for the r×r Gram "
                    f"partials and the solve{folds_note}, more than the memory budget of "
                    f"{fmt(budget['client'])} ({source}); at most r={r_fit} fits. Pass "
                    f"{name} <= {r_fit} (or max_basis='auto'), or {limit_hint}."
                )
        cap = min(r_fit, plan.MAX_AUTO_BASIS) if self.max_basis == "auto" else self.max_basis
        if self.n_basis is not None:
            cap = None
        mode, reason, c = self._plan_candidates(problem, budget, cap or r_fit, source)
        est = plan.knn_exact_bytes(problem) if c is None else plan.knn_sample_bytes(problem, c)
        self._plan = {"candidates": c, "max_basis": cap, "r_fit": r_fit, "problem": problem}
        self._plan["budget"] = budget
        self._plan["n_folds"] = n_folds
        self.memory_plan_ = {
            "budget": dict(budget),
            "budget_source": source,
            "threads": problem.threads,
            "n_folds": n_folds,
            "soft_knn": {"mode": mode, "n_candidates": c, "reason": reason, **est},
            "max_basis": cap,
            "largest_basis_that_fits": r_fit,
        }

    def _plan_candidates(self, problem, budget, max_basis, source):
        """(mode, reason, candidates or None for the exact all-rows search)."""
        fmt = memory.format_bytes
        n = problem.n_labeled
        if isinstance(self.n_candidates, numbers.Integral):
            c = min(int(self.n_candidates), n)
            est = plan.knn_sample_bytes(problem, c)
            if not plan.fits(est, budget):
                raise MemoryError(
                    f"n_candidates={self.n_candidates} needs about "
                    f"{fmt(max(est['worker'], est['client']))} for the soft-KNN search, more "
                    f"than the memory budget of {fmt(budget['client'])} ({source}). Pass a "
                    "smaller n_candidates (or 'auto'), or raise memory_limit."
                )
            if c >= n:
                return "exact", "n_candidates covers every labeled row", c
            return "sampled", f"n_candidates={self.n_candidates} was given", c
        if self.n_candidates is None:
            est = plan.knn_exact_bytes(problem)
            if not plan.fits(est, budget):
                raise MemoryError(
                    "n_candidates=None (the exact all-rows soft-KNN) needs about "
                    f"{fmt(max(est['worker'], est['client']))} (every row block held, the n×k "
                    f"neighbour tables), more than the memory budget of "
                    f"{fmt(budget['client'])} ({source}). Pass n_candidates='auto' or an int, "
                    "or raise memory_limit."
                )
            return "exact", "n_candidates=None was given", None
        affordable, why = plan.exact_knn_affordable(problem, budget)
        if affordable:
            return "exact", why, None
        c = plan.auto_candidates(problem, budget, max_basis)
        est = plan.knn_sample_bytes(problem, c)
        if not plan.fits(est, budget):
            raise MemoryError(
                f"{type(self).__name__} cannot fit in the memory budget of "
                f"{fmt(budget['client'])} ({source}): {why}, and even a sample of {c} "
                f"soft-KNN candidates needs about {fmt(max(est['worker'], est['client']))}. "
                "Raise memory_limit, or lower chunk_rows."
            )
        return "sampled", f"{why}; a class-stratified sample of {c} candidates", c

    # --- cross-validation folds -----------------------------------------------------

    def _cv_folds(self, X, codes, groups, grid, seed):
        """(folds, n_folds): ``folds`` None for the hash folds of an int ``cv``, else a
        Dask array of each row's held-out fold, row-aligned with X."""
        if len(grid) == 1:
            return None, 1
        cv = 5 if self.cv is None else self.cv
        if isinstance(cv, numbers.Integral):
            if groups is not None:
                raise ValueError(
                    "groups were given but cv is an int (hash folds of the row index); pass a "
                    "group splitter such as cv=GroupKFold(5) to use them."
                )
            return None, int(cv)
        n = X.shape[0]
        if n > MAX_SPLIT_ROWS:
            raise ValueError(
                f"cv={cv!r} needs the row indices of every split on the client, but X has "
                f"{n} rows (more than {MAX_SPLIT_ROWS}). Pass an int cv: its folds are a hash "
                "of the global row index, computed on the workers block by block."
            )
        (code_values,) = compute(codes)
        code_values = np.asarray(code_values)
        if groups is not None:
            groups = np.asarray(compute(groups)[0] if isinstance(groups, da.Array) else groups)
        splits = check_cv(cv, code_values, classifier=True)
        fold = np.full(n, -1, dtype=np.int64)
        labeled = code_values >= 0
        n_splits = 0
        dummy = np.zeros((n, 0))
        for s, (train, test) in enumerate(splits.split(dummy, code_values, groups)):
            test, train = np.asarray(test), np.asarray(train)
            held = np.zeros(n, dtype=bool)
            held[test] = True
            rest = np.zeros(n, dtype=bool)
            rest[train] = True
            overlap = (fold[test] >= 0) & labeled[test]
            if overlap.any() or not np.array_equal(rest & labeled, ~held & labeled):
                raise ValueError(
                    f"cv={cv!r}: NRBFNClassifier cross-validates λ from the Gram of all rows "
                    "minus the held-out rows' Gram, so each split's training rows must be all "
                    "labeled rows outside its held-out rows, and the held-out rows of the "
                    "splits disjoint (KFold, StratifiedKFold, GroupKFold, LeaveOneGroupOut, "
                    f"PredefinedSplit without -1). Split {s} is not of that kind."
                )
            fold[test] = s
            n_splits += 1
        missing = labeled & (fold < 0)
        if missing.any():
            raise ValueError(
                f"cv={cv!r} leaves {int(missing.sum())} labeled rows in no held-out set; every "
                "labeled row must be held out once (the splits must partition the rows)."
            )
        if n_splits < 2:
            raise ValueError(f"cv={cv!r} gives {n_splits} split(s); at least 2 are needed.")
        return from_numpy_rows(fold, X.chunks[0]), n_splits

    def _cv_refit(self, X, codes, folds, n_folds, grid, seed):
        """λ by cross-validation as the paper runs it: Algorithm 2 (soft-KNN, basis, σ and
        the Gram) re-run on each fold's training rows, every λ of the grid solved from that
        fold's Gram, and the held-out rows of all folds scored in one pass."""
        models, problems = [], []
        for f in range(n_folds):
            held = self._held_out(codes, folds, f, n_folds, seed)
            train_codes = da.where(held, -1, codes)
            (counts,) = compute(
                passes.label_counts_pass(
                    train_codes, self.classes_.size, split_every=self.split_every
                )
            )
            fold_fit = clone(self)
            fold_fit.classes_, fold_fit.n_passes_ = self.classes_, 0
            fold_fit.stage_times_ = {}
            fold_fit._n_labeled = int(counts.sum())
            if fold_fit._n_labeled < 2 or np.count_nonzero(counts) < self.classes_.size:
                raise ValueError(
                    f"Cross-validation fold {f} leaves training rows of only "
                    f"{np.count_nonzero(counts)} of the {self.classes_.size} classes; use "
                    "fewer folds or a stratified splitter (cv=StratifiedKFold(...))."
                )
            fold_fit.n_neighbors_ = fold_fit._neighbors_for(fold_fit._n_labeled)
            fold_fit._plan, fold_fit.memory_plan_ = self._plan, dict(self.memory_plan_)
            with warnings.catch_warnings():  # the final fit warns once for a cap or sample
                warnings.simplefilter("ignore", BasisCappedWarning)
                gram = fold_fit._network(X, train_codes, counts, seed, 1)
            self.n_passes_ += fold_fit.n_passes_
            M, B = gram["M"][0], gram["B"][0]
            weights = []
            for lam in grid:
                w, problem = ridge_solve(M, B, lam)
                weights.append(w)
                if problem:
                    problems.append(lam)
            del gram, M, B
            models.append((fold_fit.basis_, fold_fit.sigma_, np.stack(weights)))
        if problems:
            _warn_singular(type(self).__name__, sorted(set(problems)), "in cross-validation")
        (errors,) = compute(
            nrbfn_passes.cv_error_refit_pass(
                X, codes, tuple(models), n_folds, seed, folds=folds, split_every=self.split_every
            )
        )
        self.n_passes_ += 1
        cv_error = errors / self._n_labeled
        return grid[int(np.argmin(cv_error))], cv_error

    def _held_out(self, codes, folds, f, n_folds, seed):
        """Dask boolean array: the rows of held-out fold ``f``."""
        if folds is not None:
            return folds == f
        return codes.map_blocks(
            _hash_fold_block,
            n_folds=n_folds,
            seed=seed,
            fold=f,
            dtype=bool,
            meta=np.empty(0, dtype=bool),
        )

    # --- step 1: soft-KNN -----------------------------------------------------------

    def _soft_knn(self, X, codes, counts, seed):
        """Neighbours of the candidates and their confidence; returns the candidates."""
        size = self._plan["candidates"]
        k = self.n_neighbors_
        if size is None:
            candidates = None
            neighbors, cand_index, cand_codes = self._knn_all_rows(X, codes)
        else:
            size = min(size, self._n_labeled)
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
                    X, codes, candidates, cand_index, k, split_every=self.split_every
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
            passes.kneighbors_all_rows(X, codes, self.n_neighbors_, split_every=self.split_every)
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
        cap = self._plan["max_basis"]
        positions, capped = nb.select_basis(
            self.confidence_,
            cand_codes,
            self.confidence_threshold,
            self.classes_.size,
            n_basis=self.n_basis,
            max_basis=cap,
        )
        wanted = int(np.count_nonzero(self.confidence_ < self.confidence_threshold))
        sampled = cand_index.size < self._n_labeled
        self.fit_mode_ = "+".join(["sampled"] * sampled + ["capped"] * capped) or "exact"
        self.memory_plan_["basis"] = {
            "wanted": wanted if self.n_basis is None else int(self.n_basis),
            "r": int(positions.size),
        }
        if capped:
            reason = (
                f"max_basis={self.max_basis}"
                if self.max_basis != "auto"
                else f"max_basis='auto' = {cap} (the rows whose Gram pass and solve fit the "
                f"memory budget of {memory.format_bytes(self._plan['budget']['worker'])} per "
                f"worker and {memory.format_bytes(self._plan['budget']['client'])} on the "
                f"client: {self.memory_plan_['budget_source']}; at most MAX_AUTO_BASIS="
                f"{plan.MAX_AUTO_BASIS})"
            )
            hint = (
                "Raise max_basis or lower confidence_threshold."
                if self.max_basis != "auto"
                else "Pass an int max_basis (within memory_limit) for a larger basis, or "
                "lower confidence_threshold."
            )
            warnings.warn(
                f"The soft-KNN basis has {wanted} rows with confidence below "
                f"confidence_threshold={self.confidence_threshold}, more than {reason}; "
                f"keeping {cap} of them: the least confident of each class and rows spread "
                f"evenly over the rest in order of confidence. {hint}",
                BasisCappedWarning,
                stacklevel=4,
            )
        elif sampled and self.n_candidates == "auto":
            warnings.warn(
                f"The basis was chosen among a class-stratified sample of {cand_index.size} "
                f"soft-KNN candidates, not all {self._n_labeled} labeled rows: "
                f"{self.memory_plan_['soft_knn']['reason']}. Pass n_candidates=None for "
                "the paper's exact search, or an int to choose the sample size.",
                BasisCappedWarning,
                stacklevel=4,
            )
        r = positions.size
        if cap is None and self.n_basis is None and r > self._plan["r_fit"]:
            need = plan.basis_bytes(self._plan["problem"], r, self._plan["n_folds"])
            raise MemoryError(
                f"The soft-KNN rule asks for a basis of r={r} rows, whose Gram pass and "
                f"solve need about {memory.format_bytes(max(need.values()))}, more than the "
                f"memory budget of {memory.format_bytes(self._plan['budget']['client'])} "
                f"({self.memory_plan_['budget_source']}); at most r={self._plan['r_fit']} "
                "fits. Pass max_basis='auto' (or an int), lower confidence_threshold, or "
                "raise memory_limit."
            )
        self.basis_indices_ = cand_index[positions]
        if candidates is not None:
            self.basis_ = candidates[positions]
        else:
            self.basis_ = passes.gather_rows(X, self.basis_indices_)
            self.n_passes_ += 1
        self.basis_fraction_ = positions.size / self._n_labeled
        problem, n_folds = self._plan["problem"], self._plan["n_folds"]
        self.memory_plan_["gram"] = plan.gram_bytes(problem, r, n_folds)
        self.memory_plan_["solve"] = plan.solve_bytes(problem, r, n_folds)

    # --- steps 2–4 ---------------------------------------------------------------------

    def _sigma_pass(self, X, codes) -> float:
        (stats,) = compute(
            nrbfn_passes.sigma_pass(X, codes, self.basis_, split_every=self.split_every)
        )
        self.n_passes_ += 1
        return float(stats["dist_sum"]) / (float(stats["rows"]) * self.basis_.shape[0])

    def _gram_pass(self, X, codes, n_folds, seed, folds=None) -> dict:
        (gram,) = compute(
            nrbfn_passes.gram_pass(
                X,
                codes,
                self.basis_,
                self.sigma_,
                self.classes_.size,
                n_folds=n_folds,
                seed=seed,
                folds=folds,
                split_every=self.split_every,
            )
        )
        self.n_passes_ += 1
        return gram  # M holds lower triangles; the solves read only those

    def _choose_alpha(self, X, codes, gram, grid, seed, folds=None):
        if len(grid) == 1:
            return grid[0], None
        n_folds = gram["M"].shape[0]
        M_all, B_all = gram["M"].sum(axis=0), gram["B"].sum(axis=0)
        weights = np.empty((n_folds, len(grid)) + B_all.shape)
        problems = []
        for f in range(n_folds):
            M_train, B_train = M_all - gram["M"][f], B_all - gram["B"][f]
            for a, lam in enumerate(grid):
                weights[f, a], problem = ridge_solve(M_train, B_train, lam)
                if problem:
                    problems.append(lam)
        if problems:
            _warn_singular(type(self).__name__, sorted(set(problems)), "in cross-validation")
        (errors,) = compute(
            nrbfn_passes.cv_error_pass(
                X,
                codes,
                self.basis_,
                self.sigma_,
                weights,
                seed,
                folds=folds,
                split_every=self.split_every,
            )
        )
        self.n_passes_ += 1
        cv_error = errors / self._n_labeled
        return grid[int(np.argmin(cv_error))], cv_error

    def _solve(self, gram, lam):
        if gram["M"].shape[0] == 1:  # no fold sums: no r×r copy
            M, B = gram["M"][0], gram["B"][0]
        else:
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
