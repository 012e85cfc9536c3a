"""Exit codes of the ``scalenc`` command and the errors that carry one.

The bottom of the command's modules (:mod:`scalenc.cli.parser` raises :class:`BadInput` and
documents the codes in ``--help``), so it imports only :mod:`scalenc.exceptions`: every
error here is a :class:`~scalenc.exceptions.ScalencError`. A lost or unreachable cluster
is the library's :class:`~scalenc.exceptions.ClusterUnavailableError` (exit code 3).
"""

from __future__ import annotations

from scalenc.exceptions import ScalencError

__all__ = [
    "EXIT_OK",
    "EXIT_BAD_INPUT",
    "EXIT_CLUSTER",
    "EXIT_COMPUTE",
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "CLIError",
    "BadInput",
    "UsageError",
    "Terminated",
]


EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_CLUSTER = 3
EXIT_COMPUTE = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM


class CLIError(ScalencError):
    """An error with its exit code; the message is shown as is."""

    code = EXIT_COMPUTE


class BadInput(CLIError, ValueError):
    """Arguments, files or a job the command cannot run as given (exit code 2)."""

    code = EXIT_BAD_INPUT


class UsageError(BadInput):
    """A command line argparse refuses. ``str()`` is argparse's ``PROG: error: MESSAGE``;
    :meth:`report` adds the usage line before it, as argparse prints it."""

    def __init__(self, prog: str, message: str, usage: str):
        super().__init__(f"{prog}: error: {message}")
        self.usage = usage

    def report(self) -> str:
        """The text argparse would print on stderr: the usage, then the error line."""
        return f"{self.usage}{self}\n"


class Terminated(KeyboardInterrupt):
    """SIGTERM (what SLURM, Kubernetes and ``docker stop`` send), raised in the main thread
    by the command's handler. A KeyboardInterrupt, so that every clean-up that runs for
    Ctrl-C (the writers' removal of their temporaries) runs for it too."""
