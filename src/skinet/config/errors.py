"""The two errors a user's input raises; ``skinet`` reports either in one line and exits 2."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config file could not be read or did not validate; the message names the YAML path."""


class UsageError(ValueError):
    """Options that are missing, conflicting or out of range; ``skinet`` exits with status 2."""
