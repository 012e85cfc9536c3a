"""The memory and work plan of an nRBFN fit, made before its first pass — arithmetic only.

:class:`scalenc.nrbfn.estimator.NRBFNClassifier` estimates here, from the sizes of the problem alone
(rows, features, classes, row blocks, threads, folds), the peak bytes of every stage of
the fit, and chooses with them what its ``"auto"`` defaults run:

* **soft-KNN** (Algorithm 1): the exact all-rows search (every labeled row a candidate,
  the paper's algorithm) while it fits the budget and its work n² (p +
  :data:`SELECT_FLOPS_PER_SCORE`) stays under :data:`EXACT_KNN_FLOPS`; otherwise a
  class-stratified sample of candidates searched against all rows
  (:func:`auto_candidates`).
* **the basis**: at most the largest r whose Gram pass and solve fit the budget
  (:func:`largest_basis`), and at most the r whose Gram pass costs no more work than the
  soft-KNN search (:func:`cost_basis`); a larger basis asked for by the confidence rule
  is capped to the smaller of the two.

The estimates count the fit's own arrays (the k-NN tables, the r×r Gram partials alive
at once in the tree reduction, the per-thread tiles of the block functions, the solve's
copies), not the interpreter, Dask's bookkeeping or the caller's copy of X: the budget is
what the fit may add. No dask here; the estimator reads the environment (the Dask
workers' memory limit, the machine's available memory) and passes it in, and
:func:`plan_fit` turns the estimator's parameters and these sizes into the fit's
:class:`FitPlan`.
"""

from __future__ import annotations

import bisect
import math
import numbers
from dataclasses import dataclass, field

from scalenc.engine.memory import format_bytes
from scalenc.exceptions import MemoryBudgetError
from scalenc.math import neighbors, selection
from scalenc.nrbfn import blocks as nb

__all__ = [
    "EXACT_KNN_FLOPS",
    "SELECT_FLOPS_PER_SCORE",
    "MAX_AUTO_BASIS",
    "MIN_CANDIDATES",
    "GRAM_WORK_SHARE",
    "FREE_GRAM_WORK",
    "GROWN_BYTES",
    "grown_basis",
    "cost_basis",
    "Problem",
    "knn_exact_bytes",
    "knn_sample_bytes",
    "gram_bytes",
    "gram_per_fold",
    "solve_bytes",
    "largest_basis",
    "basis_bytes",
    "fits",
    "exact_knn_affordable",
    "auto_candidates",
    "FitPlan",
    "plan_fit",
]


#: Largest n² p (flops of the block-pair products) for which ``n_candidates="auto"`` runs
#: the exact all-rows soft-KNN: about two minutes of float32 products on the 2 cores this
#: library was measured on (MNIST, n² p = 2.8e12, took 17 s). Beyond it the search grows
#: with n² while every other stage grows with n, so a candidate sample is searched instead.
EXACT_KNN_FLOPS = 2e13

#: The selection of each row's k nearest, counted in the units of :data:`EXACT_KNN_FLOPS`
#: (flops a score of the product costs, p): it costs about as much as the product at
#: p = 784 (MNIST's soft-KNN ran at 50–54 % of BLAS peak), whatever p. The exact search's
#: work is n² (p + this): for few features the selection, not the product, is its cost
#: (the intrusion data, 329 346 rows × 41: n² p = 4.4e12 looked affordable, and the
#: search ran for over 20 minutes).
SELECT_FLOPS_PER_SCORE = 784


#: Largest basis ``max_basis="auto"`` takes even when a larger one fits the memory budget.
#: The Gram pass costs r² flops per training row (1e8 at r = 10 000: about 1 ms a row on
#: 2 cores, 50 s for 50 000 rows) and the solve r³/3; the paper's largest basis (MNIST,
#: r = 8787) is below it. Pass an int ``max_basis`` (or None) for a larger one.
MAX_AUTO_BASIS = 10_000

#: Most work ``max_basis="auto"``'s Gram pass may do, as a share of the soft-KNN search's:
#: the basis is at most the r with n·r² ≤ GRAM_WORK_SHARE · n·c·(p + 784)
#: (:func:`cost_basis`). Without it the basis was sized by memory alone, so the Gram's
#: n·r² grew with the machine's memory rather than with what the extra rows buy: 569 of
#: 643 s on a 1 M × 256 store (r = 7556), for test errors that change by tenths of a point
#: (the accuracy-against-r curves of ``benchmarks/nrbfn_basis_curves.py``).
GRAM_WORK_SHARE = 1.0

#: Gram work n·r² that ``max_basis="auto"`` allows whatever the soft-KNN costs: about ten
#: seconds on two cores, so that small problems, where the cap would save seconds, keep the
#: rule's basis (letter, 13 333 rows: r = 5986 in 5 s of Gram, 0.25 point better than the
#: cost bound's 3265).
FREE_GRAM_WORK = 1e12

#: Most bytes the solves of a grown basis (``max_basis="auto"``) take whatever the budget
#: (:func:`grown_basis`): 5 folds, r ≤ 7 300; a default fit of a table under 100 000 rows
#: peaks near 4 GB (letter 3.8 GB, krkopt 4.0 GB, connect_4 4.3 GB with its data and
#: predict; letter peaked at 6.15 GB with a quarter of 24 GB's r = 9 172). krkopt, whose
#: held-out error still falls there, erred 1.0 point more (``benchmarks/README.md``).
GROWN_BYTES = 3_000_000_000

#: Fewest candidates of an ``"auto"`` sample (when the exact search is not affordable):
#: at least this many, and at least twice the largest basis, so that the basis is chosen
#: among candidates and not simply all of them.
MIN_CANDIDATES = 10_000

#: Bytes per neighbour in the k-NN tables (float64 squared distance, int64 index and
#: label).
_NEIGHBOR_BYTES = 24


@dataclass
class Problem:
    """The sizes an estimate depends on.

    ``threads`` is the number of tasks a process runs at once (Dask's thread pool, or a
    worker's ``nthreads``); ``distributed`` says whether the block tasks run in worker
    processes apart from the client (their memory is then checked against the worker
    budget, the client's against the client budget) or in this process (both add up).
    """

    n_rows: int
    n_labeled: int
    n_features: int
    itemsize: int
    n_classes: int
    n_neighbors: int
    block_rows: list = field(default_factory=list)
    threads: int = 1
    fan_in: int = 8  # the reductions' (engine.reduce.fan_in: the estimators' split_every)
    distributed: bool = False

    @property
    def n_blocks(self) -> int:
        return max(1, len(self.block_rows))

    @property
    def max_block(self) -> int:
        return max(self.block_rows) if self.block_rows else self.n_rows


def _per_process(problem: Problem, worker: float, client: float) -> dict:
    """Split a stage's bytes into worker and client parts (one process: their sum)."""
    if problem.distributed:
        return {"worker": int(worker), "client": int(client)}
    return {"worker": 0, "client": int(worker + client)}


def knn_exact_bytes(problem: Problem) -> dict:
    """The exact all-rows soft-KNN (block pairs): every row block is held until its pairs
    are done (n p in all), two pair tiles and two b×k partials per thread; on the client
    the n×k neighbour tables (twice, while they are concatenated) and n-vectors."""
    p, n, k = problem.n_features, problem.n_labeled, problem.n_neighbors
    b = problem.max_block
    tile = 2 * min(neighbors.PAIR_TILE_ELEMENTS, b * b) * max(problem.itemsize, 4)
    partial = problem.max_block * k * _NEIGHBOR_BYTES
    blocks = problem.n_rows * p * problem.itemsize
    worker = blocks + problem.threads * (tile + 2 * partial)
    client = 2 * n * k * _NEIGHBOR_BYTES + 5 * 8 * n
    out = _per_process(problem, worker, client)
    out["flops"] = float(n) * n * p
    out["work"] = float(n) * n * (p + SELECT_FLOPS_PER_SCORE)
    return out


def knn_sample_bytes(problem: Problem, n_candidates: int) -> dict:
    """Soft-KNN of ``n_candidates`` rows against all rows: the candidates (one copy per
    process), a distance tile per thread and c×k partials alive in the tree."""
    c, p, k = n_candidates, problem.n_features, problem.n_neighbors
    candidates = c * p * 8
    partial = c * k * _NEIGHBOR_BYTES
    alive = min(problem.n_blocks, problem.fan_in + problem.threads)
    tile = 2 * 8 * min(selection.TILE_ELEMENTS, c * problem.max_block)
    worker = candidates + problem.threads * tile + alive * partial
    client = candidates + 2 * partial + 5 * 8 * c
    out = _per_process(problem, worker, client)
    out["flops"] = 2.0 * c * problem.n_labeled * p
    return out


def _gram_partial(r: int, n_classes: int, n_folds: int) -> int:
    return 8 * n_folds * (r * r + n_classes * r + 1)


def gram_bytes(problem: Problem, r: int, n_folds: int = 1, per_fold: bool = False) -> dict:
    """The Gram pass: the r×r partials (``n_folds`` of them per block) alive at once in the
    tree reduction of fan-in ``fan_in`` — each running task's, the finished ones
    waiting for their merge and the merge's output — plus each thread's W̃ tile, strip
    product and kernel products.

    ``per_fold``: one pass per fold instead (partials of one fold), with the Grams of
    the folds already summed held on the client (:func:`gram_per_fold`)."""
    if per_fold and n_folds > 1:
        one = gram_bytes(problem, r, 1)
        held = _gram_partial(r, problem.n_classes, n_folds - 1)
        out = _per_process(problem, one["worker"], one["client"] + held)
        out["flops"] = one["flops"]
        return out
    partial = _gram_partial(r, problem.n_classes, n_folds)
    n_b, t, s = problem.n_blocks, problem.threads, problem.fan_in
    if problem.distributed:
        alive = min(n_b, t) + (s + 1 if n_b > 1 else 0)
    else:
        alive = min(n_b, s + t - 1) + (1 if n_b > 1 else 0)
    tile_rows = max(1, nb.GRAM_TILE_ELEMENTS // max(r, 1))
    tile = 8 * min(tile_rows, problem.max_block) * r
    kernel = 2 * 8 * min(nb.KERNEL_TILE_ELEMENTS, problem.max_block * r)
    per_thread = tile + 8 * min(nb.GRAM_STRIP, r) * r + kernel
    worker = alive * partial + min(n_b, t) * per_thread + 8 * r * problem.n_features
    client = 8 * r * problem.n_features
    out = _per_process(problem, worker, client)
    out["flops"] = float(r) * r * problem.n_labeled + 2.0 * r * problem.n_labeled * (
        problem.n_features + problem.n_classes
    )
    return out


def solve_bytes(problem: Problem, r: int, n_folds: int = 1) -> dict:
    """The solves on the client: with folds, the Gram pass's n_folds Grams, their sum
    (each fold's training Gram is formed and factorised over the fold's own Gram) and one
    more r×r array (a kept Gram of the size before, or the tridiagonal reduction's copy);
    the final solve's system beside the Gram it reads (and the rank's pivoted Cholesky
    for small r); K×r right-hand sides and weights."""
    square = 8 * r * r
    copies = n_folds + 2 if n_folds > 1 else 2
    client = copies * square + 8 * n_folds * problem.n_classes * r * 4
    out = _per_process(problem, 0, client)
    out["flops"] = r**3 / 3.0
    return out


def fits(estimate: dict, budget: dict) -> bool:
    return estimate["worker"] <= budget["worker"] and estimate["client"] <= budget["client"]


def gram_per_fold(problem: Problem, budget: dict, r: int, n_folds: int) -> bool:
    """Whether the Gram of an r-row basis runs one pass per fold: when its partials of
    ``n_folds`` r×r Grams do not fit ``budget`` (each pass then reads X and forms the
    kernel of one fold's rows, so the passes do the one pass's kernel work between them;
    only the reads of X are repeated). At r = 4 300 MNIST's 5-fold partials, seven
    alive on two threads, filled a 6 GB budget that one fold's leave room for twice the
    rows."""
    return n_folds > 1 and not fits(gram_bytes(problem, r, n_folds), budget)


def basis_bytes(problem: Problem, r: int, n_folds: int = 1, per_fold: bool = True) -> dict:
    """The larger of the Gram pass's and the solve's estimates, per process; the Gram's
    in its leaner way (one pass per fold, :func:`gram_per_fold`), which a fit takes when
    the one pass does not fit (``per_fold=False``: the one pass's)."""
    gram = gram_bytes(problem, r, n_folds, per_fold=per_fold)
    solve = solve_bytes(problem, r, n_folds)
    return {key: max(gram[key], solve[key]) for key in ("worker", "client")}


def largest_basis(problem: Problem, budget: dict, n_folds: int = 1, per_fold: bool = True) -> int:
    """The largest r whose Gram pass and solve fit ``budget`` (0 if not even r = 1);
    ``per_fold=False``: with the Gram in one pass."""
    if not fits(basis_bytes(problem, 1, n_folds, per_fold), budget):
        return 0
    lo, hi = 1, max(2, problem.n_labeled)
    if fits(basis_bytes(problem, hi, n_folds, per_fold), budget):
        return hi
    while hi - lo > 1:  # the estimate grows with r
        mid = (lo + hi) // 2
        if fits(basis_bytes(problem, mid, n_folds, per_fold), budget):
            lo = mid
        else:
            hi = mid
    return lo


def grown_basis(problem: Problem, n_folds: int) -> int:
    """The largest r whose solves (:func:`solve_bytes`) take at most :data:`GROWN_BYTES`."""
    sizes = range(1, problem.n_labeled + 1)  # the bytes grow with r
    bytes_of = lambda r: solve_bytes(problem, r, n_folds)["client"]  # noqa: E731
    return max(1, bisect.bisect_right(sizes, GROWN_BYTES, key=bytes_of))


def cost_basis(problem: Problem, n_candidates: int | None) -> int:
    """The largest r whose Gram pass does at most :data:`GRAM_WORK_SHARE` times the
    soft-KNN search's work: n·r² ≤ share · n·c·(p + :data:`SELECT_FLOPS_PER_SCORE`), so
    r = √(share · c · (p + 784)), with c the candidates (every labeled row for the exact
    search; None) — independent of n, so the Gram grows linearly in n like every other
    stage. At least one row per class, and at least the r whose Gram work is
    :data:`FREE_GRAM_WORK`."""
    c = problem.n_labeled if n_candidates is None else n_candidates
    work = GRAM_WORK_SHARE * c * (problem.n_features + SELECT_FLOPS_PER_SCORE)
    free = FREE_GRAM_WORK / max(problem.n_labeled, 1)
    return max(problem.n_classes, math.isqrt(int(max(work, free))))


def auto_candidates(problem: Problem, budget: dict, max_basis: int) -> int:
    """Candidates of an ``"auto"`` sample: ``max(MIN_CANDIDATES, 2 max_basis)``, at most
    the labeled rows, at most what :data:`EXACT_KNN_FLOPS` and the budget allow (and at
    least the number of classes)."""
    c = min(problem.n_labeled, max(MIN_CANDIDATES, 2 * max_basis))
    by_work = int(EXACT_KNN_FLOPS / max(2.0 * problem.n_labeled * problem.n_features, 1.0))
    c = max(problem.n_classes, min(c, by_work))
    while c > problem.n_classes and not fits(knn_sample_bytes(problem, c), budget):
        c = max(problem.n_classes, int(c * 0.8))
    return c


def exact_knn_affordable(problem: Problem, budget: dict) -> tuple[bool, str]:
    """Whether the exact all-rows soft-KNN runs by default, and why (or why not)."""
    est = knn_exact_bytes(problem)
    if est["work"] > EXACT_KNN_FLOPS:
        n, p = problem.n_labeled, problem.n_features
        return False, (
            f"the exact all-rows soft-KNN would cost n² (p + {SELECT_FLOPS_PER_SCORE}) = "
            f"{n}² × ({p} + {SELECT_FLOPS_PER_SCORE}) = {est['work']:.2g}: n² p "
            f"multiply-adds for the distances and, per pair, the selection of each row's k "
            f"nearest, which costs what a product of {SELECT_FLOPS_PER_SCORE} features "
            f"costs whatever p (SELECT_FLOPS_PER_SCORE); more than {EXACT_KNN_FLOPS:.0e} "
            "(EXACT_KNN_FLOPS, about two minutes on two cores)"
        )
    if not fits(est, budget):
        return False, "the exact all-rows soft-KNN does not fit the memory budget"
    return True, "the exact all-rows soft-KNN fits the memory and work budgets"


@dataclass
class FitPlan:
    """The plan of one fit, made before its first pass over X (:func:`plan_fit`)."""

    problem: Problem
    budget: dict
    budget_source: str
    n_folds: int
    #: soft-KNN candidates to sample, or None for the exact all-rows search
    candidates: int | None
    #: "exact" or "sampled", and why the soft-KNN runs so
    knn_mode: str
    knn_reason: str
    #: the basis cap (None: the rule's basis, or ``n_basis``)
    max_basis: int | None
    #: the largest r whose Gram pass and solve fit the budget
    r_fit: int
    #: the largest r whose Gram pass costs at most the soft-KNN's work (:func:`cost_basis`)
    r_cost: int | None = None
    #: what set an ``"auto"`` cap: "memory", "MAX_AUTO_BASIS" or "cost" (None otherwise)
    cap_source: str | None = None

    def memory_report(self) -> dict:
        """The plan's figures, as ``memory_plan_`` reports them."""
        c = self.candidates
        est = knn_exact_bytes(self.problem) if c is None else knn_sample_bytes(self.problem, c)
        return {
            "budget": dict(self.budget),
            "budget_source": self.budget_source,
            "threads": self.problem.threads,
            "n_folds": self.n_folds,
            "soft_knn": {
                "mode": self.knn_mode,
                "n_candidates": c,
                "reason": self.knn_reason,
                **est,
            },
            "max_basis": self.max_basis,
            "max_basis_source": self.cap_source,
            "largest_basis_that_fits": self.r_fit,
            "cost_basis": self.r_cost,
        }


def plan_fit(params: dict, owner: str, problem: Problem, budget: dict, source: str, n_folds: int):
    """The fit's :class:`FitPlan` from its parameters (``n_basis``: an int, None for the
    confidence rule, ``"auto"`` for a basis grown by held-out error up to the cap, which
    memory bounds but not :func:`cost_basis`; ``max_basis``,
    ``n_candidates``, ``memory_limit``, ``split_every``) and the problem's sizes: the
    soft-KNN mode, the largest basis that fits the budget, and a ``MemoryBudgetError``
    naming the setting that fits when even the smallest cannot."""
    fmt = format_bytes
    limit_hint = (
        "raise memory_limit"
        if params["memory_limit"] is not None
        else "pass a larger memory_limit (bytes or e.g. '8GB')"
    )
    r_fit = largest_basis(problem, budget, n_folds)
    K = problem.n_classes
    folds_note = f" with {n_folds} cross-validation folds" if n_folds > 1 else ""
    if r_fit < K:
        need = basis_bytes(problem, K, n_folds)
        raise MemoryBudgetError(
            f"{owner} cannot fit in the memory budget of {fmt(budget['client'])}"
            f" ({source}): even the smallest basis (one row per class, r={K}) needs "
            f"about {fmt(max(need.values()))} for the Gram pass{folds_note} (per-thread "
            f"tiles, split_every={problem.fan_in} partials). "
            f"{limit_hint.capitalize()}, or lower split_every or chunk_rows."
        )
    for name in ("n_basis", "max_basis"):
        value = params[name]
        if isinstance(value, numbers.Integral) and value > r_fit:
            need = basis_bytes(problem, int(value), n_folds)
            raise MemoryBudgetError(
                f"{name}={value} needs about {fmt(max(need.values()))} for the r×r Gram "
                f"partials and the solve{folds_note}, more than the memory budget of "
                f"{fmt(budget['client'])} ({source}); at most r={r_fit} fits. Pass "
                f"{name} <= {r_fit} (or max_basis='auto'), or {limit_hint}."
            )
    cap, cap_source, r_cost = params["max_basis"], None, None
    growing = params["n_basis"] == "auto"
    if isinstance(params["n_basis"], numbers.Integral):
        cap = None
    elif cap == "auto":
        cap = min(r_fit, MAX_AUTO_BASIS)
        cap_source = "memory" if r_fit <= MAX_AUTO_BASIS else "MAX_AUTO_BASIS"
        if growing and grown_basis(problem, n_folds) < cap:
            cap, cap_source = max(K, grown_basis(problem, n_folds)), "GROWN_BYTES"
    elif cap is None and growing:  # a grown basis stops where memory does
        cap, cap_source = r_fit, "memory"
    # a grown basis's candidates: twice the cap of one Gram pass, not of the per-fold passes
    # (which would add candidates to a search that is most of a large fit, for bases the
    # growth seldom reaches: 200 000 × 40 took 13 550 candidates instead of 10 000 and its
    # soft-KNN 9.1 s instead of 5.1 s)
    pool = cap or r_fit
    if growing and n_folds > 1:
        pool = min(pool, max(K, largest_basis(problem, budget, n_folds, per_fold=False)))
    mode, reason, c = _plan_candidates(params, owner, problem, budget, pool, source)
    if cap_source is not None and not growing:  # the rule's basis: bounded by cost too
        r_cost = cost_basis(problem, c)
        while r_cost < cap:  # a smaller cap may sample fewer candidates: a few rounds
            cap, cap_source = r_cost, "cost"
            mode, reason, c = _plan_candidates(params, owner, problem, budget, cap, source)
            r_cost = cost_basis(problem, c)
    return FitPlan(
        problem, dict(budget), source, n_folds, c, mode, reason, cap, r_fit, r_cost, cap_source
    )


def _plan_candidates(params, owner, problem, budget, max_basis, source):
    """(mode, reason, candidates or None for the exact all-rows search)."""
    fmt = format_bytes
    n = problem.n_labeled
    n_candidates = params["n_candidates"]
    if isinstance(n_candidates, numbers.Integral):
        c = min(int(n_candidates), n)
        est = knn_sample_bytes(problem, c)
        if not fits(est, budget):
            raise MemoryBudgetError(
                f"n_candidates={n_candidates} needs about "
                f"{fmt(max(est['worker'], est['client']))} for the soft-KNN search, more "
                f"than the memory budget of {fmt(budget['client'])} ({source}). Pass a "
                "smaller n_candidates (or 'auto'), or raise memory_limit."
            )
        if c >= n:
            return "exact", "n_candidates covers every labeled row", c
        return "sampled", f"n_candidates={n_candidates} was given", c
    if n_candidates is None:
        est = knn_exact_bytes(problem)
        if not fits(est, budget):
            raise MemoryBudgetError(
                "n_candidates=None (the exact all-rows soft-KNN) needs about "
                f"{fmt(max(est['worker'], est['client']))} (every row block held, the n×k "
                f"neighbour tables), more than the memory budget of "
                f"{fmt(budget['client'])} ({source}). Pass n_candidates='auto' or an int, "
                "or raise memory_limit."
            )
        return "exact", "n_candidates=None was given", None
    affordable, why = exact_knn_affordable(problem, budget)
    if affordable:
        return "exact", why, None
    c = auto_candidates(problem, budget, max_basis)
    est = knn_sample_bytes(problem, c)
    if not fits(est, budget):
        raise MemoryBudgetError(
            f"{owner} cannot fit in the memory budget of "
            f"{fmt(budget['client'])} ({source}): {why}, and even a sample of {c} "
            f"soft-KNN candidates needs about {fmt(max(est['worker'], est['client']))}. "
            "Raise memory_limit, or lower chunk_rows."
        )
    return "sampled", f"{why}; a class-stratified sample of {c} candidates", c
