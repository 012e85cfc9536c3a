"""Exit codes of the ``scalenc`` command and the errors that carry one.

The bottom of the command's modules (:mod:`scalenc.cli.parser` raises :class:`BadInput` and
documents the codes in ``--help``), so it imports nothing.
"""

from __future__ import annotations

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
    "ClusterUnreachable",
    "Terminated",
]


EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_CLUSTER = 3
EXIT_COMPUTE = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM


class CLIError(Exception):
    """An error with its exit code; the message is shown as is."""

    code = EXIT_COMPUTE


class BadInput(CLIError):
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


class ClusterUnreachable(CLIError):
    code = EXIT_CLUSTER


class Terminated(KeyboardInterrupt):
    """SIGTERM (what SLURM, Kubernetes and ``docker stop`` send), raised in the main thread
    by the command's handler. A KeyboardInterrupt, so that every clean-up that runs for
    Ctrl-C (the writers' removal of their temporaries) runs for it too."""
