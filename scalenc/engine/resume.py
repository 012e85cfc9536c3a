"""Fits that outlive pre-empted workers: a fit with a checkpoint resumes from it by itself
while its attempts make progress, and says why when it cannot.

Dask gives up on a task once ``distributed.scheduler.allowed-failures`` (3) workers died
while running it (``KilledWorker``): right for a task that crashes its workers, wrong for a
batch job on spot machines, where the same long block is only unlucky. A fit with a
checkpoint (:mod:`scalenc.engine.checkpoint`) has kept what its finished tasks computed, so
:func:`fit_resuming` runs it again, as a rerun of the same fit would, reading that work back
and computing only the rest, when it loses a task to

* ``KilledWorker`` (the workers that ran a task died, pre-empted or killed);
* a lost scheduler or connection (:class:`~scalenc.exceptions.ClusterUnavailableError`
  from :func:`scalenc.engine.cluster.compute`, once the client is connected again), or a
  worker lost with the only copy of data sent to the cluster.

From the second attempt on, every block worth its write is saved
(:data:`RESUMED_MIN_SECONDS`), since the next loss may come before a group holds the
usual 2 s of work. It goes on while each attempt leaves new work in the checkpoint (a
finished pass, a saved group of blocks, a remembered decision): after
:data:`MAX_ATTEMPTS_WITHOUT_PROGRESS` attempts in a row that saved nothing it stops with
:class:`~scalenc.exceptions.WorkersKilledError`, naming what each lost (and saying so when
it was the same row block each time: a worker the operating system kills for memory
leaves no other trace). It stops at once when the cause is plainly not pre-emption: a
task whose worker its nanny restarted for exceeding its memory limit
(:class:`~scalenc.exceptions.MemoryBudgetError`, naming the task, its row block and the
limit). A task lost in two attempts in a row is not enough to stop: under churn, the
first block of a resumed pass is the first to be lost. Each resume is reported on one
line (what the checkpoint gave back, what is left) to the logger
``scalenc.engine.resume``, or to the callback of :func:`reporting` (the command's log).

A fit without a checkpoint cannot resume: its ``KilledWorker`` becomes a
:class:`~scalenc.exceptions.WorkersKilledError` saying that a checkpoint would have kept
the work, how to give one, and the ``allowed-failures`` setting.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import logging
import time
import traceback
from collections.abc import Callable, Iterator

import dask

from scalenc.engine.checkpoint import MIN_SECONDS
from scalenc.engine.cluster import active_client
from scalenc.engine.memory import format_bytes
from scalenc.exceptions import ClusterUnavailableError, MemoryBudgetError, WorkersKilledError

__all__ = [
    "MAX_ATTEMPTS_WITHOUT_PROGRESS",
    "RESUMED_MIN_SECONDS",
    "fit_resuming",
    "lost_work",
    "reporting",
]

logger = logging.getLogger(__name__)

#: Attempts in a row that save nothing new in the checkpoint after which a fit stops
#: resuming (:class:`~scalenc.exceptions.WorkersKilledError`).
MAX_ATTEMPTS_WITHOUT_PROGRESS = 3
#: The least seconds of unsaved work a group of blocks must hold to be saved, from a fit's
#: second attempt on (the first uses ``scalenc.checkpoint.min-seconds``, 2 s by default).
RESUMED_MIN_SECONDS = 0.0
#: Seconds to wait, after a task was lost to a dead worker, for the nanny's report that
#: it had restarted the worker for memory (sent to the scheduler just before the kill).
_MEMORY_EVENT_WAIT = 1.0
_RELEASE_WAIT = 10.0  # seconds to wait for the client to forget the lost attempt's keys
_MEMORY_EVENT = "worker-restart-memory"  # the topic of that report (distributed's nanny)

_REPORT: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "scalenc_resume_report", default=None
)


@contextlib.contextmanager
def reporting(report: Callable[[str], None]) -> Iterator[None]:
    """Send the one-line report of each resume to ``report`` instead of the logger
    ``scalenc.engine.resume`` (the command puts them in its log)."""
    token = _REPORT.set(report)
    try:
        yield
    finally:
        _REPORT.reset(token)


def lost_work(exc: BaseException) -> str | None:
    """Why ``exc`` lost a fit's tasks, when a rerun could finish them: ``"killed-worker"``
    (``KilledWorker``), ``"scheduler"`` (the scheduler or the connection to it lost),
    ``"lost-data"`` (a worker lost with the only copy of scattered data); None for any
    other error (bad data, a bug, an interrupt), which no rerun mends."""
    if type(exc).__name__ == "KilledWorker" and hasattr(exc, "last_worker"):
        return "killed-worker"
    if isinstance(exc, ClusterUnavailableError) and not isinstance(exc, WorkersKilledError):
        return getattr(exc, "lost", None)
    return None


def fit_resuming(open_checkpoint, body: Callable, *, owner: str):
    """``body(run)`` inside ``open_checkpoint()`` (a context giving the fit's
    :class:`~scalenc.engine.checkpoint.CheckpointRun`, or None without a checkpoint), run
    again while it loses tasks to dead workers or a lost scheduler and each attempt saves
    new work in the checkpoint (the module's docstring). Returns (body's value, the run of
    the attempt that finished); ``run.attempts`` counts the attempts. ``owner`` (the
    estimator's name) is for the messages."""
    attempt, before, lost = 0, None, []  # lost: what each attempt since the last progress lost
    while True:
        attempt += 1
        run, started = None, time.time()
        try:
            with _saving_more(attempt), open_checkpoint() as run:
                if run is not None:
                    run.attempts = attempt
                    if before is None:
                        before = run.saved()
                value = body(run)
            return value, run
        except BaseException as exc:  # noqa: BLE001 - every other error is raised again
            kind = lost_work(exc)
            if kind is None:
                raise
            if run is None:
                if kind != "killed-worker":
                    raise
                raise WorkersKilledError(_no_checkpoint_message(exc, owner)) from exc
            after = run.saved()
            progressed, before = bool(after - before), after
            if kind == "killed-worker":
                _stop_if_over_memory(exc, run, started)
            task = _task_of(exc) if kind == "killed-worker" else None
            lost = [] if progressed else [*lost, (task, _lost_text(exc, kind))]
            if len(lost) >= MAX_ATTEMPTS_WITHOUT_PROGRESS:
                raise WorkersKilledError(_no_progress_message(exc, run, attempt, lost)) from exc
            if kind == "scheduler" and not _reconnected():
                raise
            _report(exc, kind, run, attempt, after)
            _release(exc)
            del exc


def _saving_more(attempt: int):
    """From the second attempt on, every group of blocks is saved that is worth its write
    (the Dask config ``scalenc.checkpoint.min-seconds`` lowered to
    :data:`RESUMED_MIN_SECONDS`; the write-share rule still bounds what writes cost): a fit
    that has lost its tasks once is on a cluster that may lose them again before a group
    holds the usual 2 s of work. A checkpoint never changes the result."""
    if attempt == 1:
        return contextlib.nullcontext()
    key = "scalenc.checkpoint.min-seconds"
    configured = float(dask.config.get(key, MIN_SECONDS))
    return dask.config.set({key: min(configured, RESUMED_MIN_SECONDS)})


def _release(exc: BaseException) -> None:
    """Let go of what the lost attempt held on the cluster before the next one starts:
    the frames of its traceback hold its persisted arrays (the labels kept on the
    workers), whose failed keys the scheduler would otherwise give the next attempt's
    identical graph as failed at once. Waits (at most a few seconds) until the client has
    forgotten every failed key."""
    traceback.clear_frames(exc.__traceback__)
    exc.__traceback__ = None
    gc.collect()
    client = active_client()
    if client is None:
        return
    deadline = time.monotonic() + _RELEASE_WAIT
    while time.monotonic() < deadline:
        states = list(getattr(client, "futures", {}).values())
        if not any(getattr(state, "status", None) == "error" for state in states):
            return
        time.sleep(0.05)


def _lost_text(exc, kind: str) -> str:
    """What an attempt lost, in words."""
    return {
        "killed-worker": lambda: f"the workers running task {_task_text(exc.task)} died",
        "scheduler": lambda: "the connection to the Dask scheduler was lost",
        "lost-data": lambda: "a worker was lost with data sent to the cluster",
    }[kind]()


def _report(exc, kind: str, run, attempt: int, saved) -> None:
    held, left = run.describe(saved)
    cause = _lost_text(exc, kind)
    text = (
        f"resuming from checkpoint {run.url} (attempt {attempt + 1}): {cause}; "
        f"read back {held}; left: {left}"
    )
    report = _REPORT.get()
    if report is None:
        logger.warning("%s", text)
    else:
        report(text)


def _task_of(exc) -> tuple | None:
    """The lost task's name and row block, which do not depend on the attempt (a key's
    token may: arguments scattered again get new keys); None for a task that is not one
    row block's (a merge of a pass's tree, a read of a saved group), which a dying worker
    also takes down with the block that killed it."""
    from dask.utils import key_split

    key = exc.task
    if not (isinstance(key, tuple) and len(key) >= 2 and isinstance(key[1], int)):
        return None
    return key_split(key), tuple(key[1:])


#: What a lost task that is not one row block's was doing, by its name.
_TASK_KINDS = {
    "load_node": "a read of a group the checkpoint saved",
    "combine_node": "a merge of a pass's partials",
}


def _task_text(key) -> str:
    """``"('timed_block-…', 4, 0) (row block 4)"``, ``"'load_node-…' (a read of a group
    the checkpoint saved)"``."""
    from dask.utils import key_split

    text = repr(key)
    if isinstance(key, tuple) and len(key) >= 2 and isinstance(key[1], int):
        if "block" in str(key[0]):
            text += f" (row block {key[1]})"
    elif key_split(key) in _TASK_KINDS:
        text += f" ({_TASK_KINDS[key_split(key)]})"
    return text


def _stop_if_over_memory(exc, run, started: float) -> None:
    """Raise when the lost task's last worker was restarted by its nanny for exceeding
    its memory limit during the attempt (started at ``started``): the task itself kills
    its workers, and would again."""
    kills = _memory_restarts(exc.last_worker.address, since=started)
    limit = getattr(exc.last_worker, "memory_limit", 0) or 0
    if kills:
        rss = max(int(event.get("rss", 0)) for event in kills)
        used = f"{format_bytes(rss)} of its {format_bytes(limit)} limit" if limit else ""
        raise MemoryBudgetError(
            f"Task {_task_text(exc.task)} of the fit made its worker {exc.last_worker.address} "
            f"exceed its memory limit ({used}; the nanny restarted it), so running it again "
            "would do the same: this is not pre-emption, and the fit stops instead of "
            f"resuming. The checkpoint {run.url} keeps the work done. Give the workers "
            "more memory (`dask worker --memory-limit ...`, memory_limit=... for "
            "scalenc.connect('local')), or make the task smaller (fewer rows per block: "
            "chunk_rows=...; the estimator's memory_limit=... to plan its stages within "
            "less), then run the same fit again: it resumes from the checkpoint."
        ) from exc


def _memory_restarts(address: str, since: float) -> list[dict]:
    """The nanny's reports that it restarted the worker at ``address`` for memory since
    ``since`` (the scheduler's event log; waited for a moment, as it may come after the
    task's loss)."""
    client = active_client()
    if client is None:
        return []
    deadline = time.monotonic() + _MEMORY_EVENT_WAIT
    while True:
        try:
            events = client.get_events(_MEMORY_EVENT)
        except Exception:  # noqa: BLE001 - a scheduler that cannot say: no evidence
            return []
        found = [
            msg for stamp, msg in events if stamp >= since - 1 and msg.get("worker") == address
        ]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def _reconnected() -> bool:
    """Whether the client is connected to its scheduler again (it tries for its connect
    timeout after losing it)."""
    client = active_client()
    if client is None:
        return False
    deadline = time.monotonic() + float(getattr(client, "_timeout", 30) or 30) + 5
    while client.status == "connecting" and time.monotonic() < deadline:
        time.sleep(0.1)
    return client.status == "running"


def _no_checkpoint_message(exc, owner: str) -> str:
    failures = getattr(exc, "allowed_failures", None)
    died = "" if failures is None else f" on {failures + 1} workers"
    return (
        f"{owner}'s fit lost task {_task_text(exc.task)}: Dask gave up on it after the "
        f"workers running it died{died} (KilledWorker: {exc}). The fit had no checkpoint, "
        "so the work it had done is lost. On a cluster whose workers are pre-empted, give "
        "it one: checkpoint='DIR' for the estimator (a path or URL every worker can "
        "write), --checkpoint DIR for `scalenc fit`; the fit then keeps its finished work "
        "there and resumes from it by itself while it makes progress. Dask's "
        "distributed.scheduler.allowed-failures (set on the scheduler: "
        "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES; now "
        f"{'?' if failures is None else failures}) is how many dead workers a task "
        "survives. If the task itself kills its workers (memory: see the workers' logs), "
        "give them more memory or use fewer rows per block (chunk_rows=...)."
    )


def _no_progress_message(exc, run, attempt: int, lost: list[tuple]) -> str:
    limit = getattr(getattr(exc, "last_worker", None), "memory_limit", 0)
    memory = f" (each had a memory limit of {format_bytes(limit)})" if limit else ""
    tasks = {task for task, _ in lost}
    same = (
        f" The same task, {_task_text(exc.task)}, was lost every time: most likely it "
        "kills its workers itself rather than the workers being pre-empted."
        if len(tasks) == 1 and None not in tasks
        else ""
    )
    return (
        f"The fit lost its tasks to dead workers or a lost scheduler in {attempt} attempts, "
        f"the last {MAX_ATTEMPTS_WITHOUT_PROGRESS} of which saved nothing new in its "
        f"checkpoint {run.url} (no finished pass or group of blocks), so it stops "
        f"resuming. They lost: {'; '.join(text for _, text in lost)}.{same} Workers that "
        f"die on the same row blocks each time are killed by those blocks{memory}, usually "
        "by the operating system "
        "for memory (see `dmesg` for 'Out of memory: Killed process', and the workers' "
        "logs): give them more memory, or use fewer rows per block (chunk_rows=...) and "
        "fewer threads per worker. Workers pre-empted faster than a task runs need a "
        "cluster that keeps them longer, or fewer rows per block too. The checkpoint keeps "
        "the work done: the same fit run again resumes from it."
    )
