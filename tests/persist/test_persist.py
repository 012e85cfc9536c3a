"""Model files: round trips for every estimator, refusal of damaged or altered files."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import make_blobs

from scalenc import CCDR, CCDRClassifier, LRClassifier, NRBFNClassifier, persist
from scalenc.encoder.estimator import EncoderClassifier
from scalenc.encoder.kernels import Gaussian
from scalenc.persist import ModelFileError, load_model, read_model_metadata, save_model

# (id, class, params, string labels?)
CASES = [
    ("encoder-linear", EncoderClassifier, {}, False),
    (
        "encoder-multikernel",
        EncoderClassifier,
        {"kernels": ("linear", "euclidean", "spearman", Gaussian(sigma=2.0), "gaussian")},
        False,
    ),
    ("encoder-strings", EncoderClassifier, {"kernels": ["linear", "euclidean"]}, True),
    ("nrbfn", NRBFNClassifier, {"random_state": 0, "alpha": "cv", "cv": 3}, False),
    ("nrbfn-plain-kernel", NRBFNClassifier, {"random_state": 0, "normalize": False}, False),
    ("lrc", LRClassifier, {}, True),
    ("ccdr", CCDR, {"random_state": 0, "n_subsamples": 2}, False),
    ("ccdr-linear", CCDRClassifier, {"random_state": 0}, False),
    ("ccdr-lda", CCDRClassifier, {"random_state": 0, "classifier": "lda"}, True),
    ("ccdr-knn", CCDRClassifier, {"random_state": 0, "classifier": "knn"}, False),
]


@pytest.fixture(scope="module")
def data():
    X, y = make_blobs(n=400, p=5, K=3, seed=1, sep=1.0, unlabeled=0.05)
    return X, y


def _outputs(est, X):
    out = {}
    for method in ("predict", "predict_proba", "decision_function", "transform"):
        if hasattr(est, method):
            out[method] = np.asarray(getattr(est, method)(X))
    return out


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_saved_model_predicts_identically(case, data, tmp_path):
    _, estimator, params, strings = case
    X, y = data
    if strings:
        y = np.where(y < 0, None, np.array(["ant", "bee", "cat"], dtype=object)[y % 3]).astype(
            object
        )
    est = estimator(**params).fit(X, y)
    path = save_model(est, tmp_path / "model")
    loaded = load_model(path)
    assert type(loaded) is type(est)
    assert loaded.get_params() == est.get_params()
    before, after = _outputs(est, X), _outputs(loaded, X)
    assert before.keys() == after.keys() and before
    for key in before:
        np.testing.assert_array_equal(after[key], before[key], err_msg=key)
    # nothing but the model is left next to it (no temporary directories)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_files_are_json_and_plain_npy(data, tmp_path):
    X, y = data
    est = EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y)
    path = Path(save_model(est, tmp_path / "m"))
    doc = json.loads((path / "model.json").read_text())
    # a model without a graph: the oldest schema version that describes it
    assert doc["format"] == "scalenc-model" and doc["schema_version"] == 1
    assert doc["estimator"] == "scalenc.encoder.EncoderClassifier"
    assert doc["classes"] == [0, 1, 2]
    assert {"scalenc", "numpy", "python"} <= set(doc["versions"])
    assert doc["model"]["params"]["kernels"] == {"__tuple__": ["linear", "euclidean"]}
    for rel, info in doc["files"].items():
        raw = (path / rel).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == info["sha256"]
        arr = np.load(path / rel, allow_pickle=False)
        assert list(arr.shape) == info["shape"]


def test_partial_fit_continues_after_loading(data, tmp_path):
    X, y = data
    a = EncoderClassifier(kernels=("linear", "euclidean")).partial_fit(
        X[:200], y[:200], classes=[0, 1, 2]
    )
    b = load_model(save_model(a, tmp_path / "m"))
    a.partial_fit(X[200:], y[200:])
    b.partial_fit(X[200:], y[200:])
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))


def test_user_callable_kernel_cannot_be_saved(data, tmp_path):
    X, y = data
    est = EncoderClassifier(kernels=[lambda A, U: A @ U.T]).fit(X, y)
    with pytest.raises(ModelFileError, match="user callable kernel cannot be saved"):
        save_model(est, tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_full_method_keeps_data_and_is_refused(data, tmp_path):
    X, y = data
    est = EncoderClassifier(method="full").fit(X, y)
    with pytest.raises(ModelFileError, match="use method='fast'"):
        save_model(est, tmp_path / "m")


def test_unfitted_and_foreign_estimators_are_refused(tmp_path):
    from sklearn.linear_model import LogisticRegression

    with pytest.raises(ModelFileError, match="not fitted yet"):
        save_model(EncoderClassifier(), tmp_path / "m")
    with pytest.raises(ModelFileError, match="Use joblib/pickle for other objects"):
        save_model(LogisticRegression(), tmp_path / "m")


def test_existing_directory_needs_overwrite(data, tmp_path):
    X, y = data
    est = EncoderClassifier().fit(X, y)
    save_model(est, tmp_path / "m")
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        save_model(est, tmp_path / "m")
    est2 = EncoderClassifier(kernels="euclidean").fit(X, y)
    save_model(est2, tmp_path / "m", overwrite=True)
    assert load_model(tmp_path / "m").kernels == "euclidean"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


# --- damaged and altered files ---------------------------------------------------------


@pytest.fixture
def saved(data, tmp_path):
    X, y = data
    return Path(
        save_model(EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y), tmp_path / "m")
    )


def _rewrite(path: Path, edit) -> None:
    """Edit model.json and re-sign it, as a careful forger (or an old scalenc) would."""
    doc = json.loads((path / "model.json").read_text())
    edit(doc)
    doc["checksum"] = persist.files._canonical_sha256(doc)
    (path / "model.json").write_text(json.dumps(doc))


def _first_array(path: Path) -> Path:
    return sorted((path / "arrays").iterdir())[0]


def test_flipped_byte_in_an_array_is_refused(saved):
    target = _first_array(saved)
    raw = bytearray(target.read_bytes())
    raw[-1] ^= 0xFF
    target.write_bytes(bytes(raw))
    with pytest.raises(ModelFileError, match="SHA-256 does not match"):
        load_model(saved)


def test_truncated_array_is_refused(saved):
    target = _first_array(saved)
    target.write_bytes(target.read_bytes()[:-8])
    with pytest.raises(ModelFileError, match="is truncated or damaged"):
        load_model(saved)


def test_missing_array_is_refused(saved):
    _first_array(saved).unlink()
    with pytest.raises(ModelFileError, match="is incomplete: the array file"):
        load_model(saved)


def test_truncated_metadata_is_refused(saved):
    meta = saved / "model.json"
    meta.write_text(meta.read_text()[:200])
    with pytest.raises(ModelFileError, match="corrupted or truncated: not valid JSON"):
        load_model(saved)


def test_edited_metadata_is_refused(saved):
    meta = saved / "model.json"
    meta.write_text(meta.read_text().replace('"min_improvement": 0.3', '"min_improvement": 0.9'))
    with pytest.raises(ModelFileError, match="checksum does not match"):
        load_model(saved)


def test_missing_directory_and_metadata(tmp_path):
    with pytest.raises(ModelFileError, match="is not a model directory"):
        load_model(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFileError, match="has no model.json"):
        load_model(tmp_path / "empty")


def test_types_outside_the_whitelist_are_refused(saved):
    def inject(doc):
        doc["model"]["state"]["kernel_"] = {"__type__": "os.system", "fields": {}}

    _rewrite(saved, inject)
    with pytest.raises(ModelFileError, match="'os.system', which is not one a scalenc model file"):
        load_model(saved)

    def swap_estimator(doc):
        doc["estimator"] = doc["model"]["__estimator__"] = "subprocess.Popen"

    _rewrite(saved, swap_estimator)
    with pytest.raises(ModelFileError, match="not one a scalenc model file may hold"):
        load_model(saved)


def test_pickled_array_is_refused(saved):
    target = _first_array(saved)
    np.save(target, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    rel = f"arrays/{target.name}"

    def resign(doc):
        doc["files"][rel]["sha256"] = hashlib.sha256(target.read_bytes()).hexdigest()
        doc["files"][rel]["bytes"] = target.stat().st_size

    _rewrite(saved, resign)
    with pytest.raises(ModelFileError, match="cannot be read without pickle"):
        load_model(saved)


def test_newer_schema_fails_with_upgrade_hint(saved):
    _rewrite(saved, lambda doc: doc.update(schema_version=persist.SCHEMA_VERSION + 1))
    newer = persist.SCHEMA_VERSION + 1
    with pytest.raises(ModelFileError, match=rf"schema version {newer}.*Upgrade scalenc to load"):
        load_model(saved)


def test_older_schema_unsupported_fails_clearly(saved):
    _rewrite(saved, lambda doc: doc.update(schema_version=0))
    with pytest.raises(ModelFileError, match="can no longer read"):
        load_model(saved)


def test_older_schema_is_migrated_when_compatible(saved, data, monkeypatch):
    """A version-0 file whose migration is registered loads (here: renamed key)."""

    def downgrade(doc):
        doc["schema_version"] = 0
        doc["estimator_class"] = doc.pop("estimator")

    def upgrade(doc):
        doc = dict(doc, schema_version=1)
        doc["estimator"] = doc.pop("estimator_class")
        return doc

    _rewrite(saved, downgrade)
    monkeypatch.setattr(persist.files, "MIN_SCHEMA_VERSION", 0)
    monkeypatch.setitem(persist.files._MIGRATIONS, 0, upgrade)
    est = load_model(saved)
    assert read_model_metadata(saved)["schema_version"] == 1
    X, _ = data
    assert est.predict(X).shape == (X.shape[0],)


def test_unknown_parameter_from_another_version(saved):
    def add_param(doc):
        doc["model"]["params"]["future_option"] = 1

    _rewrite(saved, add_param)
    with pytest.raises(ModelFileError, match=r"parameter\(s\) \['future_option'\]"):
        load_model(saved)


def test_array_path_outside_the_directory_is_refused(saved, tmp_path):
    outside = tmp_path / "outside.npy"
    np.save(outside, np.zeros(3))

    def point_outside(doc):
        doc["files"]["../outside.npy"] = {
            "sha256": hashlib.sha256(outside.read_bytes()).hexdigest(),
            "bytes": os.path.getsize(outside),
            "shape": [3],
            "dtype": "<f8",
        }

    _rewrite(saved, point_outside)
    with pytest.raises(ModelFileError, match="outside the model directory"):
        load_model(saved)
