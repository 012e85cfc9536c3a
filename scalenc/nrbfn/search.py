"""The search of a grown nRBFN basis (``n_basis="auto"``) as one object, its plan apart
from its execution.

A :class:`Trial` is one basis size, σ multiple and kernel judged on held-out rows over a
λ grid: its errors, and the seconds and bytes it cost. A *step* runs a set of trials on one
basis together (one σ pass, one Gram pass and one held-out pass serve them all) and keeps
one of them by :meth:`Search.choose`. :class:`Search` plans the steps — the sizes tried
(:func:`growth_sizes`) while :func:`next_size` says the next may pay (its price from
:func:`size_work`; a costly last size bought once), then the changes tried on the size
before the kept one and then on the kept size (:meth:`Search.retry`: σ's next narrower
multiple, unless tried before a costly last size, and the paper's kernel again) —
holds the records and the kept size's Gram, and writes ``basis_growth_`` from them
(:meth:`Search.growth`). It runs no pass: ``run(r, kernels, lams, paper_sigma)``, given by
:mod:`scalenc.nrbfn.network`, executes a step's trials.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "Trial",
    "Search",
    "GROWTH_START",
    "GROWTH_TOLERANCE",
    "CAP_STEP",
    "CHEAP_WORK",
    "SECOND_LOOK",
    "WIDTHS",
    "KERNELS",
    "WIDTH_MARGIN_Z",
    "growth_sizes",
    "size_work",
    "next_size",
    "width_margin",
]

#: Rows of the first size of a grown basis (at least two per class): small enough that
#: data a few hundred centres fit are fitted with a few hundred.
GROWTH_START = 128

#: A grown basis doubles while its held-out error falls by more than this (0.1 point). A
#: relative tolerance as well (2 % of the error) stopped mfeat_fourier early (15.7 % test
#: error at 512 rows, 14.0 % grown on; SVC 14.8 %).
GROWTH_TOLERANCE = 1e-3

#: A cap less than this many times the last doubling below it replaces that doubling
#: (:func:`growth_sizes`).
CAP_STEP = 1.25

#: Multiply-adds below which a size is cheap (about a second on two cores): a cheap size
#: is tried after one that did not improve (one size's held-out error is noisy on small
#: data), whatever the last gains predict, and a costly last size is bought once
#: (:meth:`Search.grow`). See :func:`next_size`.
CHEAP_WORK = 2.0**34

#: A size after one that erred more than the best before it is bought only when it costs
#: at most this many times the work of the sizes tried (:func:`next_size`).
SECOND_LOOK = 3.0

#: ``width="auto"``: the multiples of the paper's σ tried on a grown basis's first size
#: (the one with the least held-out error is kept as the basis grows; ties to the first).
#: Narrower kernels than the paper's mean distance fit data of few features better.
#: Choosing again on every later size followed noise on the tune half of
#: ``benchmarks/defaults.py`` (mfeat_karhunen 1.83 → 2.50 %, hypothyroid 2.74 → 3.16 %).
WIDTHS = (1.0, 0.5, 0.25)

#: ``normalize="auto"``: the kernels tried on a grown basis's first size, with each width
#: of :data:`WIDTHS`: the paper's normalised W̃, then the plain Gaussian W, kept only where
#: its held-out error is lower by :func:`width_margin` (the one kept as the basis grows).
#: W̃ loses the kernel's mass, which tells a row far from the basis from one near it
#: (ring's test error with W 1.89 %, with W̃ 3.47 %; spambase 7.31 and 8.18 %); the other
#: 40 sets of both halves of ``benchmarks/defaults.py`` kept W̃ (within the margin).
KERNELS = (True, False)

#: Standard errors by which σ's narrower multiple must beat the held-out error of the
#: size before a grown basis's kept one to be tried on the kept size (:func:`width_margin`).
WIDTH_MARGIN_Z = 3.0


def growth_sizes(n_classes: int, top: int, capped: bool = False) -> list[int]:
    """The basis sizes a grown basis tries: :data:`GROWTH_START` (at least two rows per
    class), doubled until ``top`` (the cap, or every candidate), which ends the list.

    When ``top`` is a cap (``capped``) less than :data:`CAP_STEP` times the last doubling
    below it, the cap replaces that doubling (letter: 8 192 rows, then the cap's 8 665,
    0.01 point worse)."""
    r = min(top, max(GROWTH_START, 2 * n_classes))
    sizes = [r]
    while r < top:
        r = min(top, 2 * r)
        sizes.append(r)
    if capped and len(sizes) > 2 and sizes[-1] < CAP_STEP * sizes[-2]:
        del sizes[-2]
    return sizes


def size_work(n_labeled: int, r: int, n_folds: int, n_alphas: int = 3) -> float:
    """Multiply-adds of one basis size after the first: its Gram (n·r², the symmetric
    half of each row's r×r product) and its held-out solves (one Cholesky factor, r³/3,
    per fold and λ tried)."""
    return float(n_labeled) * r * r + n_folds * n_alphas * float(r) ** 3 / 3


def next_size(errors, work: float, spent: float) -> bool:
    """Whether a grown basis tries its next size, given the held-out errors of the sizes
    tried so far (in order), the next size's :func:`size_work` and the work of the sizes
    tried (``spent``, the first size's every kernel counted).

    A size improves when it beats the best error before it by more than
    :data:`GROWTH_TOLERANCE` (its gain). The next size is tried after a size that
    improved when it is cheap (:data:`CHEAP_WORK`) or the last gain, times its ratio to
    the gain before (at most 1), still exceeds the tolerance: each doubling costs four
    times the last (sleep, 74 000 rows: gains of 0.45 and 0.19 point predict 0.08; 4 096
    rows bought 0.07). After a size that did not improve, only when it is cheap and the
    size before improved, and after a loss (not a tie) at most :data:`SECOND_LOOK` times
    ``spent`` (phoneme's tie at 256 and 512 rows went on to gain 1.3 points;
    ``benchmarks/README.md``, "Third pass").
    """
    errors = np.asarray(errors, dtype=float)
    if errors.size < 2:
        return True
    best = np.minimum.accumulate(errors)
    gains = best[:-1] - errors[1:]
    improved = gains > GROWTH_TOLERANCE
    cheap = work < CHEAP_WORK
    if not improved[-1]:
        priced = errors[-1] <= best[-2] or work <= SECOND_LOOK * spent
        return bool(cheap and (gains.size == 1 or improved[-2]) and priced)
    if cheap:
        return True
    last = gains[-1]
    ratio = min(1.0, last / gains[-2]) if gains.size > 1 and improved[-2] else 1.0
    return bool(last * ratio > GROWTH_TOLERANCE)


def width_margin(error: float, n_rows: int) -> float:
    """How much a narrower width must lower a held-out error rate to be tried further:
    :data:`WIDTH_MARGIN_Z` standard errors of that rate on ``n_rows`` rows, at least
    :data:`GROWTH_TOLERANCE` (on 1 400 rows at 2 %, 1.1 points: the choices that
    followed noise there differed by a row or two)."""
    return max(GROWTH_TOLERANCE, WIDTH_MARGIN_Z * np.sqrt(error * (1 - error) / max(n_rows, 1)))


def _neighbours(grid, alpha) -> tuple:
    """``alpha`` and its neighbours in ``grid``: the λ a larger basis is tried with."""
    at = list(grid).index(alpha)
    return tuple(grid[max(0, at - 1) : at + 2])


@dataclass(frozen=True)
class Trial:
    """One basis size ``r``, σ multiple ``width`` (σ = ``sigma``) and kernel (``normalize``:
    the paper's W̃, else W) judged on held-out rows: the error rate of each λ of ``lams``
    over ``n_rows`` rows in ``n_folds`` folds; ``seconds`` of the step that ran it (shared
    by the step's trials) and the ``bytes`` its Gram pass was planned to take."""

    r: int
    width: float
    sigma: float
    normalize: bool
    lams: tuple
    errors: np.ndarray
    n_folds: int
    n_rows: int
    seconds: float = 0.0
    bytes: int = 0

    @property
    def error(self) -> float:
        """The least held-out error rate of the λ tried."""
        return float(self.errors.min())

    @property
    def alpha(self) -> float:
        """The λ of :attr:`error` (ties to the first of ``lams``)."""
        return self.lams[int(np.argmin(self.errors))]

    @property
    def stderr(self) -> float:
        """The standard error of :attr:`error` on :attr:`n_rows` rows."""
        return float(np.sqrt(self.error * (1 - self.error) / max(self.n_rows, 1)))

    def on_grid(self, grid) -> np.ndarray:
        """The held-out errors placed on the whole ``grid`` (NaN where not tried)."""
        out = np.full(len(grid), np.nan)
        out[[list(grid).index(lam) for lam in self.lams]] = self.errors
        return out


class Search:
    """The planned search of a grown basis: the steps' records (``trials``, and the
    one kept of each step in ``steps``), the best trial and its Gram (``kept``,
    the search's one reference to it).

    ``run(r, kernels, lams, paper_sigma)`` executes a step: the trials of the basis of
    the first ``r`` rows of the growth order for each (width, normalize) of ``kernels``
    and each λ of ``lams`` (σ = ``paper_sigma`` × width; ``paper_sigma`` None: from its
    own pass), returning the trials and their Grams. ``n_rows`` is the held-out rows.
    """

    def __init__(self, run, grid, n_rows: int):
        self.run, self.grid, self.n_rows = run, tuple(grid), n_rows
        self.trials: list[Trial] = []
        self.steps: list[Trial] = []
        self.best: Trial | None = None
        self.kept = None
        self.first_widths: dict = {}  # each kernel's best width on the first size
        self.narrowed = False  # σ's narrower multiple tried before the last size

    def step(self, r, widths, kinds, lams, paper_sigma=None):
        """The trials of size ``r`` for each kernel of ``kinds`` and width of ``widths``;
        returns the one kept (:meth:`choose`) and its Gram."""
        kernels = tuple((width, kind) for kind in kinds for width in widths)
        trials, grams = self.run(r, kernels, tuple(lams), paper_sigma)
        self.trials.extend(trials)
        chosen = self.choose(trials)
        self.steps.append(trials[chosen])
        return trials[chosen], grams[chosen]

    def choose(self, trials) -> int:
        """The trial a step keeps: each kernel's best width (ties to the first), the plain
        W's only where it beats the normalised W̃'s by :func:`width_margin`."""
        level = None
        for kind in dict.fromkeys(trial.normalize for trial in trials):
            own = [i for i, trial in enumerate(trials) if trial.normalize == kind]
            best = min(own, key=lambda i: trials[i].error)  # the first of equal errors
            self.first_widths.setdefault(kind, trials[best].width)
            if level is None or trials[best].error < trials[level].error - width_margin(
                trials[level].error, self.n_rows
            ):
                level = best
        return level

    def grow(self, sizes, widths, kinds, n_labeled: int) -> bool:
        """The sizes in turn, while :func:`next_size` buys the next (the first size with
        every kernel and width of ``widths``, λ over the grid; then the kept kernel and
        width, λ around the last best). Returns whether the rule stopped the growth.

        A last size that is not cheap is bought once: σ's narrower multiple is tried on
        the size before it first (:meth:`narrower_width`, ``width="auto"``), and where its
        held-out factors outweigh its Gram it tries the λ before alone (one per fold),
        unless it has a fold's training rows or more (there λ moves: yaleb32)."""
        lams, spent, narrow = self.grid, 0.0, len(widths) > 1
        for at, r in enumerate(sizes):
            trial, gram = self.step(r, widths, kinds, lams)
            spent += len(widths) * len(kinds) * size_work(n_labeled, r, trial.n_folds, len(lams))
            widths, kinds = (trial.width,), (trial.normalize,)
            lams = _neighbours(self.grid, trial.alpha)
            if self.best is None or trial.error < self.best.error:
                self.best, self.kept = trial, gram
            del gram
            if at + 1 == len(sizes):
                break
            work = size_work(n_labeled, sizes[at + 1], trial.n_folds, len(lams))
            if not next_size([step.error for step in self.steps], work, spent):  # at 3 λ
                return True
            once, k = at + 2 == len(sizes) and work >= CHEAP_WORK, trial.n_folds
            few = once and 1 < k * sizes[-1] / self.n_rows < k - 1  # k·3·r³/3 > n·r², r < n(k-1)/k
            if once and narrow:
                trial = self.narrower_width(trial)
            widths = (trial.width,)
            lams = (trial.alpha,) if few else _neighbours(self.grid, trial.alpha)
        return False

    def retry(self, width: float, normalize: bool, *, margin: bool) -> None:
        """A change of the kept trial's width or kernel, tried on the size before the kept
        one (:meth:`_on_size_of`) and, only if it does better there, on the kept size,
        where it is kept if it does better again (``margin``: strictly; else not worse).
        The kept Gram, its folds' sum once its held-out errors are scored (one r×r array
        beside the try's folds), is held through the try: it was formed again, a Gram
        pass and held-out solves. The tries are steps in ``basis_growth_``."""
        best = self.best
        at = next(i for i, step in enumerate(self.steps) if step.r == best.r)
        if at == 0 or self._on_size_of(self.steps[at - 1], width, normalize, margin)[0] is None:
            return
        lams, paper = _neighbours(self.grid, best.alpha), best.sigma / best.width
        tried, gram = self.step(best.r, (width,), (normalize,), lams, paper)
        if _better(tried.error, best.error, strict=margin):
            self.best, self.kept = tried, gram

    def narrower_width(self, trial: Trial | None = None) -> Trial | None:
        """σ's next narrower multiple (:data:`WIDTHS`), tried once (larger bases want
        narrower kernels: krkopt chose ×1/2 on 128 rows; on 4 096, ×1/4 erred 29.7 % on the
        test rows, ×1/2 38.4 %): by :meth:`retry` once the growth stops, or on the size of
        the growth's ``trial`` before a costly last size, returning the trial the growth
        goes on from (the narrower one where it does better by :func:`width_margin`)."""
        narrower = [w for w in WIDTHS if w < (trial or self.best).width]
        if not narrower or self.narrowed:
            return trial
        if trial is None:
            return self.retry(narrower[0], self.best.normalize, margin=True)
        self.narrowed = True
        tried, gram = self._on_size_of(trial, narrower[0], trial.normalize, True)
        if tried is not None and tried.error < self.best.error:
            self.best, self.kept = tried, gram
        return tried or trial

    def _on_size_of(self, before: Trial, width: float, normalize: bool, margin: bool):
        """A change tried on ``before``'s basis (its paper σ, λ around its own): the trial
        and its Gram where it does better (``margin``: by :func:`width_margin`, strictly;
        else not worse), else (None, None)."""
        lams = _neighbours(self.grid, before.alpha)
        tried, gram = self.step(before.r, (width,), (normalize,), lams, before.sigma / before.width)
        gap = width_margin(before.error, self.n_rows) if margin else 0.0
        better = _better(tried.error, before.error - gap, strict=margin)
        return (tried, gram) if better else (None, None)

    def paper_kernel_again(self) -> None:
        """The paper's W̃ (its own best width of the first size) tried by :meth:`retry` on
        a growth that kept the plain W: the kernel that wins on 128 rows need not win on
        the kept size (shuttle, held out: W 0.56 % and W̃ 0.79 % on 128 rows, 0.39 and
        0.34 % on 512). W needs the margin of :func:`width_margin` on the first size only."""
        if not self.best.normalize:
            self.retry(self.first_widths[True], True, margin=False)

    def growth(self) -> dict:
        """``basis_growth_``: each step's kept trial, in order."""
        names = ("r", "width", "sigma", "alpha", ("cv_error", "error"), "normalize")
        names = [(n, n) if isinstance(n, str) else n for n in names]
        return {key: np.asarray([getattr(s, name) for s in self.steps]) for key, name in names}


def _better(new: float, old: float, *, strict: bool) -> bool:
    return new < old if strict else new <= old
