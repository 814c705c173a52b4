"""Shared base class for every config section."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A strict config section: unknown keys and wrong types are errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def _derive(self, name: str, value: Any) -> None:
        """Set an auto-derived value without re-running validators (avoids recursion)."""
        object.__setattr__(self, name, value)
