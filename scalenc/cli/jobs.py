"""Job files for ``scalenc run``: several command-line steps in one TOML file.

A job file holds the same options as the commands, one table per step::

    [job]
    workdir = "scalenc-example"   # relative paths below are taken from here
    overwrite = true              # a default for every step that has the option
    # scheduler = "local"         # one connection shared by all steps

    [[step]]
    command = "make-data"
    setting = "normal_noise"
    n = 20000
    p = 100
    out = "train.zarr"

    [[step]]
    command = "fit"
    method = "encoder"
    data = "train.zarr"
    model_out = "model"
    set = { kernels = ["linear", "euclidean"] }

Keys are the long option names of the command, with ``-`` or ``_`` (``model_out`` or
``model-out``); ``true`` turns a flag on; ``set`` is a table of estimator parameters and
``storage_option`` (in a step, or in [job] for every step) a table of fsspec storage
options for URLs, never written to the run's summary.
``workdir`` is relative to the job file's directory (default: that directory), and
relative paths of ``data``, ``labels``, ``edges``, ``model``, ``model_out``, ``out``,
``checkpoint`` and ``update`` are relative
to ``workdir`` — so a job file runs the same from any current directory.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from scalenc.exceptions import JobError

__all__ = [
    "Job",
    "Step",
    "JobError",
    "read_job",
    "step_argv",
    "JOB_KEYS",
]


if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


#: Keys of the [job] table: settings shared by all steps.
JOB_KEYS = {
    "workdir",
    "scheduler",
    "scheduler_file",
    "n_workers",
    "connect_timeout",
    "progress",
    "progress_interval",
    "defaults",
}
PATH_OPTIONS = {"data", "edges", "model", "model_out", "out", "checkpoint", "update", "json"}
#: Step options that may stand in [job] itself, as defaults for every step.
DEFAULT_SHORTHANDS = {"overwrite", "chunk_rows", "storage_option"}


@dataclass
class Step:
    index: int
    command: str
    options: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"step {self.index} ({self.command})"


@dataclass
class Job:
    path: Path
    workdir: Path
    settings: dict
    defaults: dict
    steps: list[Step]


def _norm(key: str) -> str:
    return key.replace("-", "_")


def read_job(path) -> Job:
    """Parse and check a job file; resolve ``workdir`` and relative paths."""
    path = Path(os.fspath(path))
    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise JobError(f"Job file {path} does not exist.") from None
    except tomllib.TOMLDecodeError as exc:
        raise JobError(f"Job file {path} is not valid TOML: {exc}.") from None
    unknown = sorted(set(raw) - {"job", "step"})
    if unknown:
        raise JobError(
            f"Job file {path}: unknown top-level key(s) {unknown}; use [job] and [[step]]."
        )
    settings = {_norm(k): v for k, v in raw.get("job", {}).items()}
    bad = sorted(set(settings) - JOB_KEYS - DEFAULT_SHORTHANDS)
    if bad:
        valid = sorted(JOB_KEYS | DEFAULT_SHORTHANDS)
        raise JobError(f"Job file {path}: unknown [job] key(s) {bad}; valid: {valid}.")
    defaults = {_norm(k): v for k, v in settings.pop("defaults", {}).items()}
    for key in DEFAULT_SHORTHANDS:  # shorthands for [job.defaults]
        if key in settings:
            defaults.setdefault(key, settings.pop(key))
    base = path.parent.absolute()
    workdir = (base / settings.pop("workdir", ".")).resolve()
    steps_raw = raw.get("step", [])
    if not isinstance(steps_raw, list) or not steps_raw:
        raise JobError(f"Job file {path} has no [[step]] tables; add at least one.")
    steps = []
    for i, table in enumerate(steps_raw, start=1):
        options = {_norm(k): v for k, v in table.items()}
        command = options.pop("command", None)
        if not isinstance(command, str):
            raise JobError(f'Job file {path}: step {i} has no `command = "..."`.')
        for key in PATH_OPTIONS & set(options):
            options[key] = _resolve(options[key], workdir)
        if isinstance(options.get("labels"), str) and _looks_like_path(options["labels"]):
            options["labels"] = _resolve(options["labels"], workdir)
        steps.append(Step(i, command, options))
    return Job(path=path, workdir=workdir, settings=settings, defaults=defaults, steps=steps)


def _looks_like_path(value: str) -> bool:
    return "/" in value or "." in Path(value).name


def _resolve(value, workdir: Path):
    if not isinstance(value, str) or "://" in value or os.path.isabs(value):
        return value
    return str(workdir / value)


def step_argv(step: Step, parser: argparse.ArgumentParser, defaults: dict) -> list[str]:
    """The command-line arguments equivalent to a step's table, for the command's parser."""
    actions = {a.dest: a for a in parser._actions if a.option_strings and a.dest != "help"}
    positionals = {a.dest: a for a in parser._actions if not a.option_strings}
    options = {k: v for k, v in defaults.items() if k in actions}
    options.update(step.options)
    argv: list[str] = []
    for dest in positionals:
        if dest not in options:
            raise JobError(
                f"{step.name}: missing `{dest} = ...` (the command's argument {dest.upper()})."
            )
        argv.append(str(options.pop(dest)))
    for key, value in options.items():
        action = actions.get(key)
        if action is None:
            valid = sorted(set(actions) | set(positionals))
            raise JobError(
                f"{step.name}: unknown option {key!r}; `scalenc {step.command}` takes {valid}."
            )
        flag = max(action.option_strings, key=len)
        if key in ("set", "storage_option"):
            if not isinstance(value, dict):
                raise JobError(
                    f"{step.name}: `{key}` must be a table (KEY = VALUE), got {value!r}."
                )
            for name, val in value.items():
                argv += [flag, f"{name}={json.dumps(val)}"]
        elif isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            if not isinstance(value, bool):
                raise JobError(f"{step.name}: {key} is a flag; write `{key} = true`.")
            if value == isinstance(action, argparse._StoreTrueAction):
                argv.append(flag)
        elif isinstance(value, list):
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    return argv
