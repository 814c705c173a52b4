"""SkiNet: binary skin-lesion segmentation in dermoscopy images."""

__version__ = "0.1.0"
