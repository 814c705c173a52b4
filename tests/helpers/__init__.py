"""What several test packages share: data trees on disk, a tiny config, the CLI harness,
checkpoint rewriting and the sweep fakes. Imported as ``tests.helpers.<module>``."""
