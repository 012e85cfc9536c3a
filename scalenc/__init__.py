"""scalenc: spectral/kernel classifiers trained out of core, on one machine or a Dask cluster.

Estimators
    :class:`EncoderClassifier` (Shen's multi-kernel encoder classifier),
    :class:`NRBFNClassifier` and :class:`LRClassifier` (Hu, Pan & Wu),
    :class:`CCDR` and :class:`CCDRClassifier` (Raich, Costa, Damelin & Hero).
Data in and out
    :func:`load`, :func:`check_xy`, :func:`write_output`, :func:`write_dataset`,
    :class:`Table` (a lazy table with string, categorical or boolean columns).
Models
    :func:`save_model`, :func:`load_model`, :func:`read_model_metadata`.
Clusters
    :func:`connect`.

The simulations are in :mod:`scalenc.simulate`, the errors and warnings in
:mod:`scalenc.exceptions`. The documentation (``docs/``) is built with
``python -m sphinx -b html docs docs/_build/html``.

Examples
--------
>>> import numpy as np
>>> import scalenc
>>> rng = np.random.default_rng(0)
>>> X = np.vstack([rng.normal(0, 1, (50, 3)), rng.normal(3, 1, (50, 3))])
>>> y = np.repeat([0, 1], 50)
>>> model = scalenc.EncoderClassifier().fit(X, y)
>>> model.score(X, y) > 0.9
True
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0.dev0"

_LAZY = {
    "EncoderClassifier": "scalenc.encoder",
    "NRBFNClassifier": "scalenc.nrbfn",
    "LRClassifier": "scalenc.nrbfn",
    "CCDR": "scalenc.ccdr",
    "CCDRClassifier": "scalenc.ccdr",
    "connect": "scalenc.engine.connect",
    "save_model": "scalenc.persist",
    "load_model": "scalenc.persist",
    "read_model_metadata": "scalenc.persist",
    "load": "scalenc.io",
    "write_output": "scalenc.io",
    "write_dataset": "scalenc.io",
    "check_xy": "scalenc.io",
    "to_device": "scalenc.io",
    "Table": "scalenc.io",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str):
    """Import estimators on first use, so ``import scalenc`` stays light."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'scalenc' has no attribute {name!r}")


def __dir__():
    return __all__
