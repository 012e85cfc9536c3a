"""Progress of the Dask computations a command starts: a bar, periodic lines, or nothing.

:class:`Progress` is a context manager around a step of work (a fit, a prediction
written to disk). Every Dask computation started inside it is reported:

* local schedulers (threads, processes, sync) — through a :class:`dask.callbacks.Callback`
  that counts finished tasks: a redrawn bar on a terminal, and plain lines every
  ``interval`` seconds otherwise (log files of batch systems);
* a ``distributed.Client`` — by polling the scheduler for its tasks still to run (the
  callbacks above do not see distributed work); the dashboard address is where the
  detailed view lives, and the command line prints it when it connects.

Estimators make several computations. A fit's passes are numbered as the engine counts
them (:func:`scalenc.engine.reads.latest`), so ``pass 4`` is the fourth pass the summary
counts, and a resumed fit's remaining pass is ``pass 4`` too, after three passes ``read
back`` from its checkpoint. Elsewhere, computations that read the command's data
(``data=``: its graph holds a key of the data's layers) are numbered as passes (``pass 1/1``
when the number of passes is known). The other computations (labels, a cached embedding)
are named by where they fall (``after pass 2``); on a terminal their bar is drawn over by
the next one instead of staying on the screen. A stage name announced by
:func:`stage` is added (``pass 2 (gram)``). Once tasks have finished, an ETA for the
current computation is shown (elapsed time × tasks left / tasks done). On a distributed
cluster the scheduler is polled (every 0.5–5 s), so a computation shorter than the poll is
not shown and the pass numbers count the passes the poll saw.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import TextIO

from dask.callbacks import Callback

from scalenc.cli.summary import plural
from scalenc.engine import reads as reads_module
from scalenc.exceptions import InputError

__all__ = [
    "Progress",
    "choose_mode",
    "stage",
    "data_layers",
]


MODES = ("auto", "bar", "lines", "none")

#: Names of the stages entered with :func:`stage`, innermost last.
_STAGES: list[str] = []


@contextlib.contextmanager
def stage(name: str):
    """Name the computations started inside the block (``pass 2 (gram)``) in the progress
    output. A plain list, not a context variable, so the thread polling a distributed
    scheduler sees it too."""
    _STAGES.append(name)
    try:
        yield
    finally:
        _STAGES.remove(name)


def _key_name(key) -> str:
    return key[0] if isinstance(key, tuple) else key


def data_layers(data) -> frozenset:
    """The graph layer names of a Dask collection (its keys' names when it has no layers):
    a computation whose graph holds one of them reads the collection."""
    if data is None:
        return frozenset()
    data = getattr(data, "frame", data)  # a scalenc.Table: its Dask DataFrame, if lazy
    if not hasattr(data, "__dask_graph__"):
        return frozenset()
    graph = data.__dask_graph__()
    layers = getattr(graph, "layers", None)
    if layers is not None:
        return frozenset(layers)
    return frozenset(_key_name(k) for k in graph)


def choose_mode(mode: str, stream: TextIO) -> str:
    """Resolve ``"auto"``: a bar on a terminal, lines otherwise."""
    if mode not in MODES:
        raise InputError(f"Unknown progress mode {mode!r}; choose one of {list(MODES)}.")
    if mode != "auto":
        return mode
    isatty = getattr(stream, "isatty", None)
    return "bar" if isatty is not None and isatty() else "lines"


def _fmt_seconds(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


class _Display:
    """Draws (done, total) of each computation as a bar or as periodic lines.

    ``passes`` is the number of passes over the data the step makes, when known (1 for
    predict, evaluate, ...): the passes are then shown as ``pass 1/1``. ``counted``: the
    step is a fit, whose passes the engine numbers; what it computes before it counts
    them is not a pass.
    """

    width = 30
    #: An ETA is shown once this many seconds have passed and a task has finished.
    eta_after = 1.0

    def __init__(
        self,
        label: str,
        mode: str,
        stream: TextIO,
        interval: float,
        passes: int | None = None,
        counted: bool = False,
    ):
        self.label = label
        self.counted = counted
        self.mode = mode
        self.stream = stream
        self.interval = interval
        self.expected = passes
        self.passes = 0
        self.what = ""
        self._last = 0.0
        self._start = 0.0
        self._drawn = 0
        self._printed = False
        self.folded = False

    def start(self, total: int | None, reads_data: bool | None = None, computation=None) -> None:
        """A computation starts; ``computation`` is what the engine counting a fit's passes
        says it is (:class:`scalenc.engine.reads.Computation`), else ``reads_data`` says
        whether it is a pass over the data (None: not known, counted as one)."""
        if computation is not None:
            reads_data = computation.number is not None
            if reads_data:
                self.passes = computation.number
        elif self.counted:  # before the fit counts its passes (its labels, a table's encoding)
            reads_data = False
        elif reads_data is not False:
            self.passes += 1
        self.folded = reads_data is False
        if self.folded:
            self.what = f"after pass {self.passes}" if self.passes else "before the first pass"
        else:
            of = f"/{self.expected}" if self.expected and self.passes <= self.expected else ""
            back = " read back from the checkpoint" if getattr(computation, "read_back", 0) else ""
            self.what = f"pass {self.passes}{of}{back}"
        if _STAGES:
            self.what += f" ({_STAGES[-1]})"
        self._start = self._last = time.monotonic()
        self._printed = False
        self._drawn = 0
        if self.mode == "lines" and self.interval <= 0:
            self._line(0, total, "started")

    def update(self, done: int, total: int | None, *, force: bool = False) -> None:
        now = time.monotonic()
        if self.mode == "bar":
            if force or now - self._last >= 0.1:
                self._bar(done, total, now)
                self._last = now
        elif (
            self.mode == "lines"
            and self.interval > 0
            and (force or now - self._last >= self.interval)
        ):
            self._line(done, total, "")
            self._last = now

    def finish(self, done: int, total: int | None, errored: bool) -> None:
        now = time.monotonic()
        status = "failed" if errored else "done"
        if self.mode == "bar" and self.folded and not errored:  # the next bar draws over it
            self.stream.write("\r" + " " * self._drawn + "\r")
            self._drawn = 0
            self.stream.flush()
        elif self.mode == "bar":
            self._bar(done, total, now, status)
            self.stream.write("\n")
            self.stream.flush()
        elif self.mode == "lines" and (self._printed or self.interval <= 0 or errored):
            self._line(done, total, f"{status} in {_fmt_seconds(now - self._start)}")

    def eta(self, done: int, total: int | None, now: float) -> str:
        """``"ETA 12.0s"`` once it can be estimated (a task done, ``eta_after`` s passed)."""
        elapsed = now - self._start
        if not total or done <= 0 or done >= total or elapsed < self.eta_after:
            return ""
        return f"ETA {_fmt_seconds(elapsed * (total - done) / done)}"

    def _bar(self, done, total, now, status=""):
        frac = min(1.0, done / total) if total else 0.0
        filled = int(round(frac * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        tail = status or self.eta(done, total, now)
        text = (
            f"{self.label}: {self.what} [{bar}] {frac:4.0%} {_tasks(done, total)} "
            f"{_fmt_seconds(now - self._start)}{' ' + tail if tail else ''}"
        )
        self.stream.write("\r" + text.ljust(self._drawn))
        self._drawn = len(text)
        self.stream.flush()

    def _line(self, done, total, status):
        now = time.monotonic()
        pct = f" {min(1.0, done / total):.0%}" if total else ""
        if status:
            tail = f" {status}"
        else:
            eta = self.eta(done, total, now)
            tail = f" {_fmt_seconds(now - self._start)}{', ' + eta if eta else ''}"
        stamp = time.strftime("%H:%M:%S")
        text = f"{stamp} scalenc {self.label}: {self.what}{pct} ({_tasks(done, total)}){tail}"
        self.stream.write(text + "\n")
        self.stream.flush()
        self._printed = True


def _tasks(done: int, total: int | None) -> str:
    """``3/10 tasks``, or ``3 tasks`` when the total is not known."""
    return f"{done}/{plural(total, 'task')}" if total else plural(done, "task")


class _LocalCallback(Callback):
    """Counts finished tasks of the local schedulers (threads, processes, sync)."""

    def __init__(self, display: _Display, layers: frozenset = frozenset()):
        super().__init__()
        self.display = display
        self.layers = layers
        self.total = 0
        self.done = 0

    def _start_state(self, dsk, state):
        self.total = sum(
            len(state[name]) for name in ("waiting", "ready", "running", "finished", "cache")
        )
        self.done = len(state["cache"])
        reads = any(_key_name(k) in self.layers for k in dsk) if self.layers else None
        self.display.start(self.total, reads, reads_module.latest())

    def _posttask(self, key, result, dsk, state, worker_id):
        self.done += 1
        self.display.update(self.done, self.total)

    def _finish(self, dsk, state, errored):
        self.display.finish(self.done, self.total, errored)


def _scheduler_counts(dask_scheduler=None, layers=()) -> tuple[int, bool]:
    """(tasks still to run, whether a task of ``layers`` is among them or those in
    memory) on a distributed scheduler."""
    pending, reads = 0, False
    for key, ts in dask_scheduler.tasks.items():
        if ts.state in ("waiting", "processing", "queued", "no-worker", "memory"):
            pending += ts.state != "memory"
            reads = reads or _key_name(key) in layers
    return pending, reads


class _DistributedPoller:
    """Polls a distributed scheduler for pending tasks while a step runs."""

    def __init__(self, client, display: _Display, poll: float, layers: frozenset = frozenset()):
        self.client = client
        self.display = display
        self.layers = tuple(layers)
        self.poll = poll
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scalenc-progress", daemon=True)
        self.peak = 0
        self.busy = False

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)
        if self.busy:
            self.display.finish(self.peak, self.peak, errored=exc[0] is not None)

    def _run(self):
        while not self._stop.wait(self.poll):
            try:
                pending, reads = self.client.run_on_scheduler(_scheduler_counts, layers=self.layers)
            except Exception:  # scheduler without scalenc installed, or shutting down
                return
            if pending and not self.busy:
                self.busy, self.peak = True, pending
                self.display.start(pending, reads if self.layers else None, reads_module.latest())
            if self.busy:
                self.peak = max(self.peak, pending)
                self.display.update(self.peak - pending, self.peak)
                if pending == 0:
                    self.display.finish(self.peak, self.peak, errored=False)
                    self.busy, self.peak = False, 0


class Progress:
    """Report the progress of every Dask computation run inside the ``with`` block.

    Parameters
    ----------
    label : str
        Shown in front of every line, e.g. ``"fit"``.
    mode : {"auto", "bar", "lines", "none"}
        ``"auto"``: a bar when ``stream`` is a terminal, periodic lines otherwise.
    stream : text stream, default sys.stderr
    interval : float, default=10
        Seconds between lines in ``"lines"`` mode (0: a line per computation start/end
        and per finished task batch).
    client : distributed.Client or None
        When given, the scheduler is polled instead of the local callbacks.
    data : Dask collection or None
        The data the step reads: computations that read it are numbered as passes, the
        others shown as ``other``. None: every computation is numbered.
    passes : int or None
        How many passes the step makes, when known in advance (shown as ``pass 1/1``).
    counted : bool, default=False
        The step is a fit whose passes the engine counts and numbers
        (:func:`scalenc.engine.reads.latest`): computations outside them are not passes.
    """

    def __init__(
        self,
        label: str,
        *,
        mode: str = "auto",
        stream: TextIO | None = None,
        interval: float = 10.0,
        client=None,
        data=None,
        passes: int | None = None,
        counted: bool = False,
    ):
        self.stream = stream if stream is not None else sys.stderr
        self.mode = choose_mode(mode, self.stream)
        self.display = _Display(label, self.mode, self.stream, interval, passes, counted)
        self.client = client
        self.layers = data_layers(data)
        self._ctx = None

    def __enter__(self):
        if self.mode == "none":
            return self
        if self.client is not None:
            poll = 0.5 if self.mode == "bar" else max(0.5, min(self.display.interval, 5.0))
            self._ctx = _DistributedPoller(self.client, self.display, poll, self.layers)
        else:
            self._ctx = _LocalCallback(self.display, self.layers)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
        return False
