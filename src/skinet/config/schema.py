"""A fingerprint of what the config schema accepts, so a checkpoint format can pin it.

Every section forbids unknown keys, so a config written by a newer SkiNet (a new field, a new
choice, a field that now takes ``null``) is refused by an older one. The checkpoint format
(:mod:`skinet.checkpoints.format`) therefore records the fingerprint of the schema each format
version writes, and a test fails when the schema changes without a new format version.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel

from skinet.config.experiment import ExperimentConfig

_WORDING = frozenset({"description", "title", "default", "examples"})
"""JSON-schema keys that do not change what a reader accepts (prose, and defaults: a written
config spells out every field)."""


def _accepted(node: Any, defs: dict[str, Any]) -> Any:
    """``node`` without wording, its ``$ref``s inlined (so renaming a class changes nothing)."""
    if isinstance(node, dict):
        if "$ref" in node:
            return _accepted(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        return {key: _accepted(value, defs) for key, value in node.items() if key not in _WORDING}
    if isinstance(node, list):
        return [_accepted(value, defs) for value in node]
    return node


def config_schema_fingerprint(model: type[BaseModel] = ExperimentConfig) -> str:
    """The first 16 hex digits of the SHA-256 of what ``model`` (the whole config) accepts.

    It covers section and field names, types, choices and bounds; it ignores docstrings, titles
    and defaults. Validators that compare fields are not covered.
    """
    schema = model.model_json_schema()
    accepted = _accepted(schema, schema.pop("$defs", {}))
    text = json.dumps(accepted, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
