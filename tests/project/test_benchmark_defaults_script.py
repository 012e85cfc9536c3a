"""benchmarks/defaults.py: issue 36's fixed list, its halves, the protocol, the report, and
a quick run end to end."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "defaults.py"
PAPERS = Path(os.environ.get("SCALENC_DATA_DIR", ROOT.parent / "shared" / "data"))


def _module(name: str = "defaults"):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, SCRIPT.parent / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_fixed_list_and_its_halves():
    """54 datasets of 2 000–600 000 rows, each once; the twelve that shaped the defaults
    apart; the rest in halves of 21, one of each consecutive pair by size in each half."""
    d = _module()
    sets = d.datasets()
    names = [s.name for s in sets]
    assert len(sets) == 54 and len(set(names)) == 54
    assert all(d.MIN_ROWS <= s.rows <= d.MAX_ROWS for s in sets)
    assert not set(d.PMLB_EXCLUDED) & {n for n, *_ in d.PMLB_SETS}
    assert set(d.SHAPED_ON) <= set(names)
    half = d.halves()
    assert half == d.halves()  # the seed fixes them
    counts = {h: list(half.values()).count(h) for h in ("tune", "report", "shaped")}
    assert counts == {"tune": 21, "report": 21, "shaped": 12}
    rest = [s.name for s in sets if s.name not in d.SHAPED_ON]
    for i in range(0, len(rest) - 1, 2):
        assert {half[rest[i]], half[rest[i + 1]]} == {"tune", "report"}
    assert half["pendigits"] == "tune" and half["coil2000"] == "report"


def test_every_method_with_its_defaults():
    """Each estimator as its class builds it, but for random_state=0 where it exists and
    the named settings of the variants and of Nyström + LR."""
    d = _module()
    built = {m: d.make_estimator(m) for m in d.METHODS}
    assert set(built) == set(d.ORDER) and d.ORDER[0] == "svc"
    for m in ("encoder", "lrc", "svc", "knn5", "lda"):
        assert built[m].get_params() == type(built[m])().get_params(), m
    for m in ("nrbfn", "ccdr", "hgb"):
        expected = type(built[m])().set_params(random_state=0).get_params()
        assert built[m].get_params() == expected, m
    assert built["nrbfn-paper"].get_params()["alpha"] == 1e-13
    assert built["nrbfn-cv"].get_params()["alpha"] == "cv"
    assert built["encoder-linear"].kernels == ("linear",)
    assert built["encoder-3k"].kernels == ("linear", "euclidean", "spearman")
    assert built["nystroem-lr"].get_params()["nystroem__n_components"] == 1000
    assert built["nystroem-lr"].get_params()["logisticregression__max_iter"] == 1000


def test_methods_with_parameters_in_brackets():
    """``--methods`` takes any method with parameters set by name, commas inside brackets
    included; a variant sorts after its method, and an unknown name lists the known."""
    d = _module()
    text = 'knn5,nrbfn[alpha=1e-9, n_basis=300],encoder[kernels=("linear", "spearman")],svc'
    methods = d.split_methods(text)
    assert methods == ["knn5", "nrbfn[alpha=1e-9, n_basis=300]",
                       'encoder[kernels=("linear", "spearman")]', "svc"]  # fmt: skip
    assert sorted(methods, key=d.order_key) == [methods[i] for i in (3, 1, 2, 0)]
    model = d.make_estimator(methods[1])
    assert (model.alpha, model.n_basis, model.random_state) == (1e-9, 300, 0)
    assert d.label(methods[2]) == "EncoderClassifier() with kernels=('linear', 'spearman')"
    assert d.estimator_key("knn5[n_neighbors=5]") == d.estimator_key("knn5")
    with pytest.raises(ValueError, match="unknown method 'rbf'; choose among nrbfn, "):
        d.parse_method("rbf")
    with pytest.raises(ValueError, match="give parameters by name"):
        d.parse_method("svc[10]")


def test_split_and_scale():
    """70 / 30 stratified with a singleton class on the training side; each feature of
    the training rows on [-1, 1], a constant one 0 on both sides."""
    d = _module()
    y = np.repeat([0, 1, 2], [70, 29, 1])
    train, test = d.split({"y": y}, None)
    assert np.intersect1d(train, test).size == 0 and train.size + test.size == 100
    assert test.size == 30 and 99 in train
    assert np.bincount(y[test], minlength=3).tolist() == [21, 9, 0]
    X = np.column_stack([np.arange(6.0), np.full(6, 3.0)])
    Xs, Xts, constant = d.scale(X[:4], X[4:])
    assert constant == 1
    np.testing.assert_allclose(Xs[:, 0], [-1, -1 / 3, 1 / 3, 1])
    np.testing.assert_allclose(Xts, [[5 / 3, 0], [7 / 3, 0]])
    assert (Xs[:, 1] == 0).all()


def test_split_seed_draws_another_split_and_reports_average_over_them():
    """``--split-seed``: another stratified 70 / 30 split (a standard one stays); several
    runs' report: each cell's mean error, the cells every run has, the seeds named."""
    d = _module()
    y = np.repeat([0, 1], [60, 40])
    zero, again, one = (
        d.split({"y": y}, None),
        d.split({"y": y}, None, 0),
        d.split({"y": y}, None, 1),
    )
    assert np.array_equal(zero[0], again[0]) and not np.array_equal(zero[0], one[0])
    assert np.bincount(y[one[1]]).tolist() == [18, 12]  # stratified as seed 0
    standard = {"y": y, "train": np.arange(70), "test": np.arange(70, 100)}
    assert np.array_equal(d.split(standard, None, 3)[1], np.arange(70, 100))

    def run(seed, nrbfn, svc):
        proto = {"pmlb_commit": "c", "split": f"stratified 70%/30% seed {seed}"}
        cells = {"nrbfn": {"error_pct": nrbfn, "fit_s": 1.0 + seed, "peak_mb": 10}}
        if svc is not None:
            cells["svc"] = {"error_pct": svc, "fit_s": 2.0, "peak_mb": 20 + seed}
        return {"protocol": proto, "runs": [seed], "datasets": {"a": {"cells": cells}}}

    mean = d.mean_over_splits([run(0, 10.0, 12.0), run(1, 14.0, 11.0), run(2, 12.0, None)])
    cells = mean["datasets"]["a"]["cells"]
    assert list(cells) == ["nrbfn"]  # svc is absent from one run
    assert cells["nrbfn"]["error_pct"] == 12.0 and cells["nrbfn"]["fit_s"] == 3.0
    assert cells["nrbfn"]["splits"] == 3 and mean["runs"] == [0, 1, 2]
    assert mean["protocol"]["split"].endswith("seeds 0, 1, 2, each cell's mean error")
    assert d.mean_over_splits([run(0, 1.0, 2.0)]) == run(0, 1.0, 2.0)
    other = run(1, 1.0, 2.0)
    other["protocol"]["pmlb_commit"] = "d"
    with pytest.raises(SystemExit, match="different protocols"):
        d.mean_over_splits([run(0, 1.0, 2.0), other])


def _toy_pmlb(path: Path) -> str:
    """A git repository laid out as PMLB: two classification sets in range (the second
    the first's rows shuffled), one too small, one regression. Its commit."""
    if shutil.which("git") is None:
        pytest.skip("git is absent")
    rng = np.random.default_rng(0)
    table = np.column_stack([rng.normal(size=(2100, 3)).round(3), rng.integers(3, size=2100)])
    sets = {
        "alpha": (table, "classification"),
        "beta": (table[rng.permutation(2100)], "classification"),
        "gamma": (table[:100], "classification"),
        "delta": (table, "regression"),
    }
    for name, (rows, task) in sets.items():
        folder = path / "datasets" / name
        folder.mkdir(parents=True)
        text = "a\tb\tc\ttarget\n" + "\n".join("\t".join(f"{v:g}" for v in r) for r in rows)
        (folder / f"{name}.tsv.gz").write_bytes(gzip.compress(text.encode()))
        (folder / "metadata.yaml").write_text(f"dataset: {name}\ntask: {task}\n")
        (folder / "summary_stats.csv").write_text(f",#instances,#features\n0,{len(rows)},3\n")
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "toy"], check=True)
    return subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def test_pmlb_read_with_git_and_listed_by_its_metadata(tmp_path):
    """Files are read from the repository's history, never its work tree; the listing
    keeps the classification sets in range and drops a set with another's rows."""
    d = _module()
    commit = _toy_pmlb(tmp_path / "pmlb")
    shutil.rmtree(tmp_path / "pmlb" / "datasets")  # only the history is read
    X, y = d.read_pmlb("alpha", tmp_path / "pmlb", commit)
    assert X.shape == (2100, 3) and X.dtype == np.float64 and set(y) == {0, 1, 2}
    listing = d.list_pmlb(tmp_path / "pmlb", commit)
    assert '("alpha", 2100, 3, 3),' in listing
    assert "# beta (2100 rows): the same rows as alpha" in listing
    assert "gamma" not in listing and "delta" not in listing
    with pytest.raises(d.DataMissing, match="git clone --no-checkout https://github.com/Epi"):
        d.read_pmlb("alpha", tmp_path / "absent", commit)
    with pytest.raises(d.DataMissing, match="git could not read"):
        d.read_pmlb("epsilon", tmp_path / "pmlb", commit)


def test_pmlb_sets_are_what_list_pmlb_writes():
    """With a PMLB clone at hand, the literal list is the helper's output."""
    repo = os.environ.get("SCALENC_PMLB_DIR")
    if not repo or not Path(repo).exists():
        pytest.skip("no PMLB clone (set SCALENC_PMLB_DIR)")
    d = _module()
    text = SCRIPT.read_text()
    assert d.list_pmlb(Path(repo)) + "\n" in text


def test_report_counts_wins_ties_losses_and_names_the_losses():
    """A tie is within 0.5 point; a peer that timed out is counted apart; the criteria and
    the losses are computed from the cells."""
    d = _module()
    rep = _module("defaults_report")
    info = {"rows": 3000, "features": 4, "classes": 2, "train_rows": 2100, "test_rows": 900}
    nrbfn = {"notes": {"basis_r": 50, "basis_wanted": 80, "max_basis_source": "cost",
                       "alpha_": 1e-13, "fit_mode_": "exact", "soft_knn": "exact",
                       "sigma_": 1.5, "rank_": 50}}  # fmt: skip
    results = {
        "protocol": {"pmlb_commit": d.PMLB_COMMIT, "split": "s", "scaling": "c",
                     "quick_rows": None, "time_budget_s": 300.0},  # fmt: skip
        "runs": [],
        "datasets": {
            "a": {"info": info, "cells": {
                "svc": {"error_pct": 10.0, "fit_s": 2.0},
                "knn5": {"error_pct": 12.0, "fit_s": 0.1},
                "nrbfn": {"error_pct": 10.4, "fit_s": 4.0, **nrbfn},
                "encoder": {"error_pct": 20.0, "fit_s": 0.1},
                "encoder-linear": {"error_pct": 20.0, "fit_s": 0.1, "same_as": "encoder"},
                "encoder-3k": {"error_pct": 19.5, "fit_s": 0.3},
            }},
            "b": {"info": dict(info, rows=4000), "cells": {
                "svc": {"failed": "did not finish in 300 s", "timed_out": True},
                "knn5": {"error_pct": 5.0, "fit_s": 0.1},
                "nrbfn": {"error_pct": 7.5, "fit_s": 9.0, **nrbfn},
            }},
        },
    }  # fmt: skip
    page = rep.report(results, {"a": "tune", "b": "tune"}, d.LABELS, d.SCALENC, d.PEERS)
    assert "## Half `tune`: 2 datasets" in page
    assert "| nrbfn | 0 / 1 / 0 (+1 peer t/o or failed) | 1 / 0 / 1 |" in page
    assert "| encoder | 0 / 0 / 1 | 0 / 0 / 1 |" in page
    assert "within 0.5 point of SVC() or better on 1 of 1 datasets where SVC ran (100 %" in page
    assert "worst gap to the better of SVC and 5-NN +2.50 points (b; target ≤ +2)" in page
    assert "fits +0.50 points (a; target ≤ +0.3), over 1 datasets" in page
    assert "| a | 3,000 × 4, 2 | 10.40 | 20.00 | 20.00 | 19.50 | **10.00** | 12.00 |" in page
    assert "| b | 3,000 × 4, 2 | 7.50 | — | — | — | t/o | **5.00** |" in page
    assert (
        "  * b: 7.50 % against knn5 5.00 (+2.50): basis 50 of 80 asked (capped by cost), "
        "α = 1e-13, exact, soft-KNN exact, σ = 1.5, rank 50; fit 9.0 s (— SVC's)"
    ) in page
    assert "* **encoder-linear** (EncoderClassifier(kernels=('linear',))): the same " in page
    assert "* b · SVC(): did not finish in 300 s" in page


@pytest.mark.slow  # every method fitted on four sets (about a minute); the script's parts are tested above
def test_quick_run_from_the_papers_data(tmp_path):
    """``--quick`` needs no PMLB: its PMLB sets are skipped with the way to get them, the
    papers' set runs, the JSON holds every cell, and a second run redoes none."""
    if not (PAPERS / "satimage.npz").exists():
        pytest.skip(f"{PAPERS / 'satimage.npz'} is absent (set SCALENC_DATA_DIR)")
    out = tmp_path / "quick.json"
    args = ("--quick", "--quick-rows", "600", "--datasets", "satimage,banana",
            "--methods", "nrbfn,encoder,encoder-3k,svc,knn5,knn5[n_neighbors=5]",
            "--papers-dir", str(PAPERS),
            "--pmlb", str(tmp_path / "no-pmlb"), "--cache-dir", str(tmp_path / "cache"),
            "--out", str(out))  # fmt: skip
    proc = _run(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "banana: skipped: get PMLB's history with `git clone --no-checkout" in proc.stdout
    assert "encoder-3k: " in proc.stdout and "(same as encoder)" in proc.stdout
    assert "knn5[n_neighbors=5]: " in proc.stdout and "(same as knn5)" in proc.stdout
    assert "## Half `shaped`: 1 datasets" in proc.stdout
    results = json.loads(out.read_text())
    assert list(results["datasets"]) == ["satimage"]
    entry = results["datasets"]["satimage"]
    assert entry["info"]["train_rows"] == 420 and entry["info"]["test_rows"] == 180
    assert list(entry["cells"]) == [
        "svc",
        "nrbfn",
        "encoder",
        "encoder-3k",
        "knn5",
        "knn5[n_neighbors=5]",
    ]
    for method, cell in entry["cells"].items():
        assert "failed" not in cell, (method, cell)
        assert 0 <= cell["error_pct"] < 40 and cell["peak_mb"] > 0, method
    assert entry["cells"]["nrbfn"]["notes"]["basis_r"] > 0
    assert entry["cells"]["encoder"]["notes"]["kernel_"] == "linear"
    assert (tmp_path / "cache" / "satimage-papers.npz").exists()
    again = _run(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "satimage: every cell already in" in again.stdout
    page = _run("--report", str(out))
    assert page.returncode == 0 and "### Test error %" in page.stdout
