"""README.md's code blocks run as written, in order, in a fresh folder.

Python blocks run in one namespace (``__name__ == "__main__"``, as a script's), shell blocks
in bash with the variables of the blocks before them; the folder is the working
directory of both, and the virtual environment's ``bin`` is first on ``PATH`` (what
README's ``export PATH=...`` line gives from the repository root). A block is skipped only
where the line before its fence says ``<!-- not run by tests: REASON -->``: the set-up
itself (CI runs it) and what needs hardware CI has no access to.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

FENCE = re.compile(
    r"(?P<before>[^\n]*)\n(?P<indent>[ \t]*)```(?P<lang>python|bash)\n(?P<body>.*?)\n(?P=indent)```",
    re.S,
)
SKIP = re.compile(r"<!-- not run by tests: (?P<reason>[^>]+) -->")


def readme_blocks(text: str) -> list[tuple[str, str, str | None]]:
    """README's fenced python/bash blocks in order: (language, code, reason to skip)."""
    blocks = []
    for match in FENCE.finditer("\n" + text):
        indent = match["indent"]
        body = "\n".join(line.removeprefix(indent) for line in match["body"].split("\n"))
        skip = SKIP.search(match["before"])
        blocks.append((match["lang"], body, skip["reason"] if skip else None))
    return blocks


def test_the_block_finder_reads_indented_blocks_and_skip_reasons():
    text = (
        "x\n```python\na = 1\n```\n<!-- not run by tests: needs a GPU -->\n```bash\necho\n```\n"
        "* item\n\n  ```bash\n  echo indented\n    more\n  ```\n"
    )
    assert readme_blocks(text) == [
        ("python", "a = 1", None),
        ("bash", "echo", "needs a GPU"),
        ("bash", "echo indented\n  more", None),
    ]


def test_few_blocks_are_skipped_and_each_says_why():
    blocks = readme_blocks(README.read_text())
    skipped = [reason for _, _, reason in blocks if reason]
    assert len(blocks) >= 7 and len(skipped) <= 2, skipped
    assert all(len(reason) > 10 for reason in skipped)


def _run_shell(code: str, cwd: Path, env: dict, state: Path) -> None:
    """One bash block, with the variables the blocks before it set (``state``)."""
    script = f"set -a\n[ -f {state} ] && . {state}\nset -e\n{code}\nexport -p > {state}\n"
    proc = subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, f"block failed ({proc.returncode}):\n{code}\n{proc.stderr[-3000:]}"


@pytest.mark.slow  # every README block, the batch and checkpoint examples included (2-4 min)
@pytest.mark.timeout(1800)
def test_readme_blocks_run_as_written(tmp_path, monkeypatch):
    """Every block, in README's order, as a newcomer runs them from the repository root."""
    work = tmp_path / "repo"
    shutil.copytree(REPO / "examples", work / "examples")  # README names examples/ files
    monkeypatch.chdir(work)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    monkeypatch.setenv("PATH", env["PATH"])
    state = tmp_path / "shell-state.sh"
    namespace = {"__name__": "__main__"}
    ran = 0
    for lang, code, skip in readme_blocks(README.read_text()):
        if skip:
            continue
        if lang == "python":
            exec(compile(code, "README.md", "exec"), namespace)
        else:
            _run_shell(code, work, env, state)
        ran += 1
    assert ran >= 5
    assert (work / "pred.zarr").is_dir()  # the Use block's predictions
    assert (work / "scalenc-batch" / "predictions.parquet").exists()
    assert (work / "scalenc-batch" / "lrc-day2" / "model.json").exists()
