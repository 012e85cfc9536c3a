"""The ``scalenc`` command (``scalenc.cli:main``); see :mod:`scalenc.cli.app`.

Importing it loads no argparse and no Dask, only :mod:`scalenc.cli.app` and
:mod:`scalenc.cli.errors`: the command handles SIGINT and SIGTERM from its first instant,
and ``scalenc --help`` and argument errors stay fast. The parser's names
(:func:`build_parser`, :data:`METHODS`, :func:`parse_value`) load on first use.
"""

import importlib

from scalenc.cli.app import main
from scalenc.cli.errors import (
    EXIT_BAD_INPUT,
    EXIT_CLUSTER,
    EXIT_COMPUTE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
)

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

_PARSER_NAMES = ("build_parser", "METHODS", "parse_value")


def __getattr__(name: str):
    """The parser's names, imported on first use."""
    if name in _PARSER_NAMES:
        return getattr(importlib.import_module("scalenc.cli.parser"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return __all__
