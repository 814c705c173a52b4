"""One way to derive a seed from several numbers: NumPy's ``SeedSequence``.

Every random stream SkiNet derives (a DataLoader worker's augmentations, an epoch's shuffle,
the device pipeline's generator) mixes its parts here, so streams that differ in any part are
independent and the same parts always give the same seed.
"""

from __future__ import annotations

import numpy as np


def derive_seed(*parts: int) -> int:
    """A 32-bit seed from ``parts`` (any ints; negative and large ones are taken mod 2**63)."""
    entropy = [int(part) % 2**63 for part in parts]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])
