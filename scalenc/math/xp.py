"""The array namespace of a block: NumPy for NumPy blocks, the array API for the others.

A Dask array may hold NumPy blocks or blocks of another array library, CuPy's on a GPU
above all. Block functions that run on either take their namespace from the block,
``xp = namespace(X)``, and write their arithmetic with the array API standard's
functions (``xp.matmul``, ``xp.exp``, ``xp.sum``, ``xp.astype``, …), which NumPy ≥ 2.1
has in its own namespace: for NumPy blocks ``xp`` *is* ``numpy``, so the NumPy path runs
exactly the calls it ran before. For any other library ``xp`` is
``array_api_compat.array_namespace`` of the block (CuPy's, wrapped to the standard).
Tests run those functions on ``array_api_strict`` arrays, which accept the standard and
nothing else, so a NumPy-only call cannot slip into a device path unseen.

What the standard lacks and the block math needs (a partial sort, row-wise selection) is
here, with the library's own fast routine where it has one and a standard fallback.
Partials leave a block as NumPy float64 (:func:`to_host`): the merges and the small
solves on the driver stay NumPy.
"""

from __future__ import annotations

from typing import Any

import array_api_compat
import numpy as np

__all__ = [
    "namespace",
    "is_numpy",
    "is_device_array",
    "device_of",
    "to_host",
    "host_tree",
    "like",
    "tile_elements",
    "argpartition_rows",
    "lexsort_rows",
    "take_classes",
    "dtype_in",
    "host_dtype",
    "as_block",
    "take_rows",
    "host_rows",
    "index_dtype",
    "rows_per_tile",
    "matmul",
    "host_or_device",
]

#: Elements of one tile of a block's work on an accelerator. Tiles sized for a CPU core's
#: cache (tens of thousands of elements) would launch thousands of small kernels; a GPU
#: wants each kernel to cover thousands of rows (2**25 float64 = 256 MiB of device memory
#: per tile: a Dask thread per CPU core can hold one each).
DEVICE_TILE_ELEMENTS = 2**25


def namespace(*arrays: Any):
    """The namespace of the arrays: ``numpy`` itself when every array is NumPy (or a
    Python scalar, or None), else the array API namespace of the non-NumPy ones."""
    host = (np.ndarray, np.generic, int, float, bool, complex)
    others = [a for a in arrays if a is not None and not isinstance(a, host)]
    return array_api_compat.array_namespace(*others) if others else np


def is_device_array(a) -> bool:
    """Whether ``a`` is an array of a library other than NumPy (CuPy's, on a GPU)."""
    return (
        not isinstance(a, np.ndarray)
        and not hasattr(a, "__dask_graph__")
        and array_api_compat.is_array_api_obj(a)
        and not array_api_compat.is_numpy_array(a)
    )


def is_numpy(xp) -> bool:
    """Whether ``xp`` is NumPy's namespace (``numpy`` or its array API wrapper)."""
    return xp is np or array_api_compat.is_numpy_namespace(xp)


def device_of(a):
    """The device an array lives on (``"cpu"`` for NumPy)."""
    return array_api_compat.device(a)


def to_host(a) -> np.ndarray:
    """An array as a NumPy array, copied from the device where it is not NumPy."""
    if isinstance(a, np.ndarray):
        return a
    if isinstance(a, np.generic):
        return np.asarray(a)
    if array_api_compat.is_cupy_array(a):
        return a.get()
    if array_api_compat.is_array_api_obj(a):
        device = getattr(a, "__dlpack_device__", None)
        moved = device is not None and device()[0] != 1  # 1 is DLPack's kDLCPU
        return np.from_dlpack(array_api_compat.to_device(a, "cpu") if moved else a)
    return np.asarray(a)


def host_tree(value):
    """``value`` with every array in it (dicts, lists, tuples) brought to NumPy."""
    if isinstance(value, dict):
        return {key: host_tree(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(host_tree(item) for item in value)
    if array_api_compat.is_array_api_obj(value) and not isinstance(value, np.ndarray):
        return to_host(value)
    return value


def like(xp, value, ref, dtype=None):
    """A NumPy value (a basis, weights) as an array of ``xp`` on ``ref``'s device; NumPy
    arrays pass unchanged (no copy) when ``xp`` is NumPy."""
    if xp is np:
        return value if dtype is None else np.asarray(value, dtype=dtype)
    return xp.asarray(value, dtype=dtype, device=device_of(ref))


def host_or_device(xp, host, device):
    """One step's implementation for a block of ``xp``: ``host`` for NumPy, ``device``
    for any other library.

    The one way a block function chooses between two implementations, where the
    algorithm differs on a device: the host's works through cache-sized tiles with
    NumPy's ``out=``, in-place fancy indexing and per-thread buffers; the device's runs
    whole-block kernels with the standard's calls. The two are named
    ``_<step>_on_host`` and ``_<step>_on_device`` and take the same arguments.
    """
    return host if is_numpy(xp) else device


def as_block(xp, X):
    """A block as an array of ``xp``: ``np.asarray(X)`` for NumPy (a subclass such as a
    memmap becomes a plain ndarray, without a copy), ``X`` itself otherwise."""
    return np.asarray(X) if is_numpy(xp) else X


def take_rows(xp, X, index):
    """The rows ``index`` (host positions) of a block, as an array of ``xp``: NumPy's
    fancy indexing (a copy), or ``take`` on the block's device (the block itself when
    ``index`` is every row in order: device blocks are not written in place)."""
    if is_numpy(xp):
        return np.asarray(X)[index]
    index = np.asarray(index)
    if index.shape == (X.shape[0],) and np.array_equal(index, np.arange(X.shape[0])):
        return X
    return xp.take(X, like(xp, index, X), axis=0)


def host_rows(X, index, dtype=None) -> np.ndarray:
    """The rows ``index`` (host positions) of a block as a NumPy array (``dtype``, when
    given): the few rows a sample keeps leave a device block here."""
    return np.asarray(to_host(take_rows(namespace(X), X, index)), dtype=dtype)


def index_dtype(xp):
    """The dtype of positions: NumPy's ``intp``, the array API's ``int64`` elsewhere."""
    return np.intp if is_numpy(xp) else xp.int64


def rows_per_tile(xp, host: int, width: int, *, host_elements: int = 0, least: int = 1) -> int:
    """Rows of one tile of a block's work: ``host`` (sized for a CPU core's cache or a
    thread's memory) for NumPy blocks; on an accelerator, rows of ``width`` elements
    filling :func:`tile_elements` of ``host_elements``, at least ``least``."""
    if is_numpy(xp):
        return host
    return max(least, tile_elements(xp, host_elements) // max(width, 1))


def matmul(xp, A, B, out=None):
    """``A @ B`` for 2-D blocks (or a vector), written into ``out`` when given (NumPy's
    ``out=``, which keeps a row tile's product in a reused buffer; a slice assignment on a
    device).

    NumPy's goes through ``np.dot``, which releases the GIL for its BLAS call: NumPy 2.4's
    ``@`` holds it for a product over a long inner dimension (class sums, scatters,
    gradients: a (5, 26 214) block times a transposed one ran 0.97× as fast on two
    threads as on one, ``np.dot`` 1.9×), so the threads of a Dask worker ran such
    products one at a time. Into ``out`` (a tile-sized product) ``np.matmul``: it releases
    the GIL there, and ``np.dot``'s ``out=`` took 20 % longer.

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc.math.xp import matmul
    >>> A = np.arange(6.0).reshape(2, 3)
    >>> matmul(np, A, A.T)
    array([[ 5., 14.],
           [14., 50.]])
    """
    if is_numpy(xp):
        return np.dot(A, B) if out is None else np.matmul(A, B, out=out)
    if out is None:
        return A @ B
    out[...] = A @ B
    return out


def tile_elements(xp, host_elements: int) -> int:
    """Elements of one tile: ``host_elements`` (sized for a CPU core's cache or a thread's
    memory) for NumPy blocks, :data:`DEVICE_TILE_ELEMENTS` for an accelerator's."""
    if is_numpy(xp):
        return host_elements
    return max(host_elements, DEVICE_TILE_ELEMENTS)


def argpartition_rows(xp, values, k: int):
    """Column positions of the ``k`` smallest entries of each row (in no particular
    order): NumPy's and CuPy's ``argpartition``, else a full ``argsort``."""
    if k >= values.shape[1]:
        return xp.broadcast_to(xp.arange(values.shape[1]), values.shape)
    partition = getattr(xp, "argpartition", None)
    if partition is not None:
        return partition(values, k - 1, axis=1)[:, :k]
    return xp.argsort(values, axis=1, stable=True)[:, :k]


def lexsort_rows(xp, primary, secondary):
    """Column positions ordering each row by (``primary``, ``secondary``): NumPy's
    ``lexsort``, else two stable ``argsort`` (the array API has no ``lexsort``)."""
    if xp is np:
        return np.lexsort((secondary, primary), axis=-1)
    order = xp.argsort(secondary, axis=1, stable=True)
    then = xp.argsort(xp.take_along_axis(primary, order, axis=1), axis=1, stable=True)
    return xp.take_along_axis(order, then, axis=1)


def take_classes(xp, classes: np.ndarray, codes):
    """``classes[codes]`` for a block's predicted codes: on the block's device when the
    labels are numbers, as NumPy when they are not (strings, objects: no device holds
    them)."""
    if xp is np or classes.dtype.kind not in "biuf":
        return classes[to_host(codes)]
    return xp.take(xp.asarray(classes, device=device_of(codes)), codes, axis=0)


def host_dtype(dtype) -> np.dtype:
    """Any library's dtype (``cupy.float32`` is NumPy's; ``array_api_strict.float32`` is
    not) as NumPy's."""
    try:
        return np.dtype(dtype)
    except TypeError:
        return np.dtype(str(dtype).rsplit(".", 1)[-1])


def dtype_in(xp, dtype):
    """NumPy's ``dtype`` as ``xp``'s dtype object (``xp.float32`` for float32, …)."""
    dtype = np.dtype(dtype)
    return dtype if xp is np else getattr(xp, dtype.name)
