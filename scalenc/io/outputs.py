"""Data out: :func:`write_output` writes a lazy array block by block to Zarr or Parquet
under a temporary name and renames it at the end, so a failed run leaves nothing that looks
complete; :func:`write_dataset` writes (X, y) the same way (Zarr group, Parquet, ``.npy``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np

from scalenc.engine.cluster import compute
from scalenc.exceptions import InputError
from scalenc.io import readers
from scalenc.io.atomic import atomic_path, atomic_prefix
from scalenc.io.inputs import as_dask_array
from scalenc.io.labels import as_dask_labels

__all__ = [
    "write_output",
    "write_dataset",
]


# --- outputs -------------------------------------------------------------------------


def _output_format(path: str, fmt: str | None) -> str:
    if fmt is not None:
        if fmt not in ("zarr", "parquet"):
            raise InputError(f"Unknown output format {fmt!r}; use 'zarr' or 'parquet'.")
        return fmt
    suffix = Path(path.rstrip("/")).suffix.lower()
    if suffix == ".parquet":
        return "parquet"
    if suffix == ".zarr":
        return "zarr"
    raise InputError(
        f"Cannot tell the output format of {path!r}: name it *.zarr or *.parquet, "
        "or pass format='zarr' / format='parquet'."
    )


def _remove_settled(path: str, *, quiet_for: float = 0.3, timeout: float = 10.0) -> None:
    """Remove a directory and keep removing it until it stays gone for ``quiet_for`` s.

    After one block fails, the scheduler may still finish writes already in flight, which
    would recreate the temporary directory after a single removal.
    """
    deadline = time.monotonic() + timeout
    while True:
        shutil.rmtree(path, ignore_errors=True)
        time.sleep(quiet_for)
        if not os.path.exists(path) or time.monotonic() > deadline:
            return


def _zarr_ready(arr: da.Array) -> da.Array:
    """String labels go to Zarr as variable-length strings (fixed-width ones warn in Zarr 3,
    object arrays fail)."""
    if arr.dtype.kind not in "OU":
        return arr
    string = np.dtypes.StringDType()
    return arr.map_blocks(_as_strings, dtype=string, meta=np.empty((0,) * arr.ndim, string))


def _as_strings(block):
    return np.asarray(block).astype(np.dtypes.StringDType())


def _parquet_writes(arrays: list[da.Array], columns: list[str], directory: str, fs=None) -> list:
    """One delayed Parquet file per row block of the (row-aligned) arrays; ``directory``
    is a local path, or a path of the fsspec file system ``fs``."""
    pieces = [a.to_delayed().ravel() for a in arrays]
    return [
        dask.delayed(_write_parquet_block)(
            blocks, f"{directory.rstrip('/')}/part-{i:06d}.parquet", columns, fs
        )
        for i, blocks in enumerate(zip(*pieces))
    ]


def _write_parquet_block(blocks, path: str, columns: list[str], fs=None) -> int:
    import pyarrow as pa  # deferred: pyarrow is imported only for Parquet output
    import pyarrow.parquet as pq

    blocks = [np.asarray(block) for block in blocks]  # a 2-D block: one array per column
    arrays = [column for block in blocks for column in ([block] if block.ndim == 1 else block.T)]
    table = pa.table(dict(zip(columns, arrays)))
    if fs is None:
        pq.write_table(table, path)
    else:
        with fs.open(path, "wb") as fh:
            pq.write_table(table, fh)
    return len(arrays[0])


@contextlib.contextmanager
def _output_target(url: str, overwrite: bool, storage_options: dict | None):
    """Where to write an output: ``(location, fs)``, published atomically at the end.

    A local path (or ``file://``) is written beside itself and swapped in
    (:func:`scalenc.io.atomic.atomic_path`; ``fs`` is None; a failure removes the
    temporary directory with :func:`_remove_settled`); any other fsspec URL under a
    temporary prefix published with a completion marker
    (:func:`scalenc.io.atomic.atomic_prefix`). No local folder is created for a URL.
    """
    fs, fs_path = readers.filesystem(url, storage_options)
    if "file" in np.atleast_1d(fs.protocol):
        with atomic_path(fs_path, overwrite=overwrite, discard=_remove_settled) as tmp:
            yield tmp, None
    else:
        with atomic_prefix(fs, fs_path, overwrite=overwrite, url=url) as tmp_url:
            yield tmp_url, fs


def write_output(
    arr: da.Array,
    path,
    *,
    format: str | None = None,
    columns: list[str] | None = None,
    overwrite: bool = False,
    storage_options: dict | None = None,
) -> str:
    """Write a lazy array block by block to Zarr or Parquet, atomically.

    ``path`` is a local path or an fsspec URL (with ``storage_options``); on an object
    store the result is written under a temporary prefix and published with a completion
    marker (:func:`scalenc.io.atomic.atomic_prefix`: readers never take a half-published
    prefix for a result, but the old one is gone once publishing starts).

    The blocks go to ``<path>.tmp-<host>-<pid>-<random>``, which is published at ``path``
    only after every block is written (an existing ``path``, replaced only with
    ``overwrite=True``, is swapped out in one step: :mod:`scalenc.io.atomic`); a failure
    removes the temporary directory, so a failed run leaves no output that looks complete
    and the old one as it was. String labels are stored as variable-length strings.

    Parameters
    ----------
    arr : dask.array.Array
        1-D (labels, scores) or 2-D (probabilities, embeddings), written one row block at
        a time by whoever runs the tasks (threads here, or a cluster's workers).
    path : str or path-like
        Where to write: a local path or an fsspec URL ending in ``.zarr`` or ``.parquet``
        (or any name with ``format``).
    format : {"zarr", "parquet"}, optional
        The output format; by default from the suffix of ``path``.
    columns : list of str, optional
        Parquet column names: ``["value"]`` for 1-D output, ``c0, c1, …`` for 2-D.
    overwrite : bool, default=False
        Replace an existing ``path`` (only once the new output is complete).
    storage_options : dict, optional
        Passed to fsspec for URLs (credentials, endpoint); never written anywhere.

    Returns
    -------
    str
        The path written.

    Raises
    ------
    FileExistsError
        ``path`` exists and ``overwrite`` is False.
    ValueError
        The format cannot be told from ``path``, or ``columns`` has the wrong length.

    See Also
    --------
    write_dataset : write features and labels together.

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> import dask.array as da
    >>> import numpy as np
    >>> import zarr
    >>> from scalenc import write_output
    >>> folder = tempfile.mkdtemp()
    >>> pred = da.from_array(np.array([0, 1, 1, 2, 0]), chunks=2)
    >>> path = write_output(pred, os.path.join(folder, "pred.zarr"))
    >>> zarr.open_array(path, mode="r")[:].tolist()
    [0, 1, 1, 2, 0]
    >>> proba = da.full((5, 3), 1 / 3, chunks=(2, 3))
    >>> path = write_output(proba, os.path.join(folder, "proba.parquet"),
    ...                     columns=["p0", "p1", "p2"])
    >>> sorted(os.listdir(path))
    ['part-000000.parquet', 'part-000001.parquet', 'part-000002.parquet']
    >>> write_output(pred, os.path.join(folder, "pred.zarr"))
    Traceback (most recent call last):
    ...
    scalenc.exceptions.OutputExistsError: ...
    >>> shutil.rmtree(folder)
    """
    spath = os.fspath(path).rstrip("/")
    fmt = _output_format(spath, format)
    n_cols = 1 if arr.ndim == 1 else arr.shape[1]
    cols = columns or (["value"] if arr.ndim == 1 else [f"c{j}" for j in range(n_cols)])
    if fmt == "parquet" and len(cols) != n_cols:
        raise InputError(f"{len(cols)} column names for {n_cols} output columns.")
    return _write({None: arr}, cols, spath, fmt, overwrite, storage_options)


def write_dataset(
    X,
    y: da.Array | None,
    path,
    *,
    format: str | None = None,
    attrs: dict | None = None,
    overwrite: bool = False,
    storage_options: dict | None = None,
) -> str:
    """Write (X, y) atomically, block by block, in a form :func:`load` reads back.

    ``path`` is a local path or an fsspec URL, as for :func:`write_output`.

    Zarr: a group with arrays ``X`` and ``y`` (and ``attrs`` on the group). Parquet: a
    dataset of one file per row block, feature columns ``x0, x1, …`` and a label column
    ``y``. Labels are rechunked to X's row blocks.

    Parameters
    ----------
    X : dask.array.Array or array-like
        The features (rows × features), written one row block at a time; NumPy arrays
        (and DataFrames, Zarr arrays) are split into row blocks as
        :func:`~scalenc.io.inputs.check_xy` splits them.
    y : dask.array.Array, array-like or None
        One label per row, or None for a dataset without labels.
    path : str or path-like
        A local path or an fsspec URL ending in ``.zarr`` or ``.parquet`` (or any name
        with ``format``).
    format : {"zarr", "parquet"}, optional
        The output format; by default from the suffix of ``path``.
    attrs : dict, optional
        Zarr only: JSON attributes stored on the group (e.g. how the data was made).
    overwrite : bool, default=False
        Replace an existing ``path`` (only once the new dataset is complete).
    storage_options : dict, optional
        Passed to fsspec for URLs (credentials, endpoint); never written anywhere.

    Returns
    -------
    str
        The path written.

    See Also
    --------
    load : open the dataset again, lazily.
    write_output : write one array (predictions, probabilities, embeddings).

    Examples
    --------
    >>> import os, shutil, tempfile
    >>> import zarr
    >>> from scalenc import load, write_dataset
    >>> from scalenc.simulate import simulate
    >>> folder = tempfile.mkdtemp()
    >>> X, y = simulate("normal", n=1000, n_features=10, n_classes=3, chunk_rows=250)
    >>> path = write_dataset(X, y, os.path.join(folder, "normal.zarr"),
    ...                      attrs={"setting": "normal"})
    >>> dict(zarr.open_group(path, mode="r").attrs)
    {'setting': 'normal'}
    >>> X2, y2 = load(path)
    >>> X2.shape, X2.chunks[0]
    ((1000, 10), (250, 250, 250, 250))

    NumPy arrays are written as they are (``scalenc convert`` does this for ``.npz``,
    ``.npy``, CSV and Parquet files):

    >>> import numpy as np
    >>> path = write_dataset(np.eye(4), np.array([0, 1, 0, 1]), os.path.join(folder, "eye.zarr"))
    >>> load(path)[1].compute().tolist()
    [0, 1, 0, 1]
    >>> shutil.rmtree(folder)
    """
    spath = os.fspath(path).rstrip("/")
    fmt = _output_format(spath, format)
    if not isinstance(X, da.Array):
        X = as_dask_array(X)  # NumPy, a Zarr array or a DataFrame, in row blocks
    parts = {"X": X} if y is None else {"X": X, "y": as_dask_labels(y, X)}
    cols = [f"x{j}" for j in range(X.shape[1])] + (["y"] if y is not None else [])
    return _write(parts, cols, spath, fmt, overwrite, storage_options, attrs or {})


def _write(parts: dict, columns, path: str, fmt: str, overwrite, storage_options, attrs=None):
    """The row-aligned arrays ``parts`` written at ``path`` atomically, block by block:
    Zarr components by their keys (None: the root array), with ``attrs`` on the group
    when given; or Parquet ``columns``, one file per row block."""
    with _output_target(path, overwrite, storage_options) as (tmp, fs):
        if fmt == "zarr":
            import zarr

            options = {"storage_options": storage_options} if fs is not None else {}
            compute(
                *[
                    _zarr_ready(arr).to_zarr(tmp, component=name, compute=False, **options)
                    for name, arr in parts.items()
                ]
            )
            if attrs is not None:
                zarr.open_group(tmp, mode="r+", **options).attrs.update(attrs)
        else:
            if fs is None:
                os.makedirs(tmp)
            compute(*_parquet_writes(list(parts.values()), columns, _fs_path(fs, tmp), fs))
    return path


def _fs_path(fs, location: str) -> str:
    """A location as a path of ``fs`` (a URL without its protocol), or as it is locally."""
    return location if fs is None else fs._strip_protocol(location)
