"""Where computations run: the active Dask scheduler, with BLAS pinned for threads.

Estimators never create clients. They call :func:`compute`, which uses whatever scheduler
is active: a ``distributed.Client`` if one is the default, else ``dask.config``'s
scheduler (threads by default). Under an in-process scheduler BLAS is limited to one
thread per Dask worker thread — two BLAS threads under two Dask threads made the kernel
pass three times slower on a 2-core machine. Distributed workers started by a nanny
already get ``OMP_NUM_THREADS=1`` and friends from Dask.
"""

from __future__ import annotations

import contextlib

import dask

__all__ = ["compute", "active_client", "blas_single_thread"]


def active_client():
    """The default ``distributed.Client`` if one is active, else None."""
    try:
        from distributed import default_client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    try:
        return default_client()
    except ValueError:
        return None


def _threaded_in_process() -> bool:
    """True when the computation will run on Dask's thread pool in this process."""
    scheduler = dask.config.get("scheduler", None)
    if scheduler in ("threads", "threading"):
        return True
    if scheduler is not None:  # sync, processes, or a distributed scheduler
        return False
    return active_client() is None


@contextlib.contextmanager
def blas_single_thread():
    """Limit BLAS/OpenMP pools to one thread for the duration (in this process)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield


def compute(*collections, **kwargs):
    """``dask.compute`` on the active scheduler, pinning BLAS to one thread in-process."""
    if _threaded_in_process():
        with blas_single_thread():
            return dask.compute(*collections, **kwargs)
    return dask.compute(*collections, **kwargs)
