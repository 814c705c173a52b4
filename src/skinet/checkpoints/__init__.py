"""The checkpoint: its one format, loading state dicts, reading a checkpoint for inference, and the
model card that travels with it.
"""
