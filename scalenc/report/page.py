"""The HTML report: one self-contained page naming its model and data, with the model's
parameters and diagnostics, the figures of :mod:`scalenc.report.plots` embedded as
base64 PNG and, with labelled data, the evaluation (:func:`build_report`).
"""

from __future__ import annotations

import html
import json
import os

import numpy as np

from scalenc.report.describe import _location, describe_data, describe_model, jsonable
from scalenc.report.plots import (
    _ccdr_part,
    _plot_confidence,
    _plot_confusion,
    _plot_counts,
    _plot_cross_entropy,
    _plot_cv,
    _plot_eigenvalues,
    _plot_scatter,
    require_matplotlib,
)

__all__ = [
    "build_report",
]


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
