"""Evaluating a fitted model on data, and a self-contained HTML report about it.

* :func:`evaluate` — accuracy, per-class precision/recall/F1, the confusion matrix: one
  pass over X, as a tree sum of per-block confusion counts (nothing n-sized reaches the
  client).
* :func:`describe_model` — the small fitted facts of any scalenc estimator as JSON values.
* :func:`describe_data` — one line naming the data a report evaluated: its path or URL as
  given (credentials left out), or the kind of in-memory array, with its shape.
* :func:`build_report` — one HTML page naming its model and data, with the model's
  parameters and diagnostics and PNG plots embedded as base64 (matplotlib, the optional
  ``plot`` extra): the encoder's cross-entropy per kernel; nRBFN's basis size, σ, fitting
  error, spectral risk and the cross-validation curve over λ; CCDR's eigenvalues and a 2-D
  scatter of the embedding coloured by class; with labelled data, the confusion matrix.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import time
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from scalenc.engine import passes
from scalenc.engine.cluster import compute
from scalenc.exceptions import MissingPlotDependency
from scalenc.math.labels import UNLABELED, unlabeled_mask

__all__ = [
    "MissingPlotDependency",
    "require_matplotlib",
    "evaluate",
    "describe_model",
    "describe_data",
    "jsonable",
    "sample_rows",
    "build_report",
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


# --- JSON-safe summaries ---------------------------------------------------------------


def jsonable(value, *, max_items: int = 50):
    """A JSON value for small results: NaN → None, arrays ≤ ``max_items`` → lists.

    Larger arrays become their shape and dtype, longer lists their length, and other
    objects their ``repr`` (up to 80 characters).

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc.report import jsonable
    >>> jsonable({"alpha": np.float32(0.5), "classes": np.arange(3), "risk": float("nan")})
    {'alpha': 0.5, 'classes': [0, 1, 2], 'risk': None}
    >>> jsonable(np.zeros((100, 2)))
    {'shape': [100, 2], 'dtype': 'float64'}
    """
    if isinstance(value, np.ndarray):
        if value.size > max_items:
            return {"shape": list(value.shape), "dtype": str(value.dtype)}
        return [jsonable(v) for v in value.tolist()] if value.ndim else jsonable(value.item())
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if len(value) > max_items:
            return {"length": len(value)}
        return [jsonable(v) for v in value]
    text = repr(value)
    return text if len(text) <= 80 else f"<{type(value).__name__}>"


def describe_model(est) -> dict:
    """The small public fitted attributes of an estimator, JSON-ready (arrays summarised).

    The encoder's ``cross_entropy_`` is keyed by kernel and kept as the paper's sum c_m
    over the labeled training rows; ``cross_entropy_per_row`` adds c_m divided by those
    rows (``cross_entropy_rows``, the sum of ``class_counts_``), comparable across data
    sizes and with log K, the cross-entropy of guessing.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from scalenc import LRClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> model = LRClassifier().fit(X, y)
    >>> from scalenc.report import describe_model
    >>> facts = describe_model(model)
    >>> facts["estimator"], facts["classes_"], facts["n_passes_"]
    ('LRClassifier', [0, 1, 2], 1)
    """
    out = {"estimator": type(est).__name__}
    for key, value in sorted(vars(est).items()):
        if not key.endswith("_") or key.startswith("_"):
            continue
        if type(value).__module__.startswith("scalenc.") and hasattr(value, "get_params"):
            out[key] = describe_model(value)
        elif isinstance(value, np.ndarray) and value.size > 20:
            out[key] = {"shape": list(value.shape), "dtype": str(value.dtype)}
        elif isinstance(value, list) and len(value) > 20:
            out[key] = {"length": len(value)}
        else:
            out[key] = jsonable(value, max_items=20)
    if "kernels_" in out and hasattr(est, "cross_entropy_"):
        out["cross_entropy_"] = {
            repr(k): jsonable(c) for k, c in zip(est.kernels_, est.cross_entropy_)
        }
        rows = int(np.sum(getattr(est, "class_counts_", 0)))
        out["cross_entropy_rows"] = rows
        out["cross_entropy_per_row"] = {
            repr(k): jsonable(c / rows) if rows else None
            for k, c in zip(est.kernels_, est.cross_entropy_)
        }
    return out


# --- what a report is about --------------------------------------------------------------


def _location(path) -> str:
    """A path or URL as given, less what may be a secret: a URL's user and password, its
    query (signed URLs carry their token there) and its fragment. Text after the first
    space (a description's shape) is kept; applied twice, it changes nothing more."""
    text = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    head, space, rest = text.partition(" ")
    if "://" not in head:
        return text
    return _url(head) + space + rest


def _url(text: str) -> str:
    try:
        parts = urlsplit(text)
        host = parts.netloc.rpartition("@")[2]
        netloc = f"***@{host}" if "@" in parts.netloc else parts.netloc
        query = "***" if parts.query else ""
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    except ValueError:
        return text.partition("://")[0] + "://***"


def _plural(count, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def describe_data(X, source=None) -> str:
    """One line naming the data a report is about.

    Parameters
    ----------
    X : array-like or None
        The data: NumPy, Dask, pandas, or anything with ``shape``.
    source : str or path-like, optional
        Where it was read from, as the user gave it. A URL is shown without its user,
        password, query and fragment; storage options are never passed here.

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from scalenc.report import describe_data
    >>> describe_data(np.zeros((1000, 20)))
    'NumPy array 1000 × 20'
    >>> describe_data(da.zeros((1000, 20), chunks=(250, 20)))
    'Dask array 1000 × 20 (4 row blocks)'
    >>> describe_data(da.zeros((600, 5), chunks=(600, 5)), "s3://key:secret@bucket/d.zarr?x=1")
    's3://***@bucket/d.zarr?*** (600 rows × 5 features, 1 row block)'
    """
    shape = tuple(getattr(X, "shape", ()) or ())
    rows = shape[0] if shape and isinstance(shape[0], (int, np.integer)) else "?"
    features = shape[1] if len(shape) > 1 else 1
    chunks = getattr(X, "chunks", None)
    blocks = len(chunks[0]) if isinstance(chunks, tuple) and chunks else None
    if source is not None:
        size = f"{rows} rows × {_plural(features, 'feature')}" if shape else ""
        size += f", {_plural(blocks, 'row block')}" if blocks and size else ""
        return f"{_location(source)} ({size})" if size else _location(source)
    module = type(X).__module__.partition(".")[0]
    kinds = {
        "numpy": "NumPy",
        "dask": "Dask",
        "dask_expr": "Dask",
        "pandas": "pandas",
        "zarr": "Zarr",
    }
    name = {"ndarray": "array", "Array": "array"}.get(type(X).__name__, type(X).__name__)
    kind = f"{kinds.get(module, module)} {name}"
    if not shape:
        return kind
    text = f"{kind} {rows} × {features}"
    return text + (f" ({_plural(blocks, 'row block')})" if blocks else "")


# --- evaluation ------------------------------------------------------------------------


def evaluate(estimator, X, y, *, split_every: int = 8) -> dict:
    """Accuracy, per-class report and confusion matrix of a classifier on (X, y).

    Parameters
    ----------
    estimator : fitted classifier with ``predict`` and ``classes_``
    X : Dask array (n, p), y : Dask array (n,) with X's row chunks.
        Unlabeled rows (−1/None/NaN) are left out; a label that is not one of the model's
        classes counts as an error (``unknown_label_rows``).

    Returns
    -------
    dict with ``accuracy``, ``balanced_accuracy``, ``per_class`` (precision, recall, F1,
    support per class), ``macro_avg``, ``weighted_avg``, ``confusion_matrix`` (rows:
    true class, columns: predicted), ``labeled_rows``, ``unlabeled_rows``,
    ``unknown_label_rows``, ``seconds``, ``rows_per_second`` and ``passes`` (1).

    Notes
    -----
    One pass over X: the predictions are a block map, each block is reduced to K×K
    counts, and the counts are summed in a tree of fan-in ``split_every``.

    Examples
    --------
    >>> import dask.array as da
    >>> from sklearn.datasets import load_iris
    >>> from scalenc import LRClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> model = LRClassifier().fit(X, y)
    >>> from scalenc.report import evaluate
    >>> result = evaluate(model, da.from_array(X, chunks=50), da.from_array(y, chunks=50))
    >>> result["accuracy"] == model.score(X, y), result["passes"]
    (True, 1)
    >>> result["confusion_matrix"][0]  # true class 0, by predicted class
    [50, 0, 0]
    """
    classes = np.asarray(estimator.classes_)
    pred = estimator.predict(X)
    t0 = time.perf_counter()
    marker = getattr(estimator, "unlabeled", UNLABELED)
    (result,) = compute(
        passes.confusion_pass(pred, y, classes, marker=marker, split_every=split_every)
    )
    seconds = time.perf_counter() - t0
    matrix, counts, other = result
    return confusion_summary(
        matrix,
        classes,
        unknown=int(counts[0]),
        unlabeled=int(counts[1]),
        unknown_predicted=other,
        seconds=seconds,
        rows=int(X.shape[0]),
    )


def confusion_summary(
    matrix, classes, *, unknown=0, unlabeled=0, unknown_predicted=None, seconds=None, rows=None
) -> dict:
    """Scores from a K×K confusion matrix (rows true, columns predicted).

    The keys are :func:`evaluate`'s; ``unknown`` counts labeled rows whose label is not a
    class (errors), ``unknown_predicted`` (K,) the predictions of those rows.

    Examples
    --------
    >>> from scalenc.report import confusion_summary
    >>> summary = confusion_summary([[5, 1], [0, 4]], ["cat", "dog"])
    >>> summary["accuracy"], summary["per_class"]["dog"]["precision"]
    (0.9, 0.8)
    >>> round(summary["balanced_accuracy"], 4)
    0.9167
    """
    matrix = np.asarray(matrix, dtype=np.int64)
    support = matrix.sum(axis=1)
    predicted = matrix.sum(axis=0) + (0 if unknown_predicted is None else unknown_predicted)
    tp = np.diag(matrix)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted > 0, tp / predicted, 0.0)
        recall = np.where(support > 0, tp / support, 0.0)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    labeled = int(support.sum()) + unknown
    per_class = {
        str(c): {
            "precision": float(precision[i]),
            "recall": float(recall[i]),
            "f1": float(f1[i]),
            "support": int(support[i]),
        }
        for i, c in enumerate(np.asarray(classes).tolist())
    }
    weights = support / support.sum() if support.sum() else np.zeros_like(support, dtype=float)
    present = support > 0
    out = {
        "accuracy": float(tp.sum() / labeled) if labeled else None,
        "balanced_accuracy": float(recall[present].mean()) if present.any() else None,
        "per_class": per_class,
        "macro_avg": {
            "precision": float(precision.mean()),
            "recall": float(recall.mean()),
            "f1": float(f1.mean()),
        },
        "weighted_avg": {
            "precision": float(weights @ precision),
            "recall": float(weights @ recall),
            "f1": float(weights @ f1),
        },
        "classes": jsonable(np.asarray(classes), max_items=10**6),
        "confusion_matrix": matrix.tolist(),
        "labeled_rows": labeled,
        "unlabeled_rows": unlabeled,
        "unknown_label_rows": unknown,
        "passes": 1,
    }
    if seconds is not None:
        out["seconds"] = round(seconds, 4)
        if rows:
            out["rows_per_second"] = round(rows / seconds, 1) if seconds > 0 else None
    return out


def sample_rows(X, y=None, *, n: int = 2000, random_state: int = 0):
    """A uniform sample of at most ``n`` rows of (X, y) as NumPy arrays (reads the blocks
    the sampled rows fall in).

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from scalenc.report import sample_rows
    >>> X = da.from_array(np.arange(200.0).reshape(100, 2), chunks=(25, 2))
    >>> y = da.from_array(np.arange(100) % 3, chunks=25)
    >>> xs, ys = sample_rows(X, y, n=5, random_state=0)
    >>> xs.shape, ys.shape
    ((5, 2), (5,))
    >>> bool((ys == (xs[:, 0] // 2) % 3).all())  # rows and labels stay paired
    True
    """
    total = X.shape[0]
    rng = np.random.default_rng(random_state)
    idx = np.sort(rng.choice(total, size=min(n, total), replace=False))
    if y is None:
        (xs,) = compute(X[idx])
        return np.asarray(xs), None
    xs, ys = compute(X[idx], y[idx])
    return np.asarray(xs), np.asarray(ys)


# --- plots -----------------------------------------------------------------------------


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
    ax.bar_label(bars, labels=[f"{v:.3g}" for v in ce], fontsize=8)
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
            ax.text(
                j,
                i,
                str(v),
                ha="center",
                va="center",
                fontsize=7,
                color="white" if v > top / 2 else "black",
            )
    ax.set_title(f"Confusion matrix (accuracy {evaluation['accuracy']:.4f})")
    return "Confusion matrix", _png(fig, canvas)


# --- HTML ------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:60em;
color:#222}h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;
margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:.25em .6em;
text-align:left;font-size:.9em}th{background:#f4f4f4}figure{margin:1em 0}
figcaption{font-size:.9em;color:#555}img{max-width:100%}code{font-size:.9em}
.note{color:#666;font-size:.9em}
"""


def _table(rows, header=None) -> str:
    out = ["<table>"]
    if header:
        out.append("<tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in header) + "</tr>")
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _figure_html(title: str, png: str) -> str:
    return (
        f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{png}">'
        f"<figcaption>{html.escape(title)}</figcaption></figure>"
    )


def _subject(estimator, meta: dict, model, data, used: bool) -> str:
    """The header's two lines: which model, on which data."""
    name = type(estimator).__name__
    where = f"<code>{html.escape(_location(model))}</code>, " if model is not None else ""
    facts = [name if model is not None else f"{name} in memory (no model file named)"]
    if meta.get("created"):
        facts.append(f"saved {meta['created']}")
    version = (meta.get("versions") or {}).get("scalenc")
    if version:
        facts.append(f"scalenc {version}")
    if data is None:
        about = (
            "not named (pass data= to build_report)"
            if used
            else "none: the model's fitted diagnostics only"
        )
    else:
        named = data if isinstance(data, (str, os.PathLike)) else describe_data(data)
        about = html.escape(_location(named))
        if not used:
            about += " (not used: no labels to score, no embedding to plot)"
    return (
        f'<p class="subject"><b>Model:</b> {where}{html.escape(", ".join(facts))}<br>'
        f"<b>Data:</b> {about}</p>"
    )


def build_report(
    estimator,
    *,
    metadata: dict | None = None,
    evaluation: dict | None = None,
    embedding=None,
    embedding_labels=None,
    title: str | None = None,
    data=None,
    model=None,
) -> str:
    """A self-contained HTML page about a fitted model (PNG plots embedded as base64).

    Its header names the model (file, type, when it was saved and by which scalenc) and
    the data it evaluated.

    Parameters
    ----------
    estimator : fitted scalenc estimator
    metadata : dict, optional
        The model file's ``model.json`` (versions, creation time, schema).
    data : str or array-like, optional
        The data ``evaluation`` and ``embedding`` come from: a description (a str, such as
        :func:`describe_data`'s, or a path or URL, shown without credentials) or the
        array itself, described by :func:`describe_data` (``"NumPy array 1000 × 20"``).
        Default: the page says that no data was named.
    model : str or path-like, optional
        The model file's path or URL (shown without credentials); default: the
        estimator is described as in memory.
    evaluation : dict, optional
        :func:`evaluate`'s result on labelled data: adds the scores and confusion matrix.
    embedding, embedding_labels : arrays, optional
        CCDR: the embedding of a sample of rows and their labels, for the scatter plot
        (default: the reference subsample's embedding stored in the model).

    Raises
    ------
    MissingPlotDependency
        matplotlib is not installed (``pip install "scalenc[plot]"``).

    Examples
    --------
    >>> import os, tempfile
    >>> import dask.array as da
    >>> from sklearn.datasets import load_iris
    >>> from scalenc import LRClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> model = LRClassifier().fit(X, y)
    >>> from scalenc.report import build_report, evaluate
    >>> scores = evaluate(model, da.from_array(X), da.from_array(y))
    >>> page = build_report(model, evaluation=scores, title="Iris", data=X)
    >>> page.startswith("<!DOCTYPE html>"), "<h2>Evaluation on data</h2>" in page
    (True, True)
    >>> "NumPy array 150 × 4" in page
    True
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "report.html")
    ...     with open(path, "w", encoding="utf-8") as fh:
    ...         _ = fh.write(page)
    ...     os.path.getsize(path) > 10_000  # the confusion matrix plot is embedded
    True
    """
    Figure, canvas = require_matplotlib()
    name = type(estimator).__name__
    parts = [f"<h1>{html.escape(title or f'scalenc model report: {name}')}</h1>"]
    meta = metadata or {}
    used = evaluation is not None or embedding is not None
    parts.append(_subject(estimator, meta, model, data, used))
    rows = [("estimator", meta.get("estimator", name))]
    if model is not None:
        rows.insert(0, ("model file", _location(model)))
    for key in ("created", "schema_version"):
        if key in meta:
            rows.append((key, meta[key]))
    for key, value in meta.get("versions", {}).items():
        rows.append((f"{key} version", value))
    parts += ["<h2>Model</h2>", _table(rows)]
    params = estimator.get_params(deep=False)
    parts += [
        "<h2>Parameters</h2>",
        _table([(k, jsonable(v)) for k, v in sorted(params.items())], ["parameter", "value"]),
    ]
    facts = describe_model(estimator)
    facts.pop("estimator", None)
    parts += [
        "<h2>Fitted model</h2>",
        _table([(k, v) for k, v in facts.items()], ["attribute", "value"]),
    ]
    plots = []
    if hasattr(estimator, "cross_entropy_"):
        plots += [
            _plot_cross_entropy(estimator, Figure, canvas),
            _plot_counts(estimator, Figure, canvas),
        ]
        if np.isnan(np.asarray(estimator.cross_entropy_, dtype=float)).all():
            parts.append(
                '<p class="note">One kernel was given, so no cross-entropy was computed '
                "(no choice to make and no pass spent on it).</p>"
            )
    if hasattr(estimator, "spectral_risk_"):
        diag = [
            (k, getattr(estimator, k))
            for k in (
                "basis_fraction_",
                "sigma_",
                "alpha_",
                "fitting_error_",
                "spectral_risk_",
                "rank_",
            )
            if hasattr(estimator, k)
        ]
        if hasattr(estimator, "basis_indices_"):
            diag.insert(0, ("basis size r", len(estimator.basis_indices_)))
        parts += [
            "<h2>Diagnostics</h2>",
            _table([(k, jsonable(v)) for k, v in diag], ["quantity", "value"]),
        ]
        plots += [_plot_confidence(estimator, Figure, canvas), _plot_cv(estimator, Figure, canvas)]
    if hasattr(_ccdr_part(estimator), "eigenvalues_"):
        plots += [
            _plot_eigenvalues(estimator, Figure, canvas),
            _plot_scatter(estimator, embedding, embedding_labels, Figure, canvas),
        ]
    if evaluation is not None:
        scores = [
            (k, evaluation[k])
            for k in (
                "accuracy",
                "balanced_accuracy",
                "labeled_rows",
                "unlabeled_rows",
                "unknown_label_rows",
                "seconds",
            )
            if k in evaluation
        ]
        parts += ["<h2>Evaluation on data</h2>", _table(scores, ["score", "value"])]
        per_class = [
            (c, v["precision"], v["recall"], v["f1"], v["support"])
            for c, v in evaluation["per_class"].items()
        ]
        parts.append(_table(per_class, ["class", "precision", "recall", "F1", "support"]))
        plots.append(_plot_confusion(evaluation, Figure, canvas))
    plots = [p for p in plots if p is not None]
    if plots:
        parts.append("<h2>Plots</h2>")
        parts += [_figure_html(t, png) for t, png in plots]
    body = "\n".join(parts)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title or name)}</title><style>{_CSS}</style></head>"
        f"<body>\n{body}\n</body></html>\n"
    )
