"""Where X's blocks live: :func:`to_device` moves them to a GPU (CuPy) or back, lazily,
each as it is read; labels always stay on the host."""

from __future__ import annotations

import dask.array as da
import numpy as np

from scalenc.exceptions import InputError, MissingDeviceDependency
from scalenc.math.xp import to_host

__all__ = ["to_device"]


def to_device(X: da.Array, device: str) -> da.Array:
    """X with its blocks moved to ``device``, lazily, each as it is read.

    ``"gpu"`` (or ``"cuda"``) makes each block a CuPy array on the current CUDA device,
    so that the estimators' block math runs there; ``"cpu"`` brings blocks back as NumPy.
    Labels stay on the host: only X moves.

    Raises
    ------
    MissingDeviceDependency
        ``"gpu"`` on a machine where CuPy is not installed or sees no CUDA device.

    Examples
    --------
    >>> import dask.array as da
    >>> from scalenc import to_device
    >>> X = da.ones((6, 2), chunks=(3, 2))
    >>> to_device(X, "cpu") is X  # NumPy blocks stay as they are
    True
    >>> Xg = to_device(X, "gpu")  # doctest: +SKIP
    >>> type(Xg._meta).__name__, type(Xg.blocks[0].compute()).__name__  # doctest: +SKIP
    ('ndarray', 'ndarray')
    >>> Xg._meta.__class__.__module__  # doctest: +SKIP
    'cupy'
    """
    if device in ("gpu", "cuda"):
        cupy = _cupy()
        return X.map_blocks(cupy.asarray, dtype=X.dtype, meta=cupy.empty((0,) * X.ndim, X.dtype))
    if device == "cpu":
        if isinstance(X._meta, np.ndarray):
            return X
        return X.map_blocks(to_host, dtype=X.dtype, meta=np.empty((0,) * X.ndim, X.dtype))
    raise InputError(f"device must be 'cpu' or 'gpu'; got {device!r}.")


def _cupy():
    """CuPy, on a machine that has a CUDA device, or a clear error."""
    try:
        import cupy
    except ImportError as error:
        raise MissingDeviceDependency(
            "device='gpu' needs CuPy: pip install 'scalenc[gpu]' (CUDA 12), or the CuPy "
            "package that matches your CUDA, e.g. pip install cupy-cuda13x."
        ) from error
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # CUDA's driver is missing or refuses
        raise MissingDeviceDependency(
            f"CuPy is installed but CUDA is not usable: {error}"
        ) from error
    if count == 0:
        raise MissingDeviceDependency("CuPy is installed but sees no CUDA device.")
    return cupy
