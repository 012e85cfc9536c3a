"""What the ``scalenc`` command line accepts: the argument parser and ``--set`` values.

:func:`build_parser` makes one sub-parser per command from small helpers: one per
shared option group (``_*_options``) and one per command (``_add_*``). ``scalenc run``
reads the sub-parsers from the parser's ``commands`` (a dict) to turn each job step into
arguments.

``scalenc --help`` and argument errors are answered from this module alone, so it imports
only the standard library, :mod:`scalenc.cli.errors` and the package's version. The one
deferred import, :mod:`scalenc.simulate` (it loads dask) for the ``make-data`` settings,
happens only when argparse looks at those settings.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import sys

from scalenc import __version__
from scalenc.cli.errors import (
    EXIT_BAD_INPUT,
    EXIT_CLUSTER,
    EXIT_COMPUTE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    BadInput,
    UsageError,
)

__all__ = [
    "build_parser",
    "parse_value",
    "parse_set",
    "METHODS",
    "EPILOG",
]


#: METHOD of ``scalenc fit`` → estimator class.
METHODS = {
    "encoder": "scalenc.encoder:EncoderClassifier",
    "nrbfn": "scalenc.nrbfn:NRBFNClassifier",
    "lrc": "scalenc.nrbfn:LRClassifier",
    "ccdr": "scalenc.ccdr:CCDR",
    "ccdr-classifier": "scalenc.ccdr:CCDRClassifier",
}

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
  {EXIT_TERMINATED}  terminated (SIGTERM: SLURM, Kubernetes, docker stop)

A failed or interrupted run never leaves an output that looks complete: outputs,
models and reports are written under a temporary name and swapped in when complete,
so an existing output holds its old or its new content at every instant.

environment:
  SCALENC_SCHEDULER   default for --scheduler (e.g. tcp://host:8786 or local)
"""


# --- --set values ------------------------------------------------------------------------


def parse_value(text: str):
    """A ``--set`` value: JSON (1, 0.5, true, null, "s", [1, 2]), a Python literal
    ((1, 2), None), a comma-separated list (linear,euclidean), or else the string itself."""
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, tuple) and not text.lstrip().startswith("("):
            return list(value)  # 0.5,1e-9 is a comma list like linear,euclidean
        return value
    if "," in text:
        return [parse_value(part.strip()) for part in text.split(",") if part.strip()]
    return text


class StorageOptions(argparse.Action):
    """``--storage-option KEY=VALUE``, repeatable: the fsspec ``storage_options`` dict the
    command hands to every read and write (JSON values), parsed here once; a pair without
    ``=`` is an argument error (exit 2) before anything is read."""

    def __call__(self, parser, namespace, value, option_string=None):
        key, sep, text = value.partition("=")
        if not sep or not key.strip():
            parser.error(f"{option_string} takes KEY=VALUE; got {value!r}.")
        options = dict(getattr(namespace, self.dest, None) or {})
        options[key.strip()] = parse_value(text)
        setattr(namespace, self.dest, options)


def parse_set(items) -> dict:
    """The estimator parameters of the ``--set PARAM=VALUE`` items."""
    params = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise BadInput(
                f"--set expects PARAM=VALUE (e.g. --set kernels=linear,euclidean); got {item!r}."
            )
        params[name.strip()] = parse_value(value.strip())
    return params


# --- the parser --------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so job steps and tests get the message.

    ``commands`` maps each command name to its sub-parser (set by :func:`build_parser`).
    ``help_action``: a subclass of argparse's help action that answers ``-h/--help``
    instead (it keeps the help option's place, first in the usage).
    """

    def __init__(self, *args, help_action=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}
        if help_action is not None:
            for action in self._actions:
                if type(action) is argparse._HelpAction:
                    action.__class__ = help_action  # a subclass: only __call__ differs

    def error(self, message):
        raise UsageError(self.prog, message, self.format_usage())

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, but ``fit``'s ``--data`` (shown optional in its help) is required
        unless ``--edges`` is given: a fit on a graph alone has no node features."""
        args = list(sys.argv[1:] if args is None else args)
        tightened = []
        edges = any(a == "--edges" or a.startswith("--edges=") for a in args)
        if not edges and not {"-h", "--help"} & set(args):  # the help shows it optional
            tightened = [a for a in self._actions if getattr(a, "required_without_edges", 0)]
        for action in tightened:
            action.required = True
        try:
            return super().parse_known_args(args, namespace)
        finally:
            for action in tightened:
                action.required = False

    def parse_args(self, args=None, namespace=None):
        """argparse's, but arguments no option takes are refused by the command's own
        parser (its usage and ``scalenc COMMAND: error:``), each with the nearest option
        of that command when one is close (``did you mean --model-out?``)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = self.commands.get(getattr(parsed, "command", None), self)
            parser.error(f"unrecognized arguments: {' '.join(extras)}{_nearest(parser, extras)}")
        return parsed


def _nearest(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """`` (did you mean --x?)`` for the first unknown option close to one of ``parser``'s."""
    options = [o for action in parser._actions for o in action.option_strings]
    for extra in extras:
        if extra.startswith("--"):
            close = difflib.get_close_matches(extra.partition("=")[0], options, n=1, cutoff=0.75)
            if close:
                return f" (did you mean {close[0]}?)"
    return ""


class _FitHelp(argparse._HelpAction):
    """``-h/--help`` of ``scalenc fit``. After a METHOD (``scalenc fit encoder --help``), the
    help also lists the estimator's parameters with their defaults and docs, read from the
    estimator (:mod:`scalenc.cli.estimator_help`, which imports it: only then)."""

    def __call__(self, parser, namespace, values, option_string=None):
        method = getattr(namespace, "method", None)
        epilog = parser.epilog
        if method in METHODS:
            from scalenc.cli.estimator_help import parameters_help

            parser.epilog = f"{parameters_help(METHODS[method], method)}\n{epilog}"
        try:
            parser._print_message(parser.format_help(), sys.stdout)
        finally:
            parser.epilog = epilog
        parser.exit()


def _int_at_least(low: int):
    """An argparse type: an integer ≥ ``low``, with the range in the error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    parse.__name__ = f"int >= {low}"
    return parse


def _seconds(text: str) -> float:
    """An argparse type: a finite number of seconds ≥ 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value >= 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text}")
    return value


class _SimulationSettings:
    """The SETTING choices of ``make-data``: :data:`scalenc.simulate.SETTINGS`, read only
    when argparse looks at them, so that building the parser does not load dask."""

    def __iter__(self):
        from scalenc.simulate import SETTINGS  # deferred: scalenc.simulate imports dask.array

        return iter(SETTINGS)

    def __contains__(self, setting) -> bool:
        return setting in tuple(self)


def build_parser() -> _Parser:
    """The argument parser of ``scalenc``: one sub-parser per command, also in ``.commands``."""
    parser = _Parser(
        prog="scalenc",
        description="Train and apply spectral/kernel classifiers on data larger than memory, "
        "on this machine or a Dask cluster.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"scalenc {__version__}")
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_Parser, required=True
    )
    parser.commands = {name: add(sub, name) for name, add in _COMMANDS.items()}
    return parser


def _command(sub, name: str, parents: list, *, model: bool = False, **kwargs):
    """The sub-parser of one command (``kwargs``: its help, description, help action),
    with the exit codes as its epilog; ``model``: a command of a model directory
    (``--model DIR``)."""
    formatter = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(name, parents=parents, formatter_class=formatter, epilog=EPILOG, **kwargs)
    if model:
        p.add_argument("--model", required=True, metavar="DIR")
    return p


# --- option groups shared by several commands --------------------------------------------


def _common_options() -> _Parser:
    """Options of every command: output and logging, where it runs."""
    common = _Parser(add_help=False)
    _add_logging_options(common.add_argument_group("output and logging"))
    _add_scheduler_options(common.add_argument_group("where it runs"))
    return common


def _add_logging_options(g) -> None:
    g.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="what goes to stdout: a short summary (text, the default) or the full JSON "
        "summary (json)",
    )
    g.add_argument(
        "--json", metavar="FILE", help="also write the full JSON summary to FILE (or a URL)"
    )
    g.add_argument(
        "--storage-option",
        action=StorageOptions,
        default={},
        metavar="KEY=VALUE",
        help="an fsspec storage option for URLs (repeatable; e.g. anon=false, "
        "endpoint_url=...); values are never written to summaries or logs",
    )
    g.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="errors only: no log, no progress, no text summary (--format json and --json "
        "are still written)",
    )
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
        type=_seconds,
        default=10.0,
        metavar="SECONDS",
        help="seconds between progress lines when not on a terminal (default 10)",
    )


def _add_scheduler_options(g) -> None:
    g.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="tcp://host:port or tls://host:port of a running Dask scheduler, 'local' to "
        "start a LocalCluster of processes, 'local-cuda' for dask-cuda's LocalCUDACluster "
        "(one worker per GPU), or 'threads' (default: $SCALENC_SCHEDULER or "
        "$SCALENC_SCHEDULER_FILE, else threads in this process)",
    )
    g.add_argument("--scheduler-file", metavar="FILE", help="a Dask scheduler file to connect to")
    g.add_argument(
        "--n-workers",
        type=_int_at_least(1),
        metavar="N",
        help="workers to start with --scheduler local; for a remote scheduler, wait for N",
    )
    g.add_argument(
        "--tls-dir",
        metavar="DIR",
        help="certificates made by deploy/tls/make-certs.sh (ca.pem, client.pem, "
        "client-key.pem) for a tls:// scheduler",
    )
    g.add_argument(
        "--connect-timeout",
        type=_seconds,
        default=10.0,
        metavar="SECONDS",
        help="give up connecting to the scheduler after this long (default 10)",
    )


def _data_options(*, device: bool = True, graph: bool = False) -> _Parser:
    """``--data`` and its reading options; ``graph``: a command with ``--edges``, where
    ``--data`` is optional (a graph's nodes may have no features: checked once the model,
    or for ``fit`` the arguments, say whether they need it)."""
    data = _Parser(add_help=False)
    g = data.add_argument_group("data")
    g.add_argument(
        "--data",
        required=not graph,
        metavar="PATH",
        help="Zarr group (arrays X, y) or array, Parquet file/directory, .npy, .npz "
        "(arrays X, y) or .csv; local path or fsspec URL"
        + (
            "; required, but for a graph without node features (--edges: the fit on the "
            "graph alone, or its model)"
            if graph
            else ""
        ),
    )
    g.add_argument(
        "--chunk-rows",
        type=_int_at_least(1),
        metavar="N",
        help="rows per block (default: about 64 MB)",
    )
    if device:
        g.add_argument(
            "--device",
            choices=["cpu", "gpu"],
            default="cpu",
            help="where the data's blocks are computed: 'gpu' moves each block to the CUDA "
            "device as a CuPy array as it is read (needs scalenc[gpu]; default cpu)",
        )
    g.add_argument(
        "--feature-columns",
        metavar="NAMES|GLOB",
        help="Parquet/CSV feature columns: comma-separated names or one glob pattern such as "
        "'px_*' (default: every column but the label and index columns)",
    )
    g.add_argument(
        "--allow-missing-chunks",
        action="store_true",
        help="read Zarr chunks absent from the store as the fill value (stores written with "
        "write_empty_chunks=False) instead of refusing the store",
    )
    return data


def _label_options() -> _Parser:
    labels = _Parser(add_help=False)
    group = labels.add_argument_group("labels")
    group.add_argument(
        "--labels",
        metavar="PATH|NAME",
        help="labels: a Zarr array or .npy path, or an array name inside the --data "
        "Zarr group (default: its array 'y' if present); for a graph alone, also a "
        "Parquet/CSV table of the nodes with --label-column",
    )
    group.add_argument(
        "--label-column",
        metavar="NAME",
        help="label column of Parquet/CSV data (predict, embed: left out of the features), "
        "or of the --labels table of a graph alone",
    )
    return labels


def _edge_options(what: str) -> _Parser:
    """``--edges`` and ``--edge-columns``: a graph of the rows, for the encoder."""
    edges = _Parser(add_help=False)
    g = edges.add_argument_group("graph (the encoder only)")
    g.add_argument(
        "--edges",
        metavar="PATH",
        help="the nodes' graph as an edge list: a Parquet file/dataset, .npy or Zarr array "
        "of (source, target[, weight]) node ids 0 … n−1, node i being row i of --data and "
        f"--labels; {what}",
    )
    g.add_argument(
        "--edge-columns",
        metavar="SRC,DST[,WEIGHT]",
        help="the edge list's source, target and (optional) weight columns, by name or "
        "position (default 0,1: an array's third column, when it has one, is the weight; "
        "a table's edges weigh 1 unless WEIGHT is given)",
    )
    g.add_argument(
        "--node-column",
        metavar="NAME",
        help="the column of node ids (strings or integers) in the --data table, or in the "
        "--labels table of a graph alone: the edges then name nodes by these ids instead "
        "of rows 0 … n−1 (not a feature)",
    )
    return edges


def _output_options() -> _Parser:
    out = _Parser(add_help=False)
    g = out.add_argument_group("output")
    g.add_argument(
        "--out",
        required=True,
        metavar="PATH",
        help="output: *.zarr or *.parquet (or set --out-format)",
    )
    g.add_argument(
        "--out-format", choices=["zarr", "parquet"], help="output format (default: from --out)"
    )
    g.add_argument("--overwrite", action="store_true", help="replace an existing output")
    return out


# --- one helper per command --------------------------------------------------------------


def _add_fit(sub, name):
    p = _command(
        sub,
        name,
        [
            _common_options(),
            _data_options(graph=True),
            _label_options(),
            _edge_options(
                "without --data, the graph alone: the labels come from --labels (a .npy "
                "file or Zarr array, one per node, -1 unlabeled)"
            ),
        ],
        help="fit an estimator and save the model directory",
        description="Fit METHOD on --data and save the model to --model-out. "
        "`scalenc fit METHOD --help` lists METHOD's parameters for --set.",
        help_action=_FitHelp,
    )
    p.add_argument(
        "method", choices=sorted(METHODS), metavar="METHOD", help=f"one of {', '.join(METHODS)}"
    )
    for action in p._actions:
        if action.dest == "data":
            action.required_without_edges = True  # see _Parser.parse_known_args
    p.add_argument("--model-out", required=True, metavar="DIR", help="model directory to write")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PARAM=VALUE",
        help="an estimator parameter, e.g. --set kernels=linear,euclidean --set "
        "min_improvement=0.2 (values are JSON or comma lists; the estimator "
        "validates them; `scalenc fit METHOD --help` lists them with their defaults)",
    )
    p.add_argument(
        "--unlabeled",
        metavar="VALUE|none",
        help="the label of unlabeled rows, left out of the fit (default -1, as in "
        "sklearn.semi_supervised; None and NaN labels are unlabeled too); 'none' when every "
        "row is labeled and -1 is a class (labels -1, 0, 1), or another marker such as 99 "
        "or unknown (read like a --set value; same as --set unlabeled=VALUE)",
    )
    p.add_argument(
        "--update",
        metavar="MODEL",
        help="update the model directory MODEL with --data instead of fitting anew "
        "(the estimator's partial_fit: only the new data is read) and write the updated "
        "model to --model-out; MODEL itself is left as it is",
    )
    _add_checkpoint_arguments(p)
    _add_table_arguments(p)
    p.add_argument("--overwrite", action="store_true", help="replace an existing model directory")
    return p


def _add_checkpoint_arguments(p) -> None:
    """``fit``'s checkpoint options: a killed fit resumes where it stopped."""
    c = p.add_argument_group("checkpoints (a killed fit resumes where it stopped)")
    c.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="write what the fit's passes compute to DIR (a path or URL every worker can "
        "reach); running the same command again after a kill reads it back and computes "
        "only the rest (same as --set checkpoint=DIR); removed when the fit succeeds",
    )
    c.add_argument(
        "--restart-checkpoint",
        action="store_true",
        help="if DIR holds the checkpoint of another fit (other data, parameters or "
        "version), start it afresh instead of refusing it",
    )
    c.add_argument(
        "--keep-checkpoint",
        action="store_true",
        help="keep DIR after the fit succeeds (a rerun then reads every pass back)",
    )


def _add_table_arguments(p) -> None:
    """``fit``'s options for tables: string, categorical and boolean columns, missing values."""
    g = p.add_argument_group("tables (string, categorical and boolean columns; missing values)")
    g.add_argument(
        "--categorical",
        choices=["onehot", "ordinal", "error"],
        help="encode such feature columns one-hot (the default), as one ordinal code each, "
        "or refuse them",
    )
    g.add_argument(
        "--handle-unknown",
        choices=["error", "ignore"],
        help="a category at predict that the fit never saw: an error (default) or all zeros",
    )
    g.add_argument(
        "--handle-missing",
        choices=["error", "impute"],
        help="missing feature values: refused naming the columns (default), or imputed by the "
        "column's mean or most frequent category",
    )


def _add_predict(sub, name):
    p = _command(
        sub,
        name,
        [
            _common_options(),
            _data_options(graph=True),
            _label_options(),
            _output_options(),
            _edge_options(
                "for a model fitted with a graph: every node is predicted (without --data "
                "for a model fitted on the graph alone)"
            ),
        ],
        help="write predicted labels (or --proba) block by block",
        description="Predict every row of --data (every node of --edges) with --model.",
        model=True,
    )
    p.add_argument("--proba", action="store_true", help="class probabilities instead of labels")
    return p


def _add_embed(sub, name):
    return _command(
        sub,
        name,
        [
            _common_options(),
            _data_options(graph=True),
            _label_options(),
            _output_options(),
            _edge_options("for a model fitted with a graph, as for predict"),
        ],
        help="write the embedding (transform) block by block",
        description="Embed every row of --data (every node of --edges) with --model's transform.",
        model=True,
    )


def _add_evaluate(sub, name):
    return _command(
        sub,
        name,
        [
            _common_options(),
            _data_options(graph=True),
            _label_options(),
            _edge_options(
                "for a model fitted with a graph: its labeled nodes are scored (without "
                "--data for a model fitted on the graph alone: the labels from --labels)"
            ),
        ],
        help="accuracy, per-class report and confusion matrix",
        description="Score --model on labelled --data (the labeled nodes of --edges) in one pass.",
        model=True,
    )


def _add_info(sub, name):
    help = "describe a model directory (checksums verified)"
    return _command(sub, name, [_common_options()], help=help, model=True)


def _add_make_data(sub, name):
    p = _command(
        sub,
        name,
        [_common_options()],
        help="write one of the encoder paper's simulations, block by block",
        description="Write a simulation as a Zarr group with arrays X and y "
        "(or a Parquet dataset with columns x0.. and y).",
    )
    p.add_argument("setting", choices=_SimulationSettings(), metavar="SETTING", help="%(choices)s")
    p.add_argument("--n", type=_int_at_least(1), required=True, help="rows")
    p.add_argument("--p", type=_int_at_least(1), required=True, help="features")
    p.add_argument("--k", type=_int_at_least(2), default=5, help="classes (default 5)")
    p.add_argument("--seed", type=_int_at_least(0), default=0)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--chunk-rows", type=_int_at_least(1), metavar="N", help="rows per block")
    p.add_argument("--out", required=True, metavar="PATH", help="*.zarr or *.parquet")
    p.add_argument("--overwrite", action="store_true")
    return p


def _add_convert(sub, name):
    p = _command(
        sub,
        name,
        [_common_options(), _data_options(device=False), _label_options()],
        help="turn .npz, .npy, CSV or Parquet data into a Zarr store the commands read",
        description="Write --data (and its labels) as a Zarr group with arrays X and y "
        "(or a Parquet dataset with columns x0.. and y), block by block, as `load` and "
        "every command read it.",
    )
    p.add_argument("--out", required=True, metavar="PATH", help="*.zarr or *.parquet")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    return p


def _add_report(sub, name):
    p = _command(
        sub,
        name,
        [_common_options()],
        help="a self-contained HTML report with plots (needs matplotlib)",
        model=True,
    )
    p.add_argument(
        "--data", metavar="PATH", help="labelled data: adds scores and a confusion matrix"
    )
    p.add_argument("--chunk-rows", type=_int_at_least(1), metavar="N")
    ex = p.add_mutually_exclusive_group()
    ex.add_argument("--labels", metavar="PATH|NAME")
    ex.add_argument("--label-column", metavar="NAME")
    p.add_argument(
        "--sample",
        type=_int_at_least(1),
        default=2000,
        metavar="N",
        help="rows embedded for the CCDR scatter plot (default 2000)",
    )
    p.add_argument("--out", required=True, metavar="FILE.html")
    p.add_argument("--overwrite", action="store_true")
    return p


def _add_run(sub, name):
    p = _command(
        sub,
        name,
        [_common_options()],
        help="run the steps of a TOML job file",
        description="Run a job file: [job] settings and [[step]] tables holding "
        "the same options as the commands (see examples/job.toml).",
    )
    p.add_argument("job", metavar="JOB.toml")
    return p


#: The commands, in the order of ``scalenc --help``: name → helper adding its sub-parser.
_COMMANDS = {
    "fit": _add_fit,
    "predict": _add_predict,
    "embed": _add_embed,
    "evaluate": _add_evaluate,
    "info": _add_info,
    "make-data": _add_make_data,
    "convert": _add_convert,
    "report": _add_report,
    "run": _add_run,
}
