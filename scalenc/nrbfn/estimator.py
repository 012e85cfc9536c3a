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

from scalenc.base.estimator import (
    fit_seed,
    fit_stage,
    fit_streaming,
    memory_budget,
)
from scalenc.base.validation import (
    CHECKPOINT_CONSTRAINTS,
    TABLE_CONSTRAINTS,
    Integral,
    Interval,
    Real,
    StrOptions,
    document_table_parameters,
    invalid,
)
from scalenc.engine import passes
from scalenc.engine.cluster import compute
from scalenc.engine.folds import held_out, row_folds
from scalenc.exceptions import BasisCappedWarning, DataWarning, InputError
from scalenc.math.linalg import (
    MAX_RANK_BASIS,
    numerical_rank,
    regression_diagnostics,
    ridge_solve,
    warn_singular,
)
from scalenc.nrbfn import blocks as nb
from scalenc.nrbfn import passes as nrbfn_passes
from scalenc.nrbfn import plan
from scalenc.nrbfn.incremental import NetworkUpdatesMixin
from scalenc.nrbfn.network import choose_alphas, fit_network, fixed_normalize, problem_of
from scalenc.nrbfn.regression import _RegressionClassifier

__all__ = [
    "NRBFNClassifier",
    "DEFAULT_ALPHA_GRID",
    "AUTO_ALPHA_GRID",
    "KEEP_STATISTICS_BYTES",
]


#: The paper's cross-validation grid for λ (Section 7.1.1): ``alpha="cv"``.
DEFAULT_ALPHA_GRID = (1e-5, 1e-9, 1e-13)

#: ``alpha="auto"``'s grid: the paper's, widened towards strong regularisation for noisy
#: data (where the paper's λ = 1e-13 overfits: ``benchmarks/README.md``, "Defaults").
AUTO_ALPHA_GRID = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-7, 1e-9, 1e-11, 1e-13)

#: k of ``n_neighbors="auto"``: the paper's k = 20 (Section 7.1.1), at most the labeled
#: rows − 1.
AUTO_NEIGHBORS = 20

#: ``keep_statistics="auto"`` keeps ΦᵀΦ when it takes at most this many bytes (a basis of
#: up to 5792 rows): what lets :meth:`NRBFNClassifier.partial_fit` update a model.
KEEP_STATISTICS_BYTES = 256 * 2**20

# --- nRBFN --------------------------------------------------------------------------------


@document_table_parameters
class NRBFNClassifier(NetworkUpdatesMixin, _RegressionClassifier):
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

    By default (``n_basis="auto"``, ``alpha="auto"``, ``width="auto"``) the basis is
    *grown by what it buys on held-out rows*, the paper's own future work ("online basis
    learning"): steps 2–3 run on nested bases of 128, 256, 512, … candidates
    (:func:`~scalenc.nrbfn.soft_knn.growth_order`: each class's least confident row, the
    confidence rule's rows, then others at random), λ and σ's multiple chosen by
    cross-validation on each, while the held-out error falls by more than 0.1 point (a
    size costing more than about a second only when the last two gains predict that it
    does, one after a loss only when it costs at most three times the sizes before it:
    :func:`~scalenc.nrbfn.search.next_size`); memory is the hard cap.
    ``alpha=1e-13, n_basis=None, width=1.0`` is the paper's protocol (Tables 2 and 4).

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
        t: candidates with confidence below t join the basis (with ``n_basis="auto"``:
        they come first in the order the basis grows).
    alpha : float ≥ 0, sequence of floats, "auto" or "cv", default="auto"
        λ, relative to ‖W̃‖²_F. A sequence is a grid chosen by ``cv``-fold
        cross-validation (held-out error rate; ties go to the earlier value); ``"cv"`` is
        the paper's grid (1e-5, 1e-9, 1e-13); ``"auto"`` a wider one,
        :data:`AUTO_ALPHA_GRID` (1e-1 … 1e-13), since the paper's λ = 1e-13, chosen for
        its clean datasets, overfits noisy data. The paper's fixed λ: ``alpha=1e-13``.
    cv : int ≥ 2, cross-validation splitter, iterable of (train, test) or None, default=5
        Folds for the λ search (None: 5). An int: a row's fold is a hash of its global
        row index, computed block by block (any number of rows, chunk-invariant). A
        splitter (``KFold``, ``StratifiedKFold``, ``GroupKFold`` with ``groups`` passed to
        ``fit``, ``LeaveOneGroupOut``, ``PredefinedSplit``) or an iterable of index
        splits, as :func:`sklearn.model_selection.check_cv` takes them: their held-out
        sets must partition the labeled rows, each split training on all the others
        (the λ search subtracts a fold's Gram from the total), and the splits are built
        on the client, so X may have at most :data:`~scalenc.engine.folds.MAX_SPLIT_ROWS` rows.
    cv_refit_basis : bool, default=False
        False: the basis and σ are computed once on all training rows and only X* is
        refitted per fold (one Gram pass for every fold and λ). True: the paper's
        protocol, Algorithm 2 (soft-KNN, basis, σ, Gram) re-run on each fold's training
        rows — about four more passes over X per fold.
    n_basis : "auto", int or None, default="auto"
        ``"auto"``: the basis grown by held-out error (see above; 3 passes per size tried,
        the sizes' Gram work about 4/3 of the kept size's, or 16/3 with a size tried that
        did not pay; a costly size is tried only when the last gains predict it pays),
        up to ``max_basis``, every distinct row before any repeat; with
        ``cv_refit_basis=True``, the
        confidence rule (None). None: the paper's confidence rule, every candidate with T
        < t. An int: exactly this many least-confident candidates as basis (one per
        class reserved) — the paper's "same basis size as SVM" mode.
    width : "auto" or float > 0, default="auto"
        σ as a multiple of the paper's (the mean distance of the labeled rows to the
        basis, Algorithm 2 step 5). ``"auto"``: with a grown basis, the multiple of
        (1, 1/2, 1/4) with the least held-out error on the first size (its Gram and
        held-out errors in the first size's two passes), kept as the basis grows; when
        it stops, the next narrower multiple is tried on the size before the kept one
        and, if it lowers that size's held-out
        error by three standard errors, on the kept size (larger bases want narrower
        kernels: krkopt 38.4 → 29.7 %); otherwise 1 (the paper's σ).
    normalize : "auto" or bool, default="auto"
        True: the paper's normalised kernel W̃ (each row's Gaussian weights divided by
        their sum). False: the plain Gaussian RBF network's W, whose row sums (the
        kernel's mass) tell a row far from every basis row from one near them; rows
        beyond about 38σ of the basis then score 0 for every class. ``"auto"``: with a
        grown basis, both are tried on the first size with each width (in the same two
        passes), and W is kept for the growth only if its held-out error is lower by
        three standard errors, and then only if W̃ tried again before the kept size and on
        it errs more (on ring, two Gaussians of different spread: 1.89 % against 3.47 % on the
        test rows); otherwise True.
    max_basis : int, "auto" or None, default="auto"
        Cap on r. A larger threshold basis is cut to ``max_basis`` rows with a
        :class:`~scalenc.exceptions.BasisCappedWarning`: the least confident row of each
        class, then rows at evenly spaced ranks of the rest in order of confidence (on
        data where the rule asks for most rows, this fitted better than the least
        confident rows: 0.2–0.65 point lower error at the same r on Connect-4 and fars,
        within noise on adult and a simulated problem).
        ``"auto"``: for a grown basis (``n_basis="auto"``), the largest r whose Gram pass
        and solve fit the memory budget, at most :data:`~scalenc.nrbfn.plan.MAX_AUTO_BASIS`
        and the r whose solves take :data:`~scalenc.nrbfn.plan.GROWN_BYTES` (3 GB);
        for the confidence rule, the smaller of two bounds. Memory: the largest r whose
        Gram pass (r×r float64 partials alive in the tree of fan-in ``split_every``, per fold when
        cross-validating, or one pass per fold where those do not fit) and solve fit the
        memory budget, at most
        :data:`~scalenc.nrbfn.plan.MAX_AUTO_BASIS` (10 000). Cost: the r whose Gram pass,
        n·r² multiply-adds, does at most the soft-KNN search's work n·c·(p + 784)
        (c candidates; :func:`~scalenc.nrbfn.plan.cost_basis`), r = √(c (p + 784)),
        independent of n: on public data the error changed by tenths of a point above
        it while the fit's time grew as r² (``benchmarks/README.md``). None: no cap; a
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
    {table parameters}
    chunk_rows : int or None, default=None
        Rows per block for NumPy input (None: equal blocks of at most about 64 MB, as many
        as a multiple of the cores).
    split_every : int or None, default=None
        Fan-in of the tree reductions; None: Dask's configuration ``scalenc.split-every``
        (8 unless set; :func:`scalenc.engine.reduce.fan_in`).
    {checkpoint parameter}
    keep_statistics : bool or "auto", default="auto"
        Keep ΦᵀΦ (r×r) and ΦᵀY (K×r) after ``fit``, in the model and its file, so that
        :meth:`partial_fit` can update the model with new rows. ``"auto"``: when ΦᵀΦ
        takes at most :data:`KEEP_STATISTICS_BYTES` (256 MiB: a basis of up to 5792
        rows); a larger basis makes them too large to keep by default.

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
    normalize_ : bool
        Whether the kernel is the paper's normalised W̃ (True) or the plain W.
    weights_ : ndarray (K, r)
        X*, the paper's weight matrix.
    alpha_ : float
        λ used for ``weights_`` (the chosen one when cross-validated).
    cv_error_ : ndarray (n_alphas,) or None
        Held-out error rate of every λ of the grid (for a grown basis, at the kept size;
        NaN for a λ not tried there).
    basis_growth_ : dict or None
        For a grown basis, the sizes tried: arrays ``r``, ``width`` (σ's multiple),
        ``sigma``, ``alpha`` (the best λ), ``cv_error`` (its held-out error rate) and
        ``normalize`` (the kernel), one entry per size; None otherwise.
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
    Passes over X with the paper's confidence rule (``n_basis=None`` or an int): 1 for
    soft-KNN (with a candidate sample; in the exact all-rows mode by
    n_b(n_b+1)/2 block-pair tasks in one compute, n p (n + b) flops, each block read once
    and held until its pairs are done), plus 1 to gather the candidate or basis rows, 1 for
    σ, 1 for the Gram, and 1 more to score the λ grid when cross-validating — whatever the
    grid size: 4, or 5 with cross-validation. A grown basis (the default): soft-KNN and
    the gather (2), then 3 per size tried (σ, Gram, held-out errors: every width and
    kernel of the first size in the same three, while their Grams take at most
    :data:`~scalenc.nrbfn.network.BATCH_BYTES`, else 2 more each). With at least four times
    :data:`~scalenc.nrbfn.network.GROWTH_SAMPLE_ROWS` (2^17) labeled rows, the sizes,
    widths and λ are tried on a class-stratified sample of that many rows held in memory
    (one pass gathers it; the held-out errors of 2^17 rows have a standard error of
    0.04 point at 2 % error) and X is read again only for the kept size's σ and Gram: 5
    passes in all (``memory_plan_["basis"]["growth_rows"]``). A size whose n_folds
    Grams per partial do not fit
    the memory budget runs its Gram as one pass per fold (n_folds − 1 more reads of X,
    the same kernel work: ``memory_plan_["gram"]["per_fold"]``). Memory per task: one
    block (two for a k-NN
    block pair and its distance tiles), one W̃ tile of at most
    :data:`~scalenc.nrbfn.blocks.GRAM_TILE_ELEMENTS` float64, and n_folds·(r² + K r)
    float64; on the client O(n_folds·r² + r p) plus,
    in the exact all-rows mode, the n×k neighbour table and n-vectors of labels and
    confidences (with ``n_candidates``, c×k and c-vectors). Unlabeled rows (−1/None/NaN)
    take no part in training. float32 data keeps its distance and kernel products in
    float32 (BLAS speed); W̃W̃ᵀ, F W̃ᵀ, σ and every sum are float64.

    Before the first pass the fit estimates every stage's peak memory from the sizes
    alone (:mod:`scalenc.nrbfn.plan`: the k-NN tables and held blocks, the r×r Gram
    partials alive in the tree of fan-in ``split_every`` — ``n_folds`` each when
    cross-validating, or one each with the other folds' Grams held on the client when
    the fit takes one Gram pass per fold — with each thread's tiles, and the solve's
    copies; MNIST's fit was
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
    >>> model = NRBFNClassifier(random_state=0).fit(X, y)
    >>> model.basis_growth_["r"], model.basis_.shape  # sizes tried, and the one kept
    (array([128, 150]), (128, 4))
    >>> float(model.score(X, y)) > 0.95
    True

    The paper's protocol: its confidence rule for the basis and λ = 1e-13 (4 passes):

    >>> model = NRBFNClassifier(alpha=1e-13, n_basis=None).fit(X, y)
    >>> model.basis_.shape, model.n_passes_
    ((38, 4), 4)
    >>> round(model.basis_fraction_, 2), round(model.fitting_error_, 2)
    (0.25, 1.05)

    λ chosen by 5-fold cross-validation on the paper's grid, in one more pass:

    >>> model = NRBFNClassifier(alpha="cv", n_basis=None, random_state=0).fit(X, y)
    >>> model.alpha_, model.n_passes_
    (1e-09, 5)
    """

    def __init__(
        self,
        n_neighbors="auto",
        *,
        confidence_threshold=0.9,
        alpha="auto",
        cv=5,
        cv_refit_basis=False,
        n_basis="auto",
        width="auto",
        normalize="auto",
        max_basis="auto",
        n_candidates="auto",
        memory_limit=None,
        random_state=None,
        unlabeled=-1,
        categorical="onehot",
        handle_unknown="error",
        handle_missing="error",
        chunk_rows=None,
        split_every=None,
        checkpoint=None,
        keep_statistics="auto",
    ):
        self.n_neighbors = n_neighbors
        self.confidence_threshold = confidence_threshold
        self.alpha = alpha
        self.cv = cv
        self.cv_refit_basis = cv_refit_basis
        self.n_basis = n_basis
        self.width = width
        self.normalize = normalize
        self.max_basis = max_basis
        self.n_candidates = n_candidates
        self.memory_limit = memory_limit
        self.random_state = random_state
        self.unlabeled = unlabeled
        self.categorical = categorical
        self.handle_unknown = handle_unknown
        self.handle_missing = handle_missing
        self.chunk_rows = chunk_rows
        self.split_every = split_every
        self.checkpoint = checkpoint
        self.keep_statistics = keep_statistics

    # --- parameters ---------------------------------------------------------------

    _parameter_constraints: dict = {
        "n_neighbors": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "confidence_threshold": [Interval(Real, 0.0, 1.0, closed="right")],
        "alpha": "no_validation",  # a float, a sequence of floats, "cv" or "auto": _alpha_grid
        "cv": ["cv_object"],
        "cv_refit_basis": ["boolean"],
        "n_basis": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
        "width": [Interval(Real, 0.0, None, closed="neither"), StrOptions({"auto"})],
        "normalize": ["boolean", StrOptions({"auto"})],
        "max_basis": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
        "n_candidates": [Interval(Integral, 2, None, closed="left"), StrOptions({"auto"}), None],
        "memory_limit": [Interval(Integral, 1, None, closed="left"), str, None],
        "random_state": ["random_state"],
        "unlabeled": [Real, str, None],
        **TABLE_CONSTRAINTS,
        **CHECKPOINT_CONSTRAINTS,
        "chunk_rows": [Interval(Integral, 1, None, closed="left"), None],
        "split_every": [Interval(Integral, 2, None, closed="left"), None],
        "keep_statistics": ["boolean", StrOptions({"auto"})],
    }

    def _check_params(self) -> tuple[float, ...]:
        self._validate_params()
        return self._alpha_grid()

    def _alpha_grid(self) -> tuple[float, ...]:
        """The λ grid: one value, the given sequence, or the paper's for ``"cv"``."""

        def real(v):
            number = isinstance(v, numbers.Real) and not isinstance(v, bool)
            return number and np.isfinite(v) and v >= 0

        if isinstance(self.alpha, str) and self.alpha in ("cv", "auto"):
            return DEFAULT_ALPHA_GRID if self.alpha == "cv" else AUTO_ALPHA_GRID
        if real(self.alpha):
            return (float(self.alpha),)
        try:
            grid = [] if isinstance(self.alpha, str) else list(self.alpha)
        except TypeError:
            grid = []
        if not grid or not all(real(a) for a in grid):
            expectation = 'a float >= 0, a non-empty sequence of them, "cv" or "auto"'
            raise invalid(self, "alpha", expectation, self.alpha)
        return tuple(float(a) for a in grid)

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
        >>> model = NRBFNClassifier(n_basis=None, alpha=1e-13).fit(X, y)
        >>> model.classes_, model.basis_.shape, model.n_passes_
        (array([0, 1, 2]), (38, 4), 4)

        λ chosen by a group splitter, the rows' groups passed to ``fit``:

        >>> import numpy as np
        >>> from sklearn.model_selection import GroupKFold
        >>> groups = np.arange(len(y)) % 5
        >>> model = NRBFNClassifier(alpha="cv", n_basis=None, cv=GroupKFold(3))
        >>> model = model.fit(X, y, groups=groups)
        >>> model.alpha_, model.cv_error_.shape  # the error of each λ of the grid
        (1e-05, (3,))
        """
        return fit_streaming(self, X, y, groups=groups)

    def _fit(self, X, codes, grid, groups=None):
        """Algorithm 2 (soft-KNN and the basis, σ, the Gram), λ by cross-validation where
        asked (Algorithm 3), and the solve."""
        seed = fit_seed(self, "nrbfn-seed")
        (counts,) = compute(passes.label_counts_pass(codes, self.classes_.size))
        n_labeled = self._check_sizes(counts)
        self.n_neighbors_ = self._neighbors_for(n_labeled)
        cv = 5 if self.cv is None else self.cv
        owner = type(self).__name__
        grow = self._grows()
        folds, n_folds = (
            (None, 1)
            if len(grid) == 1 and not grow
            else row_folds(cv, X, codes, groups, owner=owner)
        )
        refit = n_folds > 1 and self.cv_refit_basis
        fit_plan = self._plan(X, n_labeled, 1 if refit else n_folds)
        self.memory_plan_ = fit_plan.memory_report()
        network = dict(
            fit_plan=fit_plan, n_neighbors=self.n_neighbors_, stage_times=self.stage_times_
        )
        if refit:
            with fit_stage(self, "cv"):
                self.alpha_, self.cv_error_ = self._cv_refit(
                    X, codes, folds, n_folds, grid, seed, fit_plan, n_labeled
                )
            net = fit_network(self, X, codes, counts, seed, **network)
        else:
            net = fit_network(
                self, X, codes, counts, seed, folds=folds, n_folds=n_folds,
                grid=grid if grow else None, **network,
            )  # fmt: skip
        self._keep_network(net)
        if grow:
            self.alpha_, self.cv_error_ = net.alpha, net.cv_error
        elif not refit and len(grid) == 1:
            self.alpha_, self.cv_error_ = grid[0], None
        elif not refit:
            with fit_stage(self, "cv"):
                ((self.alpha_, self.cv_error_),) = choose_alphas(
                    self, X, codes, [net.gram], self.basis_, ((self.sigma_, self.normalize_),),
                    grid, seed, folds, n_labeled,
                )  # fmt: skip
        with fit_stage(self, "solve"):
            self._solve(net.gram, self.alpha_)

    def _grows(self) -> bool:
        """Whether the basis is grown by held-out error: ``n_basis="auto"``, except with
        ``cv_refit_basis`` (the paper's protocol: its confidence rule on each fold)."""
        return self.n_basis == "auto" and not self.cv_refit_basis

    def _keep_network(self, net) -> None:
        """The fitted attributes of the network that ``fit`` keeps."""
        self.knn_sigma_, self.confidence_ = net.knn_sigma, net.confidence
        self.candidate_indices_, self.basis_indices_ = net.candidate_indices, net.basis_indices
        self.basis_, self.basis_fraction_, self.fit_mode_ = (
            net.basis,
            net.basis_fraction,
            net.fit_mode,
        )
        self.sigma_, self.normalize_ = net.sigma, net.normalize
        self.basis_growth_ = net.growth
        self.memory_plan_.update(net.memory)

    def _check_sizes(self, counts) -> int:
        """The number of labeled rows, after refusing a basis or sample smaller than K."""
        K = self.classes_.size
        for name in ("n_basis", "max_basis"):
            value = getattr(self, name)
            if isinstance(value, numbers.Integral) and value < K:
                raise InputError(
                    f"{name}={value} is smaller than the number of classes ({K}); the basis "
                    f"needs one row per class. Pass {name} >= {K}."
                )
        if isinstance(self.n_candidates, numbers.Integral) and self.n_candidates < K:
            raise InputError(
                f"n_candidates={self.n_candidates} is smaller than the number of classes ({K}); "
                f"the stratified sample needs one row per class. Pass n_candidates >= {K}."
            )
        return int(counts.sum())

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
                stacklevel=5,
            )
            return n_rows - 1
        return int(self.n_neighbors)

    def _plan(self, X, n_labeled: int, n_folds: int) -> plan.FitPlan:
        """Before the first pass over X: the soft-KNN mode, the largest basis that fits the
        budget, and a refusal if even the sampled mode cannot fit (``memory_plan_``)."""
        problem = problem_of(X, n_labeled, self.classes_.size, self.n_neighbors_)
        budget, source = memory_budget(self)
        params = self.get_params()
        if params["n_basis"] == "auto" and not self._grows():
            params["n_basis"] = None  # cv_refit_basis: the confidence rule on each fold
        return plan.plan_fit(params, type(self).__name__, problem, budget, source, n_folds)

    # --- cross-validation of λ ------------------------------------------------------

    def _cv_refit(self, X, codes, folds, n_folds, grid, seed, fit_plan, n_labeled):
        """λ by cross-validation as the paper runs it: Algorithm 2 (soft-KNN, basis, σ and
        the Gram) re-run on each fold's training rows, every λ of the grid solved from that
        fold's Gram, and the held-out rows of all folds scored in one pass."""
        models, problems = [], []
        for f in range(n_folds):
            train_codes = da.where(held_out(codes, folds, f, n_folds, seed), -1, codes)
            (counts,) = compute(passes.label_counts_pass(train_codes, self.classes_.size))
            n_train = int(counts.sum())
            if n_train < 2 or np.count_nonzero(counts) < self.classes_.size:
                raise InputError(
                    f"Cross-validation fold {f} leaves training rows of only "
                    f"{np.count_nonzero(counts)} of the {self.classes_.size} classes; use "
                    "fewer folds or a stratified splitter (cv=StratifiedKFold(...))."
                )
            k = self._neighbors_for(n_train)
            with warnings.catch_warnings():  # the final fit warns once for a cap or sample
                warnings.simplefilter("ignore", BasisCappedWarning)
                net = fit_network(
                    self, X, train_codes, counts, seed, fit_plan=fit_plan, n_neighbors=k
                )
            M, B = net.gram["M"][0], net.gram["B"][0]
            weights = []
            for lam in grid:
                w, problem = ridge_solve(M, B, lam)
                weights.append(w)
                if problem:
                    problems.append(lam)
            del net.gram, M, B
            models.append((net.basis, net.sigma, np.stack(weights)))
        if problems:
            warn_singular(type(self).__name__, sorted(set(problems)), "in cross-validation")
        (errors,) = compute(
            nrbfn_passes.cv_error_refit_pass(
                X,
                codes,
                tuple(models),
                n_folds,
                seed,
                folds=folds,
                normalize=fixed_normalize(self),
            )  # fmt: skip
        )
        cv_error = errors / n_labeled
        return grid[int(np.argmin(cv_error))], cv_error

    def _solve(self, gram, lam):
        if gram["M"].shape[0] == 1:  # no fold sums: no r×r copy
            M, B = gram["M"][0], gram["B"][0]
        else:
            M, B = gram["M"].sum(axis=0), gram["B"].sum(axis=0)
        r = M.shape[0]
        keep = self.keep_statistics
        if keep is True or (keep == "auto" and 8 * r * r <= KEEP_STATISTICS_BYTES):
            self._gram_total = {"M": M[None], "B": B[None], "count": gram["count"].sum()[None]}
        else:
            self._gram_total = None
        self.weights_, problem = ridge_solve(M, B, lam)
        if problem:
            warn_singular(type(self).__name__, lam, problem)
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
            "normalize": self._normalized(),
        }

    def _normalized(self) -> bool:
        """``normalize_``; True for a model file saved before it existed (the paper's W̃,
        the only kernel then)."""
        return getattr(self, "normalize_", True)
