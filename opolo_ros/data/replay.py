"""FIFO replay buffer in preallocated torch tensors, checkpointable.

Storing torch tensors (not numpy arrays) makes a minibatch one `index_select` per field with no
conversion on the update path. Sampling uses the buffer's own torch.Generator, so a resumed run
draws the same minibatches as an uninterrupted one.
"""

from __future__ import annotations

import numpy as np
import torch

from opolo_ros.algo.batch import Transitions


class ReplayBuffer:
    def __init__(self, obs_dim: int, act_dim: int, capacity: int, seed: int = 0) -> None:
        if capacity <= 0:
            raise ValueError(f"replay capacity must be positive, got {capacity}")
        self.obs_dim, self.act_dim, self.capacity = obs_dim, act_dim, capacity
        self.obs = torch.zeros(capacity, obs_dim)
        self.next_obs = torch.zeros(capacity, obs_dim)
        self.action = torch.zeros(capacity, act_dim)
        self.reward = torch.zeros(capacity)
        self.terminated = torch.zeros(capacity)
        self.truncated = torch.zeros(capacity)
        self.pos = 0
        self.size = 0
        self.total_added = 0
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.size

    def add(self, obs: np.ndarray, action: np.ndarray, next_obs: np.ndarray, reward: float | np.ndarray,
            terminated: bool | np.ndarray, truncated: bool | np.ndarray) -> None:
        """Add one transition, or a batch when `obs` is 2-D (rows in order)."""
        obs = np.asarray(obs, dtype=np.float32).reshape(-1, self.obs_dim)
        n = obs.shape[0]
        fields = (
            (self.obs, obs),
            (self.action, np.asarray(action, dtype=np.float32).reshape(n, self.act_dim)),
            (self.next_obs, np.asarray(next_obs, dtype=np.float32).reshape(n, self.obs_dim)),
            (self.reward, np.asarray(reward, dtype=np.float32).reshape(n)),
            (self.terminated, np.asarray(terminated, dtype=np.float32).reshape(n)),
            (self.truncated, np.asarray(truncated, dtype=np.float32).reshape(n)),
        )
        idx = (self.pos + np.arange(n)) % self.capacity
        t_idx = torch.from_numpy(idx)
        for dst, src in fields:
            dst.index_copy_(0, t_idx, torch.from_numpy(np.ascontiguousarray(src)))
        self.pos = int((self.pos + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        self.total_added += n

    def sample(self, batch_size: int) -> Transitions:
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        idx = torch.randint(self.size, (batch_size,), generator=self.generator)
        return Transitions(self.obs[idx], self.action[idx], self.next_obs[idx], self.terminated[idx],
                           self.truncated[idx], self.reward[idx])

    def state_dict(self, rows: bool = True) -> dict:
        """The buffer's state; without `rows`, only its position, counts and sampling generator
        (the rows then come from elsewhere: see :meth:`StreamTrainer.save`'s light checkpoint)."""
        n = self.size
        state = {"pos": self.pos, "size": self.size, "total_added": self.total_added,
                 "generator": self.generator.get_state(), "capacity": self.capacity}
        if rows:
            state.update({name: getattr(self, name)[:n].clone() for name in self.FIELDS})
        return state

    FIELDS = ("obs", "action", "next_obs", "reward", "terminated", "truncated")

    def load_state_dict(self, state: dict) -> None:
        """Restore a buffer; one of another capacity (a run extended with more steps) is refilled
        oldest-first, keeping the newest transitions that fit."""
        self.generator.set_state(state["generator"])
        self.total_added = state["total_added"]
        n = state["size"]
        if state["capacity"] == self.capacity:
            for name in self.FIELDS:
                getattr(self, name)[:n] = state[name]
            self.pos, self.size = state["pos"], n
            return
        order = torch.arange(n) if n < state["capacity"] else (torch.arange(n) + state["pos"]) % n
        keep = order[-self.capacity:]
        for name in self.FIELDS:
            getattr(self, name)[: len(keep)] = state[name][keep]
        self.size = len(keep)
        self.pos = self.size % self.capacity
