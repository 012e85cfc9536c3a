"""The ``scalenc`` commands behind :mod:`scalenc.cli`: the session (logging, scheduler,
progress), one function per command, and :func:`execute`, which runs a parsed command
line and turns its result or failure into the summary (text or JSON, written by
:mod:`scalenc.cli.summary`) and an exit code.

:mod:`scalenc.cli` imports this module only once the arguments have parsed, so it imports
at its top everything the commands need (dask, distributed, the IO modules); which
estimator module ``fit`` loads is looked up in :data:`~scalenc.cli.parser.METHODS`.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import logging
import os
import time
from pathlib import Path

import dask
import distributed  # noqa: F401 - loads its dask.config defaults before any config.set
import numpy as np

from scalenc.cli.errors import BadInput
from scalenc.cli.graph import (
    check_fit_graph,
    check_label_sources,
    check_model_graph,
    graph_summary,
    open_graph,
    open_node_labels,
    refuse_graph_model,
)
from scalenc.cli.parser import METHODS, parse_set, parse_value
from scalenc.cli.session import NOTICE
from scalenc.cli.summary import plural
from scalenc.engine import resume
from scalenc.engine.reads import counting_passes
from scalenc.io.atomic import write_text
from scalenc.io.inputs import load
from scalenc.io.outputs import write_dataset, write_output
from scalenc.io.tables import Table
from scalenc.persist import load_model, read_model_metadata, save_model
from scalenc.report import (
    build_report,
    describe_data,
    describe_model,
    evaluate,
    jsonable,
    require_matplotlib,
    sample_rows,
)
from scalenc.simulate import simulate

__all__ = ["STEPS", "estimator_class", "redact"]


log = logging.getLogger("scalenc.cli")


# --- helpers -----------------------------------------------------------------------------


def estimator_class(method: str):
    """The estimator class of a ``scalenc fit`` METHOD."""
    try:
        module, _, name = METHODS[method].partition(":")
    except KeyError:
        raise BadInput(f"Unknown method {method!r}; choose one of {list(METHODS)}.") from None
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise BadInput(
            f"Method {method!r} is not available in this scalenc installation ({exc})."
        ) from None


def _check_exists(path: str, what: str) -> None:
    if "://" not in path and not os.path.exists(path):
        raise BadInput(f"{what} {path!r} does not exist.")


def _check_out_format(args) -> None:
    """``--out`` names its format (*.zarr, *.parquet), or ``--out-format`` does: said in the
    command's own options before anything is read."""
    suffix = os.path.splitext(str(args.out).rstrip("/"))[1].lower()
    if getattr(args, "out_format", None) is None and suffix not in (".zarr", ".parquet"):
        raise BadInput(
            f"Cannot tell the output format of --out {args.out!r}: name it *.zarr or "
            "*.parquet, or pass --out-format zarr (or parquet)."
        )


def _check_free(path: str, overwrite: bool) -> None:
    if os.path.exists(path) and not overwrite:
        raise BadInput(f"{path} exists; pass --overwrite to replace it.")


def _feature_columns(text: str | None):
    """``--feature-columns``: one glob pattern, or comma-separated names."""
    if text is None or any(ch in text for ch in "*?["):
        return text
    return [name.strip() for name in text.split(",") if name.strip()]


def redact(argv: list[str]) -> list[str]:
    """argv with the values of ``--storage-option`` (credentials) replaced by ``***``."""
    out, hide = [], False
    for arg in map(str, argv):
        if hide or arg.startswith("--storage-option="):
            prefix = "--storage-option=" if arg.startswith("--storage-option=") else ""
            key = arg[len(prefix) :].partition("=")[0]
            out.append(f"{prefix}{key}=***")
        else:
            out.append(arg)
        hide = arg == "--storage-option"
    return out


def _check_inputs(args) -> None:
    """The local input paths of a command exist: checked before its outputs are."""
    for attr, flag in (("model", "--model"), ("data", "--data"), ("edges", "--edges")):
        if getattr(args, attr, None):
            _check_exists(getattr(args, attr), flag)
    label_arg = getattr(args, "labels", None)
    if label_arg is not None and ("/" in label_arg or label_arg.endswith((".npy", ".zarr"))):
        _check_exists(label_arg, "--labels")


def _open_data(args, *, require_labels: bool = False):
    _check_inputs(args)
    check_label_sources(args)
    node_column = getattr(args, "node_column", None)
    X, y = load(
        args.data,
        labels=getattr(args, "labels", None),
        label_column=getattr(args, "label_column", None),
        feature_columns=_feature_columns(getattr(args, "feature_columns", None)),
        exclude_columns=(node_column,) if node_column else (),
        chunk_rows=args.chunk_rows,
        allow_missing_chunks=getattr(args, "allow_missing_chunks", False),
        storage_options=args.storage_option,
        device=getattr(args, "device", "cpu"),
    )
    if require_labels and y is None:
        raise BadInput(
            f"No labels for {args.data}: pass --labels PATH|NAME (Zarr/.npy), --label-column NAME "
            "(Parquet/CSV), or store them as array 'y' in the Zarr group / .npz file."
        )
    log.info(
        "data %s: %d rows x %s, %s, %s of up to %d rows%s",
        args.data,
        X.shape[0],
        plural(X.shape[1], "feature"),
        _feature_types(X),
        plural(X.numblocks[0], "row block"),
        max(X.chunks[0]),
        "" if y is None else ", with labels",
    )
    return X, y


def _labeled_inputs(args):
    """(X, y) of ``fit`` and ``evaluate``: ``--data`` and its labels, or for a graph alone
    (no ``--data``) X None and the nodes' labels."""
    if args.data is None:
        return None, open_node_labels(args)
    return _open_data(args, require_labels=True)


def _feature_types(X) -> str:
    """X's dtype, or a table's columns by kind (the estimator encodes them as float64, or
    float32 where every numeric column is)."""
    if isinstance(X, Table):
        return f"table of {X.column_kinds()} columns (encoded by the estimator)"
    return str(X.dtype)


def _data_summary(args, X, y) -> dict:
    out = {
        "path": args.data,
        "rows": int(X.shape[0]),
        "features": int(X.shape[1]),
        "dtype": _feature_types(X),
        "row_blocks": int(X.numblocks[0]),
        "chunk_rows": int(max(X.chunks[0])),
    }
    if y is not None:
        out["labels"] = getattr(args, "labels", None) or getattr(args, "label_column", None) or "y"
    return out


def _load_model(path: str, args):
    _check_exists(path, "--model")
    est = load_model(path, storage_options=args.storage_option)
    log.info("model %s: %s (checksums verified)", path, type(est).__name__)
    return est


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, round(time.perf_counter() - t0, 4)


def _write_output(args, session, est, X, graph, out, columns, kind, name) -> dict:
    """``predict``/``embed``: ``out`` written block by block to ``--out``, and the
    command's summary (``kind`` of output, ``name`` in its outputs)."""
    command = args.command
    with _counting_edges(graph) as edge_reads, session.progress(command, X, passes=1):
        path, seconds = timed(
            write_output,
            out,
            args.out,
            format=args.out_format,
            columns=columns,
            overwrite=args.overwrite,
            storage_options=args.storage_option,
        )
    log.info("%s: wrote %s (%s rows) in %.2fs", command, path, out.shape[0], seconds)
    return {
        "model": args.model,
        "estimator": type(est).__name__,
        "data": None if X is None else _data_summary(args, X, None),
        **_graph_part(args, graph, out, edge_reads),
        "output": {"path": path, "kind": kind, "columns": columns, "rows": int(out.shape[0])},
        "passes": int(X is not None),
        "timings": {f"{command}_seconds": seconds},
        "outputs": {name: path},
    }


def _write_dataset(args, session, X, y, fmt: str, attrs: dict, data=None):
    """``make-data``/``convert``: (X, y) written to ``--out``, its one pass."""
    with session.progress(args.command, data, passes=1):
        path, seconds = timed(
            write_dataset,
            X,
            y,
            args.out,
            format=fmt,
            attrs=attrs,
            overwrite=args.overwrite,
            storage_options=args.storage_option,
        )
    log.info("%s: wrote %s in %.2fs", args.command, path, seconds)
    return path, seconds


# --- commands ----------------------------------------------------------------------------


#: ``scalenc fit`` options that set one estimator parameter each, with the parameter.
_PARAMETER_OPTIONS = {
    "unlabeled": "--unlabeled",
    "categorical": "--categorical",
    "handle_unknown": "--handle-unknown",
    "handle_missing": "--handle-missing",
    "checkpoint": "--checkpoint",
}


def _fit_params(args) -> dict:
    """The estimator parameters of ``scalenc fit``: the ``--set`` items, and the options
    that set one parameter each (:data:`_PARAMETER_OPTIONS`; ``--unlabeled none`` gives
    ``unlabeled=None``, any other value is read like a ``--set`` value)."""
    params = parse_set(args.set)
    for name, flag in _PARAMETER_OPTIONS.items():
        text = getattr(args, name, None)
        if text is None:
            continue
        if name in params:
            raise BadInput(
                f"{flag} {text} and --set {name}={params[name]!r} both set {name}; give only "
                "one of them."
            )
        text = text.strip()
        if name == "unlabeled":
            params[name] = None if text.lower() == "none" else parse_value(text)
        else:
            params[name] = text
    return params


def cmd_fit(args, session) -> dict:
    cls = estimator_class(args.method)
    params = _fit_params(args)
    check_fit_graph(args, cls, params)
    if args.update:
        _check_update_args(args, params)
        est = _load_model(args.update, args)
        if type(est) is not cls:
            raise BadInput(
                f"--update {args.update} holds a {type(est).__name__} model, not the "
                f"{cls.__name__} of METHOD {args.method}; give the model's method."
            )
        if not hasattr(est, "partial_fit"):
            raise BadInput(f"A {cls.__name__} model cannot be updated; fit it again.")
    else:
        est = _estimator_with(cls, params)
    _check_inputs(args)  # inputs before output conflicts
    _check_free(args.model_out, args.overwrite)
    X, y = _labeled_inputs(args)
    graph = open_graph(args)
    if args.update:
        log.info("update %s (%s) with %s", args.update, cls.__name__, args.data)
    else:
        log.info("fit %s (%s) with %s", args.method, cls.__name__, params or "default parameters")
    step = est.partial_fit if args.update else est.fit
    with (
        session.progress("fit", counted=True),
        dask.config.set(_checkpoint_config(args)),
        resume.reporting(lambda text: log.log(NOTICE, "fit: %s", text)),  # one line each
    ):
        _, fit_s = timed(step, X, y, **graph)
    passes = getattr(est, "n_passes_", None)
    over = f", {plural(passes, 'pass', 'passes')} over the data" if passes else ""
    log.info("fit: done in %.2fs%s", fit_s, over)
    options = {"overwrite": args.overwrite, "storage_options": args.storage_option}
    path, save_s = timed(save_model, est, args.model_out, **options)
    log.info("fit: model saved to %s", path)
    summary = {
        "method": args.method,
        "estimator": cls.__name__,
        "params": jsonable(est.get_params(deep=False)),
        "data": None if X is None else _data_summary(args, X, y),
        "passes": passes,
        "timings": {"fit_seconds": fit_s, "save_seconds": save_s},
        "model": describe_model(est),
        "outputs": {"model": path},
    }
    if graph:
        summary["graph"] = graph_summary(args, graph["graph"], y.shape[0], est)
    if getattr(est, "checkpoint_summary_", None) is not None and not args.update:
        summary["checkpoint"] = jsonable(est.checkpoint_summary_)
    if args.update:
        summary["update"] = {"model": args.update, "updates": getattr(est, "n_updates_", None)}
    return summary


def _estimator_with(cls, params: dict):
    """``cls(**params)``, its parameters checked as its ``fit`` checks them first, before any
    data is read; an unknown name is refused with the nearest valid one."""
    est = cls()
    valid = sorted(est.get_params(deep=False))
    for name in params:
        if name not in valid:
            close = difflib.get_close_matches(name, valid, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise BadInput(
                f"{cls.__name__} has no parameter {name!r}.{hint} Its parameters: {valid} "
                "(`scalenc fit METHOD --help` lists them with their defaults)."
            )
    est.set_params(**params)
    est._check_params()
    return est


def _check_update_args(args, params) -> None:
    """``fit --update`` takes the model's parameters and writes a new model directory."""
    if params:
        raise BadInput(
            f"--update {args.update} keeps the model's parameters; drop "
            f"{', '.join(sorted(params))} (--set and the parameter options), or fit anew."
        )
    if os.path.abspath(args.update) == os.path.abspath(args.model_out):
        raise BadInput(
            f"--model-out {args.model_out} is the model given to --update; write the updated "
            "model to another directory (the old one is left as it is)."
        )
    if getattr(args, "restart_checkpoint", False) or getattr(args, "keep_checkpoint", False):
        raise BadInput("--update reads only the new data and takes no checkpoint options.")


def _checkpoint_config(args) -> dict:
    """The Dask config of ``fit``'s checkpoint options (:mod:`scalenc.engine.checkpoint`):
    ``--restart-checkpoint``, ``--keep-checkpoint``, and the ``--storage-option`` pairs
    for a checkpoint URL."""
    config = {}
    if getattr(args, "restart_checkpoint", False):
        config["scalenc.checkpoint.on-change"] = "restart"
    if getattr(args, "keep_checkpoint", False):
        config["scalenc.checkpoint.keep"] = True
    if args.storage_option:
        config["scalenc.checkpoint.storage-options"] = args.storage_option
    return config


def cmd_predict(args, session) -> dict:
    est = _load_model(args.model, args)
    method = "predict_proba" if args.proba else "predict"
    if not hasattr(est, method):
        raise BadInput(
            f"{type(est).__name__} has no {method}; "
            + (
                "use `scalenc embed` for a transformer."
                if not hasattr(est, "predict")
                else "drop --proba."
            )
        )
    X, graph = _output_inputs(args, est, "predict")
    out = getattr(est, method)(X, **graph)
    columns = (
        [f"proba_{c}" for c in np.asarray(est.classes_).tolist()] if args.proba else ["prediction"]
    )
    kind = "probabilities" if args.proba else "labels"
    return _write_output(args, session, est, X, graph, out, columns, kind, "predictions")


def _output_inputs(args, est, command: str):
    """The inputs of ``predict``/``embed``, checked before the output is: X (None for a
    model fitted on a graph alone) and, for a model fitted with a graph, ``graph=`` its
    edges (the output then has a row for every node)."""
    check_model_graph(args, est, command)
    _check_inputs(args)  # inputs before output conflicts
    _check_out_format(args)
    _check_free(args.out, args.overwrite)
    X = None if args.data is None else _open_data(args)[0]
    return X, open_graph(args)


def _counting_edges(graph: dict):
    """The engine's count of the passes over the edges of ``graph``; without one, no count
    (an empty one would be the outermost count and number the progress lines by it)."""
    return counting_passes(graph["graph"].ids) if graph else contextlib.nullcontext()


def _graph_part(args, graph: dict, out, edge_reads) -> dict:
    """The summary's ``graph`` of ``predict``/``embed``/``evaluate`` (the nodes: the
    output's rows; the passes over the edges, ``edge_reads``, counted by the engine)."""
    if not graph:
        return {}
    summary = graph_summary(args, graph["graph"], out.shape[0])
    return {"graph": {**summary, "edge_passes": edge_reads.passes}}


def cmd_embed(args, session) -> dict:
    est = _load_model(args.model, args)
    if not hasattr(est, "transform"):
        raise BadInput(f"{type(est).__name__} has no transform (embedding); use `scalenc predict`.")
    X, graph = _output_inputs(args, est, "embed")
    Z = est.transform(X, **graph)
    columns = [f"z{j}" for j in range(Z.shape[1])]
    return _write_output(args, session, est, X, graph, Z, columns, "embedding", "embedding")


def cmd_evaluate(args, session) -> dict:
    est = _load_model(args.model, args)
    if not hasattr(est, "predict"):
        raise BadInput(f"{type(est).__name__} is a transformer; evaluate needs a classifier.")
    check_model_graph(args, est, "evaluate")
    _check_inputs(args)
    X, y = _labeled_inputs(args)
    graph = open_graph(args)
    with session.progress("evaluate", X, passes=1), _counting_edges(graph) as edge_reads:
        scores = evaluate(est, X, y, **graph)
    log.info(
        "evaluate: accuracy %.4f on %d labeled rows (%.2fs)",
        scores["accuracy"] or float("nan"),
        scores["labeled_rows"],
        scores["seconds"],
    )
    if scores["unknown_label_rows"]:
        log.warning(
            "evaluate: %d labeled row(s) have a class the model was not fitted on (its classes: "
            "%s); they count as errors in the accuracy",
            scores["unknown_label_rows"],
            jsonable(np.asarray(est.classes_), max_items=20),
        )
    return {
        "model": args.model,
        "estimator": type(est).__name__,
        "data": None if X is None else _data_summary(args, X, y),
        **_graph_part(args, graph, y, edge_reads),
        "passes": int(X is not None),
        "timings": {"evaluate_seconds": scores.pop("seconds")},
        "scores": scores,
    }


def cmd_info(args, session) -> dict:
    est = _load_model(args.model, args)  # its metadata and every array file verified
    meta = read_model_metadata(args.model, verify=False, storage_options=args.storage_option)
    files = meta["files"]
    return {
        "model": args.model,
        "estimator": meta["estimator"],
        "schema_version": meta["schema_version"],
        "created": meta.get("created"),
        "versions": meta.get("versions"),
        "classes": meta.get("classes"),
        "params": jsonable(est.get_params(deep=False)),
        "fitted": describe_model(est),
        "files": {
            "arrays": len(files),
            "bytes": sum(f["bytes"] for f in files.values()),
            "checksums": "verified",
        },
    }


def cmd_make_data(args, session) -> dict:
    _check_free(args.out, args.overwrite)
    fmt = _xy_format(args.out)
    X, y = simulate(
        args.setting,
        args.n,
        args.p,
        args.k,
        random_state=args.seed,
        chunk_rows=args.chunk_rows,
        dtype=np.dtype(args.dtype),
    )
    log.info(
        "make-data %s: %d rows x %s, %d classes, %s -> %s",
        args.setting,
        args.n,
        plural(args.p, "feature"),
        args.k,
        plural(X.numblocks[0], "row block"),
        args.out,
    )
    attrs = {
        "setting": args.setting,
        "n": args.n,
        "p": args.p,
        "k": args.k,
        "seed": args.seed,
        "generator": "scalenc.simulate.simulate",
    }
    path, seconds = _write_dataset(args, session, X, y, fmt, attrs)
    return {
        "setting": args.setting,
        "rows": args.n,
        "features": args.p,
        "classes": args.k,
        "seed": args.seed,
        "dtype": args.dtype,
        "row_blocks": int(X.numblocks[0]),
        "format": fmt,
        "passes": 1,
        "timings": {"write_seconds": seconds},
        "outputs": {"data": path},
    }


def cmd_convert(args, session) -> dict:
    _check_inputs(args)  # inputs before output conflicts
    fmt = _xy_format(args.out)
    _check_free(args.out, args.overwrite)
    X, y = _open_data(args)
    if isinstance(X, Table):
        raise BadInput(
            f"{args.data} has columns that are not numbers ({X.column_kinds()}): a Zarr "
            "store holds numeric arrays. Select the numeric columns with --feature-columns, "
            "or give the table itself to fit, predict and evaluate, which encode its "
            "categories."
        )
    attrs = {"source": redact([args.data])[0], "converted_by": "scalenc convert"}
    path, seconds = _write_dataset(args, session, X, y, fmt, attrs, X)
    return {
        "data": _data_summary(args, X, y),
        "format": fmt,
        "passes": 1,
        "timings": {"write_seconds": seconds},
        "outputs": {"data": path},
    }


def _xy_format(path: str) -> str:
    suffix = Path(path.rstrip("/")).suffix.lower()
    if suffix not in (".zarr", ".parquet"):
        raise BadInput(f"Cannot tell the format of {path!r}: name it *.zarr or *.parquet.")
    return suffix[1:]


def cmd_report(args, session) -> dict:
    require_matplotlib()
    _check_inputs(args)  # inputs before output conflicts
    _check_free(args.out, args.overwrite)
    est = _load_model(args.model, args)
    refuse_graph_model(args, est, "report")
    meta = read_model_metadata(args.model, verify=False, storage_options=args.storage_option)
    evaluation = embedding = emb_labels = data = None
    timings = {}
    passes = 0
    if args.data:
        X, y = _open_data(args)
        data = _data_summary(args, X, y)
        if y is not None and hasattr(est, "predict"):
            with session.progress("report/evaluate", X, passes=1):
                evaluation = evaluate(est, X, y)
            timings["evaluate_seconds"] = evaluation["seconds"]
            passes += 1
        if hasattr(est, "transform") and hasattr(getattr(est, "ccdr_", est), "eigenvalues_"):
            with session.progress("report/sample", X, passes=1):
                (xs, ys), timings["sample_seconds"] = timed(sample_rows, X, y, n=args.sample)
                embedding, emb_labels = est.transform(xs), ys
            passes += 1
    page, timings["render_seconds"] = timed(
        build_report,
        est,
        metadata=meta,
        evaluation=evaluation,
        embedding=embedding,
        embedding_labels=emb_labels,
        data=describe_data(X, source=args.data) if args.data else None,
        model=args.model,
    )
    path = write_text(args.out, page, overwrite=args.overwrite, storage_options=args.storage_option)
    log.info("report: wrote %s (%d KB)", path, len(page) // 1024)
    return {
        "model": args.model,
        "estimator": type(est).__name__,
        "data": data,
        "passes": passes,
        "timings": timings,
        "scores": evaluation,
        "outputs": {"report": path},
    }


# --- running a parsed command line -------------------------------------------------------


#: Command name → function running it, for the commands a job's step can run.
STEPS = {
    "fit": cmd_fit,
    "predict": cmd_predict,
    "embed": cmd_embed,
    "evaluate": cmd_evaluate,
    "info": cmd_info,
    "make-data": cmd_make_data,
    "convert": cmd_convert,
    "report": cmd_report,
}
