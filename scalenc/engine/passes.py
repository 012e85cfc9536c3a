"""Every pass over the data, by what it accumulates: the estimators only call these and solve.

A *pass* is one read of X (or of y, or of a cached embedding) block by block, each block
reduced to a small partial and the partials merged in a tree (:mod:`scalenc.engine.reduce`).
The per-block NumPy math comes from the blocks modules (:mod:`scalenc.math.moments`,
:mod:`scalenc.encoder.kernels`, :mod:`scalenc.math.neighbors`, :mod:`scalenc.math.sampling`,
:mod:`scalenc.nrbfn.blocks`, :mod:`scalenc.ccdr.blocks`); this module only wires it into
Dask graphs. Each function returns a Delayed (computed by the caller, which counts the
pass) unless its docstring says otherwise.

Labels and evaluation
    :func:`class_counts_pass` / :func:`find_classes`,
    :func:`label_counts_pass`, :func:`confusion_pass`.
Class moments
    :func:`class_moments_pass`, and :func:`labeled_moments_pass` (the encoder's pass 1,
    with the class list and the sample for its kernel choice).
Rows drawn and gathered (every method)
    The one sampler, by hash per stratum (:func:`scalenc.math.sampling.hashed_sample_block`):
    :func:`stratified_sample_pass` (nRBFN's candidates, classes as strata) and
    :func:`labeled_moments_pass`'s ``sample`` (the encoder's). The one gather:
    :func:`gather_rows_pass` / :func:`gather_rows` (nRBFN's and CCDR's rows). CCDR draws
    its subsamples' ranks itself (:mod:`scalenc.ccdr.passes`).
Neighbours (nRBFN's soft-KNN)
    :func:`kneighbors_pass`, :func:`kneighbors_all_rows`.
"""

from __future__ import annotations

import functools

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed

from scalenc.engine.blocksize import NEIGHBOR_PAIR_WORK, BlockWork
from scalenc.engine.cluster import compute
from scalenc.engine.reduce import RowCache, keep_on_workers, map_rows, reduce_rows, tree_reduce
from scalenc.math import labels
from scalenc.math import sampling as _sampling
from scalenc.math.labels import confusion_counts
from scalenc.math.moments import checked_class_moments, combine_partials
from scalenc.math.neighbors import kneighbors_block, kneighbors_pair, labeled_rows, merge_neighbors
from scalenc.math.xp import to_host

__all__ = [
    "reduce_rows",
    "tree_reduce",
    "map_rows",
    "keep_on_workers",
    "RowCache",
    "class_counts_pass",
    "find_classes",
    "label_counts_pass",
    "confusion_pass",
    "class_moments_pass",
    "labeled_moments_pass",
    "stratified_sample_pass",
    "kneighbors_pass",
    "neighbors_work",
    "kneighbors_all_rows",
    "gather_rows_pass",
    "gather_rows",
]


# --- the encoder's passes -------------------------------------------------------------


def _moments_block(X, codes, *, row_start, n_classes, scatter, sqnorm):
    return checked_class_moments(X, codes, n_classes, scatter=scatter, sqnorm=sqnorm)


def class_moments_pass(
    X: da.Array, codes: da.Array, n_classes: int, *, scatter: bool = False, sqnorm: bool = False
) -> Delayed:
    """Class counts ``n`` (K,), means ``mean`` (K×p) and optionally the pooled scatter (p×p).

    One pass over X. Also returns ``nonfinite`` (NaN/inf count) and ``rows``.
    Memory per task: one block plus O(Kp) (O(p²) with ``scatter``).
    """
    return reduce_rows(
        _moments_block, X, codes, n_classes=n_classes, scatter=scatter, sqnorm=sqnorm
    )


def _labeled_moments_block(
    X, y, *, row_start, scatter, sqnorm, marker=labels.UNLABELED, sample=None
):
    """Class moments of one block keyed by the block's own label values, its rows
    labeled ``marker`` itself, and with ``sample`` its share of the hashed sample."""
    counted = labels.class_counts(y, marker)
    classes = counted["classes"]
    codes = labels.encode(y, classes, marker=marker)
    moments = checked_class_moments(X, codes, classes.size, scatter=scatter, sqnorm=sqnorm)
    out = {"classes": classes, "moments": moments, "marker_rows": counted["marker_rows"]}
    if sample is not None:
        rate, size, seed = sample
        out["sample"] = _sampling.hashed_rows_block(
            X, y, codes >= 0, row_start=row_start, rate=rate, size=size, seed=seed
        )
    return out


def _align_classes(part: dict, classes: np.ndarray) -> dict:
    """A block's class moments spread onto the positions of ``classes`` (a superset)."""
    moments = part["moments"]
    if np.array_equal(part["classes"], classes):
        return moments
    where = labels.encode(part["classes"], classes, marker=None)  # classes, none unlabeled
    out = dict(moments)
    for key in ("n", "mean", "sqnorm"):
        if key in moments:
            full = np.zeros((classes.size, *moments[key].shape[1:]))
            full[where] = moments[key]
            out[key] = full
    return out


def _merge_labeled(*parts: dict, sample_size: int | None = None) -> dict:
    """Merge label-keyed partials: the union of their classes, moments aligned to it, and
    the ``sample_size`` sampled rows of smallest hash."""
    classes = labels.union(*(part["classes"] for part in parts))
    moments = combine_partials(*(_align_classes(part, classes) for part in parts))
    marker_rows = sum(part["marker_rows"] for part in parts)
    out = {"classes": classes, "moments": moments, "marker_rows": marker_rows}
    if sample_size is not None:
        out["sample"] = _sampling.KeepSmallest([sample_size])(*(p["sample"] for p in parts))
    return out


def labeled_moments_pass(
    X: da.Array,
    y: da.Array,
    *,
    scatter: bool = False,
    sqnorm: bool = False,
    marker=labels.UNLABELED,
    sample: tuple[float, int, int] | None = None,
) -> Delayed:
    """The class list and :func:`class_moments_pass`'s statistics in one pass over (X, y).

    Each block keys its moments by its own label values (the unlabeled ``marker``, −1 by
    default, and None/NaN are unlabeled: :func:`scalenc.math.labels.unlabeled_mask`);
    the tree merge aligns them on the union of the classes. Returns ``{"classes": sorted
    distinct labels, "moments": {...}, "marker_rows": rows labeled marker}`` with the
    moments in the order of ``classes`` — what :func:`find_classes` followed by
    :func:`class_moments_pass` give, without a separate read of y and a round trip to the
    client between the two. ``moments["n"]`` and ``marker_rows`` are what
    :func:`scalenc.math.labels.warn_marker_as_class` reads.

    With ``sample=(rate, size, seed)`` the same pass draws a uniform random sample of the
    labeled rows, ``"sample"``: of the rows whose :func:`~scalenc.math.sampling.row_hash`
    is below ``rate``, the ``size`` with the smallest hashes (``rows`` in X's dtype, their
    ``labels``, global ``index`` and ``key``, in index order), the same for any chunking.
    Each block keeps at most ``size`` rows, and the merges hold about ``rate · n`` rows:
    the sample's memory, not X's.
    """
    combine = functools.partial(_merge_labeled, sample_size=None if sample is None else sample[1])
    return reduce_rows(
        _labeled_moments_block,
        X,
        y,
        combine=combine,
        scatter=scatter,
        sqnorm=sqnorm,
        marker=marker,
        sample=None if sample is None else tuple(sample),
    )


def _class_counts_block(y, *, row_start, marker=labels.UNLABELED):
    return labels.class_counts(y, marker)


def class_counts_pass(y: da.Array, *, marker=labels.UNLABELED) -> Delayed:
    """The sorted distinct labeled values of y (the unlabeled ``marker`` and None/NaN left
    out), the rows of each class and the rows labeled ``marker``:
    ``{"classes", "counts", "marker_rows"}`` (:func:`scalenc.math.labels.class_counts`).

    One pass over y (not X), merged in a tree; each partial holds O(K) numbers.
    """
    return reduce_rows(_class_counts_block, y, combine=labels.merge_class_counts, marker=marker)


def find_classes(y: da.Array, *, marker=labels.UNLABELED) -> np.ndarray:
    """The sorted classes of y (:func:`class_counts_pass` computed: one pass over y, O(K)
    memory), checked to be class labels (not continuous).

    Warns (:class:`~scalenc.exceptions.DataWarning`) when the rows labeled with the
    default marker −1 look like one more class, as with labels −1, 0, 1
    (:func:`scalenc.math.labels.marker_looks_like_class`): they are fitted as unlabeled.
    """
    (found,) = compute(class_counts_pass(y, marker=marker))
    classes = found["classes"]
    labels.check_class_values(classes)
    labels.warn_marker_as_class(classes, found["counts"], found["marker_rows"], marker)
    return classes


def _confusion_block(pred, y, *, row_start, classes, marker=labels.UNLABELED):
    return confusion_counts(to_host(pred), y, classes, marker=marker)


def confusion_pass(
    pred: da.Array, y: da.Array, classes: np.ndarray, *, marker=labels.UNLABELED
) -> Delayed:
    """Confusion counts of lazy predictions against y
    (:func:`scalenc.math.labels.confusion_counts`), summed in a tree: one pass over
    whatever ``pred`` reads (X, for a model's predictions)."""
    return reduce_rows(_confusion_block, pred, y, classes=classes, marker=marker)


# --- nRBFN: soft-KNN, σ, the Gram and the λ grid ----------------------------------------

#: Bytes per neighbour of a k-NN partial (float64 distance, int64 index and label).
_NEIGHBOR_BYTES = 24


def label_counts_pass(codes: da.Array, n_classes: int) -> Delayed:
    """Labeled rows per class (K,), one pass over the class codes (not X)."""
    return reduce_rows(_sampling.label_counts_block, codes, n_classes=n_classes)


def stratified_sample_pass(codes, counts, size: int, seed: int):
    """:func:`scalenc.math.sampling.stratified_sample` from Dask labels in one pass over them:
    each block keeps its smallest hashes per class, merged in a tree; only the sample
    reaches the client.

    ``counts`` are the labeled rows per class (from :func:`label_counts_pass`). Returns a
    Delayed of ``{"index", "code", "key"}``, one entry per sampled row, in no set order.
    """
    shares = _sampling.class_shares(counts, size)
    return reduce_rows(
        _sampling.sample_block,
        codes,
        combine=_sampling.KeepSmallest(shares),
        shares=shares,
        seed=seed,
    )


def kneighbors_pass(X, codes, candidates, candidate_index, n_neighbors: int):
    """One pass over X: the k nearest labeled rows (global indices) of every candidate.

    ``candidates`` and ``candidate_index`` may be NumPy arrays or Delayed objects (a row
    block of X itself, for the exact all-rows search). Returns a Delayed dict as
    :func:`kneighbors_block`. Memory per task: one block, one distance tile and O(c·k).
    """
    # a Delayed's size is unknown until computed: its blocks stay as they are
    shape = None if isinstance(candidates, Delayed) else getattr(candidates, "shape", None)
    work = None if shape is None else neighbors_work(int(shape[0]), X.shape[1], n_neighbors)
    return reduce_rows(
        kneighbors_block,
        X,
        codes,
        candidates=candidates,
        candidate_index=candidate_index,
        n_neighbors=n_neighbors,
        combine=merge_neighbors,
        work=work,
    )


def neighbors_work(n_candidates: int, n_features: int, n_neighbors: int) -> BlockWork:
    """What a row of :func:`kneighbors_pass` costs (:mod:`scalenc.engine.blocksize`): a
    product and a top-k comparison per candidate (:data:`NEIGHBOR_PAIR_WORK`), and a
    partial of each candidate's ``n_neighbors`` distances and indices."""
    partial = n_candidates * n_neighbors * _NEIGHBOR_BYTES
    return BlockWork.pairs(
        n_candidates, n_features, partial_bytes=partial, pair_work=NEIGHBOR_PAIR_WORK
    )


def kneighbors_all_rows(X, codes, n_neighbors: int) -> list:
    """Exact k-NN of EVERY labeled row among all labeled rows, block pair by block pair.

    For row blocks i < j one task computes both directions from one product
    (:func:`kneighbors_pair`); block i against itself uses :func:`kneighbors_block`.
    Each block's partials are merged in a tree. Returns, per row block, a Delayed
    ``(neighbours, global indices, codes)`` of its labeled rows.

    Notes
    -----
    n_b(n_b + 1)/2 block-pair tasks for n_b row blocks, computed together: every block is
    read once and shared by its pairs (one pass), and the distance work is n²p instead of
    2n²p. Memory per task: two blocks, one distance tile and O(b k); each block stays in
    memory until its pairs are done (O(n p) in all: the exact mode is for moderate n).
    """
    starts = np.concatenate([[0], np.cumsum(X.chunks[0])[:-1]]).astype(int).tolist()
    xs, cs = X.to_delayed().ravel(), codes.to_delayed().ravel()
    rows_of = dask.delayed(labeled_rows, pure=True, nout=3)
    pair = dask.delayed(kneighbors_pair, pure=True, nout=2)
    block = dask.delayed(kneighbors_block, pure=True)
    n_b, k = len(xs), n_neighbors
    partials: list[list] = [[] for _ in range(n_b)]
    labeled = [rows_of(xs[i], cs[i], starts[i]) for i in range(n_b)]
    for i, (rows, index, _) in enumerate(labeled):
        kwargs = {"candidates": rows, "candidate_index": index, "n_neighbors": k}
        partials[i].append(block(xs[i], cs[i], row_start=starts[i], **kwargs))
        for j in range(i + 1, n_b):
            to_i, to_j = pair(
                xs[i], cs[i], xs[j], cs[j], start_i=starts[i], start_j=starts[j], n_neighbors=k
            )
            partials[i].append(to_i)
            partials[j].append(to_j)
    return [
        (tree_reduce(p, merge_neighbors), index, kept)
        for p, (_, index, kept) in zip(partials, labeled)
    ]


def gather_rows_pass(X: da.Array, index: np.ndarray, *, nonfinite: bool = False) -> Delayed:
    """The one row gather: the rows of X at the sorted global indices ``index`` (X's
    dtype, on the host), one pass over X (:func:`scalenc.math.sampling.gather_block`).

    Returns a Delayed of ``{"index", "rows"}`` in index order, with ``nonfinite`` also the
    NaN/inf count of all of X (``"nonfinite"``: CCDR's only pass over X checks X with it).
    In a checkpointed fit the pass is kept in the checkpoint like any other, so a resumed
    fit does not read the rows again.
    """
    wanted = np.asarray(index, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(np.int64)
    of = np.searchsorted(starts, wanted, side="right") - 1  # each wanted row's block
    blocks = np.unique(of)
    if nonfinite or wanted.size == 0 or blocks.size == len(X.chunks[0]):
        return reduce_rows(
            _sampling.gather_block,
            X,
            combine=_sampling.combine_gather,
            wanted=wanted,
            nonfinite=nonfinite,
        )
    # only the blocks that hold a wanted row are read: the rows' places in those blocks
    # put end to end, and the gathered indices mapped back to X's
    held = np.concatenate([[0], np.cumsum(np.asarray(X.chunks[0])[blocks])])
    local = held[np.searchsorted(blocks, of)] + (wanted - starts[of])
    part = reduce_rows(
        _sampling.gather_block,
        X.blocks[blocks.tolist()],
        combine=_sampling.combine_gather,
        wanted=local,
    )
    return dask.delayed(_global_index, pure=True)(part, local, wanted)


def _global_index(got: dict, local: np.ndarray, wanted: np.ndarray) -> dict:
    """A gather of some of X's blocks with each row's index in X (``local`` → ``wanted``,
    both sorted)."""
    return {**got, "index": wanted[np.searchsorted(local, got["index"])]}


def gather_rows(X: da.Array, index: np.ndarray) -> np.ndarray:
    """:func:`gather_rows_pass` computed: the rows of X at the sorted global indices
    ``index`` (X's dtype, on the host)."""
    (got,) = compute(gather_rows_pass(X, index))
    return got["rows"][np.argsort(got["index"], kind="stable")]
