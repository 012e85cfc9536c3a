"""Writing, verifying and reading model directories: checksums, schema versions, atomic
saves, object stores. See :mod:`scalenc.persist` for the format."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import platform
import tempfile
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import fsspec
import numpy as np
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from scalenc import __version__
from scalenc.exceptions import ModelFileError
from scalenc.io.atomic import atomic_path, atomic_prefix, check_complete, fsync_directory
from scalenc.persist.codec import ARRAY_DIR, Reader, Writer
from scalenc.persist.shapes import check_shapes
from scalenc.persist.types import ALLOWED_TYPES, type_name

__all__ = [
    "SCHEMA_VERSION",
    "MIN_SCHEMA_VERSION",
    "save_model",
    "load_model",
    "read_model_metadata",
]


FORMAT = "scalenc-model"
#: The newest schema version this scalenc reads and writes. Version 2 adds an encoder's
#: graph state (every training node's class code, ``_graph_codes``), version 3 its node
#: ids (``node_ids_``, when the graph named nodes by id); each older document is a newer
#: one without them, so it is read as it is.
SCHEMA_VERSION = 3
MIN_SCHEMA_VERSION = 1
META_FILE = "model.json"

#: The estimator state each schema version after the first added: a file is written with
#: the oldest version that describes it, so that a model without a graph still loads in a
#: scalenc that reads version 1 only.
_ADDED_IN = {"_graph_codes": 2, "node_ids_": 3}

# Upgrades of older schema versions: _MIGRATIONS[v] turns a version-v document into v+1.
# A version without one is read as it is (its documents are valid in the next version).
_MIGRATIONS: dict[int, Callable[[dict], dict]] = {}


def _schema_version(tree: dict) -> int:
    """The oldest schema version that describes an estimator's tree."""
    state = tree.get("state", {})
    return max([1] + [version for key, version in _ADDED_IN.items() if key in state])


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
    (:mod:`scalenc.io.atomic`): an interrupted save leaves the old model, never a partial one.
    A URL (``s3://…``, with ``storage_options``) is written locally first, then uploaded
    under a temporary prefix and published with a completion marker
    (:func:`scalenc.io.atomic.atomic_prefix`).
    The estimator's whole state is kept, including the running totals ``partial_fit``
    continues from. An :class:`~scalenc.encoder.EncoderClassifier` fitted with a graph
    also keeps every training node's class code, which its predictions need (W of
    Z = A W): computed once here, one byte a node for fewer than 128 classes, so its file
    grows with the graph's nodes (schema version 2).

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
    name = type_name(type(estimator))
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
    writer = Writer()
    tree = writer.estimator(estimator, type(estimator).__name__)
    classes = getattr(estimator, "classes_", None)
    doc = {
        "format": FORMAT,
        "schema_version": _schema_version(tree),
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
        fsync_directory(tmp / ARRAY_DIR)


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
    while version < SCHEMA_VERSION and version in _MIGRATIONS:
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
    :data:`ALLOWED_TYPES` are rebuilt, and their arrays' shapes and dtypes are checked
    against each other and the parameters (:mod:`scalenc.persist.shapes`). A model
    written by an older schema version is upgraded when possible.

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
        unsupported schema version, names a type that is not allowed, or holds arrays
        whose shapes or dtypes do not fit together.

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
        model = Reader(arrays).estimator(tree, tree["__estimator__"].rsplit(".", 1)[-1])
    except (KeyError, TypeError, AttributeError) as exc:
        raise ModelFileError(
            f"{root / META_FILE} is malformed ({type(exc).__name__}: {exc})."
        ) from None
    check_shapes(model, str(root / META_FILE))
    return model
