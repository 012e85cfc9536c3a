"""Algorithm 2 of Hu, Pan & Wu on one set of labeled rows: soft-KNN and the basis, σ, and
the r×r normal equations, as a function of its inputs.

:func:`fit_network` is called once by a fit, and once per fold by cross-validation with
the basis re-chosen on each fold's training rows (``cv_refit_basis``); it returns a
:class:`Network` and sets nothing on the estimator, whose parameters it only reads.
"""

from __future__ import annotations

import functools
import numbers
import time
import warnings
from dataclasses import dataclass, field, replace

import dask.array as da
import numpy as np

from scalenc.base.estimator import refuse_nonfinite, timed_stage
from scalenc.engine import checkpoint, passes
from scalenc.engine.cluster import compute, task_threads, uses_distributed
from scalenc.engine.memory import format_bytes
from scalenc.engine.reduce import fan_in, from_numpy_rows
from scalenc.exceptions import BasisCappedWarning, InputError, MemoryBudgetError
from scalenc.math.linalg import TRIDIAGONAL_LAMS, fold_gram, ridge_path, warn_singular
from scalenc.math.sampling import fold_of
from scalenc.math.xp import is_device_array
from scalenc.nrbfn import passes as nrbfn_passes
from scalenc.nrbfn import plan, soft_knn
from scalenc.nrbfn.search import KERNELS, WIDTHS, Search, Trial, growth_sizes

__all__ = [
    "Network",
    "problem_of",
    "fit_network",
    "choose_alphas",
    "GROWTH_SAMPLE_ROWS",
    "growth_rows",
]

#: Labeled rows of the fixed sample on which a grown basis of a large fit chooses its
#: size, σ's multiple and λ (:func:`growth_rows`): the held-out error of 2^17 rows has a
#: standard error of 0.04 point at 2 % error, well under
#: :data:`~scalenc.nrbfn.search.GROWTH_TOLERANCE`, while
#: each size tried on every row of a 1 M × 256 store cost passes of n·r² work (σ, Gram
#: and held-out errors were 336 of the fit's 537 s). Fewer rows when they would hold more
#: than :data:`GROWTH_SAMPLE_BYTES`.
GROWTH_SAMPLE_ROWS = 2**17
GROWTH_SAMPLE_BYTES = 2**29
#: A fit samples its growth rows only when it has this many times the sample's rows.
GROWTH_SAMPLE_FACTOR = 4

#: Kernels of one basis share a Gram pass, and a held-out pass, while their Grams, or
#: their weights, take at most this many bytes (W and W̃ and σ's multiples on a grown
#: basis's first size: on iris one pass of each for six, which took twelve passes).
BATCH_BYTES = 2**27

#: Frames between a user's ``fit`` call and the warnings of :func:`fit_network`'s steps
#: (step, fit_network, the estimator's _fit, fit_streaming, fit).
_USER_FRAME = 6


@dataclass
class Network:
    """What Algorithm 2 chose and accumulated on one set of labeled rows."""

    knn_sigma: float
    confidence: np.ndarray
    candidate_indices: np.ndarray
    basis_indices: np.ndarray
    basis: np.ndarray
    basis_fraction: float
    fit_mode: str
    sigma: float
    #: ΦᵀΦ (lower triangles) and ΦᵀY per fold, with the rows counted
    gram: dict
    #: the figures the fit adds to ``memory_plan_``: "basis", "gram", "solve"
    memory: dict = field(default_factory=dict)
    #: λ and the held-out error of each λ of the grid, when chosen while fitting (a grown
    #: basis); None when the caller chooses λ (:func:`choose_alphas`)
    alpha: float | None = None
    cv_error: np.ndarray | None = None
    #: a grown basis's sizes with their σ, λ and held-out error (:func:`_grow`)
    growth: dict | None = None
    #: whether the kernel is the paper's normalised W̃ (else the plain Gaussian W)
    normalize: bool = True


def problem_of(X: da.Array, n_labeled: int, n_classes: int, n_neighbors: int):
    """The sizes the memory plan needs (:class:`scalenc.nrbfn.plan.Problem`), with the
    threads of one worker from the engine's one rule (:func:`task_threads`)."""
    threads, _ = task_threads()
    return plan.Problem(
        n_rows=int(X.shape[0]),
        n_labeled=n_labeled,
        n_features=int(X.shape[1]),
        itemsize=int(X.dtype.itemsize),
        n_classes=int(n_classes),
        n_neighbors=n_neighbors,
        block_rows=[int(c) for c in X.chunks[0]],
        threads=threads,
        fan_in=fan_in(),
        distributed=uses_distributed(),
    )


def fit_network(
    est,
    X,
    codes,
    counts,
    seed: int,
    *,
    fit_plan: plan.FitPlan,
    n_neighbors: int,
    folds=None,
    n_folds: int = 1,
    stage_times: dict | None = None,
    grid: tuple | None = None,
) -> Network:
    """Steps 1–3 on the labeled rows of ``codes``: soft-KNN and the basis, σ, the Gram.

    ``est`` gives the parameters (``confidence_threshold``, ``n_basis``, ``max_basis``,
    ``n_candidates``, ``split_every``); ``counts`` the labeled rows per class;
    ``stage_times``, if given, receives each step's seconds. With ``grid`` (the λ grid)
    the basis is grown by held-out error (:func:`_grow`, ``n_basis="auto"``), which needs
    ``n_folds`` > 1, and λ is chosen with it.
    """
    n_labeled = int(counts.sum())
    with timed_stage(stage_times, "soft_knn"):
        knn = _soft_knn(est, X, codes, counts, seed, fit_plan, n_neighbors, n_labeled)
    if grid is not None:
        return _grow(est, X, codes, counts, seed, knn, fit_plan, folds, n_folds, grid, stage_times)
    with timed_stage(stage_times, "soft_knn"):
        net = _choose_basis(est, X, knn, fit_plan, n_labeled)
    normalize = fixed_normalize(est)
    sigma, gram = _sigma_and_gram(
        est, X, codes, net["basis"], _fixed_width(est), seed, folds, n_folds, fit_plan,
        stage_times, normalize,
    )  # fmt: skip
    return Network(
        knn_sigma=knn["knn_sigma"],
        confidence=knn["confidence"],
        candidate_indices=knn["cand_index"],
        sigma=sigma,
        gram=gram,
        normalize=normalize,
        **net,
    )


def _sigma(est, X, codes, basis, stage_times) -> float:
    """Algorithm 2 step 5: σ, the mean distance of the labeled rows to the basis (one pass)."""
    with timed_stage(stage_times, "sigma"):
        (stats,) = compute(nrbfn_passes.sigma_pass(X, codes, basis))
        sigma = float(stats["dist_sum"]) / (float(stats["rows"]) * basis.shape[0])
    if not sigma > 0:
        raise InputError(
            "Every labeled row is at distance 0 from every basis row (sigma_ = 0): the "
            "training rows are identical, so the Gaussian basis has no width. Check the "
            "data (a constant X, or one row repeated), or use LRClassifier."
        )
    return sigma


def _sigma_and_gram(
    est, X, codes, basis, width, seed, folds, n_folds, fit_plan, stage_times, normalize
):  # fmt: skip
    """Algorithm 2 steps 5–8 for one basis: σ (one pass, times ``width``), then the
    per-fold Gram (one pass, or one per fold)."""
    sigma = _sigma(est, X, codes, basis, stage_times) * width
    kernels = ((sigma, normalize),)
    (gram,) = _grams(est, X, codes, basis, kernels, seed, folds, n_folds, fit_plan, stage_times)
    return sigma, gram


def _fixed_width(est) -> float:
    """The multiple of the paper's σ that ``width`` fixes (1 for ``"auto"`` outside growth)."""
    return 1.0 if isinstance(est.width, str) else float(est.width)


def fixed_normalize(est) -> bool:
    """The kernel ``normalize`` fixes: the paper's W̃ for ``"auto"`` outside growth."""
    return True if isinstance(est.normalize, str) else bool(est.normalize)


def _grams(est, X, codes, basis, kernels, seed, folds, n_folds, fit_plan, stage_times) -> list:
    """Algorithm 2 steps 6–8 for each of ``kernels`` ((σ, normalize) pairs) on one basis:
    ΦᵀΦ and ΦᵀY per fold, in one pass, or in one pass per fold where the plan's budget
    does not hold their n_folds r×r Grams per partial
    (:func:`~scalenc.nrbfn.plan.gram_per_fold`)."""
    problem, r, n_kernels = fit_plan.problem, basis.shape[0], len(kernels)
    per_fold = plan.gram_per_fold(problem, fit_plan.budget, r, n_folds * n_kernels)

    def one_pass(only_fold=None):
        return nrbfn_passes.gram_pass(
            X, codes, basis, kernels, problem.n_classes, n_folds=n_folds, seed=seed,
            folds=folds, only_fold=only_fold,
            allowed=lambda rows: plan.fits(
                plan.gram_bytes(
                    replace(problem, block_rows=list(rows)), r, n_folds * n_kernels, per_fold
                ),
                fit_plan.budget,
            ),
        )  # fmt: skip

    with timed_stage(stage_times, "gram"):
        if not per_fold:
            (gram,) = compute(one_pass())  # M holds lower triangles; the solves read only those
        else:
            K = problem.n_classes
            # np.empty: a fold's pages are taken when its pass fills them
            gram = {"M": np.empty((n_kernels, n_folds, r, r))}
            gram["B"], gram["count"] = np.empty((n_kernels, n_folds, K, r)), np.empty(n_folds)
            for f in range(n_folds):
                (part,) = compute(one_pass(f))
                gram["M"][:, f], gram["B"][:, f] = part["M"][:, 0], part["B"][:, 0]
                gram["count"][f] = part["count"][0]
                del part
    # views: no r×r copy (the held-out solves replace each by its folds' sum)
    return [{"M": M, "B": B, "count": gram["count"]} for M, B in zip(gram["M"], gram["B"])]


def _together(fit_plan: plan.FitPlan, r: int, n_kernels: int, n_folds: int, n_alphas: int):
    """Whether the kernels of a step on an r-row basis share its passes: while their
    Grams and their held-out weights take at most :data:`BATCH_BYTES` each and the plan
    holds a Gram pass of all their folds (else one kernel at a time, as many Grams alive
    as one at a time would keep: a 1 000-class first size's weights are 720 MB each)."""
    problem, K = fit_plan.problem, fit_plan.problem.n_classes
    grams = 8 * n_kernels * n_folds * (r * r + K * r)
    weights = 8 * n_kernels * n_folds * n_alphas * K * r
    if n_kernels == 1 or max(grams, weights) > BATCH_BYTES:
        return False
    return not plan.gram_per_fold(problem, fit_plan.budget, r, n_folds * n_kernels)


def _release(grams: list, errors: list, kinds: tuple) -> None:
    """Let go of the Grams no step can keep: all but the first of least error of each
    kernel (:meth:`~scalenc.nrbfn.search.Search.choose` keeps one of those)."""
    for kind in set(kinds[: len(errors)]):
        own = [i for i in range(len(errors)) if kinds[i] == kind]
        best = min(own, key=lambda i: errors[i].min())
        for i in own:
            if i != best:
                grams[i] = None


def _gram_memory(fit_plan: plan.FitPlan, r: int, n_folds: int) -> dict:
    """The Gram's estimate for ``memory_plan_``, in the way the fit ran it, and that way
    (``per_fold``: one pass per fold)."""
    per_fold = plan.gram_per_fold(fit_plan.problem, fit_plan.budget, r, n_folds)
    return {**plan.gram_bytes(fit_plan.problem, r, n_folds, per_fold), "per_fold": per_fold}


def _grow(est, X, codes, counts, seed, knn, fit_plan, folds, n_folds, grid, stage_times):
    """The basis grown by what it buys on held-out rows (``n_basis="auto"``): the
    :class:`~scalenc.nrbfn.search.Search` of its sizes, σ's multiple, kernel and λ, each
    step's trials run by :class:`_Steps` (σ, the per-fold Grams of every kernel tried and
    their held-out errors, three passes).

    The candidates in :func:`~scalenc.nrbfn.soft_knn.growth_order` (each class's least
    confident row, the confidence rule's rows spread over their ranks, then the others
    at random), each row equal to one before it moved after every distinct row
    (:func:`~scalenc.nrbfn.soft_knn.distinct_first`: a basis of a table of few distinct
    rows holds every one of them); its prefixes of :func:`growth_sizes` rows are tried in
    turn. The size and λ with the least held-out error are kept (ties to the smaller),
    with that size's Gram.
    """
    n_labeled = int(counts.sum())
    with timed_stage(stage_times, "soft_knn"):
        steps = _Steps.of_candidates(est, X, knn, fit_plan, seed, counts.size)
    own = _fold_of_rows(steps.index, folds, n_folds, seed)  # each candidate's held-out fold
    sample = growth_rows(est, X, codes, counts, seed, folds, n_folds)
    steps.data = (X, codes, folds, n_labeled) if sample is None else sample
    steps.own, steps.n_folds, steps.stage_times = own, n_folds, stage_times
    search = Search(steps, grid, steps.data[3])
    widths = WIDTHS if est.width == "auto" else (_fixed_width(est),)
    kinds = KERNELS if est.normalize == "auto" else (fixed_normalize(est),)
    stopped = search.grow(steps.sizes, widths, kinds, n_labeled)
    # the cap stopped a growth that reached it with its error not above the best before
    # (the cap's own gain is no guide: 4 196 rows after 4 096 gain little whatever comes)
    grown = search.growth()
    capped = not stopped and steps.at_cap and search.steps[-1].error <= search.best.error
    if est.width == "auto":
        search.narrower_width()
    if est.normalize == "auto":
        search.paper_kernel_again()
    best, kept = search.best, search.kept
    prefix, basis, _ = steps.basis(best.r)
    sigma = best.sigma
    if sample is not None:  # the kept size's σ and Gram over every row (no folds: λ is chosen)
        search.kept = kept = None
        sigma, kept = _sigma_and_gram(
            est, X, codes, basis, best.width, seed, None, 1, fit_plan, stage_times, best.normalize
        )
    if capped:
        _warn_grown_capped(est, fit_plan, grown)
    return Network(
        knn_sigma=knn["knn_sigma"],
        confidence=knn["confidence"],
        candidate_indices=knn["cand_index"],
        basis_indices=prefix,
        basis=basis,
        basis_fraction=best.r / n_labeled,
        fit_mode="+".join(["sampled"] * (knn["cand_index"].size < n_labeled) + ["capped"] * capped)
        or "exact",
        sigma=sigma,
        gram=kept,
        memory={
            "basis": {
                "wanted": "grown",
                "r": int(best.r),
                "sizes_tried": [int(step.r) for step in search.steps],
                "growth_rows": steps.data[3],
            },
            "gram": _gram_memory(fit_plan, best.r, n_folds),
            "solve": plan.solve_bytes(fit_plan.problem, best.r, n_folds),
        },
        alpha=best.alpha,
        cv_error=best.on_grid(grid),
        growth=search.growth(),
        normalize=best.normalize,
    )


class _Steps:
    """The runner of a :class:`~scalenc.nrbfn.search.Search`'s steps: the candidates in
    growth order, and the passes of a step on ``data`` (the labeled rows, or the growth
    sample: X, codes, folds, rows), ``own`` the candidates' held-out folds."""

    def __init__(self, est, fit_plan, seed, order, index, rows, sizes, at_cap):
        self.est, self.fit_plan, self.seed = est, fit_plan, seed
        self.order, self.index, self.rows = order, index, rows
        self.sizes, self.at_cap = sizes, at_cap
        self.data = self.own = self.stage_times = None
        self.n_folds = 1

    @classmethod
    def of_candidates(cls, est, X, knn, fit_plan, seed, n_classes):
        """The candidates in :func:`~scalenc.nrbfn.soft_knn.growth_order`, every distinct row
        before any repeat, gathered up to the cap; the sizes to try."""
        cand_index = knn["cand_index"]
        order = soft_knn.growth_order(
            knn["confidence"], knn["cand_codes"], cand_index, est.confidence_threshold,
            n_classes, seed,
        )  # fmt: skip
        cap = fit_plan.max_basis
        top = order.size if cap is None else min(order.size, cap)
        index = np.sort(cand_index[order[:top]])
        if knn["candidates"] is not None:
            rows = knn["candidates"][np.searchsorted(cand_index, index)]
        else:
            rows = passes.gather_rows(X, index)
        # every distinct row before any repeat: a small basis covers every cell of a table
        # of few distinct rows, a larger one adds repeats (in the normalised kernel a
        # repeated centre weighs its cell by its frequency, which held-out error may prefer)
        in_order = rows[np.searchsorted(index, cand_index[order[:top]])]
        order = np.concatenate([soft_knn.distinct_first(in_order, order[:top]), order[top:]])
        sizes = growth_sizes(n_classes, top, capped=top < order.size)
        return cls(est, fit_plan, seed, cand_index[order], index, rows, sizes, top < order.size)

    def basis(self, r):
        """The first ``r`` candidates of the growth order: their global indices (sorted),
        their rows and their positions among the gathered rows."""
        prefix = np.sort(self.order[:r])
        at = np.searchsorted(self.index, prefix)
        return prefix, self.rows[at], at

    def __call__(self, r, kernels, lams, paper_sigma):
        """A step: σ (one pass, unless ``paper_sigma`` is given), the Grams of every
        (width, normalize) of ``kernels`` and their held-out errors over ``lams``."""
        start = time.perf_counter()
        est, fit_plan, (X, codes, folds, n_rows) = self.est, self.fit_plan, self.data
        _, basis, at = self.basis(r)
        if paper_sigma is None:
            paper_sigma = _sigma(est, X, codes, basis, self.stage_times)
        pairs = tuple((paper_sigma * width, kind) for width, kind in kernels)
        together = _together(fit_plan, r, len(pairs), self.n_folds, len(lams))
        grams, errors = [], []
        for group in [pairs] if together else [(pair,) for pair in pairs]:
            grams += _grams(
                est, X, codes, basis, group, self.seed, folds, self.n_folds, fit_plan,
                self.stage_times,
            )  # fmt: skip
            with timed_stage(self.stage_times, "cv"):
                errors += [
                    error
                    for _, error in choose_alphas(
                        est, X, codes, grams[-len(group) :], basis, group, lams, self.seed,
                        folds, n_rows, self.own[at],
                    )
                ]  # fmt: skip
            _release(grams, errors, tuple(kind for _, kind in kernels))
        seconds = time.perf_counter() - start
        planned = plan.gram_bytes(fit_plan.problem, r, self.n_folds)["worker"]
        trials = [
            Trial(r, width, sigma, kind, lams, errors, self.n_folds, n_rows, seconds, planned)
            for (width, kind), (sigma, _), errors in zip(kernels, pairs, errors)
        ]
        return trials, grams


def growth_rows(est, X, codes, counts, seed, folds, n_folds):
    """The fixed sample of labeled rows on which a large fit grows its basis, or None.

    With at least :data:`GROWTH_SAMPLE_FACTOR` times :data:`GROWTH_SAMPLE_ROWS` labeled
    rows (fewer when those rows would exceed :data:`GROWTH_SAMPLE_BYTES`), a
    class-stratified sample of them (by hash of the global row index and the seed: the
    same for every chunking) is read in one pass and held in memory; each basis size's
    σ, per-fold Gram and held-out errors are computed on it, and only the kept size's σ
    and Gram on every row. Returns ``(X, codes, folds, rows)`` of the sample as row-block
    Dask arrays, ``folds`` each sampled row's fold as the whole fit assigns it. Data on a
    device grows on every row (the sample would come to the host).
    """
    m = min(GROWTH_SAMPLE_ROWS, GROWTH_SAMPLE_BYTES // max(1, X.shape[1] * X.dtype.itemsize))
    if int(counts.sum()) < GROWTH_SAMPLE_FACTOR * m or is_device_array(X._meta):
        return None
    (drawn,) = compute(passes.stratified_sample_pass(codes, counts, m, seed))
    order = np.argsort(np.asarray(drawn["index"]))
    index = np.asarray(drawn["index"], dtype=np.int64)[order]
    sampled_codes = np.asarray(drawn["code"], dtype=np.int64)[order]
    rows = passes.gather_rows(X, index)
    block = int(max(X.chunks[0]))
    sampled_folds = _fold_of_rows(index, folds, n_folds, seed)
    return (
        from_numpy_rows(rows, block),
        from_numpy_rows(sampled_codes, block),
        from_numpy_rows(sampled_folds, block),
        int(index.size),
    )


def choose_alphas(est, X, codes, grams, basis, kernels, grid, seed, folds, n_labeled, own=None):
    """λ of the grid with the least held-out error, and every λ's error rate, for each
    of ``kernels`` ((σ, normalize) pairs, ``grams`` their Grams on one basis): each fold's
    weights solved from the Gram of all rows minus the fold's (:func:`_fold_weights`),
    each labeled row scored by its own fold's weights, every kernel in one pass. The
    basis is not refitted per fold. Returns (λ, error rates) per kernel.

    Where :func:`_rotates` says so (many classes), the weights stay in each fold's Q
    coordinates (:func:`~scalenc.math.linalg.ridge_path`'s ``rotate``) and the pass
    multiplies a row's kernel by Q once for every λ.

    With ``own``, the folds of the basis rows (a grown basis), fold f's model also leaves
    out the basis rows that lie in fold f — the block of the Gram without their rows and
    columns — so that no held-out row is scored by a model with a centre on itself, as no
    test row is. Without it, where the basis is most of the training rows (noisy data),
    held-out rows that are their own centres favoured the smallest λ: on cora the
    held-out errors ranked λ = 1e-5 first and 1e-9 second where the test errors were
    32.1 and 22.9 %.
    """
    n_folds, (K, r) = grams[0]["M"].shape[0], grams[0]["B"].shape[1:]
    weights = np.zeros((len(kernels), n_folds, len(grid), K, r))
    rotate = _rotates(n_folds, r, len(grid), K, n_labeled)
    rotations = np.zeros((len(kernels), n_folds, r, r)) if rotate else None
    for v, gram in enumerate(grams):
        _fold_weights(est, gram, grid, own, weights[v], rotate and rotations[v])
    pass_ = nrbfn_passes.cv_error_pass
    (counts,) = compute(pass_(X, codes, basis, kernels, weights, seed, folds, rotations))
    return [(grid[int(np.argmin(errors))], errors) for errors in counts / n_labeled]


def _rotates(n_folds: int, r: int, n_alphas: int, K: int, n_rows: int) -> bool:
    """Whether the held-out weights stay in Q's coordinates: on the tridiagonal path, where
    Q formed (4/3 r³ a fold) and applied to each row (2 r²) costs less than Q applied to
    each λ's K×r weights (2 r² n_alphas K a fold)."""
    if n_alphas < TRIDIAGONAL_LAMS or r < 2:
        return False
    return n_folds * 4 / 3 * r + 2 * n_rows < 2 * n_folds * n_alphas * K


def _fold_weights(est, gram, grid, own, weights, rotations=False) -> None:
    """X* of every fold and λ into the zeros ``weights`` (n_folds, n_alphas, K, r): fold
    f's from the Gram of all rows minus its own, without the basis rows in fold f where
    ``own`` gives their folds (zero weights for those). With ``rotations`` (zeros, (n_folds,
    r, r); else False), fold f's weights Y on its first columns and its Q on the rows of
    the basis rows it keeps: X* = Y Qᵀ (:func:`~scalenc.math.linalg.ridge_path`'s ``rotate``).

    One array holds a fold's training Gram, formed again for each λ and factorised in
    place; ``gram`` then holds its folds' sums alone, what the final solve reads."""
    n_folds, r = gram["M"].shape[:2]
    M_all, B_all = gram["M"].sum(axis=0), gram["B"].sum(axis=0)
    work, problems = np.empty(r * r), []
    for f in range(n_folds):
        # the basis rows of fold f leave its model (all rows stay without a grown basis)
        keep = np.arange(r) if own is None else np.flatnonzero(own != f)
        form = functools.partial(fold_gram, M_all, gram["M"][f], keep, out=work)
        B_train = B_all[:, keep] - gram["B"][f][:, keep]
        if rotations is False:
            weights[f][..., keep], singular = ridge_path(form(), B_train, grid, refill=form)
        else:
            solved, singular, Q = ridge_path(form(), B_train, grid, rotate=True, refill=form)
            weights[f][..., : keep.size], rotations[f][keep, : keep.size] = solved, Q
        problems.extend(singular)
    gram.update(M=M_all[None], B=B_all[None], count=gram["count"].sum(keepdims=True))
    if problems:
        warn_singular(type(est).__name__, sorted(set(problems)), "in cross-validation")


def _fold_of_rows(index, folds, n_folds, seed) -> np.ndarray:
    """The cross-validation fold of the rows at the global ``index``: their entries of the
    row-aligned ``folds`` (given splits), or :func:`fold_of` of the index (hash folds), as
    the Gram pass assigns them."""
    if folds is None:
        return fold_of(np.asarray(index), n_folds, seed)
    (values,) = compute(folds[np.asarray(index)])
    return np.asarray(values, dtype=np.int64)


def _soft_knn(est, X, codes, counts, seed, fit_plan, k, n_labeled) -> dict:
    """Algorithm 1: the candidates' k nearest labeled rows and their confidence."""
    size = fit_plan.candidates
    if size is None:
        candidates = None
        neighbors, cand_index, cand_codes = _knn_all_rows(X, codes, k)
    else:
        size = min(size, n_labeled)
        (sample,) = compute(passes.stratified_sample_pass(codes, counts, size, seed))
        order = np.argsort(sample["index"])
        cand_index, cand_codes = sample["index"][order], sample["code"][order]
        candidates = passes.gather_rows(X, cand_index)
        (neighbors,) = compute(passes.kneighbors_pass(X, codes, candidates, cand_index, k))
    refuse_nonfinite(neighbors["nonfinite"])
    knn_sigma = soft_knn.knn_sigma(neighbors["dist2"])
    confidence = soft_knn.soft_knn_confidence(
        neighbors["dist2"], neighbors["label"], cand_codes, knn_sigma
    )
    return {
        "candidates": candidates,
        "cand_index": cand_index,
        "cand_codes": cand_codes,
        "knn_sigma": knn_sigma,
        "confidence": confidence,
    }


def _knn_all_rows(X, codes, k):
    """Exact search for every labeled row: block pairs, one pass per row block of X (kept
    in a checkpointed fit's checkpoint: its graph is not one reduction of X's blocks)."""

    def search():
        return compute(passes.kneighbors_all_rows(X, codes, k))[0]

    token = checkpoint.fingerprint(X, codes, k, fan_in())
    results = search() if token is None else checkpoint.remembered(f"knn-{token}", search)
    neighbors = {
        key: np.concatenate([res[0][key] for res in results]) for key in ("dist2", "index", "label")
    }
    neighbors["nonfinite"] = sum(int(res[0]["nonfinite"]) for res in results)
    return (
        neighbors,
        np.concatenate([res[1] for res in results]),
        np.concatenate([res[2] for res in results]),
    )


def _choose_basis(est, X, knn, fit_plan: plan.FitPlan, n_labeled: int) -> dict:
    """The basis rows by the confidence rule (capped where the plan says), gathered."""
    cap = fit_plan.max_basis
    n_basis = est.n_basis if isinstance(est.n_basis, numbers.Integral) else None
    confidence, cand_index, cand_codes = knn["confidence"], knn["cand_index"], knn["cand_codes"]
    positions, capped = soft_knn.select_basis(
        confidence,
        cand_codes,
        est.confidence_threshold,
        int(fit_plan.problem.n_classes),
        n_basis=n_basis,
        max_basis=cap,
    )
    wanted = int(np.count_nonzero(confidence < est.confidence_threshold))
    sampled = cand_index.size < n_labeled
    if capped:
        _warn_capped(est, fit_plan, wanted, cap)
    elif sampled and est.n_candidates == "auto":
        warnings.warn(
            f"The basis was chosen among a class-stratified sample of {cand_index.size} "
            f"soft-KNN candidates, not all {n_labeled} labeled rows: "
            f"{fit_plan.knn_reason}. Pass n_candidates=None for "
            "the paper's exact search, or an int to choose the sample size.",
            BasisCappedWarning,
            stacklevel=_USER_FRAME,
        )
    r = positions.size
    if cap is None and n_basis is None and r > fit_plan.r_fit:
        need = plan.basis_bytes(fit_plan.problem, r, fit_plan.n_folds)
        raise MemoryBudgetError(
            f"The soft-KNN rule asks for a basis of r={r} rows, whose Gram pass and "
            f"solve need about {format_bytes(max(need.values()))}, more than the "
            f"memory budget of {format_bytes(fit_plan.budget['client'])} "
            f"({fit_plan.budget_source}); at most r={fit_plan.r_fit} "
            "fits. Pass max_basis='auto' (or an int), lower confidence_threshold, or "
            "raise memory_limit."
        )
    basis_indices = cand_index[positions]
    if knn["candidates"] is not None:
        basis = knn["candidates"][positions]
    else:
        basis = passes.gather_rows(X, basis_indices)
    problem, n_folds = fit_plan.problem, fit_plan.n_folds
    return {
        "basis_indices": basis_indices,
        "basis": basis,
        "basis_fraction": positions.size / n_labeled,
        "fit_mode": "+".join(["sampled"] * sampled + ["capped"] * capped) or "exact",
        "memory": {
            "basis": {"wanted": wanted if n_basis is None else n_basis, "r": int(r)},
            "gram": _gram_memory(fit_plan, r, n_folds),
            "solve": plan.solve_bytes(problem, r, n_folds),
        },
    }


def _warn_grown_capped(est, fit_plan: plan.FitPlan, path: dict) -> None:
    sizes = ", ".join(f"{r}: {100 * e:.2f} %" for r, e in zip(path["r"], path["cv_error"]))
    source = (
        f"max_basis={est.max_basis}"
        if est.max_basis != "auto"
        else f"the memory budget ({fit_plan.budget_source}; max_basis='auto' = "
        f"{fit_plan.max_basis}, at most MAX_AUTO_BASIS={plan.MAX_AUTO_BASIS} and what "
        f"GROWN_BYTES={format_bytes(plan.GROWN_BYTES)} holds)"
    )
    warnings.warn(
        f"The grown basis stopped at {path['r'][-1]} rows, the most that {source} allows, "
        f"while its held-out error was still falling (basis rows: error {sizes}). Pass a "
        "larger max_basis (within memory_limit) for a larger basis.",
        BasisCappedWarning,
        stacklevel=_USER_FRAME + 1,
    )


def _warn_capped(est, fit_plan: plan.FitPlan, wanted: int, cap: int) -> None:
    memory = (
        f"the rows whose Gram pass and solve fit the memory budget of "
        f"{format_bytes(fit_plan.budget['worker'])} per worker and "
        f"{format_bytes(fit_plan.budget['client'])} on the client: {fit_plan.budget_source}"
    )
    if est.max_basis != "auto":
        reason = f"max_basis={est.max_basis}"
    elif fit_plan.cap_source == "cost":
        p = fit_plan.problem.n_features
        c = fit_plan.candidates or fit_plan.problem.n_labeled
        reason = (
            f"max_basis='auto' = {cap} (the basis whose Gram pass, n·r² multiply-adds, "
            f"costs at most the soft-KNN search's work n·c·(p + "
            f"{plan.SELECT_FLOPS_PER_SCORE}), c = {c} "
            f"candidates, p = {p}, or {plan.FREE_GRAM_WORK:.0e} if more: a larger basis "
            f"makes the fit grow as r² for tenths of a point; {fit_plan.r_fit} would fit "
            f"in memory)"
        )
    else:
        reason = (
            f"max_basis='auto' = {cap} ({memory}; at most MAX_AUTO_BASIS={plan.MAX_AUTO_BASIS})"
        )
    hint = (
        "Raise max_basis or lower confidence_threshold."
        if est.max_basis != "auto"
        else "Pass an int max_basis (within memory_limit) for a larger basis, or "
        "lower confidence_threshold."
    )
    warnings.warn(
        f"The soft-KNN basis has {wanted} rows with confidence below "
        f"confidence_threshold={est.confidence_threshold}, more than {reason}; "
        f"keeping {cap} of them: the least confident of each class and rows spread "
        f"evenly over the rest in order of confidence. {hint}",
        BasisCappedWarning,
        stacklevel=_USER_FRAME + 1,
    )
