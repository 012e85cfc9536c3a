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
types listed in :data:`ALLOWED_TYPES` (scalenc's estimators, :class:`~scalenc.linalg.LDAModel`
and the named kernels of :mod:`scalenc.kernels`) — no pickle, no import of anything the
file names, so loading a model runs no code from it.

A model that holds something that cannot be described this way (a user callable
kernel, a reference to the training data) is refused at save time, with the attribute
that blocks it named.

Saving is atomic: the directory is written under a temporary name next to the target
and renamed at the end, so an interrupted save never leaves a model that looks complete.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import json
import math
import os
import platform
import re
import tempfile
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import fsspec
import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from scalenc import __version__
from scalenc.ccdr import CCDR, CCDRClassifier
from scalenc.ccdr.blocks import CCDRSolution, KNNHead, LDAHead, LinearHead
from scalenc.encoder import EncoderClassifier
from scalenc.encoder.kernels import KERNELS, CallableKernel, Euclidean, Gaussian, Linear, Spearman
from scalenc.exceptions import ModelFileError
from scalenc.io.atomic import atomic_path, atomic_prefix, check_complete
from scalenc.math.linalg import LDAModel
from scalenc.nrbfn import LRClassifier, NRBFNClassifier

__all__ = [
    "SCHEMA_VERSION",
    "MIN_SCHEMA_VERSION",
    "ALLOWED_TYPES",
    "ModelFileError",
    "save_model",
    "load_model",
    "read_model_metadata",
]


FORMAT = "scalenc-model"
SCHEMA_VERSION = 1
MIN_SCHEMA_VERSION = 1
META_FILE = "model.json"
ARRAY_DIR = "arrays"

#: The types a model file may name, by the name files use, with what each is rebuilt as.
#: Nothing else is ever rebuilt. The names are the module paths of scalenc 0.1.0.dev0 and
#: stay as they are when the code moves, so that files written before a move still load
#: (``tests/test_model_files_before.py``); :data:`_TYPES` says where each type lives now.
ALLOWED_TYPES: dict[str, str] = {
    # estimators (rebuilt with their __init__, which only stores parameters)
    "scalenc.encoder.EncoderClassifier": "estimator",
    "scalenc.nrbfn.NRBFNClassifier": "estimator",
    "scalenc.nrbfn.LRClassifier": "estimator",
    "scalenc.ccdr.CCDR": "estimator",
    "scalenc.ccdr.CCDRClassifier": "estimator",
    # frozen dataclasses holding arrays and numbers
    "scalenc.linalg.LDAModel": "dataclass",
    "scalenc.kernels.Linear": "dataclass",
    "scalenc.kernels.Euclidean": "dataclass",
    "scalenc.kernels.Spearman": "dataclass",
    "scalenc.kernels.Gaussian": "dataclass",
    "scalenc._ccdr_blocks.CCDRSolution": "dataclass",
    # small private helper objects: rebuilt without calling __init__, attributes restored
    "scalenc._ccdr_blocks.LinearHead": "object",
    "scalenc._ccdr_blocks.LDAHead": "object",
    "scalenc._ccdr_blocks.KNNHead": "object",
}

#: Where each type of :data:`ALLOWED_TYPES` lives now.
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
    "scalenc._ccdr_blocks.LinearHead": LinearHead,
    "scalenc._ccdr_blocks.LDAHead": LDAHead,
    "scalenc._ccdr_blocks.KNNHead": KNNHead,
}
_NAMES: dict[type, str] = {cls: name for name, cls in _TYPES.items()}

# Upgrades of older schema versions: _MIGRATIONS[v] turns a version-v document into v+1.
_MIGRATIONS: dict[int, Callable[[dict], dict]] = {}


# --- encoding ------------------------------------------------------------------------

_JSON_SCALARS = (str, bool, int, float, type(None))


def _qualname(obj_type: type) -> str:
    """The name a model file gives ``obj_type`` (:data:`ALLOWED_TYPES`), else its own."""
    return _NAMES.get(obj_type, f"{obj_type.__module__}.{obj_type.__qualname__}")


class _Writer:
    """Turns a fitted estimator into a JSON tree, collecting arrays to write as .npy."""

    def __init__(self):
        self.arrays: list[tuple[str, np.ndarray]] = []

    def encode(self, value, where: str):
        if isinstance(value, np.ndarray):
            return self._array(value, where)
        if isinstance(value, np.generic):
            return {"__scalar__": value.dtype.str, "value": self._float(value.item())}
        if isinstance(value, np.dtype):
            return {"__dtype__": value.str}
        if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
            return value
        if isinstance(value, float):
            return self._float(value)
        if isinstance(value, (list, tuple)):
            items = [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
            return items if isinstance(value, list) else {"__tuple__": items}
        if isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise self._refuse(where, value, "a dict with non-string keys")
            return {"__dict__": {k: self.encode(v, f"{where}.{k}") for k, v in value.items()}}
        if _is_sparse(value):
            csr = value.tocsr()
            return {
                "__csr__": "array" if _is_sparse_array(value) else "matrix",
                "shape": list(csr.shape),
                "data": self._array(csr.data, f"{where}.data"),
                "indices": self._array(csr.indices, f"{where}.indices"),
                "indptr": self._array(csr.indptr, f"{where}.indptr"),
            }
        name = _qualname(type(value))
        kind = ALLOWED_TYPES.get(name)
        if kind == "object":
            fields = {k: self.encode(v, f"{where}.{k}") for k, v in vars(value).items()}
            return {"__object__": name, "attributes": fields}
        if kind == "estimator":
            return self.estimator(value, where)
        if kind == "dataclass":
            fields = {
                f.name: self.encode(getattr(value, f.name), f"{where}.{f.name}")
                for f in dataclasses.fields(value)
            }
            return {"__type__": name, "fields": fields}
        raise self._refuse(where, value)

    def estimator(self, est, where: str) -> dict:
        params = est.get_params(deep=False)
        state = {k: v for k, v in vars(est).items() if k not in params}
        return {
            "__estimator__": _qualname(type(est)),
            "params": {k: self.encode(v, f"{where}.{k}") for k, v in params.items()},
            "state": {k: self.encode(v, f"{where}.{k}") for k, v in sorted(state.items())},
        }

    def plain_list(self, values) -> list:
        """A small array as a JSON list (for the human-readable part of model.json)."""
        return [self._float(v) for v in np.asarray(values).tolist()]

    @staticmethod
    def _float(value):
        if isinstance(value, float) and not math.isfinite(value):
            return {"__float__": repr(value)}  # 'nan', 'inf', '-inf'
        return value

    def _array(self, arr: np.ndarray, where: str):
        if arr.dtype.kind == "O":
            items = arr.ravel().tolist()
            if not all(isinstance(v, _JSON_SCALARS) for v in items):
                raise self._refuse(where, arr, "an object array of non-scalar values")
            return {"__object_array__": [self._float(v) for v in items], "shape": list(arr.shape)}
        if arr.dtype.hasobject or arr.dtype.kind == "V":
            raise self._refuse(where, arr, f"an array of dtype {arr.dtype}")
        index = len(self.arrays)
        local = where.split(".", 1)[1] if "." in where else where  # drop the root's class name
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", local)[:80]
        rel = f"{ARRAY_DIR}/{index:03d}-{safe}.npy"
        self.arrays.append((rel, np.ascontiguousarray(arr)))
        return {"__array__": rel}

    @staticmethod
    def _refuse(where: str, value, what: str | None = None) -> ModelFileError:
        what = what or f"a {type(value).__module__}.{type(value).__qualname__}"
        hint = ""
        if isinstance(value, CallableKernel) or callable(value):
            hint = (
                " A model with a user callable kernel cannot be saved as a safe model file "
                "(loading it would have to run code); use a named kernel "
                f"{sorted(_kernel_names())}, or pickle/joblib the estimator instead."
            )
        elif type(value).__module__.startswith("dask"):
            hint = (
                " It refers to data (a Dask collection) rather than holding fitted numbers; "
                "EncoderClassifier(method='full') keeps the training X for predict and cannot "
                "be saved — use method='fast'."
            )
        return ModelFileError(
            f"Cannot save {where}: it is {what}, which a scalenc model file cannot hold.{hint}"
        )


def _is_sparse(value) -> bool:
    module = type(value).__module__
    if not module.startswith("scipy.sparse"):
        return False

    return sp.issparse(value)


def _is_sparse_array(value) -> bool:

    return isinstance(value, sp.sparray)


def _kernel_names():
    return KERNELS


# --- decoding ------------------------------------------------------------------------


class _Reader:
    """Rebuilds the JSON tree, allowing only the types of :data:`ALLOWED_TYPES`."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays

    def decode(self, node, where: str):
        if isinstance(node, (str, bool, int, float)) or node is None:
            return node
        if isinstance(node, list):
            return [self.decode(v, f"{where}[{i}]") for i, v in enumerate(node)]
        if not isinstance(node, dict) or len(node) == 0:
            raise ModelFileError(f"Unreadable entry at {where}: {str(node)[:80]!r}.")
        if "__array__" in node:
            try:
                return self.arrays[node["__array__"]]
            except (KeyError, TypeError):
                raise ModelFileError(
                    f"{where} refers to array file {node['__array__']!r}, which model.json "
                    "does not list."
                ) from None
        if "__object_array__" in node:
            items = [self.decode(v, where) for v in node["__object_array__"]]
            out = np.empty(len(items), dtype=object)
            out[:] = items
            return out.reshape(node.get("shape", [len(items)]))
        if "__float__" in node:
            if node["__float__"] not in ("nan", "inf", "-inf"):
                raise ModelFileError(f"Bad float at {where}: {node['__float__']!r}.")
            return float(node["__float__"])
        if "__scalar__" in node:
            dtype = self._dtype(node["__scalar__"], where)
            return dtype.type(self.decode(node["value"], where))
        if "__dtype__" in node:
            return self._dtype(node["__dtype__"], where)
        if "__tuple__" in node:
            return tuple(self.decode(v, f"{where}[{i}]") for i, v in enumerate(node["__tuple__"]))
        if "__dict__" in node:
            return {k: self.decode(v, f"{where}.{k}") for k, v in node["__dict__"].items()}
        if "__type__" in node:
            cls = _allowed_class(node["__type__"], "dataclass", where)
            fields = {k: self.decode(v, f"{where}.{k}") for k, v in node["fields"].items()}
            try:
                return cls(**fields)
            except TypeError as exc:
                raise ModelFileError(
                    f"{where}: the stored fields of {node['__type__']} do not match this scalenc "
                    f"version's ({exc})."
                ) from None
        if "__estimator__" in node:
            return self.estimator(node, where)
        if "__object__" in node:
            cls = _allowed_class(node["__object__"], "object", where)
            obj = cls.__new__(cls)  # no __init__: the attributes are restored as saved
            for key, value in node["attributes"].items():
                setattr(obj, key, self.decode(value, f"{where}.{key}"))
            return obj
        if "__csr__" in node:
            parts = [self.decode(node[k], f"{where}.{k}") for k in ("data", "indices", "indptr")]
            make = sp.csr_array if node["__csr__"] == "array" else sp.csr_matrix
            try:
                return make(tuple(parts), shape=tuple(node["shape"]))
            except (ValueError, TypeError) as exc:
                raise ModelFileError(f"Bad sparse matrix at {where}: {exc}.") from None
        raise ModelFileError(f"Unreadable entry at {where}: keys {sorted(node)[:5]}.")

    def estimator(self, node: dict, where: str):
        cls = _allowed_class(node["__estimator__"], "estimator", where)
        params = {k: self.decode(v, f"{where}.{k}") for k, v in node["params"].items()}
        known = set(cls._get_param_names())
        unknown = sorted(set(params) - known)
        if unknown:
            raise ModelFileError(
                f"{where}: the model was saved with parameter(s) {unknown} that this scalenc's "
                f"{cls.__name__} does not have (it has {sorted(known)}). Load it with the "
                "scalenc version that saved it (see `scalenc info`)."
            )
        est = cls(**params)
        for key, value in node["state"].items():
            setattr(est, key, self.decode(value, f"{where}.{key}"))
        return est

    @staticmethod
    def _dtype(text, where) -> np.dtype:
        try:
            dtype = np.dtype(text)
        except TypeError:
            raise ModelFileError(f"Bad dtype at {where}: {text!r}.") from None
        if dtype.hasobject:
            raise ModelFileError(f"Object dtype at {where} is not allowed in a model file.")
        return dtype


def _allowed_class(name, kind: str, where: str) -> type:
    if not isinstance(name, str) or ALLOWED_TYPES.get(name) != kind:
        raise ModelFileError(
            f"{where} names the type {name!r}, which is not one a scalenc model file may hold "
            f"(allowed: {sorted(k for k, v in ALLOWED_TYPES.items() if v == kind)}). The file "
            "was not written by scalenc or has been altered; it is refused."
        )
    return _TYPES[name]


# --- files ---------------------------------------------------------------------------


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _canonical_sha256(doc: dict) -> str:
    body = {k: v for k, v in doc.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _versions() -> dict[str, str]:
    out = {
        "scalenc": __version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }
    for name in ("sklearn", "scipy", "dask"):
        try:
            out[name] = importlib.import_module(name).__version__
        except ImportError:  # pragma: no cover - all are dependencies
            pass
    return out


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _summary(est) -> dict:
    """Small human-readable facts for `scalenc info` (not used when loading)."""
    out = {}
    for key in ("n_features_in_", "n_passes_"):
        if hasattr(est, key):
            out[key] = int(getattr(est, key))
    if hasattr(est, "kernel_"):
        out["kernel_"] = repr(est.kernel_)
    return out


def _remote(location, storage_options):
    """(fs, path) when ``location`` is a URL of a file system other than the local one,
    else None."""
    text = os.fspath(location)
    if "://" not in text:
        return None
    fs, path = fsspec.core.url_to_fs(text, **(storage_options or {}))
    return None if "file" in np.atleast_1d(fs.protocol) else (fs, path)


def save_model(estimator, directory, *, overwrite: bool = False, storage_options=None) -> str:
    """Save a fitted scalenc estimator to ``directory`` (JSON + ``.npy``, no pickle).

    Parameters
    ----------
    estimator : fitted EncoderClassifier, NRBFNClassifier, LRClassifier, CCDR or CCDRClassifier
    directory : str or path-like
        Created; must not exist unless ``overwrite=True``.
    overwrite : bool, default=False
        Replace an existing model directory (only after the new one is fully written).

    Returns
    -------
    str
        The directory written.

    Raises
    ------
    ModelFileError
        The estimator is not fitted, is not a scalenc estimator, or holds something a
        model file cannot describe (a user callable kernel, a reference to data).
    FileExistsError
        ``directory`` exists and ``overwrite`` is False.

    Notes
    -----
    Everything is written (and fsynced) to ``<directory>.tmp-<host>-<pid>-<random>`` and
    published at ``directory`` at the end, an existing model being swapped out in one step
    (:mod:`scalenc._atomic`): an interrupted save leaves the old model, never a partial one.
    A URL (``s3://…``, with ``storage_options``) is written locally first, then uploaded
    under a temporary prefix and published with a completion marker
    (:func:`scalenc._atomic.atomic_prefix`).
    The estimator's whole state is kept, including the running totals ``partial_fit``
    continues from.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> import numpy as np
    >>> from sklearn.datasets import load_iris
    >>> from scalenc import LRClassifier, load_model, save_model
    >>> X, y = load_iris(return_X_y=True)
    >>> model = LRClassifier().fit(X, y)
    >>> folder = tempfile.mkdtemp()
    >>> path = save_model(model, os.path.join(folder, "model"))
    >>> sorted(os.listdir(path))
    ['arrays', 'model.json']
    >>> same = load_model(path)
    >>> bool((same.predict(X) == model.predict(X)).all())
    True
    >>> shutil.rmtree(folder)
    """
    name = _qualname(type(estimator))
    if ALLOWED_TYPES.get(name) != "estimator":
        raise ModelFileError(
            f"save_model saves scalenc estimators "
            f"{sorted(k.rsplit('.', 1)[1] for k, v in ALLOWED_TYPES.items() if v == 'estimator')};"
            f" got {name}. Use joblib/pickle for other objects."
        )
    try:
        check_is_fitted(estimator)
    except NotFittedError:
        raise ModelFileError(
            f"This {type(estimator).__name__} is not fitted yet; call fit before save_model."
        ) from None
    writer = _Writer()
    tree = writer.estimator(estimator, type(estimator).__name__)
    classes = getattr(estimator, "classes_", None)
    doc = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "estimator": name,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": _versions(),
        "classes": None if classes is None else writer.plain_list(classes),
        "summary": _summary(estimator),
        "model": tree,
        "files": {},
    }
    remote = _remote(directory, storage_options)
    if remote is not None:
        fs, path = remote
        with tempfile.TemporaryDirectory(prefix="scalenc-model-") as staging:
            local = Path(staging) / "model"
            _write_model(writer, doc, local, overwrite=False)
            with atomic_prefix(fs, path, overwrite=overwrite, url=os.fspath(directory)) as tmp:
                tmp_path = fs._strip_protocol(tmp)
                for file in sorted(p for p in local.rglob("*") if p.is_file()):
                    fs.put_file(str(file), f"{tmp_path}/{file.relative_to(local).as_posix()}")
        return os.fspath(directory)
    target = Path(os.fspath(directory)).absolute()
    _write_model(writer, doc, target, overwrite=overwrite)
    return str(target)


def _write_model(writer, doc: dict, target: Path, *, overwrite: bool) -> None:
    with atomic_path(target, overwrite=overwrite) as tmp:
        tmp = Path(tmp)
        (tmp / ARRAY_DIR).mkdir(parents=True)
        for rel, arr in writer.arrays:
            path = tmp / rel
            with open(path, "wb") as fh:
                np.save(fh, arr, allow_pickle=False)
                fh.flush()
                os.fsync(fh.fileno())
            doc["files"][rel] = {
                "sha256": _sha256_file(path),
                "bytes": path.stat().st_size,
                "shape": list(arr.shape),
                "dtype": arr.dtype.str,
            }
        doc["checksum"] = _canonical_sha256(doc)
        with open(tmp / META_FILE, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1, allow_nan=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(tmp / ARRAY_DIR)


def read_model_metadata(directory, *, verify: bool = True, storage_options=None) -> dict:
    """The parsed ``model.json`` of a model directory (a path or URL), checked (and
    migrated) as by load.

    With ``verify`` (default) every array file is checked against its recorded size and
    SHA-256. Raises :class:`ModelFileError` with the reason when anything is wrong.

    Parameters
    ----------
    directory : str or path-like
        A model directory written by :func:`save_model`, or its URL.
    verify : bool, default=True
        Check every array file against its recorded size and SHA-256.
    storage_options : dict, optional
        Passed to fsspec for URLs.

    Returns
    -------
    dict
        The document: ``estimator``, ``schema_version``, ``created``, ``versions`` (of
        Python and the libraries that wrote it), ``classes``, ``summary``, the model tree
        and the ``files`` with their checksums. No estimator is built.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> from sklearn.datasets import load_iris
    >>> from scalenc import LRClassifier, read_model_metadata, save_model
    >>> X, y = load_iris(return_X_y=True)
    >>> folder = tempfile.mkdtemp()
    >>> path = save_model(LRClassifier().fit(X, y), os.path.join(folder, "model"))
    >>> meta = read_model_metadata(path)
    >>> meta["estimator"], meta["classes"], meta["summary"]["n_features_in_"]
    ('scalenc.nrbfn.LRClassifier', [0, 1, 2], 4)
    >>> shutil.rmtree(folder)
    """
    with _local_copy(directory, storage_options) as root:
        return _read_metadata(root, verify=verify)


def _read_metadata(root: Path, *, verify: bool) -> dict:
    meta_path = root / META_FILE
    if not root.is_dir():
        raise ModelFileError(
            f"{root} is not a model directory (it does not exist or is a file); models are "
            "saved by scalenc.save_model / `scalenc fit --model-out`."
        )
    if not meta_path.is_file():
        raise ModelFileError(
            f"{root} has no {META_FILE}; it is not a scalenc model directory "
            "(or its save was interrupted)."
        )
    try:
        doc = json.loads(meta_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFileError(
            f"{meta_path} is corrupted or truncated: not valid JSON ({exc})."
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ModelFileError(f"{meta_path} is not a scalenc model file (no format {FORMAT!r}).")
    if doc.get("checksum") != _safe_checksum(doc):
        raise ModelFileError(
            f"{meta_path} has been modified or damaged since it was saved: its checksum does "
            "not match its content. Refit or restore the model; it is refused."
        )
    doc = _migrate(doc, meta_path)
    if verify:
        _verify_files(root, doc)
    return doc


def _safe_checksum(doc: dict) -> str | None:
    try:
        return _canonical_sha256(doc)
    except (TypeError, ValueError):
        return None


def _migrate(doc: dict, meta_path: Path) -> dict:
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ModelFileError(f"{meta_path} has no valid schema_version ({version!r}).")
    saved_by = doc.get("versions", {}).get("scalenc", "unknown")
    if version > SCHEMA_VERSION:
        raise ModelFileError(
            f"{meta_path} uses model schema version {version}, written by scalenc {saved_by}; this "
            f"scalenc reads schema versions {MIN_SCHEMA_VERSION} to {SCHEMA_VERSION}. Upgrade "
            "scalenc to load it."
        )
    if version < MIN_SCHEMA_VERSION:
        raise ModelFileError(
            f"{meta_path} uses model schema version {version}, written by scalenc {saved_by}, "
            f"which this scalenc can no longer read (oldest supported: {MIN_SCHEMA_VERSION}). "
            "Load it with that scalenc version and refit, or save it again with a version "
            "in between."
        )
    while version < SCHEMA_VERSION:
        doc = _MIGRATIONS[version](doc)
        version = doc["schema_version"]
    return doc


def _verify_files(root: Path, doc: dict) -> None:
    files = doc.get("files")
    if not isinstance(files, dict):
        raise ModelFileError(f"{root / META_FILE} lists no array files.")
    for rel, info in files.items():
        path = (root / rel).resolve()
        if root.resolve() not in path.parents:
            raise ModelFileError(
                f"{root / META_FILE} refers to {rel!r}, outside the model directory."
            )
        if not path.is_file():
            raise ModelFileError(f"{root} is incomplete: the array file {rel} is missing.")
        size = path.stat().st_size
        if size != info.get("bytes"):
            raise ModelFileError(
                f"{path} is truncated or damaged: {size} bytes, but {info.get('bytes')} were saved."
            )
        if _sha256_file(path) != info.get("sha256"):
            raise ModelFileError(
                f"{path} is damaged or was altered: its SHA-256 does not match the one recorded "
                "when the model was saved. Refit or restore the model; it is refused."
            )


def _read_arrays(root: Path, doc: dict) -> dict[str, np.ndarray]:
    arrays = {}
    for rel, info in doc["files"].items():
        try:
            arr = np.load(root / rel, allow_pickle=False)
        except ValueError as exc:
            raise ModelFileError(f"{root / rel} cannot be read without pickle ({exc}).") from None
        if list(arr.shape) != info.get("shape") or arr.dtype.str != info.get("dtype"):
            raise ModelFileError(
                f"{root / rel} holds shape {arr.shape} dtype {arr.dtype.str}; model.json says "
                f"{tuple(info.get('shape') or ())} {info.get('dtype')}."
            )
        arrays[rel] = arr
    return arrays


@contextlib.contextmanager
def _local_copy(directory, storage_options):
    """The model directory as a local path: a URL's files are downloaded to a temporary
    directory first (models are small), after checking its publish completed."""
    remote = _remote(directory, storage_options)
    if remote is None:
        yield Path(os.fspath(directory))
        return
    fs, path = remote
    if not fs.isdir(path):
        raise ModelFileError(f"{os.fspath(directory)} is not a model directory (no such prefix).")
    check_complete(fs, path)
    with tempfile.TemporaryDirectory(prefix="scalenc-model-") as staging:
        local = Path(staging) / "model"
        for name in fs.find(path):
            target = local / name[len(path.rstrip("/")) + 1 :]
            target.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(name, str(target))
        yield local


def load_model(directory, *, storage_options=None):
    """Load an estimator saved by :func:`save_model`, running no code from the files.

    The JSON metadata and every array file are checked against their recorded SHA-256
    first; arrays are read with ``allow_pickle=False``; only the types in
    :data:`ALLOWED_TYPES` are rebuilt. A model written by an older schema version is
    upgraded when possible.

    Parameters
    ----------
    directory : str or path-like
        A model directory written by :func:`save_model`, or its URL (``s3://…``): a URL's
        files are downloaded to a temporary directory first (models are small).
    storage_options : dict, optional
        Passed to fsspec for URLs.

    Returns
    -------
    estimator
        The fitted estimator, as it was saved.

    Raises
    ------
    ModelFileError
        The directory is not a model, is incomplete, truncated, altered, from an
        unsupported schema version, or names a type that is not allowed.

    Examples
    --------
    >>> import json, os, shutil, tempfile
    >>> from sklearn.datasets import load_iris
    >>> from scalenc import EncoderClassifier, load_model, save_model
    >>> X, y = load_iris(return_X_y=True)
    >>> folder = tempfile.mkdtemp()
    >>> path = save_model(EncoderClassifier().fit(X, y), os.path.join(folder, "model"))
    >>> load_model(path).kernel_.name
    'linear'

    An altered file is refused:

    >>> with open(os.path.join(path, "model.json")) as fh:
    ...     doc = json.load(fh)
    >>> doc["model"]["params"]["min_improvement"] = 0.0
    >>> with open(os.path.join(path, "model.json"), "w") as fh:
    ...     json.dump(doc, fh)
    >>> load_model(path)
    Traceback (most recent call last):
    ...
    scalenc.exceptions.ModelFileError: ...
    >>> shutil.rmtree(folder)
    """
    with _local_copy(directory, storage_options) as root:
        doc = _read_metadata(root, verify=True)
        arrays = _read_arrays(root, doc)
    tree = doc.get("model")
    if not isinstance(tree, dict) or tree.get("__estimator__") != doc.get("estimator"):
        raise ModelFileError(f"{root / META_FILE} does not describe an estimator.")
    try:
        return _Reader(arrays).estimator(tree, tree["__estimator__"].rsplit(".", 1)[-1])
    except (KeyError, TypeError, AttributeError) as exc:
        raise ModelFileError(
            f"{root / META_FILE} is malformed ({type(exc).__name__}: {exc})."
        ) from None
