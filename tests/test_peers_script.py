"""benchmarks/peers.py: the peer comparison of issue 12 runs end to end and prints its tables."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "peers.py"
METHODS = (
    "EncoderClassifier()", "NRBFNClassifier()", "LRClassifier()", "CCDRClassifier()", "SVC()",
    "Nystroem + LR", "k-NN (5)", "LDA", "HistGradientBoosting",
)  # fmt: skip


def _pmlb_dir() -> Path | None:
    """The PMLB cache holding letter and shuttle: $SCALENC_PMLB_DIR, ~/.cache/pmlb or
    ../pmlb_cache beside the repository."""
    for candidate in (
        os.environ.get("SCALENC_PMLB_DIR"),
        Path.home() / ".cache" / "pmlb",
        ROOT.parent / "pmlb_cache",
    ):
        if candidate and all(
            (Path(candidate) / n / f"{n}.tsv.gz").exists() for n in ("letter", "shuttle")
        ):
            return Path(candidate)
    return None


def _run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def _module():
    spec = importlib.util.spec_from_file_location("peers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ranks_and_summary_bold_the_best():
    """Ranks share ties, a failed or skipped cell gets none; the best error is bold."""
    peers = _module()
    cells = {
        "LDA": {"error_pct": 5.0},
        "k-NN (5)": {"error_pct": 2.0},
        "NRBFNClassifier()": {"error_pct": 2.0},
        "SVC()": {"skipped": "too many rows"},
        "CCDRClassifier()": {"failed": "MemoryError: no"},
    }
    assert peers.ranks(cells) == {"LDA": 3, "k-NN (5)": 1, "NRBFNClassifier()": 1}
    table = peers.summary_table({"toy": {"cells": cells}})
    assert "| LDA | 5.00 | 3.0 |" in table
    assert "| k-NN (5) | **2.00** | 1.0 |" in table
    assert "| SVC() | — | — |" in table
    assert "| CCDRClassifier() | failed | — |" in table
    text = peers.wins_and_losses({"toy": {"cells": cells}})
    assert "toy: 2.00 %, rank 1/3 — **best**; beats LDA; ties k-NN (5)" in text
    assert "* **NRBFNClassifier()**: best of all on toy; beats every peer on none;" in text
    assert "toy: failed (MemoryError: no)" in text


def test_every_method_with_its_defaults():
    """The nine estimators are built with their defaults: only random_state (where it
    exists) and the peers' fixed settings of issue 12 differ from scikit-learn's."""
    peers = _module()
    from sklearn.base import clone

    built = {m: peers.make_estimator(m) for m in peers.METHODS}
    assert built["NRBFNClassifier()"].get_params()["random_state"] == 0
    assert built["CCDRClassifier()"].get_params()["random_state"] == 0
    assert built["HistGradientBoosting"].get_params()["random_state"] == 0
    assert built["Nystroem + LR"].get_params()["nystroem__n_components"] == 1000
    assert built["Nystroem + LR"].get_params()["logisticregression__max_iter"] == 1000
    for method in ("EncoderClassifier()", "LRClassifier()", "SVC()", "k-NN (5)", "LDA"):
        model = built[method]
        assert model.get_params() == type(model)().get_params(), method
    for method in ("NRBFNClassifier()", "CCDRClassifier()", "HistGradientBoosting"):
        model = built[method]
        expected = type(model)().set_params(random_state=0).get_params()
        assert clone(model).get_params() == expected, method


def test_missing_data_says_how_to_get_it(tmp_path):
    """Without the PMLB files (and without the pmlb package) the script stops with exit
    code 2 and says how to get them, before fitting anything."""
    if importlib.util.find_spec("pmlb") is not None:
        pytest.skip("pmlb is installed: the script would fetch the files")
    proc = _run("--datasets", "letter", "--data-dir", str(tmp_path), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"letter not found under {tmp_path}" in proc.stderr
    assert "pip install pmlb" in proc.stderr and "--data-dir" in proc.stderr


@pytest.mark.slow
def test_quick_run_on_letter_and_shuttle(tmp_path):
    """``--quick`` on two PMLB datasets: every method runs, the per-dataset tables, the
    summary, the wins-and-losses list and the JSON are produced, and the errors are those
    of working classifiers."""
    data = _pmlb_dir()
    if data is None:
        pytest.skip("PMLB's letter and shuttle are absent (set SCALENC_PMLB_DIR)")
    out = tmp_path / "peers.json"
    # HistGradientBoosting and Nystroem + LR are left out: pure scikit-learn, they took
    # most of a 10-minute run on a loaded 2-core machine (their settings are checked by
    # test_every_method_with_its_defaults)
    methods = ",".join(m for m in METHODS if m not in ("HistGradientBoosting", "Nystroem + LR"))
    proc = _run("--quick", "--quick-rows", "1500", "--datasets", "letter,shuttle",
                "--methods", methods, "--data-dir", str(data), "--out", str(out),
                "--svc-max-train", "900")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    assert "### letter: 1,000 train / 500 test rows, p = 16, K = 26" in text
    assert "### shuttle: 1,000 train / 500 test rows, p = 9" in text
    assert "| method | error % | fit s | predict s | peak MB | notes |" in text
    assert "| method | letter | shuttle | mean rank |" in text
    assert "## Where each scalenc method wins and loses" in text
    assert "skipped: 1,000 training rows > --svc-max-train=900" in text
    results = json.loads(out.read_text())
    assert list(results["datasets"]) == ["letter", "shuttle"]
    for name, res in results["datasets"].items():
        cells = res["cells"]
        assert "skipped" in cells["SVC()"]
        for method in ("EncoderClassifier()", "NRBFNClassifier()", "LRClassifier()",
                       "CCDRClassifier()", "k-NN (5)", "LDA"):  # fmt: skip
            cell = cells[method]
            assert "failed" not in cell, (name, method, cell)
            assert cell["fit_s"] > 0 and cell["predict_s"] >= 0 and cell["peak_mb"] > 0
            assert 0 <= cell["error_pct"] < 60, (name, method, cell["error_pct"])
        assert cells["k-NN (5)"]["error_pct"] < 40  # both are easy for 5-NN
        assert cells["NRBFNClassifier()"]["notes"]["fit_mode_"] == "exact"
        assert set(results["ranks"][name]) == set(cells) - {"SVC()"}
