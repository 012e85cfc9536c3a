"""Classification constrained dimensionality reduction (Raich, Costa, Damelin & Hero).

Paper: ``shared/seeds/ccdr.txt``, Sections III–V. CCDR is solved exactly on a stratified
subsample S of the training rows (the paper's eigenproblem (15) on s points instead of n)
and extended to every row by the paper's Nyström formula (20), block by block. With
several subsamples the extended embeddings are aligned by orthogonal Procrustes and
averaged. The formulas live in :mod:`scalenc.ccdr.blocks`; this module wires them into
passes and gives them the scikit-learn interface.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import dask
import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from scalenc.base.estimator import (
    fit_seed,
    fit_stage,
    fit_streaming,
    known_row_chunks,
    memory_budget,
    prepare_input,
    refuse_nonfinite,
)
from scalenc.base.validation import (
    CHECKPOINT_CONSTRAINTS,
    TABLE_CONSTRAINTS,
    Integral,
    Interval,
    Real,
    StrOptions,
    document_table_parameters,
)
from scalenc.ccdr import blocks as cb
from scalenc.ccdr import passes as ccdr_passes
from scalenc.engine import passes
from scalenc.engine.cluster import blas_single_thread, compute
from scalenc.engine.memory import format_bytes
from scalenc.exceptions import InputError, MemoryBudgetError
from scalenc.io.inputs import check_xy
from scalenc.io.labels import encode_labels
from scalenc.math import sampling as _sampling

__all__ = [
    "CCDR",
]


# --- the transformer -----------------------------------------------------------------------


#: The constraints of CCDR's parameters, shared by CCDRClassifier.
CCDR_CONSTRAINTS: dict = {
    "n_components": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
    "beta": [Interval(Real, 0.0, None, closed="neither")],
    "n_neighbors": [Interval(Integral, 1, None, closed="left")],
    "epsilon": [Interval(Real, 0.0, None, closed="neither"), None],
    "subsample_size": [Interval(Integral, 2, None, closed="left")],
    "n_subsamples": [Interval(Integral, 1, None, closed="left")],
    "random_state": ["random_state"],
    "memory_limit": [Interval(Integral, 1, None, closed="left"), str, None],
    "unlabeled": [Real, str, None],
    **TABLE_CONSTRAINTS,
    **CHECKPOINT_CONSTRAINTS,
    "chunk_rows": [Interval(Integral, 1, None, closed="left"), None],
    "split_every": [Interval(Integral, 2, None, closed="left"), None],
}


@document_table_parameters
class CCDR(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Classification constrained dimensionality reduction, solved on subsamples.

    On a stratified subsample S of s rows (labeled and unlabeled: ``unlabeled``, −1 by
    default, None and NaN mark an unlabeled row), CCDR builds the symmetric k-NN graph with
    heat-kernel weights
    ``w_ij = exp(−‖x_i − x_j‖²/ε)``, the (L+s)×(L+s) matrix ``G = [[0, C], [Cᵀ, βW]]``
    and solves ``L u = λ D u`` (``D = diag(G1)``, ``L = D − G``; eq. 15) for the m smallest
    non-trivial eigenvectors: their first L entries are the class centres z_k, the rest the
    embedding y_j of S. Every other row is embedded by the Nyström extension (eq. 20).
    When n ≤ ``subsample_size``, S is all rows and the result is the paper's exact CCDR.

    Parameters
    ----------
    n_components : int or "auto", default="auto"
        m, the embedding dimension. ``"auto"``: m = max(L − 1, ⌈d̂⌉ + 1), where d̂ is the
        largest per-class intrinsic dimension of the reference subsample (Levina–Bickel
        maximum likelihood, 5 neighbours, capped at p) — the paper's choice of m one above
        the classes' intrinsic dimension (Section V: 14 on satimage; the rule gives 13
        there), and at least L − 1 so that L class centres, and a linear head, have room
        to separate. Capped at the number of non-trivial eigenvectors the subsample's
        graph has, so small data never fails. The value used is ``n_components_``.
    beta : float > 0, default=0.5
        β, weight of the graph (geometry) term against the class-centre term (eq. 13).
    n_neighbors : int, default=4
        k of the k-NN graph, and of the Nyström sums over S.
    epsilon : float > 0 or None, default=None
        ε, the heat-kernel scale. None: the mean squared distance of the k-NN pairs of S,
        so that a typical edge weighs about e⁻¹ (per subsample, in ``epsilon_``).
    subsample_size : int, default=10000
        s, the rows of each subsample (all rows when n ≤ s). The solve on the client
        costs O(s²p) for the graph and a sparse eigen-solve of an (L+s)-node graph
        (Connect-4, p = 42: a 3.3 s fit at s = 5 000, 11.6 s at 10 000, 75 s at
        20 000); ``transform`` costs O(s·p) per row. 10 000 since issue 36: on
        Connect-4 s = 5 000 erred 36.9 % against LDA's 33.9 % (10 000: 32.8 %), and no
        set of the defaults benchmark lost more than 0.31 point with it.
    n_subsamples : int, default=1
        B. Each subsample is solved and extended separately; the extended embeddings are
        aligned to the first by orthogonal Procrustes and averaged (see Notes). When
        n ≤ ``subsample_size`` every subsample would be all rows, so one exact solve is made.
    random_state : int, RandomState or None, default=None
        Draws the subsamples from global row indices (the same draw for any chunking).
    memory_limit : int, str or None, default=None
        Bytes the client may hold for the subsamples (an int, or a string such as
        ``"4GB"``). None: a quarter of the memory the machine has available when ``fit``
        starts. The B·s rows are gathered to the client and kept in float64 by the
        solutions (B·s·p·(8 + itemsize) bytes); ``fit`` estimates this from the draw,
        before reading X, and raises :class:`MemoryError` naming ``subsample_size`` and
        ``n_subsamples`` when it does not fit.
    unlabeled : int, float, str or None, default=-1
        The label that marks an unlabeled row, as in :mod:`sklearn.semi_supervised`: such
        rows (and rows labeled None or NaN) never enter a class statistic; they are graph
        nodes of the semi-supervised embedding. ``None`` for fully supervised data: then
        ``-1`` is an ordinary class and None/NaN labels are refused.
    {table parameters}
    chunk_rows : int or None, default=None
        Rows per block for NumPy input (None: equal blocks of at most about 64 MB, as many
        as a multiple of the cores).
    split_every : int or None, default=None
        Fan-in of the tree reductions; None: Dask's configuration ``scalenc.split-every``
        (8 unless set; :func:`scalenc.engine.reduce.fan_in`).
    {checkpoint parameter}

    Attributes
    ----------
    classes_ : ndarray of shape (L,)
    n_components_ : int
        m, the embedding dimension used (``n_components`` or the ``"auto"`` rule's).
    intrinsic_dimension_ : ndarray of shape (L,) or None
        With ``n_components="auto"``: each class's intrinsic-dimension estimate on the
        reference subsample (NaN for a class with fewer than three distinct rows there);
        None when ``n_components`` is an int.
    centers_ : ndarray of shape (L, m)
        Class centres z_k of the first (reference) subsample.
    eigenvalues_ : ndarray of shape (m,)
        λ_2 … λ_{m+1} of the reference subsample.
    embedding_ : ndarray of shape (s, m)
        The reference subsample's embedding y_j (rows in ``subsample_indices_`` order).
    subsample_indices_ : ndarray of shape (s,)
        Global row indices of the reference subsample.
    epsilon_ : float
        ε used for the reference subsample.
    rotations_ : ndarray of shape (B, m, m)
        The Procrustes rotation of each subsample onto the reference (identity first).
    solutions_ : list of CCDRSolution
        Everything each subsample's Nyström extension needs.
    n_features_in_ : int
    n_passes_ : int
        Passes over X made by ``fit`` (1: the subsample rows are gathered and X is
        checked for NaN/inf in the same read). The labels are read three times more
        (classes, stratum counts per block, the draw), which costs no read of X.
    stage_times_ : dict
        Wall-clock seconds of the fit stages: ``draw`` (the subsamples drawn from the
        labels), ``gather`` (the pass over X that gathers their rows) and ``solve`` (the
        k-NN graph and eigenproblem of each subsample, and their alignment).

    Notes
    -----
    *Memory.* Client: O(B·s·(p + m)) for the subsamples and a sparse graph of O(s·k)
    entries; nothing n-sized. Per task: one row block plus a (batch × s) distance matrix.
    ``transform`` is one lazy block map over X (NumPy in → NumPy out, Dask in → lazy Dask
    out), O(b·s·p) time per block of b rows.

    *Several subsamples.* Problem (14) is invariant under Z → RZ for any orthogonal R (both
    the cost tr(ZLZᵀ) and the constraint ZDZᵀ = I are), so each subsample's solution is
    determined only up to such a rotation (and sign, and mixing within near-repeated
    eigenvalues, which differ between subsamples). Rotating subsample b by the orthogonal
    R_b that best maps its class centres — and its Nyström images of the reference
    subsample's rows, which pin the directions the L centres leave free when L ≤ m — onto
    the reference's is therefore a choice among equally optimal solutions, not a
    distortion; all subsamples have s rows, so their scales agree and no scaling is fitted.
    The aligned maps x ↦ f_b(x, c) R_b estimate the same function, and their average has
    a smaller variance over the draw of the subsamples.

    Examples
    --------
    >>> from sklearn.datasets import load_wine
    >>> from sklearn.preprocessing import StandardScaler
    >>> from scalenc import CCDR
    >>> X, y = load_wine(return_X_y=True)
    >>> X = StandardScaler().fit_transform(X)
    >>> ccdr = CCDR(n_components=2, n_neighbors=10, random_state=0).fit(X, y)
    >>> ccdr.transform(X).shape, ccdr.centers_.shape, ccdr.n_passes_
    ((178, 2), (3, 2), 1)

    Unlabeled rows (``-1``) take part in the graph but in no class term:

    >>> y_semi = y.copy()
    >>> y_semi[::2] = -1
    >>> CCDR(n_components=2, n_neighbors=10, random_state=0).fit(X, y_semi).classes_
    array([0, 1, 2])
    """

    _parameter_constraints: dict = dict(CCDR_CONSTRAINTS)

    @property
    def _n_features_out(self) -> int:
        """Columns of ``transform`` (for ``get_feature_names_out``: ccdr0, ccdr1, …)."""
        return self.eigenvalues_.size

    def __init__(
        self,
        n_components="auto",
        *,
        beta=0.5,
        n_neighbors=4,
        epsilon=None,
        subsample_size=10000,
        n_subsamples=1,
        random_state=None,
        memory_limit=None,
        unlabeled=-1,
        categorical="onehot",
        handle_unknown="error",
        handle_missing="error",
        chunk_rows=None,
        split_every=None,
        checkpoint=None,
    ):
        self.n_components = n_components
        self.beta = beta
        self.n_neighbors = n_neighbors
        self.epsilon = epsilon
        self.subsample_size = subsample_size
        self.n_subsamples = n_subsamples
        self.random_state = random_state
        self.memory_limit = memory_limit
        self.unlabeled = unlabeled
        self.categorical = categorical
        self.handle_unknown = handle_unknown
        self.handle_missing = handle_missing
        self.chunk_rows = chunk_rows
        self.split_every = split_every
        self.checkpoint = checkpoint

    # --- fit --------------------------------------------------------------------------

    def fit(self, X, y):
        """Solve CCDR on the subsample(s) of (X, y).

        Parameters
        ----------
        X : array-like, Dask array or Zarr array of shape (n, p)
        y : array-like or Dask array of shape (n,); ``unlabeled`` (−1 by default), None and
            NaN mark unlabeled rows.

        Returns
        -------
        self

        Examples
        --------
        >>> from sklearn.datasets import load_wine
        >>> from sklearn.preprocessing import StandardScaler
        >>> from scalenc import CCDR
        >>> X, y = load_wine(return_X_y=True)
        >>> X = StandardScaler().fit_transform(X)
        >>> ccdr = CCDR(n_neighbors=10, random_state=0).fit(X, y)

        ``n_components="auto"`` chose m from the classes' intrinsic dimension (at least
        L − 1 = 2):

        >>> ccdr.n_components_ == ccdr.eigenvalues_.size >= 2
        True
        >>> ccdr.intrinsic_dimension_.shape
        (3,)
        """
        return fit_streaming(self, X, y)

    def _check_params(self) -> None:
        self._validate_params()

    def _fit(self, X, codes, params):
        """:func:`fit_ccdr`'s steps, whose result this keeps (:meth:`_keep`)."""
        self._keep(fit_ccdr(self, X, codes))

    def _keep(self, result: CCDRFit) -> None:
        """The fitted attributes of a :class:`CCDRFit`: its solutions and its reference
        subsample's embedding: each field as the attribute of its name and a trailing
        underscore (``solutions`` → ``solutions_``)."""
        for field in fields(result):
            setattr(self, f"{field.name}_", getattr(result, field.name))

    # --- transform ----------------------------------------------------------------------

    def _solutions_task(self):
        return dask.delayed(tuple(self.solutions_), pure=True, traverse=False)

    def transform(self, X, y=None):
        """The Nyström embedding f(x, c) of eq. (20), shape (n, m); one lazy block map over X.

        Parameters
        ----------
        X : array-like or Dask array of shape (n, p)
        y : None or labels of shape (n,), optional
            None embeds every row as unlabeled (c = 0, for new data). With labels, each
            labeled row is embedded with its class (c ≠ 0) — the paper's extension for
            labeled training data; at a subsample row it returns that row's eigenvector
            entries exactly (the consistency property after eq. 20).

        Returns
        -------
        ndarray or Dask array of shape (n, m), X's float dtype.

        Examples
        --------
        >>> import dask.array as da
        >>> import numpy as np
        >>> from sklearn.datasets import load_wine
        >>> from sklearn.preprocessing import StandardScaler
        >>> from scalenc import CCDR
        >>> X, y = load_wine(return_X_y=True)
        >>> X = StandardScaler().fit_transform(X)
        >>> ccdr = CCDR(n_components=2, n_neighbors=10, random_state=0).fit(X, y)
        >>> ccdr.transform(X).shape
        (178, 2)

        With labels, training rows are embedded with their class; at a subsample row that
        is the eigenvector entry itself (here S is all rows):

        >>> np.allclose(ccdr.transform(X, y)[ccdr.subsample_indices_], ccdr.embedding_)
        True

        Dask in, lazy Dask out:

        >>> Z = ccdr.transform(da.from_array(X, chunks=50))
        >>> type(Z).__name__, np.allclose(Z.compute(), ccdr.transform(X))
        ('Array', True)
        """
        check_is_fitted(self, "solutions_")
        Xd, is_dask = prepare_input(self, X)
        dtype = Xd.dtype
        with_codes = y is not None
        if with_codes:
            Xd = known_row_chunks(Xd)  # labels align by rows
            _, yd = check_xy(Xd, y)
            # codes ride along as a last column (exact in float32 below 2**24 classes), so
            # the block keeps X's dtype and ranks neighbours as transform(X) does
            codes = encode_labels(yd, self.classes_, self.unlabeled).astype(dtype)
            Xd = da.concatenate([Xd, codes[:, None]], axis=1).rechunk({1: -1})
        out = passes.map_rows(
            cb.transform_block,
            Xd,
            self.n_components_,
            dtype,
            solutions=self._solutions_task(),
            with_codes=with_codes,
            out_dtype=dtype,
        )
        return out if is_dask else compute(out)[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.target_tags.required = True
        return tags


# --- CCDR's steps, for CCDR and CCDRClassifier alike -------------------------------------


@dataclass(frozen=True)
class CCDRFit:
    """What CCDR's fit solves (:func:`fit_ccdr`): the aligned subsample ``solutions`` and,
    from the first (the reference), the embedding's ``n_components``, ``centers``,
    ``eigenvalues``, ``embedding`` (of the reference's rows ``subsample_indices``),
    ``intrinsic_dimension``, ``epsilon``; ``rotations`` align every subsample's to it.

    Examples
    --------
    >>> import dask.array as da
    >>> from sklearn.datasets import load_wine
    >>> from sklearn.preprocessing import StandardScaler
    >>> from scalenc import CCDR
    >>> from scalenc.ccdr.transformer import fit_ccdr
    >>> X, y = load_wine(return_X_y=True)
    >>> est = CCDR(n_neighbors=10, random_state=0)
    >>> est.classes_, est.stage_times_ = np.unique(y), {}  # as fit_streaming sets them
    >>> result = fit_ccdr(est, da.from_array(StandardScaler().fit_transform(X)), da.from_array(y))
    >>> result.centers.shape == (3, result.n_components), len(result.solutions)
    (True, 1)
    """

    solutions: list
    n_components: int
    intrinsic_dimension: np.ndarray | None
    centers: np.ndarray
    eigenvalues: np.ndarray
    embedding: np.ndarray
    subsample_indices: np.ndarray
    epsilon: float
    rotations: np.ndarray


def _result(solutions: list[cb.CCDRSolution]) -> CCDRFit:
    ref = solutions[0]
    return CCDRFit(
        solutions=solutions,
        n_components=int(ref.eigenvalues.size),
        intrinsic_dimension=ref.info.get("intrinsic_dimension"),
        centers=ref.centers,
        eigenvalues=ref.eigenvalues,
        embedding=ref.embedding,
        subsample_indices=ref.indices,
        epsilon=ref.epsilon,
        rotations=np.stack([s.rotation for s in solutions]),
    )


def fit_ccdr(est, X: da.Array, codes: da.Array) -> CCDRFit:
    """CCDR's steps on (X, codes): draw the subsamples from the labels, gather their rows
    in one pass over X, solve each (client-side) and align them.

    ``est`` is the estimator whose fit this is (:class:`CCDR` or
    :class:`~scalenc.ccdr.CCDRClassifier`): CCDR's parameters, ``classes_``, and
    ``stage_times_`` for the stages ``draw``, ``gather`` and ``solve``. Passes over X:
    one (the gather); the draws read the labels only.

    Examples
    --------
    >>> import dask.array as da
    >>> from sklearn.datasets import load_wine
    >>> from scalenc import CCDR
    >>> from scalenc.ccdr.transformer import fit_ccdr
    >>> X, y = load_wine(return_X_y=True)
    >>> est = CCDR(n_neighbors=10, subsample_size=100, random_state=0)
    >>> est.classes_, est.stage_times_ = np.unique(y), {}
    >>> result = fit_ccdr(est, da.from_array(X, chunks=60), da.from_array(y, chunks=60))
    >>> result.subsample_indices.size, sorted(est.stage_times_)
    (100, ['draw', 'gather', 'solve'])
    """
    with fit_stage(est, "draw"):
        draws = _draw_subsamples(est, codes)
    _check_memory(est, X, draws)
    with fit_stage(est, "gather"):
        rows = _gather(est, X, draws)
    with fit_stage(est, "solve"):
        return _result(_solve_all(est, draws, rows))


def _draw_subsamples(est, codes: da.Array) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stratified draws of global row indices from the labels only: [(indices, codes)]."""
    L = est.classes_.size
    (table,) = compute(ccdr_passes.stratum_counts_pass(codes, L))
    order = np.argsort(table["starts"])
    starts, per_block = table["starts"][order], table["counts"][order]
    counts = per_block.sum(axis=0)
    n = int(counts.sum())
    if est.subsample_size < L:
        raise InputError(
            f"subsample_size={est.subsample_size} is smaller than the number of classes "
            f"({L}); every class needs a labeled row in each subsample. Raise subsample_size."
        )
    rows = min(est.subsample_size, n)
    if rows <= est.n_neighbors:
        raise InputError(
            f"{type(est).__name__}'s k-NN graph joins each of its {rows} subsample rows to "
            f"its n_neighbors={est.n_neighbors} nearest others, so it needs at least "
            f"{est.n_neighbors + 1} rows; "
            + (f"X has {n}" if n <= est.subsample_size else f"subsample_size={rows}")
            + f". Give more rows, or lower n_neighbors to at most {rows - 1}."
        )
    floor = np.concatenate([[0], counts[1:] > 0])  # every class present, however rare
    take = _sampling.stratum_shares(counts, est.subsample_size, floor)
    n_draws = 1 if est.subsample_size >= n else est.n_subsamples
    rng = np.random.default_rng(fit_seed(est, "ccdr-seed", draw_from_int=True))
    ranks = tuple(tuple(_sampling.draw_ranks(counts, take, rng)) for _ in range(n_draws))
    offsets = np.vstack([np.zeros((1, L + 1), np.int64), np.cumsum(per_block, axis=0)[:-1]])
    (found,) = compute(ccdr_passes.select_rows_pass(codes, starts, offsets, ranks))
    draws = []
    for b in range(n_draws):
        order = np.argsort(found[f"s{b}"])
        draws.append((found[f"s{b}"][order], found[f"c{b}"][order]))
    return draws


def _check_memory(est, X: da.Array, draws) -> None:
    """Refuse, before X is read, subsamples the client cannot hold (see memory_limit)."""
    rows, p = sum(idx.size for idx, _ in draws), X.shape[1]
    need = rows * p * (X.dtype.itemsize + 8)  # the gathered rows + the float64 solutions
    budget, source = memory_budget(est)
    if need > budget["client"]:
        raise MemoryBudgetError(
            f"CCDR would hold {len(draws)} subsample(s) of {draws[0][0].size} rows × {p} "
            f"features on the client, about {format_bytes(need)}: more than its budget "
            f"of {format_bytes(budget['client'])} ({source}). Lower subsample_size or "
            "n_subsamples, or raise memory_limit."
        )


def _gather(est, X: da.Array, draws) -> dict:
    """One pass over X: the rows of every subsample (and a NaN/inf count of all of X)."""
    wanted = np.unique(np.concatenate([idx for idx, _ in draws]))
    (got,) = compute(passes.gather_rows_pass(X, wanted, nonfinite=True))
    refuse_nonfinite(got["nonfinite"].sum())
    order = np.argsort(got["index"])
    return {"index": got["index"][order], "rows": got["rows"][order].astype(np.float64)}


def _solve_all(est, draws, rows) -> list[cb.CCDRSolution]:
    solutions = []
    with blas_single_thread():  # client-side; one BLAS thread (see scalenc.engine.cluster)
        for idx, codes in draws:
            pos = np.searchsorted(rows["index"], idx)
            # "auto" is decided on the reference subsample; the others use its m (aligned)
            m = solutions[0].eigenvalues.size if solutions else est.n_components
            solutions.append(
                cb.solve_ccdr(
                    rows["rows"][pos],
                    codes,
                    idx,
                    est.classes_.size,
                    n_components=m,
                    beta=est.beta,
                    n_neighbors=est.n_neighbors,
                    epsilon=est.epsilon,
                )
            )
        return cb.align(solutions)
