"""Quickstart: simulate → Zarr → fit → predict to Zarr → score, on the threaded scheduler.

Runs in a few seconds with no cluster. Every step streams the data block by block, as it
would for a store larger than memory. The files (about 35 MB) go to a temporary folder that
is removed at the end, unless ``--keep DIR`` (or ``SCALENC_QUICKSTART_KEEP=DIR``) names a
folder to keep them in, with the JSON summary as ``DIR/summary.json``::

    python examples/quickstart.py               # prints a short summary, leaves nothing
    python examples/quickstart.py --keep qs     # keeps qs/X.zarr, qs/pred.zarr, qs/summary.json
    python examples/quickstart.py --json        # the summary as JSON instead
"""

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import dask.array as da

from scalenc import EncoderClassifier, load, write_output
from scalenc.simulate import simulate


def run(workdir: Path) -> dict:
    """Simulate, write, read back, fit, predict and score in ``workdir``; the summary."""
    X, y = simulate(
        "normal_noise", n=20_000, n_features=500, n_classes=5, random_state=0, chunk_rows=2_000
    )
    da.to_zarr(X, str(workdir / "X.zarr"), overwrite=True)
    da.to_zarr(y, str(workdir / "y.zarr"), overwrite=True)

    X, y = load(workdir / "X.zarr", labels=str(workdir / "y.zarr"))
    train, test = slice(0, 16_000), slice(16_000, None)
    t0 = time.perf_counter()
    model = EncoderClassifier(kernels=("linear", "euclidean", "spearman")).fit(X[train], y[train])
    fit_s = time.perf_counter() - t0
    out = write_output(model.predict(X[test]), workdir / "pred.zarr", overwrite=True)
    return {
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


def text(summary: dict, kept: Path | None) -> str:
    """The summary in a few lines."""
    lines = [
        f"fit EncoderClassifier on {summary['rows']} rows × {summary['features']} features "
        f"(simulated, written to Zarr and read back block by block)",
        f"  kernel chosen: {summary['kernel']} (training cross-entropy: "
        + ", ".join(f"{k} {v}" for k, v in summary["cross_entropy"].items())
        + ")",
        f"  {summary['passes']} passes over the data, fit in {summary['fit_seconds']:.2f} s",
        f"  test accuracy {summary['test_accuracy']:.4f}",
    ]
    if kept is None:
        lines.append("  files removed (keep them with --keep DIR)")
    else:
        lines.append(f"  predictions: {summary['predictions']}")
        lines.append(f"  JSON summary: {kept / 'summary.json'}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--keep",
        metavar="DIR",
        default=os.environ.get("SCALENC_QUICKSTART_KEEP") or None,
        help="write the files to DIR and keep them (default: a temporary folder, removed; "
        "or $SCALENC_QUICKSTART_KEEP)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    if args.keep:
        kept = Path(args.keep)
        kept.mkdir(parents=True, exist_ok=True)
        summary = run(kept)
        (kept / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    else:
        kept = None
        with tempfile.TemporaryDirectory(prefix="scalenc-quickstart-") as tmp:
            summary = run(Path(tmp))
    print(json.dumps(summary, indent=2) if args.json else text(summary, kept))


if __name__ == "__main__":
    main()
