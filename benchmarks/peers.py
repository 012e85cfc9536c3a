"""scalenc's four classifiers beside five scikit-learn peers on seven public datasets.

Issue 12's peer comparison, every method with its defaults, side by side in one run.

Datasets (``--datasets``, run in this order, smallest first):

============  =========  ===  ===  ==========================================
name          rows       p    K    shape
============  =========  ===  ===  ==========================================
letter        20 000     16   26   many balanced classes, low p
adult         48 842     14   2    two classes, 76 / 24 %
shuttle       58 000     9    7    very imbalanced (79 % one class), low p
connect_4     67 557     42   3    66 / 25 / 10 %, a hard board-game target
mnist         70 000     784  10   high p, balanced (its standard split)
fars          100 968    29   8    imbalanced, noisy
kddcup        494 020    41   23   very imbalanced (classes of 2 rows)
============  =========  ===  ===  ==========================================

The six PMLB datasets are read as ``pmlb.fetch_data(name, local_cache_dir=DIR)`` stores
them, ``DIR/{name}/{name}.tsv.gz`` (tab-separated, a header, the label column ``target``),
from ``--data-dir`` (default ``$SCALENC_PMLB_DIR``, else ``~/.cache/pmlb``); a missing file
is fetched with the ``pmlb`` package when it is installed. MNIST is ``mnist.npz`` of the
papers' data directory (``$SCALENC_DATA_DIR``, default ``../shared/data``), pixels / 255.

Protocol
--------
* Split: stratified random, 2/3 train and 1/3 test, seed 0 (scikit-learn's
  ``train_test_split``); MNIST: its standard 60 000 / 10 000 split. Rows of a class with a
  single row (possible only in a ``--quick`` subsample) go to the training side.
* ``--quick``: each dataset first subsampled (stratified, seed 0) to ``--quick-rows`` rows
  (default 5000), so that the whole run takes a minute or two.
* Scaling: a ``StandardScaler`` fitted on the training rows, applied to both sides, for
  every method (HistGradientBoosting does not need it, being invariant to monotone
  per-feature maps up to its binning, but it does not hurt and keeps one input for all).
  Float64 NumPy arrays in memory; scalenc runs on the threaded Dask scheduler (its default).
* Methods, every one with its defaults (``random_state`` only where it exists, for
  repeatability): scalenc's ``EncoderClassifier()``, ``NRBFNClassifier(random_state=0)``,
  ``LRClassifier()``, ``CCDRClassifier(random_state=0)``; scikit-learn's ``SVC()`` (RBF),
  ``make_pipeline(Nystroem(n_components=1000, random_state=0),
  LogisticRegression(max_iter=1000))`` (the kernel approximation that scales),
  ``KNeighborsClassifier()`` (5-NN), ``LinearDiscriminantAnalysis()``,
  ``HistGradientBoostingClassifier(random_state=0)``.
* SVC is skipped (printed "—") when the training side has more than ``--svc-max-train``
  rows (default 30 000): its fit grows between n² and n³ (at 45 000 rows × 42 features it
  took 147 s + 26 s to predict, issue 12) and its prediction cost with the number of
  support vectors, which grows with n on noisy data.
* Measured per (dataset, method), each in a fresh subprocess that reads the split from
  ``.npy`` files (so that one method's memory and failures do not touch the next): test
  error %, fit seconds, predict seconds (the whole test side), the peak RSS of that process
  (data included), every warning the fit and predict raised, and fitted attributes that say
  what the default did (nRBFN's ``fit_mode_`` and basis size, CCDR's ``n_components_``,
  the encoder's kernel). An exception (``MemoryError`` included), a process killed by the
  operating system, or a cell that overruns ``--time-budget`` seconds is recorded with its
  message and the run goes on.

Output: one markdown table per dataset, a summary table (test error % of every method on
every dataset, the best in bold, and the mean rank), and an automatically computed list of
where each scalenc method wins and loses (its rank among the methods that ran, the peers it
beats and the ones it loses to). ``--out`` writes every result as JSON.

    python benchmarks/peers.py                                  # all seven datasets
    python benchmarks/peers.py --quick --datasets letter,shuttle
    python benchmarks/peers.py --time-budget 900 --out peers.json

Seconds are wall-clock on whatever else runs on the machine: compare them within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

PMLB = ("letter", "adult", "shuttle", "connect_4", "fars", "kddcup")
DATASETS = ("letter", "adult", "shuttle", "connect_4", "mnist", "fars", "kddcup")
SCALENC = ("EncoderClassifier()", "NRBFNClassifier()", "LRClassifier()", "CCDRClassifier()")
PEERS = ("SVC()", "Nystroem + LR", "k-NN (5)", "LDA", "HistGradientBoosting")
METHODS = SCALENC + PEERS


def make_estimator(method: str):
    """The estimator named ``method``, with its defaults."""
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import SVC

    import scalenc

    return {
        "EncoderClassifier()": lambda: scalenc.EncoderClassifier(),
        "NRBFNClassifier()": lambda: scalenc.NRBFNClassifier(random_state=0),
        "LRClassifier()": lambda: scalenc.LRClassifier(),
        "CCDRClassifier()": lambda: scalenc.CCDRClassifier(random_state=0),
        "SVC()": lambda: SVC(),
        "Nystroem + LR": lambda: make_pipeline(
            Nystroem(n_components=1000, random_state=0), LogisticRegression(max_iter=1000)
        ),
        "k-NN (5)": lambda: KNeighborsClassifier(),
        "LDA": lambda: LinearDiscriminantAnalysis(),
        "HistGradientBoosting": lambda: HistGradientBoostingClassifier(random_state=0),
    }[method]()


# --- data ----------------------------------------------------------------------------------


def default_pmlb_dir() -> Path:
    return Path(os.environ.get("SCALENC_PMLB_DIR", Path.home() / ".cache" / "pmlb"))


def default_papers_dir() -> Path:
    return Path(os.environ.get("SCALENC_DATA_DIR", Path.cwd().parent / "shared" / "data"))


class DataMissing(Exception):
    """A dataset file is absent and cannot be fetched."""


def load_pmlb(name: str, data_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """X (float64) and y (codes 0..K-1) of PMLB's ``name``, fetched with ``pmlb`` if absent."""
    import pandas as pd

    path = data_dir / name / f"{name}.tsv.gz"
    if not path.exists():
        try:
            import pmlb
        except ImportError:
            raise DataMissing(
                f"{path} is absent and the pmlb package is not installed. Either "
                f"`pip install pmlb` (the file is then fetched into --data-dir), or run "
                f"`python -c \"import pmlb; pmlb.fetch_data('{name}', "
                f"local_cache_dir='{data_dir}')\"` where there is a network, or point "
                "--data-dir / $SCALENC_PMLB_DIR at a directory holding "
                f"{name}/{name}.tsv.gz."
            ) from None
        pmlb.fetch_data(name, local_cache_dir=str(data_dir))
    frame = pd.read_csv(path, sep="\t")
    y = np.unique(frame.pop("target").to_numpy(), return_inverse=True)[1]
    return frame.to_numpy(dtype=np.float64), y.astype(np.int64)


def load_split(name: str, args) -> tuple[np.ndarray, ...]:
    """(X_train, y_train, X_test, y_test), before scaling."""
    from sklearn.model_selection import train_test_split

    if name == "mnist":
        path = args.papers_dir / "mnist.npz"
        if not path.exists():
            raise DataMissing(f"{path} is absent (set SCALENC_DATA_DIR to the papers' data)")
        with np.load(path) as f:
            X, y = f["X"].astype(np.float64) / 255.0, f["y"].astype(np.int64)
            train, test = f["train_idx"], f["test_idx"]
        if args.quick:
            train = subsample(y, train, args.quick_rows * 2 // 3)
            test = subsample(y, test, args.quick_rows - train.size)
        return X[train], y[train], X[test], y[test]
    X, y = load_pmlb(name, args.data_dir)
    rows = np.arange(y.size)
    if args.quick and y.size > args.quick_rows:
        rows = subsample(y, rows, args.quick_rows)
    single = np.isin(y[rows], np.flatnonzero(np.bincount(y[rows]) == 1))
    train, test = train_test_split(
        rows[~single], test_size=1 / 3, stratify=y[rows[~single]], random_state=0
    )
    train = np.sort(np.concatenate([train, rows[single]]))
    test = np.sort(test)
    return X[train], y[train], X[test], y[test]


def subsample(y: np.ndarray, rows: np.ndarray, size: int) -> np.ndarray:
    """``size`` of ``rows``, stratified by ``y`` where every class has two rows or more."""
    from sklearn.model_selection import train_test_split

    if size >= rows.size:
        return rows
    counts = np.bincount(y[rows])
    stratify = y[rows] if counts[counts > 0].min() >= 2 else None
    return np.sort(train_test_split(rows, train_size=size, stratify=stratify, random_state=0)[0])


def prepare(name: str, args, workdir: Path) -> dict:
    """Split, scale and write the dataset's four arrays to ``workdir``; its description."""
    from sklearn.preprocessing import StandardScaler

    X, y, Xt, yt = load_split(name, args)
    scaler = StandardScaler().fit(X)
    for key, value in {"X": scaler.transform(X), "y": y, "Xt": scaler.transform(Xt),
                       "yt": yt}.items():  # fmt: skip
        np.save(workdir / f"{key}.npy", value)
    counts = np.bincount(np.concatenate([y, yt]))
    return {
        "train_rows": int(y.size),
        "test_rows": int(yt.size),
        "features": int(X.shape[1]),
        "classes": int(counts.size),
        "largest_class_pct": round(100 * counts.max() / counts.sum(), 1),
        "smallest_class_rows": int(counts.min()),
    }


# --- one cell, in its own process -------------------------------------------------------------


def fitted_notes(model) -> dict:
    """Fitted attributes that say what the defaults did."""
    notes: dict = {}
    if hasattr(model, "fit_mode_"):
        plan = getattr(model, "memory_plan_", {}) or {}
        notes["fit_mode_"] = model.fit_mode_
        notes["basis_r"] = int(model.basis_.shape[0])
        notes["basis_wanted"] = plan.get("basis", {}).get("wanted")
        notes["soft_knn"] = plan.get("soft_knn", {}).get("mode")
        notes["alpha_"] = float(model.alpha_)
    for name in ("n_components_", "kernel_", "n_iter_", "n_passes_"):
        value = getattr(model, name, None)
        if value is not None and np.ndim(value) == 0:
            notes[name] = value.item() if hasattr(value, "item") else value
    if hasattr(model, "support_"):
        notes["support_vectors"] = int(model.support_.size)
    if hasattr(model, "steps"):  # Nystroem + LR
        notes["n_iter_"] = int(np.max(model[-1].n_iter_))
    return {k: (v if isinstance(v, (int, float, str)) or v is None else str(v))
            for k, v in notes.items()}  # fmt: skip


def run_cell(method: str, workdir: Path) -> dict:
    """Fit ``method`` on the split in ``workdir``, predict the test side; a JSON-able dict."""
    X, y = np.load(workdir / "X.npy"), np.load(workdir / "y.npy")
    Xt, yt = np.load(workdir / "Xt.npy"), np.load(workdir / "yt.npy")
    out: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model = make_estimator(method)
            t0 = time.perf_counter()
            model.fit(X, y)
            out["fit_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            pred = np.asarray(model.predict(Xt))
            out["predict_s"] = time.perf_counter() - t0
            out["error_pct"] = 100.0 * float(np.mean(pred != yt))
            out["notes"] = fitted_notes(model)
        except BaseException as exc:  # noqa: BLE001 - a failing default is a result
            out["failed"] = f"{type(exc).__name__}: {exc}"
            out["traceback"] = traceback.format_exc()
            plan = getattr(locals().get("model"), "memory_plan_", None)
            if plan:
                out["memory_plan_"] = json.loads(json.dumps(plan, default=str))
    seen: dict = {}
    for w in caught:
        text = f"{w.category.__name__}: {w.message}"
        seen[text] = seen.get(text, 0) + 1
    out["warnings"] = [t if n == 1 else f"{t} (×{n})" for t, n in seen.items()]
    out["peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return out


def run_in_subprocess(method: str, workdir: Path, budget: float | None) -> dict:
    """``run_cell`` in a fresh Python process, killed after ``budget`` seconds."""
    result = workdir / "result.json"
    result.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--cell", method, "--cell-dir", str(workdir)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=budget)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out: fit + predict over --time-budget={budget:g} s",
                "warnings": []}  # fmt: skip
    if result.exists():
        return json.loads(result.read_text())
    return {
        "failed": f"process ended with code {proc.returncode} after "
        f"{time.perf_counter() - t0:.0f} s"
        + (" (killed: out of memory?)" if proc.returncode < 0 else ""),
        "stderr": proc.stderr[-3000:],
        "warnings": [],
    }


# --- tables ----------------------------------------------------------------------------------


def svc_skip_reason(train_rows: int, limit: int) -> str:
    return (
        f"skipped: {train_rows:,} training rows > --svc-max-train={limit:,} "
        "(SVC's fit grows as n² to n³)"
    )


def cell_notes(cell: dict) -> str:
    if "skipped" in cell:
        return cell["skipped"]
    if "failed" in cell:
        return "**failed** " + cell["failed"].splitlines()[0][:160]
    notes = dict(cell.get("notes", {}))
    notes.pop("n_passes_", None)
    parts = [f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in notes.items()]
    for w in cell.get("warnings", []):
        parts.append(w.split(":")[0] + ("" if "(×" not in w else " " + w[w.rfind("(×") :]))
    return ", ".join(parts)


def fmt(value, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def dataset_table(name: str, info: dict, cells: dict) -> str:
    lines = [
        f"### {name}: {info['train_rows']:,} train / {info['test_rows']:,} test rows, "
        f"p = {info['features']}, K = {info['classes']} (largest class "
        f"{info['largest_class_pct']} %, smallest {info['smallest_class_rows']} rows)",
        "",
        "| method | error % | fit s | predict s | peak MB | notes |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for method in METHODS:
        c = cells.get(method)
        if c is None:
            continue
        lines.append(
            f"| {method} | {fmt(c.get('error_pct'))} | {fmt(c.get('fit_s'), 1)} | "
            f"{fmt(c.get('predict_s'), 1)} | {c.get('peak_mb', '—')} | {cell_notes(c)} |"
        )
    return "\n".join(lines)


def ranks(cells: dict) -> dict:
    """Rank (1 = best, ties share the better rank) of every method that gave an error."""
    errors = {m: c["error_pct"] for m, c in cells.items() if "error_pct" in c}
    return {m: 1 + sum(e < errors[m] - 1e-9 for e in errors.values()) for m in errors}


def summary_table(results: dict) -> str:
    names = list(results)
    head = "| method | " + " | ".join(names) + " | mean rank |"
    lines = [head, "| --- |" + " ---: |" * (len(names) + 1)]
    all_ranks = {n: ranks(results[n]["cells"]) for n in names}
    for method in METHODS:
        row, rs = [], []
        for n in names:
            c = results[n]["cells"].get(method, {})
            if "error_pct" in c:
                text = f"{c['error_pct']:.2f}"
                rs.append(all_ranks[n][method])
                row.append(f"**{text}**" if all_ranks[n][method] == 1 else text)
            else:
                failed = c.get("failed", "")
                row.append("timed out" if failed.startswith("timed out") else
                           "failed" if failed else "—")  # fmt: skip
        mean = f"{np.mean(rs):.1f}" if rs else "—"
        lines.append(f"| {method} | " + " | ".join(row) + f" | {mean} |")
    return "\n".join(lines)


def wins_and_losses(results: dict) -> str:
    """Per scalenc method: on each dataset, its rank, the peers it beats and loses to."""
    lines = []
    for method in SCALENC:
        lines.append(f"* **{method}**: " + overall(method, results))
        for name, res in results.items():
            cells, r = res["cells"], ranks(res["cells"])
            if method not in r:
                why = cells.get(method, {}).get("failed")
                lines.append(f"  * {name}: " + (f"failed ({why.splitlines()[0][:120]})"
                                                 if why else "not run"))  # fmt: skip
                continue
            mine = cells[method]["error_pct"]
            peers = {p: cells[p]["error_pct"] for p in PEERS if p in r}
            beats = [p for p, e in peers.items() if mine < e - 1e-9]
            loses = [f"{p} ({e:.2f})" for p, e in peers.items() if e < mine - 1e-9]
            ties = [p for p, e in peers.items() if abs(e - mine) <= 1e-9]
            best = min(r, key=lambda m: cells[m]["error_pct"])
            lines.append(
                f"  * {name}: {mine:.2f} %, rank {r[method]}/{len(r)}"
                + (" — **best**" if r[method] == 1 else f" (best {best} {cells[best]['error_pct']:.2f})")
                + f"; beats {', '.join(beats) or 'no peer'}"
                + (f"; ties {', '.join(ties)}" if ties else "")
                + (f"; loses to {', '.join(loses)}" if loses else "")
            )  # fmt: skip
    return "\n".join(lines)


def overall(method: str, results: dict) -> str:
    """One line: the datasets where ``method`` is best of all, beats every peer that ran,
    or is last."""
    best, all_peers, last = [], [], []
    for name, res in results.items():
        r = ranks(res["cells"])
        if method not in r:
            continue
        mine = res["cells"][method]["error_pct"]
        peers = [res["cells"][p]["error_pct"] for p in PEERS if p in r]
        best += [name] * (r[method] == 1)
        all_peers += [name] * bool(peers and mine < min(peers) - 1e-9)
        last += [name] * (r[method] == max(r.values()) and len(r) > 1)
    return (
        f"best of all on {', '.join(best) or 'none'}; beats every peer on "
        f"{', '.join(all_peers) or 'none'}; last on {', '.join(last) or 'none'}"
    )


# --- main ------------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=default_pmlb_dir(),
                        help="PMLB cache: DIR/{name}/{name}.tsv.gz "
                        "(default $SCALENC_PMLB_DIR, else ~/.cache/pmlb)")  # fmt: skip
    parser.add_argument("--papers-dir", type=Path, default=default_papers_dir(),
                        help="where mnist.npz is (default $SCALENC_DATA_DIR, else "
                        "../shared/data)")  # fmt: skip
    parser.add_argument("--datasets", default=",".join(DATASETS),
                        help=f"comma list among {', '.join(DATASETS)}")  # fmt: skip
    parser.add_argument("--methods", default=",".join(METHODS),
                        help="comma list of methods (default: all nine)")  # fmt: skip
    parser.add_argument("--quick", action="store_true",
                        help="subsample every dataset to --quick-rows rows")  # fmt: skip
    parser.add_argument("--quick-rows", type=int, default=5000)
    parser.add_argument("--svc-max-train", type=int, default=30000,
                        help="skip SVC above this many training rows (default 30000)")  # fmt: skip
    parser.add_argument("--time-budget", type=float, default=None,
                        help="seconds allowed to one method's fit + predict (default: none)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="JSON of all results")
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    parser.add_argument("--cell-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for d in args.datasets:
        if d not in DATASETS:
            parser.error(f"unknown dataset {d!r}; choose among {', '.join(DATASETS)}")
    for m in args.methods:
        if m not in METHODS:
            parser.error(f"unknown method {m!r}; choose among {', '.join(METHODS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.cell:
        result = run_cell(args.cell, args.cell_dir)
        (args.cell_dir / "result.json").write_text(json.dumps(result, default=str))
        return 0
    missing = [d for d in args.datasets if d != "mnist"
               and not (args.data_dir / d / f"{d}.tsv.gz").exists()]  # fmt: skip
    if missing:
        try:
            import pmlb  # noqa: F401
        except ImportError:
            print(
                f"error: {', '.join(missing)} not found under {args.data_dir} "
                "(expected DIR/{name}/{name}.tsv.gz) and the pmlb package is not installed.\n"
                "Get the files with `pip install pmlb` (then this script fetches them), or "
                "`python -c \"import pmlb; pmlb.fetch_data('letter', local_cache_dir='DIR')\"` "
                "on a machine with a network, and pass --data-dir DIR (or set "
                "SCALENC_PMLB_DIR).",
                file=sys.stderr,
            )
            return 2
    import sklearn

    import scalenc

    load = os.getloadavg()
    print(
        f"# scalenc {scalenc.__version__} beside scikit-learn {sklearn.__version__}: "
        f"{'quick (' + str(args.quick_rows) + ' rows per dataset)' if args.quick else 'full'}"
        f" run, {os.cpu_count()} cores, load average {load[0]:.2f} at start\n",
        flush=True,
    )
    results: dict = {}
    started = time.perf_counter()
    for name in args.datasets:
        with tempfile.TemporaryDirectory(prefix=f"peers-{name}-") as tmp:
            workdir = Path(tmp)
            try:
                info = prepare(name, args, workdir)
            except DataMissing as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            cells: dict = {}
            for method in args.methods:
                if method == "SVC()" and info["train_rows"] > args.svc_max_train:
                    cells[method] = {"skipped": svc_skip_reason(info["train_rows"],
                                                                args.svc_max_train)}  # fmt: skip
                    continue
                cells[method] = run_in_subprocess(method, workdir, args.time_budget)
                c = cells[method]
                print(f"  {name} · {method}: "
                      + (c["failed"].splitlines()[0][:200] if "failed" in c else
                         f"{c['error_pct']:.2f} % error, fit {c['fit_s']:.1f} s, "
                         f"predict {c['predict_s']:.1f} s"), flush=True)  # fmt: skip
        results[name] = {"info": info, "cells": cells, "load_average": os.getloadavg()[0]}
        print("\n" + dataset_table(name, info, cells) + "\n", flush=True)
        if args.out:
            write_json(args, results, started)
    print("## Test error %, every method on every dataset (best in bold)\n")
    print(summary_table(results) + "\n")
    print("## Where each scalenc method wins and loses (rank among the methods that ran)\n")
    print(wins_and_losses(results) + "\n")
    print(f"total {time.perf_counter() - started:.0f} s, load average at the end "
          f"{os.getloadavg()[0]:.2f}")  # fmt: skip
    if args.out:
        write_json(args, results, started)
    return 0


def write_json(args, results: dict, started: float) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "quick": args.quick,
        "svc_max_train": args.svc_max_train,
        "time_budget": args.time_budget,
        "seconds": time.perf_counter() - started,
        "datasets": results,
        "ranks": {n: ranks(r["cells"]) for n, r in results.items()},
    }
    args.out.write_text(json.dumps(payload, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
