"""Every cross-reference in scalenc's docstrings and in docs/ names something that exists.

Sphinx checks only the references of the pages it builds (the public API), so a renamed
private function or a moved module left its old name in the docstrings that mention it.
Here every ``:role:`target``` of the Python domain in every module of scalenc (docstrings
and ``#:`` comments alike) and in every ``.rst`` page of docs/ is resolved as Sphinx
resolves it: the full dotted name, else relative to the module (and its classes), else to
the page's ``currentmodule``; a target that starts with ``.`` matches the end of any name
of the module. Other projects' names (NumPy, scikit-learn, Dask) resolve by import.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import io
import re
import tokenize
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "scalenc"
ROLE = re.compile(r":(?:py:)?(func|class|meth|mod|data|attr|obj|exc|const):`([^`]+)`")
LITERAL = re.compile(r"``.+?``")  # a role spelt inside a literal is an example, not a link
CURRENT = re.compile(r"^\.\. (?:py:)?(?:current)?module:: *(\S+)", re.M)


def _target(text: str) -> str | None:
    """The name a role's text points at (``~a.b`` → ``a.b``, ``title <a.b>`` → ``a.b``);
    None where Sphinx makes no link (``!name``)."""
    text = text.strip()
    if text.startswith("!"):
        return None
    if text.endswith(">") and "<" in text:
        text = text[text.rindex("<") + 1 : -1]
    return text.lstrip("~").removesuffix("()")


def _has(obj, name: str) -> bool:
    if hasattr(obj, name):
        return True
    fields = getattr(obj, "__dataclass_fields__", None) or getattr(obj, "_fields", ())
    return name in fields or name in getattr(obj, "__annotations__", {})


@cache
def resolve(dotted: str) -> bool:
    """Whether a full dotted name names a module, or an object reached from one."""
    parts = dotted.split(".")
    if len(parts) == 1 and hasattr(builtins, dotted):
        return True
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            if not _has(obj, part):
                return False
            obj = getattr(obj, part, None)
        return True
    return False


def _names_of(module) -> list[str]:
    """Every name of a module and of its classes, dotted from the module."""
    names = []
    for name, value in vars(module).items():
        names.append(name)
        if inspect.isclass(value):
            names += [f"{name}.{attr}" for attr in vars(value)]
            names += [f"{name}.{f}" for f in getattr(value, "__dataclass_fields__", ())]
            names += [f"{name}.{f}" for f in getattr(value, "__annotations__", ())]
    return names


def resolves(target: str, module: str | None) -> bool:
    if target.startswith("."):
        suffix = target[1:]
        return module is not None and any(
            n == suffix or n.endswith("." + suffix)
            for n in _names_of(importlib.import_module(module))
        )
    if resolve(target):
        return True
    if module is None:
        return False
    if resolve(f"{module}.{target}"):
        return True
    # a method or attribute named from inside its class, or a sibling module's name
    mod = importlib.import_module(module)
    if any(n.endswith("." + target) for n in _names_of(mod) if "." in n):
        return True
    parent = module.rsplit(".", 1)[0]
    return resolve(f"{parent}.{target}") or resolve(f"scalenc.{target}")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _python_references(path: Path):
    """(line, role, text) of every role in a module's docstrings, bare strings and
    comments (not in its code: a regular expression may spell a role)."""
    source = path.read_text()
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            if isinstance(node.value.value, str):
                lines.update(range(node.lineno, node.end_lineno + 1))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            lines.add(token.start[0])
    text = source.splitlines()
    for number in sorted(lines):
        for role, target in ROLE.findall(LITERAL.sub("", text[number - 1])):
            yield number, role, target


def _rst_references(path: Path):
    current = None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = CURRENT.match(line)
        if match:
            current = None if match[1] == "None" else match[1]
        for role, text in ROLE.findall(LITERAL.sub("", line)):
            yield number, role, text, current


def unresolved_references() -> list[str]:
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        for number, role, text in _python_references(path):
            target = _target(text)
            if target and not resolves(target, module):
                missing.append(f"{path.relative_to(ROOT)}:{number}: :{role}:`{text}`")
    for path in sorted((ROOT / "docs").rglob("*.rst")):
        if "_build" in path.parts or "generated" in path.parts or "auto_examples" in path.parts:
            continue
        for number, role, text, current in _rst_references(path):
            target = _target(text)
            if target and not resolves(target, current):
                missing.append(f"{path.relative_to(ROOT)}:{number}: :{role}:`{text}`")
    return missing


def test_the_resolver_finds_what_exists_and_only_that():
    assert resolves("scalenc.io.inputs.check_xy", None)
    assert resolves("check_xy", "scalenc.io.inputs")
    assert resolves("EdgeList.weights", "scalenc.io.edges")
    assert resolves(".load", "scalenc.io")
    assert resolves("sklearn.pipeline.Pipeline", None)
    assert not resolves("scalenc.io.inputs.no_such_function", None)
    assert not resolves("no_such_function", "scalenc.io.inputs")
    assert not resolves("scalenc.no_such_module", None)
    assert _target("~scalenc.load") == "scalenc.load" and _target("!plain") is None
    assert _target("the loader <scalenc.load>") == "scalenc.load"


def test_every_cross_reference_resolves():
    missing = unresolved_references()
    if missing:
        pytest.fail(
            f"{len(missing)} cross-references name nothing (renamed or moved?):\n"
            + "\n".join(missing)
        )
