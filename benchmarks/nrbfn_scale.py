"""nRBFN on MNIST (60000 training rows): fit time per stage, achieved GFLOP/s, BLAS peak, SVC.

Stages (``NRBFNClassifier.stage_times_``) and the floating-point work counted for each:

* soft-KNN — exact k-NN of every training row in the whole training set, by row-block
  pairs (one product serves both directions): p (n² + Σ_b b²) flops in float32 for
  float32 data, plus the basis gather.
* σ pass — distances of every row to the basis: 2 r n p.
* Gram pass — kernel 2 r n p, M = W̃W̃ᵀ r² n (float64: the flops of one ``dsyrk``, run as
  syrk squares and GEMM strips of the lower triangle), B = F W̃ᵀ.
* solve — Cholesky r³/3 + pivoted Cholesky for the rank r³/3 + 2 K r².

The BLAS peak is measured in the same run with a 4096² matmul on both cores, float32 and
float64, before and after the fit (the larger is used); each stage's rate is compared with
the peak of the precision its product runs in. The machine may be shared: the script
prints how many cores the fit actually got on average.
scikit-learn's SVC (RBF, default C and gamma) is timed on a subsample (``--svc-rows``,
default 10000) because on the full 60000 rows it takes far longer than nRBFN on 2 cores.

``--hard N`` instead measures ``NRBFNClassifier()`` with its memory-aware defaults on a
simulated hard 3-class problem of N training rows × 42 features (overlapping classes: about
90 % of the rows have soft-KNN confidence below 0.9, so the paper's rule asks for a basis of
most rows), each fit in a subprocess of its own whose peak resident memory is sampled with
psutil: the defaults, the hand-tuned setting ``n_candidates=5000, max_basis=4000``, and
scikit-learn's k-NN (k = 20) as a reference.

Usage: python benchmarks/nrbfn_scale.py [--rows 60000] [--svc-rows 10000] [--chunk-rows 10000]
       python benchmarks/nrbfn_scale.py --hard 50000
       python benchmarks/nrbfn_scale.py --connect4 PMLB_DIR [--setting NAME ...]
       python benchmarks/nrbfn_scale.py --basis-rules connect_4 2000 4000 --pmlb-dir DIR
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from scalenc import NRBFNClassifier
from scalenc.io.inputs import data_dir


def blas_peak(dtype, size=4096, repeats=3) -> float:
    """GFLOP/s of a size² matmul on all cores (best of ``repeats``)."""
    rng = np.random.default_rng(0)
    a = rng.random((size, size)).astype(dtype)
    b = rng.random((size, size)).astype(dtype)
    a @ b
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best / 1e9


def hard_dataset(n: int, p: int = 42, seed: int = 0, test_rows: int = 10000):
    """Three overlapping classes (50/30/20 %) with non-linear class shifts: most rows have
    soft-KNN confidence below 0.9. Returns X_train, y_train, X_test, y_test (float64)."""
    rng = np.random.default_rng(seed)
    m = n + test_rows
    y = rng.choice(3, size=m, p=[0.5, 0.3, 0.2])
    X = rng.normal(size=(m, p)) + 0.25 * rng.normal(size=(3, p))[y]
    X[:, 0] += 1.5 * np.sin(2 * X[:, 1]) * (y == 1)
    X[:, 2] += 1.5 * (X[:, 3] ** 2 - 1) * (y == 2)
    return X[:n], y[:n], X[n:], y[n:]


def connect4_dataset(pmlb_dir: str):
    """UCI Connect-4 as PMLB distributes it (``DIR/connect_4/connect_4.tsv.gz``, the file
    ``pmlb.fetch_data("connect_4", local_cache_dir=DIR)`` writes): 67 557 × 42, 3 classes;
    a stratified 2/3 split, seed 0, raw features (float64)."""
    import pandas as pd
    from sklearn.model_selection import train_test_split

    path = Path(pmlb_dir) / "connect_4" / "connect_4.tsv.gz"
    if not path.exists():
        sys.exit(f"{path} not found: pip install pmlb, then in Python "
                 f"pmlb.fetch_data('connect_4', local_cache_dir={str(pmlb_dir)!r})")  # fmt: skip
    frame = pd.read_csv(path, sep="\t")
    X = frame.drop(columns="target").to_numpy(np.float64)
    y = frame["target"].to_numpy()
    Xtr, Xte, ytr, yte = train_test_split(X, y, train_size=2 / 3, stratify=y, random_state=0)
    return Xtr, ytr, Xte, yte


HARD_SETTINGS = {
    "defaults": {},
    "n_candidates=5000, max_basis=4000": {"n_candidates": 5000, "max_basis": 4000},
    "max_basis=4000": {"max_basis": 4000},
    "max_basis=2000": {"max_basis": 2000},
    # twice the "auto" cap: what the cap loses (needs ~13 GB; not in the default runs)
    "max_basis=20000, memory_limit=20GB": {"max_basis": 20000, "memory_limit": "20GB"},
}


def _hard_child(n: int, setting: str, pmlb_dir: str | None = None) -> dict:
    """One fit of the hard problem in this process, with its peak RSS (sampled every 50 ms)."""
    import psutil

    Xtr, ytr, Xte, yte = connect4_dataset(pmlb_dir) if pmlb_dir else hard_dataset(n)
    proc, peak, stop = psutil.Process(), [0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.05)

    base = proc.memory_info().rss
    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    t0 = time.perf_counter()
    out = {"setting": setting}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if setting == "knn":
            from sklearn.neighbors import KNeighborsClassifier

            model = KNeighborsClassifier(20).fit(Xtr, ytr)
        else:
            model = NRBFNClassifier(**HARD_SETTINGS[setting]).fit(Xtr, ytr)
            out.update(
                r=int(model.basis_.shape[0]),
                fit_mode=model.fit_mode_,
                wanted=model.memory_plan_["basis"]["wanted"],
                budget_gb=model.memory_plan_["budget"]["client"] / 1e9,
            )
    out["fit_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    out["error"] = 1.0 - model.score(Xte, yte)
    out["predict_s"] = time.perf_counter() - t0
    stop.set()
    watcher.join()
    out["peak_gb"], out["base_gb"] = peak[0] / 1e9, base / 1e9
    out["warnings"] = [type(w.message).__name__ for w in caught]
    return out


def hard(n: int, pmlb_dir: str | None = None, only: list[str] | None = None) -> None:
    if pmlb_dir:
        print(
            "Connect-4 (PMLB): 45 038 training rows x 42, 22 519 test rows; one subprocess per fit"
        )
        settings = ("defaults", "max_basis=4000", "max_basis=2000", "knn")
    else:
        print(
            f"Hard 3-class problem, {n} training rows x 42, 10000 test rows; one subprocess per fit"
        )
        settings = ("defaults", "n_candidates=5000, max_basis=4000", "knn")
    settings = only or settings
    print(
        "\n| setting | basis r (wanted) | mode | fit s | predict s | test error % | peak RSS GB |"
    )
    print("|---|---|---|---|---|---|---|")
    for setting in settings:
        code = f"import json, sys; sys.path.insert(0, {str(__file__.rsplit('/', 1)[0])!r}); "
        code += "import nrbfn_scale as b; "
        code += f"print(json.dumps(b._hard_child({n}, {setting!r}, {pmlb_dir!r})))"
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if run.returncode:
            print(f"| {setting} | failed: {run.stderr.strip().splitlines()[-1]} |")
            continue
        res = json.loads(run.stdout.strip().splitlines()[-1])
        basis = f"{res['r']} ({res['wanted']})" if "r" in res else "—"
        print(
            f"| {setting if setting != 'knn' else 'scikit-learn k-NN (k=20)'} | {basis} | "
            f"{res.get('fit_mode', '—')} | {res['fit_s']:.1f} | {res['predict_s']:.1f} | "
            f"{100 * res['error']:.2f} | {res['peak_gb']:.2f} |"
        )


def basis_rules(name: str, sizes: list[int], pmlb_dir: str | None) -> None:
    """Which rows a capped basis should keep: the least confident (the rule before) or rows
    spread evenly over the confidence order (the rule now), and a random draw among the
    rule's basis, each at the same r, on one dataset. The soft-KNN confidences come from
    one ``NRBFNClassifier`` fit; each basis is then fitted in memory exactly as ``fit``
    does (σ = mean distance to the basis, W̃ by ``normalized_kernel``, λ = 1e-13 by
    ``ridge_solve``)."""
    # the network on a basis, as fit builds it; a PMLB table split and scaled as there
    from nrbfn_basis_curves import fit_basis, load

    from scalenc.nrbfn import soft_knn

    if name == "hard":
        Xtr, ytr, Xte, yte = hard_dataset(50000)
    elif name == "connect_4":
        Xtr, ytr, Xte, yte = connect4_dataset(pmlb_dir)
    else:  # any PMLB dataset: a stratified 2/3 split, seed 0, standardised
        Xtr, ytr, Xte, yte = load(name, Path(pmlb_dir) if pmlb_dir else None, 0)
    classes, codes = np.unique(ytr, return_inverse=True)
    K = classes.size
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = NRBFNClassifier(max_basis=K).fit(Xtr, ytr)  # only its confidences are used
    conf, cand = model.confidence_, model.candidate_indices_
    wanted = np.flatnonzero(conf < model.confidence_threshold)
    print(f"{name}: {Xtr.shape[0]} training rows x {Xtr.shape[1]}, {K} classes, "
          f"{yte.size} test rows; the rule asks for r = {wanted.size}")  # fmt: skip
    print("\n| r | least confident % | spread over the confidence order % | random % |")
    print("|---:|---:|---:|---:|")

    def test_error(pos):
        pred, _ = fit_basis(Xtr, codes, Xte, K, Xtr[cand[pos]])
        return 100.0 * np.mean(classes[pred] != yte)

    rng = np.random.default_rng(0)
    for r in sizes:
        if r >= wanted.size:
            continue
        least = soft_knn.select_basis(conf, codes[cand], model.confidence_threshold, K, n_basis=r)[
            0
        ]
        spread = soft_knn.select_basis(
            conf, codes[cand], model.confidence_threshold, K, max_basis=r
        )[0]
        reserve = soft_knn._least_confident_per_class(conf, codes[cand], K)
        rest = np.setdiff1d(wanted, reserve)
        drawn = np.union1d(reserve, rng.choice(rest, r - reserve.size, replace=False))
        errors = [test_error(pos) for pos in (least, spread, drawn)]
        print(f"| {r} | " + " | ".join(f"{e:.2f}" for e in errors) + " |", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=60000)
    parser.add_argument("--svc-rows", type=int, default=10000)
    parser.add_argument("--chunk-rows", type=int, default=10000)
    parser.add_argument("--hard", type=int, default=None, metavar="N")
    parser.add_argument(
        "--connect4",
        metavar="PMLB_DIR",
        help="the hard problem on the real Connect-4 data from a PMLB cache directory",
    )
    parser.add_argument(
        "--setting",
        action="append",
        choices=[*HARD_SETTINGS, "knn"],
        help="with --hard/--connect4: run only this setting (repeatable)",
    )
    parser.add_argument(
        "--basis-rules",
        nargs="+",
        metavar=("DATASET", "R"),
        help="DATASET R [R ...]: the capped basis's rules side by side at each r "
        "(DATASET: hard, connect_4 or a PMLB name read from --pmlb-dir)",
    )
    parser.add_argument("--pmlb-dir", default=None, help="PMLB cache for --basis-rules")
    args = parser.parse_args(argv)
    if args.basis_rules:
        name, *sizes = args.basis_rules
        basis_rules(name, [int(r) for r in sizes], args.pmlb_dir)
        return
    if args.hard or args.connect4:
        hard(args.hard or 0, args.connect4, args.setting)
        return

    d = np.load(data_dir() / "mnist.npz", allow_pickle=False)
    X = d["X"] / np.float32(255.0)
    y = d["y"]
    Xtr, ytr = X[: args.rows], y[: args.rows]
    Xte, yte = X[60000:], y[60000:]
    n, p = Xtr.shape

    peak32, peak64 = blas_peak(np.float32), blas_peak(np.float64)
    print(
        f"BLAS peak (4096² matmul, all cores): float32 {peak32:.0f} GFLOP/s, float64 {peak64:.0f} GFLOP/s"
    )

    cpu0 = time.process_time()
    t0 = time.perf_counter()
    model = NRBFNClassifier(chunk_rows=args.chunk_rows).fit(Xtr, ytr)  # the defaults
    fit_time = time.perf_counter() - t0
    cores_used = (time.process_time() - cpu0) / fit_time
    after32, after64 = blas_peak(np.float32), blas_peak(np.float64)
    print(
        f"BLAS peak after the fit: float32 {after32:.0f}, float64 {after64:.0f} GFLOP/s; "
        f"the fit used {cores_used:.2f} cores on average (2 = the whole machine; less means "
        "other processes took CPU or the stage was not parallel)"
    )
    peak32, peak64 = max(peak32, after32), max(peak64, after64)
    t0 = time.perf_counter()
    error = 1.0 - model.score(Xte, yte)
    predict_time = time.perf_counter() - t0
    r, K = model.basis_.shape[0], model.classes_.size
    blocks = [min(args.chunk_rows, n - s) for s in range(0, n, args.chunk_rows)]

    flops = {
        "soft_knn": (p * (float(n) ** 2 + sum(float(b) ** 2 for b in blocks)), peak32),
        "sigma": (2.0 * r * n * p, peak32),
        "gram": (2.0 * r * n * p + float(r) * r * n + 2.0 * K * r * n, peak64),
        "solve": (2.0 * r**3 / 3 + 2.0 * K * r * r, peak64),
    }
    print(
        f"\nMNIST n={n}, p={p}, basis r={r} ({100 * model.basis_fraction_:.1f} %), "
        f"test error {100 * error:.2f} % (target <= 1.85 %), passes {model.n_passes_}, "
        f"fit_mode_ {model.fit_mode_!r} (memory budget "
        f"{model.memory_plan_['budget']['client'] / 1e9:.1f} GB, Gram estimate "
        f"{model.memory_plan_['gram']['client'] / 1e9:.1f} GB)"
    )
    print(f"epsilon={model.fitting_error_:.4f} gamma={model.spectral_risk_:.3g} rank={model.rank_}")
    print("\n| stage | seconds | GFLOP | GFLOP/s | peak GFLOP/s (precision) | % of peak |")
    print("|---|---|---|---|---|---|")
    for stage, (work, peak) in flops.items():
        seconds = model.stage_times_[stage]
        rate = work / seconds / 1e9
        precision = "f32" if peak is peak32 else "f64"
        print(
            f"| {stage} | {seconds:.1f} | {work / 1e9:.0f} | {rate:.0f} | {peak:.0f} ({precision}) | "
            f"{100 * rate / peak:.0f} |"
        )
    print(f"| total fit | {fit_time:.1f} | | | | |")
    print(f"\npredict 10000 test rows: {predict_time:.1f} s")

    from sklearn.svm import SVC

    rows = min(args.svc_rows, n)
    t0 = time.perf_counter()
    svc = SVC().fit(Xtr[:rows], ytr[:rows])
    svc_time = time.perf_counter() - t0
    svc_error = 1.0 - svc.score(Xte, yte)
    print(
        f"\nSVC (RBF, default) on the first {rows} rows: fit {svc_time:.1f} s, test error "
        f"{100 * svc_error:.2f} %, support vectors {svc.n_support_.sum()}"
    )
    small = NRBFNClassifier(chunk_rows=args.chunk_rows).fit(Xtr[:rows], ytr[:rows])
    print(
        f"nRBFN on the same {rows} rows: fit {sum(small.stage_times_.values()):.1f} s, "
        f"test error {100 * (1 - small.score(Xte, yte)):.2f} %"
    )


if __name__ == "__main__":
    main()
