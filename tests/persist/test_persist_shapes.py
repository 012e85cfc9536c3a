"""Model files checked as a whole (issue 27): a file whose arrays were edited and
re-checksummed consistently is refused when its arrays' shapes or dtypes disagree with each
other or with the parameters (:mod:`scalenc.persist.shapes`)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import make_blobs
from test_persist import _rewrite
from test_tables_categorical import make_table

from scalenc import CCDR, CCDRClassifier, LRClassifier, NRBFNClassifier
from scalenc.encoder import EncoderClassifier
from scalenc.persist import ModelFileError, load_model, save_model
from scalenc.persist.shapes import RULES, fitted_width
from scalenc.persist.types import _TYPES, ALLOWED_TYPES

# id → (class, params, classes)
MODELS = {
    "encoder": (EncoderClassifier, {"kernels": ("linear", "euclidean")}, 3),
    "encoder-one-pass": (EncoderClassifier, {"kernels": ("linear",)}, 3),
    "encoder-binary": (EncoderClassifier, {"kernels": ("linear", "gaussian")}, 2),
    "nrbfn": (NRBFNClassifier, {"random_state": 0, "alpha": "cv", "cv": 3}, 3),
    "lrc": (LRClassifier, {}, 3),
    "ccdr": (CCDR, {"random_state": 0, "n_subsamples": 2, "subsample_size": 150}, 3),
    "ccdr-linear": (CCDRClassifier, {"random_state": 0}, 3),
    "ccdr-lda": (CCDRClassifier, {"random_state": 0, "classifier": "lda"}, 3),
    "ccdr-lda-binary": (CCDRClassifier, {"random_state": 0, "classifier": "lda"}, 2),
    "ccdr-knn": (CCDRClassifier, {"random_state": 0, "classifier": "knn", "n_components": 3}, 3),
}


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """Each model of MODELS fitted once on small blobs (p = 5) and saved."""
    root = tmp_path_factory.mktemp("models")
    out = {}
    for name, (cls, params, K) in MODELS.items():
        X, y = make_blobs(n=300, p=5, K=K, seed=1, sep=1.0)
        out[name] = Path(save_model(cls(**params).fit(X, y), root / name))
    return out


@pytest.fixture
def copy_of(saved_models, tmp_path):
    def copy(name: str) -> Path:
        return Path(shutil.copytree(saved_models[name], tmp_path / name))

    return copy


def _edit_array(path: Path, name: str, edit) -> None:
    """Replace the array saved for ``name`` (e.g. "coef_", "head_.model.means") by
    ``edit(array)`` and re-checksum the file consistently, as a careful forger would."""
    doc = json.loads((path / "model.json").read_text())
    (rel,) = [rel for rel in doc["files"] if rel.endswith(f"-{name}.npy")]
    arr = edit(np.load(path / rel))
    np.save(path / rel, arr)
    info = {
        "sha256": hashlib.sha256((path / rel).read_bytes()).hexdigest(),
        "bytes": (path / rel).stat().st_size,
        "shape": list(arr.shape),
        "dtype": arr.dtype.str,
    }
    _rewrite(path, lambda doc: doc["files"][rel].update(info))


def drop_column(a):
    return a[..., :-1]


def drop_row(a):
    return a[:-1]


def as_int(a):
    return a.astype(np.int64)


def as_float(a):
    return a.astype(np.float64)


@pytest.mark.parametrize("name", MODELS)
def test_unedited_model_loads(name, saved_models):
    X, _ = make_blobs(n=20, p=5, seed=2)
    model = load_model(saved_models[name])
    out = model.transform(X) if isinstance(model, CCDR) else model.predict(X)
    assert out.shape[0] == 20


# (model, array, edit, what the message says)
EDITS = [
    ("encoder", "coef_", drop_column, r"EncoderClassifier\.coef_ has shape \(3, 2\)"),
    (
        "encoder",
        "class_means_",
        drop_row,
        r"class_means_ has shape \(2, 5\).*expected shape \(3, 5\)",
    ),
    ("encoder", "lda_models__1_.scalings", drop_row, r"lda_models_\[1\]\.scalings has shape \(2, "),
    ("encoder", "_z_totals_0_.scatter", drop_column, r"_z_totals\[0\]\.scatter has shape \(3, 2\)"),
    ("encoder", "cross_entropy_", drop_row, r"cross_entropy_ has shape \(1,\).*M = 2"),
    (
        "encoder",
        "cross_entropy_kind_",
        lambda a: np.zeros(a.shape, np.int64),
        r"cross_entropy_kind_ .*int64; .*a string dtype",
    ),
    ("encoder", "cross_entropy_bounds_", drop_column, r"cross_entropy_bounds_ has shape \(2, 1\)"),
    ("encoder", "intercept_", as_int, r"intercept_ .*dtype int64; .*floating-point dtype"),
    ("encoder-one-pass", "_x_moments_total.scatter", drop_row, r"scatter has shape \(4, 5\)"),
    ("encoder-binary", "coef_", lambda a: np.vstack([a, a]), r"coef_ has shape \(2, 2\).*C = 1"),
    ("nrbfn", "basis_", drop_column, r"basis_ has shape \(\d+, 4\).*w = 5 from the width"),
    ("nrbfn", "basis_", drop_row, r"basis_indices_ has shape .*r = \d+ from .*basis_\.shape\[0\]"),
    ("nrbfn", "weights_", drop_column, r"NRBFNClassifier\.weights_ has shape \(3, \d+\)"),
    ("nrbfn", "basis_indices_", as_float, r"basis_indices_ .*float64; .*integer dtype"),
    ("nrbfn", "cv_error_", drop_row, r"cv_error_ has shape \(2,\).*G = 3"),
    (
        "lrc",
        "coef_",
        drop_column,
        r"LRClassifier\.coef_ has shape \(3, 4\).*expected shape \(3, 5\)",
    ),
    ("lrc", "weights_", drop_column, r"weights_ has shape \(3, 5\).*expected shape \(3, 6\)"),
    ("lrc", "mean_", drop_row, r"mean_ has shape \(4,\)"),
    ("ccdr", "centers_", drop_row, r"CCDR\.centers_ has shape \(2, \d+\)"),
    (
        "ccdr",
        "eigenvalues_",
        drop_row,
        r"CCDR\.eigenvalues_ has shape .*m = \d+ from .*n_components_",
    ),
    (
        "ccdr",
        "rotations_",
        drop_row,
        r"solutions_ has 2 items; expected 1 \(B = 1 from CCDR\.rotations_\.shape\[0\]\)",
    ),
    ("ccdr", "solutions__1_.X", drop_column, r"solutions_\[1\]\.X has shape \(\d+, 4\)"),
    ("ccdr", "solutions__0_.embedding", drop_row, r"solutions_\[0\]\.embedding has shape"),
    ("ccdr-linear", "head_.coef", drop_row, r"head_\.coef has shape \(\d+, 3\).*m = \d+"),
    ("ccdr-lda", "head_.model.means", drop_column, r"head_\.model\.means has shape"),
    ("ccdr-lda", "ccdr_.centers_", drop_column, r"CCDRClassifier\.ccdr_\.centers_ has shape"),
    ("ccdr-knn", "head_.F", drop_column, r"head_\.F has shape \(\d+, 2\).*m = 3 from"),
    (
        "ccdr-knn",
        "ccdr_.embedding_",
        drop_row,
        r"subsample_indices_ has shape \(300,\).*s = 299 from",
    ),
]


@pytest.mark.parametrize(
    "name, array, edit, message", EDITS, ids=[f"{e[0]}-{e[1]}-{e[2].__name__}" for e in EDITS]
)
def test_array_of_wrong_shape_or_dtype_is_refused(name, array, edit, message, copy_of):
    path = copy_of(name)
    _edit_array(path, array, edit)
    with pytest.raises(ModelFileError, match=message) as info:
        load_model(path)
    assert "altered or damaged" in str(info.value)


def _edit_state(key, value):
    def edit(doc):
        doc["model"]["state"][key] = value

    return edit


def _edit_param(key, value):
    def edit(doc):
        doc["model"]["params"][key] = value

    return edit


# (model, edit of model.json, what the message says)
JSON_EDITS = [
    ("lrc", _edit_state("n_features_in_", 6), r"weights_ has shape \(3, 6\).*w = 6"),
    ("encoder", _edit_param("kernels", ["linear"]), r"kernels_ has 2 items.*M = 1"),
    ("encoder", _edit_state("kernel_index_", 2), r"kernel_index_ is 2; expected an index below M"),
    (
        "ccdr",
        _edit_param("n_components", 1),
        r"n_components_ is \d+; expected 1 \(m = 1 from CCDR\.n_components\)",
    ),
    ("ccdr-knn", _edit_state("n_features_in_", "5"), r"n_features_in_ is '5'; expected a count"),
    ("nrbfn", _edit_param("alpha", [1e-5, 1e-9]), r"cv_error_ has shape \(3,\).*G = 2"),
]


@pytest.mark.parametrize("name, edit, message", JSON_EDITS, ids=[e[0] for e in JSON_EDITS])
def test_parameters_that_disagree_with_the_arrays_are_refused(name, edit, message, copy_of):
    path = copy_of(name)
    _rewrite(path, edit)
    with pytest.raises(ModelFileError, match=message):
        load_model(path)


def test_the_first_array_binds_a_free_size_the_others_follow(copy_of):
    """nRBFN's basis size r is in no parameter: basis_ fixes it and weights_ must match."""
    path = copy_of("nrbfn")
    _edit_array(path, "weights_", lambda a: np.hstack([a, a[:, :1]]))
    with pytest.raises(ModelFileError, match=r"weights_ .*r = \d+ from NRBFNClassifier\.basis_"):
        load_model(path)


def test_a_partial_fit_model_waiting_for_a_class_loads(tmp_path):
    """Without rows of every class the encoder has no coef_ or LDA yet: absent is fine."""
    X, y = make_blobs(n=120, p=5, K=3, seed=1)
    seen = y < 2
    model = EncoderClassifier(kernels=("linear", "euclidean")).partial_fit(
        X[seen], y[seen], classes=[0, 1, 2]
    )
    assert not hasattr(model, "coef_")
    loaded = load_model(save_model(model, tmp_path / "m"))
    np.testing.assert_array_equal(loaded.class_counts_, model.class_counts_)


def test_every_estimator_a_model_file_holds_has_rules():
    estimators = {_TYPES[name] for name, kind in ALLOWED_TYPES.items() if kind == "estimator"}
    assert estimators <= RULES.keys() <= set(_TYPES.values())


def test_fitted_width_is_the_number_of_features(saved_models):
    model = load_model(saved_models["lrc"])
    assert fitted_width(model) == model.n_features_in_ == 5


def test_a_table_model_is_checked_in_its_encoded_width(tmp_path):
    """A model fitted on a table with categories: its arrays are as wide as the encoded
    features, and a category dropped from the stored encoder is refused."""
    frame, y = make_table()
    model = LRClassifier().fit(frame, y)
    path = Path(save_model(model, tmp_path / "m"))
    loaded = load_model(path)
    assert fitted_width(loaded) == loaded.feature_encoder_.n_output == 11
    assert loaded.n_features_in_ == 5

    def drop_a_colour(doc):
        encoder = doc["model"]["state"]["feature_encoder_"]["fields"]
        encoder["categories"][0]["__object_array__"].pop()
        encoder["categories"][0]["shape"] = [2]

    _rewrite(path, drop_a_colour)
    with pytest.raises(ModelFileError, match=r"weights_ has shape \(3, 12\).*w = 10"):
        load_model(path)


def test_ccdr_classifier_views_and_the_copies_of_older_files(tmp_path):
    """CCDRClassifier's CCDR attributes are read-only views of its ``ccdr_``'s. A model
    file of 0.1.0.dev0 holds copies of them: it loads (they equal the views), and a copy
    that disagrees with its ``ccdr_`` is refused."""
    old = Path(__file__).resolve().parents[1] / "data" / "models_0.1.0.dev0" / "ccdr-lda"
    model = load_model(old)
    assert model.centers_ is model.ccdr_.centers_
    with pytest.raises(AttributeError):
        model.centers_ = model.ccdr_.centers_
    saved = json.loads((Path(save_model(model, tmp_path / "new")) / "model.json").read_text())
    assert "centers_" not in saved["model"]["state"] and "ccdr_" in saved["model"]["state"]
    path = tmp_path / "old"
    shutil.copytree(old, path)
    _edit_array(path, "centers_", lambda a: a + 1.0)
    with pytest.raises(ModelFileError, match=r"\.centers_: the model file's copy disagrees"):
        load_model(path)
