"""Sphinx configuration of the SkiNet documentation.

Build: ``make docs`` (``sphinx-build -W --keep-going -b html docs docs/_build/html``). No network is
needed: there is no intersphinx, so references to torch, Lightning or pydantic objects stay plain
text (``nitpicky`` is off); every ``{py:class}``/``{py:func}`` reference written in the pages points
at an object documented in ``api.md``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent / "src"))  # works without ``pip install -e .`` too

# Importing skinet pulls in Lightning, MLflow and Optuna: keep their import-time chatter quiet.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

import skinet  # noqa: E402
import skinet.experiments  # noqa: E402, F401

# Import the documented modules (and so MLflow, Lightning, Optuna) before autodoc starts: MLflow
# imports FastAPI, whose pydantic models fail to build once autodoc has inspected pydantic's
# ``BaseModel`` (an external interaction, not a SkiNet problem).
import skinet.inference  # noqa: E402, F401
import skinet.training.run  # noqa: E402, F401

project = "SkiNet"
author = "SkiNet developers"
copyright = "SkiNet developers"  # noqa: A001
release = skinet.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**/README.md"]

# -- MyST ------------------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # `page.md#section-title` links and `(#section-title)` anchors

# -- autodoc / napoleon ----------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # signatures of torch/pydantic types would need intersphinx to link
autodoc_inherit_docstrings = False  # don't pull torch.nn.Module / LightningModule docstrings in
autodoc_default_options = {
    "members": True,
    "exclude-members": "model_config, model_fields, model_computed_fields, model_post_init",
}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_attr_annotations = True
napoleon_use_ivar = True  # "Attributes:" as a field list: no duplicate of the autodoc members

python_use_unqualified_type_names = True
add_module_names = False

# -- HTML ------------------------------------------------------------------------------------------
html_theme = "alabaster"
html_title = f"SkiNet {release}"
html_theme_options = {
    "description": "Binary skin-lesion segmentation with PyTorch Lightning",
    "fixed_sidebar": True,
    "page_width": "1180px",
    "sidebar_width": "240px",
}
html_static_path: list[str] = []
