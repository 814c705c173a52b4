"""Datasets on disk: layouts, locating a data root, splits, verification, download, synthetic data,
statistics and the persistent cache of decoded splits. No torch.
"""
