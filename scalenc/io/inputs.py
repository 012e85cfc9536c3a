"""Data in: everything becomes row-chunked Dask arrays (X, y) with aligned chunks.

:func:`load` reads every format lazily (Zarr, Parquet, ``.npy``, ``.npz``, CSV, from local
paths and fsspec URLs); :func:`check_xy` turns NumPy arrays, Dask arrays and DataFrames
and Zarr arrays into aligned row-chunked Dask arrays. Labels are aligned by
:mod:`scalenc.io.labels`, blocks moved to a device by :mod:`scalenc.io.devices`.
"""

from __future__ import annotations

import os
from pathlib import Path

import dask.array as da
import numpy as np
from dask.system import CPU_COUNT
from sklearn.utils import check_array

from scalenc.engine.reduce import from_numpy_rows
from scalenc.exceptions import InputError, InputNotFoundError, InputPermissionError
from scalenc.io import readers, tables
from scalenc.io.atomic import check_complete
from scalenc.io.devices import to_device
from scalenc.io.identity import remember_source
from scalenc.io.integrity import DamagedDataError
from scalenc.io.labels import as_dask_labels
from scalenc.io.readers import from_zarr, is_zarr_array
from scalenc.io.tables import Table, is_dask_frame
from scalenc.math.xp import host_dtype, is_device_array

__all__ = [
    "load_columns",
    "DEFAULT_CHUNK_BYTES",
    "as_dask_array",
    "from_numpy_rows",
    "check_xy",
    "load",
    "load_labels",
    "data_dir",
]


DEFAULT_CHUNK_BYTES = 64 * 2**20


def data_dir() -> Path:
    """Where the papers' datasets live: ``$SCALENC_DATA_DIR`` or ``../shared/data``.

    Examples
    --------
    >>> import os
    >>> from unittest import mock
    >>> from scalenc.io.inputs import data_dir
    >>> with mock.patch.dict(os.environ, {"SCALENC_DATA_DIR": "/data/papers"}):
    ...     print(data_dir())
    /data/papers
    """
    return Path(os.environ.get("SCALENC_DATA_DIR", Path.cwd().parent / "shared" / "data"))


# --- features ------------------------------------------------------------------------


def _float_dtype(dtype: np.dtype, name: str) -> np.dtype:
    if dtype in (np.float32, np.float64):
        return np.dtype(dtype)
    if np.dtype(dtype).kind in "biuf":  # booleans, integers and other floats
        return np.dtype(np.float64)
    raise InputError(
        f"{name} must hold numbers; got dtype {dtype}. Convert it with "
        f"{name}.astype('float32') or select the numeric columns."
    )


#: Fewest rows of a default NumPy block split for the cores (see :func:`_auto_rows`).
MIN_PARALLEL_ROWS = 8192


def _auto_rows(n_features: int, itemsize: int, n_rows: int | None = None) -> int:
    """Default rows per block: at most about :data:`DEFAULT_CHUNK_BYTES`, and with
    ``n_rows`` given, equal blocks whose number is a multiple of the cores, where that
    leaves at least :data:`MIN_PARALLEL_ROWS` rows a block.

    At least one block per core: a 50 000 × 42 float64 array is one 17 MB block by bytes
    alone, so every pass over it would run on one core. A multiple of the cores, in equal
    blocks: MNIST in float32 was three 21 400-row blocks by bytes, so on two cores every
    pass ended with one core idle for a third of it (92 s against 78 s with six blocks).
    No more than that: a pass whose per-block result is large (nRBFN's r×r Gram partials)
    holds one per block until the merge, so more blocks cost memory and gain nothing."""
    by_bytes = max(1, DEFAULT_CHUNK_BYTES // max(1, n_features * itemsize))
    if n_rows is None:
        return by_bytes
    blocks = max(CPU_COUNT, -(-n_rows // by_bytes))
    blocks = -(-blocks // CPU_COUNT) * CPU_COUNT
    return min(by_bytes, max(MIN_PARALLEL_ROWS, -(-n_rows // blocks)))


def as_dask_array(
    X,
    *,
    chunk_rows: int | None = None,
    name: str = "X",
    allow_missing_chunks: bool = False,
    known_lengths: bool = True,
) -> da.Array:
    """``X`` as a 2-D float Dask array chunked along rows only.

    NumPy input is wrapped without copying, in row blocks of ``chunk_rows`` (default:
    equal blocks of at most about 64 MB, as many as a multiple of the cores where blocks
    keep 8192 rows).
    Dask input keeps its row chunks unless ``chunk_rows`` is given;
    column chunks are merged. float32 and float64 are kept; integers become float64. A Zarr
    array is checked for missing chunks first (:func:`from_zarr`).

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from scalenc.io.inputs import as_dask_array
    >>> X = as_dask_array(np.arange(20).reshape(10, 2), chunk_rows=4)
    >>> X.chunks, X.dtype
    (((4, 4, 2), (2,)), dtype('float64'))
    >>> as_dask_array(da.ones((10, 4), chunks=(5, 2))).chunks  # rows kept, columns merged
    ((5, 5), (4,))
    >>> as_dask_array(da.arange(5))
    Traceback (most recent call last):
    ...
    scalenc.exceptions.InputError: X must be 2-D (rows, features); got shape (5,). Reshape it, ...
    """
    if isinstance(X, (str, os.PathLike)):
        X, _ = load(X, chunk_rows=chunk_rows, allow_missing_chunks=allow_missing_chunks)
    if is_dask_frame(X):
        X = _frame_to_array(X, name, lengths=known_lengths)
    if not isinstance(X, da.Array):
        if is_zarr_array(X):
            X = from_zarr(X, allow_missing_chunks=allow_missing_chunks)
        else:  # in memory; a CuPy array's blocks stay on the device
            check = _check_device_array if is_device_array(X) else _check_in_memory
            X = check(X, name)
            itemsize = host_dtype(X.dtype).itemsize
            X = from_numpy_rows(X, chunk_rows or _auto_rows(X.shape[1], itemsize, X.shape[0]))
    if X.ndim != 2:
        raise InputError(
            f"{name} must be 2-D (rows, features); got shape {X.shape}. Reshape it, "
            f"e.g. {name}.reshape(-1, 1) for a single feature."
        )
    if known_lengths and any(np.isnan(c) for c in X.chunks[0]):
        raise InputError(
            f"{name} has unknown row chunk sizes {X.chunks[0]}; scalenc needs them to align "
            f"labels and outputs. Call {name}.compute_chunk_sizes() first, or build it with "
            "dataframe.to_dask_array(lengths=True)."
        )
    dtype = _float_dtype(X.dtype, name)
    if dtype != X.dtype:
        X = X.astype(dtype)
    known = not any(np.isnan(c) for c in X.chunks[0])
    if known and chunk_rows is not None and X.chunks[0] != _even(X.shape[0], chunk_rows):
        X = X.rechunk({0: chunk_rows})
    if len(X.chunks[1]) != 1:
        X = X.rechunk({1: -1})
    return X


def _check_in_memory(X, name: str) -> np.ndarray:
    """In-memory input through scikit-learn's ``check_array`` (its messages for sparse,
    complex, object, empty and 1-D input); NaN/inf are counted in the first pass instead."""
    if hasattr(X, "columns") and hasattr(X, "dtypes"):  # a pandas DataFrame
        _check_frame_columns(X, name)
    if isinstance(X, np.memmap) or (
        isinstance(X, np.ndarray) and X.dtype in (np.float32, np.float64)
    ):
        if X.ndim == 2 and X.shape[0] > 0 and X.shape[1] > 0:
            return X  # no copy of a memory map or a float array
    return check_array(
        X,
        accept_sparse=False,
        dtype=[np.float64, np.float32],
        ensure_all_finite=False,
        input_name=name,
        ensure_min_samples=1,
        ensure_min_features=1,
    )


def _check_device_array(X, name: str):
    """An in-memory device array (CuPy's): 2-D, not empty, float32/float64 or integers."""
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise InputError(
            f"{name} must be 2-D (rows, features) with at least one row and one column; "
            f"got shape {tuple(X.shape)}."
        )
    kind = host_dtype(X.dtype).kind
    if kind not in "biuf":
        raise InputError(f"{name} must hold numbers; got dtype {X.dtype}.")
    return X


def _even(n: int, rows: int) -> tuple[int, ...]:
    return tuple([rows] * (n // rows) + ([n % rows] if n % rows else []))


def _frame_to_array(frame, name: str, *, lengths: bool = True) -> da.Array:
    """A Dask DataFrame as a Dask array, one partition a row block, nothing computed on the
    client but (with ``lengths``) the partitions' row counts.

    Fits need the counts (to align labels and number rows): one pass over the frame on
    the workers, only the counts reach the client (a Parquet-backed frame may take them
    from its metadata). Output maps do not: their blocks keep unknown lengths, so
    ``predict`` on a Dask DataFrame stays lazy. Non-numeric columns are refused by name.
    """
    if hasattr(frame, "columns"):
        _check_frame_columns(frame, name)
    return frame.to_dask_array(lengths=True if lengths else None)


def _check_frame_columns(frame, name: str) -> None:
    """A DataFrame's (pandas or Dask) non-numeric columns refused by name."""
    kinds = [getattr(dtype, "kind", "O") for dtype in frame.dtypes]
    readers.check_feature_columns(list(frame.columns), kinds, "", f"the DataFrame {name}")


def check_xy(
    X,
    y=None,
    *,
    chunk_rows: int | None = None,
    estimator=None,
    require_y: bool = False,
    known_lengths: bool = True,
) -> tuple[da.Array, da.Array | None]:
    """Validate and align (X, y) as row-chunked Dask arrays with identical row chunks.

    Every estimator calls this first; it is public so that a pipeline can check its input
    (and see the blocks scalenc will stream) before a long fit. Nothing is computed but the
    row counts of a Dask DataFrame's partitions.

    Parameters
    ----------
    X : array-like, Dask array, Dask or pandas DataFrame, Zarr array, or path
        The features, 2-D (rows × features). NumPy input is wrapped without copying;
        integers become float64, float32 stays float32. A path or URL is opened with
        :func:`load`.
    y : array-like, Dask array or Series, optional
        One label per row (``-1``, ``None`` or NaN for unlabeled rows); rechunked to X's
        row blocks when they differ.
    chunk_rows : int, optional
        Rows per block. NumPy input defaults to blocks of about 64 MB, at least one per
        core; Dask input keeps its row chunks unless this is given. Column chunks are always merged.
    estimator : estimator, optional
        Named in the error raised when ``require_y`` is set and y is None.
    require_y : bool, default=False
        Raise if ``y`` is None.
    known_lengths : bool, default=True
        Count the rows of a Dask DataFrame's partitions. False (output maps of X alone)
        keeps them unknown, so that ``predict`` on a DataFrame stays lazy.

    Returns
    -------
    X : dask.array.Array
        2-D, float32 or float64, chunked along rows only.
    y : dask.array.Array or None
        1-D with exactly X's row chunks, or None when ``y`` is None.

    Raises
    ------
    ValueError
        X is not 2-D, has no rows or no columns, holds non-numeric values, has unknown
        chunk sizes, or y has another number of rows than X; the message says how to fix it.

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc import check_xy
    >>> X = np.arange(20, dtype=np.float32).reshape(10, 2)
    >>> y = np.array([0, 1] * 5)
    >>> Xd, yd = check_xy(X, y, chunk_rows=4)
    >>> Xd.chunks, Xd.dtype
    (((4, 4, 2), (2,)), dtype('float32'))
    >>> yd.chunks
    ((4, 4, 2),)
    >>> check_xy(X, y[:9])
    Traceback (most recent call last):
    ...
    scalenc.exceptions.InputError: X has 10 rows but y has 9 labels; pass one label per row ...
    """
    if require_y and y is None:
        owner = type(estimator).__name__ if estimator is not None else "This estimator"
        raise InputError(
            f"{owner} requires y to be passed, but the target y is None. Pass one label per "
            "row (-1 for unlabeled rows)."
        )
    X = as_dask_array(X, chunk_rows=chunk_rows, known_lengths=known_lengths or y is not None)
    for size, what in zip(X.shape, ("sample", "feature")):
        if size == 0:
            raise InputError(
                f"Found array with 0 {what}(s) (shape={X.shape}) while a minimum of 1 is required."
            )
    if y is None:
        return X, None
    return X, as_dask_labels(y, X)


# --- files ---------------------------------------------------------------------------


def load(
    path,
    *,
    labels=None,
    label_column: str | None = None,
    feature_columns=None,
    chunk_rows: int | None = None,
    allow_missing_chunks: bool = False,
    storage_options: dict | None = None,
    device: str = "cpu",
    exclude_columns=(),
) -> tuple[da.Array, da.Array | None]:
    """Open a dataset lazily as ``(X, y)`` (y is None when there are no labels).

    Parameters
    ----------
    path : str or path-like
        A local path or an fsspec URL (``file://``, ``memory://``, ``s3://`` …): a Zarr
        array, a Zarr group holding arrays ``X`` and (optionally) ``y``, a Parquet file or
        dataset directory, ``.npy`` (memory-mapped locally, read in row blocks by the
        workers from a URL), ``.npz`` (arrays ``X`` and ``y``) or ``.csv`` (with a header
        row; ``.npz`` and CSV are read whole).
    labels : str or array-like, optional
        A second Zarr array / ``.npy`` file (path or URL), or a component name inside the
        Zarr group.
    label_column : str, optional
        Parquet/CSV: the column holding the labels.
    feature_columns : list of str or str, optional
        Parquet/CSV: the feature columns, by name or one glob pattern (``"px_*"``); by
        default every column but the label column. Index columns stored by pandas or Dask
        (``__null_dask_index__``, ``__index_level_0__``) are never features.
    chunk_rows : int, optional
        Rows per block; Parquet keeps its row groups, Zarr its chunks, unless given.
    allow_missing_chunks : bool, default False
        Read Zarr chunks absent from the store as the fill value (with a warning) instead
        of refusing the store; for stores written with ``write_empty_chunks=False``.
    storage_options : dict, optional
        Passed to fsspec for URLs (credentials, endpoint); never written anywhere.
    device : {"cpu", "gpu"}, default="cpu"
        Where X's blocks live: ``"gpu"`` makes each block a CuPy array on the current
        CUDA device as it is read (:func:`to_device`), and every estimator's block math
        then runs there; labels stay on the host. Needs ``pip install 'scalenc[gpu]'``.
    exclude_columns : sequence of str, default=()
        Parquet/CSV: columns that are neither features nor labels (a graph's node ids,
        :func:`load_columns`).

    Notes
    -----
    A Zarr store is checked before anything is read: chunks missing from the store (Zarr
    would read them as the fill value) and unreadable metadata raise
    :class:`scalenc.io.integrity.DamagedDataError` naming the store, the array and the
    chunks; a chunk that cannot be decoded raises it when read.

    Returns
    -------
    X : dask.array.Array or Table
        The features, 2-D, chunked along rows only (float32 stays float32). An array
        read from a Parquet or CSV file keeps its column names: a model fitted on it
        has them as ``feature_names_in_``, and its ``predict`` takes the columns by
        name (in any order, refusing a table that lacks one). A
        :class:`~scalenc.io.tables.Table` for a Parquet or CSV file with string,
        categorical or boolean feature columns, which every estimator takes and encodes
        (see their ``categorical`` parameter).
    y : dask.array.Array or None
        The labels with X's row chunks, or None when the dataset has none.

    Examples
    --------
    Write a small dataset to Zarr and to Parquet, and open both lazily:

    >>> import os, shutil, tempfile
    >>> import dask.array as da
    >>> import numpy as np
    >>> from scalenc import load, write_dataset
    >>> folder = tempfile.mkdtemp()
    >>> X = np.arange(12, dtype=np.float32).reshape(6, 2)
    >>> y = np.array([0, 0, 1, 1, 2, -1])
    >>> Xd = da.from_array(X, chunks=3)  # two row blocks
    >>> path = write_dataset(Xd, y, os.path.join(folder, "train.zarr"))
    >>> X2, y2 = load(path)
    >>> X2.shape, str(X2.dtype), y2.compute().tolist()
    ((6, 2), 'float32', [0, 0, 1, 1, 2, -1])
    >>> _ = write_dataset(Xd, y, os.path.join(folder, "train.parquet"))
    >>> X3, y3 = load(os.path.join(folder, "train.parquet"), label_column="y")
    >>> bool((X3.compute() == X).all())
    True
    >>> shutil.rmtree(folder)

    URLs take their credentials in ``storage_options``:

    >>> X, y = load("s3://bucket/table/", label_column="y",
    ...             storage_options={"anon": False})  # doctest: +SKIP
    """
    url = os.fspath(path)
    fs, fs_path = readers.filesystem(url, storage_options)
    kind = readers.kind_of(fs, fs_path)
    columns = {
        "label_column": label_column,
        "feature_columns": feature_columns,
        "source": url,
        "exclude": tuple(exclude_columns),
    }
    _check_readable(fs, fs_path, url)
    check_complete(fs, fs_path)  # an output whose publishing on an object store was cut
    if kind == "parquet":
        X, y = readers.read_parquet(fs, fs_path, **columns)
    elif kind == "npy":
        X, y = readers.read_npy(fs, fs_path, rows_per_block=chunk_rows or 2**16), None
    elif kind == "npz":
        X, y = readers.read_npz(fs, fs_path, with_labels=labels is None)
    elif kind == "csv":
        X, y = readers.read_csv(fs, fs_path, **columns)
    else:
        X, y = _load_zarr(url, labels, storage_options)
        labels = None if isinstance(labels, str) and not _looks_like_path(labels) else labels
    if not isinstance(X, Table):  # a table's columns are encoded by the estimator
        names = tables.column_names(X)  # a numeric table's, checked by name at predict
        X = as_dask_array(X, chunk_rows=chunk_rows, allow_missing_chunks=allow_missing_chunks)
        if device != "cpu":
            X = to_device(X, device)
        tables.remember_columns(X, names)
    elif device != "cpu":
        raise InputError(
            f"device={device!r} needs numeric features; this table has categorical or "
            "string columns, which are encoded by the estimator on the host."
        )
    else:
        X = _table_blocks(X, chunk_rows)
    remember_source(X, fs, fs_path)
    if labels is not None:
        y = _open_labels(labels, storage_options)
    if y is not None:
        y = as_dask_labels(y, X, allow_missing_chunks=allow_missing_chunks)
        if labels is None:
            remember_source(y, fs, fs_path)
        elif isinstance(labels, (str, os.PathLike)) and _looks_like_path(os.fspath(labels)):
            remember_source(y, *readers.filesystem(os.fspath(labels), storage_options))
    return X, y


def load_columns(path, columns, *, storage_options: dict | None = None) -> list[da.Array]:
    """Columns of a Parquet or CSV table, each as a lazy 1-D Dask array (Parquet: one
    block per row group; CSV: read whole): a graph's node ids and labels.

    Examples
    --------
    >>> import os, tempfile
    >>> import pandas as pd
    >>> from scalenc.io.inputs import load_columns
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "nodes.parquet")
    >>> pd.DataFrame({"id": ["a", "b"], "y": [1, -1]}).to_parquet(path)
    >>> ids, y = load_columns(path, ["id", "y"])
    >>> ids.compute().tolist(), y.compute().tolist()
    (['a', 'b'], [1, -1])
    >>> folder.cleanup()
    """
    url = os.fspath(path)
    fs, fs_path = readers.filesystem(url, storage_options)
    _check_readable(fs, fs_path, url)
    kind = readers.kind_of(fs, fs_path)

    def pick(names):
        missing = [c for c in columns if c not in names]
        if missing:
            raise InputError(f"{url} has no column(s) {missing}; its columns are {names[:20]}.")
        return [[c] for c in columns]

    if kind == "parquet":
        return [a[:, 0] for a in readers.read_parquet_columns(fs, fs_path, pick, source=url)]
    if kind == "csv":
        frame = readers.read_csv_frame(fs, fs_path, url)
        pick(list(frame.columns))
        return [da.from_array(frame[c].to_numpy(), chunks=2**20) for c in columns]
    raise InputError(
        f"Columns by name ({', '.join(map(repr, columns))}) need a table: {url!r} reads as "
        f"{kind}; give a Parquet dataset or a CSV file."
    )


def load_labels(
    path,
    *,
    chunk_rows: int | None = None,
    allow_missing_chunks: bool = False,
    storage_options: dict | None = None,
) -> da.Array:
    """Labels alone, as a lazy 1-D Dask array: a graph's nodes without features.

    Parameters
    ----------
    path : str or path-like
        A ``.npy`` file or a Zarr array, local path or fsspec URL; one label per node
        (the unlabeled marker for a node without one).
    chunk_rows : int, optional
        Labels per block (default: the Zarr array's chunks, or 2**20 for ``.npy``).
    allow_missing_chunks : bool, default False
        As for :func:`load`.
    storage_options : dict, optional
        Passed to fsspec for URLs.

    Returns
    -------
    dask.array.Array of shape (n,)

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from scalenc.io.inputs import load_labels
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = os.path.join(folder.name, "y.npy")
    >>> np.save(path, np.array([0, 1, -1, 1]))
    >>> load_labels(path, chunk_rows=3).chunks
    ((3, 1),)
    >>> folder.cleanup()
    """
    url = os.fspath(path)
    fs, fs_path = readers.filesystem(url, storage_options)
    _check_readable(fs, fs_path, url)
    y = _open_labels(url, storage_options)
    if readers.is_zarr_array(y):
        y = readers.from_zarr(y, allow_missing_chunks=allow_missing_chunks)
    elif not hasattr(y, "shape"):
        raise InputError(
            f"{url!r} is a Zarr group; labels are one array: give its path (e.g. {url}/y)."
        )
    if not isinstance(y, da.Array):
        y = da.from_array(y, chunks=chunk_rows or 2**20)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise InputError(f"Labels must be 1-D, one per node; {url!r} has shape {y.shape}.")
    if chunk_rows is not None:
        y = y.rechunk(chunk_rows)
    remember_source(y, fs, fs_path)
    return y


def _table_blocks(X: Table, chunk_rows: int | None) -> Table:
    """A table read whole (CSV) in the row blocks an array of its rows gets
    (:func:`as_dask_array`): its labels are aligned to them, and its encoded features keep
    them. A table read by the workers (Parquet) keeps its row groups."""
    if not tables.in_memory(X.frame):
        return X
    n, p = X.shape
    return Table(X.frame, _even(n, chunk_rows or _auto_rows(p, np.dtype(np.float64).itemsize, n)))


def _check_readable(fs, path: str, url: str) -> None:
    """Refuse a path that does not exist, naming the nearest part that does (a bucket name
    wrong?), or one the credentials may not read."""
    try:
        if fs.exists(path):
            return
        parent = path.rstrip("/")
        while "/" in parent.strip("/") and not fs.exists(parent := parent.rsplit("/", 1)[0]):
            pass
        found = fs.exists(parent) and parent.strip("/") != path.strip("/")
    except PermissionError as exc:
        raise InputPermissionError(
            f"Cannot read {url!r}: {exc}. Check the credentials (storage_options=, "
            "--storage-option KEY=VALUE, or the AWS_* environment variables)."
        ) from exc
    where = (
        f"the nearest part that exists is {readers.display(fs, parent)!r}"
        if found
        else "no part of it exists (check the bucket or root name and the credentials)"
    )
    raise InputNotFoundError(f"{url!r} does not exist; {where}. Check the path.")


def _looks_like_path(value: str) -> bool:
    return "/" in value or "." in Path(value).name or "://" in value


def _open_labels(labels, storage_options=None):
    if isinstance(labels, (str, os.PathLike)):
        url = os.fspath(labels)
        fs, fs_path = readers.filesystem(url, storage_options)
        if url.endswith(".npy"):
            return readers.read_npy(fs, fs_path, rows_per_block=2**20)
        return readers.open_zarr(url, storage_options)
    return labels


def _load_zarr(url: str, labels, storage_options=None):
    node = readers.open_zarr(url, storage_options)
    if hasattr(node, "shape"):
        return node, None
    try:
        keys = set(node.array_keys())
    except Exception as exc:  # an array's metadata in the group cannot be parsed
        raise DamagedDataError(
            f"Cannot read the metadata of the arrays in the Zarr group {url!r} "
            f"({type(exc).__name__}: {exc}). A zarr.json (or .zarray) file is damaged; "
            "restore it from a good copy or rewrite the store."
        ) from exc
    if "X" not in keys:
        raise InputError(
            f"The Zarr group {url!r} holds arrays {sorted(keys)}; scalenc reads features "
            "from an array named 'X' (and labels from 'y'). Point --data at the array itself."
        )
    y = None
    if isinstance(labels, str) and not _looks_like_path(labels):
        if labels not in keys:
            raise InputError(f"The Zarr group {url!r} has no labels array {labels!r}.")
        y = node[labels]
    elif labels is None and "y" in keys:
        y = node["y"]
    return node["X"], y
