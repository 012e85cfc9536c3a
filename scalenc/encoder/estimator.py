"""Shen's fast multi-kernel encoder classifier, streamed over row blocks.

Paper: C. Shen, "Fast and Scalable Multi-Kernel Encoder Classifier" (shared/seeds/
multi-kernel-encoder-classifier.md), Sections 2 and 3.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassifierMixin,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
)
from sklearn.utils import metadata_routing

from scalenc.base.estimator import (
    StreamingClassifierMixin,
    check_class_means,
    check_classes,
    fit_stage,
    fit_streaming,
    memory_budget,
    refuse_nonfinite,
    unlabeled_marker,
)
from scalenc.base.validation import (
    CHECKPOINT_CONSTRAINTS,
    TABLE_CONSTRAINTS,
    Integral,
    Interval,
    Real,
    StrOptions,
    document_table_parameters,
    invalid,
)
from scalenc.encoder import choice
from scalenc.encoder import passes as encoder_passes
from scalenc.encoder.blocks import (
    choose_kernel,
    linear_embedding_moments,
)
from scalenc.encoder.full import FullMethodMixin
from scalenc.encoder.graph_fit import GraphFitMixin
from scalenc.encoder.incremental import IncrementalFitMixin
from scalenc.encoder.kernels import Kernel, Linear, get_kernel
from scalenc.encoder.outputs import EncoderOutputsMixin
from scalenc.encoder.plan import (
    fit_plan,
)
from scalenc.encoder.sampled import SampledFitMixin
from scalenc.engine import checkpoint, passes
from scalenc.engine.cluster import compute, task_threads
from scalenc.engine.reads import counting_passes
from scalenc.exceptions import InputError
from scalenc.io.labels import encode_labels
from scalenc.math.labels import check_class_values, warn_marker_as_class
from scalenc.math.linalg import LDAModel, lda_from_moments

__all__ = ["EncoderClassifier"]


#: On a local scheduler, the labels of a multi-kernel fit are kept in memory (read once,
#: not once per pass) while they take at most this share of the memory budget: 2 % of a
#: 6 GB budget holds 15 M int64 labels. Each pass reading them again from a Zarr store
#: cost 0.5–1.1 reads of X on 1 M-row stores (``benchmarks/README.md``, "Roofline").
LABELS_MEMORY_SHARE = 0.02


@document_table_parameters
class EncoderClassifier(
    GraphFitMixin,
    EncoderOutputsMixin,
    IncrementalFitMixin,
    FullMethodMixin,
    SampledFitMixin,
    StreamingClassifierMixin,
    ClassifierMixin,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    BaseEstimator,
):
    """Fast multi-kernel encoder classifier (Shen), fitted in one to three passes over X.

    The class means ``U = Wᵀ X`` (K×p) are computed in one pass; every kernel's embedding
    ``Z_m = δ_m(X, U)`` (n×K) is formed block by block and reduced to its LDA sufficient
    statistics (class means and pooled within-class scatter, K×K) in a second pass; with
    several kernels, a third pass computes each kernel's training cross-entropy
    ``c_m = −Σ_i log T_m(i, y_i)`` and the kernel is chosen as in the paper: the first
    kernel is the benchmark and another replaces it only if its cross-entropy is at least
    ``min_improvement`` (30 %) smaller. By default the paper's three kernels (linear,
    euclidean, spearman) are compared; for large n the comparison starts on a fixed
    sample of rows and X is read twice (``choice_sample``).

    Parameters
    ----------
    kernels : sequence of str, Kernel or callable, default=("linear", "euclidean", "spearman")
        Kernel choices δ_m, the first the benchmark: ``"linear"``, ``"euclidean"``,
        ``"spearman"``, ``"gaussian"`` (see :mod:`scalenc.encoder.kernels`), a
        :class:`scalenc.encoder.kernels.Kernel` such as ``Gaussian(sigma=2.0)``, or a
        callable ``f(X_block, U) -> (rows, K)``. A single string is taken as one kernel;
        ``("linear",)`` is the one-pass linear fit.
    min_improvement : float in [0, 1), default=0.3
        A kernel replaces the first (benchmark) kernel only if its cross-entropy is at
        most ``(1 − min_improvement)`` times the benchmark's.
    method : {"fast", "full"}, default="fast"
        ``"fast"`` is the paper's Section 3 algorithm (kernels against U, O(nKp)).
        ``"full"`` is Section 2's intermediate algorithm ``Z = A W`` with the full n×n
        kernel matrix, computed block × block (O(n²p) time, O(chunk²) memory per task, each
        block of X held until its block pairs are done) — for small and medium n. Passes
        over X: 2 (class means, then Z's moments), 3 with several kernels (Z is computed
        again for the cross-entropy). It keeps a reference to the training X, which predict
        needs. With several kernels the same cross-entropy rule chooses among them.
    max_scatter_features : int, default=1024
        The linear kernel alone is fitted in ONE pass when p ≤ this: the p×p pooled
        within-class scatter S_w of X gives Z's class means U Uᵀ and scatter U S_w Uᵀ.
        Above it (p×p too large to hold per task), two passes are made instead.
    cache_embedding : bool or "auto", default="auto"
        With several kernels, True keeps the stacked embedding Z (n × M·K) from pass 2 for
        pass 3, so the kernels are evaluated once: written block by block to temporary
        ``.npy`` files (in Dask's ``temporary-directory``; a Z of at most 1 MiB is kept in
        memory) for local schedulers, persisted (and spilled) on the workers of a
        distributed cluster (:class:`scalenc.engine.reduce.RowCache`). False evaluates
        the kernels again in pass 3 (a third read of X) and stores nothing. ``"auto"`` chooses after
        pass 1 by measured costs: writing and reading back M·K·8 bytes per row, against
        pass 1's own time plus the kernels timed on a sample block
        (:mod:`scalenc.encoder.plan`); Z is cached when it is smaller than X or the
        kernels are expensive, computed again when it is many times larger than X (small
        p, many classes). The choice and its numbers are in ``fit_plan_``. Not used when
        the kernels are compared on a sample (``choice_sample``).
    choice_sample : int, "auto" or None, default="auto"
        With several kernels and many rows, compare them first on a fixed random sample
        of this many labeled rows, drawn in pass 1 (:mod:`scalenc.encoder.choice`, which
        states the error bound): the kernels that the sample shows the rule cannot
        choose are dropped, and passes 2 and 3 run for the others only, which the rule
        then compares with exact cross-entropies (one kernel left: pass 2 alone, for its
        statistics). ``"auto"``: 65 536 rows (at most 64 MB of X, and an eighth of what
        a block task may hold) when X has at least eight times as many; an int: that
        many whenever X has more rows; None: every kernel over every row (the paper's
        passes).
    tol : float, default=1e-7
        Rank threshold of the LDA on the standardised singular values of the embedding's
        within-class scatter (scikit-learn's ``LinearDiscriminantAnalysis(tol=...)``, whose
        default is 1e-4). The embedding's K columns can be nearly collinear — in the paper's
        transformed simulations the discriminative directions have standardised singular
        values of about 7e-6 beside 2.2 — and a 1e-4 threshold discards exactly them (73 %
        error instead of 11 % at n = 500). 1e-7 sits just above float64's numerical floor
        for these statistics (≈3e-8) and, like the paper's MATLAB LDA, keeps them.
    unlabeled : int, float, str or None, default=-1
        The label that marks an unlabeled row, as in :mod:`sklearn.semi_supervised`: such
        rows (and rows labeled None or NaN) never enter a class statistic. ``None``
        for fully supervised data: then ``-1`` is an ordinary class and None/NaN labels are
        refused.
    graph_fusion : {"concat", "choose"}, default="concat"
        With a graph (``fit(X, y, graph=edges)``), how it joins the feature kernels:
        ``"concat"`` fits the LDA on each feature kernel's embedding beside the graph's,
        [δ_m(X, U) | A W] (GraphEmd's fusion of a graph with node attributes; the rule
        above chooses among the kernels when there are several); ``"choose"`` makes the
        graph embedding A W one more candidate beside the feature kernels, chosen by the
        same cross-entropy rule (the first feature kernel stays the benchmark). Unused
        without a graph or without features.
    graph_normalize : bool, default=True
        Scale each row of the graph embedding to unit norm (GraphEmd's ``Normalize``, its
        Python port's ``Correlation``); a node without labeled neighbours keeps a zero row.
    graph_laplacian : bool, default=False
        Embed D^−½ A D^−½ instead of A (GraphEmd's ``Laplacian``), d the weighted degrees;
        one more pass over the edges.
    graph_self_loops : bool, default=False
        Embed A + I (GraphEmd's ``DiagA``, which its code turns on by default). Off here:
        a labeled node's self-loop puts its own label into its embedding, which the LDA
        fitted on labeled nodes then trusts and the nodes it predicts lack (5-fold on
        citeseer, features and graph: 74.9 % without, 69.4 % with).
    graph_directed : bool, default=False
        Read each edge (a, b) as a → b and embed [A W | Aᵀ W], the sender and receiver
        embeddings (2K columns; GraphEmd's ``Directed``). False counts every edge in both
        directions.
    {table parameters}
    chunk_rows : int or None, default=None
        Rows per block for NumPy input (None: equal blocks of at most about 64 MB, as many
        as a multiple of the cores).
        Dask input keeps its chunks unless this is set.
    split_every : int or None, default=None
        Fan-in of the tree reductions; None: Dask's configuration ``scalenc.split-every``
        (8 unless set; :func:`scalenc.engine.reduce.fan_in`).
    {checkpoint parameter}

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
    class_counts_ : ndarray of shape (K,)
        Labeled training rows per class, n_k (eq. 1).
    class_means_ : ndarray of shape (K, p)
        U = Wᵀ X, the class means.
    kernels_ : list of Kernel
        The kernels tried, with data-dependent defaults (Gaussian σ) resolved.
    kernel_ : Kernel
        The chosen kernel δ_{m*}.
    kernel_index_ : int
    cross_entropy_ : ndarray of shape (n_kernels,)
        c_m per kernel: the cross-entropy of its LDA over the labeled training rows, of
        the kind ``cross_entropy_kind_`` says. NaN when only one kernel was given (no
        choice to make, so no pass is spent on it).
    cross_entropy_kind_ : ndarray of str, shape (n_kernels,)
        What each c_m is: ``"exact"`` (computed over every labeled row), ``"interval"``
        (the middle of ``cross_entropy_bounds_``: with a sample, a kernel pass 2 bounded
        and no pass then computed exactly), ``"sample"`` (the sample's estimate, scaled
        to every labeled row: the kernels it dropped, and the one it left where it left
        one), ``"running"`` (after ``partial_fit``: each batch's c_m under the LDA of
        its update, summed) or ``"none"`` (not computed, NaN).
    cross_entropy_bounds_ : ndarray of shape (n_kernels, 2)
        An interval [lower, upper] that holds the exact c_m: c_m itself at both ends
        where it is exact, pass 2's bounds where ``"interval"``, NaN where none is known.
    coef_, intercept_ : ndarray
        The LDA on Z of the chosen kernel, as scikit-learn's (binary: one row).
    lda_models_ : list of LDAModel
        The LDA fitted for every kernel (on the sample, for a kernel the sample dropped).
    embedding_means_ : ndarray of shape (K, K)
        Class means of Z for the chosen kernel (with a graph: of the chosen embedding).
    embeddings_ : list of str
        With a graph: the embeddings compared, by name (``"linear"``, ``"graph"``,
        ``"linear+graph"``, …), in the order of ``cross_entropy_`` and ``lda_models_``.
    embedding_ : str
        With a graph: the chosen one. ``kernel_`` is then its feature kernel, None for
        the graph alone, and ``kernel_index_`` its index in ``embeddings_``.
    n_edge_passes_ : int
        With a graph: the passes over the edge list the fit made, counted by the engine
        where the edges are read, as ``n_passes_`` (one per computation of the graph
        embedding: its moments, then with several candidates their cross-entropies;
        ``graph_laplacian``'s degrees are summed in the same pass).
    n_features_in_ : int
    n_passes_ : int
        Passes over X that the last ``fit``/``partial_fit`` made (with several kernels and
        ``cache_embedding``, the cross-entropy pass reads the cached Z, not X).
    n_cached_passes_ : int
        Passes over the cached Z (plan ``"cache"``), counted by the engine as
        ``n_passes_`` is; 0 for a fit that cached none.
    n_updates_ : int
        ``partial_fit`` updates since ``fit`` or since the first ``partial_fit`` (0 then).
    stage_times_ : dict
        Wall-clock seconds of the last ``fit``'s passes: ``class_means`` (pass 1),
        ``sample`` (the kernels compared on the sample, in memory), ``embedding`` (pass 2:
        the kernels and Z's class moments) and ``cross_entropy`` (the pass that chooses
        the kernel), those that were made.
    fit_plan_ : dict
        How the last ``fit`` ran: ``name`` — ``"one_pass"`` (linear kernel from pass 1's
        scatter), ``"two_pass"`` (one kernel), ``"cache"`` or ``"recompute"`` (several
        kernels, Z cached or computed again for the cross-entropy), ``"sample"`` (several
        kernels compared on a sample first), ``"full"`` (Section 2) — and
        ``passes_over_X``. ``"sample"`` also gives ``sample_rows``, the kernels
        ``dropped_by_sample``, those ``decided_by_bounds`` (each with the bounds on its
        exact cross-entropy that pass 2 gave, which told them apart) and those
        ``compared_over_every_row`` (exact cross-entropies, pass 3; empty when one
        kernel was left); a sample that cannot be used (a class with fewer than 10
        sampled rows) leaves the cache-or-recompute plan with the reason in ``sample``.
        With ``cache_embedding="auto"`` the cache-or-recompute plan also gives the measured
        numbers that chose: ``read_s`` (pass 1's seconds), ``kernel_s_per_row``,
        ``cache_s_per_row`` and the two plans' estimated seconds ``cache_s`` and
        ``recompute_s``; or, when the cache would not fit (a block of Z more than half of
        what a task may hold, or all of Z more than half of the workers' memory or of
        the temporary directory's free disk), ``"recompute"`` with the reason in
        ``memory``.

    Notes
    -----
    Passes over X: 1 (linear kernel alone, p ≤ ``max_scatter_features``), 2 (one kernel),
    2 plus one over the cached Z (several kernels, plan ``"cache"``), 3 (several kernels,
    plan ``"recompute"``: ``cache_embedding=False``, or ``"auto"`` when Z would cost more
    to store and read back than X to read again); with a sample (several kernels, large
    n: plan ``"sample"``) 2 when the sample, or pass 2's bounds on the exact
    cross-entropies, tell the kernels apart, 3 when they cannot.
    ``fit_plan_["passes_over_X"]`` equals ``n_passes_``. The sample spares the kernels
    it drops their evaluation on every row: on the papers' simulated stores it drops
    Spearman, whose ranks cost more than a read of X (``benchmarks/README.md``, "The
    default encoder at 8 M rows").
    Memory per task: one row block plus O(Kp) (O(p²) in the one-pass mode), and with
    several kernels row tiles of about 8 MB of the embedding (plus one block of Z, M·K·8
    bytes a row, when it is cached); on the client O(Kp + MK²), and with a sample its
    rows (at most 64 MB with ``"auto"``) and their embedding. Nothing n-sized is brought
    to the client.
    ``predict``, ``predict_proba``, ``decision_function`` and ``transform`` are one lazy
    block map over X: NumPy in gives NumPy out, Dask in gives a lazy Dask array out.

    Examples
    --------
    >>> from sklearn.datasets import load_wine
    >>> from scalenc import EncoderClassifier
    >>> X, y = load_wine(return_X_y=True)
    >>> model = EncoderClassifier().fit(X, y)  # linear, euclidean and spearman
    >>> model.kernel_.name, model.n_passes_
    ('linear', 2)
    >>> model.cross_entropy_.round(1), model.cross_entropy_kind_
    (array([ 38.5, 120.6,  81.2]), array(['exact', 'exact', 'exact'], dtype='<U8'))
    >>> model.predict(X[:3])
    array([0, 0, 0])
    >>> model.transform(X[:2]).shape  # the encoder embedding Z, one column per class
    (2, 3)

    The linear kernel alone is fitted in one pass over X:

    >>> EncoderClassifier(kernels=("linear",)).fit(X, y).n_passes_
    1

    Dask in gives lazy Dask out, computed block by block:

    >>> import dask.array as da
    >>> model.predict(da.from_array(X, chunks=50))
    dask.array<..., shape=(178,), dtype=int64, chunksize=(50,), chunktype=numpy.ndarray>
    """

    # ``graph`` is an input beside X, not metadata for a meta-estimator to route: no
    # ``set_{method}_request`` methods for it (scikit-learn's metadata routing)
    __metadata_request__fit = {"graph": metadata_routing.UNUSED}
    __metadata_request__transform = {"graph": metadata_routing.UNUSED}
    __metadata_request__decision_function = {"graph": metadata_routing.UNUSED}
    __metadata_request__predict = {"graph": metadata_routing.UNUSED}
    __metadata_request__predict_proba = {"graph": metadata_routing.UNUSED}
    __metadata_request__predict_log_proba = {"graph": metadata_routing.UNUSED}
    __metadata_request__score = {"graph": metadata_routing.UNUSED}

    def __init__(
        self,
        kernels=("linear", "euclidean", "spearman"),
        *,
        min_improvement=0.3,
        method="fast",
        max_scatter_features=1024,
        cache_embedding="auto",
        choice_sample="auto",
        tol=1e-7,
        unlabeled=-1,
        graph_fusion="concat",
        graph_normalize=True,
        graph_laplacian=False,
        graph_self_loops=False,
        graph_directed=False,
        categorical="onehot",
        handle_unknown="error",
        handle_missing="error",
        chunk_rows=None,
        split_every=None,
        checkpoint=None,
    ):
        self.kernels = kernels
        self.min_improvement = min_improvement
        self.method = method
        self.max_scatter_features = max_scatter_features
        self.cache_embedding = cache_embedding
        self.choice_sample = choice_sample
        self.tol = tol
        self.unlabeled = unlabeled
        self.graph_fusion = graph_fusion
        self.graph_normalize = graph_normalize
        self.graph_laplacian = graph_laplacian
        self.graph_self_loops = graph_self_loops
        self.graph_directed = graph_directed
        self.categorical = categorical
        self.handle_unknown = handle_unknown
        self.handle_missing = handle_missing
        self.chunk_rows = chunk_rows
        self.split_every = split_every
        self.checkpoint = checkpoint

    # --- parameters ---------------------------------------------------------------

    @property
    def _n_features_out(self) -> int:
        """Columns of ``transform``, one per class (``get_feature_names_out``); with a
        graph, the chosen embedding's."""
        return self._graph_width if self._fitted_with_graph else self.classes_.size

    _parameter_constraints: dict = {
        "kernels": "no_validation",  # names, Kernel objects or callables: see _check_params
        "min_improvement": [Interval(Real, 0.0, 1.0, closed="left")],
        "method": [StrOptions({"fast", "full"})],
        "max_scatter_features": [Interval(Integral, 0, None, closed="left")],
        "cache_embedding": ["boolean", StrOptions({"auto"})],
        "choice_sample": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
        "tol": [Interval(Real, 0.0, None, closed="left")],
        "unlabeled": [Real, str, None],
        "graph_fusion": [StrOptions({"concat", "choose"})],
        "graph_normalize": ["boolean"],
        "graph_laplacian": ["boolean"],
        "graph_self_loops": ["boolean"],
        "graph_directed": ["boolean"],
        **TABLE_CONSTRAINTS,
        **CHECKPOINT_CONSTRAINTS,
        "chunk_rows": [Interval(Integral, 1, None, closed="left"), None],
        "split_every": [Interval(Integral, 2, None, closed="left"), None],
    }

    def _check_params(self) -> list[Kernel]:
        self._validate_params()
        specs = (
            [self.kernels]
            if isinstance(self.kernels, (str, Kernel)) or callable(self.kernels)
            else self.kernels
        )
        try:
            specs = list(specs)
        except TypeError:
            specs = [specs]
        if not specs:
            expectation = "a non-empty sequence of kernel names, Kernel objects or callables"
            raise invalid(self, "kernels", expectation, [])
        return [get_kernel(spec) for spec in specs]

    # --- fitting ------------------------------------------------------------------

    def fit(self, X, y, graph=None):
        """Fit from (X, y); unlabeled rows (see ``unlabeled``) are ignored.

        Parameters
        ----------
        X : array-like, Dask array or Zarr array of shape (n, p), or None
            None with a graph: the graph embedding alone.
        y : array-like or Dask array of shape (n,)
        graph : edge list, optional
            The nodes' graph, node i being row i of X and y: an (s, 2) or (s, 3) array
            (source, target[, weight]), a SciPy sparse adjacency, a DataFrame or Parquet
            dataset, or an :class:`~scalenc.io.edges.EdgeList` from
            :func:`~scalenc.io.edges.as_edge_list` (which names a table's columns, and
            with ``nodes=`` the node ids when they are not the rows 0 … n−1). Its
            embedding A W (:mod:`scalenc.encoder.graph`: one pass over the edges, by node
            blocks) joins the feature kernels as ``graph_fusion`` says. The outputs then
            take the graph too: ``predict(X, graph=edges)`` predicts every node. A node
            with no labeled neighbour has a zero graph embedding: under the graph alone
            its outputs are the class priors (predicted: the most frequent class), and a
            :class:`~scalenc.exceptions.NoLabeledNeighbourWarning` counts such nodes
            (at ``fit``, and at an output computed in memory).

        Returns
        -------
        self

        Examples
        --------
        >>> from sklearn.datasets import load_iris
        >>> from scalenc import EncoderClassifier
        >>> X, y = load_iris(return_X_y=True)
        >>> model = EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y)
        >>> model.classes_, model.kernel_.name
        (array([0, 1, 2]), 'linear')
        >>> model.class_means_.shape  # U, one row per class
        (3, 4)

        Rows labeled ``-1`` are left out of every class statistic:

        >>> y_half = y.copy()
        >>> y_half[::2] = -1
        >>> EncoderClassifier().fit(X, y_half).class_counts_
        array([25, 25, 25])

        A graph of the rows (here each row joined to its nearest neighbour), alone or
        beside the features:

        >>> from sklearn.neighbors import NearestNeighbors
        >>> nearest = NearestNeighbors(n_neighbors=2).fit(X).kneighbors(X)[1]
        >>> edges = nearest  # row i, its neighbour: an (n, 2) edge list
        >>> graph_only = EncoderClassifier().fit(None, y, graph=edges)
        >>> graph_only.embedding_, graph_only.transform(None, graph=edges).shape
        ('graph', (150, 3))
        >>> both = EncoderClassifier(kernels=("linear",)).fit(X, y, graph=edges)
        >>> both.embedding_, both.predict(X, graph=edges)[[0, 50, 100]]
        ('linear+graph', array([0, 1, 2]))
        """
        if graph is None:
            self._forget_graph()
            return fit_streaming(self, X, y, find_classes=False)
        self._check_graph_params()
        return fit_streaming(self, X, y, find_classes=False, labels=self._node_labels, graph=graph)

    def _fit(self, X, y, kernels, graph=None):
        """Pass 1 (the class list and class moments together), then the embedding's
        statistics and the kernel choice, or Section 2's full method."""
        if graph is not None:
            self._fit_graph(X, y, kernels, graph)
            return
        self.n_cached_passes_ = 0
        full = self.method == "full"
        one_pass = not full and self._one_pass(kernels, X.shape[1])
        sample = None
        if not full and len(kernels) > 1:  # the kernel choice on a sample (large n)
            sample = choice.sample_plan(
                self.choice_sample,
                X.shape[0],
                X.shape[1],
                X.dtype.itemsize,
                task_bytes=self._task_bytes,
            )
        if not one_pass:  # the labels read once for every pass (in memory if small)
            local = LABELS_MEMORY_SHARE * memory_budget(self)[0]["client"]
            y = passes.keep_on_workers(y, local_bytes=local)
        with fit_stage(self, "class_means"):
            # the class list comes out of the same pass: no separate read of y first
            (first,) = compute(
                passes.labeled_moments_pass(
                    X,
                    y,
                    scatter=one_pass,
                    sqnorm=full or any(k.needs_sqnorm for k in kernels),
                    marker=self.unlabeled,
                    sample=sample,
                )
            )
        self._take_classes(first)
        moments = self._check_moments(first["moments"], X.dtype)
        codes = encode_labels(y, self.classes_, unlabeled_marker(self))
        if full:
            self._fit_full(X, codes, kernels, moments)
            return
        z_moments = self._set_class_stats(moments, kernels, one_pass)
        if sample is not None:
            z_moments = self._fit_on_sample(X, codes, first["sample"])
        else:
            z_moments = self._finish_fit(X, codes, z_moments)
        self._keep_running_totals(moments, kernels, one_pass, z_moments)

    def _task_bytes(self) -> int:
        """What one block task of a pass may hold (the workers' budget over their threads)."""
        return memory_budget(self)[0]["worker"] // task_threads()[0]

    def _keep_running_totals(self, moments, kernels, one_pass, z_moments):
        """Keep fit's sums so that partial_fit can extend them with new batches."""
        self._kernel_specs = kernels
        self._one_pass_mode = one_pass
        self._x_moments_total = moments
        self._z_totals = None if one_pass else list(z_moments)
        finite = ~np.isnan(self.cross_entropy_)
        self._loglik_total = -self.cross_entropy_ if finite.all() else 0.0

    def _one_pass(self, kernels, n_features) -> bool:
        return (
            len(kernels) == 1
            and isinstance(kernels[0], Linear)
            and n_features <= self.max_scatter_features
        )

    def _moments_pass(self, X, codes, kernels, *, scatter):
        (moments,) = compute(
            passes.class_moments_pass(
                X,
                codes,
                self.classes_.size,
                scatter=scatter,
                sqnorm=any(k.needs_sqnorm for k in kernels),
            )
        )
        return self._check_moments(moments, X.dtype)

    def _check_moments(self, moments, dtype):
        """Refuse NaN/inf found by the pass over X, and class means too large to square."""
        refuse_nonfinite(moments["nonfinite"])
        check_class_means(moments["mean"], dtype)
        return moments

    def _set_class_stats(self, moments, kernels, one_pass, *, resolve=True):
        """U and the class counts from X's class moments; returns the embedding's
        statistics where they need no pass (the linear kernel in one-pass mode), else None."""
        self.class_counts_ = moments["n"].astype(np.int64)
        self.class_means_ = moments["mean"]
        if resolve:
            self.kernels_ = [k.resolve(moments) for k in kernels]
        return [linear_embedding_moments(moments)] if one_pass else None

    def _finish_fit(self, X, codes, z_moments):
        """Passes 2 and 3 as needed, then the LDA models and the kernel choice; returns the
        embedding's class statistics, one per kernel."""
        self._require_all_classes()
        if z_moments is None:
            z_moments, self.lda_models_, cross_entropy = self._every_row(X, codes, self.kernels_)
            self._set_cross_entropy(cross_entropy)
        else:  # the one-pass linear fit: nothing more to read
            self.fit_plan_ = fit_plan(
                X, self.kernels_, self.class_means_, one_pass=True, cache_embedding=None,
                read_seconds=None, budget=None,
            )  # fmt: skip
            self.lda_models_ = [self._lda(m) for m in z_moments]
            self._set_cross_entropy()
        self._select_kernel(z_moments)
        return z_moments

    def _every_row(self, X, codes, kernels):
        """The embedding statistics, LDA models and (several kernels; else None)
        cross-entropies of ``kernels`` over every row: pass 2, then a pass over the
        cached Z or a third over X, by the plan in ``fit_plan_``."""
        U = self.class_means_
        # measured rates decide the plan: a resumed fit keeps its first run's
        self.fit_plan_ = checkpoint.remembered(
            "encoder-fit-plan",
            lambda: fit_plan(
                X,
                kernels,
                U,
                one_pass=False,
                cache_embedding=self.cache_embedding,
                read_seconds=self.stage_times_["class_means"],
                budget=lambda: memory_budget(self)[0],
            ),
        )
        if self.fit_plan_["name"] == "cache":
            return self._fit_kernels_cached(X, codes, kernels)
        z_moments, models, _ = self._embedding_statistics(X, codes, kernels)
        cross_entropy = None  # one kernel: no choice, no pass spent on c_m
        if len(kernels) > 1:
            cross_entropy = self._cross_entropies(X, codes, kernels, models)
        return z_moments, models, cross_entropy

    def _embedding_statistics(self, X, codes, kernels, models=None, whiten=None):
        """Pass 2: the embedding's class statistics of ``kernels`` over every row, their
        LDA models and, given ``models`` (LDAs fitted elsewhere), each kernel's c_m over
        every row under them with its gradient
        (:func:`scalenc.encoder.blocks.stacked_loss_gradients`; else None)."""
        with fit_stage(self, "embedding"):
            (found,) = compute(
                encoder_passes.embedding_moments_pass(
                    X,
                    codes,
                    kernels,
                    self.class_means_,
                    models=models,
                    whiten=whiten,
                )
            )
        z_moments, loss = (found, None) if models is None else (found["moments"], found["loss"])
        return list(z_moments), [self._lda(m) for m in z_moments], loss

    def _cross_entropies(self, X, codes, kernels, models) -> np.ndarray:
        """The pass that computes each of ``kernels``' cross-entropy c_m over every row."""
        with fit_stage(self, "cross_entropy"):
            (loglik,) = compute(
                encoder_passes.cross_entropy_pass(X, codes, kernels, self.class_means_, models)
            )
        return -np.array([float(v) for v in loglik])

    def _fit_kernels_cached(self, X, codes, kernels):
        """Passes 2 and 3 with Z = [δ_1(X,U) | … | δ_M(X,U)] computed once and cached;
        returns the embedding statistics, LDA models and cross-entropies of ``kernels``."""
        K, M = self.classes_.size, len(kernels)
        with passes.RowCache(encoder_passes.embed_all(X, kernels, self.class_means_)) as cache:
            with fit_stage(self, "embedding"):
                (z_moments,) = compute(
                    encoder_passes.stacked_moments_pass(cache.first_pass_input(), codes, M, K)
                )
            models = [self._lda(m) for m in z_moments]
            cached = cache.cached()
            with fit_stage(self, "cross_entropy"), counting_passes(cached) as count:
                (loglik,) = compute(
                    encoder_passes.stacked_cross_entropy_pass(cached, codes, models, K)
                )
        self.n_cached_passes_ = count.passes  # reads of the cache, counted by the engine
        return list(z_moments), models, -np.array([float(v) for v in loglik])

    def _lda(self, z_moments) -> LDAModel:
        return lda_from_moments(
            z_moments["n"], z_moments["mean"], z_moments["scatter"], tol=self.tol
        )

    def _set_cross_entropy(self, values=None, kind="exact", at=None, upper=None):
        """Record c_m of the candidates ``at`` as ``values`` of ``kind``
        (``cross_entropy_kind_``; ``"interval"``: bounds ``values`` to ``upper``, c_m
        their middle), with its bounds. Without ``at`` every candidate's record starts
        afresh (``values`` None: none computed)."""
        if at is None:
            n = len(self.lda_models_ if values is None else values)
            self.cross_entropy_ = np.full(n, np.nan)
            self.cross_entropy_kind_ = np.full(n, "none", dtype="<U8")
            self.cross_entropy_bounds_ = np.full((n, 2), np.nan)
            at = range(n)
        if values is None:
            return
        at, lower = list(at), np.asarray(values, dtype=float)
        upper = lower if upper is None else np.asarray(upper, dtype=float)
        self.cross_entropy_[at] = (lower + upper) / 2 if kind == "interval" else lower
        self.cross_entropy_kind_[at] = kind
        if kind in ("exact", "interval"):  # the interval that holds the exact c_m
            self.cross_entropy_bounds_[at] = np.stack([lower, upper], axis=-1)

    def _select_kernel(self, z_moments, index=None, kernels=None):
        """The kernel by the paper's cross-entropy rule (or ``index``, the rule's choice
        made already), with its LDA model and Z's means: the one place a fit chooses.
        ``kernels``: the candidates' feature kernels (default ``kernels_``; a graph fit's
        have None for the graph alone)."""
        if index is None:
            index = choose_kernel(self.cross_entropy_, self.min_improvement)
        self.kernel_index_ = index
        self.kernel_ = (self.kernels_ if kernels is None else kernels)[index]
        model = self.lda_models_[index]
        self.coef_ = model.coef
        self.intercept_ = model.intercept
        self.embedding_means_ = z_moments[index]["mean"]

    def _require_all_classes(self):
        empty = self.class_counts_ == 0
        if empty.any():
            names = self.classes_[empty].tolist()
            raise InputError(
                f"Class(es) {names} have no labeled rows; the encoder needs at least one labeled "
                "row per class. Feed rows of those classes, or leave them out of `classes`."
            )

    # --- Section 2: the intermediate algorithm ----------------------------------------

    def _take_classes(self, first: dict) -> None:
        """The class list of pass 1's result (``labeled_moments_pass``), checked, with a
        warning where the unlabeled marker is a class of y: every encoder fit's pass 1."""
        self.classes_ = first["classes"]
        check_class_values(self.classes_)
        check_classes(self.classes_, type(self).__name__, self.unlabeled)
        warn_marker_as_class(
            self.classes_, first["moments"]["n"], first["marker_rows"], self.unlabeled
        )
