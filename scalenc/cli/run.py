"""`scalenc run JOB`: a job file's steps, all parsed and checked before the first runs, then
run in order on one scheduler; a failed step names itself in the summary and the log.
"""

from __future__ import annotations

import logging
import os

from scalenc.cli.commands import STEPS, timed
from scalenc.cli.errors import BadInput
from scalenc.cli.jobs import read_job, step_argv
from scalenc.cli.outcome import error_dict
from scalenc.cli.parser import build_parser

log = logging.getLogger("scalenc.cli")

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
                results.append({**error, "error": error_dict(exc, what, step_args)})
                raise StepFailed(exc, results, what, step_args) from exc
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
_INPUTS = (("data", "--data"), ("model", "--model"), ("labels", "--labels"), ("edges", "--edges"))


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
    result, seconds = timed(STEPS[step.command], step_args, session)
    return {
        "step": step.index,
        "command": step.command,
        "status": "ok",
        "seconds": seconds,
        **result,
    }


class StepFailed(Exception):
    """A failed step of a job: its exception, the results so far, what ran and its arguments."""

    def __init__(self, exc, results, what, step_args):
        super().__init__(str(exc))
        self.exc = exc
        self.results = results
        self.what = what
        self.step_args = step_args
