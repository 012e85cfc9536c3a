"""The command line with a graph: `scalenc fit encoder --edges` (the graph alone, or with
node features) and `scalenc predict`/`embed --edges`, from real files (Parquet edges
written by pyarrow, .npy, Zarr), in job files too; the in-memory API is the oracle."""

from __future__ import annotations

import re

import dask.array as da
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import shared_dataset
from test_cli import run, run_text
from test_encoder_graph_fit import planted_graph

from scalenc import EncoderClassifier, cli, save_model


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """A planted graph with weighted edges as a Parquet dataset (two files, named columns)
    and as an (s, 2) .npy; the labels as .npy; the features and labels as .npz."""
    X, y, truth, edges = planted_graph(n=400, seed=11)
    rng = np.random.default_rng(0)
    weights = rng.uniform(0.5, 2.0, len(edges))
    root = tmp_path_factory.mktemp("graph")
    (root / "edges.parquet").mkdir()
    half = len(edges) // 2
    for part, rows in enumerate((slice(0, half), slice(half, None))):
        table = pa.table({"src": edges[rows, 0], "dst": edges[rows, 1], "w": weights[rows]})
        pq.write_table(table, root / "edges.parquet" / f"part-{part}.parquet", row_group_size=300)
    np.save(root / "edges.npy", edges)
    np.save(root / "y.npy", y)
    np.savez(root / "nodes.npz", X=X, y=y)
    return {
        "root": root,
        "X": X,
        "y": y,
        "truth": truth,
        "edges": edges,
        "weighted": np.column_stack([edges, weights]),
    }


def test_graph_alone_fit_and_predict(graph, tmp_path, capsys):
    """Labels from .npy, weighted Parquet edges by column name: the model file predicts
    every node as the in-memory fit does, and the summary records the graph."""
    root = graph["root"]
    oracle = EncoderClassifier(graph_laplacian=True).fit(None, graph["y"], graph=graph["weighted"])
    code, fit, err = run(
        capsys,
        "fit", "encoder", "--edges", root / "edges.parquet", "--edge-columns", "src,dst,w",
        "--labels", root / "y.npy", "--model-out", tmp_path / "m",
        "--set", "graph_laplacian=true",
    )  # fmt: skip
    assert code == 0, err
    assert fit["data"] is None and fit["passes"] == 0
    assert fit["graph"] == {
        "edges": str(root / "edges.parquet"),
        "columns": {"source": "src", "target": "dst", "weight": "w"},
        "edge_count": len(graph["edges"]),
        "weighted": True,
        "nodes": 400,
        "labels": str(root / "y.npy"),
        "options": {
            "graph_fusion": "concat",
            "graph_normalize": True,
            "graph_laplacian": True,
            "graph_self_loops": False,
            "graph_directed": False,
        },
        "embeddings": ["graph"],
        "embedding": "graph",
        "edge_passes": 1,  # the Laplacian's degrees and the embedding in one pass
    }
    assert fit["model"]["embedding_"] == "graph"
    code, pred, err = run(
        capsys,
        "predict", "--model", tmp_path / "m", "--edges", root / "edges.parquet",
        "--edge-columns", "src,dst,w", "--out", tmp_path / "pred.parquet",
    )  # fmt: skip
    assert code == 0, err
    assert pred["output"]["rows"] == 400 and pred["data"] is None and pred["passes"] == 0
    assert pred["graph"]["nodes"] == 400 and pred["graph"]["edge_count"] == len(graph["edges"])
    assert pred["graph"]["edge_passes"] == 1  # the Laplacian's degrees and Z in one pass
    got = pd.read_parquet(tmp_path / "pred.parquet")["prediction"].to_numpy()
    expected = oracle.predict(None, graph=graph["weighted"])
    np.testing.assert_array_equal(got, expected)
    assert np.mean(expected == graph["truth"]) > 0.8  # a graph worth predicting from


def test_features_and_graph_fit_predict_embed(graph, tmp_path, capsys):
    """Features and labels from .npz, unweighted (s, 2) .npy edges, directed: labels,
    probabilities (Zarr) and the embedding equal the in-memory model's."""
    root, X, y, edges = graph["root"], graph["X"], graph["y"], graph["edges"]
    params = {"kernels": ("linear", "euclidean"), "graph_directed": True}
    oracle = EncoderClassifier(**params).fit(X, y, graph=edges)
    code, fit, err = run(
        capsys,
        "fit", "encoder", "--data", root / "nodes.npz", "--edges", root / "edges.npy",
        "--model-out", tmp_path / "m", "--set", "kernels=linear,euclidean",
        "--set", "graph_directed=true", "--chunk-rows", 150,
    )  # fmt: skip
    assert code == 0, err
    assert fit["data"]["rows"] == 400 and fit["data"]["features"] == 5
    assert fit["graph"]["weighted"] is False and fit["graph"]["columns"] == {
        "source": 0,
        "target": 1,
    }
    assert fit["graph"]["embeddings"] == oracle.embeddings_
    assert fit["graph"]["embedding"] == oracle.embedding_ == fit["model"]["embedding_"]
    assert fit["passes"] == oracle.n_passes_
    common = ["--model", tmp_path / "m", "--data", root / "nodes.npz", "--edges"]
    code, _, err = run(capsys, "predict", *common, root / "edges.npy", "--out", tmp_path / "p.zarr")
    assert code == 0, err
    got = da.from_zarr(str(tmp_path / "p.zarr")).compute()
    np.testing.assert_array_equal(got, oracle.predict(X, graph=edges))
    code, proba, err = run(
        capsys, "predict", *common, root / "edges.npy", "--out", tmp_path / "p.parquet", "--proba"
    )
    assert code == 0, err
    assert proba["output"]["columns"] == ["proba_0", "proba_1", "proba_2"]
    assert proba["passes"] == 1 and proba["graph"]["edge_passes"] == 1
    np.testing.assert_allclose(
        pd.read_parquet(tmp_path / "p.parquet").to_numpy(),
        oracle.predict_proba(X, graph=edges),
        rtol=1e-10,
        atol=1e-12,
    )
    code, emb, err = run(
        capsys, "embed", *common, root / "edges.npy", "--out", tmp_path / "z.parquet"
    )
    assert code == 0, err
    Z = pd.read_parquet(tmp_path / "z.parquet").to_numpy()
    assert Z.shape == (400, 3 + 6)  # δ(X, U) beside the sender and receiver embeddings
    np.testing.assert_allclose(Z, oracle.transform(X, graph=edges), rtol=1e-10, atol=1e-12)


def test_text_summary_names_the_graph(graph, tmp_path, capsys):
    root = graph["root"]
    code, out, err = run_text(
        capsys,
        "fit", "encoder", "--edges", root / "edges.npy", "--labels", root / "y.npy",
        "--model-out", tmp_path / "m",
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    edges = len(graph["edges"])
    assert lines[0] == f"fit encoder (EncoderClassifier) on the graph {root / 'edges.npy'} " + (
        f"(400 nodes, {edges} edges)"
    )
    assert lines[1] == f"  graph: fusion concat, normalize; labels {root / 'y.npy'}"
    assert lines[2] == "  embedding chosen: graph"
    assert lines[3].startswith("  1 pass over the edges in ")
    assert f"edges {root / 'edges.npy'}: {edges} edges, unweighted, 1 edge block" in err


def test_job_file_takes_the_graph_keys(graph, tmp_path, capsys):
    """`edges` and `edge_columns` in a job's steps, relative to its workdir."""
    root = graph["root"]
    job = tmp_path / "job.toml"
    job.write_text(
        f"""
[job]
workdir = "{root}"

[[step]]
command = "fit"
method = "encoder"
edges = "edges.parquet"
edge_columns = "src,dst"
labels = "y.npy"
model_out = "{tmp_path / "m"}"
set = {{ graph_self_loops = true }}

[[step]]
command = "predict"
model = "{tmp_path / "m"}"
edges = "edges.parquet"
edge_columns = "0,1"
out = "{tmp_path / "pred.parquet"}"
"""
    )
    code, summary, err = run(capsys, "run", job)
    assert code == 0, err
    fit, pred = summary["steps"]
    assert fit["graph"]["edges"] == str(root / "edges.parquet") and not fit["graph"]["weighted"]
    assert fit["graph"]["options"]["graph_self_loops"] is True
    assert pred["output"]["rows"] == 400
    oracle = EncoderClassifier(graph_self_loops=True).fit(None, graph["y"], graph=graph["edges"])
    np.testing.assert_array_equal(
        pd.read_parquet(tmp_path / "pred.parquet")["prediction"].to_numpy(),
        oracle.predict(None, graph=graph["edges"]),
    )


def test_cora_through_the_command(tmp_path, capsys):
    """Cora's citation graph and bag-of-words features, the test nodes' labels hidden: the
    command's predictions are the API's."""
    data = shared_dataset("cora")
    X, y, edges = data["X"], data["y"].copy(), data["edges"].T
    y[data["test_idx"]] = -1
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    pq.write_table(pa.table({"a": edges[:, 0], "b": edges[:, 1]}), tmp_path / "e.parquet")
    oracle = EncoderClassifier(kernels=("linear",)).fit(X, y, graph=edges)
    common = ["--data", tmp_path / "X.npy", "--labels", tmp_path / "y.npy"]
    code, fit, err = run(
        capsys,
        "fit", "encoder", *common, "--edges", tmp_path / "e.parquet",
        "--model-out", tmp_path / "m", "--set", "kernels=linear",
    )  # fmt: skip
    assert code == 0, err
    assert fit["graph"]["nodes"] == 2708 and fit["graph"]["edge_count"] == edges.shape[0]
    code, _, err = run(
        capsys,
        "predict", "--model", tmp_path / "m", "--data", tmp_path / "X.npy",
        "--edges", tmp_path / "e.parquet", "--out", tmp_path / "p.parquet",
    )  # fmt: skip
    assert code == 0, err
    got = pd.read_parquet(tmp_path / "p.parquet")["prediction"].to_numpy()
    expected = oracle.predict(X, graph=edges)
    np.testing.assert_array_equal(got, expected)
    test = data["test_idx"]
    assert np.mean(got[test] == data["y"][test]) > 0.75


def test_a_failing_predict_leaves_no_output(graph, tmp_path, capsys):
    """An edge beyond the training nodes fails while the output is written (exit 2): no
    file is left that looks complete."""
    root = graph["root"]
    code, _, err = run(
        capsys,
        "fit", "encoder", "--edges", root / "edges.npy", "--labels", root / "y.npy",
        "--model-out", tmp_path / "m",
    )  # fmt: skip
    assert code == 0, err
    bad = np.concatenate([graph["edges"], [[3, 400]]])
    np.save(tmp_path / "bad.npy", bad)
    for out in ("p.parquet", "p.zarr"):
        code, summary, err = run(
            capsys,
            "predict", "--model", tmp_path / "m", "--edges", tmp_path / "bad.npy",
            "--out", tmp_path / out,
        )  # fmt: skip
        assert code == 2, err
        assert (
            f"Edge {len(bad) - 1} joins nodes 3 and 400, but the graph has 400 nodes (ids 0 "
            "… 399): one per label at fit; at predict one per row of X, or the training "
            "nodes of a model fitted on the graph alone." in (summary["error"]["message"])
        )
        assert not (tmp_path / out).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.npy", "m"]


def test_evaluate_scores_the_labeled_nodes(graph, models, tmp_path, capsys):
    """The true labels of every node against the predictions of the graph-alone and fused
    models, as their score(..., graph=) says."""
    root, X, truth, edges = graph["root"], graph["X"], graph["truth"], graph["edges"]
    np.save(tmp_path / "truth.npy", truth)
    np.savez(tmp_path / "truth.npz", X=X, y=truth)
    alone = EncoderClassifier().fit(None, graph["y"], graph=edges)
    fused = EncoderClassifier(kernels=("linear",)).fit(X, graph["y"], graph=edges)
    for model, oracle, inputs in (
        (models["alone"], alone.score(None, truth, graph=edges), ["--labels", "truth.npy"]),
        (models["fused"], fused.score(X, truth, graph=edges), ["--data", "truth.npz"]),
    ):
        inputs = [inputs[0], tmp_path / inputs[1]]
        code, summary, err = run(
            capsys, "evaluate", "--model", model, "--edges", root / "edges.npy", *inputs
        )
        assert code == 0, err
        assert summary["scores"]["accuracy"] == pytest.approx(oracle, abs=1e-12)
        assert summary["scores"]["labeled_rows"] == 400
        assert summary["graph"]["nodes"] == 400
    code, out, err = run_text(
        capsys,
        "evaluate", "--model", models["alone"], "--edges", root / "edges.npy",
        "--labels", tmp_path / "truth.npy",
    )  # fmt: skip
    assert code == 0, err
    head, graph_line, scores = out.splitlines()[:3]
    edges_path = root / "edges.npy"
    assert head == f"evaluate {models['alone']} (EncoderClassifier) on the graph {edges_path} " + (
        f"(400 nodes, {len(edges)} edges)"
    )
    assert graph_line == f"  graph: labels {tmp_path / 'truth.npy'}"
    assert scores.startswith(f"  accuracy {alone.score(None, truth, graph=edges):.4f} on 400")


@pytest.fixture(scope="module")
def models(graph, tmp_path_factory):
    """A graph-alone model, a features+graph model and a plain encoder model."""
    root = graph["root"]
    out = tmp_path_factory.mktemp("models")
    X, y, edges = graph["X"], graph["y"], graph["edges"]
    save_model(EncoderClassifier().fit(None, y, graph=edges), out / "alone")
    save_model(EncoderClassifier(kernels=("linear",)).fit(X, y, graph=edges), out / "fused")
    save_model(EncoderClassifier(kernels=("linear",)).fit(X, np.abs(y)), out / "plain")
    return {"root": root, "alone": out / "alone", "fused": out / "fused", "plain": out / "plain"}


BAD = {
    "nrbfn": (
        ["fit", "nrbfn", "--data", "{root}/nodes.npz", "--edges", "{root}/edges.npy",
         "--model-out", "{tmp}/m"],
        r"--edges is an input of the encoder only \(`scalenc fit encoder --edges "
        r".*edges.npy \.\.\.`\); NRBFNClassifier \(METHOD nrbfn\) takes no graph\.",
    ),
    "checkpoint": (
        ["fit", "encoder", "--data", "{root}/nodes.npz", "--edges", "{root}/edges.npy",
         "--model-out", "{tmp}/m", "--checkpoint", "{tmp}/ck"],
        r"--checkpoint cannot be used with --edges yet: a fit with a graph is not "
        r"checkpointed .* Drop --checkpoint\.",
    ),
    "set-checkpoint": (
        ["fit", "encoder", "--labels", "{root}/y.npy", "--edges", "{root}/edges.npy",
         "--model-out", "{tmp}/m", "--set", "checkpoint={tmp}/ck"],
        r"--set checkpoint cannot be used with --edges yet",
    ),
    "no-labels": (
        ["fit", "encoder", "--edges", "{root}/edges.npy", "--model-out", "{tmp}/m"],
        r"fit --edges without --data fits the graph alone and needs the nodes' labels: "
        r"--labels PATH",
    ),
    "label-column-alone": (
        ["fit", "encoder", "--edges", "{root}/edges.npy", "--label-column", "y",
         "--model-out", "{tmp}/m"],
        r"fit --edges without --data fits the graph alone and needs the nodes' labels",
    ),
    "columns-without-edges": (
        ["fit", "encoder", "--data", "{root}/nodes.npz", "--edge-columns", "a,b",
         "--model-out", "{tmp}/m"],
        r"--edge-columns a,b is about the graph of --edges; give --edges PATH too",
    ),
    "node-column-without-edges": (
        ["fit", "encoder", "--data", "{root}/nodes.npz", "--node-column", "id",
         "--model-out", "{tmp}/m"],
        r"--node-column id is about the graph of --edges; give --edges PATH too",
    ),
    "labels-and-label-column": (
        ["fit", "encoder", "--data", "{root}/nodes.npz", "--labels", "{root}/y.npy",
         "--label-column", "y", "--model-out", "{tmp}/m"],
        r"--labels and --label-column both name the labels: give --label-column for a column",
    ),
    "node-column-of-no-table": (
        ["fit", "encoder", "--labels", "{root}/y.npy", "--edges", "{root}/edges.npy",
         "--node-column", "id", "--model-out", "{tmp}/m"],
        r"--node-column id names a column of a table of the nodes: of --data, or for a graph "
        r"alone of --labels with --label-column",
    ),
    "bad-columns": (
        ["fit", "encoder", "--data", "{root}/nodes.npz", "--edges", "{root}/edges.parquet",
         "--edge-columns", "src", "--model-out", "{tmp}/m"],
        r"--edge-columns takes SRC,DST or SRC,DST,WEIGHT .* got 'src'\.",
    ),
    "unknown-column": (
        ["fit", "encoder", "--data", "{root}/nodes.npz", "--edges", "{root}/edges.parquet",
         "--edge-columns", "src,dest", "--model-out", "{tmp}/m"],
        r"The edge table has no target column 'dest'; its columns are \['src', 'dst', 'w'\]",
    ),
    "missing-edges": (
        ["fit", "encoder", "--data", "{root}/nodes.npz", "--edges", "{tmp}/none.npy",
         "--model-out", "{tmp}/m"],
        r"--edges .*none\.npy' does not exist\.",
    ),
    "predict-without-edges": (
        ["predict", "--model", "{alone}", "--data", "{root}/nodes.npz", "--out", "{tmp}/p.zarr"],
        r"alone was fitted on the graph alone: pass --edges PATH, the graph of the nodes to predict",
    ),
    "predict-alone-with-data": (
        ["predict", "--model", "{alone}", "--data", "{root}/nodes.npz",
         "--edges", "{root}/edges.npy", "--out", "{tmp}/p.zarr"],
        r"alone was fitted on the graph alone: drop --data",
    ),
    "predict-fused-without-data": (
        ["predict", "--model", "{fused}", "--edges", "{root}/edges.npy", "--out", "{tmp}/p.zarr"],
        r"fused was fitted with node features and a graph: pass --data \(one row per node\)",
    ),
    "predict-plain-with-edges": (
        ["predict", "--model", "{plain}", "--data", "{root}/nodes.npz",
         "--edges", "{root}/edges.npy", "--out", "{tmp}/p.zarr"],
        r"--edges is for an encoder fitted with a graph .* holds an EncoderClassifier fitted "
        r"without a graph\. Drop --edges\.",
    ),
    "evaluate-without-edges": (
        ["evaluate", "--model", "{fused}", "--data", "{root}/nodes.npz"],
        r"fused was fitted with node features and a graph: pass --edges PATH, the graph of the "
        r"nodes to evaluate",
    ),
    "evaluate-alone-without-labels": (
        ["evaluate", "--model", "{alone}", "--edges", "{root}/edges.npy"],
        r"evaluate of .*alone, fitted on the graph alone, needs the nodes' labels: --labels",
    ),
    "report": (
        ["report", "--model", "{fused}", "--out", "{tmp}/r.html"],
        r"scalenc report takes no graph yet, and .*fused was fitted with one\. Score it with "
        r"`scalenc evaluate --model MODEL --edges PATH \.\.\.`",
    ),
    "device": (
        ["fit", "encoder", "--data", "{root}/nodes.npz", "--edges", "{root}/edges.npy",
         "--device", "gpu", "--model-out", "{tmp}/m"],
        r"--device gpu cannot be used with --edges yet: the graph embedding is computed on "
        r"the host",
    ),
    "update": (
        ["fit", "encoder", "--update", "{fused}", "--data", "{root}/nodes.npz",
         "--edges", "{root}/edges.npy", "--model-out", "{tmp}/m"],
        r"--update cannot take --edges: a model fitted with a graph keeps no running sums",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD))
def test_bad_graph_arguments_exit_2(case, models, tmp_path, capsys):
    argv, message = BAD[case]
    names = {"root": models["root"], "tmp": tmp_path, **models}
    code, summary, err = run(capsys, *(a.format(**names) for a in argv))
    assert code == 2, err
    assert re.search(message, summary["error"]["message"]), summary["error"]["message"]
    assert not (tmp_path / "m").exists() and not (tmp_path / "p.zarr").exists()


def test_data_stays_required_without_edges(capsys):
    assert cli.main(["fit", "encoder", "--model-out", "m"]) == 2
    assert "the following arguments are required: --data" in capsys.readouterr().err
    # predict needs --data unless its model was fitted on a graph alone: the model decides
    assert cli.main(["predict", "--model", "m", "--out", "p.zarr"]) == 2
    assert "--model 'm' does not exist" in capsys.readouterr().err


def test_graph_alone_with_zarr_labels_in_node_blocks(graph, tmp_path, capsys):
    """Labels as a Zarr array, --chunk-rows their node blocks; a Zarr group is refused
    with the path of its array."""
    root = graph["root"]
    da.to_zarr(da.from_array(graph["y"], chunks=100), str(tmp_path / "nodes.zarr"), component="y")
    common = ["fit", "encoder", "--edges", root / "edges.npy", "--model-out", tmp_path / "m"]
    code, fit, err = run(
        capsys, *common, "--labels", tmp_path / "nodes.zarr" / "y", "--chunk-rows", 128
    )
    assert code == 0, err
    oracle = EncoderClassifier().fit(None, graph["y"], graph=graph["edges"])
    code, _, err = run(
        capsys,
        "predict", "--model", tmp_path / "m", "--edges", root / "edges.npy",
        "--out", tmp_path / "p.parquet",
    )  # fmt: skip
    assert code == 0, err
    np.testing.assert_array_equal(
        pd.read_parquet(tmp_path / "p.parquet")["prediction"].to_numpy(),
        oracle.predict(None, graph=graph["edges"]),
    )
    code, summary, err = run(capsys, *common, "--labels", tmp_path / "nodes.zarr", "--overwrite")
    assert code == 2, err
    assert (
        "is a Zarr group; labels are one array: give its path (e.g. "
        in (summary["error"]["message"])
    )


def test_nodes_named_by_a_column(graph, tmp_path, capsys):
    """A table of the nodes (string ids, features, labels) in another order than the
    edges' numbering, and edges naming nodes by id: fit, predict, evaluate — fused and
    the graph alone — give each node what the in-memory fit by position gives it."""
    X, y, truth, edges = graph["X"], graph["y"], graph["truth"], graph["edges"]
    rng = np.random.default_rng(7)
    ids = np.array([f"paper-{i}" for i in rng.choice(10**9, size=y.size, replace=False)])
    order = rng.permutation(y.size)
    table = pd.DataFrame({f"f{j}": X[order, j] for j in range(X.shape[1])})
    table.insert(2, "id", ids[order])  # among the features' columns: never one of them
    table["y"], table["truth"] = y[order], truth[order]
    table.to_parquet(tmp_path / "nodes.parquet", row_group_size=150)
    pd.DataFrame({"src": ids[edges[:, 0]], "dst": ids[edges[:, 1]]}).to_parquet(
        tmp_path / "edges.parquet", row_group_size=500
    )
    edge_args = ["--edges", tmp_path / "edges.parquet", "--edge-columns", "src,dst"]
    nodes = ["--node-column", "id", "--label-column"]
    fused = EncoderClassifier(kernels=("linear",)).fit(X, y, graph=edges)
    alone = EncoderClassifier().fit(None, y, graph=edges)
    for name, model, inputs in (
        ("fused", fused, ["--data", tmp_path / "nodes.parquet", "--feature-columns", "f*"]),
        ("alone", alone, ["--labels", tmp_path / "nodes.parquet"]),
    ):
        code, fit, err = run(
            capsys,
            "fit", "encoder", *inputs, *edge_args, *nodes, "y", "--model-out", tmp_path / name,
            "--set", "kernels=linear",
        )  # fmt: skip
        assert code == 0, err
        assert fit["graph"]["node_column"] == "id" and fit["graph"]["nodes"] == y.size
        if name == "fused":
            assert fit["data"]["features"] == X.shape[1]  # the id column is not a feature
        data = inputs if name == "fused" else []
        code, _, err = run(
            capsys,
            "predict", "--model", tmp_path / name, *data, *edge_args, "--out",
            tmp_path / f"{name}.parquet", *(["--node-column", "id"] if data else []),
        )  # fmt: skip
        assert code == 0, err
        got = pd.read_parquet(tmp_path / f"{name}.parquet")["prediction"].to_numpy()
        X_in = X if name == "fused" else None
        np.testing.assert_array_equal(got, model.predict(X_in, graph=edges)[order])
        labels = data or inputs
        code, scores, err = run(
            capsys,
            "evaluate", "--model", tmp_path / name, *labels, *edge_args, *nodes, "truth",
        )  # fmt: skip
        assert code == 0, err
        expected = model.score(X_in, truth, graph=edges)
        assert scores["scores"]["accuracy"] == pytest.approx(expected, abs=1e-12)
