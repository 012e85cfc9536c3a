"""The ``scalenc`` command (``scalenc.cli:main``); see :mod:`scalenc.cli.app`.

Importing it loads no Dask: :mod:`scalenc.cli.execute` is imported once the arguments
have parsed, so ``scalenc --help`` and argument errors stay fast.
"""

from scalenc.cli.app import main
from scalenc.cli.errors import (
    EXIT_BAD_INPUT,
    EXIT_CLUSTER,
    EXIT_COMPUTE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
)
from scalenc.cli.parser import METHODS, build_parser, parse_value

__all__ = [
    "main",
    "build_parser",
    "METHODS",
    "parse_value",
    "EXIT_OK",
    "EXIT_BAD_INPUT",
    "EXIT_CLUSTER",
    "EXIT_COMPUTE",
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
]
