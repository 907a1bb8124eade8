"""The actor's control-path pieces: a loaded policy (:class:`LoadedPolicy`), the preallocated
deploy command (:class:`CommandBuffer`) and process tuning (:func:`tune_process`, CPU pinning
and real-time scheduling); used by :mod:`opolo_ros.nodes.actor`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from opolo_ros.export.onnx_policy import BoundPolicy, OnnxPolicy, PolicyMetadata, load_policy
from opolo_ros.nodes.common import ParameterError
from opolo_ros.ros import latency
from opolo_ros.ros import messages as m
from opolo_ros.sim.actions import ActionScaler


@dataclass(frozen=True)
class LoadedPolicy:
    """A ready-to-run model with its action bounds: swapped in as one object.

    `lock` is held while the model runs: a session whose weights are rewritten in place
    (:mod:`opolo_ros.nodes.session_pool`) is written under the same lock.
    """

    policy: OnnxPolicy
    runner: BoundPolicy  # preallocated single-observation inference
    scaler: ActionScaler  # the model's action bounds
    version: int
    origin: str
    metadata: PolicyMetadata
    bounds: tuple[np.ndarray, np.ndarray] | None = None  # deploy clamp (float64), set on install
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False)

    @classmethod
    def load(cls, source: bytes | str, version: int | None, obs_dim: int | None,
             act_dim: int | None, safe_point: Callable[[], None] = lambda: None,
             origin: str = "<bytes>") -> LoadedPolicy:
        """Load, check and warm up a model (`origin`: where model bytes came from); `safe_point()` is
        called before each GIL-heavy step."""
        safe_point()
        policy = load_policy(source, expected_obs_dim=obs_dim, expected_act_dim=act_dim, origin=origin)
        safe_point()
        policy.warmup()
        return cls.of(policy, policy.bind(), policy.metadata, version, policy.origin)

    @classmethod
    def of(cls, policy: OnnxPolicy, runner: BoundPolicy, meta: PolicyMetadata, version: int | None,
           origin: str, lock: threading.Lock | None = None) -> LoadedPolicy:
        return cls(policy, runner, ActionScaler(meta.action_low, meta.action_high),
                   meta.version if version is None else version, origin, meta,
                   lock=lock or threading.Lock())

    def run(self, obs: np.ndarray) -> np.ndarray:
        """pi(obs) in environment units (float32 view, overwritten by the next call)."""
        with self.lock:
            return self.runner(obs)

    @property
    def act_dim(self) -> int:
        return self.metadata.act_dim

    @property
    def low(self) -> np.ndarray:
        return self.scaler.low

    @property
    def high(self) -> np.ndarray:
        return self.scaler.high


class CommandBuffer:
    """The deploy command message, allocated once and refilled in place for every command.

    ``publish`` serialises synchronously, so the same message can be refilled for the next
    command; ``values`` is a float64 view of its data. With `echo`, the layout carries the
    observation's sequence tag (see :mod:`opolo_ros.ros.latency`).
    """

    def __init__(self, act_dim: int, echo: bool) -> None:
        self.msg = m.action_to_msg(np.zeros(act_dim))
        self.values = np.frombuffer(self.msg.data, dtype=np.float64)
        self.previous = np.zeros(act_dim)  # the last command, for the rate limit
        self.previous_time: float | None = None
        self.echo = latency.SequenceEcho(self.msg) if echo else None

    def remember(self, now: float) -> None:
        """Keep the command just written as the rate limit's reference."""
        self.previous[:] = self.values
        self.previous_time = now


def tune_process(cpus: list[int], priority: int) -> None:
    """Pin every thread of this process (DDS threads included) to `cpus` and/or give them the
    SCHED_FIFO `priority`; threads started later inherit both."""
    for tid in (int(t) for t in os.listdir("/proc/self/task")):
        try:
            if cpus:
                os.sched_setaffinity(tid, cpus)
            if priority:  # child processes start with the normal scheduler again
                os.sched_setscheduler(tid, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK,
                                      os.sched_param(priority))
        except ProcessLookupError:  # a thread that just ended
            continue
        except PermissionError as err:
            raise ParameterError(f"sched_priority {priority}: not permitted ({err.strerror}); "
                                 "needs CAP_SYS_NICE or an rtprio limit") from None
        except OSError as err:  # EINVAL: none of `cpus` is available to this process
            raise ParameterError(f"cpu_affinity {cpus}: {err.strerror} (CPUs available to this "
                                 f"process: {sorted(os.sched_getaffinity(0))})") from None
