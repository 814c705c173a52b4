"""Training augmentations: albumentations and SkiNet's own transforms on the CPU, their tensor
versions on the device, and the checks of a TRANSFORM_CONFIG against both. Training extra.
"""
