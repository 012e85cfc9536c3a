"""Shen's fast multi-kernel encoder classifier.

* :mod:`~scalenc.encoder.estimator` — :class:`EncoderClassifier` (parameters, ``fit`` steps).
* :mod:`~scalenc.encoder.kernels` — the kernels δ(x, u), evaluated tile by tile.
* :mod:`~scalenc.encoder.blocks` — per-block math of the embedding and its outputs.
* :mod:`~scalenc.encoder.passes` — the encoder's passes over the data.
* :mod:`~scalenc.encoder.plan` — cache the embedding or recompute it, from measured rates.
"""

from scalenc.encoder.blocks import choose_kernel
from scalenc.encoder.estimator import EncoderClassifier

__all__ = ["EncoderClassifier", "choose_kernel"]
