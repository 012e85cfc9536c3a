"""What a command's failure means: the exit code of an exception, and the error as the
summary reports it.
"""

from __future__ import annotations

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
from scalenc.engine.cluster import ClusterUnavailableError
from scalenc.exceptions import MissingDeviceDependency
from scalenc.persist import ModelFileError
from scalenc.report import (
    MissingPlotDependency,
)

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


def error_dict(exc: BaseException, what: str, args) -> dict:
    """The summary's ``error``: the exception's type, message and exit code. ``what`` (the
    command or job step) and its ``args`` name what an interrupt stopped."""
    message = interrupted(exc, what, args) if isinstance(exc, KeyboardInterrupt) else str(exc)
    return {"type": type(exc).__name__, "message": message, "exit_code": exit_code(exc)}


def interrupted(exc: KeyboardInterrupt, what: str, args) -> str:
    """What an interrupt stopped and what it left on disk: outputs are published whole or
    not at all (:mod:`scalenc.io.atomic`), so an unfinished one leaves its path as it was."""
    signame = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT (Ctrl-C)"
    paths = [str(p) for p in (getattr(args, "model_out", None), getattr(args, "out", None)) if p]
    where = f" ({', '.join(paths)})" if paths else ""
    return (
        f"{what} was interrupted by {signame}; outputs it had not finished were discarded "
        f"and their paths{where} left as they were."
    )
