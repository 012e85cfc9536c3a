"""The encoder with a graph: the graph embedding as one more kernel beside the feature
kernels, or fused with them, and its outputs for every node (a mixin of
:class:`~scalenc.encoder.estimator.EncoderClassifier`).

Shen's encoder is graph encoder embedding on a kernel matrix, Z = A W; with the graph
itself (:mod:`scalenc.encoder.graph`) Z_G = A W is one more embedding of the nodes. The
candidates are, with ``graph_fusion="choose"``, each feature kernel's δ_m(X, U) and Z_G,
compared by the paper's cross-entropy rule (the first feature kernel the benchmark); with
``"concat"`` (GraphEmd's fusion of a graph with node attributes), each feature kernel's
[δ_m(X, U) | Z_G], compared by the same rule when there are several; and Z_G alone when
there are no features (``X=None``). The LDA of each candidate is fitted from its class
moments, as every encoder fit is.
"""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pandas as pd

from scalenc.base.estimator import (
    check_classes,
    fit_stage,
    prepare_input,
    unlabeled_marker,
)
from scalenc.encoder import passes as encoder_passes
from scalenc.encoder.blocks import (
    apply_to_embedding,
    apply_to_graph_alone,
    decision_block,
    embed_block,
    predict_block,
    proba_block,
)
from scalenc.encoder.graph import GraphOptions, code_dtype, embedding_width, graph_embedding
from scalenc.engine import passes
from scalenc.engine.cluster import compute
from scalenc.engine.reads import counting_passes
from scalenc.engine.reduce import split_every_set
from scalenc.exceptions import InputError, NoLabeledNeighbourWarning
from scalenc.io.edges import EdgeList, as_edge_list
from scalenc.io.labels import as_dask_labels, encode_labels
from scalenc.io.tables import is_dask_frame
from scalenc.math.labels import check_class_values, unlabeled_mask, warn_marker_as_class

__all__ = ["GraphFitMixin", "GRAPH_NODE_ROWS"]

#: Nodes per block of the graph embedding when the nodes come without features and y is
#: not a Dask array (Z_G's node blocks are y's row blocks): 2**18 rows of K float64
#: columns are 20 MB for 10 classes.
GRAPH_NODE_ROWS = 2**18

#: The attributes a fit with a graph sets beyond those of every fit.
_GRAPH_ATTRIBUTES = ("embeddings_", "embedding_", "n_edge_passes_", "_graph_codes", "node_ids_")


def _lazy_graph(graph) -> bool:
    """Whether an edge list is read lazily (then outputs computed from it stay lazy)."""
    in_memory = isinstance(graph, (np.ndarray, list, tuple)) or (
        type(graph).__module__.startswith(("scipy.sparse", "pandas"))
    )
    return not in_memory


def _same_ids(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two id arrays are the same ids in the same order."""
    return a is b or (a.shape == b.shape and a.dtype.kind == b.dtype.kind and np.array_equal(a, b))


class GraphFitMixin:
    """``fit(X, y, graph=...)`` and the outputs with ``graph=`` of the encoder."""

    def _graph_options(self) -> GraphOptions:
        return GraphOptions(
            laplacian=self.graph_laplacian,
            normalize=self.graph_normalize,
            self_loops=self.graph_self_loops,
            directed=self.graph_directed,
        )

    def _forget_graph(self):
        """A fit without a graph leaves nothing of an earlier fit's graph."""
        for name in _GRAPH_ATTRIBUTES:
            self.__dict__.pop(name, None)

    def _check_graph_params(self):
        if self.method != "fast":
            raise InputError(
                "A graph needs method='fast' (the graph is its own kernel matrix A, so "
                f"Section 2's full method adds nothing); got method={self.method!r}."
            )
        if self.checkpoint is not None:
            raise InputError("A fit with a graph cannot be checkpointed yet; pass checkpoint=None.")

    # --- fit ------------------------------------------------------------------------

    def _node_labels(self, y) -> da.Array:
        """The nodes' labels as a Dask array in node blocks: y's own chunks (a Dask
        array), ``chunk_rows``, or :data:`GRAPH_NODE_ROWS` nodes."""
        if y is None:
            raise InputError("fit needs y, one label per node (-1 for an unlabeled node).")
        if is_dask_frame(y):
            y = y.to_dask_array(lengths=True)
        if not isinstance(y, da.Array):
            y = np.asarray(y)
        if y.ndim != 1:
            raise InputError(f"y must be 1-D, one label per node; got shape {y.shape}.")
        rows = self.chunk_rows or GRAPH_NODE_ROWS
        if isinstance(y, da.Array) and self.chunk_rows is None:
            rows = y.chunks[0]
        return as_dask_labels(y, da.empty((y.shape[0], 1), chunks=(rows, 1)))

    def _fit_graph(self, X, y, kernels, graph):
        """The class statistics (from X's first pass, or from y's), the graph embedding,
        each candidate's LDA, and the choice."""
        marker = unlabeled_marker(self)
        edges = as_edge_list(graph)
        self.__dict__.pop("node_ids_", None)
        if edges.nodes is not None:
            if edges.nodes.size != y.shape[0]:
                raise InputError(
                    f"nodes= names {edges.nodes.size} nodes, but y has {y.shape[0]} labels: "
                    "give one id per label, in the labels' order."
                )
            self.node_ids_ = edges.nodes
        if X is not None:
            self._feature_class_stats(X, y, kernels)
        else:  # the graph alone: no feature statistics
            for name in ("n_features_in_", "feature_names_in_", "class_means_"):
                self.__dict__.pop(name, None)
            self.feature_encoder_ = None
            self._label_class_stats(y)
            self.kernels_ = []
        codes = encode_labels(y, self.classes_, marker)
        options = self._graph_options()
        Z_graph = graph_embedding(edges, codes, self.class_counts_, options)
        names, features, candidates = self._candidates(X, Z_graph)
        K, several = self.classes_.size, len(candidates) > 1
        with counting_passes(edges.ids) as edge_reads:
            with fit_stage(self, "embedding"):
                found = compute(
                    *(encoder_passes.graph_moments_pass(Z, codes, K) for Z in candidates)
                )
            z_moments = [moments for moments, _ in found]
            self.lda_models_ = [self._lda(m) for m in z_moments]
            self._set_cross_entropy()
            if several:
                with fit_stage(self, "cross_entropy"):
                    logliks = compute(
                        *(
                            encoder_passes.log_likelihood_pass(Z, codes, model)
                            for Z, model in zip(candidates, self.lda_models_)
                        )
                    )
                self._set_cross_entropy(-np.array([float(v) for v in logliks]))
        self.n_edge_passes_ = edge_reads.passes  # counted by the engine, as n_passes_
        self._select_kernel(z_moments, kernels=features)
        self.embeddings_ = names
        self.embedding_ = names[self.kernel_index_]
        if self.kernel_ is None:
            self._warn_unreached(int(found[self.kernel_index_][1]), y.shape[0], "training")
        self.fit_plan_ = {
            "name": "graph",
            "passes_over_X": 0 if X is None else 2 + several,
            "passes_over_edges": self.n_edge_passes_,
        }
        self._graph_codes = codes
        self._keep_no_totals()

    def _feature_class_stats(self, X, y, kernels):
        """Pass 1 over X: the classes, U and the class counts (as every encoder fit)."""
        with fit_stage(self, "class_means"):
            (first,) = compute(
                passes.labeled_moments_pass(
                    X,
                    y,
                    scatter=False,
                    sqnorm=any(k.needs_sqnorm for k in kernels),
                    marker=self.unlabeled,
                )
            )
        self._take_classes(first)
        self._set_class_stats(self._check_moments(first["moments"], X.dtype), kernels, False)
        self._require_all_classes()

    def _label_class_stats(self, y):
        """The classes and their counts from one pass over the labels alone."""
        marker = unlabeled_marker(self)
        with fit_stage(self, "class_counts"):
            (found,) = compute(passes.class_counts_pass(y, marker=marker))
        self.classes_ = found["classes"]
        check_class_values(self.classes_)
        check_classes(self.classes_, type(self).__name__, marker)
        warn_marker_as_class(self.classes_, found["counts"], found["marker_rows"], marker)
        self.class_counts_ = np.asarray(found["counts"]).astype(np.int64)

    def _candidates(self, X, Z_graph):
        """(names, feature kernel or None, lazy embedding) of the embeddings compared."""
        if X is None:
            return ["graph"], [None], [Z_graph]
        names, features, arrays = [], [], []
        for kernel in self.kernels_:
            Z = self._feature_embedding(X, kernel)
            if self.graph_fusion == "concat":
                names.append(f"{kernel.name}+graph")
                features.append(kernel)
                arrays.append(da.concatenate([Z, Z_graph], axis=1).rechunk({1: -1}))
            else:
                names.append(kernel.name)
                features.append(kernel)
                arrays.append(Z)
        if self.graph_fusion == "choose":
            names.append("graph")
            features.append(None)
            arrays.append(Z_graph)
        return names, features, arrays

    def _feature_embedding(self, X, kernel) -> da.Array:
        return passes.map_rows(
            embed_block,
            X,
            self.classes_.size,
            np.float64,
            kernel=kernel,
            U=self.class_means_,
            out_dtype=np.float64,
        )

    def _keep_no_totals(self):
        """A graph fit keeps no running sums: ``partial_fit`` refuses to update it."""
        self._kernel_specs = list(self.kernels_)
        self._one_pass_mode = False
        self._x_moments_total = None
        self._z_totals = None
        self._loglik_total = 0.0

    # --- outputs --------------------------------------------------------------------

    @property
    def _fitted_with_graph(self) -> bool:
        return getattr(self, "_graph_codes", None) is not None

    def _training_codes(self) -> da.Array:
        """Every training node's class code (−1 unlabeled) in node blocks: the lazy codes
        of ``fit``, or those a model file holds (then in blocks of ``chunk_rows`` or
        :data:`GRAPH_NODE_ROWS` nodes)."""
        codes = self._graph_codes
        if isinstance(codes, da.Array):
            return codes
        return da.from_array(np.asarray(codes), chunks=self.chunk_rows or GRAPH_NODE_ROWS)

    def _saved_state(self, state: dict) -> dict:
        """The state a model file holds (:func:`scalenc.persist.save_model`): with a
        graph, the training nodes' class codes computed into an array in place of the
        lazy ones — what predictions need beside the LDA, since W = the one-hot labels
        over n_k. It is n-sized: one byte a node for fewer than 128 classes (two below
        2**15), so the file grows with the graph's nodes."""
        codes = state.get("_graph_codes")
        if isinstance(codes, da.Array):
            (values,) = compute(codes.astype(code_dtype(self.classes_.size)))
            state = {**state, "_graph_codes": np.asarray(values)}
        return state

    def _graph_map(self, X, graph, block_fn, n_out, result_dtype, **kwargs):
        """An output for every node, one lazy block map over its chosen embedding.

        The nodes are X's rows (or, without features, the training nodes); edges join
        them to the training nodes, whose labels give W (ids 0 … n−1 as in ``fit``; a
        node beyond the training nodes is unlabeled). With the training graph, the nodes
        get the embedding ``fit`` used, so every node — the unlabeled ones too — is
        predicted as in the transductive setting of GraphEmd.
        """
        self._check_fitted()
        if not self._fitted_with_graph:
            raise InputError(
                "This EncoderClassifier was fitted without a graph; call it without graph=."
            )
        if graph is None:
            raise InputError(
                "This EncoderClassifier was fitted with a graph: pass graph=, the edges of "
                "the nodes to predict (the training graph for the training nodes), e.g. "
                "model.predict(X, graph=edges)."
            )
        has_features = bool(self.kernels_)
        if has_features and X is None:
            raise InputError(
                "This EncoderClassifier was fitted with node features: pass X, one row per "
                "node, beside graph=."
            )
        if not has_features and X is not None:
            raise InputError(
                "This EncoderClassifier was fitted on a graph alone (X=None): pass X=None."
            )
        edges = as_edge_list(graph)
        codes = self._training_codes()
        if X is not None:
            Xd, lazy = prepare_input(self, X)
        else:
            Xd, lazy = None, _lazy_graph(graph)
        nodes = self._nodes_of(edges, None if Xd is None else Xd.shape[0])
        if Xd is not None:
            node_chunks = Xd.chunks[0]
        elif nodes is not None:
            node_chunks = da.core.normalize_chunks(
                self.chunk_rows or GRAPH_NODE_ROWS, (nodes.size,)
            )[0]
        else:
            node_chunks = codes.chunks[0]
        if result_dtype is None:
            result_dtype = kwargs["out_dtype"] = np.float64 if Xd is None else Xd.dtype
        Z = self._node_embedding(Xd, edges, codes, node_chunks, nodes)
        if self.kernel_ is not None:
            out = passes.map_rows(
                apply_to_embedding, Z, n_out, result_dtype, block_fn=block_fn, **kwargs
            )
            return out if lazy else compute(out)[0]
        unreached = self._unreached_output(block_fn)
        out = passes.map_rows(
            apply_to_graph_alone,
            Z,
            n_out,
            result_dtype,
            block_fn=block_fn,
            unreached=unreached,
            **kwargs,
        )
        if lazy:
            return out
        if unreached is None:
            return compute(out)[0]
        result, zero_rows = compute(out, (~(Z != 0).any(axis=1)).sum())
        self._warn_unreached(int(zero_rows), Z.shape[0], "")
        return result

    def _unreached_output(self, block_fn):
        """What an output gives a node with no labeled neighbour under the graph alone:
        that of the class priors π_k = n_k / n (probabilities π, scores log π, or the
        log-odds for two classes, the most frequent class); None for ``transform``."""
        priors = self.class_counts_ / self.class_counts_.sum()
        if block_fn is proba_block:
            return priors
        if block_fn is decision_block:
            log = np.log(priors)
            return log[1:] - log[0] if log.size == 2 else log
        if block_fn is predict_block:
            return self.classes_[np.argmax(priors)]
        return None

    def _warn_unreached(self, count: int, nodes: int, which: str) -> None:
        if count:
            top = self.classes_[np.argmax(self.class_counts_)].tolist()
            warnings.warn(
                f"{count} of {nodes} {which + ' ' if which else ''}nodes have no labeled "
                "neighbour: their graph embedding is zero, so the graph says nothing of "
                "them and their outputs are the class priors (predicted: the most frequent "
                f"class, {top!r}). Label some of their neighbours, or fit with node "
                "features beside the graph (fit(X, y, graph=edges)).",
                NoLabeledNeighbourWarning,
                stacklevel=3,
            )

    def _nodes_of(self, edges: EdgeList, n_rows):
        """The ids of the nodes an output is for, in its rows' order, when the model
        names nodes by id (``node_ids_``): the edges' ``nodes``, else the training
        nodes; None when ids are positions."""
        fit_ids = getattr(self, "node_ids_", None)
        if fit_ids is None:
            if edges.nodes is not None:
                raise InputError(
                    "This EncoderClassifier was fitted with node ids 0 … n−1 (no nodes=): "
                    "pass the edges without nodes=, nodes being rows (X's, or the labels')."
                )
            return None
        nodes = fit_ids if edges.nodes is None else edges.nodes
        if nodes.dtype.kind != fit_ids.dtype.kind:
            kinds = {"U": "strings", "i": "integers"}
            raise InputError(
                f"This EncoderClassifier's node ids are {kinds[fit_ids.dtype.kind]}; nodes= "
                f"gives {kinds[nodes.dtype.kind]}. Give the ids as at fit."
            )
        if n_rows is not None and nodes.size != n_rows:
            given = "nodes= names" if edges.nodes is not None else "The model has"
            raise InputError(
                f"{given} {nodes.size} nodes, but X has {n_rows} rows: give the edges with "
                "nodes=, the id of each row of X (as_edge_list(edges, nodes=ids))."
            )
        return nodes

    def _node_embedding(self, Xd, edges: EdgeList, codes, node_chunks, nodes=None) -> da.Array:
        """The chosen embedding of the nodes (X's rows, the ``nodes`` named by id, or the
        training nodes)."""
        node_ids = None
        if nodes is not None and _same_ids(nodes, self.node_ids_):  # the training nodes
            node_ids = self.node_ids_
        elif nodes is not None:  # the nodes first, then the training nodes not among them
            node_ids, values = self._nodes_first(nodes, codes)
            codes = da.from_array(values, chunks=values.size)
        m, n_fit = int(sum(node_chunks)), codes.shape[0]
        if m > n_fit:  # nodes beyond the training nodes are unlabeled
            codes = da.concatenate([codes, da.full(m - n_fit, -1, dtype=codes.dtype)])
        chunks = tuple(node_chunks) + ((n_fit - m,) if n_fit > m else ())
        codes = codes.rechunk({0: chunks})
        with split_every_set(self.split_every):
            Z_graph = graph_embedding(
                edges, codes, self.class_counts_, self._graph_options(), node_ids=node_ids
            )[:m]
        if self.kernel_ is None:
            return Z_graph
        Z = self._feature_embedding(Xd, self.kernel_)
        if self.graph_fusion == "concat":
            Z = da.concatenate([Z, Z_graph], axis=1).rechunk({1: -1})
        return Z

    def _nodes_first(self, nodes: np.ndarray, codes) -> tuple:
        """(ids, class codes) of every node an embedding of ``nodes`` needs: ``nodes`` in
        their order (new ones unlabeled), then the training nodes not among them — so the
        embedding's first rows are the nodes' own, with no gather. The codes are the
        training nodes' (one byte each below 128 classes), read into memory."""
        fit_ids = self.node_ids_
        known = pd.Index(fit_ids)
        rest = fit_ids[~known.isin(nodes)]
        ids = np.concatenate([nodes, rest])
        values = np.asarray(compute(codes)[0] if isinstance(codes, da.Array) else codes)
        where = known.get_indexer(ids)
        return ids, np.where(where >= 0, values[where], -1).astype(values.dtype)

    def score(self, X, y, sample_weight=None, graph=None):
        """Accuracy over the labeled rows of (X, y), or with ``graph`` over the labeled
        nodes (X None for a model fitted on a graph alone); unlabeled rows and nodes are
        left out.

        With a graph and lazy predictions (X a Dask collection, or a lazy edge list
        without X), the accuracy is one reduction over them; otherwise, or with
        ``sample_weight``, it is computed in memory.

        Examples
        --------
        Three groups of four nodes, each a clique, joined in a chain; one label hidden
        in each:

        >>> import itertools
        >>> import numpy as np
        >>> from scalenc import EncoderClassifier
        >>> y = np.repeat([0, 1, 2], 4)
        >>> pairs = itertools.combinations(range(12), 2)
        >>> edges = np.array([(i, j) for i, j in pairs if i // 4 == j // 4] + [(3, 4), (7, 8)])
        >>> hidden = y.copy()
        >>> hidden[[0, 5, 10]] = -1
        >>> model = EncoderClassifier().fit(None, hidden, graph=edges)
        >>> model.score(None, y, graph=edges)  # the labeled nodes of y: every node here
        1.0
        """
        if graph is None:
            return super().score(X, y, sample_weight)
        pred = self.predict(X, graph=graph)
        marker = unlabeled_marker(self)
        if sample_weight is not None or not isinstance(pred, da.Array):
            pred = np.asarray(compute(pred)[0] if isinstance(pred, da.Array) else pred)
            y_arr = np.asarray(compute(y)[0] if isinstance(y, da.Array) else y)
            keep = ~unlabeled_mask(y_arr, marker)
            weights = None if sample_weight is None else np.asarray(sample_weight)[keep]
            return float(np.average(pred[keep] == y_arr[keep], weights=weights))
        codes = encode_labels(as_dask_labels(y, pred[:, None]), self.classes_, marker)
        labeled = codes >= 0
        right = (encode_labels(pred, self.classes_, None) == codes) & labeled
        correct, total = compute(right.sum(), labeled.sum())
        return float(correct) / float(total)

    @property
    def _graph_width(self) -> int:
        """Columns of the chosen embedding (``transform``)."""
        K = self.classes_.size
        width = K if self.kernel_ is not None else 0
        if self.kernel_ is None or self.graph_fusion == "concat":
            width += embedding_width(K, self._graph_options())
        return width
