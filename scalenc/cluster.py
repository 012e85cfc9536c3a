"""Where computations run: the active Dask scheduler, with BLAS pinned for threads.

Estimators never create clients. They call :func:`compute`, which uses whatever scheduler
is active: a ``distributed.Client`` if one is the default, else ``dask.config``'s
scheduler (threads by default). Under an in-process scheduler BLAS is limited to one
thread per Dask worker thread — two BLAS threads under two Dask threads made the kernel
pass three times slower on a 2-core machine. Distributed workers started by a nanny
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

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import CancelledError
from pathlib import Path

import dask

from .exceptions import ClusterUnavailableError

__all__ = [
    "ClusterUnavailableError",
    "ENV_SCHEDULER",
    "ENV_SCHEDULER_FILE",
    "NO_WORKERS_TIMEOUT",
    "NO_WORKERS_CONFIG",
    "compute",
    "no_workers_timeout",
    "connect",
    "active_client",
    "uses_distributed",
    "blas_single_thread",
    "make_security",
]

logger = logging.getLogger(__name__)

ENV_SCHEDULER = "SCALENC_SCHEDULER"
ENV_SCHEDULER_FILE = "SCALENC_SCHEDULER_FILE"
LOOPBACK = "127.0.0.1"

#: Default seconds a distributed computation waits while the cluster has no running
#: worker (every worker died, e.g. killed by the OS for memory, or left; or every worker
#: is paused for memory or closing) before it fails with :class:`ClusterUnavailableError`.
#: Override with the Dask config key :data:`NO_WORKERS_CONFIG` (see
#: :func:`no_workers_timeout`).
NO_WORKERS_TIMEOUT = 300.0
NO_WORKERS_CONFIG = "scalenc.no-workers-timeout"
#: Times a computation is submitted again after a worker died with the last copy of
#: data scalenc scattered (sent again first, see ``scalenc._engine.rescatter_lost``).
RESCATTER_ATTEMPTS = 3
_WATCH_INTERVAL = 0.5  # seconds between looks at the number of running workers
_IDLE_WATCH_INTERVAL = 0.1  # the same while none runs (the scheduler then has little to do)
_LISTED_WORKERS = 5  # workers described one by one in the paused-workers message

# Names a certificate directory made by deploy/tls/make-certs.sh holds.
_CERT_FILES = {
    "tls_ca_file": "ca.pem",
    "tls_client_cert": "client.pem",
    "tls_client_key": "client-key.pem",
}
_SECURITY_ALIASES = {
    "ca_file": "tls_ca_file",
    "ca": "tls_ca_file",
    "cert": "tls_client_cert",
    "cert_file": "tls_client_cert",
    "key": "tls_client_key",
    "key_file": "tls_client_key",
}


# --- running computations ------------------------------------------------------------


def active_client():
    """The default ``distributed.Client`` if one is active, else None.

    Examples
    --------
    >>> import scalenc
    >>> from scalenc.cluster import active_client
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
    >>> from scalenc.cluster import uses_distributed
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
    """Limit BLAS/OpenMP pools to one thread for the duration (in this process).

    Examples
    --------
    >>> from threadpoolctl import threadpool_info
    >>> from scalenc.cluster import blas_single_thread
    >>> with blas_single_thread():
    ...     print(all(pool["num_threads"] == 1 for pool in threadpool_info()))
    True
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield


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
    >>> from scalenc.cluster import no_workers_timeout
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
    >>> from scalenc.cluster import compute
    >>> total, squares = compute(da.ones(10, chunks=5).sum(), da.arange(4, chunks=2) ** 2)
    >>> float(total), squares
    (10.0, array([0, 1, 4, 9]))
    """
    if _threaded_in_process():
        with blas_single_thread():
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
            raise ClusterUnavailableError(
                f"Lost the connection to the Dask scheduler at {_address(client)} during the "
                f"computation ({type(exc).__name__}: {exc}). Nothing was written as complete; "
                "check the scheduler's log, restart it, and run again."
            ) from exc
        if type(exc).__name__ == "NoWorkerError":  # the scheduler's no-workers-timeout
            raise ClusterUnavailableError(_no_workers_message(client, exc.args[-1])) from exc
        if isinstance(exc, CancelledError) and "lost dependencies" in str(exc).lower():
            raise ClusterUnavailableError(_lost_data_message(client, exc)) from exc
        raise


def _lost_data_message(client, exc: BaseException) -> str:
    """What :class:`ClusterUnavailableError` says when a worker died holding the only
    copy of data sent to the cluster (scattered), which Dask cannot compute again."""
    return (
        f"A worker of the Dask cluster at {_address(client)} was lost during the computation "
        "while it held the only copy of data that was sent to the cluster once (a model "
        "array scalenc scattered to the workers, or a row block of NumPy input), so Dask "
        f"could not compute it again ({type(exc).__name__}: {exc}). Nothing was written as "
        "complete. Run again (a nanny restarts the lost worker; if it was killed for memory, "
        "give the workers more memory or use smaller chunk_rows). Dask's active memory "
        "manager keeps one copy of scattered data; to keep a copy on every worker, so that "
        "the loss of one is survived, turn it off on the scheduler (Dask config "
        "distributed.scheduler.active-memory-manager.start: false)."
    )


def _no_workers_message(client, waited: float, workers: Mapping | None = None) -> str:
    """What :class:`ClusterUnavailableError` says when the cluster has had no running
    worker for ``waited`` seconds: no worker at all, or workers that are all paused or
    closing (``workers``, the scheduler's description of them, is asked for when not
    given)."""
    if workers is None:
        workers = _workers_info(client)
    if workers:
        return _paused_workers_message(client, waited, workers)
    return (
        f"The Dask cluster at {_address(client)} has had no workers for {waited:g} s during "
        "the computation: every worker died or left and none joined, and Dask would wait "
        "forever. Nothing was written as complete. Workers killed by the OS for lack of "
        "memory are the usual cause (see the workers' logs, or `dmesg` for 'Out of memory: "
        "Killed process'): give them more memory or use less (smaller chunk_rows, fewer "
        "threads per worker, memory_limit=...), restart the workers "
        f"(`dask worker {_address(client)}`) and run again. The wait is the Dask config "
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
        f"The Dask cluster at {_address(client)} has had no running worker for {waited:g} s "
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
            f"(`dask worker {_address(client)}`) and run again."
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

        from ._engine import rescatter_lost

        for attempt in range(RESCATTER_ATTEMPTS + 1):
            packed = client.get(dsk, keys, sync=False, **kwargs)
            futures = futures_of(packed)
            try:
                _wait_while_workers(client, futures, timeout)
                return client.gather(packed)
            except CancelledError as exc:
                # a worker died with the last copy of scattered data: send it again and
                # compute again (the scheduler cancels what depended on it)
                lost = "lost dependencies" in str(exc).lower()
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
            raise ClusterUnavailableError(_no_workers_message(client, timeout, workers))


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


def _address(client) -> str:
    try:
        return client.scheduler.address
    except AttributeError:  # pragma: no cover - closed client
        return "<unknown>"


# --- choosing a cluster --------------------------------------------------------------


def make_security(security):
    """A ``distributed.security.Security`` from what a user may hold.

    Parameters
    ----------
    security : Security, mapping, path or None
        ``None`` gives None. A ``Security`` is returned as is. A mapping takes
        ``Security``'s keyword arguments (``tls_ca_file``, ``tls_client_cert``,
        ``tls_client_key``, …) or the short names ``ca_file``, ``cert``, ``key``.
        A path is a directory made by ``deploy/tls/make-certs.sh`` holding ``ca.pem``,
        ``client.pem`` and ``client-key.pem`` (and, used by ``connect("local")``,
        ``scheduler.pem``, ``worker.pem`` and their keys). Encryption is required unless
        the mapping says ``require_encryption=False``.

    Examples
    --------
    >>> from scalenc.cluster import make_security
    >>> make_security(None) is None
    True
    >>> security = make_security({"require_encryption": False})
    >>> type(security).__name__, security.require_encryption
    ('Security', False)
    >>> make_security("certificates/")  # a directory that does not exist
    Traceback (most recent call last):
    ...
    ValueError: security='certificates/' is not a directory. Pass a directory holding ca.pem, ...

    The directory ``deploy/tls/make-certs.sh ~/scalenc-certs`` writes:

    >>> security = make_security("~/scalenc-certs")  # doctest: +SKIP
    >>> security.require_encryption  # doctest: +SKIP
    True
    """
    if security is None:
        return None
    from distributed.security import Security

    if isinstance(security, Security):
        return security
    if isinstance(security, (str, os.PathLike)):
        folder = Path(security).expanduser()
        if not folder.is_dir():
            raise ValueError(
                f"security={os.fspath(security)!r} is not a directory. Pass a directory holding "
                "ca.pem, client.pem and client-key.pem (deploy/tls/make-certs.sh makes them), "
                "a dict of file names, or a distributed.security.Security."
            )
        files = {key: folder / name for key, name in _CERT_FILES.items()}
        missing = [str(p) for p in files.values() if not p.is_file()]
        if missing:
            raise ValueError(f"The certificate directory {folder} lacks {missing}.")
        for role in ("scheduler", "worker"):  # what connect("local", security=...) needs
            if (folder / f"{role}.pem").is_file() and (folder / f"{role}-key.pem").is_file():
                files[f"tls_{role}_cert"] = folder / f"{role}.pem"
                files[f"tls_{role}_key"] = folder / f"{role}-key.pem"
        return Security(require_encryption=True, **{k: str(v) for k, v in files.items()})
    if isinstance(security, Mapping):
        kwargs = {
            _SECURITY_ALIASES.get(k, k): (os.fspath(v) if isinstance(v, os.PathLike) else v)
            for k, v in security.items()
        }
        kwargs.setdefault("require_encryption", True)
        for key, value in kwargs.items():
            is_path = key.endswith(("_file", "_cert", "_key")) and value is not None
            if is_path and not Path(value).is_file():
                raise ValueError(f"security[{key!r}] = {value!r} is not a file.")
        try:
            return Security(**kwargs)
        except TypeError as exc:
            raise ValueError(f"Bad security settings {sorted(security)}: {exc}") from None
    raise TypeError(
        "security must be a distributed.security.Security, a dict of certificate files, or "
        f"a certificate directory; got {type(security).__name__}."
    )


def _scheduler_from_env(address, scheduler_file):
    if address is None and scheduler_file is None:
        address = os.environ.get(ENV_SCHEDULER) or None
        scheduler_file = os.environ.get(ENV_SCHEDULER_FILE) or None
    return address, scheduler_file


def _read_scheduler_file(path) -> str:
    path = Path(path)
    if not path.is_file():
        raise ClusterUnavailableError(
            f"The scheduler file {path} does not exist. Start a scheduler with "
            f"`dask scheduler --host {LOOPBACK} --scheduler-file {path}` (or check the path)."
        )
    try:
        return json.loads(path.read_text())["address"]
    except (ValueError, KeyError) as exc:
        raise ClusterUnavailableError(
            f"The scheduler file {path} is not one written by `dask scheduler` ({exc!r})."
        ) from None


def _check_address(address: str) -> str:
    if "://" not in address:
        if ":" not in address:
            raise ValueError(
                f"Cannot tell a Dask scheduler from {address!r}. Use 'tcp://host:8786', "
                "'tls://host:8786', 'local', or a scheduler file."
            )
        address = f"tcp://{address}"
    scheme = address.split("://", 1)[0]
    if scheme not in ("tcp", "tls", "inproc", "ucx", "ws", "wss"):
        raise ValueError(
            f"Unknown scheduler protocol {scheme!r} in {address!r}; use tcp:// or tls://."
        )
    return address


@contextlib.contextmanager
def connect(
    address: str | None = None,
    *,
    scheduler_file: str | os.PathLike | None = None,
    n_workers: int | None = None,
    threads_per_worker: int | None = None,
    security=None,
    memory_limit: str | float | None = None,
    timeout: float = 30.0,
    quiet: bool = False,
) -> Iterator:
    """Run the ``with`` block's scalenc computations on a chosen Dask scheduler.

    Parameters
    ----------
    address : None, "local", "threads", or a scheduler address
        ``None`` reads ``$SCALENC_SCHEDULER`` (or ``$SCALENC_SCHEDULER_FILE``); when
        neither is set, or with ``"threads"``, Dask's threaded scheduler runs in this
        process with BLAS pinned to one thread per Dask thread, and None is yielded.
        ``"local"`` starts a LocalCluster of worker processes bound to 127.0.0.1 (its
        dashboard on 127.0.0.1, a free port). ``"tcp://host:port"`` / ``"tls://host:port"``
        connects to a running scheduler (a bare ``host:port`` means tcp).
    scheduler_file : path, optional
        The JSON file ``dask scheduler --scheduler-file`` writes, instead of ``address``.
    n_workers : int, optional
        ``"local"``: worker processes to start (default: Dask's choice for this machine).
        Remote: wait until this many workers have joined. Without it, a remote scheduler
        must have at least one worker within ``timeout``.
    threads_per_worker : int, optional
        ``"local"`` only.
    security : Security, dict, certificate directory or None
        TLS credentials, see :func:`make_security`. For a ``tls://`` address without
        ``security``, Dask's configuration (``distributed.comm.tls.*``, e.g.
        ``DASK_DISTRIBUTED__COMM__TLS__CA_FILE``) is used.
    memory_limit : str or float, optional
        ``"local"`` only: per-worker memory limit (e.g. ``"4GB"``).
    timeout : float, default=30
        Seconds to reach the scheduler (and to wait for workers).
    quiet : bool, default=False
        Do not print the dashboard link to stderr (it is logged at INFO either way).

    Yields
    ------
    distributed.Client or None
        The client, set as the default scheduler inside the block; None for threads.

    Raises
    ------
    ClusterUnavailableError
        The scheduler cannot be reached, refuses the connection (e.g. TLS without valid
        certificates), or has no workers within ``timeout``.

    Examples
    --------
    Threads in this process (the default; None is yielded):

    >>> import numpy as np
    >>> import scalenc
    >>> X = np.random.default_rng(0).normal(size=(40, 2)) + np.repeat([[0], [5]], 20, axis=0)
    >>> y = np.repeat([0, 1], 20)
    >>> with scalenc.connect("threads") as client:
    ...     model = scalenc.EncoderClassifier().fit(X, y)
    >>> client is None, float(model.score(X, y))
    (True, 1.0)

    A running cluster, or a LocalCluster of worker processes on 127.0.0.1 (a script that
    starts one must guard it with ``if __name__ == "__main__":``):

    >>> with scalenc.connect("tcp://127.0.0.1:8786"):          # doctest: +SKIP
    ...     model = scalenc.EncoderClassifier().fit(X, y)
    >>> if __name__ == "__main__":                             # doctest: +SKIP
    ...     with scalenc.connect("local", n_workers=2, memory_limit="2GB") as client:
    ...         print(client.dashboard_link)
    ...         model = scalenc.NRBFNClassifier().fit(X, y)
    """
    address, scheduler_file = _scheduler_from_env(address, scheduler_file)
    if scheduler_file is not None and address is not None:
        raise ValueError("Pass either a scheduler address or a scheduler file, not both.")
    if scheduler_file is None and address in (None, "threads", "threading"):
        with dask.config.set(scheduler="threads"):
            yield None
        return
    sec = make_security(security)
    if address == "local":
        with _local_cluster(n_workers, threads_per_worker, memory_limit, sec) as cluster:
            with _client(cluster, sec, timeout, quiet, where="a LocalCluster") as client:
                yield client
        return
    if threads_per_worker is not None or memory_limit is not None:
        raise ValueError(
            "threads_per_worker and memory_limit apply to connect('local') only; a remote "
            "cluster's workers set them with `dask worker --nthreads ... --memory-limit ...`."
        )
    if scheduler_file is not None:
        address = _read_scheduler_file(scheduler_file)
        where = f"{address} (from {os.fspath(scheduler_file)})"
    else:
        address = _check_address(address)
        where = address
    if address.startswith("tls://") and sec is None:
        sec = _security_from_config(address)
    with _client(address, sec, timeout, quiet, where=where) as client:
        _wait_for_workers(client, n_workers, timeout, where)
        yield client


@contextlib.contextmanager
def _local_cluster(n_workers, threads_per_worker, memory_limit, security):
    from distributed import LocalCluster

    kwargs = {"memory_limit": memory_limit} if memory_limit is not None else {}
    if security is not None:
        kwargs.update(security=security, protocol="tls://")
    with LocalCluster(
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        processes=True,
        host=LOOPBACK,
        dashboard_address=f"{LOOPBACK}:0",
        silence_logs=logging.WARNING,
        **kwargs,
    ) as cluster:
        yield cluster


def _security_from_config(address: str):
    from distributed.security import Security

    sec = Security()
    if not (sec.tls_ca_file and sec.tls_client_cert):
        raise ClusterUnavailableError(
            f"The scheduler at {address} speaks TLS, but no certificates were given. Pass "
            "security=<certificate directory or Security> (CLI: --tls-ca-file, --tls-cert, "
            "--tls-key), or set DASK_DISTRIBUTED__COMM__TLS__CA_FILE, "
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT and ..._CLIENT__KEY."
        )
    return sec


@contextlib.contextmanager
def _client(target, security, timeout, quiet, *, where):
    from distributed import Client

    try:
        client = Client(target, security=security, timeout=timeout, set_as_default=True)
    except Exception as exc:  # OSError, TimeoutError, TypeError (TLS), CommClosedError…
        raise ClusterUnavailableError(_refusal_message(where, exc, security, timeout)) from exc
    try:
        _announce(client, quiet)
        with client.as_current():
            yield client
    finally:
        with contextlib.suppress(Exception):
            client.close(timeout=min(timeout, 10))


def _refusal_message(where: str, exc: BaseException, security, timeout) -> str:
    text = f"{type(exc).__name__}: {exc}"
    head = f"Cannot use the Dask scheduler at {where}: {text}."
    if "TLS" in str(exc) or "certificate" in str(exc) or "ssl" in text.lower():
        return (
            f"{head} The scheduler requires TLS and refused our credentials: connect with "
            "tls:// and the CA file, client certificate and key of that cluster "
            "(security=..., CLI --tls-ca-file/--tls-cert/--tls-key)."
        )
    if "reset by peer" in text or "Stream is closed" in text:
        return (
            f"{head} The scheduler closed the connection at once; if it uses TLS, connect "
            "with tls:// and its certificates (security=...)."
        )
    return (
        f"{head} Check that the scheduler is running and the address/port is right "
        f"(waited {timeout:g} s); start one with `dask scheduler --host {LOOPBACK}`, or run "
        "without a scheduler to use threads in this process."
    )


def _announce(client, quiet: bool) -> None:
    link = client.dashboard_link
    logger.info("Dask scheduler %s, dashboard %s", _address(client), link)
    if not quiet:
        print(f"scalenc: Dask scheduler {_address(client)}; dashboard {link}", file=sys.stderr)


def _wait_for_workers(client, n_workers, timeout, where) -> None:
    wanted = 1 if n_workers is None else n_workers
    try:
        client.wait_for_workers(wanted, timeout=timeout)
    except (TimeoutError, OSError) as exc:
        have = len(client.nthreads())
        raise ClusterUnavailableError(
            f"The Dask scheduler at {where} has {have} worker(s) after {timeout:g} s; "
            f"{wanted} needed. Start workers with `dask worker {_address(client)}`."
        ) from exc
