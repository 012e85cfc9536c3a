"""Fits on a cluster whose workers keep being pre-empted: time against the calm cluster, and
agreement with the threaded fit.

A ``dask scheduler`` and two ``dask worker --nthreads 1`` processes with their nannies on
127.0.0.1. While a fit runs, a worker chosen at random is SIGKILLed together with its
nanny every ``--periods`` seconds (8 and 20 by default) and a fresh worker is started, as a
pre-emptible pool replaces a lost machine. Each estimator (NRBFNClassifier,
CCDRClassifier, the three-kernel EncoderClassifier; ``random_state=0``) fits the same
Zarr store with a checkpoint (``checkpoint=``), so that it resumes from it by itself when
Dask gives up on a task after ``distributed.scheduler.allowed-failures`` workers died
running it (:mod:`scalenc.engine.resume`). Reported per estimator: the threaded fit's
seconds, the calm cluster's, each churn period's (× the calm cluster), the workers killed,
the fit's attempts, and the share of predictions equal to the threaded fit's on the first
``--test-rows`` rows (1 is the same model).

The machine may be shared: the load (``os.getloadavg``) is printed before and after, and
every timing should be read with it.

    python benchmarks/churn.py                      # 400 000 × 40 float32, periods 8 and 20 s
    python benchmarks/churn.py --quick              # a tiny store, one estimator, one period
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ESTIMATORS = ("nrbfn", "ccdr", "encoder")
DASK = str(Path(sys.executable).parent / "dask")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=400_000, help="rows (default 400 000)")
    p.add_argument("--p", type=int, default=40, help="features (default 40)")
    p.add_argument("--k", type=int, default=5, help="classes (default 5)")
    p.add_argument("--chunk-rows", type=int, default=25_000, help="rows per block")
    p.add_argument("--periods", default="8,20", help="seconds between kills, comma-separated")
    p.add_argument("--estimators", default=",".join(ESTIMATORS), help="nrbfn, ccdr, encoder")
    p.add_argument("--test-rows", type=int, default=20_000, help="rows the agreement is on")
    p.add_argument("--seed", type=int, default=0, help="which worker each kill picks")
    p.add_argument(
        "--allowed-failures",
        type=int,
        default=None,
        help="the scheduler's distributed.scheduler.allowed-failures (default: Dask's, 3); "
        "0 makes every killed worker cost its tasks, so the fits resume often",
    )
    p.add_argument(
        "--block-seconds",
        type=float,
        default=None,
        help="the Dask config scalenc.checkpoint.block-seconds: the estimated seconds a row "
        "block of a long pass is split to on the cluster (default: scalenc's, 2 s); 0 keeps "
        "the store's blocks",
    )
    p.add_argument("--workdir", default=None, help="store, checkpoints, logs (default: a temp)")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument(
        "--quick",
        action="store_true",
        help="a tiny store (3 000 × 6 in blocks of 500), nrbfn, one period of 3 s, every "
        "block checkpointed: a smoke run",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.p, args.k, args.chunk_rows, args.test_rows = 3000, 6, 3, 500, 1000
        if args.periods == "8,20":
            args.periods = "3"
        if args.estimators == ",".join(ESTIMATORS):
            args.estimators = "nrbfn"
    args.periods = [float(v) for v in str(args.periods).split(",") if v]
    args.estimators = [v for v in args.estimators.split(",") if v]
    unknown = sorted(set(args.estimators) - set(ESTIMATORS))
    if unknown:
        p.error(f"unknown estimators {unknown}; choose from {list(ESTIMATORS)}")
    return args


def make_estimator(name: str, checkpoint=None):
    from scalenc import CCDRClassifier, EncoderClassifier, NRBFNClassifier

    if name == "nrbfn":
        return NRBFNClassifier(random_state=0, checkpoint=checkpoint)
    if name == "ccdr":
        return CCDRClassifier(random_state=0, checkpoint=checkpoint)
    return EncoderClassifier(kernels=("linear", "euclidean", "spearman"), checkpoint=checkpoint)


def make_store(path: Path, args) -> None:
    """Gaussian classes with a shared covariance, float32, written block by block."""
    import dask.array as da

    rng = np.random.default_rng(7)
    centres = rng.normal(scale=1.5, size=(args.k, args.p))
    mix = rng.normal(size=(args.p, args.p)) / np.sqrt(args.p)

    def block(b, block_info=None):
        start = block_info[None]["array-location"][0][0]
        r = np.random.default_rng(1000 + start)
        y = r.integers(0, args.k, len(b))
        return (centres[y] + r.normal(size=(len(b), args.p)) @ mix).astype(np.float32)

    def labels(b, block_info=None):
        start = block_info[None]["array-location"][0][0]
        return np.random.default_rng(1000 + start).integers(0, args.k, len(b))

    rows = da.zeros((args.n, args.p), chunks=(args.chunk_rows, args.p), dtype=np.float32)
    X = rows.map_blocks(block, dtype=np.float32)
    y = da.zeros(args.n, chunks=args.chunk_rows, dtype=np.int64).map_blocks(labels, dtype=np.int64)
    X.to_zarr(str(path), component="X", overwrite=True)
    y.to_zarr(str(path), component="y", overwrite=True)


class Cluster:
    """A scheduler and nanny workers started here; :meth:`preempt` kills one, with its
    nanny, and starts a fresh one."""

    def __init__(self, root: Path, n_workers: int = 2, allowed_failures: int | None = None):
        self.root, self.n_workers = root, n_workers
        self.allowed_failures = allowed_failures
        root.mkdir(parents=True, exist_ok=True)
        self.file = root / "scheduler.json"
        self.scheduler = None
        self.workers: list[subprocess.Popen] = []
        self.started = 0
        self.kills = 0

    def _popen(self, args, name):
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - the process keeps it
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        if self.allowed_failures is not None:
            env["DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES"] = str(self.allowed_failures)
        return subprocess.Popen([DASK, *args], stdout=log, stderr=subprocess.STDOUT, env=env)

    def start(self) -> Cluster:
        self.scheduler = self._popen(
            [
                "scheduler", "--host", "127.0.0.1", "--port", "0",
                "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(self.file),
            ],
            "scheduler",
        )  # fmt: skip
        while not self.file.exists():
            time.sleep(0.1)
        time.sleep(0.3)
        for _ in range(self.n_workers):
            self.add_worker()
        import distributed

        with distributed.Client(scheduler_file=str(self.file), timeout=30) as client:
            client.wait_for_workers(self.n_workers, timeout=120)
        return self

    def add_worker(self) -> None:
        self.started += 1
        self.workers.append(
            self._popen(
                [
                    "worker", "--scheduler-file", str(self.file), "--host", "127.0.0.1",
                    "--dashboard-address", "127.0.0.1:0", "--nthreads", "1",
                    "--memory-limit", "4GB",
                ],
                f"worker{self.started}",
            )
        )  # fmt: skip

    def preempt(self, rng: random.Random) -> None:
        """SIGKILL a live worker chosen by ``rng`` with its nanny; start a fresh one."""
        import psutil

        alive = [w for w in self.workers if w.poll() is None]
        if not alive:
            return
        nanny = rng.choice(alive)
        children = psutil.Process(nanny.pid).children(recursive=True)
        nanny.send_signal(signal.SIGKILL)
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.send_signal(signal.SIGKILL)
        nanny.wait()
        self.kills += 1
        self.add_worker()

    def close(self) -> None:
        import psutil

        for proc in [*self.workers, self.scheduler]:
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(psutil.NoSuchProcess):
                    for child in psutil.Process(proc.pid).children(recursive=True):
                        child.terminate()
                proc.terminate()
        for proc in [*self.workers, self.scheduler]:
            if proc is None:
                continue
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def cluster_fit(name: str, X, y, root: Path, period: float | None, args) -> dict:
    """Fit on a fresh cluster, pre-empting a worker every ``period`` seconds (None: calm)."""
    import scalenc

    cluster = Cluster(root, allowed_failures=args.allowed_failures).start()
    stop = threading.Event()
    rng = random.Random(args.seed)

    def churn():
        while not stop.wait(period):
            cluster.preempt(rng)

    killer = threading.Thread(target=churn, daemon=True) if period else None
    try:
        with scalenc.connect(scheduler_file=cluster.file, quiet=True):
            model = make_estimator(name, checkpoint=str(root / "checkpoint"))
            t0 = time.perf_counter()
            if killer is not None:
                killer.start()
            try:
                model.fit(X, y)
            except Exception as exc:  # noqa: BLE001 - reported in the table
                return {"failed": f"{type(exc).__name__}: {exc}"[:400], "kills": cluster.kills}
            finally:
                stop.set()
            seconds = time.perf_counter() - t0
    finally:
        stop.set()
        if killer is not None:
            killer.join()
        cluster.close()
    return {
        "seconds": seconds,
        "kills": cluster.kills,
        "attempts": model.checkpoint_summary_["attempts"],
        "model": model,
    }


def predictions(model, X_test) -> np.ndarray:
    import scalenc

    with scalenc.connect("threads"):
        return np.asarray(model.predict(X_test))


def main(argv=None) -> dict:
    args = parse_args(argv)
    import dask

    import scalenc

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="scalenc-churn-"))
    workdir.mkdir(parents=True, exist_ok=True)
    store = workdir / f"blobs-{args.n}x{args.p}-{args.chunk_rows}.zarr"
    if not store.exists():
        with scalenc.connect("threads"):
            make_store(store, args)
    load_before = os.getloadavg()
    print(f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    config = {}
    if args.quick:  # tiny blocks: save every one, or a resume would have nothing to read back
        config = {"scalenc.checkpoint.min-seconds": 0.0, "scalenc.checkpoint.write-share": 1e12}
    if args.block_seconds is not None:  # read where the fit decides its blocks: here
        config["scalenc.checkpoint.block-seconds"] = args.block_seconds
    rows = []
    with dask.config.set(config):
        X, y = scalenc.load(str(store))
        X_test = np.asarray(X[: args.test_rows].compute())
        for name in args.estimators:
            with scalenc.connect("threads"):
                t0 = time.perf_counter()
                reference = make_estimator(name).fit(X, y)
                threads_s = time.perf_counter() - t0
            want = predictions(reference, X_test)
            row = {"estimator": name, "threads_seconds": threads_s, "fits": {}}
            for period in [None, *args.periods]:
                label = "calm" if period is None else f"every {period:g} s"
                root = workdir / f"{name}-{label.replace(' ', '-')}"
                result = cluster_fit(name, X, y, root, period, args)
                model = result.pop("model", None)
                if model is not None:
                    result["agreement"] = float(np.mean(predictions(model, X_test) == want))
                row["fits"][label] = result
                print(f"{name} {label}: {_cell(result, row['fits'].get('calm'))}", flush=True)
            rows.append(row)
    load_after = os.getloadavg()
    print(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    report(rows, args)
    results = {
        "n": args.n,
        "p": args.p,
        "k": args.k,
        "chunk_rows": args.chunk_rows,
        "periods": args.periods,
        "allowed_failures": args.allowed_failures,
        "load_before": load_before,
        "load_after": load_after,
        "rows": rows,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


def _cell(result: dict, calm: dict | None) -> str:
    if "failed" in result:
        return f"failed after {result['kills']} kills: {result['failed'][:120]}"
    text = f"{result['seconds']:.1f} s"
    if calm is not None and calm is not result and "seconds" in calm:
        text += f" ({result['seconds'] / calm['seconds']:.2f}× calm)"
    return (
        f"{text}, {result['kills']} kills, {result['attempts']} attempts, "
        f"agreement {result['agreement']:.4f}"
    )


def report(rows: list[dict], args) -> None:
    labels = ["calm", *[f"every {p:g} s" for p in args.periods]]
    failures = "Dask's" if args.allowed_failures is None else str(args.allowed_failures)
    print(
        f"\n{args.n:,} × {args.p} float32, blocks of {args.chunk_rows:,} rows; two one-thread "
        "workers with nannies; a random one SIGKILLed with its nanny and replaced per period; "
        f"allowed-failures {failures}"
    )
    print("| estimator | threads s | " + " | ".join(labels) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in labels) + " |")
    for row in rows:
        calm = row["fits"].get("calm")
        cells = [_cell(row["fits"][label], calm) for label in labels]
        print(f"| {row['estimator']} | {row['threads_seconds']:.1f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
