"""The ``scalenc`` command: scripted batch runs over the library.

Every option is an estimator parameter (``--set NAME=VALUE``) or an argument of an IO
function (:func:`scalenc.io.inputs.load`, :func:`scalenc.io.outputs.write_output`,
:func:`scalenc.persist.save_model`). A human log goes to stderr, one line per event; a
short summary of what ran goes to stdout (the full JSON summary with ``--format json``,
and to ``--json FILE``); the exit code says what kind of failure happened, so batch
systems can act on it. Argument errors are printed as argparse prints them (the usage,
then ``scalenc COMMAND: error: ...``) with exit code 2.

The command's modules import downward only::

    app ──> parser ──> errors
     └────> execute ──> run ──> commands ──> session, jobs, progress, summary, the library
                  └──> outcome (exit codes and error summaries)

:mod:`scalenc.cli.execute` (which loads dask and distributed) is imported only once the
arguments have parsed, so ``scalenc --help`` and argument errors stay fast.
"""

from __future__ import annotations

import sys

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
from scalenc.cli.parser import METHODS, build_parser, parse_value

__all__ = [
    "main",
    "build_parser",
    "METHODS",
    "EXIT_OK",
    "EXIT_BAD_INPUT",
    "EXIT_CLUSTER",
    "EXIT_COMPUTE",
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "parse_value",
]


def main(argv: list[str] | None = None) -> int:
    """Run ``scalenc`` with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        sys.stderr.write(exc.report())
        return EXIT_BAD_INPUT
    except BadInput as exc:
        sys.stderr.write(f"{exc}\n")
        return EXIT_BAD_INPUT
    except SystemExit as exc:  # --help, --version
        return int(exc.code or 0)
    from scalenc.cli.execute import execute  # deferred: loads dask and distributed (see above)

    return execute(args, argv)


if __name__ == "__main__":
    sys.exit(main())
