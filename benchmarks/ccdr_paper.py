"""Reproduce Section V of Raich, Costa, Damelin & Hero (CCDR) on satimage: Table I, Figs. 2–4.

Paper: ``shared/seeds/ccdr.txt``. Data: ``satimage.npz`` (Statlog Landsat, 36 features,
6 classes) with its standard split, 4435 training / 2000 test rows, as distributed (raw
0..255 intensities, no rescaling). The training set is smaller than the default
``subsample_size`` (5000), so S is all training rows and CCDR is the paper's exact solution.

Classifiers, as in the paper's Section V-A:

``linear``  least squares of the class indicators on [y, 1], argmax (the paper's eq.);
``knn``     a standard k-NN vote (scikit-learn's ``KNeighborsClassifier``), k over
            ``KNN_KS``; Table I reports the best k ("best case" as the paper does).

Training rows are embedded by CCDR's eigenvectors (= f(x_i, c_i)); test rows by the Nyström
extension with c = 0. (This is exactly ``CCDRClassifier(classifier=...)``; here the
embedding is computed once per CCDR setting and shared by the classifiers.)

Table I rows: no reduction, PCA (best dimension 1..36), CCDR at the paper's setting
(β = 0.5, m = 14, k = 4) and CCDR at the best point of the sweeps. Sweeps (Figs. 2–4): β at
m = 14, k = 4; m at β = 0.5, k = 4; the graph's k at β = 0.5, m = 14. Error bars are 80 %
binomial intervals of the test error (the paper shows 80 % confidence intervals).

Run from the repository root::

    python benchmarks/ccdr_paper.py             # ~3–5 min on 2 cores
    python benchmarks/ccdr_paper.py --quick     # smoke run
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

KNN_KS = (1, 3, 5, 7, 9, 11, 13, 15)
BETAS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
DIMS = tuple(range(1, 21))
GRAPH_KS = tuple(range(2, 13))
PAPER = {  # Table I and the text of Section V (test error, %)
    ("none", "linear"): 22.7,
    ("none", "knn"): 9.65,
    ("pca", "linear"): 23.0,
    ("pca", "knn"): 9.35,
    ("ccdr", "linear"): 8.95,
    ("ccdr", "knn"): 8.1,
}
Z80 = 1.2816


def load():
    from scalenc.io.inputs import data_dir

    d = np.load(data_dir() / "satimage.npz", allow_pickle=False)
    X = d["X"].astype(np.float64)
    return X[d["train_idx"]], d["y"][d["train_idx"]], X[d["test_idx"]], d["y"][d["test_idx"]]


def linear_error(Ftr, ytr, Fte, yte):
    """The paper's linear classifier: least squares of the indicators on [y, 1]."""
    K = ytr.max() + 1
    A = np.hstack([Ftr, np.ones((Ftr.shape[0], 1))])
    coef, *_ = np.linalg.lstsq(A, np.eye(K)[ytr], rcond=None)
    pred = (np.hstack([Fte, np.ones((Fte.shape[0], 1))]) @ coef).argmax(axis=1)
    return float(np.mean(pred != yte))


def knn_errors(Ftr, ytr, Fte, yte, ks=KNN_KS):
    from sklearn.neighbors import KNeighborsClassifier

    return {
        k: float(np.mean(KNeighborsClassifier(k).fit(Ftr, ytr).predict(Fte) != yte)) for k in ks
    }


def evaluate(Ftr, ytr, Fte, yte):
    knn = knn_errors(Ftr, ytr, Fte, yte)
    best_k = min(knn, key=knn.get)
    return {
        "linear": linear_error(Ftr, ytr, Fte, yte),
        "knn": knn[best_k],
        "knn_k": best_k,
        "knn_all": knn,
    }


def ccdr_point(Xtr, ytr, Xte, yte, *, beta, m, k):
    from scalenc import CCDR

    t0 = time.perf_counter()
    model = CCDR(n_components=m, beta=beta, n_neighbors=k).fit(Xtr, ytr)
    assert np.array_equal(model.subsample_indices_, np.arange(len(ytr)))  # S = all rows: exact
    Fte = model.transform(Xte)
    seconds = time.perf_counter() - t0
    out = evaluate(model.embedding_, ytr, Fte, yte)
    out.update(beta=beta, m=m, k=k, seconds=seconds, eigenvalues=model.eigenvalues_.tolist())
    return out


def _knn5(point):
    knn = point["knn_all"]
    return knn[5] if 5 in knn else knn["5"]  # int keys in memory, str after JSON


def interval(p, n):
    return Z80 * np.sqrt(p * (1 - p) / n)


def plot(points, key, xlabel, path, logx=False, paper=None, ymax=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = 2000
    x = [p[key] for p in points]
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name, style, label in (
        ("linear", "o:", "linear"),
        ("knn5", "D--", "k-NN (k = 5)"),
        ("knn", "s-", "k-NN (best k)"),
    ):
        err = np.array([_knn5(p) if name == "knn5" else p[name] for p in points])
        ax.errorbar(x, err, yerr=interval(err, n), fmt=style, capsize=2, label=label, ms=4)
    for value, label in paper or []:
        ax.axhline(value, color="grey", lw=0.8, ls="-.")
        ax.text(x[0], value, label, fontsize=7, va="bottom", color="grey")
    if logx:
        ax.set_xscale("log")
    if ymax is not None:
        ax.set_ylim(0.07, ymax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("P(error) on the 2000 test rows")
    ax.set_title(f"CCDR on satimage: error vs {xlabel} (80 % intervals)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few sweep points only")
    parser.add_argument("--out", default="/tmp/scalenc-ccdr-paper.json")
    parser.add_argument("--figdir", default="benchmarks/figures")
    parser.add_argument("--replot", action="store_true", help="redraw the figures from --out")
    args = parser.parse_args(argv)
    if args.replot:
        results = json.loads(Path(args.out).read_text())
        figures(results, Path(args.figdir))
        print(table(results))
        return
    betas, dims, gks = (BETAS, DIMS, GRAPH_KS) if not args.quick else ((0.1, 0.5), (5, 14), (4, 8))
    Xtr, ytr, Xte, yte = load()
    results = {}

    # Table I: no reduction and PCA
    results["none"] = evaluate(Xtr, ytr, Xte, yte)
    from sklearn.decomposition import PCA

    pca = []
    for d in range(1, Xtr.shape[1] + 1):
        p = PCA(d).fit(Xtr)
        r = evaluate(p.transform(Xtr), ytr, p.transform(Xte), yte)
        r["dim"] = d
        pca.append(r)
    results["pca_sweep"] = pca
    results["pca"] = {
        "linear": min(r["linear"] for r in pca),
        "linear_dim": min(pca, key=lambda r: r["linear"])["dim"],
        "knn": min(r["knn"] for r in pca),
        "knn_dim": min(pca, key=lambda r: r["knn"])["dim"],
        "knn_k": min(pca, key=lambda r: r["knn"])["knn_k"],
    }

    # CCDR at the paper's setting and the sweeps of Figs. 2–4
    results["ccdr_paper_setting"] = ccdr_point(Xtr, ytr, Xte, yte, beta=0.5, m=14, k=4)
    results["beta_sweep"] = [ccdr_point(Xtr, ytr, Xte, yte, beta=b, m=14, k=4) for b in betas]
    results["dim_sweep"] = [ccdr_point(Xtr, ytr, Xte, yte, beta=0.5, m=m, k=4) for m in dims]
    results["k_sweep"] = [ccdr_point(Xtr, ytr, Xte, yte, beta=0.5, m=14, k=k) for k in gks]
    every = results["beta_sweep"] + results["dim_sweep"] + results["k_sweep"]
    best_lin = min(every, key=lambda r: r["linear"])
    best_knn = min(every, key=lambda r: r["knn"])
    results["ccdr_best"] = {
        "linear": best_lin["linear"],
        "linear_at": {k: best_lin[k] for k in ("beta", "m", "k")},
        "knn": best_knn["knn"],
        "knn_at": {k: best_knn[k] for k in ("beta", "m", "k", "knn_k")},
    }

    # transductive variant: the test rows join the graph unlabeled (the paper's "brute
    # force" classification of Section IV-A, also its semi-supervised setting)
    from scalenc import CCDR

    Xall = np.vstack([Xtr, Xte])
    yall = np.r_[ytr, np.full(len(yte), -1)]
    model = CCDR(n_components=14, beta=0.5, n_neighbors=4, subsample_size=len(yall)).fit(Xall, yall)
    F = model.embedding_
    results["ccdr_transductive"] = evaluate(F[: len(ytr)], ytr, F[len(ytr) :], yte)

    # the end-to-end estimator at the paper's setting (same numbers, checked)
    from scalenc import CCDRClassifier

    e2e = {}
    for head in ("linear", "knn", "lda"):
        t0 = time.perf_counter()
        clf = CCDRClassifier(classifier=head, classifier_neighbors=5).fit(Xtr, ytr)
        e2e[head] = {"error": 1.0 - clf.score(Xte, yte), "seconds": time.perf_counter() - t0}
    results["ccdr_classifier"] = e2e

    Path(args.out).write_text(json.dumps(results, indent=1, default=float))
    figures(results, Path(args.figdir))
    print(table(results))


def figures(results, figdir):
    figdir.mkdir(parents=True, exist_ok=True)
    plot(
        results["beta_sweep"],
        "beta",
        "β",
        figdir / "ccdr_beta.png",
        logx=True,
        paper=[(0.086, "paper k-NN 0.086"), (0.09, "paper linear 0.09–0.095")],
    )
    plot(
        results["dim_sweep"],
        "m",
        "embedding dimension m",
        figdir / "ccdr_dim.png",
        paper=[(0.086, "paper k-NN min ≈ 0.086 at m = 12–14")],
        ymax=0.2,
    )
    plot(
        results["k_sweep"],
        "k",
        "graph k (k-NN of CCDR's W)",
        figdir / "ccdr_k.png",
        paper=[(0.086, "paper k-NN 0.086 at k = 4"), (0.092, "paper linear 0.092 at k = 3")],
    )


def table(r):
    ps = r["ccdr_paper_setting"]
    rows = [
        (
            "No dim. reduction",
            r["none"]["linear"],
            r["none"]["knn"],
            f"k-NN k = {r['none']['knn_k']}",
            "none",
        ),
        (
            "PCA (best dim.)",
            r["pca"]["linear"],
            r["pca"]["knn"],
            f"linear d = {r['pca']['linear_dim']}; k-NN d = {r['pca']['knn_dim']}, "
            f"k = {r['pca']['knn_k']}",
            "pca",
        ),
        (
            "CCDR, paper's setting β=0.5, m=14, k=4",
            ps["linear"],
            ps["knn"],
            f"k-NN k = {ps['knn_k']}",
            "ccdr",
        ),
        (
            "CCDR, best over the sweeps",
            r["ccdr_best"]["linear"],
            r["ccdr_best"]["knn"],
            f"linear at {r['ccdr_best']['linear_at']}; k-NN at {r['ccdr_best']['knn_at']}",
            "ccdr",
        ),
        (
            "CCDR transductive (test rows unlabeled in the graph), β=0.5, m=14, k=4",
            r["ccdr_transductive"]["linear"],
            r["ccdr_transductive"]["knn"],
            f"k-NN k = {r['ccdr_transductive']['knn_k']}",
            "ccdr",
        ),
    ]
    out = [
        "| method | linear (ours) | linear (paper) | k-NN (ours) | k-NN (paper) | tuning |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, lin, knn, tune, key in rows:
        out.append(
            f"| {name} | {100 * lin:.2f} % | {PAPER[(key, 'linear')]} % | "
            f"{100 * knn:.2f} % | {PAPER[(key, 'knn')]} % | {tune} |"
        )
    e2e = r["ccdr_classifier"]
    out.append("")
    out.append(
        "CCDRClassifier end to end at the paper's setting (k-NN k = 5): "
        + ", ".join(f"{h} {100 * v['error']:.2f} % ({v['seconds']:.1f} s)" for h, v in e2e.items())
    )
    return "\n".join(out)


if __name__ == "__main__":
    main()
