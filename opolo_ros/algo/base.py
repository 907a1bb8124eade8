"""What every learner shares: Adam (fused or foreach kernels), and checkpointable state."""

from __future__ import annotations

from typing import Any

import torch


def make_adam(params: Any, lr: float, fused: bool = True) -> torch.optim.Adam:
    """Adam; `fused` runs each step as one vectorised kernel per parameter (on CPU about 3x faster
    than `foreach` for the [400, 300] critic), falling back to `foreach` where fused is unsupported."""
    params = list(params)
    if fused:
        try:
            return torch.optim.Adam(params, lr=lr, fused=True)
        except (RuntimeError, ValueError, TypeError):
            pass
    return torch.optim.Adam(params, lr=lr, foreach=True)


class Checkpointable:
    """state_dict/load_state_dict over `modules()`, `optimizers()` and integer `counters`."""

    counter_names: tuple[str, ...] = ()

    def modules(self) -> dict[str, torch.nn.Module]:
        raise NotImplementedError

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        parts = {**self.modules(), **self.optimizers()}
        state: dict[str, Any] = {k: m.state_dict() for k, m in parts.items()}
        state["counters"] = {n: getattr(self, n) for n in self.counter_names}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k, m in {**self.modules(), **self.optimizers()}.items():
            m.load_state_dict(state[k])
        for n, v in state["counters"].items():
            setattr(self, n, v)
