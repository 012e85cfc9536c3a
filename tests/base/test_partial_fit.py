"""Incremental updates (issue 25): ``partial_fit`` and ``scalenc fit --update`` read only
the new rows and give, where the statistics are sums, the model of ``fit`` on every row.

Oracles: ``fit`` on all rows (LRC, the linear encoder: exact), the normal equations of
every row with the fitted basis and σ (nRBFN, ``tests/nrbfn/test_nrbfn.py``'s ``weights_for``),
and the head ``fit`` computes over every row on the same embedding (CCDRClassifier).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
from _counting import counted
from conftest import make_blobs
from test_nrbfn import weights_for

from scalenc import (
    CCDRClassifier,
    EncoderClassifier,
    LRClassifier,
    NRBFNClassifier,
    write_dataset,
)
from scalenc.persist import load_model, save_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def halves():
    X, y = make_blobs(n=1600, p=5, K=3, seed=11, sep=1.5, unlabeled=0.05)
    return (X[:1000], y[:1000]), (X[1000:], y[1000:]), (X, y)


def _close(a, b, rtol):
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * np.abs(b).max())


@pytest.mark.parametrize("chunks", [1000, 170])
def test_lrc_update_equals_fit_on_all_rows_and_reads_only_the_batch(halves, chunks):
    (Xa, ya), (Xb, yb), (X, y) = halves
    model = LRClassifier().fit(da.from_array(Xa, chunks=chunks), ya)
    Xc, reads = counted(Xb, chunks)
    model.partial_fit(Xc, yb)
    assert reads.passes() == 1 and model.n_passes_ == 1 and model.n_updates_ == 1
    reference = LRClassifier().fit(X, y)
    for name in ("weights_", "coef_", "intercept_", "mean_"):
        _close(getattr(model, name), getattr(reference, name), 1e-10)
    assert model.fitting_error_ == pytest.approx(reference.fitting_error_, rel=1e-10)


def test_lrc_partial_fit_from_scratch_and_in_pieces(halves):
    (Xa, ya), (Xb, yb), (X, y) = halves
    model = LRClassifier()
    for rows in np.array_split(np.arange(len(y)), 4):
        model.partial_fit(X[rows], y[rows], classes=[0, 1, 2])
    assert model.n_updates_ == 3
    _close(model.weights_, LRClassifier().fit(X, y).weights_, 1e-10)


def test_encoder_update_after_fit_equals_fit_on_all_rows(halves):
    (Xa, ya), (Xb, yb), (X, y) = halves
    model = EncoderClassifier(kernels=("linear",)).fit(Xa, ya).partial_fit(Xb, yb)
    reference = EncoderClassifier(kernels=("linear",)).fit(X, y)
    _close(model.class_means_, reference.class_means_, 1e-10)
    _close(model.coef_, reference.coef_, 1e-10)


@pytest.mark.parametrize("normalize", [True, False])
def test_nrbfn_update_solves_the_normal_equations_of_every_row(halves, normalize):
    (Xa, ya), (Xb, yb), (X, y) = halves
    params = dict(n_basis=40, alpha=1e-5, random_state=0, normalize=normalize)
    model = NRBFNClassifier(**params).fit(Xa, ya)
    basis, sigma = model.basis_.copy(), model.sigma_
    Xc, reads = counted(Xb, 200)
    model.partial_fit(Xc, yb)
    assert reads.passes() == 1 and model.n_passes_ == 1
    np.testing.assert_array_equal(model.basis_, basis)
    assert model.sigma_ == sigma
    labeled = y >= 0
    oracle = weights_for(X[labeled], y[labeled], basis, sigma, 1e-5, normalize)
    _close(model.weights_, oracle, 1e-6)
    # the same rows in other batches: the same sums, to rounding
    pieces = NRBFNClassifier(**params).fit(Xa, ya)
    for rows in np.array_split(np.arange(len(yb)), 3):
        pieces.partial_fit(Xb[rows], yb[rows])
    _close(pieces.weights_, model.weights_, 1e-10)


def test_nrbfn_update_chooses_lambda_on_the_held_out_batch(halves):
    (Xa, ya), (Xb, yb), _ = halves
    model = NRBFNClassifier(n_basis=40, alpha="cv", random_state=0).fit(Xa, ya)
    before = copy.deepcopy(model)
    Xc, reads = counted(Xb, 200)
    model.partial_fit(Xc, yb)
    assert reads.passes() == 2 and model.n_passes_ == 2  # the batch scored, then its Gram
    labeled = yb >= 0
    errors = []
    for lam in (1e-5, 1e-9, 1e-13):  # each λ's weights before the batch, on the batch
        b = copy.deepcopy(before)
        b._solve(b._gram_total, lam)
        errors.append(np.mean(b.predict(Xb[labeled]) != yb[labeled]))
    np.testing.assert_allclose(model.cv_error_, errors)
    assert model.alpha_ == (1e-5, 1e-9, 1e-13)[int(np.argmin(errors))]


def test_nrbfn_without_statistics_says_how_to_keep_them(halves):
    (Xa, ya), (Xb, yb), _ = halves
    model = NRBFNClassifier(n_basis=40, keep_statistics=False, random_state=0).fit(Xa, ya)
    with pytest.raises(
        ValueError,
        match=r"keep_statistics=False and a basis of 40 rows.*fit with keep_statistics=True",
    ):
        model.partial_fit(Xb, yb)


@pytest.mark.parametrize("head", ["linear", "lda"])
def test_ccdr_heads_update_equals_the_head_over_every_row(halves, head):
    (Xa, ya), (Xb, yb), (X, y) = halves
    model = CCDRClassifier(subsample_size=200, classifier=head, random_state=0).fit(Xa, ya)
    oracle = copy.deepcopy(model)
    # fit's head over every row, on the same embedding
    oracle.head_ = oracle._fit_head(da.from_array(X, chunks=400), da.from_array(y, chunks=400))
    Xc, reads = counted(Xb, 150)
    model.partial_fit(Xc, yb)
    assert reads.passes() == 1 and model.n_passes_ == 1
    np.testing.assert_array_equal(model.centers_, oracle.centers_)
    _close(model.predict_proba(Xb), oracle.predict_proba(Xb), 1e-9)
    np.testing.assert_array_equal(model.predict(X), oracle.predict(X))


def test_ccdr_knn_head_cannot_be_updated(halves):
    (Xa, ya), (Xb, yb), _ = halves
    model = CCDRClassifier(subsample_size=200, classifier="knn", random_state=0).fit(Xa, ya)
    with pytest.raises(ValueError, match="classifier='knn', which votes among the subsample"):
        model.partial_fit(Xb, yb)


def test_an_update_cannot_add_a_class(halves):
    (Xa, ya), (Xb, yb), _ = halves
    model = LRClassifier().fit(Xa, ya)
    with pytest.raises(ValueError, match=r"differs from the model's classes \[0, 1, 2\]"):
        model.partial_fit(Xb, yb, classes=[0, 1, 2, 3])
    with pytest.raises(ValueError, match="3"):
        model.partial_fit(Xb, np.where(yb == 2, 3, yb))
    first = LRClassifier()
    with pytest.raises(ValueError, match=r"first partial_fit batch .* not of \[7\]"):
        first.partial_fit(Xa, ya, classes=[0, 1, 2, 7])


@pytest.mark.parametrize(
    "make",
    [
        lambda: LRClassifier(),
        lambda: NRBFNClassifier(n_basis=40, random_state=0),
        lambda: CCDRClassifier(subsample_size=200, random_state=0),
        lambda: EncoderClassifier(),
    ],
    ids=["lrc", "nrbfn", "ccdr-classifier", "encoder"],
)
def test_a_saved_model_updates_as_the_one_in_memory(halves, tmp_path, make):
    (Xa, ya), (Xb, yb), _ = halves
    model = make().fit(Xa, ya)
    save_model(model, tmp_path / "m")
    loaded = load_model(tmp_path / "m").partial_fit(Xb, yb)
    model.partial_fit(Xb, yb)
    np.testing.assert_array_equal(loaded.predict_proba(Xb), model.predict_proba(Xb))


@pytest.mark.slow  # three commands (10-20 s); the API's update reads only the new rows above, and the command's encoder update below, in the default run
def test_command_update_reads_only_the_new_data_and_leaves_the_old_model(halves, tmp_path):
    (Xa, ya), (Xb, yb), (X, y) = halves
    write_dataset(da.from_array(Xa, chunks=250), ya, str(tmp_path / "old.zarr"))
    write_dataset(da.from_array(Xb, chunks=200), yb, str(tmp_path / "new.zarr"))
    cli = [sys.executable, "-m", "scalenc.cli"]
    subprocess.run(
        [*cli, "fit", "lrc", "--data", tmp_path / "old.zarr", "--model-out", tmp_path / "m0"],
        check=True,
        capture_output=True,
    )
    before = {p: p.read_bytes() for p in (tmp_path / "m0").rglob("*") if p.is_file()}
    done = subprocess.run(
        [
            *cli, "fit", "lrc", "--data", tmp_path / "new.zarr", "--update", tmp_path / "m0",
            "--model-out", tmp_path / "m1", "--json", tmp_path / "s.json",
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "updated lrc (LRClassifier) model" in done.stdout
        and "update 1 since its fit" in done.stdout
    )
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["passes"] == 1 and summary["data"]["rows"] == len(yb)
    assert before == {p: p.read_bytes() for p in (tmp_path / "m0").rglob("*") if p.is_file()}
    updated = load_model(tmp_path / "m1")
    _close(updated.weights_, LRClassifier().fit(X, y).weights_, 1e-10)
    refused = subprocess.run(
        [
            *cli, "fit", "lrc", "--data", tmp_path / "new.zarr", "--update", tmp_path / "m0",
            "--model-out", tmp_path / "m2", "--set", "alpha=1",
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "keeps the model's parameters; drop alpha" in refused.stderr


# --- the encoder through update_streaming (issue 37) -----------------------------------------


def _table_halves():
    from test_tables_categorical import make_table

    frame, y = make_table(n=600, seed=3)
    return frame, y, (frame.iloc[:350], y[:350]), (frame.iloc[350:], y[350:])


def _dask_frame(frame, y, parts):
    import dask.dataframe as dd
    import pandas as pd

    labels = pd.Series(y, index=frame.index)
    return dd.from_pandas(frame, npartitions=parts), dd.from_pandas(labels, npartitions=parts)


@pytest.mark.parametrize("kind", ["pandas", "dask"])
def test_encoder_partial_fit_encodes_a_table_as_fit_does(kind):
    """A DataFrame with string, categorical and boolean columns: the first partial_fit
    learns fit's encoding, and on the same rows gives fit's linear model, exactly."""
    frame, y, _, _ = _table_halves()
    X, labels = (frame, y) if kind == "pandas" else _dask_frame(frame, y, 3)
    linear = dict(kernels=("linear",), chunk_rows=200)
    model = EncoderClassifier(**linear).partial_fit(X, labels, classes=[0, 1, 2])
    reference = EncoderClassifier(**linear).fit(X, labels)
    got, want = model.feature_encoder_, reference.feature_encoder_
    assert got.feature_names_out == want.feature_names_out and got.n_output == 2 + 3 + 4 + 2
    assert model.feature_names_in_.tolist() == list(frame.columns)
    assert (model.n_passes_, model.n_updates_) == (reference.n_passes_, 0) == (1, 0)
    for name in ("class_counts_", "class_means_", "coef_", "intercept_", "embedding_means_"):
        np.testing.assert_array_equal(getattr(model, name), getattr(reference, name), name)
    np.testing.assert_array_equal(model.predict_proba(frame), reference.predict_proba(frame))


@pytest.mark.parametrize("kind", ["pandas", "dask"])
def test_encoder_update_of_a_table_equals_fit_on_all_rows(kind):
    """fit on the first rows, partial_fit on the rest (LRC's path): the batch's columns
    are encoded with the fitted categories, and the linear model is fit's on all rows."""
    frame, y, (Fa, ya), (Fb, yb) = _table_halves()
    Xa, la = (Fa, ya) if kind == "pandas" else _dask_frame(Fa, ya, 2)
    Xb, lb = (Fb, yb) if kind == "pandas" else _dask_frame(Fb, yb, 2)
    model = EncoderClassifier(kernels=("linear",)).fit(Xa, la).partial_fit(Xb, lb)
    assert (model.n_passes_, model.n_updates_) == (1, 1)
    reference = EncoderClassifier(kernels=("linear",)).fit(frame, y)
    _close(model.class_means_, reference.class_means_, 1e-12)
    # the one-hot columns are collinear (each group sums to one): the LDA amplifies the
    # merge's rounding to about 1e-7, as test_tables_categorical's other row blocks
    _close(model.coef_, reference.coef_, 1e-5)
    np.testing.assert_array_equal(model.predict(frame), reference.predict(frame))
    # several kernels: the batch goes through the same encoding (two more passes over it)
    several = EncoderClassifier(kernels=("linear", "euclidean")).fit(Xa, la)
    several.partial_fit(Xb, lb)
    assert (several.n_passes_, several.n_updates_) == (3, 1)
    _close(several.class_means_, reference.class_means_, 1e-12)


@pytest.mark.parametrize("columns", ["numeric", "table"])
def test_lrc_update_of_a_dask_frame(columns):
    """A Dask DataFrame batch (its partitions' lengths unknown until counted): the labels
    align by rows, and the update is fit's model on all rows."""
    frame, y, (Fa, ya), (Fb, yb) = _table_halves()
    pick = (lambda f: f[["height", "weight"]]) if columns == "numeric" else (lambda f: f)
    model = LRClassifier().fit(*_dask_frame(pick(Fa), ya, 2))
    model.partial_fit(*_dask_frame(pick(Fb), yb, 3))
    assert (model.n_passes_, model.n_updates_) == (1, 1)
    _close(model.weights_, LRClassifier().fit(pick(frame), y).weights_, 1e-8)


def test_encoder_n_updates_counts_the_calls_after_the_first():
    X, y = make_blobs(n=400, p=4, K=3, seed=5)
    model = EncoderClassifier(kernels=("linear", "euclidean"))
    counts = []
    for rows in np.array_split(np.arange(400), 4):
        counts.append(model.partial_fit(X[rows], y[rows], classes=[0, 1, 2]).n_updates_)
    assert counts == [0, 1, 2, 3]
    fitted = EncoderClassifier().fit(X[:200], y[:200])
    assert fitted.n_updates_ == 0
    assert fitted.partial_fit(X[200:], y[200:]).n_updates_ == 1


def test_encoder_first_batch_refused_leaves_the_model_unstarted():
    """A first batch with a label outside classes= is refused; the next call starts the
    model as if it were the first."""
    X, y = make_blobs(n=300, p=4, K=3, seed=6)
    model = EncoderClassifier(kernels=("linear",))
    with pytest.raises(ValueError, match=r"Label 2 is not one of the classes \[0, 1\]"):
        model.partial_fit(X, y, classes=[0, 1])
    model.partial_fit(X, y, classes=[0, 1, 2])
    assert model.n_updates_ == 0
    np.testing.assert_array_equal(
        model.predict(X), EncoderClassifier(kernels=("linear",)).fit(X, y).predict(X)
    )


def test_encoder_full_method_has_no_sums_to_update():
    X, y = make_blobs(n=200, p=4, K=3, seed=7)
    with pytest.raises(ValueError, match="partial_fit needs method='fast'"):
        EncoderClassifier(method="full").partial_fit(X, y, classes=[0, 1, 2])
    model = EncoderClassifier(method="full").fit(X, y)
    with pytest.raises(ValueError, match="method='full', which keeps the training X"):
        model.partial_fit(X, y)


def test_command_update_of_an_encoder_counts_its_update(halves, tmp_path):
    """`fit encoder --update`: the text summary says which update this is, and the JSON
    holds the count (they printed `update None` and `"updates": null`)."""
    from test_cli import run_here

    (Xa, ya), (Xb, yb), (X, y) = halves
    write_dataset(da.from_array(Xa, chunks=250), ya, str(tmp_path / "old.zarr"))
    write_dataset(da.from_array(Xb, chunks=200), yb, str(tmp_path / "new.zarr"))
    fit = ["fit", "encoder", "--set", "kernels=linear"]
    code, _, err = run_here(*fit, "--data", tmp_path / "old.zarr", "--model-out", tmp_path / "m0")
    assert code == 0, err
    for step, (old, new) in enumerate([("m0", "m1"), ("m1", "m2")], start=1):
        code, out, err = run_here(
            "fit", "encoder", "--data", tmp_path / "new.zarr", "--update", tmp_path / old,
            "--model-out", tmp_path / new, "--json", tmp_path / f"{new}.json",
        )  # fmt: skip
        assert code == 0, err
        assert f"(update {step} since its fit)" in out and "None" not in out
        summary = json.loads((tmp_path / f"{new}.json").read_text())
        assert summary["update"]["updates"] == step and summary["passes"] == 1
    updated = load_model(tmp_path / "m1")
    _close(updated.coef_, EncoderClassifier(kernels=("linear",)).fit(X, y).coef_, 1e-8)
