"""Graphs whose edges name nodes by id (strings, or integers with gaps) with ``nodes=``:
the embedding equals GraphEmd's oracle on the same graph numbered 0 … n−1, in any order of
the nodes, across chunkings and schedulers; the encoder fitted and predicting by id
agrees with the encoder by position; model files keep the ids; bad ids are refused."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pandas as pd
import pytest
from dask import compute
from test_encoder_graph import OPTIONS, graphemd_loop, option_id, small_graph

from scalenc import EncoderClassifier
from scalenc.encoder.graph import GraphOptions, graph_embedding
from scalenc.exceptions import InputError
from scalenc.io.edges import as_edge_list, node_ids
from scalenc.persist import load_model, read_model_metadata, save_model


def names_for(n: int, kind: str, seed: int = 0) -> np.ndarray:
    """n distinct ids: strings, or integers far apart and out of order."""
    rng = np.random.default_rng(seed)
    picks = rng.choice(10**12, size=n, replace=False)
    return np.array([f"user-{p}" for p in picks]) if kind == "str" else picks.astype(np.int64)


def by_id(edges, weights, labels, options, *, kind, order, edge_chunks, node_chunks, **kw):
    """The embedding with the edges naming nodes by id and the nodes listed in ``order``."""
    ids = names_for(labels.size, kind)
    table = pd.DataFrame({"a": ids[edges[:, 0]], "b": ids[edges[:, 1]], "w": weights})
    edge_list = as_edge_list(
        table, source="a", target="b", weight="w", chunk_edges=edge_chunks, nodes=ids[order]
    )
    codes = da.from_array(labels[order], chunks=node_chunks)
    counts = np.bincount(labels[labels >= 0])
    return graph_embedding(edge_list, codes, counts, options, **kw)


# --- the embedding ------------------------------------------------------------------------


@pytest.mark.parametrize("options", OPTIONS[::3], ids=option_id)
@pytest.mark.parametrize("kind", ["str", "int"])
@pytest.mark.parametrize(
    "edge_chunks, node_chunks, split_every",
    [(10_000, 10_000, 8), (37, 7, 2), (64, (13, 1, 20, 6), 3)],
    ids=["one-block", "many", "irregular"],
)
def test_embedding_by_id_equals_graphemd_in_the_nodes_order(
    options, kind, edge_chunks, node_chunks, split_every
):
    edges, weights, labels = small_graph()
    order = np.random.default_rng(5).permutation(labels.size)
    with dask.config.set({"scalenc.split-every": split_every}):
        Z = by_id(
            edges,
            weights,
            labels,
            options,
            kind=kind,
            order=order,
            edge_chunks=edge_chunks,
            node_chunks=node_chunks,
        )
    expected = graphemd_loop(edges, weights, labels, options)[order]
    np.testing.assert_allclose(Z.compute(), expected, rtol=0, atol=1e-10)


def test_embedding_by_id_under_every_scheduler(scheduler):
    options = GraphOptions(laplacian=True, directed=True)
    edges, weights, labels = small_graph(seed=1)
    order = np.arange(labels.size)[::-1]
    Z = by_id(
        edges, weights, labels, options, kind="str", order=order, edge_chunks=29, node_chunks=11
    )
    np.testing.assert_allclose(
        Z.compute(), graphemd_loop(edges, weights, labels, options)[order], rtol=0, atol=1e-10
    )


@pytest.mark.cluster
def test_embedding_by_id_on_a_distributed_cluster(client):
    options = GraphOptions(self_loops=True)
    edges, weights, labels = small_graph(seed=2)
    order = np.random.default_rng(2).permutation(labels.size)
    Z = by_id(
        edges, weights, labels, options, kind="int", order=order, edge_chunks=31, node_chunks=9
    )
    np.testing.assert_allclose(
        Z.compute(), graphemd_loop(edges, weights, labels, options)[order], rtol=0, atol=1e-10
    )


# --- the encoder -----------------------------------------------------------------------------


def planted(seed=0, n=240, s=1500):
    """Features, labels (a third hidden) and an edge list mostly within classes."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    X = rng.normal(size=(n, 4)) + y[:, None]
    src = rng.integers(0, n, s)
    same = [rng.choice(np.flatnonzero(y == y[a])) for a in src]
    dst = np.where(rng.random(s) < 0.7, same, rng.integers(0, n, s))
    hidden = y.copy()
    hidden[::3] = -1
    return X, y, hidden, np.column_stack([src, dst])


def _values(a):
    return np.asarray(compute(a)[0])


@pytest.mark.parametrize("features", [True, False], ids=["features", "graph-alone"])
def test_the_encoder_by_id_predicts_as_by_position(tmp_path, features):
    """Fitted from a Parquet edge table of string ids with the nodes in another order,
    the encoder gives each node what the encoder by position gives it: every node, a
    subset in any order, and nodes new to the model (unlabeled, joined by their edges)."""
    X, y, hidden, edges = planted()
    n, extra = y.size, 30
    X_all = np.vstack([X, np.random.default_rng(9).normal(size=(extra, 4))])
    rng = np.random.default_rng(3)
    new_edges = np.column_stack([n + rng.integers(0, extra, 120), rng.integers(0, n, 120)])
    all_edges = np.vstack([edges, new_edges])
    ids = names_for(n + extra, "str", seed=4)
    for name, pairs in (("train", edges), ("all", all_edges)):
        table = pd.DataFrame({"src": ids[pairs[:, 0]], "dst": ids[pairs[:, 1]]})
        table.to_parquet(tmp_path / f"{name}.parquet", row_group_size=400)

    def graph(nodes=None, name="all"):
        path = tmp_path / f"{name}.parquet"
        return as_edge_list(path, source="src", target="dst", nodes=nodes)

    kw = {"kernels": ("linear",), "graph_laplacian": True}
    position = EncoderClassifier(**kw).fit(X if features else None, hidden, graph=edges)
    order = rng.permutation(n)
    model = EncoderClassifier(**kw).fit(
        X[order] if features else None, hidden[order], graph=graph(ids[order], "train")
    )
    np.testing.assert_array_equal(model.node_ids_, ids[order])
    assert model.embedding_ == position.embedding_

    def outputs(est, rows, nodes, name="train"):
        Xr = X_all[rows] if features else None
        return _values(est.predict_proba(Xr, graph=graph(nodes, name)))

    expected = {  # by position: the training graph, and with the new nodes' edges
        "train": _values(position.predict_proba(X if features else None, graph=edges)),
        "all": _values(position.predict_proba(X_all if features else None, graph=all_edges))
        if features
        else None,
    }
    # every node the edges name must be a training node or among nodes=
    for rows, name in (
        (order, "train"),
        (rng.permutation(n)[:17], "train"),
        (np.r_[n + rng.permutation(extra), 3, 7], "all"),
    ):
        if not features and name == "all":  # the graph alone by position has no new rows
            continue
        got = outputs(model, rows, ids[rows], name)
        np.testing.assert_allclose(got, expected[name][rows], rtol=0, atol=1e-12)
    # without nodes=, the training nodes in their training order
    default = _values(
        model.predict_proba(X[order] if features else None, graph=graph(name="train"))
    )
    np.testing.assert_allclose(default, expected["train"][order], rtol=0, atol=1e-12)

    # a model file keeps the ids (schema version 3) and predicts the same
    path = save_model(model, tmp_path / "model")
    assert read_model_metadata(path)["schema_version"] == 3
    loaded = load_model(path)
    np.testing.assert_array_equal(loaded.node_ids_, model.node_ids_)
    rows = np.r_[5, 2, 11]
    np.testing.assert_allclose(
        outputs(loaded, rows, ids[rows]), expected["train"][rows], rtol=0, atol=1e-12
    )


def test_new_nodes_by_id_match_the_graph_alone_by_position():
    """A graph alone: nodes beyond the training nodes, by position (ids n, n+1, …) or by
    id, get the same embedding."""
    _, y, hidden, edges = planted(seed=1)
    n = y.size
    extra_edges = np.array([[n, 0], [n, 1], [n + 1, 5], [n + 1, n]])
    all_edges = np.vstack([edges, extra_edges])
    position = EncoderClassifier().fit(None, hidden, graph=edges)
    ids = np.arange(n + 2) * 1000 + 7  # integers with gaps
    model = EncoderClassifier().fit(None, hidden, graph=as_edge_list(ids[edges], nodes=ids[:n]))
    Z = _values(model.transform(None, graph=as_edge_list(ids[all_edges], nodes=ids[[n + 1, n]])))
    codes = np.r_[np.where(hidden >= 0, hidden, -1), -1, -1]
    expected = graph_embedding(
        as_edge_list(all_edges),
        da.from_array(codes, chunks=50),
        position.class_counts_,
        position._graph_options(),
    ).compute()[[n + 1, n]]
    np.testing.assert_allclose(Z, expected, rtol=0, atol=1e-12)
    assert np.abs(Z).sum() > 0  # the new nodes are joined to labeled ones


# --- bad ids ----------------------------------------------------------------------------------


def test_node_ids_are_checked():
    np.testing.assert_array_equal(node_ids(np.array([3, 1], dtype=np.uint8)), [3, 1])
    assert node_ids(pd.Series(["a", "b"], dtype=object)).dtype.kind == "U"
    with pytest.raises(
        InputError, match=r"unique, one per node; 'b' is given twice \(at 1 and 3\)"
    ):
        node_ids(["a", "b", "c", "b"])
    with pytest.raises(InputError, match=r"integers or strings; got dtype float64"):
        node_ids([0.5, 1.5])
    with pytest.raises(InputError, match=r"1-D, one id per node; got shape \(2, 2\)"):
        node_ids([[1, 2], [3, 4]])


def test_bad_ids_and_mismatches_are_refused():
    X, y, hidden, edges = planted(seed=2)
    ids = names_for(y.size, "str", seed=1)
    named = ids[edges]
    named[7, 1] = "nobody"
    with pytest.raises(
        InputError, match=r"Edge 7 \('user-\d+', 'nobody'\) names node 'nobody', which is not "
    ):
        EncoderClassifier().fit(None, hidden, graph=as_edge_list(named, nodes=ids))
    with pytest.raises(InputError, match=r"nodes= names 239 nodes, but y has 240 labels"):
        EncoderClassifier().fit(None, hidden, graph=as_edge_list(ids[edges], nodes=ids[1:]))
    with pytest.raises(InputError, match=r"dtype <U\d+\. Pass nodes="):
        EncoderClassifier().fit(None, hidden, graph=ids[edges])

    model = EncoderClassifier(kernels=("linear",)).fit(
        X, hidden, graph=as_edge_list(ids[edges], nodes=ids)
    )
    with pytest.raises(InputError, match=r"The model has 240 nodes, but X has 10 rows"):
        model.predict(X[:10], graph=ids[edges])
    with pytest.raises(InputError, match=r"nodes= names 3 nodes, but X has 10 rows"):
        model.predict(X[:10], graph=as_edge_list(ids[edges], nodes=ids[:3]))
    with pytest.raises(InputError, match=r"node ids are strings; nodes= gives integers"):
        model.predict(X[:2], graph=as_edge_list(edges, nodes=[0, 1]))
    plain = EncoderClassifier(kernels=("linear",)).fit(X, hidden, graph=edges)
    with pytest.raises(InputError, match=r"fitted with node ids 0 … n−1 \(no nodes=\)"):
        plain.predict(X, graph=as_edge_list(edges, nodes=np.arange(y.size)))
