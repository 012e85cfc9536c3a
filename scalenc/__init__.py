"""scalenc: spectral/kernel classifiers trained out of core, on one machine or a Dask cluster.

Estimators
    :class:`EncoderClassifier` (Shen's multi-kernel encoder classifier),
    :class:`NRBFNClassifier` and :class:`LRClassifier` (Hu, Pan & Wu),
    :class:`CCDR` and :class:`CCDRClassifier` (Raich, Costa, Damelin & Hero).
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
    "connect": "scalenc.cluster",
    "save_model": "scalenc.persist",
    "load_model": "scalenc.persist",
    "load": "scalenc.data",
    "write_output": "scalenc.data",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str):
    """Import estimators on first use, so ``import scalenc`` stays light."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'scalenc' has no attribute {name!r}")


def __dir__():
    return __all__
