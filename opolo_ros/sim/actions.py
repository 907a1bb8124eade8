"""Action scaling between the policy's [-1, 1] units and the environment's or robot's bounds.

NumPy only, so the actor node on a robot uses it without importing gymnasium or MuJoCo.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class ActionScaler:
    """Map policy actions in [-1, 1] to the environment's bounds and back."""

    def __init__(self, low: np.ndarray, high: np.ndarray) -> None:
        self.low = np.asarray(low, dtype=np.float32)
        self.high = np.asarray(high, dtype=np.float32)
        if not (np.all(np.isfinite(self.low)) and np.all(np.isfinite(self.high))):
            raise ValueError("action bounds must be finite")

    @classmethod
    def from_space(cls, space: Any) -> ActionScaler:
        """From a gymnasium Box (anything with `low` and `high`)."""
        return cls(space.low, space.high)

    def to_env(self, a: np.ndarray) -> np.ndarray:
        return self.low + (np.clip(a, -1.0, 1.0) + 1.0) * 0.5 * (self.high - self.low)

    def to_unit(self, a: np.ndarray) -> np.ndarray:
        return 2.0 * (np.asarray(a, dtype=np.float32) - self.low) / (self.high - self.low) - 1.0
