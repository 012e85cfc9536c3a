"""nRBFN's test error against the size of its basis, on public data and a simulated store.

The curves from which ``max_basis="auto"``'s cost rule was chosen (issue 26). For each
dataset, one ``NRBFNClassifier`` fit gives the soft-KNN confidences and the basis the
paper's rule asks for (every candidate with T < 0.9); then, for each r of ``--sizes``
below that request, the basis the default cap keeps (the least confident row of each
class, then rows spread evenly over the confidence order: ``select_basis(max_basis=r)``)
is fitted in memory exactly as ``fit`` does (σ = mean distance to the basis, W̃ by
``normalized_kernel``, λ = 1e-13 by ``ridge_solve``) and scored on the test set. Each
row also gives the Gram's seconds (ΦᵀΦ summed over 5000-row tiles, float64) and the
soft-KNN's work of the fit, n·c·(p + 784), in the units of ``EXACT_KNN_FLOPS``.

Datasets: MNIST (/255), USPS, ISOLET and satimage from ``SCALENC_DATA_DIR`` (the papers'
splits), PMLB tables from ``--pmlb-dir`` (a stratified 2/3 split, seed 0; Connect-4 raw,
the others standardised on the training rows), and ``sim256``: the ``uniform_noise``
simulation of ``scale_defaults.py`` (K = 5, 256 features), ``--sim-rows`` training rows
and 50 000 test rows.

    python benchmarks/nrbfn_basis_curves.py --pmlb-dir DIR                 # all
    python benchmarks/nrbfn_basis_curves.py --datasets connect_4 mnist --pmlb-dir DIR
    python benchmarks/nrbfn_basis_curves.py --json curves.json ...         # also as JSON

``--defaults`` fits ``NRBFNClassifier()`` on each dataset twice, side by side, each fit in
its own process: with the default cap as it is (memory and cost), and with the cost bound
lifted (``plan.GRAM_WORK_SHARE = 1e30``: the memory-sized basis, the default before issue
26), and prints each fit's seconds, basis, and test error. ``--chunk-rows`` sets the
NumPy input's blocks (default: the library's).

    python benchmarks/nrbfn_basis_curves.py --defaults --datasets connect_4 mnist --pmlb-dir DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from nrbfn_scale import connect4_dataset  # noqa: E402

from scalenc import NRBFNClassifier  # noqa: E402
from scalenc.math.linalg import ridge_solve  # noqa: E402
from scalenc.math.neighbors import pairwise_sq_distances  # noqa: E402
from scalenc.nrbfn import blocks as nb  # noqa: E402
from scalenc.nrbfn import plan, soft_knn  # noqa: E402

SIZES = [250, 500, 1000, 2000, 3000, 4000, 6000, 8000, 10000]
PAPER_SETS = ("mnist", "usps", "isolet", "satimage")
PMLB_SETS = ("connect_4", "fars", "adult", "krkopt", "letter", "magic")
TILE = 5000


def load(name: str, pmlb_dir: Path | None, sim_rows: int):
    """(X_train, y_train, X_test, y_test) as float64."""
    if name in PAPER_SETS:
        data_dir = Path(
            os.environ.get("SCALENC_DATA_DIR", Path(__file__).parents[2] / "shared/data")
        )
        with np.load(data_dir / f"{name}.npz") as f:
            X, y, train, test = (f[k] for k in ("X", "y", "train_idx", "test_idx"))
        X = X.astype(np.float64)
        if name == "mnist":
            X /= 255.0
        elif name == "usps":
            X = 2 * X - 1
        return X[train], y[train], X[test], y[test]
    if name == "sim256":
        from scalenc.simulate import simulate

        X, y = simulate("uniform_noise", sim_rows + 50_000, 256, 5, random_state=0)
        X, y = np.asarray(X, dtype=np.float64), np.asarray(y)
        return X[:sim_rows], y[:sim_rows], X[sim_rows:], y[sim_rows:]
    import pandas as pd
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    if pmlb_dir is None:
        sys.exit(f"{name} needs --pmlb-dir (a PMLB cache: DIR/{name}/{name}.tsv.gz)")
    if name == "connect_4":  # raw, as nrbfn_scale.py's hard problem
        return connect4_dataset(pmlb_dir)
    frame = pd.read_csv(pmlb_dir / name / f"{name}.tsv.gz", sep="\t")
    X = frame.drop(columns="target").to_numpy(np.float64)
    y = np.unique(frame["target"].to_numpy(), return_inverse=True)[1]
    Xtr, Xte, ytr, yte = train_test_split(X, y, train_size=2 / 3, stratify=y, random_state=0)
    scaler = StandardScaler().fit(Xtr)
    return scaler.transform(Xtr), ytr, scaler.transform(Xte), yte


def fit_basis(Xtr, codes, Xte, K, basis):
    """(test predictions as codes, Gram seconds) of the network on ``basis``."""
    n = Xtr.shape[0]
    dist = sum(
        np.sqrt(pairwise_sq_distances(Xtr[i : i + TILE], basis)).sum() for i in range(0, n, TILE)
    )
    sigma = dist / (n * basis.shape[0])
    M, B = np.zeros((basis.shape[0],) * 2), np.zeros((K, basis.shape[0]))
    prepared = nb.prepare_basis(basis, sigma, np.float64)
    gram = 0.0
    for i in range(0, n, TILE):
        W = nb.normalized_kernel(Xtr[i : i + TILE], basis, sigma, prepared=prepared)
        t0 = time.perf_counter()
        M += W.T @ W
        gram += time.perf_counter() - t0
        B += np.eye(K)[codes[i : i + TILE]].T @ W
    D, _ = ridge_solve(M, B, 1e-13)
    pred = np.concatenate(
        [
            np.argmax(nb.normalized_kernel(Xte[i : i + TILE], basis, sigma) @ D.T, axis=1)
            for i in range(0, Xte.shape[0], TILE)
        ]
    )
    return pred, gram


def curve(name: str, sizes: list[int], pmlb_dir: Path | None, sim_rows: int) -> dict:
    Xtr, ytr, Xte, yte = load(name, pmlb_dir, sim_rows)
    classes, codes = np.unique(ytr, return_inverse=True)
    test_codes = np.searchsorted(classes, yte)
    K, (n, p) = classes.size, Xtr.shape
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = NRBFNClassifier(max_basis=K, random_state=0).fit(Xtr, ytr)
    knn_seconds = time.perf_counter() - t0
    conf, cand = model.confidence_, model.candidate_indices_
    wanted = int(np.sum(conf < model.confidence_threshold))
    c = cand.size
    out = {
        "dataset": name,
        "n": n,
        "p": p,
        "classes": K,
        "test_rows": int(yte.size),
        "candidates": c,
        "knn_mode": model.memory_plan_["soft_knn"]["mode"],
        "knn_work": float(n) * c * (p + plan.SELECT_FLOPS_PER_SCORE),
        "knn_seconds": knn_seconds,
        "wanted": wanted,
        "r_memory": int(model.memory_plan_["largest_basis_that_fits"]),
        "points": [],
    }
    print(
        f"\n{name}: {n} training rows x {p}, {K} classes, {yte.size} test rows; soft-KNN "
        f"{out['knn_mode']} ({c} candidates, work {out['knn_work']:.3g}, {knn_seconds:.0f} s "
        f"for the fit with r = K); the rule asks for r = {wanted}",
        flush=True,
    )
    print("| r | test error % | Gram s | n·r² / soft-KNN work |\n|---:|---:|---:|---:|")
    for r in sorted({s for s in sizes if s < wanted} | {min(wanted, max(sizes))}):
        pos = soft_knn.select_basis(conf, codes[cand], model.confidence_threshold, K, max_basis=r)[
            0
        ]
        pred, gram = fit_basis(Xtr, codes, Xte, K, Xtr[cand[pos]])
        error = 100.0 * np.mean(pred != test_codes)
        ratio = float(n) * pos.size**2 / out["knn_work"]
        out["points"].append({"r": int(pos.size), "error": error, "gram_seconds": gram})
        print(f"| {pos.size} | {error:.2f} | {gram:.1f} | {ratio:.3g} |", flush=True)
    return out


def _default_fit(name, pmlb_dir, sim_rows, memory_sized, chunk_rows) -> dict:
    """One ``NRBFNClassifier()`` fit in this process (``memory_sized``: the cost bound
    lifted), with its seconds, basis and test error."""
    if memory_sized:
        plan.GRAM_WORK_SHARE = 1e30  # no cost bound: the memory-sized basis
    Xtr, ytr, Xte, yte = load(name, pmlb_dir, sim_rows)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = NRBFNClassifier(random_state=0, chunk_rows=chunk_rows).fit(Xtr, ytr)
    fit_s = time.perf_counter() - t0
    return {
        "fit_s": fit_s,
        "r": int(model.basis_.shape[0]),
        "wanted": int(model.memory_plan_["basis"]["wanted"]),
        "cap": model.memory_plan_.get("max_basis_source"),
        "stages": {k: round(v, 1) for k, v in model.stage_times_.items()},
        "error": 100.0 * (1.0 - model.score(Xte, yte)),
    }


def defaults(names, pmlb_dir, sim_rows, chunk_rows) -> list:
    import subprocess

    print("\n| data | basis | r (rule's) | cap | fit s | stages s | test error % |")
    print("|---|---|---:|---|---:|---|---:|")
    results = []
    for name in names:
        row = {"dataset": name}
        for memory_sized in (True, False):
            code = (
                f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                "import nrbfn_basis_curves as b; from pathlib import Path; "
                f"print(json.dumps(b._default_fit({name!r}, "
                f"{None if pmlb_dir is None else str(pmlb_dir)!r} and Path({str(pmlb_dir)!r}), "
                f"{sim_rows}, {memory_sized}, {chunk_rows!r})))"
            )
            run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            label = "memory-sized (before)" if memory_sized else "default (now)"
            if run.returncode:
                print(f"| {name} | {label} | failed: {run.stderr.strip().splitlines()[-1]} |")
                continue
            res = json.loads(run.stdout.strip().splitlines()[-1])
            row[label] = res
            print(
                f"| {name} | {label} | {res['r']} ({res['wanted']}) | {res['cap']} | "
                f"{res['fit_s']:.1f} | {res['stages']} | {res['error']:.2f} |",
                flush=True,
            )
        results.append(row)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=[*PMLB_SETS, *PAPER_SETS, "sim256"])
    parser.add_argument("--sizes", nargs="+", type=int, default=SIZES)
    parser.add_argument("--pmlb-dir", type=Path, default=None)
    parser.add_argument("--sim-rows", type=int, default=200_000)
    parser.add_argument("--json", type=Path, default=None, help="also write the curves here")
    parser.add_argument("--defaults", action="store_true", help="default fits, before/now")
    parser.add_argument("--chunk-rows", type=int, default=None)
    args = parser.parse_args(argv)
    if args.defaults:
        results = defaults(args.datasets, args.pmlb_dir, args.sim_rows, args.chunk_rows)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
        return
    results = []
    for name in args.datasets:
        results.append(curve(name, args.sizes, args.pmlb_dir, args.sim_rows))
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
