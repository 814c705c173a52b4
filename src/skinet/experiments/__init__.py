"""Experiments over many runs: the Optuna grid sweep, multi-seed runs, cross-validation and the
block ablation.
"""
