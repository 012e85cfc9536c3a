"""CCDR at scale: the Nyström extension on an out-of-core Zarr store, and subsample size vs error.

Part A — throughput. A Zarr store of ``--rows`` × ``--features`` float32 (default 6M × 100 =
2.4 GB, ten Gaussian classes, 20 % of the labels −1) is written under /tmp with
``dask.array.to_zarr``. In one run, interleaved ``--repeats`` times (the machine is shared
and noisy: compare ratios, not seconds):

(a) one bare read pass ``X.sum(axis=0)``;
(b) ``CCDR.fit`` (label passes + ONE pass over X gathering the subsample, then the
    client-side eigen-solve);
(c) the Nyström extension of every row, ``CCDR.transform(X).sum(axis=0)`` (the embedding
    is reduced, not written, so that (c) and (a) differ only by the extension's compute),
    reported as rows/second and as a ratio to (a).

for each ``--subsample-sizes`` s. The extension costs O(s·p) per row (distances to S and a
top-k), so the ratio to a bare read grows with s·p; it is the price of the k-NN search.

Then what bounds it, on the store's first block in one thread (BLAS pinned to one thread),
alternated ``--repeats`` + 2 times, best of each: (i) reading the block, (ii) the float32
score product alone (the GEMM [X, 1]·[−2S, ‖s‖²]ᵀ in 1024-row tiles), (iii) the exact k-NN
search (the product plus the selection and float64 refinement), (iv) ``transform`` of the
block (iii plus eq. 20). ``selection / GEMM`` = ((iii) − (ii)) / (ii).

Part B — quality. Test error of ``CCDRClassifier`` (linear head, and k-NN on satimage) as a
function of ``subsample_size`` and ``n_subsamples`` on satimage (standard split, raw values)
and mnist (standard split, pixels / 255), over ``--seeds`` draws of the subsamples.

    python benchmarks/ccdr_scale.py                 # ~10 min on 2 cores
    python benchmarks/ccdr_scale.py --quick         # small store, few points
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import dask.array as da
import numpy as np

import scalenc
from scalenc import CCDR, CCDRClassifier
from scalenc.engine.cluster import compute
from scalenc.io.inputs import data_dir, load


def _gen_block(block, *, features, centres, seed, block_info=None):
    """Rows of ten Gaussian classes for one block (seeded by the block's first row)."""
    start = block_info[None]["array-location"][0][0]
    rng = np.random.default_rng([seed, start])
    n = block.shape[0]
    y = rng.integers(0, centres.shape[0], n)
    X = centres[y] + rng.standard_normal((n, features))
    y[rng.random(n) < 0.2] = -1
    return np.hstack([X, y[:, None]]).astype(np.float32)


def make_store(path: Path, rows: int, features: int, chunk_rows: int) -> None:
    if (path / "X" / "zarr.json").exists():
        X = da.from_zarr(str(path), component="X")
        if X.shape == (rows, features):
            return
    print(f"writing {rows:,} × {features} float32 ({rows * features * 4 / 1e9:.1f} GB) to {path}")
    centres = np.random.default_rng(0).normal(scale=0.6, size=(10, features))
    shell = da.zeros((rows, features + 1), chunks=(chunk_rows, -1), dtype=np.float32)
    both = shell.map_blocks(
        _gen_block, features=features, centres=centres, seed=1, dtype=np.float32
    )
    t0 = time.perf_counter()
    compute(
        da.to_zarr(both[:, :features], str(path), component="X", overwrite=True, compute=False),
        da.to_zarr(
            both[:, features].astype(np.int64),
            str(path),
            component="y",
            overwrite=True,
            compute=False,
        ),
    )
    print(f"  written in {time.perf_counter() - t0:.1f} s")


def part_a(args) -> dict:
    store = Path(args.store)
    make_store(store, args.rows, args.features, args.chunk_rows)
    X, y = load(store)
    gb = X.nbytes / 1e9
    print(f"scalenc from {Path(scalenc.__file__).parent}", flush=True)
    out = {
        "rows": args.rows,
        "features": args.features,
        "store_gb": round(gb, 2),
        "chunk_mb": round(X.chunks[0][0] * args.features * 4 / 1e6, 1),
        "runs": [],
    }
    reads = []
    for s in args.subsample_sizes:
        fits, transforms = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            compute(X.sum(axis=0))
            reads.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            model = CCDR(subsample_size=s, random_state=0).fit(X, y)
            fits.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            compute(model.transform(X).sum(axis=0))
            transforms.append(time.perf_counter() - t0)
        read = min(reads)
        t = min(transforms)
        out["runs"].append(
            {
                "subsample_size": s,
                "fit_s": round(min(fits), 2),
                "fit_passes": model.n_passes_,
                "fit_over_read": round(min(fits) / read, 2),
                "transform_s": round(t, 2),
                "rows_per_s": round(args.rows / t),
                "transform_over_read": round(t / read, 2),
            }
        )
        print(out["runs"][-1], flush=True)
        out["runs"][-1]["block"] = block_profile(X, model, args.repeats + 2)
        print(out["runs"][-1]["block"], flush=True)
    out["read_s"] = round(min(reads), 2)
    out["read_gb_per_s"] = round(gb / min(reads), 2)
    out["read_rows_per_s"] = round(args.rows / min(reads))
    return out


def block_profile(X, model, repeats: int) -> dict:
    """Seconds of one block's read, score GEMM, k-NN search and transform, one thread."""
    import dask
    from threadpoolctl import threadpool_limits

    from scalenc.ccdr import blocks as _ccdr_blocks
    from scalenc.math import nearest

    block = X.blocks[0]
    with dask.config.set(scheduler="synchronous"):
        xb = block.compute()
    sol = model.solutions_[0]
    ref = nearest._Reference(sol.X, xb.dtype)
    xa = np.hstack([xb, np.ones((xb.shape[0], 1), xb.dtype)])
    out = np.empty((ref.size, 1024), ref.dtype)

    def gemm():
        for i in range(0, xa.shape[0] - 1023, 1024):
            np.matmul(ref.scores_t, xa[i : i + 1024].T, out=out)

    stages = {
        "read": lambda: block.sum(axis=0).compute(),
        "gemm": gemm,
        "knn": lambda: _ccdr_blocks.knn_search(xb, sol.X, sol.n_neighbors),
        "transform": lambda: _ccdr_blocks.transform_block(
            xb, solutions=model.solutions_, with_codes=False, out_dtype=np.float32
        ),
    }
    best = dict.fromkeys(stages, np.inf)
    with threadpool_limits(1), dask.config.set(scheduler="synchronous"):
        for _ in range(repeats):
            for name, stage in stages.items():
                t0 = time.perf_counter()
                stage()
                best[name] = min(best[name], time.perf_counter() - t0)
    rows = xb.shape[0]
    best["gemm"] *= rows / (rows - rows % 1024)  # the tiles timed cover rows − rows % 1024
    read = best["read"]
    return {
        "rows": rows,
        "seconds": {k: round(v, 4) for k, v in best.items()},
        "gemm_over_read": round(best["gemm"] / read, 2),
        "knn_over_read": round(best["knn"] / read, 2),
        "transform_over_read": round(best["transform"] / read, 2),
        "read_plus_transform_over_read": round(1 + best["transform"] / read, 2),
        "selection_over_gemm": round((best["knn"] - best["gemm"]) / best["gemm"], 2),
    }


def _dataset(name):
    d = np.load(data_dir() / f"{name}.npz", allow_pickle=False)
    X = d["X"].astype(np.float32)
    if name == "mnist":
        X = X / np.float32(255.0)
    return X[d["train_idx"]], d["y"][d["train_idx"]], X[d["test_idx"]], d["y"][d["test_idx"]]


def part_b(args) -> dict:
    grids = {
        "satimage": (args.sat_sizes, ("linear", "knn"), args.seeds),
        "mnist": (args.mnist_sizes, ("linear",), args.mnist_seeds),
    }
    out = {}
    for name, (sizes, heads, n_seeds) in grids.items():
        Xtr, ytr, Xte, yte = _dataset(name)
        rows = []
        for s in sizes:
            for B in args.n_subsamples:
                if s >= len(ytr) and B > 1:
                    continue  # S is all rows: one exact solve
                for head in heads:
                    errs, secs = [], []
                    for seed in range(n_seeds if s < len(ytr) else 1):
                        t0 = time.perf_counter()
                        clf = CCDRClassifier(
                            subsample_size=s, n_subsamples=B, classifier=head, random_state=seed
                        ).fit(Xtr, ytr)
                        errs.append(1.0 - clf.score(Xte, yte))
                        secs.append(time.perf_counter() - t0)
                    rows.append(
                        {
                            "subsample_size": s,
                            "n_subsamples": B,
                            "classifier": head,
                            "error_mean": float(np.mean(errs)),
                            "error_std": float(np.std(errs)),
                            "errors": errs,
                            "seconds": float(np.mean(secs)),
                        }
                    )
                    print(name, rows[-1], flush=True)
        out[name] = rows
    return out


def print_tables(r):
    if "zarr" in r:
        a = r["zarr"]
        print(
            f"\nPart A: {a['rows']:,} × {a['features']} float32 Zarr ({a['store_gb']} GB, "
            f"{a['chunk_mb']} MB chunks); bare read {a['read_s']} s = {a['read_gb_per_s']} GB/s "
            f"= {a['read_rows_per_s']:,} rows/s"
        )
        print("| s | fit (s) | fit / read | transform (s) | rows/s | transform / read |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: |")
        for run in a["runs"]:
            print(
                f"| {run['subsample_size']} | {run['fit_s']} | {run['fit_over_read']} | "
                f"{run['transform_s']} | {run['rows_per_s']:,} | {run['transform_over_read']} |"
            )
        blocks = [run for run in a["runs"] if "block" in run]
        if blocks:
            print(
                "\nOne block in one thread, ratios to reading it: "
                "| s | read (s) | GEMM | k-NN | transform | 1 + transform | selection / GEMM |"
            )
            print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
            for run in blocks:
                b = run["block"]
                print(
                    f"| {run['subsample_size']} | {b['seconds']['read']} | {b['gemm_over_read']} | "
                    f"{b['knn_over_read']} | {b['transform_over_read']} | "
                    f"{b['read_plus_transform_over_read']} | {b['selection_over_gemm']} |"
                )
    for name, rows in r.get("errors", {}).items():
        print(f"\nPart B: {name} test error (%), mean ± std over seeds")
        print("| subsample_size | n_subsamples | classifier | error | fit+score (s) |")
        print("| ---: | ---: | --- | ---: | ---: |")
        for row in rows:
            print(
                f"| {row['subsample_size']} | {row['n_subsamples']} | {row['classifier']} | "
                f"{100 * row['error_mean']:.2f} ± {100 * row['error_std']:.2f} | "
                f"{row['seconds']:.1f} |"
            )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", default="/tmp/scalenc-ccdr-scale.zarr")
    p.add_argument("--rows", type=int, default=6_000_000)
    p.add_argument("--features", type=int, default=100)
    p.add_argument("--chunk-rows", type=int, default=100_000)
    p.add_argument("--subsample-sizes", type=int, nargs="+", default=[500, 2000])
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--sat-sizes", type=int, nargs="+", default=[250, 500, 1000, 2000, 4435])
    p.add_argument("--mnist-sizes", type=int, nargs="+", default=[500, 1000, 2000, 4000])
    p.add_argument("--n-subsamples", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--seeds", type=int, default=3, help="subsample draws (satimage)")
    p.add_argument("--mnist-seeds", type=int, default=1)
    p.add_argument("--skip-zarr", action="store_true")
    p.add_argument("--skip-errors", action="store_true")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default="/tmp/scalenc-ccdr-scale.json")
    args = p.parse_args(argv)
    if args.quick:
        args.rows, args.repeats, args.seeds, args.mnist_seeds = 400_000, 1, 1, 1
        args.sat_sizes, args.mnist_sizes, args.n_subsamples = [500], [500], [1, 2]
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() and not args.quick else {}
    if not args.skip_zarr:  # parts not run keep their earlier results in --out
        results["zarr"] = part_a(args)
    if not args.skip_errors:
        results["errors"] = part_b(args)
    out.write_text(json.dumps(results, indent=1))
    print_tables(results)


if __name__ == "__main__":
    main()
