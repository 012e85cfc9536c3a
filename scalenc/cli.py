"""The ``scalenc`` command: scripted batch runs over the library.

Every option is an estimator parameter (``--set NAME=VALUE``) or an argument of an IO
function (:func:`scalenc.data.load`, :func:`scalenc.data.write_output`,
:func:`scalenc.persist.save_model`). A human log goes to stderr, one line per event;
a JSON summary of what ran goes to stdout (or ``--json FILE``); the exit code says what
kind of failure happened, so batch systems can act on it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from datetime import datetime, timezone

__all__ = [
    "main",
    "build_parser",
    "METHODS",
    "EXIT_OK",
    "EXIT_BAD_INPUT",
    "EXIT_CLUSTER",
    "EXIT_COMPUTE",
    "EXIT_INTERRUPTED",
    "parse_value",
]

from ._commands import (  # noqa: F401  (re-exported: the command's public constants)
    COMMANDS,
    EXIT_BAD_INPUT,
    EXIT_CLUSTER,
    EXIT_COMPUTE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    METHODS,
    BadInput,
    CLIError,
    ClusterUnreachable,
    Session,
    _error_dict,
    _exit_code,
    _setup_logging,
    _StepFailed,
    _write_text_atomic,
    cmd_run,
    log,
    parse_value,
)

EPILOG = f"""\
exit codes:
  {EXIT_OK}    success
  {EXIT_BAD_INPUT}    bad input: wrong arguments or parameters, a missing or unreadable file,
       a damaged/altered model, an output that exists without --overwrite, data the
       estimator refuses (NaN, one class), matplotlib missing for `report`
  {EXIT_CLUSTER}    the Dask cluster (--scheduler / --scheduler-file / SCALENC_SCHEDULER)
       cannot be reached or started
  {EXIT_COMPUTE}    a failure during the computation (worker lost for good, out of memory,
       disk full, a bug); the traceback is logged with --verbose
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C / SIGINT)

A failed run never leaves an output that looks complete: outputs and models are
written under a temporary name and renamed at the end.

environment:
  SCALENC_SCHEDULER   default for --scheduler (e.g. tcp://host:8786 or local)
"""


# --- parsing -----------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so job steps and tests get the message."""

    def error(self, message):
        raise BadInput(f"{self.prog}: {message}\n{self.format_usage().strip()}")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``scalenc`` (one sub-parser per command)."""
    from . import __version__
    from .simulate import SETTINGS

    common = _Parser(add_help=False)
    g = common.add_argument_group("output and logging")
    g.add_argument("--json", metavar="FILE", help="write the JSON summary here instead of stdout")
    g.add_argument("-q", "--quiet", action="store_true", help="log errors only, no progress")
    g.add_argument("-v", "--verbose", action="store_true", help="log details and tracebacks")
    g.add_argument(
        "--progress",
        choices=["auto", "bar", "lines", "none"],
        default="auto",
        help="progress of long passes: a bar on a terminal, periodic lines otherwise "
        "(auto, the default)",
    )
    g.add_argument(
        "--progress-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="seconds between progress lines when not on a terminal (default 10)",
    )
    c = common.add_argument_group("where it runs")
    c.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="tcp://host:port or tls://host:port of a running Dask scheduler, 'local' to "
        "start a LocalCluster of processes, or 'threads' (default: $SCALENC_SCHEDULER or "
        "$SCALENC_SCHEDULER_FILE, else threads in this process)",
    )
    c.add_argument("--scheduler-file", metavar="FILE", help="a Dask scheduler file to connect to")
    c.add_argument(
        "--n-workers",
        type=int,
        metavar="N",
        help="workers to start with --scheduler local; for a remote scheduler, wait for N",
    )
    c.add_argument(
        "--tls-dir",
        metavar="DIR",
        help="certificates made by deploy/tls/make-certs.sh (ca.pem, client.pem, "
        "client-key.pem) for a tls:// scheduler",
    )
    c.add_argument(
        "--connect-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="give up connecting to the scheduler after this long (default 10)",
    )

    data = _Parser(add_help=False)
    d = data.add_argument_group("data")
    d.add_argument(
        "--data",
        required=True,
        metavar="PATH",
        help="Zarr group (arrays X, y) or array, Parquet file/directory, .npy, .npz "
        "(arrays X, y) or .csv; local path or fsspec URL",
    )
    d.add_argument(
        "--chunk-rows", type=int, metavar="N", help="rows per block (default: about 64 MB)"
    )

    labels = _Parser(add_help=False)
    lab = labels.add_argument_group("labels")
    ex = lab.add_mutually_exclusive_group()
    ex.add_argument(
        "--labels",
        metavar="PATH|NAME",
        help="labels: a Zarr array or .npy path, or an array name inside the --data "
        "Zarr group (default: its array 'y' if present)",
    )
    ex.add_argument(
        "--label-column",
        metavar="NAME",
        help="label column of Parquet/CSV data (predict, embed: left out of the features)",
    )

    out = _Parser(add_help=False)
    o = out.add_argument_group("output")
    o.add_argument(
        "--out", required=True, metavar="PATH", help="output: *.zarr or *.parquet (or set --format)"
    )
    o.add_argument(
        "--format", choices=["zarr", "parquet"], help="output format (default: from --out)"
    )
    o.add_argument("--overwrite", action="store_true", help="replace an existing output")

    parser = _Parser(
        prog="scalenc",
        description="Train and apply spectral/kernel classifiers on data larger than memory, "
        "on this machine or a Dask cluster.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"scalenc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    fmt = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser(
        "fit",
        parents=[common, data, labels],
        formatter_class=fmt,
        epilog=EPILOG,
        help="fit an estimator and save the model directory",
        description="Fit METHOD on --data and save the model to --model-out.",
    )
    p.add_argument(
        "method", choices=sorted(METHODS), metavar="METHOD", help=f"one of {', '.join(METHODS)}"
    )
    p.add_argument("--model-out", required=True, metavar="DIR", help="model directory to write")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PARAM=VALUE",
        help="an estimator parameter, e.g. --set kernels=linear,euclidean --set "
        "min_improvement=0.2 (values are JSON or comma lists; the estimator "
        "validates them)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing model directory")

    p = sub.add_parser(
        "predict",
        parents=[common, data, labels, out],
        formatter_class=fmt,
        epilog=EPILOG,
        help="write predicted labels (or --proba) block by block",
        description="Predict every row of --data with --model.",
    )
    p.add_argument("--model", required=True, metavar="DIR")
    p.add_argument("--proba", action="store_true", help="class probabilities instead of labels")

    p = sub.add_parser(
        "embed",
        parents=[common, data, labels, out],
        formatter_class=fmt,
        epilog=EPILOG,
        help="write the embedding (transform) block by block",
        description="Embed every row of --data with --model's transform.",
    )
    p.add_argument("--model", required=True, metavar="DIR")

    p = sub.add_parser(
        "evaluate",
        parents=[common, data, labels],
        formatter_class=fmt,
        epilog=EPILOG,
        help="accuracy, per-class report and confusion matrix",
        description="Score --model on labelled --data in one pass.",
    )
    p.add_argument("--model", required=True, metavar="DIR")

    p = sub.add_parser(
        "info",
        parents=[common],
        formatter_class=fmt,
        epilog=EPILOG,
        help="describe a model directory (checksums verified)",
    )
    p.add_argument("--model", required=True, metavar="DIR")

    p = sub.add_parser(
        "make-data",
        parents=[common],
        formatter_class=fmt,
        epilog=EPILOG,
        help="write one of the encoder paper's simulations, block by block",
        description="Write a simulation as a Zarr group with arrays X and y "
        "(or a Parquet dataset with columns x0.. and y).",
    )
    p.add_argument("setting", choices=SETTINGS, metavar="SETTING", help=", ".join(SETTINGS))
    p.add_argument("--n", type=int, required=True, help="rows")
    p.add_argument("--p", type=int, required=True, help="features")
    p.add_argument("--k", type=int, default=5, help="classes (default 5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--chunk-rows", type=int, metavar="N", help="rows per block")
    p.add_argument("--out", required=True, metavar="PATH", help="*.zarr or *.parquet")
    p.add_argument("--overwrite", action="store_true")

    p = sub.add_parser(
        "report",
        parents=[common],
        formatter_class=fmt,
        epilog=EPILOG,
        help="a self-contained HTML report with plots (needs matplotlib)",
    )
    p.add_argument("--model", required=True, metavar="DIR")
    p.add_argument(
        "--data", metavar="PATH", help="labelled data: adds scores and a confusion matrix"
    )
    p.add_argument("--chunk-rows", type=int, metavar="N")
    ex = p.add_mutually_exclusive_group()
    ex.add_argument("--labels", metavar="PATH|NAME")
    ex.add_argument("--label-column", metavar="NAME")
    p.add_argument(
        "--sample",
        type=int,
        default=2000,
        metavar="N",
        help="rows embedded for the CCDR scatter plot (default 2000)",
    )
    p.add_argument("--out", required=True, metavar="FILE.html")
    p.add_argument("--overwrite", action="store_true")

    p = sub.add_parser(
        "run",
        parents=[common],
        formatter_class=fmt,
        epilog=EPILOG,
        help="run the steps of a TOML job file",
        description="Run a job file: [job] settings and [[step]] tables holding "
        "the same options as the commands (see examples/job.toml).",
    )
    p.add_argument("job", metavar="JOB.toml")
    return parser


# --- main --------------------------------------------------------------------------------


def _emit(summary: dict, json_path: str | None) -> None:
    from .report import jsonable

    text = json.dumps(jsonable(summary, max_items=10**6), indent=2, allow_nan=False)
    if json_path:
        _write_text_atomic(json_path, text + "\n", overwrite=True)
    else:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Run ``scalenc`` with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    from . import __version__

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except BadInput as exc:
        sys.stderr.write(f"{exc}\n")
        return EXIT_BAD_INPUT
    except SystemExit as exc:  # --help, --version
        return int(exc.code or 0)
    handler = _setup_logging(args)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    session = Session(args)
    summary = {"scalenc": __version__, "command": args.command, "argv": argv, "started": started}
    code = EXIT_OK
    try:
        if args.command == "run":
            result = cmd_run(args, session)
        else:
            with session.connected():
                result = COMMANDS[args.command](args, session)
        summary.update(status="ok", **result)
    except BaseException as exc:  # noqa: BLE001 - everything becomes an exit code
        if isinstance(exc, _StepFailed):
            summary["steps"] = exc.results
            exc = exc.exc
        if isinstance(exc, SystemExit):
            raise
        code = _exit_code(exc)
        summary.update(status="error", error=_error_dict(exc))
        log.error("error (exit %d): %s", code, exc)
        if args.verbose or code == EXIT_COMPUTE and not isinstance(exc, CLIError):
            log.debug("%s", "".join(traceback.format_exception(exc)))
    summary["exit_code"] = code
    summary["scheduler"] = session.scheduler_info
    summary["seconds"] = round(time.perf_counter() - t0, 4)
    try:
        _emit(summary, args.json)
    except OSError as exc:
        log.error("cannot write the JSON summary to %s: %s", args.json, exc)
        code = code or EXIT_BAD_INPUT
    finally:
        log.removeHandler(handler)
    return code


if __name__ == "__main__":
    sys.exit(main())
