"""Reproduce Section 5 of Shen's multi-kernel encoder paper: simulations and Table 1.

Paper: C. Shen, "Fast and Scalable Multi-Kernel Encoder Classifier"
(shared/seeds/multi-kernel-encoder-classifier.md).

Four methods, each timed as fit + predict on the same folds, interleaved (the order of
the methods rotates from fold to fold so that a burst of load from other processes does
not always hit the same method):

``linear_encoder``  ``EncoderClassifier(kernels=("linear",))`` (inner-product kernel only)
``multi_encoder``   ``EncoderClassifier()`` (linear, euclidean, spearman: the default),
                    kernel chosen by training cross-entropy with the 30 % rule
``svm``             ``sklearn.svm.SVC()`` — RBF kernel, all defaults (the paper: MATLAB
                    ``fitcecoc`` with a Gaussian-kernel SVM, defaults)
``mlp``             ``sklearn.neural_network.MLPClassifier(hidden_layer_sizes=(100,))``
                    (the paper: MATLAB ``fitcnet`` with 100 neurons, defaults);
                    ``max_iter`` capped (see ``--mlp-max-iter``), ConvergenceWarning
                    silenced and the number of fits that hit the cap recorded.

Optional extra method (not in the default run): ``svm_linear`` = ``SVC(kernel="linear")``.

Part 1 (Section 5.1): the six simulations of :mod:`scalenc.simulate`, K = 5, p = 5000,
n in ``--sizes``, 5-fold stratified CV, ``--replicates`` Monte-Carlo replicates (the
paper uses 20; the default here is 3). Simulated X is float32 (scalenc's default).
Part 2 (Section 5.2, Table 1): cora, citeseer, isolet, orl32, yale32, yaleb32 as
distributed (no rescaling; face images are raw 0..255 pixels), one shuffled 5-fold
stratified CV with a fixed seed; error and time mean ± std over the 5 folds.

Run from the repository root (datasets are found by :func:`scalenc.io.inputs.data_dir`)::

    python benchmarks/encoder_paper.py                  # the default run
    python benchmarks/encoder_paper.py --quick          # smoke run (~1-2 min)

Measured on the shared 2-core machine (load average 6-9 from other jobs): real data
506 s, simulations 415 s per replicate, so the default run is ~30 min under that load
(roughly half that on an idle machine). Every method runs with one BLAS thread
(``--blas-threads``); MLP ``max_iter`` is capped at 200 on real data and 100 in the
simulations — the MLP and the SVM on citeseer dominate the run time.
    python benchmarks/encoder_paper.py --replicates 20 --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from collections import Counter, defaultdict

import numpy as np

SIM_SIZES = (50, 100, 200, 300, 500)
REAL_DATASETS = ("citeseer", "cora", "isolet", "orl32", "yale32", "yaleb32")
DEFAULT_METHODS = ("linear_encoder", "multi_encoder", "svm", "mlp")
ALL_METHODS = DEFAULT_METHODS + ("svm_linear",)
MULTI_KERNELS = ("linear", "euclidean", "spearman")

# The paper's Table 1 (5-fold error %, running time s; mean, std) for the datasets that
# correspond to ours. ORL1 / Yale1 are the 32x32 versions, "Yale Extended" is YaleB 32x32.
PAPER_TABLE1 = {
    "citeseer": (
        "Citeseer",
        {
            "multi_encoder": (29.8, 0.2, 1.25, 0.13),
            "linear_encoder": (29.8, 0.2, 0.05, 0.01),
            "svm": (28.7, 0.4, 8.45, 0.24),
            "mlp": (30.9, 0.4, 4.53, 0.17),
        },
    ),
    "cora": (
        "Cora",
        {
            "multi_encoder": (28.8, 0.6, 0.43, 0.05),
            "linear_encoder": (28.9, 0.2, 0.01, 0.00),
            "svm": (25.5, 0.4, 1.39, 0.06),
            "mlp": (25.1, 0.4, 1.56, 0.06),
        },
    ),
    "isolet": (
        "ISOLET",
        {
            "multi_encoder": (7.6, 0.1, 1.10, 0.01),
            "linear_encoder": (7.6, 0.1, 0.03, 0.00),
            "svm": (3.6, 0.1, 7.95, 0.23),
            "mlp": (4.2, 0.1, 6.58, 0.29),
        },
    ),
    "orl32": (
        "ORL1",
        {
            "multi_encoder": (2.0, 0.4, 0.13, 0.05),
            "linear_encoder": (2.0, 0.4, 0.01, 0.00),
            "svm": (4.8, 0.3, 32.7, 2.6),
            "mlp": (78.9, 7.2, 6.87, 2.32),
        },
    ),
    "yale32": (
        "Yale1",
        {
            "multi_encoder": (20.4, 1.5, 0.06, 0.01),
            "linear_encoder": (20.0, 1.4, 0.01, 0.00),
            "svm": (26.8, 1.1, 12.6, 1.1),
            "mlp": (59.2, 0.6, 1.22, 0.91),
        },
    ),
    "yaleb32": (
        "Yale Extended",
        {
            "multi_encoder": (0.9, 0.1, 0.69, 0.02),
            "linear_encoder": (17.0, 0.3, 0.01, 0.00),
            "svm": (9.7, 0.6, 353.0, 7.9),
            "mlp": (18.6, 0.4, 26.3, 2.1),
        },
    ),
}


# --- methods -----------------------------------------------------------------------


def make_estimator(method: str, *, seed: int, mlp_max_iter: int):
    """A fresh, unfitted estimator for ``method``."""
    if method == "linear_encoder":
        from scalenc import EncoderClassifier

        return EncoderClassifier(kernels=("linear",))
    if method == "multi_encoder":
        from scalenc import EncoderClassifier

        return EncoderClassifier(kernels=MULTI_KERNELS)
    if method == "svm":
        from sklearn.svm import SVC

        return SVC()
    if method == "svm_linear":
        from sklearn.svm import SVC

        return SVC(kernel="linear")
    if method == "mlp":
        from sklearn.neural_network import MLPClassifier

        return MLPClassifier(hidden_layer_sizes=(100,), max_iter=mlp_max_iter, random_state=seed)
    raise ValueError(f"Unknown method {method!r}; choose from {list(ALL_METHODS)}.")


def fit_predict(method, X_train, y_train, X_test, *, seed, mlp_max_iter):
    """Fit and predict once; return (predictions, seconds, extra info)."""
    from sklearn.exceptions import ConvergenceWarning

    est = make_estimator(method, seed=seed, mlp_max_iter=mlp_max_iter)
    with warnings.catch_warnings():
        # MLPClassifier stops at max_iter on most of these data sets; that is recorded
        # below (hit_max_iter) rather than printed hundreds of times.
        warnings.simplefilter("ignore", ConvergenceWarning)
        t0 = time.perf_counter()
        est.fit(X_train, y_train)
        pred = est.predict(X_test)
        seconds = time.perf_counter() - t0
    info = {}
    if method == "multi_encoder":
        info["kernel"] = est.kernel_.name
        info["cross_entropy"] = [float(c) for c in est.cross_entropy_]
        info["n_passes"] = int(est.n_passes_)
    elif method == "linear_encoder":
        info["n_passes"] = int(est.n_passes_)
    elif method == "mlp":
        info["n_iter"] = int(est.n_iter_)
        info["hit_max_iter"] = bool(est.n_iter_ >= mlp_max_iter)
    return pred, seconds, info


def cross_validate(X, y, methods, *, seed, mlp_max_iter, n_folds=5):
    """One stratified, shuffled k-fold CV of every method on (X, y), methods interleaved."""
    from sklearn.model_selection import StratifiedKFold

    folds = StratifiedKFold(n_folds, shuffle=True, random_state=seed)
    with warnings.catch_warnings():
        # Small simulated samples (n = 50) can have a class with fewer than 5 rows.
        warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
        splits = list(folds.split(X, y))
    records = []
    for f, (train, test) in enumerate(splits):
        order = methods[f % len(methods) :] + methods[: f % len(methods)]
        for method in order:
            pred, seconds, info = fit_predict(
                method, X[train], y[train], X[test], seed=seed + f, mlp_max_iter=mlp_max_iter
            )
            records.append(
                {
                    "method": method,
                    "fold": f,
                    "error": float(np.mean(pred != y[test])),
                    "seconds": seconds,
                    **info,
                }
            )
    return records


def warm_up(methods):
    """Import and run every method once on tiny data so that no timing pays for imports."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 8)).astype(np.float32)
    y = np.repeat(np.arange(3), 20)
    for method in methods:
        fit_predict(method, X, y, X, seed=0, mlp_max_iter=5)


# --- part 1: simulations ------------------------------------------------------------


def run_simulations(args, methods, log):
    from scalenc.simulate import SETTINGS, simulate_rows

    settings = args.settings or SETTINGS
    records = []
    for si, setting in enumerate(settings):
        for ni, n in enumerate(args.sizes):
            for r in range(args.replicates):
                # Distinct data for every (setting, n, replicate): the simulation's rows
                # are tiles of a seeded stream, so reusing a seed across n would make the
                # smaller samples prefixes of the larger ones.
                seed = args.seed * 1_000_003 + 10_007 * si + 101 * ni + r
                t0 = time.perf_counter()
                X, y = simulate_rows(setting, 0, n, args.p, args.K, seed, dtype=np.float32)
                gen = time.perf_counter() - t0
                recs = cross_validate(X, y, methods, seed=seed, mlp_max_iter=args.mlp_max_iter_sim)
                for rec in recs:
                    rec.update(setting=setting, n=n, replicate=r)
                records.extend(recs)
                errs = _means(recs, "error")
                log(
                    f"  {setting:<20s} n={n:<4d} rep={r}  gen {gen:5.2f}s  "
                    + "  ".join(f"{m}={100 * errs[m]:.1f}%" for m in methods)
                )
    return records


def summarize_simulations(records, methods):
    groups = defaultdict(list)
    for rec in records:
        groups[(rec["setting"], rec["n"])].append(rec)
    rows = []
    for (setting, n), recs in groups.items():
        row = {"setting": setting, "n": n, "replicates": len({r["replicate"] for r in recs})}
        for m in methods:
            mine = [r for r in recs if r["method"] == m]
            # Mean over replicates of the 5-fold error (= mean over all folds, equal fold
            # counts); time = mean fit+predict seconds per fold.
            row[f"{m}_error"] = float(np.mean([r["error"] for r in mine]))
            row[f"{m}_seconds"] = float(np.mean([r["seconds"] for r in mine]))
            if m == "multi_encoder":
                row["multi_kernels"] = dict(Counter(r["kernel"] for r in mine))
            if m == "mlp":
                row["mlp_hit_max_iter"] = f"{sum(r['hit_max_iter'] for r in mine)}/{len(mine)}"
        rows.append(row)
    return rows


# --- part 2: real data --------------------------------------------------------------


def load_dataset(name):
    from scalenc.io.inputs import data_dir

    path = data_dir() / f"{name}.npz"
    if not path.exists():
        return None
    with np.load(path) as d:
        return d["X"], d["y"]


def run_real(args, methods, log):
    records = []
    for name in args.datasets:
        data = load_dataset(name)
        if data is None:
            log(f"  {name}: not found in data_dir(), skipped")
            continue
        X, y = data
        t0 = time.perf_counter()
        recs = cross_validate(X, y, methods, seed=args.seed, mlp_max_iter=args.mlp_max_iter)
        for rec in recs:
            rec["dataset"] = name
        records.extend(recs)
        errs = _means(recs, "error")
        log(
            f"  {name:<9s} {X.shape[0]}x{X.shape[1]} K={np.unique(y).size}  "
            f"{time.perf_counter() - t0:6.1f}s  "
            + "  ".join(f"{m}={100 * errs[m]:.1f}%" for m in methods)
        )
    return records


def summarize_real(records, methods):
    rows = []
    for name in dict.fromkeys(r["dataset"] for r in records):
        recs = [r for r in records if r["dataset"] == name]
        row = {"dataset": name}
        for m in methods:
            mine = sorted((r for r in recs if r["method"] == m), key=lambda r: r["fold"])
            err = np.array([r["error"] for r in mine])
            sec = np.array([r["seconds"] for r in mine])
            row[m] = {
                "error_mean": float(err.mean()),
                "error_std": float(err.std(ddof=1)),
                "seconds_mean": float(sec.mean()),
                "seconds_std": float(sec.std(ddof=1)),
            }
            if m == "multi_encoder":
                row["multi_kernels"] = [r["kernel"] for r in mine]
            if m == "mlp":
                row["mlp_n_iter"] = [r["n_iter"] for r in mine]
        rows.append(row)
    return rows


# --- tables -------------------------------------------------------------------------

SHORT = {
    "linear_encoder": "lin-enc",
    "multi_encoder": "multi-enc",
    "svm": "SVM",
    "mlp": "MLP",
    "svm_linear": "lin-SVM",
}


def _means(recs, key):
    out = defaultdict(list)
    for r in recs:
        out[r["method"]].append(r[key])
    return {m: float(np.mean(v)) for m, v in out.items()}


def _ratio(t, base):
    return f"{t / base:.0f}×" if t / base >= 10 else f"{t / base:.1f}×"


def simulation_tables(rows, methods):
    base = "linear_encoder" if "linear_encoder" in methods else methods[0]
    lines = ["### Simulations: mean 5-fold error (%) and mean fit+predict seconds per fold", ""]
    head = (
        ["setting", "n"]
        + [f"{SHORT[m]} err" for m in methods]
        + [f"{SHORT[m]} s" for m in methods]
        + [f"{SHORT[m]}/{SHORT[base]} time" for m in methods if m != base]
    )
    if "multi_encoder" in methods:
        head.append("multi-enc kernels")
    if "mlp" in methods:
        head.append("MLP at max_iter")
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["setting"], str(row["n"])]
        cells += [f"{100 * row[f'{m}_error']:.1f}" for m in methods]
        cells += [f"{row[f'{m}_seconds']:.3f}" for m in methods]
        cells += [_ratio(row[f"{m}_seconds"], row[f"{base}_seconds"]) for m in methods if m != base]
        if "multi_encoder" in methods:
            cells.append(", ".join(f"{k} {v}" for k, v in sorted(row["multi_kernels"].items())))
        if "mlp" in methods:
            cells.append(row["mlp_hit_max_iter"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def real_tables(rows, methods):
    base = "linear_encoder" if "linear_encoder" in methods else methods[0]
    lines = ["### Real data: 5-fold error (%), mean ± std over folds; ours vs paper's Table 1", ""]
    head = (
        ["dataset"]
        + [f"{SHORT[m]} ours" for m in methods]
        + [f"{SHORT[m]} paper" for m in methods if m != "svm_linear"]
    )
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        paper_name, paper = PAPER_TABLE1.get(row["dataset"], (row["dataset"], {}))
        cells = [f"{row['dataset']} ({paper_name})"]
        cells += [
            f"{100 * row[m]['error_mean']:.1f} ± {100 * row[m]['error_std']:.1f}" for m in methods
        ]
        cells += [
            f"{paper[m][0]:.1f} ± {paper[m][1]:.1f}" if m in paper else "—"
            for m in methods
            if m != "svm_linear"
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "### Real data: fit+predict seconds per fold, mean ± std; ratio to the linear "
        "encoder (ours) and the paper's seconds",
        "",
    ]
    head = (
        ["dataset"]
        + [f"{SHORT[m]} s" for m in methods]
        + [f"{SHORT[m]}/{SHORT[base]}" for m in methods if m != base]
        + [f"{SHORT[m]} paper s" for m in methods if m != "svm_linear"]
    )
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        paper_name, paper = PAPER_TABLE1.get(row["dataset"], (row["dataset"], {}))
        cells = [row["dataset"]]
        cells += [f"{row[m]['seconds_mean']:.3f} ± {row[m]['seconds_std']:.3f}" for m in methods]
        cells += [
            _ratio(row[m]["seconds_mean"], row[base]["seconds_mean"]) for m in methods if m != base
        ]
        cells += [
            f"{paper[m][2]:g} ± {paper[m][3]:g}" if m in paper else "—"
            for m in methods
            if m != "svm_linear"
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if "multi_encoder" in methods:
        lines += ["", "### Kernel chosen by the multi-kernel encoder, per fold", ""]
        lines += ["| dataset | folds 1–5 |", "|---|---|"]
        for row in rows:
            lines.append(f"| {row['dataset']} | {', '.join(row['multi_kernels'])} |")
    if "mlp" in methods:
        lines += [
            "",
            "MLP iterations per fold (cap = --mlp-max-iter): "
            + "; ".join(f"{row['dataset']} {row['mlp_n_iter']}" for row in rows),
        ]
    return "\n".join(lines)


# --- main ---------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: n in {50, 100}, p=500, 1 replicate, datasets orl32 and yale32",
    )
    p.add_argument(
        "--replicates",
        type=int,
        default=3,
        help="Monte-Carlo replicates per simulation (paper: 20; default 3)",
    )
    p.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=list(SIM_SIZES),
        help="simulation sample sizes n (default: 50 100 200 300 500)",
    )
    p.add_argument(
        "--settings",
        nargs="+",
        default=None,
        help="simulation settings (default: all six of scalenc.simulate.SETTINGS)",
    )
    p.add_argument("--p", type=int, default=5000, help="simulation dimension (paper: 5000)")
    p.add_argument("--K", type=int, default=5, help="simulation classes (paper: 5)")
    p.add_argument(
        "--datasets",
        nargs="+",
        default=list(REAL_DATASETS),
        help="real datasets (files <name>.npz in scalenc.io.inputs.data_dir())",
    )
    p.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), choices=ALL_METHODS)
    p.add_argument(
        "--mlp-max-iter",
        type=int,
        default=200,
        help="MLPClassifier max_iter on real data (sklearn's default, 200)",
    )
    p.add_argument(
        "--mlp-max-iter-sim",
        type=int,
        default=100,
        help="MLPClassifier max_iter in the simulations (default 100, to bound time)",
    )
    p.add_argument("--skip-simulations", action="store_true")
    p.add_argument("--skip-real", action="store_true")
    p.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="BLAS threads for every method (default 1: all four methods then run "
        "single-threaded, and oversubscribed OpenBLAS threads on a shared "
        "2-core machine made the MLP 5x slower)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write all per-fold records and summaries as JSON")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes = [50, 100]
        args.p = 500
        args.replicates = 1
        args.datasets = ["orl32", "yale32"]
    return args


def environment():
    import dask
    import sklearn

    import scalenc

    return {
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "sklearn": sklearn.__version__,
        "dask": dask.__version__,
        "scalenc": getattr(scalenc, "__version__", "?"),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
    }


def main(argv=None):
    args = parse_args(argv)
    methods = list(args.methods)
    start = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - start:7.1f}s] {msg}", flush=True)

    log(
        f"methods {methods}; MLP max_iter {args.mlp_max_iter} (real) / "
        f"{args.mlp_max_iter_sim} (simulations); BLAS threads {args.blas_threads}"
    )
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=args.blas_threads):
        result = run(args, methods, log)
    result["total_seconds"] = time.perf_counter() - start
    print()
    print("\n\n".join(result.pop("tables")))
    print(f"\nTotal wall-clock: {result['total_seconds']:.0f} s")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
        print(f"Wrote {args.out}")


def run(args, methods, log):
    warm_up(methods)
    result = {"args": vars(args), "environment": environment()}
    tables = []
    if not args.skip_simulations:
        log(f"simulations: p={args.p} K={args.K} n={args.sizes} replicates={args.replicates}")
        sim_records = run_simulations(args, methods, log)
        sim_rows = summarize_simulations(sim_records, methods)
        result.update(simulation_records=sim_records, simulation_summary=sim_rows)
        tables.append(simulation_tables(sim_rows, methods))
    if not args.skip_real:
        log(f"real data: {args.datasets}")
        real_records = run_real(args, methods, log)
        real_rows = summarize_real(real_records, methods)
        result.update(real_records=real_records, real_summary=real_rows)
        if real_rows:
            tables.append(real_tables(real_rows, methods))
    result["tables"] = tables
    return result


if __name__ == "__main__":
    main()
