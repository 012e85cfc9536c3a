"""The benchmark scripts run end to end on tiny sizes and print their tables."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# each benchmark script run end to end on tiny inputs (10-50 s each, clusters for some):
# CI's slow run; the library paths they time are tested by the other modules
pytestmark = pytest.mark.slow

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _run(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=BENCHMARKS.parent,
    )


def _scale_args(tmp_path: Path, scheduler: str) -> list[str]:
    return [
        "--quick",
        "--sizes", "3000", "6000",
        "--features", "8",
        "--classes", "3",
        "--chunk-rows", "2000",
        "--test-rows", "1000",
        "--peer-rows", "4000",
        "--scheduler", scheduler,
        "--workdir", str(tmp_path / "work"),
        "--json", str(tmp_path / "out.json"),
    ]  # fmt: skip


def _check_scale_output(proc: subprocess.CompletedProcess, tmp_path: Path) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "| rows | step | fit s | × read |" in out
    for step in ("bare read", "NRBFNClassifier()", "CCDRClassifier()", "scikit-learn LDA"):
        assert f"| 6,000 | {step} |" in out or f"(in memory) | {step} |" in out, step
    results = json.loads((tmp_path / "out.json").read_text())
    assert [row["rows"] for row in results["sizes"]] == [3000, 6000]
    for row in results["sizes"]:
        for step in ("nrbfn", "ccdr"):
            assert "failed" not in row[step], row[step]["failed"]
            assert 0 <= row[step]["error"] < 0.2  # 3 well-separated classes
            assert row[step]["fit_over_read"] > 0
        assert row["nrbfn"]["nrbfn"]["fit_mode_"] == "exact"  # tiny: the paper's algorithm
    return results


def test_scale_defaults_threads(tmp_path):
    """``--quick`` with explicit tiny sizes: the store is written, both defaults fit, the
    table and the JSON hold every step."""
    proc = _run("scale_defaults.py", *_scale_args(tmp_path, "threads"))
    results = _check_scale_output(proc, tmp_path)
    assert "writing 6,000 × 8 float32" in proc.stdout
    assert results["sizes"][0]["read"]["workers_mb"] == 0  # no worker processes


@pytest.mark.slow
@pytest.mark.cluster
def test_scale_defaults_local_cluster(tmp_path):
    """The same on a LocalCluster: the workers' memory is sampled; a second run with a
    smaller size reuses the store (its first rows) instead of writing another."""
    args = _scale_args(tmp_path, "local") + ["--memory-limit", "1GiB"]
    proc = _run("scale_defaults.py", *args)
    results = _check_scale_output(proc, tmp_path)
    assert results["sizes"][0]["read"]["workers_mb"] > 0
    assert results["cluster_starts"] == 1  # no worker lost
    again = _run("scale_defaults.py", *_scale_args(tmp_path, "threads"), "--sizes", "3000")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "writing" not in again.stdout
    assert "| 3,000 | NRBFNClassifier() |" in again.stdout


def _markdown_rows(out: str) -> dict[tuple[str, str, str], list[str]]:
    """The rows of a Markdown table, keyed by their first three cells."""
    rows = {}
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 7 and cells[0] not in ("estimator", "---"):
            rows[tuple(cells[:3])] = cells[3:]
    return rows


def test_roofline_tiny(tmp_path):
    """Tiny shapes: the machine rates are printed, and the table has a row for every stage
    each fit recorded, with a finite positive time ÷ floor (only a stage with no work,
    nRBFN's ``cv`` with its one default λ, has no floor), and a whole-fit row per fit."""
    proc = _run(
        "roofline.py",
        "--rows", "3000",
        "--features", "8",
        "--encoder-classes", "3",
        "--classes", "3",
        "--gemm-size", "256",
        "--read-repeats", "1",
        "--workdir", str(tmp_path / "work"),
        "--json", str(tmp_path / "roofline.json"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "machine rates: GEMM f32" in proc.stdout
    assert "| estimator | shape | stage | seconds | floor s | time ÷ floor | floor bound |" in (
        proc.stdout
    )
    table = _markdown_rows(proc.stdout)
    results = json.loads((tmp_path / "roofline.json").read_text())
    stages = {
        "encoder": ["class_means", "embedding", "cross_entropy"],
        "nrbfn": ["soft_knn", "sigma", "gram", "cv", "solve"],
        "ccdr": ["draw", "gather", "solve", "extension"],
    }
    assert sorted(fit["estimator"] for fit in results["fits"]) == sorted(stages)
    for fit in results["fits"]:
        name, shape = fit["estimator"], fit["shape"]
        assert shape == "3,000 × 8, K=3"
        assert [st["stage"] for st in fit["stages"]] == stages[name]
        for stage in stages[name] + ["**whole fit**"]:
            seconds, floor, ratio, bound = table[name, shape, stage]
            assert 0 < float(ratio) < float("inf"), (name, stage, ratio)
            assert float(seconds) > 0 and float(floor) > 0
            assert bound in ("read", "GEMM f32", "GEMM f64", "element-wise", "sort")
        assert 0 < fit["whole_ratio"] < float("inf")
        assert fit["whole_ratio"] == pytest.approx(fit["fit_s"] / fit["whole_floor_s"])
    assert {"gemm32", "gemm64", "elementwise", "sort"} <= results["rates"].keys()


def test_roofline_cluster_tiny(tmp_path):
    """On the LocalCluster the floors use 2 workers × the one-thread rates (the all-core
    rates kept beside them), and each fit records the task stream's transfers."""
    proc = _run(
        "roofline.py",
        "--rows", "3000",
        "--features", "8",
        "--classes", "3",
        "--estimators", "nrbfn",
        "--gemm-size", "256",
        "--read-repeats", "1",
        "--scheduler", "cluster",
        "--workdir", str(tmp_path / "work"),
        "--json", str(tmp_path / "roofline.json"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(one thread)" in proc.stdout and "floors: 2 workers × one thread" in proc.stdout
    results = json.loads((tmp_path / "roofline.json").read_text())
    assert results["rates"]["label"] == "2 workers × one thread"
    assert results["rates_all_cores"]["label"] == "all cores"
    (fit,) = results["fits"]
    stream = fit["info"]["task_stream"]
    assert stream["transfer_wall_s"] >= 0 and stream["prefixes"]
    assert sum(row["compute_s"] for row in stream["prefixes"].values()) > 0
    assert fit["info"]["gram_partial_mb"] > 0


def test_encoder_profile_tiny(tmp_path):
    """Every second of the profiled fit belongs to one component (``other`` the rest), the
    table prints, and the summary names the two largest components."""
    proc = _run(
        "encoder_profile.py",
        "--rows", "20000",  # Z (20 000 × 9 float64) over 1 MiB: its cache is .npy files
        "--features", "8",
        "--classes", "3",
        "--chunk-rows", "5000",
        "--repeats", "1",
        "--workdir", str(tmp_path / "work"),
        "--json", str(tmp_path / "profile.json"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| component | class_means | embedding | cross_entropy |" in proc.stdout
    assert "top two:" in proc.stdout
    (shape,) = json.loads((tmp_path / "profile.json").read_text())["shapes"]
    sync = shape["sync"]
    assert sync["plan"] == "cache"
    comps = sync["components"]
    for name in ("read X", "class sums", "spearman ranks", "stacked class moments",
                 "LDA log-likelihoods", "Z cache write", "Z cache read"):  # fmt: skip
        assert comps[name] > 0, name
    assert sum(comps.values()) == pytest.approx(sync["fit_s"])
    assert len(shape["summary"]["top"]) == 2


def test_nrbfn_pcg_tiny(tmp_path):
    """A few hundred simulated rows: the normal equations and every PCG solve (4 λ × 5
    preconditioners) print, and a converged solve's residual, measured against the Gram of
    ``gram_block``, is as small as CG's own (the streamed W̃ᵀ(W̃ V) is the Gram's product)."""
    proc = _run(
        "nrbfn_pcg.py",
        "--datasets", "sim32",
        "--sim-rows", "600",
        "--test-rows", "300",
        "--max-iter", "40",
        "--timing-passes", "1",
        "--json", str(tmp_path / "pcg.json"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "normal equations: Gram" in proc.stdout
    (result,) = json.loads((tmp_path / "pcg.json").read_text())
    assert result["n"] == 600 and result["K"] == 5 and result["normal_s"] > 0
    assert result["iter_s"] > 0
    assert len(result["reference_error"]) == 4  # the fitted λ, 1e-10, 1e-8 and 1e-6
    names = {"none", "jacobi", "nys-1r", "nys-2r", "basis"}
    assert {s["preconditioner"] for s in result["solves"]} == names
    assert len(result["solves"]) == 20
    converged = [s for s in result["solves"] if s.get("to_residual", {}).get("1e-06")]
    assert converged  # the well-conditioned λ = 1e-6 converges in a few passes
    for s in converged:
        assert s["true_residual"] < 1e-5
        assert s["to_error"] is not None


def test_ccdr_eigen_quick(tmp_path):
    """Two small simulated graphs: every solver runs, and Lanczos and shift-invert give
    the dense solver's eigenvalues and eigenvector subspaces."""
    proc = _run("ccdr_eigen.py", "--quick", "--json", str(tmp_path / "eig.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((tmp_path / "eig.json").read_text())
    assert [row["data"] for row in rows] == ["sim p=8 (m=5)", "sim p=32 (auto)"]
    assert rows[0]["m"] == 5
    for row in rows:
        assert row["reference"] == "dense"
        assert set(row["seconds"]) == {"lanczos", "shift-invert", "dense"}
        assert all(seconds > 0 for seconds in row["seconds"].values())
        for method in ("lanczos", "shift-invert"):
            assert row["max_dlam"][method] < 1e-10
            assert row["min_cos"][method] > 1 - 1e-8


def test_compiled_kernels_quick(tmp_path):
    """The NumPy side always runs; with numba installed the kernels run too, and the
    script has checked their results against NumPy's (it fails otherwise)."""
    proc = _run(
        "compiled_kernels.py", "--quick", "--repeats", "2", "--json", str(tmp_path / "k.json")
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "k.json").read_text())
    (ranks,), (selection,), (knn,) = result["ranks"], result["selection"], result["soft_knn"]
    assert (ranks["p"], ranks["K"], selection["s"], selection["m"]) == (16, 10, 500, 5)
    assert (knn["s"], knn["m"]) == (2000, 20)
    assert ranks["numpy_s"] > 0 and selection["product_s"] > 0 and selection["numpy_s"] >= 0
    assert knn["numpy_s"] > 0 and knn["product_s"] > 0
    try:
        import numba  # noqa: F401
    except ImportError:
        assert result["numba"] is None and "numba is not installed" in proc.stdout
    else:
        assert ranks["numba_s"] > 0 and selection["numba_s"] > 0 and knn["numba_s"] > 0
        assert knn["same_positions"] > 0.99  # the same neighbours, bar near-ties
        assert "numba ÷ NumPy" in proc.stdout


def test_worker_faults_quick(tmp_path):
    """Each stage runs in a plain process and in one with the environment Dask's nanny
    gives its workers (read from Dask's config), and the table compares them."""
    import dask
    from distributed import Nanny  # noqa: F401 (the config of distributed is loaded)

    proc = _run(
        "worker_faults.py",
        "--quick",
        "--repeats",
        "2",
        "--rounds",
        "2",
        "--json",
        str(tmp_path / "f.json"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "f.json").read_text())
    nanny = dask.config.get("distributed.nanny.pre-spawn-environ")
    assert result["nanny_environ"] == {str(k): str(v) for k, v in nanny.items()}
    stages = [row["stage"] for row in result["rows"]]
    assert stages == [
        "soft_knn",
        "sigma",
        "gram",
        "ccdr_extension",
        "encoder_pass1",
        "encoder_pass2",
    ]
    for row in result["rows"]:
        assert row["p"] == 8
        for side in ("plain", "nanny"):
            assert row[side]["seconds"] > 0 and row[side]["faults"] >= 0
        assert row["ratio"] == pytest.approx(row["nanny"]["seconds"] / row["plain"]["seconds"])
    assert "nanny s" in proc.stdout and "encoder_pass2" in proc.stdout


@pytest.mark.slow  # 30-40 s: two clusters of nanny workers started, one of them churned
def test_churn_quick(tmp_path):
    """nRBFN with a checkpoint on a calm cluster and on one whose workers are killed with
    their nannies every 3 s (allowed-failures 1: a task survives one dead worker, the fit
    may resume): the same predictions as the threaded fit, and the table."""
    out = tmp_path / "churn.json"
    proc = _run(
        "churn.py", "--quick", "--allowed-failures", "1", "--workdir", str(tmp_path / "w"),
        "--json", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    (row,) = result["rows"]
    assert row["estimator"] == "nrbfn" and set(row["fits"]) == {"calm", "every 3 s"}
    for fit in row["fits"].values():
        assert "failed" not in fit, fit
        assert fit["agreement"] == 1.0 and fit["attempts"] >= 1
    assert row["fits"]["calm"]["kills"] == 0 and row["fits"]["every 3 s"]["kills"] >= 1
    assert "| nrbfn |" in proc.stdout and "load average before" in proc.stdout
