"""Per-thread buffers for the temporaries of row-tile loops.

A block function that works through its rows a tile at a time keeps its megabyte-sized
temporaries (a float64 copy, a product, a gather) in buffers reused by the same thread
(:func:`scratch`, :func:`scratch_take`, :func:`gather`, :func:`scratch_astype`) and its
row positions in one shared read-only table (:func:`arange`). On a Dask worker, whose
nanny sets ``MALLOC_TRIM_THRESHOLD_``, every fresh temporary of that size is mapped and
page-faulted in, and the faults of the worker's threads serialise on the process's
memory map: 1.2–1.4× a block's time before the soft-KNN's and CCDR's loops reused theirs
(``benchmarks/worker_faults.py`` measures a block both ways).

A device block's library allocates and reuses its own memory: :func:`host_scratch`
gives None there, :func:`gather` and :func:`scratch_astype` a fresh array of the device.
A :class:`Workspace` holds a tile's temporaries on either, so that its formulas are
written once.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from scalenc.math.xp import device_of, dtype_in, is_numpy, namespace

__all__ = [
    "Workspace",
    "scratch",
    "scratch_take",
    "host_scratch",
    "into",
    "gather",
    "scratch_astype",
    "arange",
]


_SCRATCH = threading.local()


def scratch(name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    """A reusable per-thread buffer of ``shape`` and ``dtype``; its contents are undefined.

    Row-tile loops use these for their megabyte-sized temporaries. A fresh temporary of
    that size is mapped from the kernel and page-faulted in on every call, and the page
    faults of a Dask worker's threads serialise on the process's memory map: with two
    threads the faults, not the arithmetic, set the pace. A buffer stays valid until the
    same thread asks for ``name`` again.
    """
    buffers = _SCRATCH.__dict__.setdefault("buffers", {})
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    buf = buffers.get(name)
    if buf is None or buf.nbytes < nbytes:
        buf = buffers[name] = np.empty(max(nbytes, 1), dtype=np.uint8)
    return buf[:nbytes].view(dtype).reshape(shape)


def scratch_take(name: str, A: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``A[at]`` along the first axis, written into the per-thread buffer ``name``
    (:func:`scratch`; valid until the thread asks for ``name`` again).

    ``at`` must hold valid positions: NumPy's ``take`` writes into ``out`` directly only
    with ``mode="clip"``; with its default ``"raise"`` it fills a fresh temporary first,
    the very array the buffer is there to avoid.
    """
    out = scratch(name, (*np.shape(at), *A.shape[1:]), A.dtype)
    return np.take(A, at, axis=0, out=out, mode="clip")


def host_scratch(xp, name: str, shape: tuple[int, ...], dtype) -> np.ndarray | None:
    """:func:`scratch` for a NumPy block; None for a device's (whose library allocates
    and reuses its own memory): for the ``out=`` of a loop that runs on either."""
    return scratch(name, shape, dtype) if is_numpy(xp) else None


def into(func, *args, out=None, **kwargs):
    """``func(*args, **kwargs)``, into ``out`` when it is given: a NumPy tile's per-thread
    buffer (:func:`host_scratch`); a device tile's library allocates its own, and is passed
    no ``out``.

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc.math.buffers import into
    >>> buffer = np.empty(2)
    >>> into(np.sqrt, np.array([4.0, 9.0]), out=buffer) is buffer
    True
    >>> into(np.sqrt, np.array([4.0, 9.0]))
    array([2., 3.])
    """
    return func(*args, **kwargs) if out is None else func(*args, out=out, **kwargs)


class Workspace:
    """The temporaries of a tile's formulas, on the host or a device alike.

    :meth:`buffer` always returns an array: a per-thread buffer (:func:`scratch`, named
    ``prefix.name``) for a NumPy tile, a fresh array of the tile's device otherwise;
    :meth:`into` computes into one (NumPy's ``out=``; a device's library gives its own
    array, in the buffer's dtype), so a formula reads the same on both. What
    :meth:`into`, :meth:`put` and :meth:`masked` return is the result: use it, not the
    buffer passed.

    Examples
    --------
    >>> import numpy as np
    >>> from scalenc.math.buffers import Workspace
    >>> ws = Workspace(np, "demo", np.zeros(2))
    >>> out = ws.buffer("roots", (2,))
    >>> roots = ws.into(np.sqrt, np.array([4.0, 9.0]), out=out)
    >>> roots, roots is out
    (array([2., 3.]), True)
    >>> ws.put(np.zeros((2, 2)), np.array([2, 1]), np.array([5.0, 6.0]))  # (1, 0), (0, 1)
    array([[0., 6.],
           [5., 0.]])
    """

    def __init__(self, xp, prefix: str, like):
        self.xp, self.prefix, self.host = xp, prefix, is_numpy(xp)
        self.device = device_of(like)

    def buffer(self, name: str, shape: tuple[int, ...], dtype=np.float64):
        """An array of ``shape`` and ``dtype``, its contents undefined (on the host valid
        until this thread asks for ``name`` again)."""
        if self.host:
            return scratch(f"{self.prefix}.{name}", shape, dtype)
        return self.xp.empty(shape, dtype=dtype_in(self.xp, dtype), device=self.device)

    def into(self, func, *args, out, **kwargs):
        """``func(*args, **kwargs)`` in ``out``'s dtype, written into ``out`` on the host."""
        if self.host:
            return func(*args, out=out, **kwargs)
        return self.xp.astype(func(*args, **kwargs), out.dtype, copy=False)

    def put(self, target, at, values):
        """``target`` (K × b) with one entry of each column i set to ``values[i]``: the
        one at the flat position ``at[i]`` (k·b + i; in place on the host, where the
        standard has no assignment through an index array on a device)."""
        if self.host:
            self.xp.reshape(target, (-1,))[at] = values
            return target
        rows = self.xp.arange(target.shape[0], device=self.device)[:, None]
        return self.xp.where(rows == (at // target.shape[1])[None, :], values[None, :], target)

    def masked(self, values, mask, name: str):
        """``values`` where ``mask``, else 0 (on the host in the buffer ``name``)."""
        if self.host:
            return np.multiply(values, mask, out=self.buffer(name, values.shape, values.dtype))
        return self.xp.where(mask, values, 0.0)


def gather(name: str, A, at, dtype=None):
    """The rows ``at`` of A (in ``dtype``, when given): for NumPy in the per-thread
    buffer ``name`` (:func:`scratch_take`), for a device block a fresh array of its
    device (``at`` an array of that device)."""
    xp = namespace(A)
    if not is_numpy(xp):
        rows = xp.take(A, at, axis=0)
        return rows if dtype is None else xp.astype(rows, dtype, copy=False)
    if dtype is None or A.dtype == dtype:
        return scratch_take(name, A, at)
    out = scratch(name, (at.size, A.shape[1]), dtype)
    out[...] = np.take(A, at, axis=0)
    return out


def scratch_astype(name: str, X, dtype):
    """X in ``dtype``: X itself when it has that dtype already, a NumPy block converted
    into the per-thread buffer ``name`` (valid until the next request for ``name``), a
    device block converted by its library."""
    xp = namespace(X)
    if not is_numpy(xp) or X.dtype == dtype:
        return xp.astype(X, dtype_in(xp, dtype), copy=False)
    out = scratch(name, X.shape, dtype)
    out[...] = X
    return out


_ARANGE = np.arange(0)


def arange(n: int) -> np.ndarray:
    """0, 1, …, n − 1 (int64), a read-only view of one shared array grown as needed: for
    row-tile loops, where a fresh ``np.arange`` of a tile's size is page-faulted in on
    every call on a Dask worker (see :func:`scratch`)."""
    global _ARANGE
    table = _ARANGE
    if table.size < n:
        table = np.arange(max(n, 2 * table.size), dtype=np.int64)
        table.flags.writeable = False
        _ARANGE = table  # one assignment: a thread holding the old table keeps it
    return table[:n]
