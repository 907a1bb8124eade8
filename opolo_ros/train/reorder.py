"""Replay batches of each source in ``seq`` order, waiting a while for the missing ones.

A flow-controlled sim bridge keeps every batch the learner has not acknowledged and publishes them
again, oldest first, when the learner's acknowledgement stalls or the learner comes back after a
crash. A batch published while the learner was down, or before DDS had matched a restarted
learner's subscription, can still arrive *after* a newer one. Consuming the newer one at once would
acknowledge past the missing ones, and the bridge would drop them: transitions lost for good. So a
batch that comes after a gap waits here, up to ``timeout_s``, for the batches before it; they are
released in order as the gap fills. A source that never re-sends (a bridge without flow control,
or one that was restarted) only costs ``timeout_s`` of waiting: then the waiting batches go on
without the missing ones. No ROS in here.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from opolo_ros.data.batches import ReplayBatch


class ReorderBuffer:
    """Per source: the next ``seq`` to consume and the batches that came after a gap.

    `last_seq(source)` gives the last ``seq`` consumed from a source before this buffer saw it (the
    checkpoint's and the journal's acknowledgement), None for a source not seen yet; the buffer
    keeps count from then on. Duplicates (a ``seq`` consumed already) are the caller's to drop
    before :meth:`push`.
    """

    def __init__(self, timeout_s: float, last_seq: Callable[[int], int | None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 <= timeout_s < math.inf:  # NaN too: a gap would be waited for for ever
            raise ValueError(f"replay gap timeout must be a finite number >= 0, got {timeout_s}")
        self.timeout_s, self._last_seq, self._clock = timeout_s, last_seq, clock
        self._next: dict[int, int] = {}  # source -> next seq to release
        self._held: dict[int, dict[int, ReplayBatch]] = {}  # source -> seq -> batch
        self._since: dict[int, float] = {}  # source -> when its oldest waiting batch arrived
        self.gaps = 0  # gaps given up on (batches that never came)

    def push(self, batch: ReplayBatch) -> list[ReplayBatch]:
        """`batch` and any waiting batches it unblocks, in the order to consume them."""
        source, seq = batch.source, batch.seq
        if source not in self._next:
            last = self._last_seq(source)
            self._next[source] = seq if last is None else last + 1
        expected = self._next[source]
        if seq == 0:  # a restarted bridge (without a learner to continue from): a new count
            self._held.pop(source, None)
            self._since.pop(source, None)
            return self._release(source, batch)
        if seq == expected or self.timeout_s == 0:
            return self._release(source, batch)
        if seq < expected:  # consumed already (the caller's duplicate check missed it)
            return []
        held = self._held.setdefault(source, {})
        held.setdefault(seq, batch)
        self._since.setdefault(source, self._clock())
        return []

    def expired(self) -> list[tuple[ReplayBatch, range]]:
        """Waiting batches whose gap did not fill within the timeout, each with the missing seqs
        before it, in the order to consume them."""
        out = []
        now = self._clock()
        for source in [s for s, t in self._since.items() if now - t > self.timeout_s]:
            held = self._held.pop(source)
            del self._since[source]
            for seq in sorted(held):
                missing = range(self._next[source], seq)
                if missing:
                    self.gaps += 1
                self._next[source] = seq + 1
                out.append((held[seq], missing))
        return out

    def waiting(self, source: int) -> list[int]:
        """The seqs waiting for a gap to fill."""
        return sorted(self._held.get(source, {}))

    def _release(self, source: int, batch: ReplayBatch) -> list[ReplayBatch]:
        out = [batch]
        self._next[source] = batch.seq + 1
        held = self._held.get(source, {})
        while self._next[source] in held:
            out.append(held.pop(self._next[source]))
            self._next[source] += 1
        if not held:
            self._held.pop(source, None)
            self._since.pop(source, None)
        else:
            self._since[source] = self._clock()  # the rest waits on a new gap
        return out


class ReceivedSeqs:
    """Per source: the newest ``seq`` received with every one before it, consumed or still queued.

    A learner reports it beside its acknowledgement, so that a bridge whose batches wait in the
    learner's queue (a busy learner, several bridges) does not publish them again; a batch lost on
    the way leaves a gap, and a bridge re-sends from there. `last_seq(source)`: the last ``seq``
    consumed from the source (the learner's acknowledgement), None before the learner knows one (a
    resumed learner restores its acknowledgements after its subscription is up): batches that came
    before are only noted, and counted from the acknowledgement once there is one, never from
    the first that happened to arrive (that would report the ones missing before it as held).
    :meth:`add` and :meth:`reject` (a batch the learner read in full and refused) may be called
    from one thread, :meth:`snapshot` from another.
    """

    MAX_AHEAD = 10_000  # seqs noted past a gap per source (a bogus seq must not grow it for ever)

    def __init__(self, last_seq: Callable[[int], int | None]) -> None:
        self._last_seq = last_seq
        self._received: dict[int, int] = {}
        self._ahead: dict[int, set[int]] = {}
        self._lock = threading.Lock()

    def add(self, source: int, seq: int) -> None:
        with self._lock:
            ahead = self._ahead.setdefault(source, set())
            if seq == 0 and self._received.get(source, -1) > 0:  # a bridge counting anew (restarted
                self._received[source] = -1  # without a learner to go on from)
                ahead.clear()
            if len(ahead) < self.MAX_AHEAD:
                ahead.add(seq)
            self._settle(source)

    def reject(self, source: int, seq: int) -> None:
        """A batch noted here that the learner then refused: it does not hold it."""
        with self._lock:
            self._ahead.get(source, set()).discard(seq)
            if self._received.get(source, -1) >= seq:
                self._received[source] = seq - 1

    def snapshot(self) -> dict[int, int]:
        with self._lock:
            for source in list(self._ahead):
                self._settle(source)
            return dict(self._received)

    def _settle(self, source: int) -> None:
        """Count on from the acknowledgement (or the count so far) through the noted seqs."""
        last = self._last_seq(source)
        if last is None and source not in self._received:
            return  # no acknowledgement to count from yet
        base = max(self._received.get(source, -1), -1 if last is None else last)
        ahead = self._ahead[source]
        while base + 1 in ahead:
            base += 1
        if ahead:  # those the count has passed
            ahead.difference_update([s for s in ahead if s <= base])
        self._received[source] = base
