"""EncoderClassifier with a graph: ``fit(X, y, graph=edges)`` (X=None for the graph alone)
against GraphEmd's embedding and scikit-learn's LDA on it, the fusion and the choice by
cross-entropy, every node predicted, and what it refuses."""

from __future__ import annotations

import pickle

import dask.array as da
import numpy as np
import pytest
from _counting import counted
from sklearn.base import clone
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from test_encoder_graph import graphemd_matrix

from scalenc import EncoderClassifier
from scalenc.encoder import choose_kernel
from scalenc.encoder.graph import GraphOptions
from scalenc.exceptions import InputError, NoLabeledNeighbourWarning

TOL = EncoderClassifier().tol


def planted_graph(n=300, K=3, p=5, *, seed=0, p_in=0.06, p_out=0.01, unlabeled=0.4):
    """A stochastic block model of K classes with noisy node features; a share of the
    labels hidden (−1). Returns (X, y with −1s, y true, edges (s, 2))."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, K, n)
    truth[:K] = np.arange(K)
    same = truth[:, None] == truth[None, :]
    upper = np.triu(rng.random((n, n)) < np.where(same, p_in, p_out), k=1)
    edges = np.argwhere(upper)
    X = rng.normal(size=(K, p))[truth] * 0.8 + rng.normal(size=(n, p))
    y = truth.copy()
    y[K:][rng.random(n - K) < unlabeled] = -1
    return X, y, truth, edges


def graph_oracle(y, edges, options=None):
    """GraphEmd's Z = A W (the embedding tests' oracle), unit weights."""
    options = GraphOptions() if options is None else options
    return graphemd_matrix(edges, np.ones(len(edges)), y, options)


def feature_oracle(X, y):
    """The linear kernel's Z = X Uᵀ, U the class means of the labeled rows."""
    lab = y >= 0
    U = np.stack([X[lab & (y == k)].mean(axis=0) for k in range(y.max() + 1)])
    return X @ U.T


def lda_of(Z, y):
    lab = y >= 0
    return LinearDiscriminantAnalysis(tol=TOL).fit(Z[lab], y[lab])


@pytest.mark.parametrize(
    "options",
    [GraphOptions(), GraphOptions(laplacian=True, self_loops=True, directed=True)],
    ids=["default", "laplacian-loops-directed"],
)
@pytest.mark.parametrize("chunks", [None, 64, (70, 1, 129, 100)], ids=["numpy", "even", "odd"])
def test_graph_alone_equals_graphemd_and_sklearn_lda(options, chunks):
    X, y, _, edges = planted_graph()
    oracle = graph_oracle(y, edges, options)
    lda = lda_of(oracle, y)
    yin = y if chunks is None else da.from_array(y, chunks=chunks)
    model = EncoderClassifier(
        graph_laplacian=options.laplacian,
        graph_self_loops=options.self_loops,
        graph_directed=options.directed,
    ).fit(None, yin, graph=edges)
    assert model.embeddings_ == ["graph"] and model.kernel_ is None
    assert model.n_passes_ == 0 and model.n_edge_passes_ == 1  # the Laplacian's degrees too
    np.testing.assert_array_equal(model.class_counts_, np.bincount(y[y >= 0]))
    Z = model.transform(None, graph=edges)
    np.testing.assert_allclose(np.asarray(Z), oracle, rtol=0, atol=1e-10)
    # every node predicted, as scikit-learn's LDA on GraphEmd's embedding predicts them
    np.testing.assert_array_equal(np.asarray(model.predict(None, graph=edges)), lda.predict(oracle))
    proba = np.asarray(model.predict_proba(None, graph=edges))
    np.testing.assert_allclose(proba, lda.predict_proba(oracle), atol=1e-9)
    log_proba = np.asarray(model.predict_log_proba(None, graph=edges))
    np.testing.assert_allclose(np.exp(log_proba), proba, atol=1e-12)


@pytest.mark.filterwarnings("ignore::scalenc.exceptions.NoLabeledNeighbourWarning")
@pytest.mark.parametrize("chunks", [None, (70, 1, 129, 100)], ids=["numpy", "odd"])
def test_fusion_concatenates_features_and_graph(chunks):
    X, y, truth, edges = planted_graph(seed=1)
    Z = np.hstack([feature_oracle(X, y), graph_oracle(y, edges)])
    lda = lda_of(Z, y)
    Xin = X if chunks is None else da.from_array(X, chunks=(chunks, -1))
    model = EncoderClassifier(kernels=("linear",)).fit(Xin, y, graph=edges)
    assert model.embeddings_ == ["linear+graph"] and model.embedding_ == "linear+graph"
    assert model.kernel_.name == "linear" and model.n_passes_ == 2
    np.testing.assert_allclose(np.asarray(model.transform(Xin, graph=edges)), Z, atol=1e-10)
    pred = model.predict(Xin, graph=edges)
    assert isinstance(pred, da.Array) == (chunks is not None)
    np.testing.assert_array_equal(np.asarray(pred), lda.predict(Z))
    # the fused embedding is ahead of either alone on the hidden labels
    hidden = y < 0
    graph_only = EncoderClassifier().fit(None, y, graph=edges).predict(None, graph=edges)
    features = EncoderClassifier(kernels=("linear",)).fit(X, y).predict(X)
    fused = np.mean(np.asarray(pred)[hidden] == truth[hidden])
    assert fused > np.mean(graph_only[hidden] == truth[hidden])
    assert fused > np.mean(features[hidden] == truth[hidden])


def test_the_graph_is_one_more_kernel_chosen_by_cross_entropy():
    X, y, _, edges = planted_graph(seed=2, p_in=0.15, p_out=0.002)
    X = X + np.random.default_rng(0).normal(scale=4.0, size=X.shape)  # weak features
    candidates = [feature_oracle(X, y), graph_oracle(y, edges)]
    lab = y >= 0
    ce = []
    for Z in candidates:
        log_proba = lda_of(Z, y).predict_log_proba(Z[lab])
        ce.append(-log_proba[np.arange(lab.sum()), y[lab]].sum())
    model = EncoderClassifier(kernels=("linear",), graph_fusion="choose").fit(X, y, graph=edges)
    assert model.embeddings_ == ["linear", "graph"]
    np.testing.assert_allclose(model.cross_entropy_, ce, rtol=1e-8)
    assert model.kernel_index_ == choose_kernel(ce, 0.3) == 1
    assert model.embedding_ == "graph" and model.kernel_ is None
    np.testing.assert_array_equal(
        model.predict(X, graph=edges), lda_of(candidates[1], y).predict(candidates[1])
    )
    assert model.transform(X, graph=edges).shape == (len(y), 3)
    assert model.fit_plan_ == {"name": "graph", "passes_over_X": 3, "passes_over_edges": 2}


@pytest.mark.parametrize("laplacian", [False, True])
def test_edge_passes_are_the_reads_of_the_edges(laplacian):
    """``n_edge_passes_`` is the engine's count, and each pass reads every edge block
    once: the Laplacian's degrees are summed in the pass that embeds."""
    X, y, _, edges = planted_graph(seed=3)
    counted_edges, reads = counted(edges, 200)
    kernels = ("linear", "euclidean")  # two fused candidates: moments, then cross-entropies
    model = EncoderClassifier(kernels=kernels, graph_laplacian=laplacian)
    model.fit(X, y, graph=counted_edges)
    assert reads.passes() == model.n_edge_passes_ == model.fit_plan_["passes_over_edges"] == 2


def test_several_fused_kernels_are_compared_by_the_rule():
    X, y, _, edges = planted_graph(seed=3)
    model = EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y, graph=edges)
    assert model.embeddings_ == ["linear+graph", "euclidean+graph"]
    assert np.isfinite(model.cross_entropy_).all()
    assert model.kernel_index_ == choose_kernel(model.cross_entropy_, 0.3)


def test_new_nodes_are_predicted_through_their_edges_to_the_training_nodes():
    X, y, _, edges = planted_graph(seed=4, unlabeled=0.0)
    train = 250  # nodes 250 … 299 arrive later, with their features and edges
    inside = (edges < train).all(axis=1)
    model = EncoderClassifier(kernels=("linear",)).fit(X[:train], y[:train], graph=edges[inside])
    # the full graph: the new nodes are unlabeled; their edges reach the training nodes
    y_all = np.concatenate([y[:train], np.full(len(y) - train, -1)])
    Z = np.hstack([X @ model.class_means_.T, graph_oracle(y_all, edges)])
    expected = LinearDiscriminantAnalysis(tol=TOL).fit(Z[:train], y[:train]).predict(Z)
    np.testing.assert_array_equal(model.predict(X, graph=edges), expected)


def test_results_do_not_depend_on_chunking_or_scheduler(scheduler):
    X, y, _, edges = planted_graph(seed=5)
    reference = EncoderClassifier(kernels=("linear",)).fit(X, y, graph=edges)
    Xd = da.from_array(X, chunks=(37, -1))
    edges_d = da.from_array(edges, chunks=(101, 2))
    model = clone(reference).fit(Xd, da.from_array(y, chunks=37), graph=edges_d)
    np.testing.assert_allclose(model.coef_, reference.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(
        model.predict(Xd, graph=edges_d).compute(), reference.predict(X, graph=edges)
    )


@pytest.mark.cluster
def test_graph_fit_on_a_distributed_cluster(client, tmp_path):
    """Worker processes read the edges from a Parquet dataset of three files."""
    import pandas as pd

    from scalenc.io.edges import as_edge_list

    X, y, _, edges = planted_graph(seed=6)
    for i, part in enumerate(np.array_split(edges, 3)):
        frame = pd.DataFrame({"src": part[:, 0], "dst": part[:, 1]})
        frame.to_parquet(tmp_path / f"part-{i}.parquet")
    parquet = as_edge_list(str(tmp_path), source="src", target="dst")
    model = EncoderClassifier(kernels=("linear",), graph_laplacian=True).fit(
        da.from_array(X, chunks=(80, -1)), y, graph=parquet
    )
    assert model.n_edge_passes_ == 1  # the degrees and the embedding in one pass
    Z = np.hstack([feature_oracle(X, y), graph_oracle(y, edges, GraphOptions(laplacian=True))])
    np.testing.assert_array_equal(model.predict(X, graph=parquet), lda_of(Z, y).predict(Z))


def test_a_fit_without_graph_forgets_the_graph():
    X, y, _, edges = planted_graph(seed=7)
    model = EncoderClassifier(kernels=("linear",)).fit(X, y, graph=edges)
    model.fit(X, y)
    plain = EncoderClassifier(kernels=("linear",)).fit(X, y)
    assert not hasattr(model, "embeddings_") and not hasattr(model, "_graph_codes")
    np.testing.assert_array_equal(model.predict(X), plain.predict(X))
    assert model.transform(X).shape == (len(y), 3)


@pytest.mark.filterwarnings("ignore::scalenc.exceptions.NoLabeledNeighbourWarning")
def test_what_a_graph_fit_refuses():
    X, y, _, edges = planted_graph(seed=8)
    with pytest.raises(InputError, match=r"A graph needs method='fast'"):
        EncoderClassifier(method="full").fit(X, y, graph=edges)
    with pytest.raises(InputError, match=r"cannot be checkpointed yet; pass checkpoint=None"):
        EncoderClassifier(checkpoint="memory://ck").fit(X, y, graph=edges)
    with pytest.raises(InputError, match=r"but the graph has 10 nodes"):
        EncoderClassifier().fit(None, y[:10], graph=edges)
    fused = EncoderClassifier(kernels=("linear",)).fit(X, y, graph=edges)
    with pytest.raises(InputError, match=r"fitted with a graph: pass graph=, the edges of"):
        fused.predict(X)
    with pytest.raises(InputError, match=r"fitted with node features: pass X, one row per"):
        fused.predict(None, graph=edges)
    with pytest.raises(InputError, match=r"holds no statistics to update \(it was fitted with "
                       r"a graph, whose embedding needs every node's edges again\)"):  # fmt: skip
        fused.partial_fit(X, y)
    graph_only = EncoderClassifier().fit(None, y, graph=edges)
    with pytest.raises(InputError, match=r"fitted on a graph alone \(X=None\): pass X=None"):
        graph_only.predict(X, graph=edges)
    plain = EncoderClassifier(kernels=("linear",)).fit(X, y)
    with pytest.raises(InputError, match=r"fitted without a graph; call it without graph="):
        plain.predict(X, graph=edges)


@pytest.mark.filterwarnings("ignore::scalenc.exceptions.NoLabeledNeighbourWarning")
def test_score_with_a_graph_in_memory_and_lazily():
    X, y, truth, edges = planted_graph(seed=11)
    model = EncoderClassifier(kernels=("linear",)).fit(X, y, graph=edges)
    pred = model.predict(X, graph=edges)
    expected = float(np.mean(pred == truth))
    assert model.score(X, truth, graph=edges) == pytest.approx(expected, abs=1e-15)
    Xd, truth_d = da.from_array(X, chunks=(90, -1)), da.from_array(truth, chunks=50)
    assert model.score(Xd, truth_d, graph=edges) == pytest.approx(expected, abs=1e-15)
    hidden = y < 0  # the labels of y are left out as unlabeled rows
    assert model.score(X, np.where(hidden, truth, -1), graph=edges) == pytest.approx(
        float(np.mean(pred[hidden] == truth[hidden])), abs=1e-15
    )
    weights = np.linspace(1, 2, len(y))
    assert model.score(X, truth, sample_weight=weights, graph=edges) == pytest.approx(
        float(np.average(pred == truth, weights=weights)), abs=1e-15
    )
    graph_only = EncoderClassifier().fit(None, y, graph=edges)
    lazy_edges = da.from_array(edges, chunks=(200, 2))
    assert graph_only.score(None, truth, graph=lazy_edges) == pytest.approx(
        float(np.mean(graph_only.predict(None, graph=edges) == truth)), abs=1e-15
    )


@pytest.mark.filterwarnings("ignore::scalenc.exceptions.NoLabeledNeighbourWarning")
def test_a_graph_model_pickles():
    """pickle keeps the lazy labels (model files: tests/persist/test_persist_graph.py)."""
    X, y, _, edges = planted_graph(seed=9)
    model = EncoderClassifier().fit(None, y, graph=edges)
    again = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(
        again.predict(None, graph=edges), model.predict(None, graph=edges)
    )


def test_nodes_without_labeled_neighbours_get_the_class_priors_with_a_warning():
    """Their graph embedding is zero, so the graph alone says nothing of them: a warning
    counts them (at fit among the training nodes, at an output computed in memory among
    its nodes) and their outputs are the class priors; fused, their features decide."""
    X, y, _, edges = planted_graph(seed=10)
    y_more = np.concatenate([y, [-1, -1, -1]])  # three nodes without edges
    oracle = graph_oracle(y_more, edges)
    zero = ~oracle.any(axis=1)
    n, m = int(zero.sum()), y_more.size
    assert zero[-3:].all() and n > 3  # and some whose neighbours are all unlabeled
    counts = np.bincount(y_more[y_more >= 0])
    priors, top = counts / counts.sum(), int(np.argmax(counts))
    said = (
        rf"^{n} of {m} training nodes have no labeled neighbour: their graph embedding is "
        rf"zero, so the graph says nothing of them and their outputs are the class priors "
        rf"\(predicted: the most frequent class, {top}\)\. Label some of their neighbours"
    )
    with pytest.warns(NoLabeledNeighbourWarning, match=said):
        model = EncoderClassifier().fit(None, y_more, graph=edges)
    Z = model.transform(None, graph=edges)  # the embedding itself: zero, no warning
    assert not Z[zero].any()
    with pytest.warns(NoLabeledNeighbourWarning, match=rf"^{n} of {m} nodes have no labeled"):
        proba = model.predict_proba(None, graph=edges)
    np.testing.assert_array_equal(proba[zero], np.tile(priors, (n, 1)))
    lda = lda_of(oracle, y_more)
    np.testing.assert_allclose(proba[~zero], lda.predict_proba(oracle[~zero]), atol=1e-9)
    with pytest.warns(NoLabeledNeighbourWarning, match=rf"^{n} of {m} nodes"):
        pred = model.predict(None, graph=edges)
    np.testing.assert_array_equal(pred[zero], [top] * n)
    np.testing.assert_array_equal(pred[~zero], lda.predict(oracle[~zero]))
    with pytest.warns(NoLabeledNeighbourWarning, match=rf"^{n} of {m} nodes"):
        scores = model.decision_function(None, graph=edges)
    np.testing.assert_array_equal(scores[zero], np.tile(np.log(priors), (n, 1)))
    # a lazy graph gives lazy outputs: the same values, counted at fit only
    lazy = model.predict(None, graph=da.from_array(edges, chunks=(100, 2)))
    np.testing.assert_array_equal(lazy.compute(), pred)
    X_more = np.vstack([X, X[:3]])
    fused = EncoderClassifier(kernels=("linear",)).fit(X_more, y_more, graph=edges)
    Z = fused.transform(X_more, graph=edges)
    np.testing.assert_allclose(Z[-3:, :3], X[:3] @ fused.class_means_.T, rtol=1e-12)
    assert not Z[-3:, 3:].any()
