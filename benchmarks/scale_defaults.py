"""nRBFN and CCDR with their defaults on a Zarr store larger than a memory-limited cluster.

Issue 12's scale runs. A simulated store (``--setting``, default ``uniform_noise``: Shen's
simulation with noise, K = ``--classes`` uniform classes, float32, ``--features`` columns)
of the largest of ``--sizes`` rows is written once under ``--workdir`` (kept between runs,
and reused for smaller sizes), with a held-out test set: the next ``--test-rows`` rows of
the same simulation. Default: 2 000 000 × 256 float32 = 2.05 GB, in 32 768-row (32 MiB)
chunks, against a LocalCluster of 2 workers × 1 thread × ``--memory-limit`` (default
768 MiB: 1.61 GB in all, less than the store; a worker that has imported scalenc and its
dependencies already holds about 210 MB). For every n of ``--sizes`` (the store's first
n rows), measured side by side:

(a) a bare read pass, ``X.sum(axis=0)`` as in ``encoder_scale.py``;
(b) ``NRBFNClassifier().fit`` with every default, then ``predict`` on the test set;
(c) ``CCDRClassifier().fit`` with every default, then ``predict`` on the test set;

each fit as a ratio to (a), with its test error, and the peak RSS of the client process and
of the Dask workers, sampled every 50 ms with psutil in a background thread (the workers:
every child process of the client, i.e. the two worker processes and multiprocessing's
small resource tracker; the maximum of their sum and of the largest one). A worker killed
for memory and restarted by its nanny shows as a new process id ("restarts"). A fit that
fails is reported with its exception and, for nRBFN, its ``memory_plan_``; the run goes on.
Afterwards, for context, scikit-learn's LDA on the first ``--peer-rows`` rows and 20-NN on
the first ``--peer-rows`` / 4 rows, on the client, scored on the same test set.

``--nrbfn-memory-limit`` adds a step (b') ``NRBFNClassifier(memory_limit=...)``: the
default with an explicit per-process budget, for comparison with (b).

    python benchmarks/scale_defaults.py                          # 0.5M, 1M, 2M rows
    python benchmarks/scale_defaults.py --quick                  # 100k, 200k rows
    python benchmarks/scale_defaults.py --sizes 20000 40000 --features 16 --test-rows 2000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).parent))
from encoder_scale import cpu_seconds  # noqa: E402 - the sibling benchmark's CPU clock

import scalenc  # noqa: E402
from scalenc import CCDRClassifier, NRBFNClassifier, load  # noqa: E402
from scalenc.simulate import simulate, simulate_rows  # noqa: E402

MB = 2**20


# --- the store ------------------------------------------------------------------------------


def make_store(args) -> tuple[Path, Path]:
    """The training store and the test set, written once and reused: the smallest store of
    the same simulation with at least the largest size's rows (fits use its first rows)."""
    kind = f"{args.setting}-n*-p{args.features}-K{args.classes}-c{args.chunk_rows}-s{args.seed}"
    stored = [
        int(path.name[len(args.setting) + 2 :].split("-")[0])
        for path in Path(args.workdir).glob(f"{kind}.zarr")
        if (path / "y" / "zarr.json").exists()
    ]
    rows = min([n for n in stored if n >= max(args.sizes)], default=max(args.sizes))
    name = kind.replace("-n*-", f"-n{rows}-")
    store = Path(args.workdir) / f"{name}.zarr"
    test = Path(args.workdir) / f"{name}-test{args.test_rows}.npz"
    if not (store / "y" / "zarr.json").exists():
        gb = rows * args.features * 4 / 1e9
        print(f"writing {rows:,} × {args.features} float32 ({gb:.2f} GB) to {store}", flush=True)
        X, y = simulate(args.setting, rows, args.features, args.classes, random_state=args.seed,
                        chunk_rows=args.chunk_rows)  # fmt: skip
        t0 = time.perf_counter()
        with dask.config.set(scheduler="threads"):
            da.to_zarr(X, str(store), component="X", overwrite=True)
            da.to_zarr(y, str(store), component="y", overwrite=True)
        print(f"  written in {time.perf_counter() - t0:.1f} s", flush=True)
    if not test.exists():
        Xt, yt = simulate_rows(args.setting, rows, rows + args.test_rows, args.features,
                               args.classes, args.seed, dtype=np.float32)  # fmt: skip
        test.parent.mkdir(parents=True, exist_ok=True)
        np.savez(test, X=Xt, y=yt)
    return store, test


def store_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# --- measuring -----------------------------------------------------------------------------


class ProcessPeaks:
    """Peak RSS of this process (the client) and of its children (the Dask workers),
    sampled every ``interval`` seconds; ``restarts`` counts child processes that appeared
    meanwhile (a worker killed for memory comes back under a new pid)."""

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.client = self.workers = self.largest_worker = 0
        self._stop = threading.Event()
        self._me = psutil.Process()

    def _sample(self) -> None:
        self.client = max(self.client, self._me.memory_info().rss)
        total = largest = 0
        for child in self._me.children(recursive=True):
            try:
                rss = child.memory_info().rss
            except psutil.Error:  # exited meanwhile
                continue
            self._seen.add(child.pid)
            total += rss
            largest = max(largest, rss)
        self.workers = max(self.workers, total)
        self.largest_worker = max(self.largest_worker, largest)

    def __enter__(self):
        self._initial = {child.pid for child in self._me.children(recursive=True)}
        self._seen = set(self._initial)
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()
        self.restarts = len(self._seen - self._initial)


def measure(func) -> dict:
    """Wall and CPU seconds, peak memory and warnings of one call; its value or its error."""
    out: dict = {}
    with ProcessPeaks() as peaks, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c0, t0 = cpu_seconds(), time.perf_counter()
        try:
            out["value"] = func()
        except Exception as exc:  # noqa: BLE001 - a failing default is a result to report
            out["error"] = f"{type(exc).__name__}: {exc}"
            out["traceback"] = traceback.format_exc()
        out["seconds"] = time.perf_counter() - t0
        out["cpu"] = cpu_seconds() - c0
    out["client_mb"] = round(peaks.client / MB)
    out["workers_mb"] = round(peaks.workers / MB)
    out["largest_worker_mb"] = round(peaks.largest_worker / MB)
    out["restarts"] = peaks.restarts
    out["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    return out


def nrbfn_summary(model) -> dict:
    plan = getattr(model, "memory_plan_", {}) or {}
    knn = plan.get("soft_knn", {})
    return {
        "fit_mode_": getattr(model, "fit_mode_", None),
        "soft_knn": knn.get("mode"),
        "n_candidates": knn.get("n_candidates"),
        "reason": knn.get("reason"),
        "basis_wanted": plan.get("basis", {}).get("wanted"),
        "basis_r": plan.get("basis", {}).get("r"),
        "largest_basis_that_fits": plan.get("largest_basis_that_fits"),
        "budget_mb": {k: round(v / MB) for k, v in plan.get("budget", {}).items()},
        "budget_source": plan.get("budget_source"),
        "estimates_mb": {
            stage: {k: round(plan[stage][k] / MB) for k in ("worker", "client")}
            for stage in ("soft_knn", "gram", "solve")
            if stage in plan
        },
        "n_passes_": getattr(model, "n_passes_", None),
        "stage_times_": {k: round(v, 1) for k, v in getattr(model, "stage_times_", {}).items()},
    }


def fit_and_score(make, X, y, Xt, yt):
    """A closure that fits ``make()`` on (X, y) and returns (model, test error, predict s)."""

    def run():
        model = make()
        try:
            model.fit(X, y)
        except Exception:
            run.model = model  # keep the plan of a fit that failed
            raise
        t0 = time.perf_counter()
        pred = np.asarray(model.predict(Xt))
        return model, float(np.mean(pred != yt)), time.perf_counter() - t0

    run.model = None
    return run


class Cluster:
    """The scheduler of the run: a LocalCluster of 2 workers × 1 thread × ``memory_limit``
    (through ``scalenc.connect``), started again when it has lost its workers, or threads.

    A LocalCluster whose workers were killed repeatedly for memory can end up with no
    worker at all, and a computation then waits forever: :meth:`watch` closes the client
    when no worker has been there for ``grace`` seconds, so the step fails instead."""

    def __init__(self, scheduler: str, memory_limit: str, grace: float = 90.0):
        self.scheduler, self.memory_limit, self.grace = scheduler, memory_limit, grace
        self.client = None
        self.starts = 0
        self._stack = contextlib.ExitStack()

    def start(self):
        self._stack.close()
        self._stack = contextlib.ExitStack()
        if self.scheduler == "local":
            self.client = self._stack.enter_context(
                scalenc.connect(
                    "local",
                    n_workers=2,
                    threads_per_worker=1,
                    memory_limit=self.memory_limit,
                    quiet=True,
                )  # fmt: skip
            )
        else:
            self._stack.enter_context(scalenc.connect("threads"))
        self.starts += 1

    def ensure(self):
        """Start the cluster, or start it again if it has fewer than its 2 workers."""
        if self.starts == 0:
            self.start()
        elif self.scheduler == "local":
            try:
                self.client.wait_for_workers(2, timeout=30)
            except Exception:  # noqa: BLE001 - closed by the watchdog, or workers gone
                print("  (the cluster lost its workers: starting a new one)", flush=True)
                self.start()

    @contextlib.contextmanager
    def watch(self):
        if self.client is None:
            yield
            return
        stop = threading.Event()
        self.closed_by_watchdog = False

        def run():
            since = None
            while not stop.wait(5.0):
                try:
                    workers = len(self.client.scheduler_info().get("workers", {}))
                except Exception:  # noqa: BLE001
                    return
                since = None if workers else (since or time.monotonic())
                if since is not None and time.monotonic() - since > self.grace:
                    self.closed_by_watchdog = True
                    self.client.close()
                    return

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def close(self):
        self._stack.close()


# --- the run -------------------------------------------------------------------------------


def steps(args) -> list[tuple[str, object]]:
    out = [("nrbfn", NRBFNClassifier), ("ccdr", CCDRClassifier)]
    if args.nrbfn_memory_limit:
        limit = args.nrbfn_memory_limit
        out.insert(1, ("nrbfn_budget", lambda: NRBFNClassifier(memory_limit=limit)))
    return out


def run_sizes(args, store: Path, test: Path, cluster: Cluster) -> list[dict]:
    X_all, y_all = load(store)
    with np.load(test) as data:
        Xt, yt = data["X"], data["y"]
    results = []

    def step(func):
        cluster.ensure()
        with cluster.watch():
            m = measure(func)
        if getattr(cluster, "closed_by_watchdog", False):
            m["error"] = f"the cluster had no worker for {cluster.grace:.0f} s: " + m.get(
                "error", ""
            )
        return m

    for n in args.sizes:
        X, y = X_all[:n], y_all[:n]
        for round_ in range(args.repeats):
            read = step(lambda X=X: X.sum(axis=0).compute())
            row = {"rows": n, "round": round_, "store_mb": round(X.nbytes / 1e6), "read": read}
            print(f"n={n:,} round {round_}: read {read['seconds']:.2f} s", flush=True)
            for name, make in steps(args):
                job = fit_and_score(make, X, y, Xt, yt)
                m = step(job)
                if "value" in m:
                    model, error, predict_s = m.pop("value")
                    m["error"], m["predict_s"] = error, predict_s
                    m["fit_s"] = m["seconds"] - predict_s
                else:
                    m["failed"] = m.pop("error")
                    model = job.model
                    m["fit_s"] = m["seconds"]
                if name.startswith("nrbfn") and model is not None:
                    m["nrbfn"] = nrbfn_summary(model)
                if name == "ccdr" and model is not None and hasattr(model, "n_passes_"):
                    m["ccdr"] = {
                        "n_components": getattr(model, "n_components_", None)
                        or getattr(model, "eigenvalues_", np.empty(0)).size,
                        "n_passes_": model.n_passes_,
                    }
                m["fit_over_read"] = m["fit_s"] / read["seconds"]
                m["cpu_over_read"] = m["cpu"] / max(read["cpu"], 1e-9)
                row[name] = m
                status = m.get("failed", f"error {m.get('error', float('nan')):.4f}")
                print(f"  {name}: {m['fit_s']:.1f} s ({m['fit_over_read']:.1f}× read), "
                      f"workers {m['workers_mb']} MB, {status[:200]}", flush=True)  # fmt: skip
            results.append(row)
    return results


def run_peers(args, store: Path, test: Path) -> dict:
    """LDA and 20-NN from scikit-learn on in-memory prefixes of the store (rows are iid)."""
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.neighbors import KNeighborsClassifier

    X_all, y_all = load(store)
    with np.load(test) as data:
        Xt, yt = data["X"], data["y"]
    out = {}
    for name, model, rows in (
        ("LDA", LinearDiscriminantAnalysis(), args.peer_rows),
        ("20-NN", KNeighborsClassifier(20), args.peer_rows // 4),
    ):
        rows = min(rows, X_all.shape[0])
        with dask.config.set(scheduler="threads"):
            X, y = dask.compute(X_all[:rows], y_all[:rows])
        t0 = time.perf_counter()
        model.fit(X, y)
        error = float(np.mean(model.predict(Xt) != yt))
        out[name] = {"rows": rows, "error": error, "seconds": time.perf_counter() - t0}
    return out


def print_table(r: dict) -> None:
    a = r["args"]
    print(
        f"\nstore: {r['store_rows']:,} × {a['features']} float32 ({r['store_disk_mb']} MB on "
        f"disk, {r['store_mb']} MB in memory), {a['setting']}, K = {a['classes']}, "
        f"{a['chunk_rows']:,}-row chunks; test set {a['test_rows']:,} rows"
    )
    print(
        f"cluster: {r['scheduler']}"
        + (
            f", 2 workers × 1 thread × {a['memory_limit']} ({r['cluster_mb']} MB in all)"
            if r["scheduler"] == "local"
            else ""
        )
    )
    print("\n| rows | step | fit s | × read | CPU × read | test error | predict s | "
          "client peak MB | workers peak MB (largest) | restarts |")  # fmt: skip
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    labels = {
        "read": "bare read",
        "nrbfn": "NRBFNClassifier()",
        "nrbfn_budget": f"NRBFNClassifier(memory_limit={a['nrbfn_memory_limit']!r})",
        "ccdr": "CCDRClassifier()",
    }
    for row in r["sizes"]:
        for key, label in labels.items():
            if key not in row:
                continue
            m = row[key]
            if key == "read":
                fit, ratio, cpu, err, pred = f"{m['seconds']:.2f}", "1.0", "1.0", "", ""
            else:
                fit, ratio = f"{m['fit_s']:.1f}", f"{m['fit_over_read']:.1f}"
                # a killed worker's CPU seconds are lost with it: no ratio then
                cpu = "–" if m["restarts"] or "failed" in m else f"{m['cpu_over_read']:.1f}"
                err = f"{m['error']:.2%}" if "failed" not in m else "**failed**"
                pred = f"{m['predict_s']:.1f}" if "predict_s" in m else ""
            print(
                f"| {row['rows']:,} | {label} | {fit} | {ratio} | {cpu} | {err} | {pred} | "
                f"{m['client_mb']} | {m['workers_mb']} ({m['largest_worker_mb']}) | "
                f"{m['restarts']} |"
            )
    for name, p in r.get("peers", {}).items():
        print(f"| {p['rows']:,} (in memory) | scikit-learn {name} | {p['seconds']:.1f} | | | "
              f"{p['error']:.2%} | | | | |")  # fmt: skip
    print()
    for row in r["sizes"]:
        for key in ("nrbfn", "nrbfn_budget", "ccdr"):
            m = row.get(key)
            if m is None:
                continue
            details = m.get("nrbfn") or m.get("ccdr") or {}
            print(f"n={row['rows']:,} {labels[key]}: {json.dumps(details)}")
            if "failed" in m:
                print(f"  FAILED: {m['failed'][:600]}")
            for w in dict.fromkeys(m["warnings"]):
                print(f"  warning: {w[:400]}")


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", help="default: 0.5M, 1M and 2M rows")
    parser.add_argument(
        "--quick", action="store_true", help="default sizes 100k and 200k rows, smaller test"
    )
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--classes", type=int, default=5)
    parser.add_argument("--setting", default="uniform_noise")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk-rows", type=int, default=32_768)
    parser.add_argument("--test-rows", type=int, default=50_000)
    parser.add_argument("--peer-rows", type=int, default=200_000)
    parser.add_argument("--workdir", default="/tmp/scalenc_scale")
    parser.add_argument("--scheduler", choices=["local", "threads"], default="local")
    parser.add_argument("--memory-limit", default="768MiB", help="per worker (local)")
    parser.add_argument("--nrbfn-memory-limit", help="add NRBFNClassifier(memory_limit=this)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes = args.sizes or [100_000, 200_000]
        args.test_rows, args.peer_rows = min(args.test_rows, 10_000), min(args.peer_rows, 100_000)
    args.sizes = args.sizes or [500_000, 1_000_000, 2_000_000]
    store, test = make_store(args)
    results = {
        "args": vars(args),
        "scheduler": args.scheduler,
        "store": str(store),
        "store_rows": load(store)[0].shape[0],
        "store_disk_mb": round(store_bytes(store) / 1e6),
        "store_mb": round(load(store)[0].nbytes / 1e6),
        "load_average": os.getloadavg(),
    }
    if args.scheduler == "local":
        from dask.utils import parse_bytes

        results["cluster_mb"] = round(2 * parse_bytes(args.memory_limit) / 1e6)
    cluster = Cluster(args.scheduler, args.memory_limit)
    try:
        results["sizes"] = run_sizes(args, store, test, cluster)
    finally:
        cluster.close()
    results["cluster_starts"] = cluster.starts
    results["peers"] = run_peers(args, store, test)
    results["load_average_after"] = os.getloadavg()
    print_table(results)
    print(f"load average before / after: {results['load_average']} / "
          f"{results['load_average_after']}")  # fmt: skip
    if args.json:
        for row in results["sizes"]:
            for m in row.values():
                if isinstance(m, dict):
                    m.pop("value", None)
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
