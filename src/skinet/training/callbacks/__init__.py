"""Lightning callbacks and the loggers/callbacks factory used by every training run."""
