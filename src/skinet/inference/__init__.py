"""Running a trained model on images: the predictor, post-processing, TTA, ensembles, prediction to
files and export.
"""
