"""What a fit's input *is*, without reading it: the key a checkpoint is kept under.

:func:`scalenc.load` remembers where each array it opens comes from
(:func:`remember_source`); :func:`input_identity` then describes an input by

* ``graph``: a deterministic token of the Dask graph that computes it (the readers name
  their tasks after the file's location, row group and columns, never after the Python
  objects of one process), so the same file loaded again in another process, with the
  same chunking and the same steps on top, gives the same token;
* ``chunks``: its row chunking;
* ``files``: for every file the graph reads, its size and modification time (or an object
  store's ETag), from one listing of each source: a file rewritten since, one added or
  one removed changes the identity, though no byte of the data is read.

In-memory inputs (NumPy arrays, pandas frames) are identified by a hash of their bytes.
"""

from __future__ import annotations

import os
import threading

import dask
import dask.array as da
import numpy as np
from dask.base import is_dask_collection, tokenize

from scalenc.io.tables import Table

__all__ = ["remember_source", "input_identity", "source_token", "IdentityUnavailable"]

#: graph name → (file system, path) of every source :func:`scalenc.load` opened.
_SOURCES: dict[str, tuple] = {}
_LOCK = threading.Lock()
#: The file metadata that says a file changed, first found first used.
_STAMPS = ("ETag", "etag", "mtime", "LastModified", "last_modified", "updated", "created")


class IdentityUnavailable(Exception):
    """The input's graph cannot be tokenized deterministically; the message says why."""


def source_token(fs, path: str, *parts) -> str:
    """A token of a file's location (protocol and full path) and ``parts``, the same in
    every process: for the names of the readers' tasks.

    Examples
    --------
    >>> import fsspec
    >>> from scalenc.io.identity import source_token
    >>> fs = fsspec.filesystem("memory")
    >>> source_token(fs, "/a.parquet", 0) == source_token(fs, "/a.parquet", 0)
    True
    """
    return tokenize(fs.unstrip_protocol(path), *parts)


def remember_source(collection, fs, path: str) -> None:
    """Remember that ``collection`` (a Dask array or a :class:`~scalenc.io.tables.Table`)
    reads the file or directory ``path`` of ``fs``."""
    name = _name_of(collection)
    if name is not None:
        with _LOCK:
            _SOURCES[name] = (fs, path)


def _name_of(collection) -> str | None:
    if isinstance(collection, Table):
        return _name_of(collection.frame)
    if isinstance(collection, da.Array):
        return collection.name
    name = getattr(collection, "_name", None) if is_dask_collection(collection) else None
    return name if isinstance(name, str) else None


def _layer_names(collection) -> set[str]:
    if isinstance(collection, Table):
        return _layer_names(collection.frame)
    if not is_dask_collection(collection):
        return set()
    graph = collection.__dask_graph__()
    layers = getattr(graph, "layers", None)
    names = set(layers) if layers is not None else set()
    own = _name_of(collection)
    if own is not None:
        names.add(own)
    return names


def _file_states(fs, path: str) -> dict:
    """Each file under ``path`` (or ``path`` itself) → [size, stamp]."""
    if fs.isdir(path):
        listing = fs.find(path, detail=True)
    else:
        listing = {path: fs.info(path)}
    root = path.rstrip("/")
    states = {}
    for name, info in sorted(listing.items()):
        stamp = next((info[k] for k in _STAMPS if info.get(k) is not None), None)
        relative = name[len(root) :].lstrip("/") if name.startswith(root) else name
        states[relative or os.path.basename(root)] = [int(info.get("size") or 0), str(stamp)]
    return states


def input_identity(obj) -> dict | None:
    """What ``obj`` is, as JSON (see the module's docstring); None for None.

    Raises
    ------
    IdentityUnavailable
        When ``obj`` is a Dask collection whose graph cannot be tokenized
        deterministically (a task of ``pure=False``, an object without a stable token).

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc.io.identity import input_identity
    >>> a = input_identity(np.arange(6.0).reshape(3, 2))
    >>> a == input_identity(np.arange(6.0).reshape(3, 2)), sorted(a)
    (True, ['data', 'kind', 'shape'])
    """
    if obj is None:
        return None
    if not is_dask_collection(obj) and not isinstance(obj, Table):
        return {
            "kind": "in-memory",
            "shape": list(np.shape(obj)),
            "data": _deterministic_token(obj, "the in-memory input"),
        }
    identity = {
        "kind": type(obj).__name__,
        "graph": _deterministic_token(obj, "the Dask graph of the input"),
    }
    chunks = getattr(obj, "chunks", None)
    if chunks is not None:
        identity["chunks"] = [list(map(_plain, c)) for c in chunks[:1]]
    files = {}
    with _LOCK:
        sources = [_SOURCES[n] for n in _layer_names(obj) if n in _SOURCES]
    for fs, path in sources:
        location = fs.unstrip_protocol(path)
        for name, state in _file_states(fs, path).items():
            files[f"{location}:{name}"] = state
    if files:
        identity["files"] = files
    return identity


def _plain(value):
    return None if value != value else int(value)  # NaN: a partition of unknown length


def _deterministic_token(obj, what: str) -> str:
    try:
        with dask.config.set({"tokenize.ensure-deterministic": True}):
            return tokenize(obj)
    except Exception as exc:
        raise IdentityUnavailable(
            f"{what} cannot be identified across processes ({exc}). Open the data with "
            "scalenc.load (or build its Dask graph from pure functions) to checkpoint the fit."
        ) from None
