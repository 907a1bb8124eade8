"""Transition batches as the learner consumes them, whatever carried them (no ROS import).

A batch is N rows ``[obs | action | next_obs | reward | terminated | truncated]`` (float32) from
one source, numbered ``seq`` per source. A *void* row is a step that happened but has no
transition (the simulation diverged: its s' is meaningless): ``terminated = VOID`` (-1.0) and
``truncated = 1.0``. Consumers count it, so every step count stays the environment's, and never
store it. The ROS encoding is :func:`opolo_ros.ros.messages.replay_to_msg`; the learner's replay
journal (:mod:`opolo_ros.data.journal`) stores the same rows.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

VOID = -1.0  # the `terminated` value of a void row


def replay_fields(obs_dim: int, act_dim: int) -> int:
    """Floats per transition row: obs, action, next_obs, reward, terminated, truncated."""
    return 2 * obs_dim + act_dim + 3


@dataclass(frozen=True, eq=False)
class ReplayBatch:
    """N transitions from one source; `seq` numbers the source's batches (for acknowledgement)."""

    obs: np.ndarray  # float32 [N, obs_dim]
    action: np.ndarray  # float32 [N, act_dim]
    next_obs: np.ndarray  # float32 [N, obs_dim]
    reward: np.ndarray  # float32 [N]
    terminated: np.ndarray  # bool [N]
    truncated: np.ndarray  # bool [N]
    seq: int
    source: int
    void: np.ndarray  # bool [N]: a step without a transition (see the module docstring)

    def __len__(self) -> int:
        return self.obs.shape[0]

    def fingerprint(self) -> int:
        """CRC-32 of the batch's rows: tells a re-sent batch from another one with the same ``seq``."""
        return zlib.crc32(self.rows().tobytes())

    def rows(self) -> np.ndarray:
        """The batch as float32 rows ``[obs | action | next_obs | reward | terminated | truncated]``."""
        terminated = np.where(self.void, VOID, self.terminated.astype(np.float32))
        return np.concatenate([self.obs, self.action, self.next_obs, self.reward[:, None],
                               terminated[:, None], self.truncated[:, None]], axis=1,
                              dtype=np.float32)

    @classmethod
    def from_rows(cls, rows: np.ndarray, obs_dim: int, *, seq: int, source: int) -> ReplayBatch:
        """The inverse of :meth:`rows` (rows already validated, e.g. by
        :func:`opolo_ros.ros.messages.msg_to_replay`)."""
        rows = np.asarray(rows, dtype=np.float32)
        o, a = obs_dim, (rows.shape[-1] if rows.ndim else 0) - 2 * obs_dim - 3
        if rows.ndim != 2 or o < 1 or a < 1:
            raise ValueError(f"replay rows of shape {rows.shape} do not fit obs_dim {obs_dim}")
        return cls(obs=rows[:, :o].copy(), action=rows[:, o:o + a].copy(),
                   next_obs=rows[:, o + a:2 * o + a].copy(), reward=rows[:, -3].copy(),
                   terminated=rows[:, -2] == 1.0, truncated=rows[:, -1] == 1.0, seq=seq, source=source,
                   void=rows[:, -2] == VOID)


class SourceAck(NamedTuple):
    seq: int  # newest replay batch seq consumed from the source
    transitions: int  # transitions consumed from the source in total
