"""The skinet command line: the entry point, argument types, and one module per command group."""
