"""What a command's failure means: the exit code of an exception, and the error as the
summary reports it.
"""

from __future__ import annotations

import shlex

from scalenc.cli.errors import (
    EXIT_BAD_INPUT,
    EXIT_CLUSTER,
    EXIT_COMPUTE,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    CLIError,
    Terminated,
)
from scalenc.cli.jobs import JobError
from scalenc.cli.parser import parse_value
from scalenc.engine.cluster import ClusterUnavailableError
from scalenc.exceptions import MissingDeviceDependency
from scalenc.io.atomic import published
from scalenc.persist import ModelFileError
from scalenc.report import MissingPlotDependency

#: Exceptions that mean the input is wrong (exit code 2), not the computation.
BAD_INPUT_ERRORS = (
    ModelFileError,
    JobError,
    MissingPlotDependency,
    MissingDeviceDependency,
    ValueError,
    TypeError,
    KeyError,
    FileNotFoundError,
    FileExistsError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
)


def exit_code(exc: BaseException) -> int:
    """Map an exception to an exit code: input problems vs failures while computing."""
    if isinstance(exc, CLIError):
        return exc.code
    if isinstance(exc, ClusterUnavailableError):  # unreachable, or the scheduler lost
        return EXIT_CLUSTER
    if isinstance(exc, Terminated):
        return EXIT_TERMINATED
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, BAD_INPUT_ERRORS):
        return EXIT_BAD_INPUT
    return EXIT_COMPUTE


def error_dict(exc: BaseException, what: str, args, rerun: list[str] | None = None) -> dict:
    """The summary's ``error``: the exception's type, message and exit code. ``what`` (the
    command or job step) and its ``args`` name what an interrupt stopped; ``rerun`` is the
    command line that runs it again (see :func:`interrupted`)."""
    if isinstance(exc, KeyboardInterrupt):
        message = interrupted(exc, what, args, rerun)
    else:
        message = str(exc)
    return {"type": type(exc).__name__, "message": message, "exit_code": exit_code(exc)}


def interrupted(exc: KeyboardInterrupt, what: str, args, rerun: list[str] | None = None) -> str:
    """What an interrupt stopped and what it left on disk.

    Outputs are published whole or not at all (:mod:`scalenc.io.atomic`): one published
    before the signal (with ``--overwrite``, the signal may land while the old one is
    deleted) holds the new result; an unfinished one was discarded, leaving its path as
    it was. A fit's checkpoint keeps what its passes finished, and ``rerun`` (the command
    line as given) resumes from it.
    """
    signame = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT (Ctrl-C)"
    paths = [str(p) for p in (getattr(args, "model_out", None), getattr(args, "out", None)) if p]
    done = [path for path in paths if published(path)]
    left = [path for path in paths if path not in done]
    if done:
        text = (
            f"{what} was interrupted by {signame} after it had written {', '.join(done)} "
            "complete (that path holds the new result)"
        )
        if left:
            text += f"; {', '.join(left)} left as it was"
        return text + "."
    where = f" ({', '.join(left)})" if left else ""
    text = (
        f"{what} was interrupted by {signame}; outputs it had not finished were discarded "
        f"and their paths{where} left as they were."
    )
    checkpoint = _checkpoint_of(args)
    if checkpoint is None:
        return text
    again = (
        f"run the same command again to resume: {shlex.join(['scalenc', *rerun])}"
        if rerun
        else "run the step again with the same checkpoint to resume"
    )
    return f"{text} The checkpoint {checkpoint} keeps what the fit finished; {again}"


def _checkpoint_of(args) -> str | None:
    """The checkpoint of a ``fit`` command: ``--checkpoint DIR`` or ``--set checkpoint=DIR``."""
    if getattr(args, "update", None):
        return None
    checkpoint = getattr(args, "checkpoint", None)
    for item in getattr(args, "set", None) or []:
        name, _, value = item.partition("=")
        if name.strip() == "checkpoint" and value.strip():
            checkpoint = parse_value(value.strip())
    return None if checkpoint in (None, "None", "null") else str(checkpoint)
