"""The estimator parameters listed by ``scalenc fit METHOD --help``, read from the code.

Each parameter's default comes from the estimator's signature, its type and a one-line
description from the "Parameters" section of its numpydoc docstring, so the help says
what the docstring says. A parameter documented as "As for ``:class:`Other```" is looked up
in ``Other``'s docstring (same module).
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import shutil
import textwrap

__all__ = [
    "parameter_docs",
    "parameters_help",
]


_ROLE = re.compile(r":[\w:]+:`(~?)([^`]+)`")  # ``:class:`~a.B``` -> B, ``:mod:`a.b``` -> a.b
_LITERAL = re.compile(r"``([^`]+)``")
_SENTENCE = re.compile(r"(.+?(?<!\be\.g)(?<!\bi\.e)[.!?])(?:\s+(?=[A-Z(\"“])|$)", re.S)
_AS_FOR = re.compile(r"^As for :class:`~?(?:[\w.]*\.)?(\w+)`\.?$")


def _plain(text: str) -> str:
    """reST roles and literals as plain text."""
    text = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), text)
    return _LITERAL.sub(r"\1", text)


def _section(doc: str, title: str) -> list[str]:
    """The lines of a numpydoc section (``title`` underlined by dashes), up to the next."""
    lines = doc.splitlines()
    for i in range(len(lines) - 1):
        if lines[i].strip() == title and set(lines[i + 1].strip()) == {"-"}:
            body = []
            for j in range(i + 2, len(lines)):
                nxt = lines[j + 1].strip() if j + 1 < len(lines) else ""
                if lines[j].strip() and not lines[j][0].isspace() and set(nxt) == {"-"}:
                    break
                body.append(lines[j])
            return body
    return []


def parameter_docs(cls) -> dict[str, tuple[str, str]]:
    """``{name: (type, description)}`` from the "Parameters" section of ``cls``'s docstring.

    The type drops its ``default=...`` part; the description is plain text (reST roles and
    literals unwrapped), joined into one paragraph.
    """
    entries: list[tuple[list[str], str, list[str]]] = []
    pending = ""
    for line in _section(inspect.getdoc(cls) or "", "Parameters"):
        if not line.strip():
            continue
        if line[0].isspace():
            if entries:
                entries[-1][2].append(line.strip())
            continue
        header = pending + line.strip()
        if header.endswith(","):  # a list of names continued on the next line
            pending = header + " "
            continue
        pending = ""
        names, _, kind = header.partition(" : ")
        kind = re.sub(r",?\s*default\s*[=:].*$", "", kind).strip()
        entries.append(([n.strip() for n in names.split(",") if n.strip()], kind, []))
    docs = {}
    module = importlib.import_module(cls.__module__)
    for names, kind, text in entries:
        description = " ".join(text)
        other = _AS_FOR.match(description)
        for name in names:
            if other and hasattr(module, other.group(1)):
                docs[name] = parameter_docs(getattr(module, other.group(1))).get(
                    name, (kind, description)
                )
            else:
                docs[name] = (_plain(kind), _plain(description))
    return docs


def _first_sentence(text: str) -> str:
    match = _SENTENCE.match(text)
    return match.group(1) if match else text


def _as_set_value(value) -> str:
    """A default as it would be written after ``--set NAME=`` (JSON where possible)."""
    try:
        return json.dumps(list(value) if isinstance(value, tuple) else value)
    except (TypeError, ValueError):
        return repr(value)


def parameters_help(target: str, method: str, width: int | None = None) -> str:
    """The "estimator parameters" block of ``scalenc fit METHOD --help``.

    Parameters
    ----------
    target : str
        ``"module:Class"`` of the estimator (:data:`scalenc.cli.parser.METHODS`).
    method : str
        The METHOD name, for the heading.
    width : int or None
        Line width (default: the terminal's, between 60 and 100).
    """
    module, _, name = target.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if width is None:
        width = max(60, min(100, shutil.get_terminal_size().columns - 2))
    docs = parameter_docs(cls)
    lines = [
        f"estimator parameters of {method} ({cls.__name__}), set with --set NAME=VALUE "
        "(VALUE: JSON such as 0.5, true, null, [1, 2], a comma list such as linear,euclidean, "
        "or a string); NAME=DEFAULT, type, then what it does:"
    ]
    lines = textwrap.wrap(lines[0], width)
    for param in inspect.signature(cls).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        kind, description = docs.get(param.name, ("", ""))
        lines.append(f"  {param.name}={_as_set_value(param.default)}  {kind}".rstrip())
        text = _first_sentence(description) if description else "(not documented)"
        lines += textwrap.wrap(text, width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines) + "\n"
