"""Sphinx configuration of the scalenc documentation.

Build it from the repository root (needs ``pip install -e ".[docs]"``)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

The gallery (``examples/gallery/plot_*.py``) is run during the build and its pages are
written to ``docs/auto_examples``; the API pages to ``docs/api/generated``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
# The gallery reads the papers' datasets from here when they are present.
os.environ.setdefault("SCALENC_DATA_DIR", str(ROOT.parent / "shared" / "data"))

import scalenc  # noqa: E402

project = "scalenc"
author = "the scalenc developers"
copyright = "the scalenc developers"
version = release = scalenc.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.intersphinx",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py"]
root_doc = "index"
html_theme = "alabaster"
html_theme_options = {
    "description": "Spectral and kernel classifiers out of core",
    "fixed_sidebar": True,
}
html_static_path: list[str] = []

# API reference: one generated page per public object, numpydoc sections.
autosummary_generate = True
autodoc_default_options = {"members": False}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True

# No network at build time: cross-references to other projects stay plain text.
intersphinx_mapping: dict = {}

sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples" / "gallery"),
    "gallery_dirs": str(HERE / "auto_examples"),
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "plot_gallery": "True",
    "reset_modules": ("matplotlib",),
    "matplotlib_animations": False,
    "abort_on_example_error": True,
    "show_memory": False,
    "doc_module": ("scalenc",),
    "backreferences_dir": str(HERE / "auto_examples" / "backreferences"),
}
