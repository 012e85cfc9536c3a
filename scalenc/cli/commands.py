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
import importlib
import logging
import os
import signal
import sys
import threading
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

import distributed  # noqa: F401 - loads its dask.config defaults before any config.set
import numpy as np

from scalenc import __version__
from scalenc.cli.errors import (
    EXIT_BAD_INPUT,
    EXIT_CLUSTER,
    EXIT_COMPUTE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    BadInput,
    CLIError,
    Terminated,
)
from scalenc.cli.jobs import JobError, read_job, step_argv
from scalenc.cli.parser import METHODS, build_parser, parse_set, parse_value
from scalenc.cli.progress import Progress
from scalenc.cli.summary import plural, to_json, to_text
from scalenc.engine.cluster import ClusterUnavailableError
from scalenc.engine.connect import connect
from scalenc.io.atomic import write_text
from scalenc.io.inputs import load
from scalenc.io.outputs import write_dataset, write_output
from scalenc.persist import ModelFileError, load_model, read_model_metadata, save_model
from scalenc.report import (
    MissingPlotDependency,
    build_report,
    describe_model,
    evaluate,
    jsonable,
    require_matplotlib,
    sample_rows,
)
from scalenc.simulate import simulate

__all__ = [
    "execute",
    "COMMANDS",
]


log = logging.getLogger("scalenc.cli")


# --- session: logging, scheduler, progress ------------------------------------------------


class Session:
    """What the steps of one invocation share: the log, the client, progress settings."""

    def __init__(self, args):
        self.args = args
        self.client = None
        self.scheduler_info = {"kind": "threads"}
        self.quiet = args.quiet

    def progress(self, label: str, data=None, passes: int | None = None):
        """Progress of the computations of one step; those reading ``data`` are its
        ``passes`` (when known) over the data."""
        mode = "none" if self.quiet else self.args.progress
        return Progress(
            label,
            mode=mode,
            stream=sys.stderr,
            interval=self.args.progress_interval,
            client=self.client,
            data=data,
            passes=passes,
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
            log.info(
                "connected to Dask scheduler %s%s",
                info["address"],
                f"; dashboard: {link}" if link else "",
            )
            try:
                yield self.client
            finally:
                self.client = None


@contextlib.contextmanager
def _connect(address, scheduler_file, n_workers, timeout, tls_dir):
    """scalenc.connect, with its failures mapped to exit codes 2 (bad setting) and 3."""
    stack = contextlib.ExitStack()
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
        stack.close()
        raise BadInput(f"Bad scheduler setting {address or scheduler_file!r}: {exc}") from exc
    except ClusterUnavailableError:
        stack.close()
        raise
    except Exception as exc:
        stack.close()
        raise ClusterUnavailableError(
            f"Cannot reach the Dask scheduler at {address or scheduler_file!r} within "
            f"{timeout:g}s ({type(exc).__name__}: {exc}). Check the address and that the "
            "scheduler is running, or drop --scheduler to run on local threads."
        ) from exc
    with stack:
        yield client


def _setup_logging(args) -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s scalenc %(message)s", "%H:%M:%S"))
    log.handlers = [handler]
    log.propagate = False
    log.setLevel(logging.WARNING if args.quiet else logging.DEBUG if args.verbose else logging.INFO)
    return handler


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


def _check_free(path: str, overwrite: bool) -> None:
    if os.path.exists(path) and not overwrite:
        raise BadInput(f"{path} exists; pass --overwrite to replace it.")


def _feature_columns(text: str | None):
    """``--feature-columns``: one glob pattern, or comma-separated names."""
    if text is None or any(ch in text for ch in "*?["):
        return text
    return [name.strip() for name in text.split(",") if name.strip()]


def storage_options(pairs: list[str]) -> dict:
    """``--storage-option KEY=VALUE`` pairs as fsspec's ``storage_options`` (JSON values)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise BadInput(f"--storage-option takes KEY=VALUE; got {pair!r}.")
        out[key.strip()] = parse_value(value)
    return out


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
    for attr, flag in (("model", "--model"), ("data", "--data")):
        if getattr(args, attr, None):
            _check_exists(getattr(args, attr), flag)
    label_arg = getattr(args, "labels", None)
    if label_arg is not None and ("/" in label_arg or label_arg.endswith((".npy", ".zarr"))):
        _check_exists(label_arg, "--labels")


def _open_data(args, *, labels: bool, require_labels: bool = False):
    _check_inputs(args)
    label_arg = getattr(args, "labels", None) if labels else None
    label_column = getattr(args, "label_column", None) if labels else None
    X, y = load(
        args.data,
        labels=label_arg,
        label_column=label_column,
        feature_columns=_feature_columns(getattr(args, "feature_columns", None)),
        chunk_rows=args.chunk_rows,
        allow_missing_chunks=getattr(args, "allow_missing_chunks", False),
        storage_options=storage_options(getattr(args, "storage_option", [])),
    )
    if not labels:
        y = None
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
        X.dtype,
        plural(X.numblocks[0], "row block"),
        max(X.chunks[0]),
        "" if y is None else ", with labels",
    )
    return X, y


def _data_summary(args, X, y) -> dict:
    out = {
        "path": args.data,
        "rows": int(X.shape[0]),
        "features": int(X.shape[1]),
        "dtype": str(X.dtype),
        "row_blocks": int(X.numblocks[0]),
        "chunk_rows": int(max(X.chunks[0])),
    }
    if y is not None:
        out["labels"] = getattr(args, "labels", None) or getattr(args, "label_column", None) or "y"
    return out


def _load_model(path: str, args=None):
    _check_exists(path, "--model")
    est = load_model(path, storage_options=storage_options(getattr(args, "storage_option", [])))
    log.info("model %s: %s (checksums verified)", path, type(est).__name__)
    return est


def _timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, round(time.perf_counter() - t0, 4)


def _write(session, label, arr, args, columns, data=None):
    with session.progress(label, data, passes=1):
        path, seconds = _timed(
            write_output,
            arr,
            args.out,
            format=args.out_format,
            columns=columns,
            overwrite=args.overwrite,
            storage_options=storage_options(getattr(args, "storage_option", [])),
        )
    log.info("%s: wrote %s (%s rows) in %.2fs", label, path, arr.shape[0], seconds)
    return path, seconds


# --- commands ----------------------------------------------------------------------------


def cmd_fit(args, session) -> dict:
    cls = estimator_class(args.method)
    params = parse_set(args.set)
    est = cls()
    est.set_params(**params)  # unknown names: sklearn's message; values: checked by fit
    _check_inputs(args)  # inputs before output conflicts
    _check_free(args.model_out, args.overwrite)
    X, y = _open_data(args, labels=True, require_labels=True)
    log.info("fit %s (%s) with %s", args.method, cls.__name__, params or "default parameters")
    with session.progress("fit", X):
        _, fit_s = _timed(est.fit, X, y)
    passes = getattr(est, "n_passes_", None)
    over = f", {plural(passes, 'pass', 'passes')} over the data" if passes else ""
    log.info("fit: done in %.2fs%s", fit_s, over)
    path, save_s = _timed(
        save_model,
        est,
        args.model_out,
        overwrite=args.overwrite,
        storage_options=storage_options(getattr(args, "storage_option", [])),
    )
    log.info("fit: model saved to %s", path)
    return {
        "method": args.method,
        "estimator": cls.__name__,
        "params": jsonable(est.get_params(deep=False)),
        "data": _data_summary(args, X, y),
        "passes": passes,
        "timings": {"fit_seconds": fit_s, "save_seconds": save_s},
        "model": describe_model(est),
        "outputs": {"model": path},
    }


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
    _check_inputs(args)  # inputs before output conflicts
    _check_free(args.out, args.overwrite)
    X, _ = _open_data(args, labels=True)
    out = getattr(est, method)(X)
    columns = (
        [f"proba_{c}" for c in np.asarray(est.classes_).tolist()] if args.proba else ["prediction"]
    )
    path, seconds = _write(session, "predict", out, args, columns, X)
    return {
        "model": args.model,
        "estimator": type(est).__name__,
        "data": _data_summary(args, X, None),
        "output": {
            "path": path,
            "kind": "probabilities" if args.proba else "labels",
            "columns": columns,
            "rows": int(out.shape[0]),
        },
        "passes": 1,
        "timings": {"predict_seconds": seconds},
        "outputs": {"predictions": path},
    }


def cmd_embed(args, session) -> dict:
    est = _load_model(args.model, args)
    if not hasattr(est, "transform"):
        raise BadInput(f"{type(est).__name__} has no transform (embedding); use `scalenc predict`.")
    _check_inputs(args)  # inputs before output conflicts
    _check_free(args.out, args.overwrite)
    X, _ = _open_data(args, labels=True)
    Z = est.transform(X)
    columns = [f"z{j}" for j in range(Z.shape[1])]
    path, seconds = _write(session, "embed", Z, args, columns, X)
    return {
        "model": args.model,
        "estimator": type(est).__name__,
        "data": _data_summary(args, X, None),
        "output": {"path": path, "kind": "embedding", "columns": columns, "rows": int(Z.shape[0])},
        "passes": 1,
        "timings": {"embed_seconds": seconds},
        "outputs": {"embedding": path},
    }


def cmd_evaluate(args, session) -> dict:
    est = _load_model(args.model, args)
    if not hasattr(est, "predict"):
        raise BadInput(f"{type(est).__name__} is a transformer; evaluate needs a classifier.")
    X, y = _open_data(args, labels=True, require_labels=True)
    with session.progress("evaluate", X, passes=1):
        scores = evaluate(est, X, y)
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
        "data": _data_summary(args, X, y),
        "passes": 1,
        "timings": {"evaluate_seconds": scores.pop("seconds")},
        "scores": scores,
    }


def cmd_info(args, session) -> dict:
    _check_exists(args.model, "--model")
    options = storage_options(args.storage_option)
    meta = read_model_metadata(args.model, verify=True, storage_options=options)
    est = _load_model(args.model, args)
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
    with session.progress("make-data", passes=1):  # the writes are its one pass
        path, seconds = _timed(
            write_dataset,
            X,
            y,
            args.out,
            format=fmt,
            attrs=attrs,
            overwrite=args.overwrite,
            storage_options=storage_options(args.storage_option),
        )
    log.info("make-data: wrote %s in %.2fs", path, seconds)
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
    options = storage_options(args.storage_option)
    meta = read_model_metadata(args.model, verify=False, storage_options=options)
    evaluation = embedding = emb_labels = None
    timings = {}
    passes = 0
    if args.data:
        X, y = _open_data(args, labels=True)
        if y is not None and hasattr(est, "predict"):
            with session.progress("report/evaluate", X, passes=1):
                evaluation = evaluate(est, X, y)
            timings["evaluate_seconds"] = evaluation["seconds"]
            passes += 1
        if hasattr(est, "transform") and hasattr(getattr(est, "ccdr_", est), "eigenvalues_"):
            with session.progress("report/sample", X, passes=1):
                (xs, ys), timings["sample_seconds"] = _timed(sample_rows, X, y, n=args.sample)
                embedding = est.transform(xs)
                emb_labels = ys
            passes += 1
    page, timings["render_seconds"] = _timed(
        build_report,
        est,
        metadata=meta,
        evaluation=evaluation,
        embedding=embedding,
        embedding_labels=emb_labels,
    )
    path = write_text(
        args.out,
        page,
        overwrite=args.overwrite,
        storage_options=storage_options(args.storage_option),
    )
    log.info("report: wrote %s (%d KB)", path, len(page) // 1024)
    return {
        "model": args.model,
        "estimator": type(est).__name__,
        "passes": passes,
        "timings": timings,
        "scores": evaluation,
        "outputs": {"report": path},
    }


#: Options that apply to the whole job: in [job] or on the `scalenc run` command line.
_JOB_WIDE = {
    "scheduler",
    "scheduler_file",
    "n_workers",
    "connect_timeout",
    "json",
    "format",
    "quiet",
    "verbose",
}


def cmd_run(args, session) -> dict:
    job = read_job(args.job)
    planned = _plan_steps(args.job, job)
    job.workdir.mkdir(parents=True, exist_ok=True)
    log.info("run %s: %d steps in %s", args.job, len(planned), job.workdir)
    results = []
    settings = job.settings
    with session.connected(
        settings.get("scheduler"),
        settings.get("scheduler_file"),
        settings.get("n_workers"),
        settings.get("connect_timeout"),
    ):
        for step, step_args in planned:
            step_args.progress = settings.get("progress", args.progress)
            step_args.progress_interval = settings.get("progress_interval", args.progress_interval)
            try:
                results.append(_run_step(step, step_args, session))
            except BaseException as exc:
                what = f"{step.name} of {args.job}"
                error = {"step": step.index, "command": step.command, "status": "error"}
                results.append({**error, "error": _error_dict(exc, what, step_args)})
                raise _StepFailed(exc, results, what, step_args) from exc
    return {"job": str(job.path), "workdir": str(job.workdir), "steps": results}


def _plan_steps(job_file, job) -> list:
    """(step, parsed arguments) of every step, all checked before any runs."""
    parser = build_parser()
    steps = {name: sub for name, sub in parser.commands.items() if name != "run"}
    planned = []
    for step in job.steps:
        misplaced = sorted(_JOB_WIDE & set(step.options))
        if misplaced:
            raise BadInput(
                f"{job_file}: {step.name}: {misplaced} apply to the whole job; set them "
                "in [job] (scheduler, ...) or on the `scalenc run` command line."
            )
        if step.command not in steps:
            raise BadInput(f"{job_file}: {step.name}: unknown command; use one of {sorted(steps)}.")
        argv = step_argv(step, steps[step.command], job.defaults)
        planned.append((step, parser.parse_args([step.command, *argv])))
    _check_plan(job_file, planned)
    return planned


#: Step arguments that name inputs and outputs, for the plan's check.
_INPUTS = (("data", "--data"), ("model", "--model"), ("labels", "--labels"))
_OUTPUTS = (("model_out", "--model-out"), ("out", "--out"))


def _check_plan(job_file, planned) -> None:
    """Every step's local inputs exist or are written by an earlier step, and no output
    exists without overwrite or is written twice: all checked before the first step runs."""
    written: dict[str, str] = {}
    for step, step_args in planned:
        for attr, flag in _INPUTS:
            path = getattr(step_args, attr, None)
            if not path or "://" in str(path) or (attr == "labels" and "/" not in str(path)):
                continue
            if not os.path.exists(path) and os.path.abspath(path) not in written:
                raise BadInput(
                    f"{job_file}: {step.name}: {flag} {path!r} does not exist, and no earlier "
                    "step writes it. Nothing was run."
                )
        for attr, flag in _OUTPUTS:
            path = getattr(step_args, attr, None)
            if not path or "://" in str(path):
                continue
            key = os.path.abspath(path)
            if key in written:
                raise BadInput(
                    f"{job_file}: {step.name}: {flag} {path!r} is also written by "
                    f"{written[key]}. Nothing was run."
                )
            if os.path.exists(path) and not getattr(step_args, "overwrite", False):
                raise BadInput(
                    f"{job_file}: {step.name}: {path} exists; set overwrite = true for that "
                    "step to replace it. Nothing was run."
                )
            written[key] = step.name


def _run_step(step, step_args, session) -> dict:
    log.info("run: %s", step.name)
    result, seconds = _timed(COMMANDS[step.command], step_args, session)
    return {
        "step": step.index,
        "command": step.command,
        "status": "ok",
        "seconds": seconds,
        **result,
    }


class _StepFailed(Exception):
    """A failed step of a job: its exception, the results so far, what ran and its arguments."""

    def __init__(self, exc, results, what, step_args):
        super().__init__(str(exc))
        self.exc = exc
        self.results = results
        self.what = what
        self.step_args = step_args


#: Command name → function running it (``scalenc run`` dispatches its steps here too).
COMMANDS = {
    "fit": cmd_fit,
    "predict": cmd_predict,
    "embed": cmd_embed,
    "evaluate": cmd_evaluate,
    "info": cmd_info,
    "make-data": cmd_make_data,
    "report": cmd_report,
    "run": cmd_run,
}


# --- running a parsed command line -------------------------------------------------------


def execute(args, argv: list[str]) -> int:
    """Run the command of the parsed ``args``; write its summary; return the exit code.

    The summary goes to stdout as text (``--format text``, the default; nothing with
    ``--quiet``) or JSON (``--format json``), and as JSON to ``--json FILE`` when given.

    ``argv`` is recorded in the summary as given. SIGTERM is handled like Ctrl-C while the
    command runs (exit code 143 instead of 130).
    """
    handler = _setup_logging(args)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    session = Session(args)
    summary = {
        "scalenc": __version__,
        "command": args.command,
        "argv": redact(argv),  # storage options may hold credentials
        "started": started,
    }
    code = EXIT_OK
    with _sigterm_interrupts():
        try:
            if args.command == "run":
                result = cmd_run(args, session)
            else:
                with session.connected():
                    result = COMMANDS[args.command](args, session)
            summary.update(status="ok", **result)
        except BaseException as exc:  # noqa: BLE001 - everything becomes an exit code
            what, failed_args = f"scalenc {args.command}", args
            if isinstance(exc, _StepFailed):
                summary["steps"] = exc.results
                what, failed_args, exc = exc.what, exc.step_args, exc.exc
            if isinstance(exc, SystemExit):
                raise
            code = _exit_code(exc)
            summary.update(status="error", error=_error_dict(exc, what, failed_args))
            log.error("error (exit %d): %s", code, summary["error"]["message"])
            if args.verbose or code == EXIT_COMPUTE and not isinstance(exc, CLIError):
                log.debug("%s", "".join(traceback.format_exception(exc)))
        summary["exit_code"] = code
        summary["scheduler"] = session.scheduler_info
        summary["seconds"] = round(time.perf_counter() - t0, 4)
        try:
            _emit(summary, args, storage_options(getattr(args, "storage_option", [])))
        except OSError as exc:
            log.error("cannot write the JSON summary to %s: %s", args.json, exc)
            code = code or EXIT_BAD_INPUT
        except KeyboardInterrupt as exc:
            code = _exit_code(exc)
            log.error("error (exit %d): interrupted while writing the JSON summary", code)
        finally:
            log.removeHandler(handler)
    return code


@contextlib.contextmanager
def _sigterm_interrupts():
    """While the command runs, SIGTERM raises :class:`Terminated` in the main thread (as
    Ctrl-C raises KeyboardInterrupt), so the same clean-up runs; the previous handler is
    restored after. Off the main thread (no handler can be set there), nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _raise_terminated(signum, frame):
    raise Terminated()


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


#: Exceptions that mean the input is wrong (exit code 2), not the computation.
_BAD_INPUT_ERRORS = (
    ModelFileError,
    JobError,
    MissingPlotDependency,
    ValueError,
    TypeError,
    KeyError,
    FileNotFoundError,
    FileExistsError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
)


def _exit_code(exc: BaseException) -> int:
    """Map an exception to an exit code: input problems vs failures while computing."""
    if isinstance(exc, CLIError):
        return exc.code
    if isinstance(exc, ClusterUnavailableError):  # unreachable, or the scheduler lost
        return EXIT_CLUSTER
    if isinstance(exc, Terminated):
        return EXIT_TERMINATED
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, _BAD_INPUT_ERRORS):
        return EXIT_BAD_INPUT
    return EXIT_COMPUTE


def _error_dict(exc: BaseException, what: str, args) -> dict:
    """The summary's ``error``: the exception's type, message and exit code. ``what`` (the
    command or job step) and its ``args`` name what an interrupt stopped."""
    message = _interrupted(exc, what, args) if isinstance(exc, KeyboardInterrupt) else str(exc)
    return {"type": type(exc).__name__, "message": message, "exit_code": _exit_code(exc)}


def _interrupted(exc: KeyboardInterrupt, what: str, args) -> str:
    """What an interrupt stopped and what it left on disk: outputs are published whole or
    not at all (:mod:`scalenc.io.atomic`), so an unfinished one leaves its path as it was."""
    signame = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT (Ctrl-C)"
    paths = [str(p) for p in (getattr(args, "model_out", None), getattr(args, "out", None)) if p]
    where = f" ({', '.join(paths)})" if paths else ""
    return (
        f"{what} was interrupted by {signame}; outputs it had not finished were discarded "
        f"and their paths{where} left as they were."
    )
