"""Row blocks short enough to survive churn: the long passes of a checkpointed fit on a
cluster split their row blocks so that one task is seconds, not minutes, of work.

A worker pre-empted while it runs a task loses the whole task: a row block of nRBFN's
Gram pass (rows · r² multiply-adds) that takes a minute is lost whole at each kill, and
under kills every few tens of seconds it may never finish. The checkpoint
(:mod:`scalenc.engine.checkpoint`) keeps finished blocks, not parts of one, so the unit of
work lost is the block. A pass that knows its work per row says so to
:func:`~scalenc.engine.reduce.reduce_rows` (``work=``, a :class:`BlockWork`); where it
matters, :func:`churn_sized` cuts each row block of X (and of the arrays aligned with it)
into equal pieces whose estimated seconds, at :data:`RATE`, are at most the target
(:data:`TARGET_SECONDS`, the Dask config ``scalenc.checkpoint.block-seconds``).

Where it matters: a fit with a checkpoint on a distributed cluster, the only place where a
worker is pre-empted and the fit survives it. Threaded fits and fits without a checkpoint
keep the blocks they were given. The sizing is arithmetic on the sizes alone
(:func:`split_rows`), so every attempt of a resumed fit splits alike; the checkpoint keys
each pass by the row chunks of its inputs, so partials of one layout are never merged
into a pass of another (a layout that changed computes the pass afresh).

What it costs, what it keeps:

* The result: each source block's rows are summed in pieces, then merged in the pass's
  tree; sums are reassociated, equal to the unsplit pass up to float rounding.
* A piece is never so short that what every task costs regardless of its rows
  (:data:`TASK_SECONDS`) and moving and merging its partial (``partial_bytes`` at
  :data:`PARTIAL_RATE`: nRBFN's r×r Grams) exceed :data:`OVERHEAD_SHARE` of its work.
* Memory: a piece needs less than its block (its tiles and kernels grow with its rows),
  and the partials alive in a tree on a cluster do not grow with the number of blocks;
  a pass whose memory plan says otherwise passes ``allowed`` to refuse a layout.
* Reads: the pieces of a block are slices of the block's one read (one task per source
  block, then one per piece), so X is read once per pass as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dask

from scalenc.engine import checkpoint
from scalenc.engine.cluster import uses_distributed

__all__ = [
    "TARGET_SECONDS",
    "RATE",
    "PAIR_WORK",
    "NEIGHBOR_PAIR_WORK",
    "TASK_SECONDS",
    "PARTIAL_RATE",
    "OVERHEAD_SHARE",
    "BlockWork",
    "target_seconds",
    "split_rows",
    "churn_sized",
]

#: Longest estimated seconds of one row block of a long pass in a checkpointed fit on a
#: cluster: the checkpoint's own unit of work it accepts to lose
#: (:data:`scalenc.engine.checkpoint.MIN_SECONDS`: a group of blocks is saved once it
#: holds 2 s of work). A block longer than that is lost whole at a kill, and under kills
#: every 8 s a block of tens of seconds may never finish.
TARGET_SECONDS = checkpoint.MIN_SECONDS

#: Work a thread does per second, in units of one multiply-add of a BLAS product: about
#: half of what nRBFN's Gram block ran at on one thread of the machines this library was
#: measured on (36–38 GFLOP/s at r = 1024–2048, p = 40, float32 rows), about its rate at
#: r = 256 (18–20), where the kernel's exponentials weigh as much as the product. Lower
#: rates (a slower or busier worker) make blocks longer than the target by their ratio.
RATE = 20e9

#: Work per (row, basis row) or (row, candidate) pair beyond its product's p
#: multiply-adds: the distance expansion, an exponential or a square root, a top-k
#: comparison (σ's pass ran at 7 ns a pair at p = 40, the k-NN pass at 2.7 ns).
PAIR_WORK = 100.0

#: :data:`PAIR_WORK` of the k-NN search's (row, candidate) pairs: a product and a top-k
#: comparison, no exponential (2.7 ns a pair at p = 40 is 54 units at :data:`RATE`).
#: With :data:`PAIR_WORK` the search's 100 000-row blocks against 10 000 candidates were
#: estimated at 7 s, 2.6 times what they took, and cut into four pieces each: on a calm
#: cluster the fit took 1.05× (medians of five alternating pairs, 20.6–22.1 s against
#: 20.9–22.9 s) and under kills every 8 s it gained nothing (1.57× against 1.65×).
NEIGHBOR_PAIR_WORK = 14.0

#: Seconds a task costs whatever its rows: the scheduler's round trip, the slice of its
#: block, its partial's pickling, the checkpoint's bookkeeping.
TASK_SECONDS = 0.01

#: Bytes per second at which a piece's partial is made (a fresh zeroed array), moved
#: between workers and merged: a split adds a partial per piece. Conservative: on a calm
#: cluster of two one-thread 4 GB workers (2 cores shared, load 4–13), nRBFN's Gram at
#: r = 2048 with 5 folds (168 MB partials) cut into 24 pieces of 100 000-row blocks took
#: 1.04–1.34× the 4 blocks' time in three alternating pairs, at most 0.7 s per extra
#: partial; with one fold (34 MB), 48 pieces took 0.83–0.93×. At this rate the 5-fold
#: Gram is cut into 8 pieces: 0.76–1.65× in 6 pairs, within the load's noise (per-task
#: accounting of one pair: 2 s of moves and merges in 88 s).
PARTIAL_RATE = 200e6

#: Largest share of a piece's work that its fixed costs (:data:`TASK_SECONDS` and its
#: partial at :data:`PARTIAL_RATE`) may add: a block is cut into fewer pieces rather than
#: pieces that pay more than this for being pieces.
OVERHEAD_SHARE = 0.1

_CONFIG = "scalenc.checkpoint.block-seconds"


@dataclass(frozen=True)
class BlockWork:
    """What one row of a pass costs: ``per_row`` units of work (:data:`RATE`'s), and the
    bytes of one block's partial (``partial_bytes``, whatever its rows). ``allowed``, if
    given, says whether the pass's memory plan admits a layout of row chunks."""

    per_row: float
    partial_bytes: int = 0
    allowed: Callable[[tuple[int, ...]], bool] | None = None

    @classmethod
    def pairs(
        cls,
        others: int,
        n_features: int,
        *,
        extra: float = 0.0,
        partial_bytes: int = 0,
        pair_work: float = PAIR_WORK,
    ):
        """The work of a row against ``others`` rows (a basis, candidates, a subsample) of
        ``n_features``: a product and ``pair_work`` (:data:`PAIR_WORK`) per pair, plus
        ``extra`` per row."""
        return cls(others * (n_features + pair_work) + extra, partial_bytes)


def target_seconds() -> float | None:
    """The target seconds of a block: the Dask config ``scalenc.checkpoint.block-seconds``
    (default :data:`TARGET_SECONDS`); None when it is 0 or less (blocks never split)."""
    value = dask.config.get(_CONFIG, TARGET_SECONDS)
    value = TARGET_SECONDS if value is None else float(value)
    return value if value > 0 else None


def split_rows(
    chunks: Sequence[int], work: BlockWork, *, target: float = TARGET_SECONDS, rate: float = RATE
) -> tuple[int, ...]:
    """Row chunks with each of ``chunks`` cut into the fewest equal pieces (sizes differ
    by at most one row) whose estimated seconds (rows · ``work.per_row`` / ``rate``) are
    at most ``target``, but never into pieces whose fixed costs exceed
    :data:`OVERHEAD_SHARE` of their work. A block already short enough stays whole.

    Examples
    --------
    >>> from scalenc.engine.blocksize import BlockWork, split_rows
    >>> split_rows((100_000, 30_000), BlockWork(per_row=1e6), target=2.0, rate=20e9)
    (33334, 33333, 33333, 30000)
    >>> split_rows((1000,), BlockWork(per_row=1e6), target=2.0, rate=20e9)
    (1000,)
    """
    per_second = max(work.per_row, 0.0) / rate
    fixed = TASK_SECONDS + work.partial_bytes / PARTIAL_RATE
    out: list[int] = []
    for rows in (int(c) for c in chunks):
        seconds = rows * per_second
        pieces = math.ceil(seconds / target) if seconds > target else 1
        if pieces > 1 and fixed > 0:
            # a piece's work at least fixed / OVERHEAD_SHARE
            pieces = min(pieces, max(1, int(seconds * OVERHEAD_SHARE / fixed)))
        pieces = max(1, min(pieces, rows))
        step, extra = divmod(rows, pieces)
        out.extend(step + (i < extra) for i in range(pieces))
    return tuple(out)


def churn_sized(X, aligned: Sequence, work: BlockWork | None):
    """(X, aligned) with the row blocks :func:`split_rows` gives, where churn matters (a
    checkpointed fit on a distributed cluster: the module's docstring) and ``work`` is
    known; (X, aligned) as they are otherwise, or when the blocks are short enough, or
    when ``work.allowed`` refuses the split layout. ``aligned`` may hold None."""
    if work is None or checkpoint.active_run() is None or not uses_distributed():
        return X, aligned
    target = target_seconds()
    if target is None:
        return X, aligned
    rows = split_rows(X.chunks[0], work, target=target, rate=RATE)
    if rows == tuple(X.chunks[0]) or (work.allowed is not None and not work.allowed(rows)):
        return X, aligned

    def split(arr):  # each piece a slice of one block: the task-based rechunk, never a shuffle
        return None if arr is None else arr.rechunk({0: rows}, method="tasks")

    return split(X), tuple(split(arr) for arr in aligned)
