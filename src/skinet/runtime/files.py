"""Identifying a file by its bytes: checkpoints in lineage and prediction records, split files in
model cards, downloaded archives."""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK_BYTES = 1 << 20
"""Read 1 MiB at a time: a multi-GB archive is hashed without being held in memory."""


def file_sha256(path: str | Path) -> str:
    """The SHA-256 (hex) of a file's bytes."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while block := handle.read(BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()
