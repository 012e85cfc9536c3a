"""Running a parsed command line: the command's session, its log and warnings, its
summary printed and written, and its exit code.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from datetime import datetime, timezone

import distributed  # noqa: F401 - loads its dask.config defaults before any config.set

from scalenc import __version__
from scalenc.cli.commands import STEPS, redact
from scalenc.cli.errors import EXIT_BAD_INPUT, EXIT_COMPUTE, EXIT_OK, CLIError
from scalenc.cli.outcome import error_dict, exit_code
from scalenc.cli.run import StepFailed, cmd_run
from scalenc.cli.session import Session, one_line_warnings, setup_logging
from scalenc.cli.summary import to_json, to_text
from scalenc.io.atomic import write_text
from scalenc.report import jsonable

log = logging.getLogger("scalenc.cli")

#: Command name → function running it (``scalenc run`` runs its steps with
#: :data:`scalenc.cli.commands.STEPS`).
COMMANDS = {**STEPS, "run": cmd_run}


def execute(args, argv: list[str], signals) -> int:
    """Run the command of the parsed ``args``; write its summary; return the exit code.

    The summary goes to stdout as text (``--format text``, the default; nothing with
    ``--quiet``) or JSON (``--format json``), and as JSON to ``--json FILE`` when given.
    Warnings are shown one line each (:func:`~scalenc.cli.session.one_line_warnings`).

    ``argv`` is recorded in the summary as given. ``signals`` are the
    :class:`~scalenc.cli.app.CommandSignals` of :func:`~scalenc.cli.app.main`: SIGINT and
    SIGTERM raise in the command, which ends with exit code 130 or 143, a one-line message
    and its summary.
    """
    handler = setup_logging(args)
    try:
        with one_line_warnings():
            return _execute(args, argv, signals)
    finally:
        log.removeHandler(handler)


def _execute(args, argv: list[str], signals) -> int:
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    session = Session(args, ends_process=signals.ends_process)
    summary = {
        "scalenc": __version__,
        "command": args.command,
        "argv": redact(argv),  # storage options may hold credentials
        "started": started,
    }
    code = EXIT_OK
    try:
        signals.start()  # from here on, an interruption is reported in the summary
        if args.command == "run":
            result = cmd_run(args, session)
        else:
            with session.connected():
                result = COMMANDS[args.command](args, session)
        summary.update(status="ok", **result)
    except BaseException as exc:  # noqa: BLE001 - everything becomes an exit code
        what, failed_args = f"scalenc {args.command}", args
        if isinstance(exc, StepFailed):
            summary["steps"] = exc.results
            what, failed_args, exc = exc.what, exc.step_args, exc.exc
        if isinstance(exc, SystemExit):
            raise
        code = exit_code(exc)
        rerun = redact(argv) if failed_args is args else None  # a job's step: its own
        summary.update(status="error", error=error_dict(exc, what, failed_args, rerun))
        log.error("error (exit %d): %s", code, summary["error"]["message"])
        if args.verbose or code == EXIT_COMPUTE and not isinstance(exc, CLIError):
            log.debug("%s", "".join(traceback.format_exception(exc)))
    try:
        summary["exit_code"] = code
        summary["scheduler"] = session.scheduler_info
        summary["seconds"] = round(time.perf_counter() - t0, 4)
        _emit(summary, args, getattr(args, "storage_option", {}))
    except OSError as exc:
        log.error("cannot write the JSON summary to %s: %s", args.json, exc)
        code = code or EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        code = exit_code(exc)
        log.error("error (exit %d): interrupted while writing the JSON summary", code)
    finally:
        signals.finish()  # the command has finished: a signal from now on is dropped
    return code


def _emit(summary: dict, args, options: dict | None = None) -> None:
    """The summary as JSON to ``args.json`` (a file or URL) if set, then to stdout as
    ``args.format`` says. A JSON file that cannot be written raises after stdout is done."""
    ready = jsonable(summary, max_items=10**6)
    json_path, failure = getattr(args, "json", None), None
    if json_path:
        try:
            write_text(json_path, to_json(ready) + "\n", overwrite=True, storage_options=options)
        except OSError as exc:
            json_path, failure = None, exc
    if getattr(args, "format", "text") == "json":
        text = to_json(ready) + "\n"
    else:
        text = "" if args.quiet else to_text(ready, json_path)
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()
    if failure is not None:
        raise failure
