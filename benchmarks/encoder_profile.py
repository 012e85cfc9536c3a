"""Where the three-kernel encoder's passes spend their time beyond the read (issue 26).

For each store of ``roofline.py``'s encoder grid (p × K ∈ {16, 50, 256} × {2, 10},
n = 1 000 000, the same Zarr stores, written under ``--workdir`` if missing):

1. on the threaded scheduler, as ``roofline.py`` runs it: a bare read of X
   (``X.sum(axis=0)``, best of 2 after a warm-up) and ``EncoderClassifier(kernels=
   ("linear", "euclidean", "spearman"), choice_sample=None)``'s fit (the best of
   ``--repeats``: the paper's passes over every row, as ``roofline.py`` fits them), so
   the fit in reads is the table's;
2. the same fit on Dask's synchronous scheduler with one BLAS thread (threadpoolctl), with
   a wall-clock timer around each block function, so every second of the fit belongs to one
   component (timers are exclusive: a component's seconds leave out those of the timed
   functions it calls):

   * ``read X`` / ``read y``: the Zarr reads and decompression (the store's
     ``__getitem__``, which waits on Zarr's I/O thread);
   * ``class sums``: pass 1's block function (the labeled class moments of X);
   * ``float64 copy``, ``X·Uᵀ``, ``squared distances``: the products the kernels of a
     tile share; ``euclidean sqrt``; ``spearman ranks`` (the rows' ranks and ties) and
     ``spearman product`` (ranks · the centred ranks of U); ``embed (rest)``: the tile
     loop and the stacked output's writes;
   * ``stacked class moments`` (the K×K moments of every kernel's Z), ``LDA
     log-likelihoods`` (the scores and log-softmax of the cross-entropy pass);
   * ``Z cache write`` (the cached embedding's blocks kept: ``.npy`` files when Z is over
     1 MiB, else in memory), ``Z cache read`` (the files' memory map, copied so that its
     page faults are counted here; none for a Z kept in memory);
   * ``fit_plan``: the cache-or-recompute choice, which times a few small kernels itself;
   * ``other``: the rest of the fit's wall time (Dask's graph and scheduling, the
     partials' merges, the LDA solves, the labels' encoding).

It prints, per shape, each component's seconds and share of the synchronous fit, the two
largest, and what the threaded fit would take in reads if one component cost nothing:
(fit − component · threaded fit ÷ synchronous fit) ÷ bare read, i.e. assuming every
component gains the same from the two threads. ``--cprofile N`` also prints the N
functions of largest own time from cProfile, over one more synchronous fit.

    python benchmarks/encoder_profile.py --workdir /work/runs/roofline
    python benchmarks/encoder_profile.py --features 50 --classes 10 --cprofile 25
    python benchmarks/encoder_profile.py --rows 3000 --features 8 --classes 3 --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import io
import json
import os
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path

import dask
import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).parent))
from roofline import ENCODER_K, ENCODER_N, ENCODER_P, THREE, make_store, open_store  # noqa: E402

import scalenc  # noqa: E402
import scalenc.encoder.blocks as enc_blocks  # noqa: E402
import scalenc.encoder.estimator as enc_estimator  # noqa: E402
import scalenc.encoder.kernels as enc_kernels  # noqa: E402
import scalenc.encoder.passes as enc_passes  # noqa: E402
import scalenc.engine.passes as engine_passes  # noqa: E402
import scalenc.engine.reduce as engine_reduce  # noqa: E402
import scalenc.io.integrity as integrity  # noqa: E402
from scalenc import EncoderClassifier  # noqa: E402

ORDER = (
    "read X",
    "read y",
    "class sums",
    "float64 copy",
    "X·Uᵀ",
    "squared distances",
    "euclidean sqrt",
    "linear",
    "spearman ranks",
    "spearman product",
    "embed (rest)",
    "stacked class moments",
    "LDA log-likelihoods",
    "Z cache write",
    "Z cache read",
    "fit_plan",
    "other",
)


class Timers:
    """Exclusive wall-clock seconds per (stage, component), for one thread."""

    def __init__(self):
        self.seconds = defaultdict(float)
        self.stage = "outside stages"
        self._children = []

    def wrap(self, name, func):
        @functools.wraps(func)
        def timed(*args, **kwargs):
            label = name(*args) if callable(name) else name
            self._children.append(0.0)
            t0 = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - t0
                inner = self._children.pop()
                self.seconds[self.stage, label] += elapsed - inner
                if self._children:
                    self._children[-1] += elapsed

        return timed


def _read_back_copied(path):
    return np.array(_ORIGINAL_READ_BACK(path))  # the page faults happen here, not downstream


_ORIGINAL_READ_BACK = engine_reduce._read_back


@contextlib.contextmanager
def instrumented(timers: Timers):
    """Every component's function wrapped with ``timers`` (restored on exit)."""
    patches = []

    def patch(owner, attr, value):
        patches.append((owner, attr, owner.__dict__[attr]))
        setattr(owner, attr, value)

    def patch_property(cls, attr, label):
        prop = functools.cached_property(timers.wrap(label, cls.__dict__[attr].func))
        prop.__set_name__(cls, attr)
        patch(cls, attr, prop)

    guard = integrity.ReadGuard
    patch(guard, "__getitem__", timers.wrap(
        lambda self, key: "read X" if self.ndim == 2 else "read y", guard.__getitem__
    ))  # fmt: skip
    patch(engine_passes, "_labeled_moments_block",
          timers.wrap("class sums", engine_passes._labeled_moments_block))  # fmt: skip
    patch_property(enc_kernels.Tile, "x64", "float64 copy")
    patch_property(enc_kernels.Tile, "inner", "X·Uᵀ")
    patch_property(enc_kernels.Tile, "sq_distances", "squared distances")
    patch(enc_kernels.Linear, "tile", timers.wrap("linear", enc_kernels.Linear.tile))
    patch(enc_kernels.Euclidean, "tile", timers.wrap("euclidean sqrt", enc_kernels.Euclidean.tile))
    patch(enc_kernels.Spearman, "tile",
          timers.wrap("spearman product", enc_kernels.Spearman.tile))  # fmt: skip
    patch(enc_kernels, "ranks_and_tied_rows",
          timers.wrap("spearman ranks", enc_kernels.ranks_and_tied_rows))  # fmt: skip
    patch(enc_passes, "embed", timers.wrap("embed (rest)", enc_passes.embed))
    patch(enc_blocks, "stacked_class_moments",
          timers.wrap("stacked class moments", enc_blocks.stacked_class_moments))  # fmt: skip
    patch(enc_blocks, "stacked_log_likelihood",
          timers.wrap("LDA log-likelihoods", enc_blocks.stacked_log_likelihood))  # fmt: skip
    patch(engine_reduce, "_keep_block",
          timers.wrap("Z cache write", engine_reduce._keep_block))  # fmt: skip
    patch(engine_reduce, "_read_back", timers.wrap("Z cache read", _read_back_copied))
    original_plan = enc_estimator.fit_plan

    def fit_plan(*args, **kwargs):
        previous, timers.stage = timers.stage, "fit_plan"
        try:
            return timers.wrap("fit_plan", original_plan)(*args, **kwargs)
        finally:
            timers.stage = previous

    patch(enc_estimator, "fit_plan", fit_plan)
    original_stage = enc_estimator.fit_stage

    @contextlib.contextmanager
    def fit_stage(model, stage):
        previous, timers.stage = timers.stage, stage
        try:
            with original_stage(model, stage):
                yield
        finally:
            timers.stage = previous

    patch(enc_estimator, "fit_stage", fit_stage)
    try:
        yield timers
    finally:
        for owner, attr, value in reversed(patches):
            setattr(owner, attr, value)


def bare_read(X, repeats: int = 2) -> float:
    X.sum(axis=0).compute()
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        X.sum(axis=0).compute()
        best = min(best, time.perf_counter() - t0)
    return best


def threaded_fit(X, y, repeats: int) -> dict:
    best = None
    for _ in range(repeats):
        model = EncoderClassifier(kernels=THREE, choice_sample=None)
        t0 = time.perf_counter()
        model.fit(X, y)
        seconds = time.perf_counter() - t0
        if best is None or seconds < best["fit_s"]:
            best = {
                "fit_s": seconds,
                "stages": dict(model.stage_times_),
                "plan": model.fit_plan_["name"],
                "kernel": model.kernel_.name,
            }
    return best


def profiled_fit(X, y) -> dict:
    """The synchronous one-thread fit with every component timed."""
    with dask.config.set(scheduler="synchronous"), threadpool_limits(1):
        # warm: imports, the page cache
        EncoderClassifier(kernels=THREE, choice_sample=None).fit(X, y)
        with instrumented(Timers()) as timers:
            model = EncoderClassifier(kernels=THREE, choice_sample=None)
            t0 = time.perf_counter()
            model.fit(X, y)
            fit_s = time.perf_counter() - t0
    stages = dict(model.stage_times_)
    components = defaultdict(float)
    by_stage = defaultdict(lambda: defaultdict(float))
    for (stage, name), seconds in timers.seconds.items():
        components[name] += seconds
        by_stage[stage][name] += seconds
    components["other"] = fit_s - sum(components.values())
    for stage, seconds in stages.items():
        by_stage[stage]["other"] = seconds - sum(by_stage[stage].values())
    return {
        "fit_s": fit_s,
        "stages": stages,
        "plan": model.fit_plan_["name"],
        "components": dict(components),
        "by_stage": {stage: dict(parts) for stage, parts in by_stage.items()},
    }


def cprofile_top(X, y, top: int) -> str:
    profile = cProfile.Profile()
    with dask.config.set(scheduler="synchronous"), threadpool_limits(1):
        profile.enable()
        EncoderClassifier(kernels=THREE, choice_sample=None).fit(X, y)
        profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def summarise(shape: dict) -> dict:
    """The two largest components, and the threaded fit in reads with each one free."""
    sync, threads, read = shape["sync"], shape["threads"], shape["read_s"]
    comps = sync["components"]
    ranked = sorted(comps, key=comps.get, reverse=True)
    scale = threads["fit_s"] / sync["fit_s"]
    free = {c: (threads["fit_s"] - comps[c] * scale) / read for c in comps}
    return {
        "top": [(c, comps[c], comps[c] / sync["fit_s"]) for c in ranked[:2]],
        "reads": threads["fit_s"] / read,
        "reads_if_free": free,
        "best_free": min(free, key=free.get),
    }


def run(args) -> dict:
    results = {"shapes": [], "load_average": os.getloadavg()}
    for p in args.features:
        for K in args.classes:
            path = make_store(Path(args.workdir), args.rows, p, K, args.chunk_rows)
            store, X, y = open_store(path, K)
            with scalenc.connect("threads"):
                read_s = bare_read(X)
                threads = threaded_fit(X, y, args.repeats)
            shape = {"shape": store.shape(), "p": p, "K": K, "read_s": read_s}
            shape["threads"], shape["sync"] = threads, profiled_fit(X, y)
            if args.cprofile:
                shape["cprofile"] = cprofile_top(X, y, args.cprofile)
            shape["summary"] = summarise(shape)
            shape["load_average"] = os.getloadavg()
            results["shapes"].append(shape)
            report(shape)
    results["load_average_after"] = os.getloadavg()
    return results


def report(shape: dict) -> None:
    sync, threads, summary = shape["sync"], shape["threads"], shape["summary"]
    print(f"\n{shape['shape']}: bare read {shape['read_s']:.3f} s; threads fit "
          f"{threads['fit_s']:.2f} s = {summary['reads']:.1f} reads (plan {threads['plan']}); "
          f"synchronous one-thread fit {sync['fit_s']:.2f} s (plan {sync['plan']}); "
          f"load {shape['load_average'][0]:.2f}")  # fmt: skip
    stages = list(sync["stages"]) + ["fit_plan", "outside stages"]
    print("| component | " + " | ".join(stages) + " | total s | share | reads if free |")
    print("| --- |" + " ---: |" * (len(stages) + 3))
    comps = sync["components"]
    for name in ORDER:
        if name not in comps or abs(comps[name]) < 5e-4:
            continue
        cells = [sync["by_stage"].get(st, {}).get(name, 0.0) for st in stages]
        print(f"| {name} | " + " | ".join(f"{c:.3f}" for c in cells)
              + f" | {comps[name]:.3f} | {comps[name] / sync['fit_s']:.0%} "
              f"| {summary['reads_if_free'][name]:.2f} |")  # fmt: skip
    top = "; ".join(f"{c} {s:.2f} s ({share:.0%})" for c, s, share in summary["top"])
    print(f"top two: {top}; one component free at best: {summary['best_free']} → "
          f"{summary['reads_if_free'][summary['best_free']]:.2f} reads")  # fmt: skip
    if "cprofile" in shape:
        print(shape["cprofile"])


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=ENCODER_N)
    parser.add_argument("--features", type=int, nargs="+", default=list(ENCODER_P))
    parser.add_argument("--classes", type=int, nargs="+", default=list(ENCODER_K))
    parser.add_argument("--chunk-rows", type=int, default=32_768)
    parser.add_argument("--repeats", type=int, default=2, help="threaded fits (the fastest)")
    parser.add_argument("--cprofile", type=int, default=0, help="print the top N functions")
    parser.add_argument("--workdir", default="/tmp/scalenc_roofline")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    results = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return results


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
