"""The ``scalenc`` command: scripted batch runs over the library.

Every option is an estimator parameter (``--set NAME=VALUE``) or an argument of an IO
function (:func:`scalenc.io.inputs.load`, :func:`scalenc.io.outputs.write_output`,
:func:`scalenc.persist.save_model`). Warnings and errors go to stderr, one line each (a
line per event too with ``--verbose``); a short summary of what ran goes to stdout (the
full JSON summary with ``--format json``, and to ``--json FILE``); the exit code says what
kind of failure happened, so batch systems can act on it. Argument errors are printed as
argparse prints them (the usage, then ``scalenc COMMAND: error: ...``) with exit code 2.

The command's modules import downward only::

    app ──> parser ──> errors
     └────> execute ──> run ──> commands ──> session, jobs, progress, summary, the library
                  └──> outcome (exit codes and error summaries)

This module imports only :mod:`scalenc.cli.errors` when it loads: :func:`main` handles
SIGINT and SIGTERM from its first line (:class:`CommandSignals`), before argparse loads,
and :mod:`scalenc.cli.execute` (which loads dask and distributed) is imported only once the
arguments have parsed, so ``scalenc --help`` and argument errors stay fast.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from scalenc.cli.errors import (
    EXIT_BAD_INPUT,
    EXIT_CLUSTER,
    EXIT_COMPUTE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    BadInput,
    Terminated,
    UsageError,
)

__all__ = [
    "main",
    "EXIT_OK",
    "EXIT_BAD_INPUT",
    "EXIT_CLUSTER",
    "EXIT_COMPUTE",
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "CommandSignals",
]


def main(argv: list[str] | None = None) -> int:
    """Run ``scalenc`` with ``argv`` (default: ``sys.argv[1:]``); return the exit code.

    A SIGINT or SIGTERM at any moment of the call ends it with exit code 130 or 143 and a
    one-line message on stderr, never a traceback (see :class:`CommandSignals`). Called
    without ``argv`` (the ``scalenc`` executable), an interrupted command then ends the
    process at once (:func:`_end_process`).
    """
    process = argv is None  # the process's own command line: an interruption ends it
    argv = list(sys.argv[1:] if argv is None else argv)
    with CommandSignals(argv, ends_process=process) as signals:
        try:
            code = _main(argv, signals)
        except KeyboardInterrupt as exc:  # one the command could not report itself
            code = _report_interrupt(exc, argv, signals.started)
    if process and code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        _end_process(code)
    return code


def _main(argv: list[str], signals: CommandSignals) -> int:
    from scalenc.cli.parser import build_parser  # deferred: after the signal handlers

    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        sys.stderr.write(exc.report())
        code = EXIT_BAD_INPUT
    except BadInput as exc:
        sys.stderr.write(f"{exc}\n")
        code = EXIT_BAD_INPUT
    except SystemExit as exc:  # --help, --version
        code = int(exc.code or 0)
    else:
        from scalenc.cli.execute import execute  # deferred: loads dask and distributed (see above)

        return execute(args, argv, signals)
    signals.start()  # a signal held while the arguments parsed is raised here
    return code


class CommandSignals:
    """SIGINT and SIGTERM for the whole of one command, from the first line of :func:`main`.

    Once the command has started (:meth:`start`), SIGINT raises :class:`KeyboardInterrupt`
    and SIGTERM :class:`~scalenc.cli.errors.Terminated` in the main thread, so every
    clean-up written for Ctrl-C runs for both, and the command reports the interruption
    (exit code 130 or 143, a one-line message, its summary). Before, while the arguments
    parse and the libraries load, nothing is read or written yet and an exception raised
    inside a library's import could be swallowed there: a signal is held and raised by
    :meth:`start`, so the command stops there, reporting it the same way. A second signal
    while one is held, or while the command cleans up after the first one, stops the
    process at once with the exit code and one line on stderr (a double Ctrl-C always
    ends at once, without a traceback). Once the command's summary is out
    (:meth:`finish`), a signal is dropped: the command has finished.

    ``ends_process``: the command is the process's own (the ``scalenc`` executable), which
    ends as soon as an interruption is reported (:func:`_end_process`).

    The previous handlers are restored on exit; a signal that was ignored (``nohup``, a
    background job) stays ignored. Off the main thread (no handler can be set there) this
    does nothing.
    """

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, argv: list[str], *, ends_process: bool = False):
        self.argv = argv
        self.ends_process = ends_process
        self.started = False
        self.finished = False
        self.held: int | None = None
        self.raised: int | None = None
        self._previous: dict = {}

    def __enter__(self) -> CommandSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in self._SIGNALS:
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)

    def start(self) -> None:
        """The command reports an interruption itself from now on; one held until now is
        raised here."""
        self.started = True
        if self.held is not None:
            raise _interrupt(self.held)

    def finish(self) -> None:
        """The command has finished: a signal from now on is dropped."""
        self.finished = True

    def _handle(self, signum, frame) -> None:
        if self.finished:
            return
        if self.started and self.raised is None:
            self.raised = signum
            raise _interrupt(signum)
        if not self.started and self.held is None:
            self.held = signum
            return
        # a second signal: while starting, or while the first one's clean-up runs
        started = self.started
        code = _report_interrupt(_interrupt(signum), self.argv, started=started, again=started)
        _end_process(code)


def _end_process(code: int) -> None:
    """End the process now, with ``code``, once an interruption has been reported.

    By then the command has stopped scheduling work, discarded its unfinished outputs,
    and written its message and summary; a checkpoint holds what the finished tasks
    saved (each file written whole or not at all). What is left are the blocks still
    running in Dask's worker threads, which a normal exit would wait for (seconds to a
    minute), and OpenBLAS's thread shutdown at exit, which can hang: neither holds
    anything the command still needs, so the process ends without them (``os._exit``,
    after flushing stdout, stderr and the log). The workers of a LocalCluster end with
    the process that started them.
    """
    for handler in (
        logging.getLogger("scalenc").handlers + logging.getLogger("scalenc.cli").handlers
    ):
        _quietly(handler.flush)
    for stream in (sys.stdout, sys.stderr):
        _quietly(stream.flush)
    _quietly(_release_semaphores)
    os._exit(code)


def _release_semaphores() -> None:
    """Unlink the named semaphores this process made (a LocalCluster's, for its worker
    processes), as a normal exit does: else multiprocessing's resource tracker unlinks
    them after the process ends and warns of "leaked semaphore objects" after the
    command's message. Only their clean-ups run, not the other exit hooks (a queue's
    would wait for its thread)."""
    if "multiprocessing" not in sys.modules:
        return
    from multiprocessing import synchronize, util

    for finalizer in list(util._finalizer_registry.values()):
        if getattr(finalizer, "_callback", None) is synchronize.SemLock._cleanup:
            finalizer()


def _quietly(flush) -> None:
    try:
        flush()
    except Exception:  # a stream closed or a write the signal interrupted: ending anyway
        pass


def _interrupt(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _report_interrupt(
    exc: KeyboardInterrupt, argv: list[str], started: bool, again: bool = False
) -> int:
    """Write the one line of a signal the command could not report itself (while the
    arguments parsed or the libraries loaded: nothing read or written yet; while it
    reported its own error; or a second signal, ``again``, while it stopped after the
    first) on stderr; return its exit code."""
    terminated = isinstance(exc, Terminated)
    code = EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    signame = "SIGTERM" if terminated else "SIGINT (Ctrl-C)"
    what = " ".join(["scalenc", *argv[:1]]) if argv[:1] and argv[0][:1] != "-" else "scalenc"
    when = "" if started else " while starting; nothing was read or written"
    if again:
        when = (
            " again while it stopped; it ended at once (a temporary output it was "
            "discarding may be left; the next write of that path removes it)"
        )
    stamp = time.strftime("%H:%M:%S")
    sys.stderr.write(
        f"{stamp} scalenc error (exit {code}): {what} was interrupted by {signame}{when}.\n"
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
