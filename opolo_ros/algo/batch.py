"""Typed minibatches exchanged between data sources and learners."""

from __future__ import annotations

from typing import NamedTuple

import torch


class Transitions(NamedTuple):
    """Replay minibatch: actions in [-1, 1]; terminated/truncated as float 0/1, shape [B]."""

    obs: torch.Tensor
    action: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    reward: torch.Tensor  # environment reward: used by TD3 only, never by OPOLO


class StatePairs(NamedTuple):
    """State-only expert minibatch (s, s')."""

    obs: torch.Tensor
    next_obs: torch.Tensor
