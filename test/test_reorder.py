"""The learner's per-source seq order for replay batches (opolo_ros.train.reorder), no ROS."""

from __future__ import annotations

import numpy as np
import pytest

from opolo_ros.data.batches import ReplayBatch
from opolo_ros.train.reorder import ReorderBuffer


def batch(seq: int, source: int = 7) -> ReplayBatch:
    rows = np.full((2, 4 + 1 + 4 + 3), float(seq), np.float32)
    rows[:, -2:] = 0.0  # not terminated, not truncated
    return ReplayBatch.from_rows(rows, 4, seq=seq, source=source)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def seqs(batches) -> list[int]:
    return [b.seq for b in batches]


def buffer(last: dict[int, int], timeout: float = 10.0) -> tuple[ReorderBuffer, Clock]:
    clock = Clock()
    return ReorderBuffer(timeout, last.get, clock), clock


def test_in_order_batches_pass_at_once():
    reorder, _ = buffer({})
    assert [seqs(reorder.push(batch(s))) for s in (3, 4, 5)] == [[3], [4], [5]]  # a new source: any start
    assert reorder.expired() == []


def test_a_batch_after_a_gap_waits_and_goes_in_order_once_the_gap_fills():
    """The killed-learner case: the journal ends at 64, 67 arrives first, then the re-sent 65..67."""
    reorder, clock = buffer({7: 64})
    assert reorder.push(batch(67)) == []
    assert reorder.waiting(7) == [67]
    clock.t = 3.5
    assert reorder.expired() == []
    assert seqs(reorder.push(batch(65))) == [65]
    assert seqs(reorder.push(batch(66))) == [66, 67]
    assert reorder.push(batch(67)) == []  # the re-sent copy of the one released
    assert reorder.waiting(7) == [] and reorder.gaps == 0
    assert seqs(reorder.push(batch(68))) == [68]


def test_a_gap_that_never_fills_is_given_up_after_the_timeout():
    reorder, clock = buffer({7: 64})
    reorder.push(batch(67))
    reorder.push(batch(69))
    clock.t = 10.5
    out = reorder.expired()
    assert [(b.seq, list(missing)) for b, missing in out] == [(67, [65, 66]), (69, [68])]
    assert reorder.gaps == 2 and reorder.waiting(7) == []
    assert seqs(reorder.push(batch(70))) == [70]


def test_sources_wait_independently_and_a_restarted_bridge_starts_again():
    reorder, clock = buffer({1: 0, 2: 10})
    assert reorder.push(batch(3, source=1)) == []
    assert seqs(reorder.push(batch(11, source=2))) == [11]
    assert seqs(reorder.push(batch(0, source=1))) == [0]  # seq 0: a new count, the waiting one dropped
    assert reorder.waiting(1) == []
    clock.t = 20.0
    assert reorder.expired() == []


def test_the_wait_restarts_for_the_next_gap():
    reorder, clock = buffer({7: 0})
    reorder.push(batch(2))
    reorder.push(batch(4))
    clock.t = 8.0
    assert seqs(reorder.push(batch(1))) == [1, 2]  # 4 still waits for 3, from now on
    clock.t = 17.0
    assert reorder.expired() == []
    clock.t = 18.5
    assert [(b.seq, list(m)) for b, m in reorder.expired()] == [(4, [3])]


def test_timeout_zero_never_waits():
    reorder, _ = buffer({7: 1}, timeout=0.0)
    assert seqs(reorder.push(batch(5))) == [5]
    for bad in (-1.0, float("nan"), float("inf")):  # NaN: a gap would be waited for for ever
        with pytest.raises(ValueError, match="timeout"):
            ReorderBuffer(bad, {}.get)


def test_received_seqs_report_what_came_with_everything_before_it():
    """What a learner holds of each source (consumed or queued), for its progress: a gap holds the
    count back until it fills, so a bridge re-sends from the first missing batch."""
    from opolo_ros.train.reorder import ReceivedSeqs

    acked: dict[int, int] = {}
    seen = ReceivedSeqs(acked.get)
    for seq in (15, 16, 17):  # a resumed learner, its acknowledgements not restored yet
        seen.add(1, seq)
    assert seen.snapshot() == {}  # not counted from the first that came: 5..14 may be missing
    acked[1] = 4  # restored: batches up to 4 consumed before the restart
    assert seen.snapshot() == {1: 4}  # 5..14 missing: a bridge re-sends from 5
    for seq in range(5, 15):
        seen.add(1, seq)
    assert seen.snapshot() == {1: 17}
    seen.add(1, 19)
    assert seen.snapshot() == {1: 17}  # 18 is missing: 19 does not count yet
    seen.add(1, 18)
    assert seen.snapshot() == {1: 19}
    seen.add(1, 3)  # a re-sent batch consumed long ago
    assert seen.snapshot() == {1: 19}
    seen.reject(1, 18)  # read in full and refused by the learner: not held
    assert seen.snapshot() == {1: 17}
    acked[1] = 30  # the acknowledgement passed what came here (the learner went on without them)
    seen.add(1, 32)
    assert seen.snapshot() == {1: 30}
    seen.add(1, 31)
    assert seen.snapshot() == {1: 32}
    acked[2] = 7  # another source, counted on its own
    seen.add(2, 8)
    assert seen.snapshot() == {1: 32, 2: 8}
    seen.add(2, 0)  # that bridge restarted without a learner to go on from: a new count
    assert seen.snapshot()[2] == 7  # (never below the acknowledgement until it is taken)


def test_received_edges_a_restart_after_one_batch_a_rejected_newest_and_one_gap_counted_once():
    """Survivors of a mutation spot check: a bridge that restarts after exactly one batch counts
    anew; rejecting the newest received batch un-counts it; batches after one gap are one gap."""
    from opolo_ros.train.reorder import ReceivedSeqs

    seen = ReceivedSeqs({1: 0}.get)
    seen.add(1, 1)
    assert seen.snapshot() == {1: 1}
    seen.add(1, 0)  # restarted: its batch 1 is not the old batch 1
    assert seen.snapshot() == {1: 0}
    seen = ReceivedSeqs({1: 4}.get)
    seen.add(1, 5)
    seen.add(1, 6)
    seen.reject(1, 6)
    assert seen.snapshot() == {1: 5}

    reorder, clock = buffer({7: 64})
    reorder.push(batch(67))
    reorder.push(batch(68))
    clock.t = 100.0
    assert [(b.seq, list(missing)) for b, missing in reorder.expired()] == [(67, [65, 66]), (68, [])]
    assert reorder.gaps == 1
