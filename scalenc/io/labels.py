"""Labels in: one label per row as a 1-D Dask array with X's row chunks
(:func:`as_dask_labels`), and class codes block by block (:func:`encode_labels`)."""

from __future__ import annotations

import dask.array as da
import numpy as np
from sklearn.utils.validation import column_or_1d

from scalenc.engine.reduce import from_numpy_rows
from scalenc.exceptions import InputError
from scalenc.io.devices import to_device
from scalenc.io.readers import from_zarr, is_zarr_array
from scalenc.io.tables import is_dask_frame
from scalenc.math.labels import UNLABELED, encode
from scalenc.math.xp import is_device_array, to_host

__all__ = ["as_dask_labels", "encode_labels"]


def _frame_labels(y) -> da.Array:
    """Labels in a Dask Series (or one-column DataFrame) as a Dask array with known chunks.

    A pandas extension dtype (``string``, ``category``, ``Int64``: what Parquet and pandas
    give string or nullable labels) becomes an object array here, partition by partition,
    as Dask's own conversion would make it, but without Dask's warning that it converts.
    """
    dtypes = [y.dtype] if y.ndim == 1 else list(y.dtypes)
    if not all(isinstance(dtype, np.dtype) for dtype in dtypes):
        y = y.astype(object)
    return y.to_dask_array(lengths=True)


def as_dask_labels(
    y, X: da.Array, *, name: str = "y", allow_missing_chunks: bool = False
) -> da.Array:
    """Labels as a 1-D Dask array with exactly X's row chunks (rechunked if they differ).

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from scalenc.io.labels import as_dask_labels
    >>> X = da.zeros((6, 2), chunks=(4, 2))
    >>> as_dask_labels(["a", "b", "a", "b", "a", "b"], X).chunks
    ((4, 2),)
    >>> as_dask_labels(da.arange(6, chunks=3), X).chunks  # rechunked to X's rows
    ((4, 2),)
    >>> as_dask_labels(np.zeros(5), X)
    Traceback (most recent call last):
    ...
    scalenc.exceptions.InputError: X has 6 rows but y has 5 labels; pass one label per row ...
    """
    if is_zarr_array(y):
        y = from_zarr(y, allow_missing_chunks=allow_missing_chunks)
    if is_dask_frame(y):
        y = _frame_labels(y)
    if isinstance(y, da.Array) and not isinstance(y._meta, np.ndarray):
        y = to_device(y, "cpu")  # labels are few: classes and codes live on the host
    lazy = isinstance(y, da.Array)
    if not lazy:
        if hasattr(y, "to_numpy"):
            y = y.to_numpy()
        y = to_host(y) if is_device_array(y) else np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            y = column_or_1d(y, warn=True)
        if y.ndim != 1:
            raise InputError(
                f"{name} should be a 1d array (one label per row); got shape {y.shape}. "
                "Multi-output labels are not supported."
            )
    elif y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise InputError(f"{name} must be 1-D (one label per row); got shape {y.shape}.")
    if lazy and any(np.isnan(c) for c in y.chunks[0]):
        raise InputError(
            f"{name} has unknown chunk sizes {y.chunks[0]}; call {name}.compute_chunk_sizes()."
        )
    if y.shape[0] != X.shape[0]:
        raise InputError(
            f"X has {X.shape[0]} rows but {name} has {y.shape[0]} labels; "
            "pass one label per row (use -1 for unlabeled rows)."
        )
    if not lazy:
        return from_numpy_rows(y, X.chunks[0])
    return y if y.chunks[0] == X.chunks[0] else y.rechunk({0: X.chunks[0]})


def encode_labels(y: da.Array, classes: np.ndarray, marker=UNLABELED) -> da.Array:
    """Lazy class codes 0..K-1 of y (−1 for unlabeled rows: the ``marker`` and None/NaN,
    see :func:`scalenc.math.labels.unlabeled_mask`), block by block.

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from scalenc.io.labels import encode_labels
    >>> y = da.from_array(np.array([5, -1, 2, 5]), chunks=2)
    >>> encode_labels(y, classes=np.array([2, 5])).compute()
    array([ 1, -1,  0,  1])
    """
    if not isinstance(y._meta, np.ndarray):  # predictions on a device: codes on the host
        y = to_device(y, "cpu")
    return y.map_blocks(
        encode, classes=classes, marker=marker, dtype=np.int64, meta=np.empty(0, np.int64)
    )
