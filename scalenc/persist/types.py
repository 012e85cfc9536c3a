"""The types a model file may hold, by the names files give them (stable across scalenc's
own code moves), and where each lives now.
"""

from __future__ import annotations

import dataclasses

from sklearn.base import BaseEstimator

from scalenc.ccdr import CCDR, CCDRClassifier
from scalenc.ccdr.blocks import CCDRSolution, KNNHead, LDAHead, LinearHead
from scalenc.encoder import EncoderClassifier
from scalenc.encoder.kernels import Euclidean, Gaussian, Linear, Spearman
from scalenc.exceptions import ModelFileError
from scalenc.io.tables import FeatureEncoder
from scalenc.math.linalg import LDAModel
from scalenc.nrbfn import LRClassifier, NRBFNClassifier

#: The types a model file may name, by the name files use, and where each lives now.
#: Nothing else is ever rebuilt. The names are the module paths of scalenc 0.1.0.dev0 and
#: stay as they are when the code moves, so that files written before a move still load
#: (``tests/persist/test_persist_old_files.py``).
_TYPES: dict[str, type] = {
    "scalenc.encoder.EncoderClassifier": EncoderClassifier,
    "scalenc.nrbfn.NRBFNClassifier": NRBFNClassifier,
    "scalenc.nrbfn.LRClassifier": LRClassifier,
    "scalenc.ccdr.CCDR": CCDR,
    "scalenc.ccdr.CCDRClassifier": CCDRClassifier,
    "scalenc.linalg.LDAModel": LDAModel,
    "scalenc.kernels.Linear": Linear,
    "scalenc.kernels.Euclidean": Euclidean,
    "scalenc.kernels.Spearman": Spearman,
    "scalenc.kernels.Gaussian": Gaussian,
    "scalenc._ccdr_blocks.CCDRSolution": CCDRSolution,
    "scalenc.io.tables.FeatureEncoder": FeatureEncoder,
    "scalenc._ccdr_blocks.LinearHead": LinearHead,
    "scalenc._ccdr_blocks.LDAHead": LDAHead,
    "scalenc._ccdr_blocks.KNNHead": KNNHead,
}

#: The types of :data:`_TYPES` by name, with what each is rebuilt as: ``"estimator"``
#: (with its __init__, which only stores parameters), ``"dataclass"`` (frozen, holding
#: arrays and numbers) or ``"object"`` (a small helper, rebuilt without calling __init__,
#: its attributes restored).
ALLOWED_TYPES: dict[str, str] = {
    name: "estimator"
    if issubclass(cls, BaseEstimator)
    else "dataclass"
    if dataclasses.is_dataclass(cls)
    else "object"
    for name, cls in _TYPES.items()
}


_NAMES: dict[type, str] = {cls: name for name, cls in _TYPES.items()}


def type_name(obj_type: type) -> str:
    """The name a model file gives ``obj_type`` (:data:`ALLOWED_TYPES`), else its own."""
    return _NAMES.get(obj_type, f"{obj_type.__module__}.{obj_type.__qualname__}")


def allowed_class(name, kind: str, where: str) -> type:
    if not isinstance(name, str) or ALLOWED_TYPES.get(name) != kind:
        raise ModelFileError(
            f"{where} names the type {name!r}, which is not one a scalenc model file may hold "
            f"(allowed: {sorted(k for k, v in ALLOWED_TYPES.items() if v == kind)}). The file "
            "was not written by scalenc or has been altered; it is refused."
        )
    return _TYPES[name]
