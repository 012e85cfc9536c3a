"""Evaluating a fitted model on data, and a self-contained HTML report about it.

* :func:`evaluate` — accuracy, per-class precision/recall/F1, the confusion matrix: one
  pass over X, as a tree sum of per-block confusion counts (nothing n-sized reaches the
  client).
* :func:`describe_model` — the small fitted facts of any scalenc estimator as JSON values.
* :func:`describe_data` — one line naming the data a report evaluated: its path or URL as
  given (credentials left out, :func:`safe_location`), or the kind of in-memory array,
  with its shape.
* :func:`build_report` — one HTML page naming its model and data, with the model's
  parameters and diagnostics and PNG plots embedded as base64 (matplotlib, the optional
  ``plot`` extra): the encoder's cross-entropy per kernel; nRBFN's basis size, σ, fitting
  error, spectral risk and the cross-validation curve over λ; CCDR's eigenvalues and a 2-D
  scatter of the embedding coloured by class; with labelled data, the confusion matrix
  (:func:`figures`).

The package's modules: :mod:`~scalenc.report.describe` (what a report is about),
:mod:`~scalenc.report.evaluation`, :mod:`~scalenc.report.plots` (the figures) and
:mod:`~scalenc.report.page` (the HTML page); their public names are imported here.
"""

from __future__ import annotations

from scalenc.report.describe import describe_data, describe_model, jsonable, safe_location
from scalenc.report.evaluation import confusion_summary, evaluate, sample_rows
from scalenc.report.page import build_report
from scalenc.report.plots import INSTALL_HINT, MissingPlotDependency, figures, require_matplotlib

__all__ = [
    "MissingPlotDependency",
    "require_matplotlib",
    "evaluate",
    "describe_model",
    "describe_data",
    "safe_location",
    "jsonable",
    "sample_rows",
    "build_report",
    "figures",
    "confusion_summary",
    "INSTALL_HINT",
]
