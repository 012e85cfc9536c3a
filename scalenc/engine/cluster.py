"""Where computations run: the active Dask scheduler, with BLAS pinned for threads.

Estimators never create clients. They call :func:`compute`, which uses whatever scheduler
is active: a ``distributed.Client`` if one is the default, else ``dask.config``'s
scheduler (threads by default; a computation over one row block runs on the calling
thread). Under an in-process scheduler BLAS is limited to one thread per Dask worker
thread — two BLAS threads under two Dask threads made the kernel pass three times
slower on a 2-core machine. Distributed workers started by a nanny
already get ``OMP_NUM_THREADS=1`` and friends from Dask.

:func:`connect` is how a program (the ``scalenc`` command, a script, a notebook) chooses
the scheduler: nothing (threads in this process), ``"local"`` (a LocalCluster of worker
processes on 127.0.0.1), or the address or scheduler file of a running
``dask.distributed`` scheduler, plain TCP or TLS. A scheduler that cannot be reached, or
that is lost during a computation, raises :class:`ClusterUnavailableError`; so does a
cluster left without any running worker for :func:`no_workers_timeout` seconds during a
computation — every worker died or left, or every worker is paused (its memory is above
Dask's pause threshold) or closing — where Dask itself would wait forever.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from concurrent.futures import CancelledError

import dask
from dask._task_spec import DataNode, convert_legacy_graph
from dask.array import Array
from dask.callbacks import Callback
from dask.delayed import Delayed
from dask.system import CPU_COUNT

from scalenc.engine.reads import note_computation
from scalenc.engine.resend import rescatter_lost
from scalenc.exceptions import ClusterUnavailableError
from scalenc.math.linalg import blas_threads

__all__ = [
    "task_threads",
    "ClusterUnavailableError",
    "NO_WORKERS_TIMEOUT",
    "NO_WORKERS_CONFIG",
    "compute",
    "no_workers_timeout",
    "active_client",
    "uses_distributed",
    "in_process",
    "blas_single_thread",
    "lost_dependencies",
]


logger = logging.getLogger(__name__)


#: Default seconds a distributed computation waits while the cluster has no running
#: worker (every worker died, e.g. killed by the OS for memory, or left; or every worker
#: is paused for memory or closing) before it fails with :class:`ClusterUnavailableError`.
#: Override with the Dask config key :data:`NO_WORKERS_CONFIG` (see
#: :func:`no_workers_timeout`).
NO_WORKERS_TIMEOUT = 300.0
NO_WORKERS_CONFIG = "scalenc.no-workers-timeout"
#: A computation of at most this many graph nodes is looked at for one row block
#: (:func:`compute`); larger ones go to Dask's scheduler unexamined.
ONE_BLOCK_NODES = 16
#: Times a computation is submitted again after a worker died with the last copy of
#: data scalenc scattered (sent again first, see ``scalenc.engine.resend.rescatter_lost``).
RESCATTER_ATTEMPTS = 3
_WATCH_INTERVAL = 0.5  # seconds between looks at the number of running workers
_IDLE_WATCH_INTERVAL = 0.1  # the same while none runs (the scheduler then has little to do)
_LISTED_WORKERS = 5  # workers described one by one in the paused-workers message


# --- running computations ------------------------------------------------------------


def _one_block(collections):
    """The graph of ``collections`` (converted to Dask's task specs) when it computes one
    row block: at most :data:`ONE_BLOCK_NODES` nodes, every array key's block index 0. A
    thread pool has nothing to run at once there. None otherwise, and while local
    callbacks are registered (a command's progress), which Dask's scheduler calls, and
    for collections other than arrays and delayed values (a DataFrame's graph is its
    optimised expression's)."""
    if Callback.active or not all(isinstance(c, (Array, Delayed)) for c in collections):
        return None
    if sum(len(c.__dask_graph__()) for c in collections) > ONE_BLOCK_NODES:
        return None
    graph = {}
    for c in collections:
        graph.update(c.__dask_graph__())
    if any(isinstance(key, tuple) and any(key[1:]) for key in graph):
        return None
    return convert_legacy_graph(graph)


def _run_here(collections, graph):
    """Compute ``collections`` by running ``graph``'s tasks on this thread as their inputs
    are ready (Dask's synchronous scheduler without its graph optimisation and ordering:
    2–4 ms a computation), each result finalised as ``dask.compute`` does."""
    done = {key: node() for key, node in graph.items() if isinstance(node, DataNode)}
    waiting = [key for key in graph if key not in done]
    while waiting:
        ready = [key for key in waiting if graph[key].dependencies <= done.keys()]
        for key in ready:
            done[key] = graph[key](done)
        waiting = [key for key in waiting if key not in done]
    results = []
    for c in collections:
        finalize, args = c.__dask_postcompute__()
        results.append(finalize(_take(c.__dask_keys__(), done), *args))
    return tuple(results)


def _take(keys, cache):
    if isinstance(keys, list):
        return [_take(k, cache) for k in keys]
    return cache[keys]


def active_client():
    """The default ``distributed.Client`` if one is active, else None.

    Examples
    --------
    >>> import scalenc
    >>> from scalenc.engine.cluster import active_client
    >>> with scalenc.connect("threads"):
    ...     print(active_client())
    None
    >>> with scalenc.connect("local", n_workers=1) as client:  # doctest: +SKIP
    ...     print(active_client() is client)
    True
    """
    try:
        from distributed import default_client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    try:
        return default_client()
    except ValueError:
        return None


def uses_distributed() -> bool:
    """True when computations go to a distributed scheduler (a default Client is active
    and dask.config does not name a local scheduler).

    Examples
    --------
    >>> import dask
    >>> import scalenc
    >>> from scalenc.engine.cluster import uses_distributed
    >>> with scalenc.connect("threads"):
    ...     print(uses_distributed())
    False
    >>> with scalenc.connect("local", n_workers=1):  # doctest: +SKIP
    ...     print(uses_distributed())
    ...     with dask.config.set(scheduler="sync"):  # a local scheduler named explicitly
    ...         print(uses_distributed())
    True
    False
    """
    scheduler = dask.config.get("scheduler", None)
    if scheduler not in (None, "dask.distributed", "distributed"):
        return False
    return active_client() is not None


def task_threads() -> tuple[int, int]:
    """(threads of one worker process, worker processes) that run a pass's block tasks.

    The one rule every plan sizes its tasks by: with a distributed client, the most threads
    of any worker and the number of workers; otherwise one process whose threads are 1 on
    the synchronous scheduler, else Dask's ``num_workers`` setting or the cores Dask sees
    (``dask.system.CPU_COUNT``).

    Examples
    --------
    >>> import dask
    >>> from scalenc.engine.cluster import task_threads
    >>> with dask.config.set(scheduler="sync"):
    ...     task_threads()
    (1, 1)
    >>> with dask.config.set(scheduler="threads", num_workers=3):
    ...     task_threads()
    (3, 1)
    """
    if uses_distributed():
        workers = active_client().scheduler_info().get("workers", {}).values()
        return max([int(w.get("nthreads", 1)) for w in workers] or [1]), max(len(workers), 1)
    if dask.config.get("scheduler", None) in ("sync", "synchronous", "single-threaded"):
        return 1, 1
    return int(dask.config.get("num_workers", None) or CPU_COUNT), 1


def in_process() -> bool:
    """True when computations run in this process: on Dask's threads or its synchronous
    scheduler.

    Examples
    --------
    >>> import dask
    >>> from scalenc.engine.cluster import in_process
    >>> with dask.config.set(scheduler="sync"):
    ...     in_process()
    True
    >>> with dask.config.set(scheduler="processes"):
    ...     in_process()
    False
    """
    scheduler = dask.config.get("scheduler", None)
    return scheduler in ("sync", "synchronous", "single-threaded") or _threaded_in_process()


def _threaded_in_process() -> bool:
    """True when the computation will run on Dask's thread pool in this process."""
    scheduler = dask.config.get("scheduler", None)
    if scheduler in ("threads", "threading"):
        return True
    if scheduler is not None:  # sync, processes, or a distributed scheduler
        return False
    return active_client() is None


def blas_single_thread():
    """Limit BLAS/OpenMP pools to one thread for the duration (in this process), through
    the pools found once (:func:`scalenc.math.linalg.blas_threads`: looking for them at
    each :func:`compute` took 4 of a trivial pass's 6 ms).

    Examples
    --------
    >>> from threadpoolctl import threadpool_info
    >>> from scalenc.engine.cluster import blas_single_thread
    >>> with blas_single_thread():
    ...     print(all(pool["num_threads"] == 1 for pool in threadpool_info()))
    True
    """
    return blas_threads(1)


def no_workers_timeout() -> float | None:
    """Seconds a distributed computation may wait while the cluster has no running worker.

    A worker is running when Dask can give it tasks: not when it is paused (its process
    memory is above ``distributed.worker.memory.pause``, 80 % of its memory limit by
    default) or closing. So the wait covers a cluster whose workers all died or left and
    one whose workers are all paused; either way Dask alone would wait forever.

    Read from the Dask config key ``scalenc.no-workers-timeout`` (a number of seconds or
    a duration such as ``"2 minutes"``; ``None`` waits forever, as Dask does), set with
    ``dask.config.set({"scalenc.no-workers-timeout": 60})`` or the environment variable
    ``DASK_SCALENC__NO_WORKERS_TIMEOUT=60``; default :data:`NO_WORKERS_TIMEOUT` (300 s).
    Choose it longer than your cluster takes to start or replace a worker (an adaptive
    cluster scaled to zero, a batch system's queue).

    Examples
    --------
    >>> import dask
    >>> from scalenc.engine.cluster import no_workers_timeout
    >>> no_workers_timeout()
    300.0
    >>> with dask.config.set({"scalenc.no-workers-timeout": "2 minutes"}):
    ...     print(no_workers_timeout())
    120.0
    """
    from dask.utils import parse_timedelta

    value = dask.config.get(NO_WORKERS_CONFIG, NO_WORKERS_TIMEOUT)
    return None if value is None else float(parse_timedelta(value, default="s"))


def compute(*collections, **kwargs):
    """``dask.compute`` on the active scheduler, pinning BLAS to one thread in-process.

    On Dask's threads in this process, a computation over one row block (a small
    in-memory array's pass or output) runs its tasks on the calling thread instead: the
    pool's hand-offs, graph optimisation and ordering cost 2–4 ms a computation and have
    nothing to run at once there (a progress bar's callbacks, when registered, keep it on
    Dask's scheduler).

    On a distributed cluster, a worker lost mid-computation is survived: the scheduler
    recomputes its tasks elsewhere, and data scalenc scattered to the cluster (large
    model arrays, NumPy row blocks), which Dask cannot compute again and of which its
    active memory manager keeps one copy, is sent again from the client and the
    computation submitted again (up to :data:`RESCATTER_ATTEMPTS` times; with
    :func:`no_workers_timeout` None, or data scattered by other code, such a loss raises
    :class:`ClusterUnavailableError` saying so instead of Dask's bare
    ``FutureCancelledError``). A lost scheduler raises
    :class:`ClusterUnavailableError` instead of Dask's bare ``CancelledError``. So does a
    cluster left with no running worker for :func:`no_workers_timeout` seconds (all of
    them died or left and none joined, or all of them are paused because their memory
    is above Dask's pause threshold, or closing), where Dask would wait forever: the
    computation's tasks are released and nothing is returned, so no output is written
    as complete; the message says which case it is and, for paused workers, their
    memory against their limit. Dask's own ``distributed.scheduler.no-workers-timeout``
    (which also counts running workers only) is read by the scheduler when it starts (it
    cannot be set from a client); when a cluster's operator sets it, its
    ``NoWorkerError`` gives the same error.

    Examples
    --------
    >>> import dask.array as da
    >>> from scalenc.engine.cluster import compute
    >>> total, squares = compute(da.ones(10, chunks=5).sum(), da.arange(4, chunks=2) ** 2)
    >>> float(total), squares
    (10.0, array([0, 1, 4, 9]))
    """
    note_computation(collections)
    if _threaded_in_process():
        with blas_single_thread():
            graph = None if kwargs else _one_block(collections)
            if graph is not None:  # one row block: no pool, no graph optimisation
                return _run_here(collections, graph)
            return dask.compute(*collections, **kwargs)
    if not uses_distributed():
        return dask.compute(*collections, **kwargs)
    client = active_client()
    timeout = no_workers_timeout()
    if timeout is not None:
        kwargs = {"scheduler": _watched_get(client, timeout), **kwargs}
    try:
        return dask.compute(*collections, **kwargs)
    except ClusterUnavailableError:
        raise
    except Exception as exc:
        if _scheduler_lost(client, exc):
            raise _lost(
                f"Lost the connection to the Dask scheduler at {address_of(client)} during the "
                f"computation ({type(exc).__name__}: {exc}). Nothing was written as complete; "
                "check the scheduler's log, restart it, and run again.",
                "scheduler",
            ) from exc
        if type(exc).__name__ == "NoWorkerError":  # the scheduler's no-workers-timeout
            raise ClusterUnavailableError(no_workers_message(client, exc.args[-1])) from exc
        if lost_dependencies(exc):
            raise _lost(_lost_data_message(client, exc), "lost-data") from exc
        raise


#: How Dask cancels a computation whose scattered data died with its worker: the tasks
#: that needed it (``lost dependencies``), or, when the scheduler had already forgotten
#: their dependents, those (``already forgotten``, seen under repeated worker kills).
_LOST_DATA_REASONS = ("lost dependencies", "already forgotten")


def lost_dependencies(exc: BaseException) -> bool:
    """Whether ``exc`` is Dask's cancellation of a computation whose data was lost with a
    worker (a rerun, with the data sent again, can finish it).

    Examples
    --------
    >>> from distributed.client import FutureCancelledError
    >>> from scalenc.engine.cluster import lost_dependencies
    >>> lost_dependencies(FutureCancelledError("finish_pass-1", "already forgotten"))
    True
    >>> lost_dependencies(FutureCancelledError("sum-2", "lost dependencies"))
    True
    >>> lost_dependencies(FutureCancelledError("sum-3", "cancelled by the client"))
    False
    """
    text = str(exc).lower()
    return isinstance(exc, CancelledError) and any(r in text for r in _LOST_DATA_REASONS)


def _lost(message: str, what: str) -> ClusterUnavailableError:
    """The error of a computation whose tasks a rerun could finish, marked with what was
    lost (``lost``: ``"scheduler"`` or ``"lost-data"``): a fit with a checkpoint resumes
    from it (:mod:`scalenc.engine.resume`)."""
    error = ClusterUnavailableError(message)
    error.lost = what
    return error


def _lost_data_message(client, exc: BaseException) -> str:
    """What :class:`ClusterUnavailableError` says when a worker died holding the only
    copy of data sent to the cluster (scattered), which Dask cannot compute again."""
    return (
        f"A worker of the Dask cluster at {address_of(client)} was lost during the computation "
        "while it held the only copy of data that was sent to the cluster once (a model "
        "array scalenc scattered to the workers, or a row block of NumPy input), so Dask "
        f"could not compute it again ({type(exc).__name__}: {exc}). Nothing was written as "
        "complete. Run again (a nanny restarts the lost worker; if it was killed for memory, "
        "give the workers more memory or use smaller chunk_rows). Dask's active memory "
        "manager keeps one copy of scattered data; to keep a copy on every worker, so that "
        "the loss of one is survived, turn it off on the scheduler (Dask config "
        "distributed.scheduler.active-memory-manager.start: false)."
    )


def no_workers_message(client, waited: float, workers: Mapping | None = None) -> str:
    """What :class:`ClusterUnavailableError` says when the cluster has had no running
    worker for ``waited`` seconds: no worker at all, or workers that are all paused or
    closing (``workers``, the scheduler's description of them, is asked for when not
    given).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> from scalenc.engine.cluster import no_workers_message
    >>> client = SimpleNamespace(scheduler=SimpleNamespace(address="tcp://10.0.0.5:8786"))
    >>> no_workers_message(client, 30.0, workers={})[:62]
    'The Dask cluster at tcp://10.0.0.5:8786 has had no workers for'
    """
    if workers is None:
        workers = _workers_info(client)
    if workers:
        return _paused_workers_message(client, waited, workers)
    return (
        f"The Dask cluster at {address_of(client)} has had no workers for {waited:g} s during "
        "the computation: every worker died or left and none joined, and Dask would wait "
        "forever. Nothing was written as complete. Workers killed by the OS for lack of "
        "memory are the usual cause (see the workers' logs, or `dmesg` for 'Out of memory: "
        "Killed process'): give them more memory or use less (smaller chunk_rows, fewer "
        "threads per worker, memory_limit=...), restart the workers "
        f"(`dask worker {address_of(client)}`) and run again. The wait is the Dask config "
        f"key {NO_WORKERS_CONFIG!r} (environment: DASK_SCALENC__NO_WORKERS_TIMEOUT)."
    )


def _paused_workers_message(client, waited: float, workers: Mapping) -> str:
    """The message for workers that the scheduler knows but that run no task: paused
    for memory (what to do about it) or closing (being retired)."""
    from collections import Counter

    statuses = Counter(str(info.get("status", "unknown")) for info in workers.values())
    counts = ", ".join(f"{n} {status}" for status, n in statuses.most_common())
    described = [_describe_worker(addr, info) for addr, info in workers.items()]
    if len(described) > _LISTED_WORKERS:
        more = len(described) - _LISTED_WORKERS
        described = [*described[:_LISTED_WORKERS], f"and {more} more"]
    head = (
        f"The Dask cluster at {address_of(client)} has had no running worker for {waited:g} s "
        f"during the computation: its {len(workers)} worker(s) take no task ({counts}), and "
        f"Dask would wait forever. Workers: {'; '.join(described)}. Nothing was written as "
        "complete. "
    )
    if "paused" in statuses:
        advice = (
            "A worker is paused while its process memory is above its pause threshold (Dask "
            "config distributed.worker.memory.pause, 80 % of its memory limit by default) "
            "and it has nothing left to spill: memory held outside Dask's tasks, or tasks "
            "too large for the worker. Give each worker more memory (`dask worker "
            "--memory-limit ...`, memory_limit=... for connect('local')), run fewer threads "
            "per worker (`--nthreads`), use smaller chunk_rows, or restart the workers to "
            "free their memory (`client.restart()`, or restart the `dask worker` processes), "
            "and run again."
        )
    else:
        advice = (
            "Workers that are closing (being retired) take no new task: start new workers "
            f"(`dask worker {address_of(client)}`) and run again."
        )
    return (
        f"{head}{advice} The wait is the Dask config key {NO_WORKERS_CONFIG!r} "
        "(environment: DASK_SCALENC__NO_WORKERS_TIMEOUT)."
    )


def _describe_worker(address: str, info: Mapping) -> str:
    """``"tcp://… paused, process memory 390 MiB of its 400 MiB limit (98 %)"``."""
    from dask.utils import format_bytes

    text = f"{address} {info.get('status', 'unknown')}"
    memory = (info.get("metrics") or {}).get("memory")
    limit = info.get("memory_limit")
    if memory is not None and limit:
        text += (
            f", process memory {format_bytes(memory)} of its {format_bytes(limit)} limit "
            f"({100 * memory / limit:.0f} %)"
        )
    elif memory is not None:
        text += f", process memory {format_bytes(memory)} (no memory limit)"
    return text


def _watched_get(client, timeout: float):
    """``client.get`` that fails with :class:`ClusterUnavailableError` after ``timeout``
    seconds without any running worker, instead of waiting for workers forever."""

    def get(dsk, keys, **kwargs):
        from distributed.client import futures_of

        for attempt in range(RESCATTER_ATTEMPTS + 1):
            packed = client.get(dsk, keys, sync=False, **kwargs)
            futures = futures_of(packed)
            try:
                _wait_while_workers(client, futures, timeout)
                return client.gather(packed)
            except CancelledError as exc:
                # a worker died with the last copy of scattered data: send it again and
                # compute again (the scheduler cancels what depended on it)
                lost = lost_dependencies(exc)
                if not (lost and attempt < RESCATTER_ATTEMPTS and rescatter_lost(client)):
                    raise
            finally:
                for future in futures:
                    future.release()
            _wait_released(client, futures)  # else the same keys would reuse the failure
        raise AssertionError("unreachable")  # pragma: no cover

    return get


def _wait_released(client, futures, timeout: float = 30.0) -> None:
    """Wait until the client has forgotten ``futures``' keys (their release runs on the
    client's event loop), so that the same graph can be submitted again afresh."""
    deadline = time.monotonic() + timeout
    while any(f.key in client.futures for f in futures) and time.monotonic() < deadline:
        time.sleep(0.02)


def _wait_while_workers(client, futures, timeout: float) -> None:
    """Return when every future is done or one has failed (gather then raises its
    error); raise :class:`ClusterUnavailableError` once the cluster has had no running
    worker (none at all, or all paused or closing) for ``timeout`` seconds.

    The scheduler is asked for its running workers every ``_WATCH_INTERVAL`` seconds,
    every ``_IDLE_WATCH_INTERVAL`` while none runs. The clock restarts whenever a worker
    is seen running again (joined, or resumed from a pause), when one of ``futures``
    finishes, and when the scheduler's full description of the workers, asked for once
    before raising, shows a running worker. A worker that runs for less than
    ``_IDLE_WATCH_INTERVAL`` at a time between pauses can go unseen; such a worker does
    next to no work.
    """
    from distributed import wait

    pending, alone_since, interval = list(futures), None, _WATCH_INTERVAL
    while pending:
        try:
            wait(pending, timeout=interval, return_when="FIRST_COMPLETED")
        except TimeoutError:
            pass
        except CancelledError:  # a lost scheduler: gather raises the full story
            return
        if any(f.status in ("error", "cancelled") for f in pending):
            return
        still = [f for f in pending if f.status in ("pending", "lost")]
        progressed, pending = len(still) < len(pending), still
        if not pending or client.status != "running":
            return
        if progressed or _running_worker_count(client) > 0:
            alone_since, interval = None, _WATCH_INTERVAL
            continue
        interval = _IDLE_WATCH_INTERVAL
        if alone_since is None:
            alone_since = time.monotonic()
        elif time.monotonic() - alone_since > timeout:
            workers = _workers_info(client)
            if any(info.get("status") == "running" for info in workers.values()):
                alone_since = None  # one has just joined or resumed
                continue
            raise ClusterUnavailableError(no_workers_message(client, timeout, workers))


def _running_worker_count(client) -> int:
    """Workers the scheduler can give tasks now: status running, not paused or closing
    (-1 when it cannot be asked).

    One ``ncores_running`` request, the call ``Client.scatter`` makes to skip paused
    workers: the scheduler answers from its worker table ({address: threads}, a few
    bytes per worker), so it is cheap enough to make every ``_WATCH_INTERVAL``.
    """
    try:
        return len(client.sync(client.scheduler.ncores_running))
    except Exception:  # noqa: BLE001 - a lost scheduler is reported by gather
        return -1


def _workers_info(client) -> dict:
    """The scheduler's description of every worker (status, memory_limit, metrics), or
    an empty dict when it cannot be asked. Heavier than :func:`_running_worker_count`
    (each worker's metrics): asked once, for an error message."""
    try:
        try:
            info = client.scheduler_info(n_workers=-1)
        except TypeError:  # distributed before n_workers: every worker by default
            info = client.scheduler_info()
        return dict(info.get("workers", {}))
    except Exception:  # noqa: BLE001 - the message then reads as for no workers
        return {}


def _scheduler_lost(client, exc: BaseException) -> bool:
    from distributed.comm.core import CommClosedError

    if getattr(exc, "reason", None) == "scheduler-connection-lost":
        return True
    if isinstance(exc, (CancelledError, CommClosedError, OSError)):
        return getattr(client, "status", "running") != "running"
    return False


def address_of(client) -> str:
    """The address of ``client``'s scheduler, as the errors name it.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> from scalenc.engine.cluster import address_of
    >>> address_of(SimpleNamespace(scheduler=SimpleNamespace(address="tcp://10.0.0.5:8786")))
    'tcp://10.0.0.5:8786'
    """
    try:
        return client.scheduler.address
    except AttributeError:  # pragma: no cover - closed client
        return "<unknown>"
