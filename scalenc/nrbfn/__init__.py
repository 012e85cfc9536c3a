"""Hu, Pan & Wu's normalized RBF network and linear regression classifier.

* :mod:`~scalenc.nrbfn.estimator` — :class:`NRBFNClassifier`; :mod:`~scalenc.nrbfn.lrc` —
  :class:`LRClassifier`; :mod:`~scalenc.nrbfn.regression` — their shared outputs.
* :mod:`~scalenc.nrbfn.blocks` — soft-KNN, basis, σ, the Gram and CV block functions.
* :mod:`~scalenc.nrbfn.passes` — nRBFN's passes; :mod:`~scalenc.nrbfn.plan` — its memory plan.
"""

from scalenc.nrbfn.estimator import NRBFNClassifier
from scalenc.nrbfn.lrc import LRClassifier

__all__ = ["NRBFNClassifier", "LRClassifier"]
