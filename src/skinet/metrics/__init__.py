"""Losses, the threshold sweep, per-image mask metrics and surface distances: functions of tensors
and arrays.
"""
