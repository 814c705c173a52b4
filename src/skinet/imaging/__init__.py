"""Reading one image into the canonical form and preparing it for the model: decode, crop, colour
constancy, resize, normalise. Core install.
"""
