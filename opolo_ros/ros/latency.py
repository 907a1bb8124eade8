"""Control-path instrumentation shared by the actor, the baseline actor and ``bench/latency.py``.

Sequence tags (matching an action to the observation it answers)
    ``Float32MultiArray``/``Float64MultiArray`` carry no header, so a benchmark driver tags each
    observation with one extra *metadata dim* after the ``obs`` dim: ``("seq", n, 0)`` (stride 0
    marks "not an axis", the convention of :mod:`opolo_ros.ros.messages`). An actor that echoes
    (``echo_sequence: true``) pops that dim off the received message *before* decoding it, so the
    decoder and the policy see a standard observation and the data are untouched, and appends the
    same dim to its command's layout (``NO_SEQUENCE`` on a command that answers no observation,
    such as the watchdog's). The driver keeps the send time of every ``n`` and matches the
    command's tag against it. A ``sensor_msgs/JointState`` observation has a header: its tag is
    its stamp in microseconds, modulo 2**32 (:func:`stamp_sequence`), so a robot's own
    ``/joint_states`` can be matched without changing them. Echoing is for measurement only; the
    sim bridge pops the tag off a command before decoding it (a ros2_control forward command
    controller reads only ``data`` and ignores the layout).

Durations
    :class:`DurationLog` keeps the newest durations (ns) in a preallocated ring buffer: recording is
    one array store, no allocation, so it can stay on in the control path.

CPU use
    :func:`process_cpu_seconds` reads user + system time of any process from ``/proc`` (psutil is
    not a dependency).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from time import perf_counter_ns as time_ns
from typing import Any

import numpy as np
from std_msgs.msg import MultiArrayDimension

SEQ_LABEL = "seq"
NO_SEQUENCE = 2**32 - 1  # the tag of a command that answers no observation (the watchdog's)
DEFAULT_CAPACITY = 1 << 18  # 262,144 samples: 4 minutes at 1 kHz
PERCENTILES = (50.0, 90.0, 99.0, 99.9)


def tag_sequence(msg: Any, seq: int) -> None:
    """Append the ``("seq", seq, 0)`` metadata dim to a multi-array message's layout."""
    msg.layout.dim.append(MultiArrayDimension(label=SEQ_LABEL, size=int(seq) & 0xFFFFFFFF, stride=0))


def pop_sequence(msg: Any) -> int | None:
    """Remove a trailing ``("seq", n, 0)`` dim from `msg`'s layout and return n (None if absent,
    or if `msg` is no multi-array: the decoder that comes next rejects it)."""
    layout = getattr(msg, "layout", None)
    dims = getattr(layout, "dim", None)
    if dims and dims[-1].stride == 0 and dims[-1].label == SEQ_LABEL:
        return int(dims.pop().size)
    return None


def stamp_sequence(stamp: Any) -> int:
    """The tag of a stamped message (``builtin_interfaces/Time``): its time in us, modulo 2**32.

    Unique for 71 minutes at any rate up to 1 MHz; `NO_SEQUENCE` (one value in 2**32) is skipped.
    """
    tag = (stamp.sec * 1_000_000 + stamp.nanosec // 1000) & 0xFFFFFFFF
    return tag - 1 if tag == NO_SEQUENCE else tag


def read_sequence(msg: Any) -> int | None:
    """The tag of a message without removing it (the driver's side)."""
    dims = msg.layout.dim
    if dims and dims[-1].stride == 0 and dims[-1].label == SEQ_LABEL:
        return int(dims[-1].size)
    return None


class SequenceEcho:
    """The tag dim of one preallocated command message: set per command, no allocation."""

    def __init__(self, msg: Any) -> None:
        self.dim = MultiArrayDimension(label=SEQ_LABEL, size=0, stride=0)
        msg.layout.dim = [*msg.layout.dim, self.dim]

    def set(self, seq: int | None) -> None:
        self.dim.size = NO_SEQUENCE if seq is None else seq


def summarize(values_us: np.ndarray) -> dict[str, float]:
    """Count, mean, p50/p90/p99/p99.9 and max of durations in microseconds."""
    if values_us.size == 0:
        return {"count": 0}
    pct = np.percentile(values_us, PERCENTILES)
    out = {"count": int(values_us.size), "mean_us": float(values_us.mean())}
    out.update({f"p{p:g}_us": float(v) for p, v in zip(PERCENTILES, pct)})
    out["max_us"] = float(values_us.max())
    return out


class DurationLog:
    """The newest `capacity` durations in nanoseconds (ring buffer, allocation-free recording)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._buf = np.zeros(capacity, dtype=np.int64)
        self._mask = capacity - 1
        if capacity & self._mask:
            raise ValueError(f"capacity must be a power of two, got {capacity}")
        self.count = 0

    def add(self, ns: int) -> None:
        self._buf[self.count & self._mask] = ns
        self.count += 1

    def values_ns(self) -> np.ndarray:
        n = min(self.count, self._buf.size)
        return self._buf[:n].copy()

    def summary(self) -> dict[str, float]:
        return summarize(self.values_ns() / 1e3)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads), from ``/proc/<pid>/stat``."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()  # the command name may contain spaces
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


def steal_seconds() -> float:
    """CPU time the hypervisor gave to others while this machine's CPUs wanted to run (all CPUs,
    seconds since boot, ``/proc/stat``): a benchmark window with much of it measured the host."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


def write_json(path: str | Path, data: dict[str, Any]) -> None:
    """Write `data` as indented JSON, creating the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


class GcMonitor:
    """Counts and times the garbage collector's pauses (``gc.callbacks``), per generation."""

    def __init__(self) -> None:
        import gc

        self._gc = gc
        self.pauses = DurationLog(1 << 12)
        self.collections = [0, 0, 0]
        self._start = 0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time_ns()
            return
        self.pauses.add(time_ns() - self._start)
        self.collections[info.get("generation", 0)] += 1

    def close(self) -> None:
        if self._callback in self._gc.callbacks:
            self._gc.callbacks.remove(self._callback)

    def summary(self) -> dict[str, Any]:
        return {"collections_per_generation": list(self.collections), "pauses": self.pauses.summary()}
