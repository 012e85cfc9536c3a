"""Quickstart: simulate → Zarr → fit → predict to Zarr → score, on the threaded scheduler.

Runs in a few seconds with no cluster. Every step streams the data block by block, as it
would for a store larger than memory.
"""

import json
import tempfile
import time
from pathlib import Path

import dask.array as da

from scalenc import EncoderClassifier, load, write_output
from scalenc.simulate import simulate


def main():
    workdir = Path(tempfile.mkdtemp(prefix="scalenc-quickstart-"))
    X, y = simulate(
        "normal_noise", n=20_000, n_features=500, n_classes=5, random_state=0, chunk_rows=2_000
    )
    da.to_zarr(X, str(workdir / "X.zarr"))
    da.to_zarr(y, str(workdir / "y.zarr"))

    X, y = load(workdir / "X.zarr", labels=str(workdir / "y.zarr"))
    train, test = slice(0, 16_000), slice(16_000, None)
    t0 = time.perf_counter()
    model = EncoderClassifier(kernels=("linear", "euclidean", "spearman")).fit(X[train], y[train])
    fit_s = time.perf_counter() - t0
    out = write_output(model.predict(X[test]), workdir / "pred.zarr")
    summary = {
        "data": str(workdir / "X.zarr"),
        "rows": int(X.shape[0]),
        "features": int(X.shape[1]),
        "kernel": model.kernel_.name,
        "cross_entropy": dict(
            zip([k.name for k in model.kernels_], model.cross_entropy_.round(2).tolist())
        ),
        "passes": model.n_passes_,
        "fit_seconds": round(fit_s, 3),
        "test_accuracy": round(model.score(X[test], y[test]), 4),
        "predictions": out,
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
