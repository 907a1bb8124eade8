"""Replay buffer: FIFO order, batched adds, checkpoint into the same or another capacity."""

import numpy as np
import torch

from opolo_ros.data.replay import ReplayBuffer


def fill(buf, start, n):
    for k in range(start, start + n):
        buf.add(np.full(2, k), np.full(1, -k), np.full(2, k + 1), k, k % 2, 0)


def test_fifo_wraps_and_batched_add_equals_single_adds():
    a, b = ReplayBuffer(2, 1, 5), ReplayBuffer(2, 1, 5)
    fill(a, 0, 7)
    ks = np.arange(7)
    b.add(np.repeat(ks[:, None], 2, 1), -ks[:, None], np.repeat(ks[:, None] + 1, 2, 1), ks, ks % 2, 0 * ks)
    for buf in (a, b):
        assert len(buf) == 5 and buf.pos == 2 and buf.total_added == 7
        assert sorted(buf.obs[:, 0].tolist()) == [2, 3, 4, 5, 6]
    assert torch.equal(a.obs, b.obs) and torch.equal(a.terminated, b.terminated)


def test_restore_into_larger_and_smaller_capacity_keeps_newest_in_order():
    src = ReplayBuffer(2, 1, 5)
    fill(src, 0, 7)  # holds 2..6, wrapped
    big = ReplayBuffer(2, 1, 10)
    big.load_state_dict(src.state_dict())
    assert big.obs[:5, 0].tolist() == [2, 3, 4, 5, 6] and len(big) == 5 and big.pos == 5
    fill(big, 7, 1)
    assert big.obs[5, 0].item() == 7
    small = ReplayBuffer(2, 1, 3)
    small.load_state_dict(src.state_dict())
    assert small.obs[:, 0].tolist() == [4, 5, 6] and small.pos == 0


def test_same_capacity_restore_samples_identically():
    a = ReplayBuffer(2, 1, 8, seed=3)
    fill(a, 0, 11)
    b = ReplayBuffer(2, 1, 8, seed=99)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.sample(4).obs, b.sample(4).obs)
