"""Golden outputs of the fits that the engine's reductions, sampler and row gather serve.

Fits CCDR, CCDRClassifier, EncoderClassifier (default; its sampled kernel choice;
graph-alone and fused on cora) and NRBFNClassifier on real sets of ``SCALENC_DATA_DIR``
(iris, wine, wdbc, satimage, usps, cora) and a simulated set, each as a Dask array of
more than ``split_every`` row blocks (so the reduction trees have depth two or more),
and records every fitted array attribute and the predictions.

    python benchmarks/golden_engine.py record golden.pkl   # on the code before a change
    python benchmarks/golden_engine.py check golden.pkl    # after it: exit 1 on a difference

``check`` compares bit for bit (arrays equal, NaN equal to NaN); ``stage_times_`` and
other timings are left out.
"""

from __future__ import annotations

import os
import pickle
import sys
import time

import dask.array as da
import numpy as np

from scalenc import CCDR, CCDRClassifier, EncoderClassifier, NRBFNClassifier
from scalenc.simulate import simulate

DATA = os.environ.get("SCALENC_DATA_DIR", "/work/shared/data")
SKIP = {"stage_times_", "fit_plan_", "checkpoint_summary_", "choice_timings_"}
PARAMS = {"split_every"}  # parameters whose default a change may set (not fitted state)


def load(name):
    d = np.load(f"{DATA}/{name}.npz")
    return d["X"], d["y"], d


def plain(value):
    """A fitted attribute as comparable plain data (arrays, numbers, strings), or None."""
    if isinstance(value, (np.ndarray, np.generic, int, float, str, bool)) or value is None:
        return np.asarray(value) if isinstance(value, np.generic) else value
    if isinstance(value, (tuple, list)):
        items = [plain(v) for v in value]
        return None if any(i is None and v is not None for i, v in zip(items, value)) else items
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if hasattr(value, "__dict__") and not callable(value):
        return {f"{type(value).__name__}.{k}": plain(v) for k, v in vars(value).items()}
    return None


def record(est, X, name, *outputs, **fit_kw):
    start = time.perf_counter()
    est.fit(X[0], X[1], **fit_kw)
    out = {
        k: plain(v)
        for k, v in vars(est).items()
        if k.endswith("_") and not k.startswith("_") and k not in SKIP
    }
    out["_private"] = {
        k: plain(v) for k, v in vars(est).items() if k.startswith("_") and k.endswith("_")
    }
    for method in outputs:
        result = getattr(est, method)(X[0], **({} if "graph" not in fit_kw else fit_kw))
        out[method] = np.asarray(result.compute() if hasattr(result, "compute") else result)
    print(f"{name}: {time.perf_counter() - start:.1f} s", flush=True)
    return out


def cases():
    sets = {}
    for name, chunk in [("iris", 12), ("wine", 16), ("wdbc", 40), ("satimage", 400), ("usps", 500)]:
        X, y, _ = load(name)
        sets[name] = (da.from_array(X, chunks=(chunk, -1)), da.from_array(y, chunks=chunk))
    Xs, ys = simulate("normal_transformed", 120_000, n_features=16, n_classes=4, chunk_rows=8000)
    sets["sim"] = (Xs.persist(), ys.persist())
    for name, data in sets.items():
        small = name in ("iris", "wine", "wdbc")
        yield f"encoder/{name}", EncoderClassifier(), data, ("predict", "predict_proba"), {}
        if name in ("satimage", "usps", "sim"):
            est = EncoderClassifier(choice_sample=1000 if name != "sim" else 4000)
            yield f"encoder-sampled/{name}", est, data, ("predict", "predict_proba"), {}
        sub = 60 if small else 800
        yield (
            f"ccdr/{name}",
            CCDR(subsample_size=sub, n_subsamples=2, random_state=0),
            data,
            ("transform",),
            {},
        )
        yield (
            f"ccdrc/{name}",
            CCDRClassifier(subsample_size=sub, random_state=1, classifier="lda"),
            data,
            ("predict",),
            {},
        )
        if name != "sim":
            nrbfn = NRBFNClassifier(
                random_state=0, n_candidates=None if small else 1500, memory_limit="4GB"
            )
            yield f"nrbfn/{name}", nrbfn, data, ("predict",), {}
    X, y, d = load("cora")
    y = y.copy()
    keep = np.zeros(y.size, bool)
    keep[d["train_idx"]] = True
    y[~keep] = -1
    data = (da.from_array(X, chunks=(300, -1)), da.from_array(y, chunks=300))
    edges = d["edges"].T
    yield "encoder-graph-fused/cora", EncoderClassifier(), data, ("predict",), {"graph": edges}
    alone = (None, data[1])
    yield "encoder-graph-alone/cora", EncoderClassifier(), alone, ("predict",), {"graph": edges}


def compare(a, b, where=""):
    if isinstance(a, dict) and isinstance(b, dict):
        keys = {k for k in set(a) ^ set(b) if k.split(".")[-1] not in PARAMS}
        diffs = [f"{where}: keys {sorted(keys)}"] if keys else []
        for k in {k for k in set(a) & set(b) if k.split(".")[-1] not in PARAMS}:
            diffs += compare(a[k], b[k], f"{where}.{k}")
        return diffs
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: lengths {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in compare(x, y, f"{where}[{i}]")]
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        same = a.shape == b.shape and a.dtype == b.dtype
        if same:
            same = np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
        if not same:
            return [f"{where}: arrays differ ({a.dtype}{a.shape} vs {b.dtype}{b.shape})"]
        return []
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def main(mode, path, only=None):
    results = {}
    for name, est, data, outputs, kw in cases():
        if only and not any(name.startswith(o) for o in only):
            continue
        try:
            results[name] = record(est, data, name, *outputs, **kw)
        except Exception as exc:  # a case that fails is recorded as its error
            print(f"{name}: {type(exc).__name__}: {exc}", flush=True)
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
    if mode == "record":  # cases named on the command line replace theirs in the file
        if only and os.path.exists(path):
            with open(path, "rb") as f:
                results = {**pickle.load(f), **results}
        with open(path, "wb") as f:
            pickle.dump(results, f)
        return 0
    with open(path, "rb") as f:
        golden = pickle.load(f)
    bad = 0
    for name, got in results.items():
        diffs = compare(golden[name], got, name) if name in golden else [f"{name}: no golden"]
        print(f"{'DIFF' if diffs else 'same'} {name}")
        for d in diffs[:10]:
            print("   ", d)
        bad += bool(diffs)
    print(f"{len(results) - bad} of {len(results)} cases identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:] or None))
