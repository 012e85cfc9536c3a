"""What a newcomer reads: the fit summary's numbers with their readings, and a report that
names its model and data. Real command runs (as in test_cli.py) and direct calls."""

from __future__ import annotations

import json
import math
import re
import warnings

import numpy as np
import pytest
from conftest import make_blobs
from test_cli import run_text

from scalenc import EncoderClassifier, report
from scalenc.cli.summary import to_text
from scalenc.exceptions import DataWarning

KERNELS = ("linear", "euclidean", "spearman")


@pytest.fixture(scope="module")
def npz(tmp_path_factory):
    """300 rows, 3 classes, about 10 % of them unlabeled (-1)."""
    X, y = make_blobs(n=300, p=5, K=3, seed=3, sep=1.5, unlabeled=0.1)
    path = tmp_path_factory.mktemp("summary") / "d.npz"
    np.savez(path, X=X, y=y)
    return path, X, y


def _run(capsys, *argv):
    """`scalenc argv` as a user runs it; the -1 labels' DataWarning (said on purpose) is
    not turned into an error by pytest's filter."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        code, out, err = run_text(capsys, *argv)
    assert code == 0, err
    return out


def _fit_summary(npz, tmp_path, capsys, method, *params):
    argv = ["fit", method, "--data", npz[0], "--model-out", tmp_path / "m", *params]
    out = _run(capsys, *argv, "--json", tmp_path / "fit.json")
    return out, json.loads((tmp_path / "fit.json").read_text())


def _oracle_per_row(X, y, kernel):
    """Mean −log T(i, y_i) over the labeled rows, from the one-kernel model's probabilities."""
    labeled = y >= 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # the -1 labels, said on purpose
        proba = EncoderClassifier(kernels=(kernel,)).fit(X, y).predict_proba(X[labeled])
    return -np.log(proba[np.arange(labeled.sum()), y[labeled]]).mean()


def test_encoder_summary_shows_cross_entropy_per_labeled_row(npz, tmp_path, capsys):
    """The text shows c_m divided by the labeled rows (comparable with log K for every
    kernel); the JSON keeps the paper's sum c_m and adds the per-row figure."""
    _, X, y = npz
    out, summary = _fit_summary(
        npz, tmp_path, capsys, "encoder", "--set", "kernels=" + ",".join(KERNELS)
    )
    line = next(line for line in out.splitlines() if "kernel chosen:" in line)
    found = re.search(r"cross-entropy per labeled row: (.*); guessing: log 3 = 1\.099\)$", line)
    assert found, line
    shown = dict(item.rsplit(" ", 1) for item in found.group(1).split(", "))
    assert list(shown) == list(KERNELS)

    model = summary["model"]
    labeled = int((y >= 0).sum())
    assert labeled < len(y) and model["cross_entropy_rows"] == labeled
    for kernel in KERNELS:
        total, per_row = model["cross_entropy_"][kernel], model["cross_entropy_per_row"][kernel]
        assert per_row == pytest.approx(_oracle_per_row(X, y, kernel), rel=1e-6)
        assert total == pytest.approx(per_row * labeled, rel=1e-9)  # the sum, as in the paper
        assert float(shown[kernel]) == pytest.approx(per_row, rel=1e-3)  # 4 digits
        assert 0 < float(shown[kernel]) < math.log(3)  # better than guessing, per row
    assert max(model["cross_entropy_"].values()) > 10  # the sums run into the tens


def test_nrbfn_summary_reads_its_diagnostics(npz, tmp_path, capsys):
    out, summary = _fit_summary(npz, tmp_path, capsys, "nrbfn", "--set", "random_state=0")
    model = summary["model"]
    r = model["basis_"]["shape"][0]
    lines = out.splitlines()
    basis = next(line for line in lines if line.startswith("  basis: "))
    assert f"basis: {r} rows" in basis and ", full rank;" in basis
    epsilon = next(line for line in lines if "fitting error ε = " in line)
    excess = f"{100 * (model['fitting_error_'] - 1):.2g} %"
    assert (
        f": the class scores miss the one-hot labels by a squared residual of {excess} " in epsilon
    )
    gamma = next(line for line in lines if "spectral risk γ = " in line)
    assert model["spectral_risk_"] > r  # small λ: γ far above r, as in the paper's fits
    lam_gamma = model["alpha_"] * model["spectral_risk_"]
    assert (
        f" > r = {r}: the fit leans on weak directions of the basis (overfitting warning)" in gamma
    )
    assert f"; λγ = {lam_gamma:.2g} ≤ 0.01, as in the paper's tuned fits (ε decides)" in gamma


def test_lrc_summary_reads_its_diagnostics(npz, tmp_path, capsys):
    out, summary = _fit_summary(npz, tmp_path, capsys, "lrc")
    model = summary["model"]
    assert "fitting error ε = " in out and "a smaller alpha lowers it" in out
    assert "spectral risk γ = " in out and "r = 6" in out  # p + 1 rows of Ã
    assert "features and intercept (r = p + 1 = 6 rows): full rank" in out
    assert model["rank_"] == 6


def _fit(model: dict, **extra) -> dict:
    """A fit summary as cmd_fit builds it, with the model facts given."""
    return {
        "command": "fit",
        "status": "ok",
        "method": "nrbfn",
        "estimator": "NRBFNClassifier",
        "data": {"path": "d.zarr", "rows": 17000, "features": 20, "row_blocks": 2},
        "passes": 4,
        "timings": {"fit_seconds": 1.0, "save_seconds": 0.1},
        "model": model,
        "seconds": 1.2,
        **extra,
    }


def test_the_readings_of_every_case():
    """γ far above r but λγ small (the issue's numbers), λγ above the paper's tuned fits,
    γ within r, a rank-deficient basis and rank-deficient LRC features."""
    nrbfn = {
        "basis_indices_": {"shape": [750], "dtype": "int64"},
        "basis_": {"shape": [750, 20], "dtype": "float64"},
        "basis_fraction_": 0.0441,
        "sigma_": 3.2,
        "alpha_": 1e-13,
        "fitting_error_": 1.08,
        "spectral_risk_": 6.259e10,
        "rank_": 702,
    }
    text = to_text(_fit(nrbfn))
    assert (
        "basis: 750 rows (4.4 % of the labeled rows), rank 702: 48 basis rows redundant, so "
        "λ > 0 is needed; σ = 3.2, λ = 1e-13" in text
    )
    assert (
        "fitting error ε = 1.08: the class scores miss the one-hot labels by a squared "
        "residual of 8 % of their own (ε − 1, Definition 7). ε = 1 only where the scores "
        "equal the labels, which a fit with λ > 0 never reaches; it reads the scores, not "
        "the accuracy (ε > 1 at 100 % training accuracy is usual); a higher "
        "confidence_threshold or a smaller alpha lowers it" in text
    )
    assert (
        "spectral risk γ = 6.259e+10 > r = 750: the fit leans on weak directions of the "
        "basis (overfitting warning); λγ = 0.0063 ≤ 0.01, as in the paper's tuned fits" in text
    )

    text = to_text(_fit({**nrbfn, "alpha_": 1e-9}))
    assert 'λγ = 63 > 0.01, above the paper\'s tuned fits: try alpha="cv"' in text
    text = to_text(_fit({**nrbfn, "spectral_risk_": 12.5, "rank_": 750, "fitting_error_": 1.0}))
    assert "γ = 12.5 ≤ r = 750: the fit uses strong directions of the basis (low risk" in text
    assert ", full rank;" in text and "ε = 1: the class scores equal the one-hot labels" in text

    lrc = {"weights_": [[0.0] * 11] * 2, "fitting_error_": 2.15, "spectral_risk_": 60.0,
           "rank_": 9, "n_features_in_": 10}  # fmt: skip
    text = to_text(_fit(lrc, method="lrc", estimator="LRClassifier", params={"alpha": 1e-2}))
    assert (
        "ε = 2.15: the class scores miss the one-hot labels by a squared residual of 115 %" in text
    )
    assert "γ = 60 > r = 11: the fit leans on weak directions of the data" in text
    assert "λγ = 0.6 > 0.1, above the paper's tuned fits: try other alpha values" in text
    assert "features and intercept (r = p + 1 = 11 rows): rank 9: 2 features redundant" in text


def test_cross_entropy_kinds_other_than_exact_are_named():
    """A sampled fit's c_m: the kind is shown where it is not exact (older files: none)."""
    model = {
        "kernel_": "Linear()",
        "classes_": [0, 1, 2],
        "cross_entropy_per_row": {"linear": 0.03, "euclidean": 0.2, "spearman": 0.1},
        "cross_entropy_kind_": {"linear": "exact", "euclidean": "sample", "spearman": "interval"},
    }
    text = to_text(_fit(model, method="encoder", estimator="EncoderClassifier"))
    assert "per labeled row: linear 0.03, euclidean 0.2 (sample), spearman 0.1 (interval);" in text
    del model["cross_entropy_kind_"]
    text = to_text(_fit(model, method="encoder", estimator="EncoderClassifier"))
    assert "per labeled row: linear 0.03, euclidean 0.2, spearman 0.1;" in text


def test_an_update_says_which_it_is_and_never_none():
    """`fit --update`: "(update N since its fit)", and nothing where the model gives no
    count (the encoder's summaries printed "update None")."""
    lrc = {"weights_": [[0.0] * 3] * 2, "n_features_in_": 2}
    head = to_text(_fit(lrc, update={"model": "m0", "updates": 2})).splitlines()[0]
    assert head.startswith("updated nrbfn (NRBFNClassifier) model m0 with d.zarr")
    assert head.endswith("(update 2 since its fit)")
    head = to_text(_fit(lrc, update={"model": "m0", "updates": None})).splitlines()[0]
    assert "None" not in head and "since its fit" not in head


# --- the report names its model and data -----------------------------------------------------


def test_report_names_its_data_and_model(npz, tmp_path, capsys):
    path = npz[0]
    model = tmp_path / "m"
    _fit_summary(npz, tmp_path, capsys, "encoder", "--set", "kernels=linear,euclidean")
    out = _run(capsys, "report", "--model", model, "--data", path, "--out", tmp_path / "r.html")
    assert out.startswith(f"report on {model} (EncoderClassifier) with {path} (300 rows × ")
    page = (tmp_path / "r.html").read_text()
    assert f"<b>Model:</b> <code>{model}</code>, EncoderClassifier, saved " in page
    assert f"<b>Data:</b> {path} (300 rows × 5 features, 1 row block)</p>" in page

    _run(capsys, "report", "--model", model, "--out", tmp_path / "s.html")
    assert (
        "<b>Data:</b> none: the model's fitted diagnostics only"
        in (tmp_path / "s.html").read_text()
    )


def test_report_api_describes_in_memory_data_and_hides_credentials(npz):
    _, X, y = npz
    labeled = y >= 0
    model = EncoderClassifier().fit(X[labeled], y[labeled])
    page = report.build_report(model, data=X)
    assert "<b>Data:</b> NumPy array 300 × 5 (not used: no labels to score" in page
    assert "EncoderClassifier in memory (no model file named)" in page

    url = "s3://KEY:SECRET@bucket/data/d.zarr?X-Amz-Signature=TOKEN#frag"
    page = report.build_report(model, data=url, model="https://user:pw@host/m?sig=TOKEN")
    for secret in ("KEY", "SECRET", "TOKEN", "pw", "frag"):
        assert secret not in page.split("<h2>")[0], secret
    assert "s3://***@bucket/data/d.zarr?***" in page and "https://***@host/m?***" in page
