"""The report's figures, drawn with matplotlib's object-oriented API (the optional ``plot``
extra; :func:`require_matplotlib` says how to install it) and returned as base64 PNG:
the encoder's cross-entropy per kernel; nRBFN's class counts, cross-validation curve over
λ and confidences; CCDR's eigenvalues and a 2-D scatter of the embedding coloured by
class; the confusion matrix of an evaluation.
"""

from __future__ import annotations

import base64
import io

import numpy as np

from scalenc.exceptions import MissingPlotDependency
from scalenc.math.labels import UNLABELED, unlabeled_mask

__all__ = [
    "INSTALL_HINT",
    "require_matplotlib",
    "MissingPlotDependency",
    "figures",
]


INSTALL_HINT = 'pip install "scalenc[plot]"'


def require_matplotlib():
    """Import matplotlib's object-oriented API, or say how to install it.

    Returns
    -------
    Figure, FigureCanvasAgg
        ``matplotlib.figure.Figure`` and the Agg canvas (no display, no global state).

    Raises
    ------
    MissingPlotDependency
        matplotlib is not installed; the message gives ``pip install "scalenc[plot]"``.

    Examples
    --------
    >>> from scalenc.report import require_matplotlib
    >>> Figure, FigureCanvas = require_matplotlib()
    >>> fig = Figure(figsize=(2, 1))
    >>> canvas = FigureCanvas(fig)
    >>> fig.subplots().plot([0, 1], [1, 0])[0].get_xdata().tolist()
    [0, 1]
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingPlotDependency(
            f"Reports need matplotlib, which is not installed. Install it with: {INSTALL_HINT}"
        ) from None
    return Figure, FigureCanvasAgg


def figures(estimator, *, evaluation=None, embedding=None, embedding_labels=None) -> list:
    """The report's figures of a fitted estimator, as (title, base64 PNG) pairs: the
    encoder's cross-entropy per kernel (with its kind where not exact) and class sizes;
    nRBFN's soft-KNN confidences and cross-validation curve; CCDR's eigenvalues and a
    2-D scatter of ``embedding`` coloured by ``embedding_labels`` (default: the
    reference subsample's); the confusion matrix of ``evaluation``
    (:func:`scalenc.report.evaluate`'s result). A figure the model has nothing for is
    left out.

    Raises
    ------
    MissingPlotDependency
        matplotlib is not installed (``pip install "scalenc[plot]"``).

    Examples
    --------
    >>> from sklearn.datasets import load_wine
    >>> from scalenc import EncoderClassifier
    >>> from scalenc.report.plots import figures
    >>> X, y = load_wine(return_X_y=True)
    >>> [title for title, png in figures(EncoderClassifier().fit(X, y))]
    ['Cross-entropy per kernel', 'Class sizes']
    """
    Figure, canvas = require_matplotlib()
    est, plots = estimator, []
    if hasattr(est, "cross_entropy_"):
        plots += [_plot_cross_entropy(est, Figure, canvas), _plot_counts(est, Figure, canvas)]
    if hasattr(est, "spectral_risk_"):
        plots += [_plot_confidence(est, Figure, canvas), _plot_cv(est, Figure, canvas)]
    if hasattr(_ccdr_part(est), "eigenvalues_"):
        plots += [
            _plot_eigenvalues(est, Figure, canvas),
            _plot_scatter(est, embedding, embedding_labels, Figure, canvas),
        ]
    if evaluation is not None:
        plots.append(_plot_confusion(evaluation, Figure, canvas))
    return [plot for plot in plots if plot is not None]


def _png(fig, canvas_cls) -> str:
    canvas_cls(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(Figure, size=(6.0, 3.6)):
    fig = Figure(figsize=size)
    return fig, fig.add_subplot(1, 1, 1)


def _plot_cross_entropy(est, Figure, canvas):
    ce = np.asarray(getattr(est, "cross_entropy_", []), dtype=float)
    kernels = [repr(k) for k in getattr(est, "kernels_", [])]
    if ce.size == 0 or np.isnan(ce).all():
        return None
    fig, ax = _figure(Figure)
    colours = ["#d62728" if i == est.kernel_index_ else "#1f77b4" for i in range(ce.size)]
    bars = ax.bar(range(ce.size), ce, color=colours)
    positive = ce[np.isfinite(ce) & (ce > 0)]
    if positive.size and positive.max() / positive.min() > 100:
        ax.set_yscale("log")
    kinds = getattr(est, "cross_entropy_kind_", ["exact"] * ce.size)  # not in older files
    labels = [f"{v:.3g}" + ("" if k == "exact" else f" ({k})") for v, k in zip(ce, kinds)]
    ax.bar_label(bars, labels=labels, fontsize=8)
    ax.axhline(
        (1 - est.min_improvement) * ce[0],
        color="grey",
        ls="--",
        lw=1,
        label=f"switch threshold ({1 - est.min_improvement:.0%} of the benchmark)",
    )
    ax.set_xticks(range(ce.size), kernels, rotation=20)
    ax.set_ylabel("training cross-entropy c_m")
    ax.set_title(f"Cross-entropy per kernel (chosen: {kernels[est.kernel_index_]}, red)")
    ax.legend(fontsize=8)
    return "Cross-entropy per kernel", _png(fig, canvas)


def _plot_counts(est, Figure, canvas):
    counts = getattr(est, "class_counts_", None)
    if counts is None:
        return None
    fig, ax = _figure(Figure)
    ax.bar([str(c) for c in est.classes_], counts, color="#1f77b4")
    ax.set_xlabel("class")
    ax.set_ylabel("labeled training rows")
    ax.set_title("Class sizes n_k")
    return "Class sizes", _png(fig, canvas)


def _alpha_grid(est):
    grid = getattr(est, "_alpha_grid", None)
    try:
        return np.asarray(grid(), dtype=float) if callable(grid) else None
    except (TypeError, ValueError):
        return None


def _plot_cv(est, Figure, canvas):
    cv = getattr(est, "cv_error_", None)
    grid = _alpha_grid(est)
    if cv is None or grid is None or grid.size != np.size(cv):
        return None
    fig, ax = _figure(Figure)
    ax.semilogx(grid, cv, "o-")
    ax.axvline(est.alpha_, color="#d62728", ls="--", lw=1, label=f"chosen λ = {est.alpha_:g}")
    ax.set_xlabel("λ (relative to ‖W̃‖²_F)")
    ax.set_ylabel("held-out error rate")
    ax.set_title(f"{est.cv}-fold cross-validation over λ")
    ax.legend(fontsize=8)
    return "Cross-validation curve over λ", _png(fig, canvas)


def _plot_confidence(est, Figure, canvas):
    conf = getattr(est, "confidence_", None)
    if conf is None or np.size(conf) == 0:
        return None
    fig, ax = _figure(Figure)
    ax.hist(np.asarray(conf, dtype=float), bins=30, color="#1f77b4")
    ax.axvline(
        est.confidence_threshold,
        color="#d62728",
        ls="--",
        lw=1,
        label=f"threshold t = {est.confidence_threshold:g}",
    )
    ax.set_xlabel("soft-KNN confidence T of the candidates")
    ax.set_ylabel("candidates")
    ax.set_title(f"Basis selection: r = {len(getattr(est, 'basis_indices_', []))} basis rows")
    ax.legend(fontsize=8)
    return "Soft-KNN confidence", _png(fig, canvas)


def _ccdr_part(est):
    return getattr(est, "ccdr_", est)


def _plot_eigenvalues(est, Figure, canvas):
    ev = getattr(_ccdr_part(est), "eigenvalues_", None)
    if ev is None:
        return None
    ev = np.asarray(ev, dtype=float)
    fig, ax = _figure(Figure)
    ax.plot(np.arange(2, ev.size + 2), ev, "o-")
    ax.set_xlabel("eigenvector index i (λ_1 = 0 is the trivial one)")
    ax.set_ylabel("λ_i")
    ax.set_title("Generalised eigenvalues of the CCDR graph (reference subsample)")
    return "CCDR eigenvalues", _png(fig, canvas)


def _plot_scatter(est, embedding, labels, Figure, canvas):
    ccdr = _ccdr_part(est)
    if embedding is None:
        embedding = getattr(ccdr, "embedding_", None)
        sub = getattr(ccdr, "solutions_", None)
        labels = None
        if sub:
            codes = np.asarray(sub[0].codes)
            labels = np.where(
                codes >= 0, np.asarray(ccdr.classes_, dtype=object)[np.maximum(codes, 0)], None
            )
        source = "the reference subsample"
    else:
        source = f"a sample of {embedding.shape[0]} rows of the data"
    if embedding is None or np.ndim(embedding) != 2 or embedding.shape[1] < 1:
        return None
    Z = np.asarray(embedding, dtype=float)
    if Z.shape[1] == 1:
        Z = np.hstack([Z, np.zeros_like(Z)])
    fig, ax = _figure(Figure, (6.0, 5.0))
    classes = list(getattr(ccdr, "classes_", []))
    if labels is not None:
        labels = np.asarray(labels, dtype=object)
        mask = unlabeled_mask(labels, getattr(ccdr, "unlabeled", UNLABELED))
        if mask.any():
            ax.scatter(Z[mask, 0], Z[mask, 1], s=6, c="lightgrey", label="unlabeled")
        for c in classes:
            sel = (labels == c) & ~mask
            if sel.any():
                ax.scatter(Z[sel, 0], Z[sel, 1], s=10, alpha=0.6, label=f"{c} ({sel.sum()} rows)")
    else:
        ax.scatter(Z[:, 0], Z[:, 1], s=6)
    centers = getattr(ccdr, "centers_", None)
    if centers is not None and np.shape(centers)[1] >= 2:
        ax.scatter(
            centers[:, 0], centers[:, 1], marker="X", s=80, c="black", label="class centres z_k"
        )
    ax.set_xlabel("embedding coordinate 1")
    ax.set_ylabel("embedding coordinate 2")
    ax.set_title(f"CCDR embedding of {source}")
    ax.legend(fontsize=7, markerscale=2)
    return "CCDR embedding (2-D)", _png(fig, canvas)


def _plot_confusion(evaluation, Figure, canvas):
    matrix = np.asarray(evaluation["confusion_matrix"])
    names = [str(c) for c in evaluation["classes"]]
    fig, ax = _figure(Figure, (5.0, 4.4))
    im = ax.imshow(matrix, cmap="Blues")
    fig.colorbar(im, ax=ax)
    ax.set_xticks(range(len(names)), names, rotation=45)
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    if matrix.size <= 400:
        top = matrix.max() if matrix.size else 0
        for (i, j), v in np.ndenumerate(matrix):
            colour = "white" if v > top / 2 else "black"
            ax.text(j, i, str(v), ha="center", va="center", fontsize=7, color=colour)
    ax.set_title(f"Confusion matrix (accuracy {evaluation['accuracy']:.4f})")
    return "Confusion matrix", _png(fig, canvas)
