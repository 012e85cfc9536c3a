"""Connecting to a cluster: :func:`connect` (threads, a LocalCluster, tcp/tls schedulers,
scheduler files, ``$SCALENC_SCHEDULER``) and the TLS settings it builds (:func:`make_security`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import dask

from scalenc.engine.cluster import address_of, logger
from scalenc.exceptions import (
    ClusterUnavailableError,
    InputError,
    InputTypeError,
    MissingDeviceDependency,
)

__all__ = ["ENV_SCHEDULER", "ENV_SCHEDULER_FILE", "connect", "make_security"]


ENV_SCHEDULER = "SCALENC_SCHEDULER"
ENV_SCHEDULER_FILE = "SCALENC_SCHEDULER_FILE"
LOOPBACK = "127.0.0.1"


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
    >>> from scalenc.engine.connect import make_security
    >>> make_security(None) is None
    True
    >>> security = make_security({"require_encryption": False})
    >>> type(security).__name__, security.require_encryption
    ('Security', False)
    >>> make_security("certificates/")  # a directory that does not exist
    Traceback (most recent call last):
    ...
    scalenc.exceptions.InputError: security='certificates/' is not a directory. Pass ...

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
            raise InputError(
                f"security={os.fspath(security)!r} is not a directory. Pass a directory holding "
                "ca.pem, client.pem and client-key.pem (deploy/tls/make-certs.sh makes them), "
                "a dict of file names, or a distributed.security.Security."
            )
        files = {key: folder / name for key, name in _CERT_FILES.items()}
        missing = [str(p) for p in files.values() if not p.is_file()]
        if missing:
            raise InputError(f"The certificate directory {folder} lacks {missing}.")
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
                raise InputError(f"security[{key!r}] = {value!r} is not a file.")
        try:
            return Security(**kwargs)
        except TypeError as exc:
            raise InputError(f"Bad security settings {sorted(security)}: {exc}") from None
    raise InputTypeError(
        "security must be a distributed.security.Security, a dict of certificate files, or "
        f"a certificate directory; got {type(security).__name__}."
    )


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
            raise InputError(
                f"Cannot tell a Dask scheduler from {address!r}. Use 'tcp://host:8786', "
                "'tls://host:8786', 'local', or a scheduler file."
            )
        address = f"tcp://{address}"
    scheme = address.split("://", 1)[0]
    if scheme not in ("tcp", "tls", "inproc", "ucx", "ws", "wss"):
        raise InputError(
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
    address : None, "local", "local-cuda", "threads", a scheduler address, or a cluster
        ``None`` reads ``$SCALENC_SCHEDULER`` (or ``$SCALENC_SCHEDULER_FILE``); when
        neither is set, or with ``"threads"``, Dask's threaded scheduler runs in this
        process with BLAS pinned to one thread per Dask thread, and None is yielded.
        ``"local"`` starts a LocalCluster of worker processes bound to 127.0.0.1 (its
        dashboard on 127.0.0.1, a free port). ``"local-cuda"`` starts dask-cuda's
        ``LocalCUDACluster`` there instead: one worker per visible GPU (``n_workers``
        GPUs at most), each pinned to its device (needs ``pip install 'scalenc[gpu]'``;
        load the data with ``device="gpu"``). ``"tcp://host:port"`` / ``"tls://host:port"``
        connects to a running scheduler (a bare ``host:port`` means tcp); a cluster
        object (``LocalCluster``, ``LocalCUDACluster``, ...) connects to its scheduler.
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
    if address is None and scheduler_file is None:
        address = os.environ.get(ENV_SCHEDULER) or None
        scheduler_file = os.environ.get(ENV_SCHEDULER_FILE) or None
    if scheduler_file is not None and address is not None:
        raise InputError("Pass either a scheduler address or a scheduler file, not both.")
    if scheduler_file is None and address in (None, "threads", "threading"):
        with dask.config.set(scheduler="threads"):
            yield None
        return
    sec = make_security(security)
    if address in ("local", "local-cuda"):
        cluster = _local_cluster(address, n_workers, threads_per_worker, memory_limit, sec)
        where = f"a {type(cluster).__name__}"
        with cluster, _client(cluster, sec, timeout, quiet, where=where) as client:
            yield client
        return
    if threads_per_worker is not None or memory_limit is not None:
        raise InputError(
            "threads_per_worker and memory_limit apply to connect('local') only; a remote "
            "cluster's workers set them with `dask worker --nthreads ... --memory-limit ...`."
        )
    if hasattr(address, "scheduler_address"):  # a cluster object the caller started
        where = type(address).__name__
        sec = sec if sec is not None else getattr(address, "security", None)
    elif scheduler_file is not None:
        address = _read_scheduler_file(scheduler_file)
        where = f"{address} (from {os.fspath(scheduler_file)})"
    else:
        address = where = _check_address(address)
    if isinstance(address, str) and address.startswith("tls://") and sec is None:
        sec = _security_from_config(address)
    with _client(address, sec, timeout, quiet, where=where) as client:
        _wait_for_workers(client, n_workers, timeout, where)
        yield client


def _local_cluster(address, n_workers, threads_per_worker, memory_limit, security):
    """A LocalCluster of worker processes on 127.0.0.1 (``"local"``), or dask-cuda's
    LocalCUDACluster there (``"local-cuda"``: one worker process per GPU)."""
    kwargs = {"memory_limit": memory_limit} if memory_limit is not None else {}
    if security is not None:
        kwargs.update(security=security, protocol="tls://")
    if address == "local":
        from distributed import LocalCluster as Cluster

        kwargs.update(n_workers=n_workers, processes=True)
    else:
        try:
            from dask_cuda import LocalCUDACluster as Cluster
        except ImportError as error:
            raise MissingDeviceDependency(
                "connect('local-cuda') needs dask-cuda and CuPy: pip install 'scalenc[gpu]'."
            ) from error
        threads_per_worker = threads_per_worker or 1
        if n_workers is not None:
            kwargs["n_workers"] = n_workers
    return Cluster(
        threads_per_worker=threads_per_worker,
        host=LOOPBACK,
        dashboard_address=f"{LOOPBACK}:0",
        silence_logs=logging.WARNING,
        **kwargs,
    )


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
        raise ClusterUnavailableError(_refusal_message(where, exc, timeout)) from exc
    try:
        _announce(client, quiet)
        with client.as_current():
            yield client
    finally:
        with contextlib.suppress(Exception):
            client.close(timeout=min(timeout, 10))


def _refusal_message(where: str, exc: BaseException, timeout) -> str:
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
    logger.info("Dask scheduler %s, dashboard %s", address_of(client), link)
    if not quiet:
        print(f"scalenc: Dask scheduler {address_of(client)}; dashboard {link}", file=sys.stderr)


def _wait_for_workers(client, n_workers, timeout, where) -> None:
    wanted = 1 if n_workers is None else n_workers
    try:
        client.wait_for_workers(wanted, timeout=timeout)
    except (TimeoutError, OSError) as exc:
        have = len(client.nthreads())
        raise ClusterUnavailableError(
            f"The Dask scheduler at {where} has {have} worker(s) after {timeout:g} s; "
            f"{wanted} needed. Start workers with `dask worker {address_of(client)}`."
        ) from exc
