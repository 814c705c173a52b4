"""MLflow tracking: store URIs, run naming, failed runs and local server helpers."""
