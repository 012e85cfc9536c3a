"""Model files written by an earlier scalenc (0.1.0.dev0 at commit dce12ba, before the
package layout changed) load and give the same outputs as they gave when they were saved.

The files under ``tests/data/models_0.1.0.dev0`` were written by that commit's
``save_model`` on ``make_blobs(n=200, p=4, K=3, seed=1, sep=1.0, unlabeled=0.05)`` (string
labels for ``lrc`` and ``ccdr-lda``); each ``NAME.expected.npz`` holds that code's outputs on
``X.npy``. They are never rewritten: a change that breaks them breaks users' model files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scalenc import load_model, read_model_metadata

ROOT = Path(__file__).resolve().parents[1] / "data" / "models_0.1.0.dev0"
NAMES = ["encoder", "nrbfn", "lrc", "ccdr", "ccdr-knn", "ccdr-lda", "ccdr-linear"]


@pytest.mark.parametrize("name", NAMES)
def test_model_file_of_earlier_version_predicts_the_same(name):
    model = load_model(ROOT / name)
    X = np.load(ROOT / "X.npy")
    expected = np.load(ROOT / f"{name}.expected.npz")
    assert set(expected.files) >= {"predict"} or name == "ccdr"
    for method in expected.files:
        got = np.asarray(getattr(model, method)(X))
        if got.dtype == object:
            got = got.astype(str)
        want = expected[method]
        assert got.shape == want.shape, method
        if want.dtype.kind in "fc":
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=method)
        else:
            np.testing.assert_array_equal(got, want, err_msg=method)


def test_model_file_of_earlier_version_names_its_estimator():
    meta = read_model_metadata(ROOT / "encoder")
    assert meta["estimator"] == "scalenc.encoder.EncoderClassifier"
    assert meta["versions"]["scalenc"] == "0.1.0.dev0"


def test_model_file_of_earlier_version_takes_new_batches():
    """An encoder saved before the layout change keeps its running sums: partial_fit on a
    loaded model merges a new batch (its stored totals are read as they were saved)."""
    from conftest import make_blobs

    X, y = make_blobs(n=200, p=4, K=3, seed=1, sep=1.0, unlabeled=0.05)
    np.testing.assert_array_equal(X[:40], np.load(ROOT / "X.npy"))
    model = load_model(ROOT / "encoder")
    before = model.class_counts_.copy()
    model.partial_fit(X[:40], y[:40])
    added = np.bincount(y[:40][y[:40] >= 0], minlength=3)
    np.testing.assert_array_equal(model.class_counts_, before + added)
    assert model.predict(X[:5]).shape == (5,)
