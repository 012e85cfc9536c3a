"""The encoder with a graph on cora and citeseer: the graph alone, the features alone, both.

Issue 38's accuracy check. Each dataset's citation edges (``edges``, undirected, each
listed once) and bag-of-words features, one stratified 5-fold CV (seed 0): in each fold
the test nodes' labels are hidden (−1) and every node is in the fit — the transductive
setting of GraphEmd — and the accuracy is over the test nodes. Methods:

``graph``        ``EncoderClassifier().fit(None, y, graph=edges)``: GraphEmd's embedding,
                 row-normalised (the defaults), LDA
``features``     ``EncoderClassifier(kernels=("linear",)).fit(X, y)`` (Shen's linear
                 encoder; the hidden nodes do not enter any statistic)
``features-3``   ``EncoderClassifier().fit(X, y)``: the paper's three kernels
``fused``        ``EncoderClassifier(kernels=("linear",)).fit(X, y, graph=edges)``:
                 [X Uᵀ | A W], GraphEmd's fusion (``graph_fusion="concat"``, the default)
``chosen``       ``graph_fusion="choose"``: the graph as one more kernel beside the linear
                 one, chosen by the paper's training cross-entropy rule

and, as a check, ``oracle-*``: the same embeddings in NumPy/SciPy with scikit-learn's
LDA (the graph embedding from its formula Z = (A + Aᵀ) W, rows scaled to unit norm).

Run from the repository root::

    python benchmarks/graph_encoder.py [--datasets cora citeseer] [--seed 0] [--out r.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

METHODS = ("graph", "features", "features-3", "fused", "chosen")


def load(name: str):
    from scalenc.io.inputs import data_dir

    data = np.load(data_dir() / f"{name}.npz")
    return data["X"], data["y"], data["edges"].T  # edges as (s, 2)


def oracle_embeddings(X, y_fit, edges):
    """NumPy/SciPy: Z = X Uᵀ and GraphEmd's row-normalised Z = (A + Aᵀ) W."""
    import scipy.sparse as sp

    n, K = y_fit.size, y_fit.max() + 1
    lab = y_fit >= 0
    W = np.zeros((n, K))
    W[lab, y_fit[lab]] = 1 / np.bincount(y_fit[lab])[y_fit[lab]]
    A = sp.coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n, n)).tocsr()
    Zg = np.asarray((A + A.T) @ W)
    norm = np.linalg.norm(Zg, axis=1, keepdims=True)
    Zg = np.divide(Zg, norm, out=np.zeros_like(Zg), where=norm > 0)
    Zx = X.astype(np.float64) @ (W.T @ X.astype(np.float64)).T
    return {"oracle-graph": Zg, "oracle-features": Zx, "oracle-fused": np.hstack([Zx, Zg])}


def run_method(method, X, y_fit, edges):
    from scalenc import EncoderClassifier

    if method == "graph":
        model = EncoderClassifier().fit(None, y_fit, graph=edges)
        return model.predict(None, graph=edges), model
    if method == "features":
        model = EncoderClassifier(kernels=("linear",)).fit(X, y_fit)
        return model.predict(X), model
    if method == "features-3":
        model = EncoderClassifier().fit(X, y_fit)
        return model.predict(X), model
    fusion = "concat" if method == "fused" else "choose"
    model = EncoderClassifier(kernels=("linear",), graph_fusion=fusion).fit(X, y_fit, graph=edges)
    return model.predict(X, graph=edges), model


def cross_validate(name, *, seed, n_folds=5):
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.model_selection import StratifiedKFold

    X, y, edges = load(name)
    scores = {m: [] for m in METHODS + ("oracle-graph", "oracle-features", "oracle-fused")}
    times = {m: [] for m in METHODS}
    chosen = []
    folds = StratifiedKFold(n_folds, shuffle=True, random_state=seed)
    for train, test in folds.split(X, y):
        y_fit = y.copy()
        y_fit[test] = -1
        for method in METHODS:
            start = time.perf_counter()
            pred, model = run_method(method, X, y_fit, edges)
            times[method].append(time.perf_counter() - start)
            scores[method].append(float(np.mean(np.asarray(pred)[test] == y[test])))
            if method == "chosen":
                chosen.append(model.embedding_)
        for key, Z in oracle_embeddings(X, y_fit, edges).items():
            lda = LinearDiscriminantAnalysis(tol=1e-7).fit(Z[train], y[train])
            scores[key].append(float(np.mean(lda.predict(Z[test]) == y[test])))
    return {
        "dataset": name,
        "nodes": int(y.size),
        "edges": int(len(edges)),
        "accuracy": {m: [float(np.mean(v)), float(np.std(v))] for m, v in scores.items()},
        "seconds": {m: [float(np.mean(v)), float(np.std(v))] for m, v in times.items()},
        "chosen": chosen,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["cora", "citeseer"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    results = {"seed": args.seed, "load": os.getloadavg(), "machine": platform.platform()}
    rows = []
    with threadpool_limits(1):
        for name in args.datasets:
            rows.append(cross_validate(name, seed=args.seed))
    results["results"] = rows
    print(f"5-fold CV, seed {args.seed}, test labels hidden; load {os.getloadavg()[0]:.1f}")
    print("accuracy % (mean ± std over folds), fit + predict seconds")
    for row in rows:
        print(f"\n{row['dataset']} ({row['nodes']} nodes, {row['edges']} edges)")
        for method, (mean, std) in row["accuracy"].items():
            secs = row["seconds"].get(method)
            timing = f"   {secs[0]:.2f} s" if secs else ""
            print(f"  {method:16s} {100 * mean:5.1f} ± {100 * std:3.1f}{timing}")
        print(f"  chosen by cross-entropy: {row['chosen']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
