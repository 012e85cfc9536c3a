"""The layers of ARCHITECTURE.md, enforced rather than described.

import-linter's contracts in ``pyproject.toml`` (``[tool.importlinter]``) are kept by the
code, and a violation fails them: an upward import, an import between two methods, or an
import cycle, each hidden inside a function (grimp reads every import statement of a
module, at any depth).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the package under ``root`` with ``root``'s configuration."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_code_keeps_its_layers():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken." in result.stdout


VIOLATIONS = {
    # block math reaching up into the engine
    "upward": (
        "math/labels.py",
        "scalenc.math is not allowed to import scalenc.engine",
        "scalenc.math.labels -> scalenc.engine.cluster",
    ),
    # one method importing another
    "between methods": (
        "nrbfn/plan.py",
        "scalenc.nrbfn is not allowed to import scalenc.ccdr",
        "scalenc.nrbfn.plan -> scalenc.ccdr.blocks",
    ),
    # a cycle inside one layer (engine.cluster imports engine.resend at the top)
    "cycle": (
        "engine/resend.py",
        "No cycles are allowed in scalenc.engine",
        "",
    ),
}
IMPORTED = {
    "upward": "from scalenc.engine import cluster",
    "between methods": "from scalenc.ccdr import blocks",
    "cycle": "from scalenc.engine import cluster",
}


@pytest.mark.parametrize("kind", sorted(VIOLATIONS))
def test_an_import_hidden_in_a_function_breaks_a_contract(kind, tmp_path):
    module, heading, chain = VIOLATIONS[kind]
    shutil.copytree(ROOT / "scalenc", tmp_path / "scalenc")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    path = tmp_path / "scalenc" / module
    path.write_text(
        path.read_text() + f"\n\ndef _violation():\n    {IMPORTED[kind]}  # noqa: F401\n"
    )
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert heading in result.stdout
    assert chain in result.stdout
