"""The HTML report: one self-contained page naming its model and data, with the model's
parameters and diagnostics, the figures of :mod:`scalenc.report.plots` embedded as
base64 PNG and, with labelled data, the evaluation (:func:`build_report`).
"""

from __future__ import annotations

import html
import json
import os

import numpy as np

from scalenc.report.describe import describe_data, describe_model, jsonable, safe_location
from scalenc.report.plots import figures

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
    where = f"<code>{html.escape(safe_location(model))}</code>, " if model is not None else ""
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
        about = html.escape(safe_location(named))
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
    plots = figures(
        estimator, evaluation=evaluation, embedding=embedding, embedding_labels=embedding_labels
    )  # first: without matplotlib, nothing else is done
    name = type(estimator).__name__
    meta = metadata or {}
    used = evaluation is not None or embedding is not None
    parts = [
        f"<h1>{html.escape(title or f'scalenc model report: {name}')}</h1>",
        _subject(estimator, meta, model, data, used),
        *_model_section(meta, model, name),
        *_fitted_sections(estimator),
        *_evaluation_section(evaluation),
    ]
    if plots:
        parts += ["<h2>Plots</h2>", *(_figure_html(t, png) for t, png in plots)]
    body = "\n".join(parts)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title or name)}</title><style>{_CSS}</style></head>"
        f"<body>\n{body}\n</body></html>\n"
    )


def _model_section(meta: dict, model, name: str) -> list:
    """The model file (credentials left out), the estimator, when the file was written
    and the versions it names."""
    rows = [("estimator", meta.get("estimator", name))]
    if model is not None:
        rows.insert(0, ("model file", safe_location(model)))
    rows += [(key, meta[key]) for key in ("created", "schema_version") if key in meta]
    rows += [(f"{key} version", value) for key, value in meta.get("versions", {}).items()]
    return ["<h2>Model</h2>", _table(rows)]


def _fitted_sections(estimator) -> list:
    """The parameters, the fitted attributes (:func:`describe_model`) and, for nRBFN,
    its diagnostics."""
    params = estimator.get_params(deep=False)
    facts = describe_model(estimator)
    facts.pop("estimator", None)
    parts = [
        "<h2>Parameters</h2>",
        _table([(k, jsonable(v)) for k, v in sorted(params.items())], ["parameter", "value"]),
        "<h2>Fitted model</h2>",
        _table(list(facts.items()), ["attribute", "value"]),
    ]
    cross_entropy = getattr(estimator, "cross_entropy_", None)
    if cross_entropy is not None and np.isnan(np.asarray(cross_entropy, dtype=float)).all():
        parts.append(
            '<p class="note">One kernel was given, so no cross-entropy was computed '
            "(no choice to make and no pass spent on it).</p>"
        )
    if hasattr(estimator, "spectral_risk_"):
        names = ("basis_fraction_", "sigma_", "alpha_", "fitting_error_", "spectral_risk_", "rank_")
        diag = [(k, getattr(estimator, k)) for k in names if hasattr(estimator, k)]
        if hasattr(estimator, "basis_indices_"):
            diag.insert(0, ("basis size r", len(estimator.basis_indices_)))
        parts += [
            "<h2>Diagnostics</h2>",
            _table([(k, jsonable(v)) for k, v in diag], ["quantity", "value"]),
        ]
    return parts


def _evaluation_section(evaluation) -> list:
    """:func:`evaluate`'s scores and per-class table (nothing without an evaluation)."""
    if evaluation is None:
        return []
    keys = ("accuracy", "balanced_accuracy", "labeled_rows", "unlabeled_rows")
    keys += ("unknown_label_rows", "seconds")
    scores = [(k, evaluation[k]) for k in keys if k in evaluation]
    per_class = [
        (c, v["precision"], v["recall"], v["f1"], v["support"])
        for c, v in evaluation["per_class"].items()
    ]
    return [
        "<h2>Evaluation on data</h2>",
        _table(scores, ["score", "value"]),
        _table(per_class, ["class", "precision", "recall", "F1", "support"]),
    ]
