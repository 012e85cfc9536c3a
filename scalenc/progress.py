"""Progress of the Dask computations a command starts: a bar, periodic lines, or nothing.

:class:`Progress` is a context manager around a step of work (a fit, a prediction
written to disk). Every Dask computation started inside it is reported:

* local schedulers (threads, processes, sync) — through a :class:`dask.callbacks.Callback`
  that counts finished tasks: a redrawn bar on a terminal, and plain lines every
  ``interval`` seconds otherwise (log files of batch systems);
* a ``distributed.Client`` — by polling the scheduler for its tasks still to run (the
  callbacks above do not see distributed work); the dashboard address is where the
  detailed view lives, and the command line prints it when it connects.

Estimators make several computations (one per pass); each is numbered in the output.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from dask.callbacks import Callback

__all__ = ["Progress", "choose_mode"]

MODES = ("auto", "bar", "lines", "none")


def choose_mode(mode: str, stream: TextIO, client=None) -> str:
    """Resolve ``"auto"``: a bar on a terminal, lines otherwise."""
    if mode not in MODES:
        raise ValueError(f"Unknown progress mode {mode!r}; choose one of {list(MODES)}.")
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
    """Draws (done, total) as a bar or as periodic lines."""

    width = 30

    def __init__(self, label: str, mode: str, stream: TextIO, interval: float):
        self.label = label
        self.mode = mode
        self.stream = stream
        self.interval = interval
        self.count = 0
        self._last = 0.0
        self._start = 0.0
        self._printed = False

    def start(self, total: int | None) -> None:
        self.count += 1
        self._start = self._last = time.monotonic()
        self._printed = False
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
        if self.mode == "bar":
            self._bar(done, total, now)
            self.stream.write(f" {status}\n")
            self.stream.flush()
        elif self.mode == "lines" and (self._printed or self.interval <= 0 or errored):
            self._line(done, total, f"{status} in {_fmt_seconds(now - self._start)}")

    def _bar(self, done, total, now):
        frac = min(1.0, done / total) if total else 0.0
        filled = int(round(frac * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        counts = f"{done}/{total}" if total else f"{done}"
        self.stream.write(
            f"\r{self.label} #{self.count} [{bar}] {frac:4.0%} {counts} tasks "
            f"{_fmt_seconds(now - self._start)}"
        )
        self.stream.flush()

    def _line(self, done, total, status):
        pct = f" {min(1.0, done / total):.0%}" if total else ""
        counts = f"{done}/{total} tasks" if total else f"{done} tasks"
        tail = f" {status}" if status else f" {_fmt_seconds(time.monotonic() - self._start)}"
        stamp = time.strftime("%H:%M:%S")
        self.stream.write(
            f"{stamp} scalenc {self.label}: computation {self.count}{pct} ({counts}){tail}\n"
        )
        self.stream.flush()
        self._printed = True


class _LocalCallback(Callback):
    """Counts finished tasks of the local schedulers (threads, processes, sync)."""

    def __init__(self, display: _Display):
        super().__init__()
        self.display = display
        self.total = 0
        self.done = 0

    def _start_state(self, dsk, state):
        self.total = (
            len(state["waiting"])
            + len(state["ready"])
            + len(state["running"])
            + len(state["finished"])
            + len(state["cache"])
        )
        self.done = len(state["cache"])
        self.display.start(self.total)

    def _posttask(self, key, result, dsk, state, worker_id):
        self.done += 1
        self.display.update(self.done, self.total)

    def _finish(self, dsk, state, errored):
        self.display.finish(self.done, self.total, errored)


def _scheduler_counts(dask_scheduler=None) -> tuple[int, int]:
    """(tasks still to run, tasks in memory) on a distributed scheduler."""
    pending = 0
    memory = 0
    for ts in dask_scheduler.tasks.values():
        if ts.state in ("waiting", "processing", "queued", "no-worker"):
            pending += 1
        elif ts.state == "memory":
            memory += 1
    return pending, memory


class _DistributedPoller:
    """Polls a distributed scheduler for pending tasks while a step runs."""

    def __init__(self, client, display: _Display, poll: float):
        self.client = client
        self.display = display
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
                pending, _ = self.client.run_on_scheduler(_scheduler_counts)
            except Exception:  # scheduler without scalenc installed, or shutting down
                return
            if pending and not self.busy:
                self.busy, self.peak = True, pending
                self.display.start(pending)
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
    """

    def __init__(
        self,
        label: str,
        *,
        mode: str = "auto",
        stream: TextIO | None = None,
        interval: float = 10.0,
        client=None,
    ):
        self.stream = stream if stream is not None else sys.stderr
        self.mode = choose_mode(mode, self.stream, client)
        self.display = _Display(label, self.mode, self.stream, interval)
        self.client = client
        self._ctx = None

    def __enter__(self):
        if self.mode == "none":
            return self
        if self.client is not None:
            poll = 0.5 if self.mode == "bar" else max(0.5, min(self.display.interval, 5.0))
            self._ctx = _DistributedPoller(self.client, self.display, poll)
        else:
            self._ctx = _LocalCallback(self.display)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
        return False
