"""The layout of a ``skinet cv`` folder: what cross-validation writes and ensembles read."""

from __future__ import annotations

CV_RESULTS_DIR = "results"
"""Where ``skinet cv`` writes each fold's ``fold_<i>.json`` (with its best checkpoint)."""
CV_SUMMARY_FILE = "cv_results.json"
"""What a finished ``skinet cv`` writes last in its folder (with the ensemble's threshold)."""
CV_TABLE_FILE = "cv_results.csv"
"""The per-fold metrics table beside :data:`CV_SUMMARY_FILE`."""
