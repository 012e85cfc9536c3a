"""A command's session: its log and warnings on stderr, the scheduler it runs on (connected
once, kept for a job's steps), and its progress display.

What stderr shows besides the progress:

* always, warnings (``warning: MESSAGE``, each message once) and errors, and the scheduler
  a command connects to with its dashboard;
* a timestamped line per event too (data read, fit done, model saved, a job's steps) when
  progress is shown as lines (``--progress lines``, the default where stderr is not a
  terminal: a batch log), not beside a progress bar;
* with ``--verbose``, every event and the traceback of a failure, whatever the progress;
* with ``--quiet``, errors only.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings

from scalenc.cli.errors import BadInput
from scalenc.cli.progress import Progress, choose_mode
from scalenc.engine.cluster import ClusterUnavailableError
from scalenc.engine.connect import connect

log = logging.getLogger("scalenc.cli")

#: The level of the log lines shown beside a progress bar too (between INFO and WARNING):
#: the scheduler a command connects to and its dashboard.
NOTICE = logging.INFO + 5


class Session:
    """What the steps of one invocation share: the log, the client, progress settings.

    ``ends_process``: an interruption ends the process once it is reported (the
    ``scalenc`` executable), so the cluster is not closed first.
    """

    def __init__(self, args, *, ends_process: bool = False):
        self.args = args
        self.client = None
        self.scheduler_info = {"kind": "threads"}
        self.quiet = args.quiet
        self.ends_process = ends_process

    def progress(self, label: str, data=None, passes: int | None = None, counted=False):
        """Progress of the computations of one step; those reading ``data`` are its
        ``passes`` (when known) over the data, or with ``counted`` (a fit) those the
        engine counts."""
        mode = "none" if self.quiet else self.args.progress
        return Progress(
            label,
            mode=mode,
            stream=sys.stderr,
            interval=self.args.progress_interval,
            client=self.client,
            data=data,
            passes=passes,
            counted=counted,
        )

    @contextlib.contextmanager
    def connected(self, address=None, scheduler_file=None, n_workers=None, timeout=None):
        """Connect through :func:`scalenc.connect` (which also reads ``$SCALENC_SCHEDULER``
        and ``$SCALENC_SCHEDULER_FILE``); threads in this process when nothing is set."""
        address = address or self.args.scheduler
        scheduler_file = scheduler_file or self.args.scheduler_file
        n_workers = n_workers or self.args.n_workers
        timeout = timeout or self.args.connect_timeout
        with contextlib.ExitStack() as stack:
            self.client = stack.enter_context(
                _connect(address, scheduler_file, n_workers, timeout, self.args.tls_dir)
            )
            if self.client is None:
                yield None
                return
            info = {"kind": "distributed", "address": self.client.scheduler.address}
            link = getattr(self.client, "dashboard_link", None)
            if link:
                info["dashboard"] = link
            self.scheduler_info = info
            log.log(
                NOTICE,
                "connected to Dask scheduler %s%s",
                info["address"],
                f"; dashboard: {link}" if link else "",
            )
            try:
                yield self.client
            except BaseException as exc:
                if self.ends_process and interrupted(exc):
                    # the process ends once the interruption is reported: the scheduler
                    # releases a lost client's tasks, and a LocalCluster's workers end
                    # with this process, so nothing waits for them to close, and their
                    # logs do not follow the command's message (kept referenced: a
                    # collected generator would close them)
                    self._left_open = stack.pop_all()
                raise
            finally:
                self.client = None


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is a SIGINT or SIGTERM, or a job step's failure caused by one."""
    return isinstance(exc, KeyboardInterrupt) or isinstance(exc.__cause__, KeyboardInterrupt)


@contextlib.contextmanager
def _connect(address, scheduler_file, n_workers, timeout, tls_dir):
    """scalenc.connect, with its failures mapped to exit codes 2 (bad setting) and 3."""
    with contextlib.ExitStack() as stack:  # a failed connect is closed as it raises
        try:
            client = stack.enter_context(
                connect(
                    address,
                    scheduler_file=scheduler_file,
                    n_workers=n_workers,
                    security=tls_dir,
                    timeout=timeout,
                    quiet=True,
                )
            )
        except (ValueError, TypeError, FileNotFoundError) as exc:
            raise BadInput(f"Bad scheduler setting {address or scheduler_file!r}: {exc}") from exc
        except ClusterUnavailableError:
            raise
        except Exception as exc:
            raise ClusterUnavailableError(
                f"Cannot reach the Dask scheduler at {address or scheduler_file!r} within "
                f"{timeout:g}s ({type(exc).__name__}: {exc}). Check the address and that the "
                "scheduler is running, or drop --scheduler to run on local threads."
            ) from exc
        yield client


def setup_logging(args) -> logging.Handler:
    """The command's log on stderr, as the module's docstring says."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LineFormatter("%(asctime)s scalenc %(message)s", "%H:%M:%S"))
    log.handlers = [handler]
    log.propagate = False
    if args.quiet:
        level = logging.ERROR
    elif args.verbose:
        level = logging.DEBUG
    else:
        lines = choose_mode(args.progress, sys.stderr) == "lines"
        level = logging.INFO if lines else NOTICE
    log.setLevel(level)
    return handler


class _LineFormatter(logging.Formatter):
    """``HH:MM:SS scalenc MESSAGE``; a warning as one line ``warning: MESSAGE``."""

    def format(self, record: logging.LogRecord) -> str:
        if record.levelno == logging.WARNING:
            return "warning: " + " ".join(record.getMessage().split())
        return super().format(record)


@contextlib.contextmanager
def one_line_warnings():
    """While the command runs, Python's warnings (the library's, Dask's, ...) are shown in
    the log, one line each (``warning: MESSAGE``, no file name or source line), and a
    message that repeats only once; ``--quiet`` hides them. Which warnings are shown or
    raised is left to the warning filters (``-W``, ``PYTHONWARNINGS``); the previous
    display is restored after, so the library's own use is unchanged."""
    seen: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None):
        text = str(message)
        if text not in seen:
            seen.add(text)
            log.warning("%s", text)

    previous = warnings.showwarning
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous
