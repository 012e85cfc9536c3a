"""Model files: a directory of JSON metadata and ``.npy`` arrays that loads without running code.

Layout of a model directory::

    model/
      model.json          estimator, parameters, fitted state, classes, versions, checksums
      arrays/000-classes_.npy
      arrays/001-class_means_.npy
      ...

``model.json`` describes the estimator as a tree of plain JSON values. NumPy arrays are
stored as ``.npy`` files (read back with ``allow_pickle=False``) and referenced from the
tree; every array file carries its SHA-256, byte size, shape and dtype, and the JSON
document carries the SHA-256 of its own canonical form. Loading rebuilds only the
types listed in :data:`~scalenc.persist.types.ALLOWED_TYPES` (scalenc's estimators,
:class:`~scalenc.math.linalg.LDAModel` and the named kernels of
:mod:`scalenc.encoder.kernels`) — no pickle, no import of anything the file names, so
loading a model runs no code from it.

A model that holds something that cannot be described this way (a user callable
kernel, a reference to the training data) is refused at save time, with the attribute
that blocks it named. An encoder fitted with a graph holds its training nodes' class
codes as one more array (n-sized: the file grows with the nodes; schema version 2).

Saving is atomic: the directory is written under a temporary name next to the target
and renamed at the end, so an interrupted save never leaves a model that looks complete.

The package: :mod:`~scalenc.persist.types` (the allowed types and their stable names),
:mod:`~scalenc.persist.codec` (estimator ⇄ JSON tree and arrays),
:mod:`~scalenc.persist.files` (checksums, versions, atomic saves, object stores).
"""

from scalenc.exceptions import ModelFileError
from scalenc.persist.files import (
    MIN_SCHEMA_VERSION,
    SCHEMA_VERSION,
    load_model,
    read_model_metadata,
    save_model,
)
from scalenc.persist.types import ALLOWED_TYPES

__all__ = [
    "SCHEMA_VERSION",
    "MIN_SCHEMA_VERSION",
    "ALLOWED_TYPES",
    "ModelFileError",
    "save_model",
    "load_model",
    "read_model_metadata",
]
