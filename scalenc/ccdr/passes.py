"""CCDR's passes over the data (Raich, Costa, Damelin & Hero): the per-class row counts,
the rank draws of the subsamples (their rows gathered by
:func:`scalenc.engine.passes.gather_rows_pass`), and the heads' statistics on the
embedding. Each returns a Delayed; the per-block math is in :mod:`scalenc.ccdr.blocks`.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
from dask.delayed import Delayed

from scalenc.ccdr import blocks as _ccdr_blocks
from scalenc.engine.blocksize import BlockWork
from scalenc.engine.reduce import reduce_rows
from scalenc.math import sampling as _sampling

__all__ = [
    "stratum_counts_pass",
    "select_rows_pass",
    "embedding_stats_pass",
]


# --- CCDR: the subsamples, and the statistics of the classifier heads --------------------


def stratum_counts_pass(codes: da.Array, n_classes: int) -> Delayed:
    """Per block, rows per stratum (unlabeled, class 0, …, class L−1) keyed by the block's
    first row: ``{"starts": (n_b,), "counts": (n_b, L+1)}`` in no set order."""
    return reduce_rows(
        _sampling.stratum_counts_block,
        codes,
        combine=_sampling.concat_tables,
        n_classes=n_classes,
    )


def select_rows_pass(
    codes: da.Array,
    starts: np.ndarray,
    offsets: np.ndarray,
    ranks: tuple,
) -> Delayed:
    """Global indices (``s{b}``) and strata (``c{b}``) of every subsample's rows, found
    block by block from the drawn within-stratum ranks
    (:func:`scalenc.math.sampling.select_block`)."""
    return reduce_rows(
        _sampling.select_block,
        codes,
        combine=_sampling.concat_tables,
        starts=starts,
        offsets=offsets,
        ranks=ranks,
    )


def embedding_stats_pass(
    X: da.Array,
    codes: da.Array,
    head: str,
    solutions,
    n_classes: int,
    *,
    reference_rows: int | None = None,
) -> Delayed:
    """Statistics of the training embedding f(x_i, c_i) over the labeled rows for a
    classifier head: ``"linear"`` (the least-squares Gram and cross term) or ``"lda"``
    (class moments). ``solutions`` may be a Delayed of the fitted subsamples;
    ``reference_rows``, their rows in all, is what a row's Nyström extension is searched
    against (its work, :class:`~scalenc.engine.blocksize.BlockWork`; None: unknown)."""
    block = _ccdr_blocks.linear_stats_block if head == "linear" else _ccdr_blocks.lda_stats_block
    work = None if reference_rows is None else BlockWork.pairs(reference_rows, X.shape[1])
    return reduce_rows(
        block,
        X,
        codes,
        solutions=solutions,
        n_classes=n_classes,
        work=work,
    )
