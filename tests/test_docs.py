"""The documentation: docstring Examples that run, and the Sphinx site built without warnings.

The doctests of the public modules run in the default test run, so an Examples section
cannot rot. Building the site (API reference, user guide and the gallery, whose examples
run during the build) is marked ``docs``: ``python -m pytest -m docs``.
"""

from __future__ import annotations

import doctest
import importlib
import io
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import scalenc

ROOT = Path(__file__).resolve().parents[1]

#: Modules whose docstrings carry Examples that must run.
DOCTEST_MODULES = [
    "scalenc",
    "scalenc.data",
    "scalenc.cluster",
    "scalenc.persist",
    "scalenc.simulate",
    "scalenc.encoder",
    "scalenc.nrbfn",
    "scalenc.ccdr",
    "scalenc.exceptions",
]

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def run_doctests(module) -> tuple[int, int, str]:
    """(failed, attempted, report) of every docstring example of ``module``."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report = io.StringIO()
    for test in finder.find(module, module.__name__):
        runner.run(test, out=report.write)
    result = runner.summarize(verbose=False)
    return result.failed, result.attempted, report.getvalue()


@pytest.mark.parametrize("name", DOCTEST_MODULES)
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files use temporary folders anyway
    monkeypatch.delenv("SCALENC_SCHEDULER", raising=False)
    monkeypatch.delenv("SCALENC_SCHEDULER_FILE", raising=False)
    module = importlib.import_module(name)
    failed, attempted, report = run_doctests(module)
    assert attempted > 0, f"{name} has no docstring examples"
    assert failed == 0, f"{failed} of {attempted} examples of {name} failed:\n{report}"


def test_failing_example_is_reported():
    """The runner above does fail on a wrong example (the test can fail)."""
    module = type(sys)("fake_module")
    module.__doc__ = ">>> 1 + 1\n3\n"
    failed, attempted, report = run_doctests(module)
    assert (failed, attempted) == (1, 1)
    assert "Expected:\n    3\nGot:\n    2" in report


@pytest.mark.parametrize("name", sorted(set(scalenc.__all__) - {"__version__"}))
def test_public_api_has_examples(name):
    doc = getattr(scalenc, name).__doc__ or ""
    assert re.search(r"^\s*Examples\n\s*--------\n", doc, re.MULTILINE), (
        f"scalenc.{name} has no Examples section"
    )
    assert ">>>" in doc.split("Examples", 1)[1]


def test_api_reference_lists_the_public_api():
    """Every name of ``scalenc.__all__`` appears in docs/api.rst."""
    api = (ROOT / "docs" / "api.rst").read_text(encoding="utf-8")
    listed = set(re.findall(r"^   (\w+)$", api, re.MULTILINE))
    missing = set(scalenc.__all__) - {"__version__"} - listed
    assert not missing, f"docs/api.rst does not list {sorted(missing)}"


def _data_dir() -> str:
    return os.environ.get("SCALENC_DATA_DIR", str(ROOT.parent / "shared" / "data"))


@pytest.mark.docs
@pytest.mark.timeout(600)
def test_sphinx_build_without_warnings(tmp_path):
    """``sphinx-build -W --keep-going -b html`` of docs/, gallery included, in a copy of
    the sources, so that the generated pages never land in the work tree."""
    src = tmp_path / "src"
    shutil.copytree(
        ROOT / "docs",
        src / "docs",
        ignore=shutil.ignore_patterns("_build", "auto_examples", "generated"),
    )
    shutil.copytree(
        ROOT / "examples",
        src / "examples",
        ignore=shutil.ignore_patterns("scalenc-example", "*.zarr", "__pycache__"),
    )
    out = tmp_path / "html"
    env = dict(os.environ, SCALENC_DATA_DIR=_data_dir(), MPLBACKEND="Agg")
    env.pop("SCALENC_SCHEDULER", None)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-b",
            "html",
            "-q",
            str(src / "docs"),
            str(out),
        ],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    seconds = time.perf_counter() - t0
    assert proc.returncode == 0, (
        f"sphinx-build failed ({proc.returncode}) after {seconds:.0f} s:\n"
        f"{proc.stderr[-20000:]}\n{proc.stdout[-5000:]}"
    )
    assert not proc.stderr.strip(), proc.stderr  # -q: anything on stderr is a warning
    gallery = sorted((ROOT / "examples" / "gallery").glob("plot_*.py"))
    assert len(gallery) >= 3
    for example in gallery:
        page = out / "auto_examples" / f"{example.stem}.html"
        assert page.exists(), f"no gallery page for {example.name}"
        assert "sphx-glr-single-img" in page.read_text(encoding="utf-8") or (
            "sphx-glr-multi-img" in page.read_text(encoding="utf-8")
        ), f"{example.name} produced no figure"
    for name in sorted(set(scalenc.__all__) - {"__version__"}):
        assert (out / "api" / "generated" / f"scalenc.{name}.html").exists(), name
    for page in (
        "index",
        "install",
        "data",
        "cli",
        "api",
        "guide/encoder",
        "guide/nrbfn",
        "guide/ccdr",
    ):
        assert (out / f"{page}.html").exists(), page
    print(f"sphinx-build: {seconds:.1f} s")
