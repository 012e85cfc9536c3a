"""A Parquet dataset larger than a memory-limited cluster, read from an object store.

An S3-compatible server (moto's, started as its own process on 127.0.0.1 so that its
memory is not counted as scalenc's) holds a Parquet dataset of ``--rows`` × ``--features``
float32 (default 3M × 100 = 1.2 GB, one file per 100 000-row block) written with
``scalenc.io.outputs.write_dataset``. A LocalCluster of 2 workers × 1 thread × ``--memory-limit``
(default 512 MiB: 1 GiB in all, less than the dataset) reads it through s3fs; the client
opens only the Parquet footers. Measured side by side, ``--repeats`` interleaved rounds:

(a) one bare read pass over X from the store (``X.sum(axis=0)``),
(b) the linear-kernel encoder fit (one pass), (c) the two-kernel fit (linear, euclidean:
two passes over X and one over the cached embedding),

each as a ratio to (a), with the peak RSS of the client and the workers together. The
server is single-process Python, so the read is slower than a real object store: the
ratios, not the seconds, carry over.

    python benchmarks/object_store_scale.py
    python benchmarks/object_store_scale.py --rows 300000 --repeats 1   # a quick run
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import fsspec

sys.path.insert(0, str(Path(__file__).parent))
from encoder_scale import timed  # noqa: E402 - the sibling benchmark's measuring helpers

import scalenc  # noqa: E402
from scalenc import EncoderClassifier, load  # noqa: E402
from scalenc.io.outputs import write_dataset  # noqa: E402
from scalenc.simulate import simulate  # noqa: E402


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server() -> tuple[subprocess.Popen, dict]:
    """moto's S3 server as a child process on 127.0.0.1; the storage options that reach it."""
    port = _free_port()
    exe = str(Path(sys.executable).with_name("moto_server"))
    server = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    options = {
        "key": "bench",
        "secret": "bench",
        "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"},
    }
    for _ in range(100):
        try:
            fsspec.filesystem("s3", skip_instance_cache=True, **options).ls("")
            return server, options
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.1)
    server.kill()
    raise RuntimeError("moto_server did not start")


def run(args) -> dict:
    server, options = start_server()
    try:
        fs = fsspec.filesystem("s3", **options)
        fs.mkdir("scalenc-bench")
        url = "s3://scalenc-bench/data.parquet"
        X, y = simulate("normal_noise", args.rows, args.features, 5, random_state=0,
                        chunk_rows=args.chunk_rows)  # fmt: skip
        t0 = time.perf_counter()
        write_dataset(X, y, url, storage_options=options)
        written = time.perf_counter() - t0
        gb = args.rows * args.features * 4 / 1e9
        print(f"wrote {gb:.2f} GB of Parquet to {url} in {written:.1f} s")
        with scalenc.connect("local", n_workers=2, threads_per_worker=1,
                             memory_limit=args.memory_limit, quiet=True):  # fmt: skip
            Xd, yd = load(url, label_column="y", storage_options=options)

            def bare_read():
                return Xd.sum(axis=0).compute()

            def fit(kernels):
                return EncoderClassifier(kernels=kernels).fit(Xd, yd)

            funcs = {
                "read": bare_read,
                "linear": lambda: fit(("linear",)),
                "two": lambda: fit(("linear", "euclidean")),
            }
            rounds = {name: [] for name in funcs}
            peaks = {name: 0 for name in funcs}
            for _ in range(args.repeats):
                for name, func in funcs.items():
                    seconds, _, peak, _ = timed(func, 1)
                    rounds[name].append(seconds)
                    peaks[name] = max(peaks[name], peak)
        read = min(rounds["read"])
        results = {
            "rows": args.rows,
            "features": args.features,
            "dataset_gb": round(gb, 2),
            "memory_limit_per_worker": args.memory_limit,
            "read_seconds": round(read, 2),
            "linear_fit_ratio": round(min(rounds["linear"]) / read, 2),
            "two_kernel_fit_ratio": round(min(rounds["two"]) / read, 2),
            "rounds": {k: [round(v, 2) for v in vs] for k, vs in rounds.items()},
            "peak_rss_mb": {k: round(v / 2**20) for k, v in peaks.items()},
        }
        print(json.dumps(results, indent=1))
        return results
    finally:
        server.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--features", type=int, default=100)
    parser.add_argument("--chunk-rows", type=int, default=100_000)
    parser.add_argument("--memory-limit", default="512MiB")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    results = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
