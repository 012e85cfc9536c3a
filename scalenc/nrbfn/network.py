"""Algorithm 2 of Hu, Pan & Wu on one set of labeled rows: soft-KNN and the basis, σ, and
the r×r normal equations, as a function of its inputs.

:func:`fit_network` is called once by a fit, and once per fold by cross-validation with
the basis re-chosen on each fold's training rows (``cv_refit_basis``); it returns a
:class:`Network` and sets nothing on the estimator, whose parameters it only reads.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import dask.array as da
import numpy as np

from scalenc.base.estimator import refuse_nonfinite, timed_stage
from scalenc.engine import checkpoint, passes
from scalenc.engine.cluster import compute, task_threads, uses_distributed
from scalenc.engine.memory import format_bytes
from scalenc.exceptions import BasisCappedWarning, InputError, MemoryBudgetError
from scalenc.nrbfn import blocks as nb
from scalenc.nrbfn import passes as nrbfn_passes
from scalenc.nrbfn import plan

__all__ = ["Network", "problem_of", "fit_network"]

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


def problem_of(X: da.Array, n_labeled: int, n_classes: int, n_neighbors: int, split_every: int):
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
        split_every=int(split_every),
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
) -> Network:
    """Steps 1–3 on the labeled rows of ``codes``: soft-KNN and the basis, σ, the Gram.

    ``est`` gives the parameters (``confidence_threshold``, ``n_basis``, ``max_basis``,
    ``n_candidates``, ``split_every``); ``counts`` the labeled rows per class;
    ``stage_times``, if given, receives each step's seconds.
    """
    n_labeled = int(counts.sum())
    with timed_stage(stage_times, "soft_knn"):
        knn = _soft_knn(est, X, codes, counts, seed, fit_plan, n_neighbors, n_labeled)
        net = _choose_basis(est, X, knn, fit_plan, n_labeled)
    with timed_stage(stage_times, "sigma"):
        (stats,) = compute(
            nrbfn_passes.sigma_pass(X, codes, net["basis"], split_every=est.split_every)
        )
        sigma = float(stats["dist_sum"]) / (float(stats["rows"]) * net["basis"].shape[0])
    if not sigma > 0:
        raise InputError(
            "Every labeled row is at distance 0 from every basis row (sigma_ = 0): the "
            "training rows are identical, so the Gaussian basis has no width. Check the "
            "data (a constant X, or one row repeated), or use LRClassifier."
        )
    with timed_stage(stage_times, "gram"):
        (gram,) = compute(
            nrbfn_passes.gram_pass(
                X,
                codes,
                net["basis"],
                sigma,
                counts.size,
                n_folds=n_folds,
                seed=seed,
                folds=folds,
                split_every=est.split_every,
            )
        )  # M holds lower triangles; the solves read only those
    return Network(
        knn_sigma=knn["knn_sigma"],
        confidence=knn["confidence"],
        candidate_indices=knn["cand_index"],
        sigma=sigma,
        gram=gram,
        **net,
    )


def _soft_knn(est, X, codes, counts, seed, fit_plan, k, n_labeled) -> dict:
    """Algorithm 1: the candidates' k nearest labeled rows and their confidence."""
    size = fit_plan.candidates
    if size is None:
        candidates = None
        neighbors, cand_index, cand_codes = _knn_all_rows(X, codes, k, est.split_every)
    else:
        size = min(size, n_labeled)
        (sample,) = compute(
            passes.stratified_sample_pass(codes, counts, size, seed, split_every=est.split_every)
        )
        order = np.argsort(sample["index"])
        cand_index, cand_codes = sample["index"][order], sample["code"][order]
        candidates = passes.gather_rows(X, cand_index)
        (neighbors,) = compute(
            passes.kneighbors_pass(X, codes, candidates, cand_index, k, split_every=est.split_every)
        )
    refuse_nonfinite(neighbors["nonfinite"])
    knn_sigma = nb.knn_sigma(neighbors["dist2"])
    confidence = nb.soft_knn_confidence(
        neighbors["dist2"], neighbors["label"], cand_codes, knn_sigma
    )
    return {
        "candidates": candidates,
        "cand_index": cand_index,
        "cand_codes": cand_codes,
        "knn_sigma": knn_sigma,
        "confidence": confidence,
    }


def _knn_all_rows(X, codes, k, split_every):
    """Exact search for every labeled row: block pairs, one pass per row block of X (kept
    in a checkpointed fit's checkpoint: its graph is not one reduction of X's blocks)."""

    def search():
        return compute(passes.kneighbors_all_rows(X, codes, k, split_every=split_every))[0]

    token = checkpoint.fingerprint(X, codes, k, split_every)
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
    confidence, cand_index, cand_codes = knn["confidence"], knn["cand_index"], knn["cand_codes"]
    positions, capped = nb.select_basis(
        confidence,
        cand_codes,
        est.confidence_threshold,
        int(fit_plan.problem.n_classes),
        n_basis=est.n_basis,
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
    if cap is None and est.n_basis is None and r > fit_plan.r_fit:
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
            "basis": {"wanted": wanted if est.n_basis is None else int(est.n_basis), "r": int(r)},
            "gram": plan.gram_bytes(problem, r, n_folds),
            "solve": plan.solve_bytes(problem, r, n_folds),
        },
    }


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
