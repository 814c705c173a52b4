"""Scoring a model on labelled images: evaluate, robustness under shifts, galleries, threshold
tuning, calibration and every figure SkiNet draws.
"""
