"""Datasets read lazily from local paths and fsspec URLs: Zarr, Parquet, ``.npy``, ``.npz``, CSV.

Every path goes through fsspec (``file://``, ``memory://``, ``s3://`` with
``storage_options``, and whatever fsspec resolves); a plain path is a local file. The
workers read the blocks themselves: the client opens only metadata (Parquet footers, the
``.npy`` header, Zarr's ``zarr.json``), except for ``.npz`` and CSV, which are read whole
(small data).

Parquet: one row block per row group, lengths from the footers. Index columns are never
features: those the pandas metadata names (a Dask-written dataset's
``__null_dask_index__``, pandas' ``__index_level_0__``) and any column named like them.
``feature_columns`` (names or one glob pattern) and ``label_column`` select the rest.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import warnings

import dask
import dask.array as da
import fsspec
import numpy as np
from dask.base import tokenize

from scalenc.exceptions import DataWarning, InputError, InputNotFoundError
from scalenc.io.identity import source_token
from scalenc.io.integrity import DamagedDataError, ReadGuard, check_chunks
from scalenc.io.tables import Table, column_kind, remember_columns

__all__ = [
    "LABEL_LIKE",
    "filesystem",
    "kind_of",
    "check_feature_columns",
    "split_frame",
    "read_parquet",
    "read_npy",
    "read_npz",
    "read_csv",
    "read_csv_frame",
    "open_zarr",
    "from_zarr",
    "is_zarr_array",
]


#: Column names that usually hold labels: read as features only with a warning.
LABEL_LIKE = ("y", "label", "labels", "target", "class")

#: Columns that hold a DataFrame index, not data, when a writer stored the index.
_INDEX_COLUMN = re.compile(r"^(__null_dask_index__|__index_level_\d+__)$")


def filesystem(path, storage_options: dict | None = None):
    """(fsspec filesystem, path within it) of a local path or a URL."""
    return fsspec.core.url_to_fs(str(path), **(storage_options or {}))


def kind_of(fs, path: str) -> str:
    """``"parquet"``, ``"npy"``, ``"npz"``, ``"csv"`` or ``"zarr"``, from the name (and, for
    a directory, whether it holds ``.parquet`` files)."""
    name = path.rstrip("/").rsplit("/", 1)[-1].lower()
    for suffix, kind in ((".parquet", "parquet"), (".npy", "npy"), (".npz", "npz")):
        if name.endswith(suffix):
            return kind
    if name.endswith((".csv", ".txt")):
        return "csv"
    if fs.isdir(path):
        root = path.rstrip("/")
        if any(fs.exists(f"{root}/{meta}") for meta in ("zarr.json", ".zgroup", ".zarray")):
            return "zarr"
        if _parquet_files(fs, root):
            return "parquet"
    return "zarr"


def _parquet_files(fs, root: str) -> list[str]:
    return sorted(f for f in fs.find(root) if f.endswith(".parquet"))


def display(fs, path: str) -> str:
    """A path as the user would write it: plain for the local file system, else a URL."""
    return path if "file" in np.atleast_1d(fs.protocol) else fs.unstrip_protocol(path)


# --- columns -------------------------------------------------------------------------------


def check_feature_columns(names, kinds, label_column, source) -> None:
    """Refuse non-numeric feature columns by name (where they reach an array); warn when a
    column named like a label is read as a feature because no ``label_column`` was given."""
    bad = [name for name, kind in zip(names, kinds) if kind not in "biuf"]
    if bad:
        raise InputError(
            f"{source}: feature column(s) {bad[:10]} are not numeric. Select the numeric "
            "columns (feature_columns=, --feature-columns), pass the table itself (a "
            "DataFrame or the file) so that scalenc encodes them, or name the labels with "
            "label_column= (--label-column)."
        )
    warn_label_like(names, label_column, source)


def warn_label_like(names, label_column, source) -> None:
    """Warn when a column named like a label is read as a feature because no
    ``label_column`` was given."""
    if label_column is None:
        named = [name for name in names if str(name).lower() in LABEL_LIKE]
        if named:
            warnings.warn(
                f"{source}: column {named[0]!r} is read as a feature because no label column "
                f"was named; pass label_column={named[0]!r} (--label-column {named[0]}) if it "
                "holds the labels.",
                DataWarning,
                stacklevel=5,
            )


def _select(names, index_columns, label_column, feature_columns, source, exclude=()) -> list[str]:
    """The feature columns: ``feature_columns`` (names, or one glob pattern) or every
    column but the label, the index columns and ``exclude`` (a node-id column), in the
    file's order."""
    for column in (label_column, *exclude):
        if column is not None and column not in names:
            raise InputError(f"{source} has no column {column!r}; its columns are {names[:20]}.")
    if feature_columns is not None and not isinstance(feature_columns, str):
        for column in exclude:
            if column in feature_columns:
                raise InputError(
                    f"Column {column!r} holds node ids; it cannot also be a feature column."
                )
    data = [
        c
        for c in names
        if c not in index_columns and not _INDEX_COLUMN.match(str(c)) and c not in exclude
    ]
    if feature_columns is None:
        return [c for c in data if c != label_column]
    if isinstance(feature_columns, str):
        chosen = [c for c in data if fnmatch.fnmatchcase(str(c), feature_columns)]
        if not chosen:
            raise InputError(
                f"{source}: no column matches feature_columns={feature_columns!r}; its "
                f"columns are {data[:20]}."
            )
        return [c for c in chosen if c != label_column]
    missing = [c for c in feature_columns if c not in data]
    if missing:
        raise InputError(f"{source} has no column(s) {missing}; its columns are {data[:20]}.")
    if label_column in feature_columns:
        raise InputError(f"label_column {label_column!r} is also among feature_columns.")
    return list(feature_columns)


def split_frame(frame, label_column, source, feature_columns=None, exclude=()):
    """(features, labels) of an in-memory DataFrame: the feature columns as a DataFrame
    (numbers; :func:`scalenc.load` makes it an array and keeps its column names), or as a
    :class:`~scalenc.io.tables.Table` when some are not numbers (string, categorical or
    boolean columns, which the estimators encode); the labels as a NumPy array."""
    names = list(frame.columns)
    features = _select(names, (), label_column, feature_columns, source, exclude)
    y = frame[label_column].to_numpy() if label_column is not None else None
    if any(column_kind(frame[c].dtype) != "numeric" for c in features):
        warn_label_like(features, label_column, source)
        return Table(frame[features]), y
    kinds = [getattr(frame[c].dtype, "kind", "O") for c in features]
    check_feature_columns(features, kinds, label_column, source)
    return frame[features], y


class StableFileSystem:
    """An fsspec file system whose Dask token is the same in every process (fsspec's own
    depends on the process), so a graph reading files has the same name wherever it is
    built: what a checkpoint recognises a loaded input by (:mod:`scalenc.io.identity`)."""

    def __init__(self, fs):
        self.fs = fs

    def __dask_tokenize__(self):
        return ("scalenc-file-system", tuple(np.atleast_1d(self.fs.protocol)))


# --- Parquet -------------------------------------------------------------------------------


@contextlib.contextmanager
def _parquet_errors(fs, path: str, what: str):
    """pyarrow's errors on bytes it cannot decode (``Corrupt snappy compressed data.``,
    ``Parquet magic bytes not found``) as a :class:`DamagedDataError` naming the file; the
    file system's own errors (a lost connection, a missing file, a permission: an
    ``errno``) pass as they are."""
    import pyarrow as pa  # deferred: pyarrow is imported only for Parquet input

    try:
        yield
    except (pa.ArrowException, OSError) as exc:
        if isinstance(exc, OSError) and (type(exc) is not OSError or exc.errno is not None):
            raise
        raise DamagedDataError(
            f"Cannot read {what} of the Parquet file {display(fs, path)}: "
            f"{str(exc).rstrip('.')}. The file is damaged or not Parquet; restore it from a "
            "good copy or write it again."
        ) from None


def _row_group_table(fs, path: str, index: int, columns: list[str]):
    """The Arrow table of ``columns`` of one row group."""
    import pyarrow.parquet as pq  # deferred: pyarrow is imported only for Parquet input

    with _parquet_errors(fs, path, f"row group {index}"), fs.open(path, "rb") as fh:
        return pq.ParquetFile(fh).read_row_group(index, columns=columns)


def _read_row_group(fs, path: str, index: int, columns) -> np.ndarray:
    """One row group's ``columns`` (a list) as a 2-D array, or its column ``columns`` (a
    name) as a 1-D one."""
    names = [columns] if isinstance(columns, str) else columns
    table = _row_group_table(fs, path, index, names)
    arrays = [table.column(c).to_numpy(zero_copy_only=False) for c in names]
    return arrays[0] if isinstance(columns, str) else np.column_stack(arrays)


def _read_row_group_frame(path: str, index: int, *, fs, columns: list[str]):
    return _row_group_table(fs.fs, path, index, columns).to_pandas()


def _row_groups(footers) -> list[tuple[str, int, int]]:
    """(file, row group, rows) of each row group that has rows, in the files' order."""
    return [
        (file, group, meta.row_group(group).num_rows)
        for file, _, meta in footers
        for group in range(meta.num_row_groups)
        if meta.row_group(group).num_rows
    ]


def _row_group_array(fs, footers, columns, dtype, read: str, name: str) -> da.Array:
    """``columns`` of every row group as one lazy Dask array, a block per row group read
    by the workers (:func:`_read_row_group`; its tasks named ``read-{read}-…``, its
    blocks ``{name}-…``)."""
    blocks = []
    for file, group, rows in _row_groups(footers):
        token = source_token(fs, file, group, columns)
        block = dask.delayed(_read_row_group, pure=True)(
            fs, file, group, columns, dask_key_name=f"read-{read}-{token}"
        )
        shape = (rows,) if isinstance(columns, str) else (rows, len(columns))
        blocks.append(da.from_delayed(block, shape=shape, dtype=dtype, name=f"{name}-{token}"))
    return da.concatenate(blocks, axis=0)


def _parquet_table(fs, footers, features, meta) -> Table:
    """The feature columns of the row groups as a :class:`Table`: a Dask DataFrame of one
    partition per row group, read by the workers, with the rows from the footers."""
    import dask.dataframe as dd  # deferred: only tables with non-numeric columns need it

    files, groups, lengths = zip(*_row_groups(footers))
    frame = dd.from_map(
        _read_row_group_frame,
        list(files),
        list(groups),
        args=None,
        meta=meta,
        enforce_metadata=False,
        fs=StableFileSystem(fs),
        columns=features,
    )
    return Table(frame, list(lengths))


def _index_columns(schema) -> set[str]:
    """The columns the pandas metadata names as the stored index."""
    meta = schema.metadata or {}
    raw = meta.get(b"pandas")
    if not raw:
        return set()
    try:
        entries = json.loads(raw).get("index_columns", [])
    except (ValueError, AttributeError):
        return set()
    return {entry for entry in entries if isinstance(entry, str)}


def _parquet_footers(fs, path: str, source: str) -> list:
    """(file, Arrow schema, metadata) of each file of a Parquet file or dataset directory:
    only the footers are read."""
    import pyarrow.parquet as pq  # deferred: pyarrow is imported only for Parquet input

    files = _parquet_files(fs, path.rstrip("/")) if fs.isdir(path) else [path]
    if not files:
        raise InputNotFoundError(f"No .parquet files under {source!r}.")
    footers = []
    for file in files:
        with _parquet_errors(fs, file, "the footer"), fs.open(file, "rb") as fh:
            handle = pq.ParquetFile(fh)
            footers.append((file, handle.schema_arrow, handle.metadata))
    return footers


def read_parquet(
    fs, path: str, *, label_column=None, feature_columns=None, source=None, exclude=()
):
    """A Parquet file or dataset directory as lazy (X, y): one block per row group."""
    source = source or path
    footers = _parquet_footers(fs, path, source)
    schema = footers[0][1]
    names = list(schema.names)
    index = _index_columns(schema)
    features = _select(names, index, label_column, feature_columns, source, exclude)
    meta = schema.empty_table().select(features).to_pandas()
    if any(column_kind(meta[c].dtype) != "numeric" for c in features):
        warn_label_like(features, label_column, source)
        X = _parquet_table(fs, footers, features, meta)
    else:
        kinds = [np.dtype(schema.field(c).type.to_pandas_dtype()).kind for c in features]
        check_feature_columns(features, kinds, label_column, source)
        dtype = np.result_type(*[schema.field(c).type.to_pandas_dtype() for c in features])
        X = _row_group_array(fs, footers, features, dtype, "row-group", "rows")
    remember_columns(X, features)
    y = None
    if label_column is not None and _row_groups(footers):
        y_dtype = schema.field(label_column).type.to_pandas_dtype()
        y_dtype = np.dtype(y_dtype) if y_dtype is not object else object
        y = _row_group_array(fs, footers, label_column, y_dtype, "labels", "labels")
    return X, y


def read_parquet_columns(fs, path: str, pick, *, source=None) -> list[da.Array]:
    """Groups of columns of a Parquet file or dataset as lazy 2-D Dask arrays, one block per
    row group, each read by pyarrow (only the footers are read here; no dask.dataframe).

    ``pick(names)`` gets the data columns (a stored pandas index left out) and returns the
    groups of column names to read: one array per group, of its columns' common dtype
    (object for strings, which the caller refuses by dtype).
    """
    source = source or path
    footers = _parquet_footers(fs, path, source)
    schema = footers[0][1]
    index = _index_columns(schema)
    names = [c for c in schema.names if c not in index and not _INDEX_COLUMN.match(str(c))]
    out = []
    for columns in pick(names):
        dtype = np.result_type(*[np.dtype(schema.field(c).type.to_pandas_dtype()) for c in columns])
        out.append(_row_group_array(fs, footers, columns, dtype, "columns", "columns"))
    return out


# --- NumPy files and CSV ----------------------------------------------------------------------


def _read_npy_rows(fs, path: str, offset: int, start: int, stop: int, dtype, shape):
    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
    with fs.open(path, "rb") as fh:
        fh.seek(offset + start * row_bytes)
        data = fh.read((stop - start) * row_bytes)
    return np.frombuffer(data, dtype=dtype).reshape((stop - start, *shape[1:]))


#: The first bytes of each NumPy file format.
_NUMPY_MAGIC = {".npy": b"\x93NUMPY", ".npz": b"PK"}


@contextlib.contextmanager
def _numpy_errors(fs, path: str, kind: str):
    """NumPy's errors on a file it cannot read (``This file contains pickled (object)
    data`` for any bytes that are not NumPy's) as a :class:`DamagedDataError` naming the
    file and saying what is wrong with it."""
    import zipfile

    try:
        yield
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        if isinstance(exc, InputError) or (isinstance(exc, OSError) and exc.errno is not None):
            raise
        with fs.open(path, "rb") as fh:
            head = fh.read(len(_NUMPY_MAGIC[kind]))
        why = (
            f"it does not start as a {kind} file does (damaged, or another format named {kind})"
            if head != _NUMPY_MAGIC[kind]
            else str(exc).rstrip(".")
        )
        raise DamagedDataError(
            f"Cannot read {display(fs, path)} as {kind}: {why}. Restore it from a good copy "
            "or write it again (numpy.save / numpy.savez)."
        ) from None


def read_npy(fs, path: str, *, rows_per_block: int):
    """A ``.npy`` file: memory-mapped when local, else lazy row blocks read by the workers
    (the header alone is read on the client)."""
    if "file" in np.atleast_1d(fs.protocol):
        with _numpy_errors(fs, path, ".npy"):
            return np.load(path, mmap_mode="r", allow_pickle=False)
    with _numpy_errors(fs, path, ".npy"), fs.open(path, "rb") as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise InputError(f"{path}: .npy format version {version} is not supported.")
        offset = fh.tell()
    if fortran or dtype.hasobject:
        raise InputError(f"{path}: a Fortran-ordered or object .npy cannot be read in row blocks.")
    blocks = []
    for start in range(0, shape[0], rows_per_block):
        stop = min(shape[0], start + rows_per_block)
        token = source_token(fs, path, start, stop)
        read = dask.delayed(_read_npy_rows, pure=True)(
            fs, path, offset, start, stop, dtype, shape, dask_key_name=f"read-npy-{token}"
        )
        blocks.append(
            da.from_delayed(
                read, shape=(stop - start, *shape[1:]), dtype=dtype, name=f"npy-rows-{token}"
            )
        )
    return da.concatenate(blocks, axis=0)


def read_npz(fs, path: str, *, with_labels: bool):
    """``.npz`` (arrays ``X`` and optionally ``y``), read whole: for small data."""
    with (
        _numpy_errors(fs, path, ".npz"),
        fs.open(path, "rb") as fh,
        np.load(fh, allow_pickle=False) as npz,
    ):
        if "X" not in npz:
            raise InputError(f"{path} holds {list(npz.keys())}; scalenc expects an array 'X'.")
        return npz["X"], (npz["y"] if "y" in npz and with_labels else None)


def read_csv(fs, path: str, *, label_column=None, feature_columns=None, source=None, exclude=()):
    """CSV with a header row, read whole (for small data; :func:`read_csv_frame`)."""
    frame = read_csv_frame(fs, path, source or path)
    return split_frame(frame, label_column, source or path, feature_columns, exclude)


def read_csv_frame(fs, path: str, source: str):
    """A CSV file with a header row as a pandas DataFrame, refusing, with the file's name,
    what is not one: bytes that are not UTF-8 text, text the parser cannot split, a
    header without data rows, and a last line with fewer fields than the header (a file
    cut short while it was written or copied: pandas would fill it with NaN)."""
    import io

    import pandas as pd  # deferred: pandas is imported only for CSV input

    with fs.open(path, "rb") as fh:
        data = fh.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DamagedDataError(
            f"{source} is not CSV text: byte {data[exc.start]:#04x} at offset {exc.start} is "
            "not UTF-8. Give a CSV file (UTF-8, with a header row), or name a Parquet, Zarr, "
            ".npy or .npz file with its extension."
        ) from None
    try:
        frame = pd.read_csv(io.StringIO(text))
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise DamagedDataError(f"{source} cannot be read as CSV: {exc}".rstrip(".") + ".") from None
    if frame.empty:
        raise InputError(
            f"{source} has a header row ({', '.join(map(str, frame.columns[:10]))}) but no "
            "data rows; give a file with at least one row."
        )
    _check_last_line(text, len(frame.columns), source)
    return frame


def _check_last_line(text: str, n_columns: int, source: str) -> None:
    """Refuse a CSV text whose last line has fewer fields than the header, or ends in an
    empty field where the file has no line end (cut just after a comma), naming it."""
    import csv

    body = text.rstrip("\r\n")
    last = body.rsplit("\n", 1)[-1].rstrip("\r")
    try:
        fields = next(csv.reader([last]))
    except (csv.Error, StopIteration):  # inside a quoted multi-line field: pandas parsed it
        return
    if len(fields) < n_columns:
        what = f"has {len(fields)} field(s) where the header has {n_columns}"
    elif fields[-1] == "" and not text.endswith("\n"):
        what = "ends in an empty field, and the file in no line end"
    else:
        return
    raise DamagedDataError(
        f"{source}: line {body.count(chr(10)) + 1} ({last[:60]!r}) {what}: the file looks "
        "cut short (a copy or a write that stopped). Restore the whole file, or remove "
        "that line."
    )


# --- Zarr ----------------------------------------------------------------------------------


def open_zarr(url: str, storage_options: dict | None = None):
    """A Zarr array or group at a path or URL, opened read-only (metadata only)."""
    import zarr  # deferred: zarr is imported only for Zarr input

    kwargs = {"storage_options": storage_options} if storage_options and "://" in url else {}
    try:
        return zarr.open(url, mode="r", **kwargs)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DamagedDataError(
            f"Cannot read the metadata of the Zarr store {url!r} ({type(exc).__name__}: "
            f"{exc}). Its zarr.json (or .zarray/.zgroup) is damaged; restore it from a good "
            "copy or rewrite the store."
        ) from exc
    except Exception as exc:
        raise InputNotFoundError(
            f"Cannot open {url!r} as Zarr, Parquet, .npy, .npz or CSV ({exc}). Check the path."
        ) from exc


def from_zarr(array, *, allow_missing_chunks: bool = False) -> da.Array:
    """A Zarr array as a lazy Dask array, refusing a store with missing chunks and naming a
    damaged chunk when it is read (:mod:`scalenc.io.integrity`).

    The chunk check lists the store's keys (no data is read); with
    ``allow_missing_chunks`` absent chunks are read as the fill value, with a warning.

    Examples
    --------
    >>> import os, tempfile
    >>> import zarr
    >>> from scalenc.io.readers import from_zarr
    >>> folder = tempfile.TemporaryDirectory()
    >>> z = zarr.open_array(
    ...     os.path.join(folder.name, "x.zarr"), mode="w", shape=(10, 2), chunks=(4, 2), dtype="f4"
    ... )
    >>> z[:] = 1.0
    >>> X = from_zarr(z)
    >>> X.chunks, float(X.sum().compute())
    (((4, 4, 2), (2,)), 20.0)

    A store whose chunk of rows 8–9 was never written is refused, not read as zeros:

    >>> z = zarr.open_array(
    ...     os.path.join(folder.name, "y.zarr"), mode="w", shape=(10, 2), chunks=(4, 2), dtype="f4"
    ... )
    >>> z[:8] = 1.0
    >>> from_zarr(z)
    Traceback (most recent call last):
    ...
    scalenc.exceptions.DamagedDataError: ... is missing 1 of its 3 chunks: ... (rows 8–9). ...
    >>> folder.cleanup()
    """
    check_chunks(array, allow_missing=allow_missing_chunks)
    guard = ReadGuard(array)
    name = f"from-zarr-{tokenize(_zarr_location(array), 'scalenc-read-guard')}"
    return da.from_array(guard, chunks=array.chunks, name=name, lock=False, asarray=True)


def _zarr_location(array):
    """What names a Zarr array's reads, the same in every process: its store's full
    location and the array's path, shape, chunks and dtype (the array itself where the
    store has no location)."""
    store = getattr(getattr(array, "store_path", None), "store", None)
    root = getattr(store, "root", None)
    if root is not None:
        where = f"file://{os.path.abspath(os.fspath(root))}"
    elif getattr(store, "fs", None) is not None and getattr(store, "path", None) is not None:
        where = store.fs.unstrip_protocol(store.path)
    else:
        return array
    return (where, array.path, array.shape, array.chunks, str(array.dtype))


def is_zarr_array(obj) -> bool:
    return type(obj).__module__.startswith("zarr") and hasattr(obj, "shape")
