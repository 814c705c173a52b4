"""The values evaluation's options take, in a module that imports nothing heavy.

``skinet evaluate``, ``compare`` and ``robustness`` offer them as ``--split`` and
``--gallery-order`` choices while the parser is built, so ``skinet --help`` reads them without
importing numpy, OpenCV, matplotlib or torch; :mod:`skinet.evaluation.evaluate` and
:mod:`skinet.evaluation.gallery` check against the same tuples.
"""

from __future__ import annotations

from skinet.datasets.layouts import SPLITS

SPLIT_CHOICES = (*reversed(SPLITS), "all")
"""Splits of a dataset folder that can be scored (``all``: every image)."""

GALLERY_ORDERS = ("jaccard", "area_ratio")
"""``jaccard``: lowest first; ``area_ratio``: predicted area farthest from the true area first."""
