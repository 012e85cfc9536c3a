"""Model files of an EncoderClassifier fitted with a graph: the saved model predicts every
node as the fitted one does (graph alone, fused, chosen; directed, Laplacian), the file
holds the training nodes' class codes (schema version 2), and a damaged one is refused."""

from __future__ import annotations

import hashlib
import json

import dask.array as da
import numpy as np
import pytest
from test_encoder_graph_fit import planted_graph

from scalenc import EncoderClassifier, load_model, read_model_metadata, save_model
from scalenc.exceptions import ModelFileError
from scalenc.persist import files

CASES = {
    "graph-alone": (False, {}),
    "graph-alone-directed-laplacian": (
        False,
        {"graph_directed": True, "graph_laplacian": True, "graph_self_loops": True},
    ),
    "fused": (True, {"kernels": ("linear",)}),
    "fused-directed": (True, {"kernels": ("linear", "euclidean"), "graph_directed": True}),
    "chosen-laplacian": (
        True,
        {"kernels": ("linear", "euclidean"), "graph_fusion": "choose", "graph_laplacian": True},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_saved_graph_model_predicts_as_the_fitted_one(case, tmp_path):
    features, params = CASES[case]
    X, y, _, edges = planted_graph(seed=3)
    X = X if features else None
    model = EncoderClassifier(**params).fit(X, y, graph=edges)
    loaded = load_model(save_model(model, tmp_path / "m"))
    assert loaded.embedding_ == model.embedding_ and loaded.embeddings_ == model.embeddings_
    np.testing.assert_array_equal(loaded.predict(X, graph=edges), model.predict(X, graph=edges))
    np.testing.assert_allclose(
        loaded.predict_proba(X, graph=edges), model.predict_proba(X, graph=edges), atol=1e-12
    )
    np.testing.assert_allclose(
        loaded.transform(X, graph=edges), model.transform(X, graph=edges), atol=1e-12
    )
    # a lazy edge list: lazy predictions, the same
    lazy = da.from_array(edges, chunks=(500, 2))
    np.testing.assert_array_equal(
        np.asarray(loaded.predict(X, graph=lazy)), model.predict(X, graph=edges)
    )


@pytest.mark.filterwarnings("ignore::scalenc.exceptions.NoLabeledNeighbourWarning")
def test_graph_model_file_holds_the_class_codes(tmp_path):
    X, y, _, edges = planted_graph(seed=4)
    model = EncoderClassifier().fit(None, y, graph=edges)
    path = save_model(model, tmp_path / "m")
    doc = read_model_metadata(path)
    assert doc["schema_version"] == 2 < files.SCHEMA_VERSION  # no node ids: version 2
    (rel,) = [r for r in doc["files"] if r.endswith("_graph_codes.npy")]
    codes = np.load(tmp_path / "m" / rel, allow_pickle=False)
    assert codes.dtype == np.int8 and codes.shape == y.shape  # one byte a node
    np.testing.assert_array_equal(codes, np.where(y >= 0, y, -1))
    # a model without a graph is still written as version 1
    plain = save_model(EncoderClassifier().fit(X, np.abs(y)), tmp_path / "plain")
    assert read_model_metadata(plain)["schema_version"] == 1


def _rewrite_array(path, suffix, edit):
    """Replace one array file and re-sign it (a careful forger)."""
    doc = json.loads((path / "model.json").read_text())
    (rel,) = [r for r in doc["files"] if r.endswith(suffix)]
    arr = edit(np.load(path / rel, allow_pickle=False))
    np.save(path / rel, arr, allow_pickle=False)
    raw = (path / rel).read_bytes()
    doc["files"][rel].update(
        sha256=hashlib.sha256(raw).hexdigest(),
        bytes=len(raw),
        shape=list(arr.shape),
        dtype=arr.dtype.str,
    )
    doc["checksum"] = files._canonical_sha256(doc)
    (path / "model.json").write_text(json.dumps(doc))


@pytest.mark.filterwarnings("ignore::scalenc.exceptions.NoLabeledNeighbourWarning")
def test_graph_model_with_altered_codes_is_refused(tmp_path):
    _, y, _, edges = planted_graph(seed=5)
    path = tmp_path / "m"
    save_model(EncoderClassifier().fit(None, y, graph=edges), path)

    def bad_code(codes):
        codes = codes.copy()
        codes[7] = 3
        return codes

    _rewrite_array(path, "_graph_codes.npy", bad_code)
    with pytest.raises(
        ModelFileError,
        match=r"EncoderClassifier\._graph_codes holds codes from -1 to 3; expected −1 … "
        r"K − 1 = 2 \(K from len\(EncoderClassifier\.classes_\)\)",
    ):
        load_model(path)


def test_graph_model_with_a_coef_of_another_width_is_refused(tmp_path):
    X, y, _, edges = planted_graph(seed=6)
    path = tmp_path / "m"
    save_model(EncoderClassifier(kernels=("linear",)).fit(X, y, graph=edges), path)
    _rewrite_array(path, "coef_.npy", lambda coef: coef[:, :3])
    with pytest.raises(
        ModelFileError,
        match=r"EncoderClassifier\.coef_ has shape \(3, 3\) .* expected shape \(3, 6\)",
    ):
        load_model(path)


def test_saved_graph_model_predicts_new_nodes(tmp_path):
    """Nodes beyond the training nodes, joined to them by their edges: the loaded model
    (its class codes from the file) predicts them as the fitted one (lazy codes)."""
    X, y, _, edges = planted_graph(seed=4, unlabeled=0.0)
    train = 250
    inside = (edges < train).all(axis=1)
    model = EncoderClassifier(kernels=("linear",)).fit(X[:train], y[:train], graph=edges[inside])
    loaded = load_model(save_model(model, tmp_path / "m"))
    np.testing.assert_array_equal(loaded.predict(X, graph=edges), model.predict(X, graph=edges))
    Xd = da.from_array(X, chunks=(64, -1))
    np.testing.assert_array_equal(
        loaded.predict(Xd, graph=edges).compute(), model.predict(X, graph=edges)
    )
