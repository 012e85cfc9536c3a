"""Raich, Costa, Damelin & Hero's classification-constrained dimensionality reduction.

* :mod:`~scalenc.ccdr.transformer` — :class:`CCDR`; :mod:`~scalenc.ccdr.classifier` —
  :class:`CCDRClassifier`.
* :mod:`~scalenc.ccdr.blocks` — the graph, the solve, the Nyström map, the heads.
* :mod:`~scalenc.ccdr.passes` — CCDR's passes over the data.
"""

from scalenc.ccdr.classifier import CCDRClassifier
from scalenc.ccdr.transformer import CCDR

__all__ = ["CCDR", "CCDRClassifier"]
