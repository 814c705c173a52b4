"""Torch datasets, samplers and loaders over the decoded splits, on the CPU or resident on the
device.
"""
