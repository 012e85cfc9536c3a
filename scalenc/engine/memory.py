"""Memory a fit may use: ``memory_limit`` parsed, the Dask workers' limits read, or a share
of the machine's available memory, and byte counts formatted for messages. The estimators'
plans (:mod:`scalenc.nrbfn.plan`, :mod:`scalenc.encoder.plan`) size their stages against it.
"""

from __future__ import annotations

import math

from scalenc.engine.cluster import active_client, uses_distributed

__all__ = ["format_bytes", "MEMORY_FRACTION", "parse_memory_limit", "memory_budget"]


#: Fraction of the machine's available memory (``psutil.virtual_memory().available`` at
#: ``fit``) that a fit may use when no ``memory_limit`` is given and no Dask cluster is
#: active. A quarter: the estimates cover the fit's own arrays only (they were 14 % above
#: the measured peak of MNIST's fit, but NumPy, BLAS and Dask add their own), the caller
#: usually holds its data and other models in the same process, and a shared machine runs
#: other jobs. On the 24 GB machine this library was measured on (22–25 GB available) it
#: admits MNIST's exact fit (60 000 rows, r = 8787, estimated 3.9 GB).
MEMORY_FRACTION = 0.25


def parse_memory_limit(value) -> int | None:
    """Bytes from an int or a string such as ``"4GB"`` or ``"512 MiB"`` (Dask's parser)."""
    if value is None:
        return None
    if isinstance(value, str):
        from dask.utils import parse_bytes

        return int(parse_bytes(value))
    return int(value)


def format_bytes(n: float) -> str:
    """Bytes as '3.2 GB' (decimal units, as the parameter's strings)."""
    if n < 1e3:
        return f"{int(n)} B"
    exp = min(int(math.log10(max(n, 1)) // 3), 4)
    return f"{n / 10 ** (3 * exp):.3g} {['B', 'kB', 'MB', 'GB', 'TB'][exp]}"


def memory_budget(memory_limit=None, *, task_modules=()) -> tuple[dict, str]:
    """Bytes a fit may use per worker process and on the client, and where that comes from.

    ``memory_limit`` (an int of bytes or a string such as ``"4GB"``) for both; otherwise,
    with a distributed client active, what a worker can add before Dask pauses it (the
    smallest ``memory_limit`` of the workers times Dask's ``distributed.worker.memory.pause``
    fraction, less the memory a worker holds once it has imported ``task_modules``, what
    the fit's block tasks import) for the block tasks; otherwise (and for the client)
    :data:`MEMORY_FRACTION` of the memory the machine has available.

    Raises ``ValueError`` for a ``memory_limit`` that is not one of those (the estimators'
    :func:`scalenc.base.estimator.memory_budget` turns it into a parameter error).

    Examples
    --------
    >>> from scalenc.engine.memory import memory_budget
    >>> memory_budget("4GB")
    ({'worker': 4000000000, 'client': 4000000000}, "memory_limit='4GB'")
    """
    limit = parse_memory_limit(memory_limit)
    if limit is not None:
        return {"worker": limit, "client": limit}, f"memory_limit={memory_limit!r}"
    import psutil

    share = int(MEMORY_FRACTION * psutil.virtual_memory().available)
    machine = f"{MEMORY_FRACTION:.0%} of this machine's available memory"
    if uses_distributed():
        client = active_client()
        workers = client.scheduler_info().get("workers", {}).values()
        limits = [w.get("memory_limit") or 0 for w in workers]
        if limits and min(limits) > 0:
            fraction = _worker_memory_fraction()
            held = _worker_memory_held(client, tuple(task_modules))
            worker = max(0, int(min(limits) * fraction) - held)
            return (
                {"worker": worker, "client": share},
                f"the Dask workers' memory_limit x {fraction:.0%} (Dask's pause threshold) "
                f"less the {held / 1e6:.0f} MB a worker holds (workers); {machine} (client)",
            )
    return {"worker": share, "client": share}, machine


def _worker_memory_fraction() -> float:
    """The fraction of its ``memory_limit`` a Dask worker may fill before it is paused
    (``distributed.worker.memory.pause``, else ``terminate``; 1 when both are off)."""
    import dask

    for key in ("pause", "terminate"):
        fraction = dask.config.get(f"distributed.worker.memory.{key}", None)
        if fraction:
            return float(fraction)
    return 1.0


def _worker_memory_held(client, modules: tuple[str, ...]) -> int:
    """The largest resident memory of a worker once it has imported ``modules`` (what the
    fit's block tasks import), measured on every worker; 0 if it cannot be measured."""

    def resident_after_import(modules):
        import importlib

        import psutil

        for name in modules:
            importlib.import_module(name)
        return psutil.Process().memory_info().rss

    try:
        return int(max(client.run(resident_after_import, modules).values(), default=0))
    except Exception:  # a worker that cannot run it: no estimate rather than no fit
        return 0
