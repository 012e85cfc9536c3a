"""The kernel choice for large n: the kernels that a fixed sample of rows shows Shen's
rule cannot choose are dropped before X is read again.

Pure NumPy, no dask. With several kernels the paper's fit evaluates every kernel on
every row twice (for its LDA statistics, then for the cross-entropy of that LDA), or
once with the embedding cached: most of the fit's time, and most of that is kernels that
are not chosen (Spearman's ranks cost 1.4–2 reads of X at p = 50–256). For large n
(``choice_sample``) the fit instead:

1. draws a uniform random sample of m labeled rows in the pass that computes U
   (:func:`sample_plan`; rows by hash of their index, the same for any chunking);
2. embeds the sample with every kernel, fits each kernel's LDA on it and computes each
   sampled row's ℓ_m(i) = −log T_m(i, y_i) (:func:`sample_choice`); a kernel is dropped
   when the sample shows that the rule cannot choose it (:func:`excluded`);
3. runs the paper's passes over every row for the kernels left: their exact LDA
   statistics and, when two or more are left, their exact cross-entropies, from which
   the rule chooses (:func:`rule_among`). One kernel left is the choice, and costs one
   pass over X for its statistics.

The chosen kernel's LDA is always the exact one (fitted on every labeled row), and so is
every cross-entropy the final comparison uses: the sample only drops kernels.

**Error bound.** c_m is estimated as N/m Σ_{i∈S} ℓ_m(i), N the labeled rows of X. Each
comparison of the rule, c_a − w·c_b (w = 1 − min_improvement against the benchmark, 1
between two other kernels), is estimated with its standard error from the paired
differences ℓ_a(i) − w·ℓ_b(i), finite-population corrected. It drops a kernel only when it clears
:data:`CHOICE_Z` = 4 standard errors, plus :data:`LDA_MARGIN` = 5 % of its two sides for
the LDA being fitted on the sample itself: under the normal approximation a kernel the
rule would choose is dropped with probability below 3·10⁻⁵ per comparison. What a
sample cannot see is a cross-entropy made by rows rarer than about 1/m (a handful of
rows with huge losses): where such rows would change the rule's choice, the sample may
drop the kernel the rule would choose (``choice_sample=None`` compares every kernel over
every row). Near-separable classes, whose cross-entropies come from few rows, show
large standard errors on the sample and keep their kernels in the comparison over
every row.

``fit_plan_`` reports the sample's size, the kernels it dropped and those compared over
every row.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from scalenc.encoder.blocks import choose_kernel, stacked_class_moments, stacked_row_losses
from scalenc.encoder.kernels import embed
from scalenc.exceptions import NumericalWarning
from scalenc.math.linalg import LDAModel, lda_from_moments, stacked_class_scores

__all__ = [
    "SAMPLE_ROWS",
    "SAMPLE_BYTES",
    "SAMPLE_MIN_FACTOR",
    "CHOICE_Z",
    "LDA_MARGIN",
    "sample_plan",
    "SampleChoice",
    "sample_choice",
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
#: Standard errors a comparison must clear on the sample to drop a kernel.
CHOICE_Z = 4.0
#: Relative margin of a comparison on the sample for its LDA being fitted on the same rows.
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


def sample_choice(rows, codes, kernels, U, counts, *, tol: float, min_improvement: float):
    """Every kernel's LDA and cross-entropy estimated on the sample's ``rows`` (with class
    ``codes``), and the kernels it drops; None when a class has fewer than
    :data:`MIN_CLASS_ROWS` rows in the sample or an estimate is not finite.

    ``counts`` are X's labeled rows per class (N = their sum), ``U`` the class means of
    every row. See the module docstring for the margins.
    """
    K, M = U.shape[0], len(kernels)
    codes = np.asarray(codes)
    in_sample = np.bincount(codes[codes >= 0], minlength=K)
    if in_sample.min() < MIN_CLASS_ROWS:
        return None
    Z = embed(kernels, rows, U)
    moments = [scaled_moments(m, counts) for m in stacked_class_moments(Z, codes, M, K)]
    models = [_lda(m, tol) for m in moments]
    losses = stacked_row_losses(Z, codes, *stacked_class_scores(models, K), M)
    if not np.isfinite(losses).all():
        return None
    m_rows, n_rows = losses.shape[1], float(np.sum(counts))
    scale = n_rows / m_rows
    sums = losses.sum(axis=1)
    spread = np.sqrt(max(0.0, 1.0 - m_rows / n_rows) * m_rows)  # √m with the fpc

    def margin(a: int, b: int, weight: float) -> float:
        paired = losses[a] - weight * losses[b]
        error = CHOICE_Z * float(paired.std()) * spread
        return scale * (error + LDA_MARGIN * (sums[a] + weight * sums[b]))

    estimate = scale * sums
    dropped = excluded(estimate, margin, 1.0 - min_improvement, range(M))
    return SampleChoice(m_rows, moments, models, estimate, dropped)


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
