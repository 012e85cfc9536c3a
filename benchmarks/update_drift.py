"""How far a sequence of updates drifts from a refit, on the papers' real datasets.

An update keeps what is not a sum over rows: nRBFN's basis and σ, CCDR's embedding (the
classifier head is updated). This script measures what that costs in test error on data
that arrives in batches: the training rows in a seeded random order, a model fitted on the
first ``--start`` share, then updated with batches of ``--step`` each until every training
row has been seen; after each update, the test error of the updated model beside that of a
refit on the same rows, and the times of both. LRC's and the linear encoder's updates are
exact (their tests show it) and are left out.

    python benchmarks/update_drift.py                        # satimage, usps, isolet
    python benchmarks/update_drift.py --datasets mnist        # MNIST (minutes per refit)
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np

from scalenc import CCDRClassifier, NRBFNClassifier

DATA = Path(
    os.environ.get("SCALENC_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data")
)

ESTIMATORS = {
    "nrbfn": lambda: NRBFNClassifier(random_state=0, keep_statistics=True),
    "ccdr-linear": lambda: CCDRClassifier(random_state=0),
}


def _dataset(name: str):
    data = np.load(DATA / f"{name}.npz", allow_pickle=False)
    X, y = data["X"].astype(np.float64), data["y"]
    if name == "mnist":
        X = X / 255.0
    return X[data["train_idx"]], y[data["train_idx"]], X[data["test_idx"]], y[data["test_idx"]]


def drift(name: str, method: str, start: float, step: float, seed: int) -> list[dict]:
    Xtr, ytr, Xte, yte = _dataset(name)
    order = np.random.default_rng(seed).permutation(len(ytr))
    Xtr, ytr = Xtr[order], ytr[order]
    shares = np.arange(start, 1.0 + 1e-9, step)
    stops = sorted({min(len(ytr), round(len(ytr) * share)) for share in shares} | {len(ytr)})
    rows = []
    model = None
    for i, stop in enumerate(stops):
        t0 = time.perf_counter()
        if model is None:
            model = ESTIMATORS[method]().fit(Xtr[:stop], ytr[:stop])
        else:
            model.partial_fit(Xtr[stops[i - 1] : stop], ytr[stops[i - 1] : stop])
        update_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        refit = ESTIMATORS[method]().fit(Xtr[:stop], ytr[:stop])
        refit_s = time.perf_counter() - t0
        rows.append(
            {
                "dataset": name,
                "method": method,
                "rows": stop,
                "share": stop / len(ytr),
                "updated_error": float(np.mean(model.predict(Xte) != yte)),
                "refit_error": float(np.mean(refit.predict(Xte) != yte)),
                "update_s": update_s,
                "refit_s": refit_s,
            }
        )
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", default=["satimage", "usps", "isolet"])
    p.add_argument("--methods", nargs="+", default=list(ESTIMATORS), choices=list(ESTIMATORS))
    p.add_argument("--start", type=float, default=0.4, help="share of the rows fitted first")
    p.add_argument("--step", type=float, default=0.1, help="share of the rows per update")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    results = []
    print(
        "| dataset | method | rows seen | updated error | refit error | drift | update s | refit s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.datasets:
        for method in args.methods:
            for r in drift(name, method, args.start, args.step, args.seed):
                results.append(r)
                print(
                    f"| {name} | {method} | {r['rows']:,} ({100 * r['share']:.0f} %) "
                    f"| {100 * r['updated_error']:.2f} % | {100 * r['refit_error']:.2f} % "
                    f"| {100 * (r['updated_error'] - r['refit_error']):+.2f} "
                    f"| {r['update_s']:.2f} | {r['refit_s']:.2f} |",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
