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
        # centre and half range from float64: high - low overflows float32 for bounds near its max
        low64, high64 = self.low.astype(np.float64), self.high.astype(np.float64)
        self._mid = (0.5 * (low64 + high64)).astype(np.float32)
        self._half = (0.5 * (high64 - low64)).astype(np.float32)

    @classmethod
    def from_space(cls, space: Any) -> ActionScaler:
        """From a gymnasium Box (anything with `low` and `high`)."""
        return cls(space.low, space.high)

    def to_env(self, a: np.ndarray) -> np.ndarray:
        """low + (a + 1) / 2 * (high - low) as a blend, as the exported graph computes it: exactly
        low and high at -1 and 1, and no overflow for bounds near float32's largest value."""
        a = np.clip(a, -1.0, 1.0)
        return (0.5 * (1.0 - a)) * self.low + (0.5 * (1.0 + a)) * self.high

    def to_unit(self, a: np.ndarray) -> np.ndarray:
        return (np.asarray(a, dtype=np.float32) - self._mid) / self._half
