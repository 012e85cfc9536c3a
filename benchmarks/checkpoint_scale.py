r"""What checkpoints and updates cost, and what they save, on an out-of-core Zarr store.

For one estimator on a simulated store (``--rows`` × ``--features`` float32, ``--classes``
classes), each fit in a process of its own (so a kill is a real SIGKILL), side by side in
one run, on the threaded scheduler and on a memory-limited LocalCluster:

* ``plain``: the fit without a checkpoint;
* ``checkpointed``: the same fit writing its checkpoint (the overhead: target ≤ 5 %);
* ``killed + resumed``: the checkpointed fit SIGKILLed when half of ``plain``'s time has
  passed, then run again to the end; the second run's time over ``plain``'s (target ≤ 0.6);
* ``update``: ``partial_fit`` of a model fitted on the first 90 % of the rows with the last
  10 %, over a refit on all rows (target ≤ 0.15); the updated model's test error beside the
  refit's.

Each figure is the median of ``--repeats`` rounds, the rounds alternated (plain,
checkpointed, killed + resumed). Prints a table and writes ``--json``.

    python benchmarks/checkpoint_scale.py                     # nRBFN, 1 M × 32, both schedulers
    python benchmarks/checkpoint_scale.py --quick             # a small store, one round

The results page's LRC and 12 M-row runs::

    python benchmarks/checkpoint_scale.py --method lrc --rows 10000000 --features 100 \
        --chunk-rows 250000 --memory-limit 1GiB --repeats 1
    python benchmarks/checkpoint_scale.py --rows 12000000 --features 48 --chunk-rows 50000 \
        --basis 500 --memory-limit 1GiB --schedulers local --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The child process: fit (or update) and print its seconds and test error as JSON.
CHILD = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
import dask, numpy as np
from scalenc import LRClassifier, NRBFNClassifier, load, save_model, load_model

args = json.loads(sys.argv[1])

def make():
    if args["method"] == "lrc":
        return LRClassifier(checkpoint=args.get("checkpoint"))
    return NRBFNClassifier(n_basis=args["basis"], random_state=0, alpha=1e-9,
                           checkpoint=args.get("checkpoint"))

def run():
    X, y = load(args["data"], chunk_rows=args["chunk_rows"])
    Xt, yt = load(args["test"])
    rows = args.get("rows")
    start = time.perf_counter()
    if args.get("update"):
        model = load_model(args["update"])
        model.partial_fit(X[rows[0]:rows[1]], y[rows[0]:rows[1]])
    else:
        if rows:
            X, y = X[rows[0]:rows[1]], y[rows[0]:rows[1]]
        model = make().fit(X, y)
    seconds = time.perf_counter() - start
    if args.get("save"):
        save_model(model, args["save"], overwrite=True)
    error = float(np.mean(model.predict(Xt.compute()) != yt.compute()))
    print(json.dumps({"seconds": seconds, "error": error,
                      "checkpoint": getattr(model, "checkpoint_summary_", None)}))

if args["scheduler"] == "local":
    if __name__ == "__main__":
        with dask.config.set({"distributed.worker.memory.target": 0.6}):
            from scalenc import connect
            with connect("local", n_workers=2, memory_limit=args["memory_limit"]):
                run()
else:
    run()
"""


def _child(spec: dict, *, kill_after: float | None = None) -> dict | None:
    """Run one child; with ``kill_after``, SIGKILL it after that many seconds."""
    script = Path(spec["workdir"]) / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, str(script), json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # the LocalCluster's workers go with it
    )
    if kill_after is not None:
        try:
            proc.wait(kill_after)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"the child failed ({proc.returncode}): {err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def _make_store(path: str, rows: int, features: int, classes: int, seed: int, chunk: int) -> None:
    from scalenc import write_dataset
    from scalenc.simulate import simulate

    X, y = simulate("normal_noise", rows, features, classes, random_state=seed, chunk_rows=chunk)
    write_dataset(X, y, path, overwrite=True)


def measure(args, scheduler: str, workdir: Path) -> dict:
    base = {
        "method": args.method,
        "basis": args.basis,
        "data": str(workdir / "train.zarr"),
        "test": str(workdir / "test.zarr"),
        "chunk_rows": args.chunk_rows,
        "scheduler": scheduler,
        "memory_limit": args.memory_limit,
        "workdir": str(workdir),
    }
    plain, checkpointed, resumed, reused = [], [], [], []
    for _ in range(args.repeats):
        plain.append(_child(base)["seconds"])
        ck = str(workdir / "ckpt")
        shutil.rmtree(ck, ignore_errors=True)
        out = _child({**base, "checkpoint": ck})
        checkpointed.append(out["seconds"])
        shutil.rmtree(ck, ignore_errors=True)
        killed = _child({**base, "checkpoint": ck}, kill_after=plain[-1] / 2 + args.startup)
        if killed is not None:
            print("warning: the fit finished before it was killed; use a larger store")
        out = _child({**base, "checkpoint": ck})
        resumed.append(out["seconds"])
        reused.append(out["checkpoint"])
    cut = int(args.rows * 0.9)
    old = _child({**base, "rows": [0, cut], "save": str(workdir / "old-model")})
    update = _child({**base, "rows": [cut, args.rows], "update": str(workdir / "old-model")})
    refit = _child(base)
    median = statistics.median
    return {
        "scheduler": scheduler,
        "plain_s": median(plain),
        "checkpointed_s": median(checkpointed),
        "overhead": median(checkpointed) / median(plain) - 1,
        "resumed_s": median(resumed),
        "resumed_over_plain": median(resumed) / median(plain),
        "reused": reused[-1],
        "update_s": update["seconds"],
        "refit_s": refit["seconds"],
        "update_over_refit": update["seconds"] / refit["seconds"],
        "error": {"old": old["error"], "updated": update["error"], "refit": refit["error"]},
        "rounds": {"plain": plain, "checkpointed": checkpointed, "resumed": resumed},
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--method", choices=["nrbfn", "lrc"], default="nrbfn")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--classes", type=int, default=5)
    p.add_argument("--basis", type=int, default=1500, help="nRBFN's n_basis")
    p.add_argument("--chunk-rows", type=int, default=25_000)
    p.add_argument("--memory-limit", default="600MiB", help="per worker of the LocalCluster")
    p.add_argument("--schedulers", nargs="+", default=["threads", "local"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--startup", type=float, default=2.0, help="seconds a child takes to start")
    p.add_argument("--quick", action="store_true", help="200 000 rows, one round, threads")
    p.add_argument("--workdir")
    p.add_argument("--json")
    args = p.parse_args(argv)
    if args.quick:
        args.rows, args.repeats, args.schedulers = min(args.rows, 200_000), 1, ["threads"]
        args.chunk_rows = min(args.chunk_rows, 10_000)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="scalenc-ckpt-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    _make_store(
        str(workdir / "train.zarr"), args.rows, args.features, args.classes, 0, args.chunk_rows
    )
    _make_store(str(workdir / "test.zarr"), 20_000, args.features, args.classes, 1, 20_000)
    results = [measure(args, s, workdir) for s in args.schedulers]
    print(
        f"\n{args.method} on {args.rows:,} × {args.features} float32, {args.classes} classes, "
        f"blocks of {args.chunk_rows:,} rows; median of {args.repeats} round(s)\n"
    )
    print("| scheduler | plain s | checkpointed s | overhead | resumed s | resumed ÷ plain "
          "| update s | refit s | update ÷ refit | error old / updated / refit |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        e = r["error"]
        print(
            f"| {r['scheduler']} | {r['plain_s']:.1f} | {r['checkpointed_s']:.1f} "
            f"| {100 * r['overhead']:+.1f} % | {r['resumed_s']:.1f} "
            f"| {r['resumed_over_plain']:.2f} | {r['update_s']:.1f} | {r['refit_s']:.1f} "
            f"| {r['update_over_refit']:.3f} "
            f"| {100 * e['old']:.2f} / {100 * e['updated']:.2f} / {100 * e['refit']:.2f} % |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
