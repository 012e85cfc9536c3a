"""The documentation: docstring Examples that run, and the Sphinx site built without warnings.

The doctests of the public modules run in the default test run, so an Examples section
cannot rot, and every public function, class, method and property of the modules in
``EXAMPLES_MODULES`` must have one. Building the site (API reference, user guide and the
gallery, whose examples run during the build) is marked ``docs``:
``python -m pytest -m docs``.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
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

ROOT = Path(__file__).resolve().parents[2]

#: Modules whose docstrings carry Examples that must run.
DOCTEST_MODULES = [
    "scalenc",
    "scalenc.io.inputs",
    "scalenc.io.outputs",
    "scalenc.engine.cluster",
    "scalenc.engine.connect",
    "scalenc.persist.files",
    "scalenc.simulate",
    "scalenc.encoder.estimator",
    "scalenc.encoder.incremental",
    "scalenc.encoder.outputs",
    "scalenc.encoder.blocks",
    "scalenc.encoder.graph_fit",
    "scalenc.io.edges",
    "scalenc.cli.graph",
    "scalenc.nrbfn.estimator",
    "scalenc.nrbfn.incremental",
    "scalenc.nrbfn.lrc",
    "scalenc.nrbfn.regression",
    "scalenc.ccdr.transformer",
    "scalenc.ccdr.classifier",
    "scalenc.exceptions",
    "scalenc.encoder.kernels",
    "scalenc.encoder.ranks",
    "scalenc.report.describe",
    "scalenc.report.evaluation",
    "scalenc.report.plots",
    "scalenc.report.page",
    "scalenc.base.estimator",  # the classifiers' shared score
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


#: Modules every public function, class, method and property of which has an Examples
#: section with a runnable example (issue 14).
EXAMPLES_MODULES = [
    "scalenc.encoder.estimator",
    "scalenc.nrbfn.estimator",
    "scalenc.nrbfn.lrc",
    "scalenc.nrbfn.regression",
    "scalenc.ccdr.transformer",
    "scalenc.ccdr.classifier",
    "scalenc.encoder.kernels",
    "scalenc.encoder.ranks",
    "scalenc.report.describe",
    "scalenc.report.evaluation",
    "scalenc.report.plots",
    "scalenc.report.page",
    "scalenc.io.inputs",
    "scalenc.io.outputs",
    "scalenc.persist.files",
    "scalenc.engine.cluster",
    "scalenc.engine.connect",
    "scalenc.simulate",
    "scalenc.exceptions",
]


_EXAMPLES = re.compile(r"^\s*Examples\n\s*--------\n", re.MULTILINE)


def has_examples(doc: str | None) -> bool:
    """Whether a docstring has a numpydoc Examples section with at least one ``>>>``."""
    match = _EXAMPLES.search(doc or "")
    return match is not None and ">>>" in doc[match.end() :]


def _is_public_member(value) -> bool:
    """Functions, static/class methods and properties: what doctest collects from a class.

    ``functools.cached_property`` is left out (doctest does not run its docstring; the
    class's own example shows it), as are scikit-learn's generated ``set_*_request``.
    """
    return inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod, property))


def public_docstrings(module) -> dict[str, str | None]:
    """{qualified name: docstring} of every public callable defined in ``module``.

    Public: the functions and classes of ``__all__`` and every other name without a
    leading underscore defined in the module (not imported into it), and the public
    methods and properties of those classes, including those inherited from scalenc's
    own base classes: named after the class that defines them, or after the first public
    class that has them when that one is private. An overriding method without a
    docstring of its own inherits its parent's (``inspect.getdoc``).
    Subclasses of :class:`~scalenc.exceptions.ScalencError` and ``ScalencWarning`` are
    covered by the examples of those two bases and of :mod:`scalenc.exceptions`.
    """
    from scalenc.exceptions import ScalencError, ScalencWarning

    names = set(getattr(module, "__all__", ())) | {
        name for name in vars(module) if not name.startswith("_")
    }
    package = module.__name__.split(".")[0]
    out: dict[str, str | None] = {}
    for name in sorted(names):
        obj = getattr(module, name)
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue  # constants and imported modules
        if obj.__module__ != module.__name__:
            continue  # imported from elsewhere: checked in its own module
        qualname = f"{module.__name__}.{name}"
        if inspect.isclass(obj) and issubclass(obj, (ScalencError, ScalencWarning)):
            if obj not in (ScalencError, ScalencWarning):
                continue
        out[qualname] = inspect.getdoc(obj)
        if not inspect.isclass(obj):
            continue
        for owner in obj.__mro__:
            if owner.__module__.split(".")[0] != package:
                continue  # scikit-learn's mixins, object
            where = qualname
            if not owner.__qualname__.startswith("_"):
                where = f"{owner.__module__}.{owner.__qualname__}"
            for attr, value in vars(owner).items():
                if attr.startswith("_") or not _is_public_member(value):
                    continue
                if owner is next(k for k in obj.__mro__ if attr in vars(k)):  # not overridden
                    out.setdefault(f"{where}.{attr}", inspect.getdoc(getattr(obj, attr)))
    return out


def _all_public_docstrings() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in EXAMPLES_MODULES:
        out.update(public_docstrings(importlib.import_module(name)))
    return out


_PUBLIC_DOCSTRINGS = _all_public_docstrings()


@pytest.mark.parametrize("name", sorted(_PUBLIC_DOCSTRINGS))
def test_every_public_callable_has_examples(name):
    assert has_examples(_PUBLIC_DOCSTRINGS[name]), (
        f"{name} has no Examples section with a >>> example; add a short runnable one"
    )


def test_missing_examples_are_found():
    """The collection above finds a public method without Examples (the test can fail)."""
    module = type(sys)("fake_module")

    class Model:
        """A model.

        Examples
        --------
        >>> Model().fit()
        """

        def fit(self):
            """Fit."""

        def _private(self):
            """Not public."""

    def helper():
        """Help."""

    Model.__module__ = helper.__module__ = module.__name__
    Model.__qualname__ = "Model"
    module.Model, module.helper, module.__all__ = Model, helper, ["Model", "helper"]
    docs = public_docstrings(module)
    assert set(docs) == {"fake_module.Model", "fake_module.Model.fit", "fake_module.helper"}
    missing = sorted(name for name, doc in docs.items() if not has_examples(doc))
    assert missing == ["fake_module.Model.fit", "fake_module.helper"]


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
