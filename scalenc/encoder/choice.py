"""The kernel choice for large n: the kernels that a fixed sample of rows shows Shen's
rule cannot choose are dropped before X is read again.

Pure NumPy, no dask. With several kernels the paper's fit evaluates every kernel on
every row twice (for its LDA statistics, then for the cross-entropy of that LDA), or
once with the embedding cached: most of the fit's time, and most of that is kernels that
are not chosen (Spearman's ranks cost 1.4–2 reads of X at p = 50–256). For large n
(``choice_sample``) the fit instead:

1. draws a uniform random sample of m labeled rows in the pass that computes U
   (:func:`sample_plan`; rows by hash of their index, the same for any chunking);
2. embeds the sample with every kernel and brackets each kernel's c_m between what an
   LDA fitted on the sample gives on the sample itself (optimistic) and what LDAs
   fitted on each half of it give on the other half (pessimistic), each with its
   sampling error (:func:`sample_choice`); a kernel is dropped when the rule cannot
   choose it wherever the c_m lie in their brackets (:func:`excluded_within`);
3. computes, in one pass over every row (pass 2), the exact LDA statistics of the
   kernels left and, with two or more left, each one's c_m under the sample's LDA with
   its gradient, which bound c_m under the exact LDA (:func:`cross_entropy_bounds`).
   One kernel left is the choice; where the bounds decide, the fit ends with two
   passes over X;
4. only the kernels still undecided get their exact cross-entropies, under their exact
   LDAs, in a pass over every row (pass 3), from which the rule chooses
   (:func:`rule_among`).

The chosen kernel's LDA is always the exact one (fitted on every labeled row). Pass 2's
bounds are exact (nothing in them is sampled or approximated): a kernel they decide is
the rule's choice over every row. On ``encoder_scale.py``'s 8 M × 50 store the sample
leaves linear and Euclidean (nearly separable classes: their c_m come from a few rows,
which a sample hardly sees), and pass 2 bounds them to [540.3, 650.2] and
[596.4, 683.4]: Euclidean is not 30 % below linear anywhere in them, so linear, in two
passes over X instead of three.

**Error bound of the sample.** c_m is estimated as N/m Σ_{i∈S} ℓ_m(i), N the labeled
rows of X, ℓ_m(i) = −log T_m(i, y_i). The rule over every row uses the LDA fitted on
every row, which on average scores its rows better than an LDA fitted elsewhere and
worse than the sample's LDA scores the sample (whose rows it was fitted on): the
in-sample and held-out estimates bracket it. Each end is widened by :data:`CHOICE_Z` = 4
standard errors of its mean (finite-population corrected) and by :data:`LDA_MARGIN`
(5 %); under the normal approximation a kernel the rule would choose is dropped with
probability below 3·10⁻⁵ per comparison. The in-sample estimate alone is not enough: on
nearly separable classes (simulated, 200 000 × 20, m = 65 536) it made Euclidean look
30 % better than linear, and dropped linear, which the rule over every row chooses (c_m
7.96 and 7.50). What a sample cannot see is a cross-entropy made by rows rarer than
about 1/m (a handful of rows with huge losses): where such rows would change the rule's
choice, the sample may drop the kernel the rule would choose (``choice_sample=None``
compares every kernel over every row).

``fit_plan_`` reports the sample's size, the kernels the sample dropped, the bounds of
those pass 2 decided among, and those compared with their exact LDAs over every row.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from scalenc.encoder import blocks
from scalenc.encoder.blocks import choose_kernel, stacked_class_moments, stacked_row_losses
from scalenc.encoder.kernels import embed, embed_tile_rows
from scalenc.exceptions import NumericalWarning
from scalenc.math.buffers import scratch
from scalenc.math.linalg import (
    LDAModel,
    blas_threads,
    class_scores,
    lda_from_moments,
    stacked_class_scores,
)
from scalenc.math.moments import merge_moment_tuples

__all__ = [
    "SAMPLE_ROWS",
    "SAMPLE_BYTES",
    "SAMPLE_MIN_FACTOR",
    "CHOICE_Z",
    "LDA_MARGIN",
    "sample_plan",
    "SampleChoice",
    "sample_choice",
    "Halves",
    "whitening",
    "cross_entropy_bounds",
    "excluded_within",
    "excluded",
    "rule_among",
]

#: Labeled rows of the sample with ``choice_sample="auto"``.
SAMPLE_ROWS = 2**16
#: At most this many bytes of X's rows in the sample (fewer rows for wide rows: 16 384
#: float32 rows of 1024 features).
SAMPLE_BYTES = 2**26
#: ``"auto"`` samples only when X has at least this many times the sample's rows (the
#: sample's kernels then cost at most an eighth of a pass's).
SAMPLE_MIN_FACTOR = 8
#: ``"auto"``'s sample takes at most this share of what one block task may hold: the merge
#: of pass 1 that gathers it holds up to twice its rows and their concatenation (a
#: 400 MiB worker of two threads was killed gathering 64 MB).
SAMPLE_TASK_SHARE = 1 / 8
#: Fewest rows of an ``"auto"`` sample; a smaller one (too little memory) is not drawn.
SAMPLE_MIN_ROWS = 4096
#: Rows are drawn with a hash below ``SAMPLE_OVERDRAW · m / n``, then the m smallest kept:
#: m rows when at least half the rows are labeled, about 2·m·(labeled share) otherwise.
SAMPLE_OVERDRAW = 2
#: The sample's seed (the sample is fixed: the same rows for every fit of the same X).
SAMPLE_SEED = 0x5EED
#: Fewest sampled rows of every class; with fewer the sample is not used.
MIN_CLASS_ROWS = 10
#: Standard errors by which each end of a kernel's bracket on the sample is widened.
CHOICE_Z = 4.0
#: Relative widening of each end of a kernel's bracket on the sample, beyond its errors.
LDA_MARGIN = 0.05


def sample_plan(setting, n_rows: int, n_features: int, itemsize: int, task_bytes=None):
    """``(rate, size, seed)`` of the sample pass 1 draws, or None for no sample.

    ``setting`` is the estimator's ``choice_sample``: ``"auto"`` (:data:`SAMPLE_ROWS`
    rows, at most :data:`SAMPLE_BYTES` of X and :data:`SAMPLE_TASK_SHARE` of
    ``task_bytes``, what a block task may hold (a number, or a function asked only when
    X is large enough), when X has :data:`SAMPLE_MIN_FACTOR` times as many rows and that
    is at least :data:`SAMPLE_MIN_ROWS`), an int (that many rows when X has more), or
    None.

    Examples
    --------
    >>> from scalenc.encoder.choice import sample_plan
    >>> sample_plan("auto", 8_000_000, 50, 4)
    (0.016384, 65536, 24301)
    >>> sample_plan("auto", 100_000, 50, 4) is None  # small X: every row
    True
    >>> sample_plan(1000, 5000, 10, 8)
    (0.4, 1000, 24301)
    >>> sample_plan("auto", 8_000_000, 200, 4, task_bytes=80 * 2**20)  # small workers
    (0.00327675, 13107, 24301)
    """
    if setting is None:
        return None
    if setting == "auto":
        row_bytes = max(1, n_features * itemsize)
        size = min(SAMPLE_ROWS, SAMPLE_BYTES // row_bytes)
        if n_rows < SAMPLE_MIN_FACTOR * max(size, SAMPLE_MIN_ROWS):
            return None
        if task_bytes is not None:  # asked only now: on a cluster it asks the workers
            task_bytes = task_bytes() if callable(task_bytes) else task_bytes
            size = min(size, int(SAMPLE_TASK_SHARE * task_bytes) // row_bytes)
        if size < SAMPLE_MIN_ROWS or n_rows < SAMPLE_MIN_FACTOR * size:
            return None
    else:
        size = int(setting)
        if n_rows <= size:
            return None
    return (min(1.0, SAMPLE_OVERDRAW * size / n_rows), size, SAMPLE_SEED)


@dataclass
class SampleChoice:
    """What the sample says (:func:`sample_choice`)."""

    #: Labeled rows of the sample, m.
    rows: int
    #: Each kernel's embedding moments on the sample, scaled to X's labeled rows.
    moments: list
    #: Each kernel's LDA from them.
    models: list[LDAModel]
    #: Each kernel's estimated c_m over X's labeled rows (N/m Σ_S ℓ_m).
    cross_entropy: np.ndarray
    #: The kernels the rule cannot choose, as far as the sample shows.
    dropped: set
    #: V for pass 2's bounds (:func:`whitening`) of each kernel left, where two or more are.
    whiten: dict


def scaled_moments(moments: dict, counts: np.ndarray) -> dict:
    """A sample's class moments as estimates of all rows': the class counts of X, the
    sample's class means, its pooled scatter scaled to N − K degrees of freedom."""
    n = np.asarray(moments["n"], dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    dof = max(n.sum() - n.size, 1.0)
    return {
        "n": counts,
        "mean": moments["mean"],
        "scatter": moments["scatter"] * max(counts.sum() - counts.size, 1.0) / dof,
    }


def _lda(moments: dict, tol: float) -> LDAModel:
    with warnings.catch_warnings():  # an estimate; the exact LDA says what is wrong
        warnings.simplefilter("ignore", NumericalWarning)
        return lda_from_moments(moments["n"], moments["mean"], moments["scatter"], tol=tol)


def sample_choice(
    rows, codes, kernels, U, counts, *, tol: float, min_improvement: float, threads: int = 1
):
    """Every kernel's LDA and cross-entropy estimated on the sample's ``rows`` (with class
    ``codes``), and the kernels it drops; None when a class has fewer than
    :data:`MIN_CLASS_ROWS` rows in the sample or an estimate is not finite.

    ``counts`` are X's labeled rows per class (N = their sum), ``U`` the class means of
    every row. See the module docstring for the margins.

    It runs on one BLAS thread, as a pass's block tasks do
    (:func:`scalenc.engine.cluster.compute`): its products are row tiles of a few
    hundred rows, and two BLAS threads made it take 34 s instead of 2.0 s (65 536 rows,
    p = 16, K = 100, three kernels; two cores at load 6). With ``threads`` > 1 the
    embedding's tiles (two runs of whole tiles), the two halves' moments and the rows'
    three sets of losses are computed side by side on that many threads (the same values).
    """
    with blas_threads(1), ThreadPoolExecutor(max(threads, 1)) as pool:
        run = pool.map if threads > 1 else map
        return _sample_choice(rows, codes, kernels, U, counts, tol, min_improvement, run)


def _sample_choice(rows, codes, kernels, U, counts, tol, min_improvement, run):
    K, M = U.shape[0], len(kernels)
    codes = np.asarray(codes)
    in_sample = np.bincount(codes[codes >= 0], minlength=K)
    if in_sample.min() < MIN_CLASS_ROWS:
        return None
    # the sample's halves (even rows, odd rows), written by the embedding as it goes:
    # no copy of them; every row's moments merged from theirs (Chan's update), not
    # computed a second time
    Z, step = Halves(rows.shape[0], M * K), embed_tile_rows(rows.shape[1])
    split = min(rows.shape[0], -(-rows.shape[0] // (2 * step)) * step)  # whole tiles each
    spans = [(a, b) for a, b in ((0, split), (split, rows.shape[0])) if b > a]
    list(run(lambda at: embed(kernels, rows[at[0] : at[1]], U, out=Z.part(*at)), spans))
    halves = [(Z.halves[h], codes[h::2]) for h in (0, 1)]
    half_stats = list(run(lambda at: stacked_class_moments(*at, M, K), halves))

    def fitted(stats):
        scaled = [scaled_moments(m, counts) for m in stats]
        return scaled, [_lda(m, tol) for m in scaled]

    def losses_of(job):
        models, Z, codes = job
        return stacked_row_losses(Z, codes, *stacked_class_scores(models, K), M)

    moments, models = fitted(merge_moment_tuples(*half_stats))
    half_models = [fitted(half_stats[1 - h])[1] for h in (0, 1)]
    # in-sample (optimistic), then each half under the other's LDA (held out)
    jobs = [(models, Z, codes)] + [(half_models[h], *halves[h]) for h in (0, 1)]
    own, *held = run(losses_of, jobs)
    held = np.hstack(held)
    if not (np.isfinite(own).all() and np.isfinite(held).all()):
        return None
    m_rows, n_rows = own.shape[1], float(np.sum(counts))
    spread = np.sqrt(max(0.0, 1.0 - m_rows / n_rows) * m_rows)  # √m with the fpc
    scale = n_rows / m_rows
    lower = scale * (own.sum(axis=1) - CHOICE_Z * own.std(axis=1) * spread)
    upper = scale * (held.sum(axis=1) + CHOICE_Z * held.std(axis=1) * spread)
    lower, upper = lower * (1 - LDA_MARGIN), np.maximum(upper, lower) * (1 + LDA_MARGIN)
    dropped = excluded_within(lower, upper, range(M), min_improvement=min_improvement)
    left = [m for m in range(M) if m not in dropped]
    # pass 2's V, only where it bounds two or more kernels' c_m
    whiten = {m: whitening(Z.columns(m * K, (m + 1) * K)) for m in left if len(left) > 1}
    return SampleChoice(m_rows, moments, models, scale * own.sum(axis=1), dropped, whiten)


class Halves:
    """A (rows × ``width``) float64 array held as its two halves, its even rows and its odd
    rows (``halves``, each C-contiguous), written and read by row tiles: ``Z[rows, cols]
    = tile`` (as :func:`~scalenc.encoder.kernels.embed` writes) and ``Z[start:stop]``,
    the tile's rows in order in a per-thread column-major buffer (the layout of
    :func:`~scalenc.encoder.kernels.embed`'s arrays: the same values in the same tiles)."""

    def __init__(self, rows: int, width: int, halves=None, start: int = 0):
        self.halves = halves or tuple(np.empty(((rows + 1 - h) // 2, width)) for h in (0, 1))
        self.shape, self.start = (rows, width), start

    def part(self, start: int, stop: int) -> Halves:
        """Rows ``start:stop`` of this array, written and read in it."""
        return Halves(stop - start, self.shape[1], self.halves, self.start + start)

    def _parts(self, rows: slice):
        """Each half, the tile's rows in it and their rows of the half."""
        start, stop = (self.start + at for at in rows.indices(self.shape[0])[:2])
        for h, half in enumerate(self.halves):
            first = start + (h - start) % 2  # the tile's first row of this half
            yield half, slice(first - start, None, 2), slice(first // 2, (stop - h + 1) // 2)

    def __setitem__(self, key: tuple, tile: np.ndarray) -> None:
        rows, cols = key
        for half, mine, at in self._parts(rows):
            half[at, cols] = tile[mine]

    def __getitem__(self, rows: slice) -> np.ndarray:
        start, stop, _ = rows.indices(self.shape[0])
        tile = scratch("choice.halves", (self.shape[1], stop - start), np.float64).T
        for half, mine, at in self._parts(rows):
            tile[mine] = half[at]
        return tile

    def columns(self, start: int, stop: int) -> np.ndarray:
        """Columns ``start:stop`` of every row, in order (a new array; the whole array's)."""
        out = np.empty((self.shape[0], stop - start))
        for h, half in enumerate(self.halves):
            out[h::2] = half[:, start:stop]
        return out


def whitening(Z) -> np.ndarray:
    """V = L⁻ᵀ, L Lᵀ the second moment of x = [z; 1] over a sample's embedding ``Z`` (a
    ridge of 10⁻¹⁰ of its trace): ‖xᵀV‖ = ‖L⁻¹x‖ is a row's length in the data's own
    units, and ‖LᵀΔ‖₂ how far a change Δ of the class-score map moves the scores in
    them (:func:`cross_entropy_bounds`)."""
    x = np.hstack([Z, np.ones((Z.shape[0], 1))])
    second = x.T @ x / max(x.shape[0], 1)
    second[np.diag_indices_from(second)] += 1e-10 * np.trace(second)
    return np.linalg.inv(np.linalg.cholesky(second)).T


def cross_entropy_bounds(loss, sampled, exact, whiten) -> tuple[np.ndarray, np.ndarray]:
    """Bounds on each kernel's exact c_m (under its exact LDA, over every labeled row)
    from pass 2's sums under the sample's LDA (``loss``,
    :func:`scalenc.encoder.blocks.stacked_loss_gradients`), with the sample's and the
    exact LDAs (``sampled``, ``exact``) and the V the sums were made with (``whiten``,
    :func:`whitening`). Returns ``(lower, upper)``.

    Each row's loss ℓ(s) = −log softmax(s)_y is convex in its class scores s, which are
    affine in the LDA's map: s_i = x_iᵀθ, x_i = [z_i; 1], θ = [W; b]. With Δ = θ_e − θ_s,
    d_i = x_iᵀΔ and g the gradient of c at θ_s, convexity gives the lower bound
    c(θ_s) + ⟨g, Δ⟩, and Taylor's remainder the upper one, c(θ_s) + ⟨g, Δ⟩ +
    Σ_i ½ max_t d_iᵀH_i(t)d_i, H_i(t) = diag(p) − ppᵀ at s_i + t·d_i. That curvature is
    at most ½‖d_i‖² (Böhning, 1992): the rows summed in ``"far"`` add at most
    ¼ tr(Δᵀ F Δ). It is also at most 4‖d_i‖²_∞ (1 − p_y(t)) ≤ 4‖d_i‖² r_i e^{2‖d_i‖},
    r_i = (1 − p_y)/p_y at θ_s (along the path the odds grow at most by
    e^{2t‖d_i‖_∞}), and ‖d_i‖ ≤ ‖L⁻¹x_i‖ δ, δ = ‖LᵀΔ‖₂ for the L of V = L⁻ᵀ: the
    well-classified rows of band b (whitened length at most R_b,
    :data:`scalenc.encoder.blocks.NEAR_BANDS`) add at most 2e^{2δR_b} tr(Δᵀ N_b Δ), and
    those of odds at most ε = :data:`scalenc.encoder.blocks.TINY_ODDS` at most
    Σ_b 2εe^{2δR_b}δ² Σ‖L⁻¹x_i‖² (``"tiny"``, by band).
    Nothing is sampled or approximated: the interval holds the exact c_m, narrow where
    the sample's LDA is near the exact one and the rows are well classified (nearly
    separable classes, whose c_m a sample cannot estimate).
    """
    edges = np.array(blocks.NEAR_BANDS)
    lower, upper = [], []
    for part, s_model, e_model, V in zip(loss, sampled, exact, whiten):
        delta = _score_map(e_model) - _score_map(s_model)  # (K+1) × K
        first = -float(part["loglik"]) + float(np.sum(part["gradient"] * delta))
        spread = float(np.linalg.norm(np.linalg.solve(V, delta), 2))  # ‖LᵀΔ‖₂, Lᵀ = V⁻¹
        near = np.einsum("ij,bik,kj->b", delta, part["near"], delta)  # tr(ΔᵀN_bΔ)
        with np.errstate(over="ignore"):  # inf: no finite bound, the kernels undecided
            growth = np.exp(2 * spread * edges)
        near_term = sum(2 * float(g) * float(n) for g, n in zip(growth, near) if n > 0)
        # rows of odds at most TINY_ODDS: ‖d_i‖² ≤ δ² ‖L⁻¹x_i‖², by band of that length
        tiny = sum(
            2 * blocks.TINY_ODDS * float(g) * spread**2 * float(t)
            for g, t in zip(growth, part["tiny"])
            if t > 0
        )
        far = float(np.sum(delta * (part["far"] @ delta)))
        lower.append(first)
        upper.append(first + near_term + tiny + 0.25 * max(far, 0.0))
    return np.array(lower), np.array(upper)


def _score_map(model: LDAModel) -> np.ndarray:
    """[W; b] of an LDA's class scores s = zᵀW + b ((K+1) × K)."""
    coef, intercept = class_scores(model)
    return np.vstack([coef.T, intercept])


def excluded_within(lower, upper, among, *, min_improvement: float) -> set:
    """The kernels of ``among`` that the rule cannot choose whatever each c_m is within
    [``lower``, ``upper``] (pass 2's :func:`cross_entropy_bounds`, or the sample's
    brackets; a relative 10⁻⁹ of slack for the sums' rounding).

    Examples
    --------
    >>> from scalenc.encoder.choice import excluded_within
    >>> sorted(excluded_within([100.0, 104.0], [101.0, 106.0], range(2), min_improvement=0.3))
    [1]
    >>> sorted(excluded_within([100.0, 69.0], [101.0, 72.0], range(2), min_improvement=0.3))
    []
    """
    lower, upper = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
    centre, half = (lower + upper) / 2, (upper - lower) / 2
    slack = 1e-9 * np.abs(centre)

    def margin(a: int, b: int, weight: float) -> float:
        return half[a] + slack[a] + weight * (half[b] + slack[b])

    return excluded(centre, margin, 1.0 - min_improvement, among)


def excluded(cross_entropy, margin, threshold: float, among) -> set:
    """The kernels of ``among`` that Shen's rule cannot choose, whatever each comparison's
    true value within ``margin`` of its estimate.

    ``cross_entropy`` holds the estimates c_m; ``margin(a, b, w)`` bounds the error of
    c_a − w·c_b; ``threshold`` is 1 − ``min_improvement``. Kernel 0 is the benchmark. With
    it among the candidates, a kernel is out when it clearly fails to qualify
    (c_m − w·c_0 above its margin), and the benchmark is out when another clearly
    qualifies. Any other kernel is out when another non-benchmark kernel's c is clearly
    smaller: if it qualified, that one would too, and win. Without the benchmark among
    them (a kernel was already known to qualify) the rule is the smallest c. The kernel
    with the smallest c that clearly qualifies (or, failing one, the benchmark) is never
    out, so one kernel at least is left; a single one left is the rule's choice.

    Examples
    --------
    >>> from scalenc.encoder.choice import excluded
    >>> exact = lambda a, b, w: 0.0
    >>> sorted(excluded([10.0, 9.0, 40.0], exact, 0.7, range(3)))  # the benchmark stays
    [1, 2]
    >>> sorted(excluded([10.0, 5.0, 6.0], exact, 0.7, range(3)))  # 1 qualifies, smallest
    [0, 2]
    >>> sorted(excluded([10.0, 7.2, 40.0], lambda a, b, w: 1.0, 0.7, range(3)))  # too close
    [2]
    """
    c = np.asarray(cross_entropy, dtype=float)
    among = sorted(int(m) for m in among)
    others = [m for m in among if m != 0]
    out = set()
    if 0 in among:
        clearly_in = [m for m in others if threshold * c[0] - c[m] > margin(m, 0, threshold)]
        out |= {m for m in others if c[m] - threshold * c[0] > margin(m, 0, threshold)}
        if clearly_in:
            out.add(0)
    for q in others:
        if q not in out and any(c[q] - c[w] > margin(q, w, 1.0) for w in others if w != q):
            out.add(q)
    return out


def rule_among(cross_entropy, among, min_improvement: float) -> int:
    """Shen's rule restricted to the kernels ``among`` (the others cannot be chosen): the
    benchmark (kernel 0) unless another is at least ``min_improvement`` smaller, when the
    benchmark is among them; the smallest c otherwise.

    Examples
    --------
    >>> from scalenc.encoder.choice import rule_among
    >>> rule_among([10.0, 7.5, 6.0], {0, 1}, 0.3), rule_among([10.0, 7.5, 6.0], {1, 2}, 0.3)
    (0, 2)
    """
    c = np.full(len(cross_entropy), np.inf)
    for m in among:
        c[m] = cross_entropy[m]
    if 0 not in among:
        return min(among, key=lambda m: (c[m], m))
    return choose_kernel(c, min_improvement)
