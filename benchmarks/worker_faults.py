"""The block functions as a Dask worker runs them: time and page faults under the malloc
settings of Dask's nanny, beside a plain process.

A nanny starts its worker with the environment of ``distributed.nanny.pre-spawn-environ``
(``MALLOC_TRIM_THRESHOLD_=65536`` in Dask's defaults, to hand freed memory back to the
system). That setting turns off glibc's adaptive mmap threshold, so every temporary
array over 128 KB is mapped afresh and page-faulted in on each allocation. A block
function that makes megabyte-sized temporaries per row tile runs slower on a worker than
in the client's process. This script measures how much, for the row-tile loops of the
fits' largest stages:

* ``soft_knn``: nRBFN's soft-KNN, :func:`scalenc.math.neighbors.kneighbors_block` of one
  block against ``--candidates`` candidates, k = 20;
* ``sigma`` and ``gram``: nRBFN's :func:`~scalenc.nrbfn.blocks.sigma_block` and
  :func:`~scalenc.nrbfn.blocks.gram_block` against a basis of r rows (by default the
  cost bound √(c (p + 784)) of ``max_basis="auto"``);
* ``ccdr_extension``: CCDR's Nyström extension of one block,
  :func:`scalenc.ccdr.blocks.transform_block`, for a ``CCDR()`` with its defaults fitted
  on ``--ccdr-rows`` rows;
* ``encoder_pass1`` and ``encoder_pass2``: the three-kernel encoder's two passes over a
  block for large n (:func:`scalenc.engine.passes.labeled_moments_pass`'s block, with the
  class sums, squared norms and the hashed sample; the embedding pass's block for the
  linear and Euclidean kernels, with their class moments and the cross-entropy bounds'
  sums, :func:`scalenc.encoder.blocks.stacked_loss_gradients`).

Each function runs in two fresh processes, one with the nanny's environment and one
without, on one BLAS thread, on the same data (``uniform_noise``-like: uniform features,
K = 5 classes). The two processes alternate ``--rounds`` times (so that a drift of the
machine's speed hits both). Per function: the best of ``--repeats`` calls after a warm-up
in every round, and the median of the calls' minor page faults (``getrusage``). The
ratio "nanny ÷ plain" is what the worker pays for the setting; 1.0 means the function's
temporaries are reused. The fault counts are the steadier measure on a noisy machine.

Usage::

    python benchmarks/worker_faults.py [--quick] [--features 32 256] [--repeats 3] [--rounds 3]
                                       [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

STAGES = ("soft_knn", "sigma", "gram", "ccdr_extension", "encoder_pass1", "encoder_pass2")
K_CLASSES = 5


def nanny_environ() -> dict:
    """The variables Dask's nanny sets for its worker (as strings)."""
    import dask
    import distributed  # noqa: F401 (loads the distributed config defaults)

    env = dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {}
    return {str(key): str(value) for key, value in env.items()}


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _timed(call, repeats: int) -> dict:
    call()  # warm-up: per-thread buffers, caches
    seconds, faults = [], []
    for _ in range(repeats):
        before, start = _faults(), time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
        faults.append(_faults() - before)
    return {"seconds": min(seconds), "faults": int(np.median(faults))}


def _stage_calls(stage: str, args, p: int):
    """The call of ``stage`` on one block of synthetic data."""
    rng = np.random.default_rng(p)
    X = rng.random((args.block_rows, p), dtype=np.float32)
    codes = rng.integers(0, K_CLASSES, args.block_rows)
    if stage == "soft_knn":
        from scalenc.math.neighbors import kneighbors_block

        C = rng.random((args.candidates, p), dtype=np.float32)
        index = np.sort(rng.choice(10 * args.block_rows, args.candidates, replace=False))
        return lambda: kneighbors_block(
            X, codes, row_start=0, candidates=C, candidate_index=index, n_neighbors=20
        )
    if stage in ("sigma", "gram"):
        from scalenc.nrbfn import blocks

        r = args.basis or int(np.sqrt(args.candidates * (p + 784)))
        basis = rng.random((r, p), dtype=np.float32)
        if stage == "sigma":
            return lambda: blocks.sigma_block(X, codes, row_start=0, basis=basis)
        sigma = float(np.sqrt(p / 6.0))  # about the mean distance of uniform rows
        return lambda: blocks.gram_block(
            X, codes, row_start=0, basis=basis, kernels=((sigma, True),), n_classes=K_CLASSES,
            n_folds=1, seed=0,
        )  # fmt: skip
    if stage.startswith("encoder"):
        return _encoder_call(stage, X, codes)
    from scalenc import CCDR
    from scalenc.ccdr.blocks import transform_block

    train = rng.random((args.ccdr_rows, p), dtype=np.float32)
    labels = (train[:, 0] * K_CLASSES).astype(np.int64)  # classes along one direction
    model = CCDR(random_state=0).fit(train, labels)
    return lambda: transform_block(
        X, solutions=model.solutions_, with_codes=False, out_dtype=np.float32
    )


def _encoder_call(stage: str, X, codes):
    """One block of the encoder's pass 1 or pass 2 (see the module's docstring)."""
    from scalenc.engine.passes import _labeled_moments_block

    if stage == "encoder_pass1":
        sample = (0.03, 65_536, 0)  # the plan's rate for 65 536 rows of 2 M
        return lambda: _labeled_moments_block(
            X, codes, row_start=0, scatter=False, sqnorm=True, sample=sample
        )
    from scalenc import EncoderClassifier
    from scalenc.encoder.passes import _embedding_block
    from scalenc.math.linalg import stacked_class_scores

    model = EncoderClassifier(kernels=("linear", "euclidean")).fit(X, codes)
    K = model.classes_.size
    whiten = tuple(np.eye(K + 1) for _ in model.lda_models_)
    scores = (*stacked_class_scores(model.lda_models_, K), whiten)
    return lambda: _embedding_block(
        X, codes, row_start=0, kernels=tuple(model.kernels_), U=model.class_means_,
        n_classes=K, scores=scores,
    )  # fmt: skip


def child(args) -> None:
    """Runs in a fresh process: every stage at every p, JSON on stdout."""
    from threadpoolctl import threadpool_limits

    out = []
    with threadpool_limits(1):
        for p in args.features:
            for stage in args.stages:
                call = _stage_calls(stage, args, p)
                out.append({"stage": stage, "p": p, **_timed(call, args.repeats)})
    print(json.dumps(out))


def _run_child(argv: list[str], nanny: dict, as_worker: bool) -> list[dict]:
    """The stages in a fresh process: with the nanny's variables, or without them."""
    env = {key: value for key, value in os.environ.items() if key not in nanny}
    if as_worker:
        env.update(nanny)
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", *argv],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"the child process failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _best_of_rounds(rounds: list[list[dict]]) -> list[dict]:
    """Per stage: the fastest of the rounds' times, the median of their page faults."""
    out = []
    for runs in zip(*rounds, strict=True):
        out.append({
            "stage": runs[0]["stage"], "p": runs[0]["p"],
            "seconds": min(run["seconds"] for run in runs),
            "faults": int(np.median([run["faults"] for run in runs])),
        })  # fmt: skip
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument("--features", type=int, nargs="+", help="p (default 32 256)")
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    parser.add_argument("--block-rows", type=int, help="rows of the block (default 25 000)")
    parser.add_argument("--candidates", type=int, help="soft-KNN candidates c (10 000)")
    parser.add_argument("--basis", type=int, help="r (default: the cost bound of c and p)")
    parser.add_argument("--ccdr-rows", type=int, help="rows CCDR is fitted on (20 000)")
    parser.add_argument("--repeats", type=int, default=3, help="calls per process")
    parser.add_argument("--rounds", type=int, default=3, help="pairs of processes, alternating")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quick = {"features": [8], "block_rows": 2000, "candidates": 500, "basis": 100,
             "ccdr_rows": 1500}  # fmt: skip
    full = {"features": [32, 256], "block_rows": 25_000, "candidates": 10_000,
            "basis": None, "ccdr_rows": 20_000}  # fmt: skip
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.child:
        child(args)
        return None
    nanny = nanny_environ()
    passed = [
        "--features", *map(str, args.features), "--stages", *args.stages,
        "--block-rows", str(args.block_rows), "--candidates", str(args.candidates),
        "--ccdr-rows", str(args.ccdr_rows), "--repeats", str(args.repeats),
    ]  # fmt: skip
    if args.basis:
        passed += ["--basis", str(args.basis)]
    plain, worker = [], []
    for _ in range(args.rounds):  # alternating, so that a drift of the machine hits both
        plain.append(_run_child(passed, nanny, as_worker=False))
        worker.append(_run_child(passed, nanny, as_worker=True))
    plain, worker = _best_of_rounds(plain), _best_of_rounds(worker)
    rows = []
    print(f"Dask's nanny environment: {nanny or '(none)'}; one BLAS thread, "
          f"{args.block_rows} rows a block, best of {args.repeats} calls × {args.rounds} "
          "rounds")  # fmt: skip
    print(f"{'stage':<16}{'p':>5}{'plain s':>10}{'nanny s':>10}{'ratio':>8}"
          f"{'faults plain':>14}{'faults nanny':>14}")  # fmt: skip
    for a, b in zip(plain, worker, strict=True):
        ratio = b["seconds"] / a["seconds"] if a["seconds"] > 0 else float("nan")
        rows.append({"stage": a["stage"], "p": a["p"], "plain": a, "nanny": b, "ratio": ratio})
        print(f"{a['stage']:<16}{a['p']:>5}{a['seconds']:>10.3f}{b['seconds']:>10.3f}"
              f"{ratio:>8.2f}{a['faults']:>14}{b['faults']:>14}")  # fmt: skip
    result = {"nanny_environ": nanny, "block_rows": args.block_rows, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
