"""actor: runs an ONNX policy on ``observation`` and publishes ``action``; hot-swaps new policies.

Three steps per control tick, each testable alone: observation formatting (a Float32MultiArray, or a
``sensor_msgs/JointState`` through an :class:`ObservationSpec` when ``joints`` is set) -> inference
(onnxruntime, one thread) -> action processing (exploration in training mode; clamp to the safety
limits and rate limit in deploy mode).

Modes
    ``train``: the first ``warmup_steps`` observations get uniform random actions, later ones
    pi(s) + N(0, exploration_noise) in the policy's [-1, 1] units, clipped, then rescaled: the
    direct loop's exploration, from the same seeded generator (seed + 3), so a lock-step run draws
    the same random numbers as the direct loop. An observation identical to the previous one is a
    re-request from a lock-step bridge (observation and action are best effort): it gets the same
    action again and draws nothing, so a lost message never changes the run.
    ``deploy``: deterministic pi(s), clamped to ``action_low``/``action_high`` (default: the
    model's bounds) and to ``max_action_rate``; with ``rate_hz`` > 0 the command goes out on a
    fixed-rate timer from the newest observation, else once per observation. A fixed rate more than
    10 % off the rate the model was trained at (1 / its metadata's ``control_period_s``, when it
    has one) is warned of once, and so are observations that come that far off it (in two windows
    of ``RATE_WINDOW`` in a row; ``rate_check``) when each gets a command.

Deploy safety
    - An observation that is not finite or has the wrong length (Float32MultiArray, or a
      JointState missing a joint of the spec, or whose spec, ``joints`` x ``joint_fields``, does
      not give the model's ``obs_dim``) is dropped before the model sees it, counted in
      ``rejected_observations`` (also published on ``rejected_topic``, std_msgs/Int64) and logged,
      throttled to one line per 5 s for each reason. A model trained with ``time_feature: true``
      expects its last input, 1 - t/T, which a JointState cannot hold: with
      ``time_feature_clock`` T > 0 the actor appends it from its own clock (t counts its
      commands, 0..T-1, then starts again; it restarts when observations return after the
      watchdog, at a JointState reset marker, and at an observation that starts an episode,
      which a sim_bridge with ``reset_markers`` marks), and the input holds the other
      ``obs_dim`` - 1 values; without it, the input must hold all ``obs_dim``. A spec that does
      not give the model's input (or a clock for a model trained without the feature) is refused
      at start-up (ParameterError, one line), and a policy of another size is refused when loaded.
    - Watchdog: when no valid observation came for ``observation_timeout_s``, the actor publishes
      ``safe_command`` (zeros by default) at ``rate_hz`` (or ``watchdog_rate_hz`` when commands go
      out per observation), logs it once, and goes back to policy commands with the next valid
      observation. The safe command is not rate limited (stopping is never delayed) unless
      ``ramp_to_safe`` (then it is approached at ``max_action_rate``, as every command, but for the
      one sent as the actor stops); the rate limit ramps from it when the policy takes over again.
      Also before the first observation. The warning names why none may come: nothing publishes
      the topic (within ``discovery_grace_s`` of start-up: no publisher discovered yet), or its
      publishers are of another type; while stale it looks again every ``STALE_RECHECK_S`` and
      logs again when the reason changed. Waiting for the first observation within the grace is
      logged at info level (every deploy starts so) unless a publisher of another type is there,
      and warned of when it lasts beyond the grace.
      The deploy timers (watchdog, ``rate_hz``) run on the steady clock: with ``use_sim_time``
      a ``/clock`` that stops would stop them.
    - Commands stay within the model's bounds, tightened by ``action_low``/``action_high`` (either
      side, one value or one per action; limits never widen the bounds). A non-finite policy
      output (NaN or inf) is replaced by the safe command (counted in ``nonfinite_actions``), and so
      is the output of a model that fails on an observation (onnxruntime raises: ``failed_runs``).

Real-time path (deploy)
    Decode with ``numpy.frombuffer`` (one buffer copy), infer through onnxruntime I/O binding into
    preallocated buffers (:class:`~opolo_ros.export.onnx_policy.BoundPolicy`), clamp and rate
    limit in place into the command message, which is allocated once and refilled; best effort,
    keep last 1 on the observation (``observation_qos``); the EventsExecutor (``executor``);
    ``gc.freeze()`` after start-up (``gc_freeze``); optional CPU pinning (``cpu_affinity``) and
    real-time scheduling (``sched_priority``).
    The figures behind each choice are in BENCHMARKS.md ("Actor latency").

Policies
    From ``model`` (a file; with ``watch_model`` a changed file is reloaded) and/or from
    ``/opolo/policy`` (ONNX bytes + version, transient local, so a late actor gets the newest).
    Every subscription takes its messages serialized and reads them with
    :mod:`opolo_ros.ros.cdr`, which bounds every length by the bytes there are: rclpy's native
    deserializer reads past the buffer of a short message whose encapsulation options claim
    padding (it segfaulted on fuzzed bytes). A policy message is read by the loader thread right
    after a control step (``decode_policy_in_loader``, default), not on the executor thread
    (the reading takes 0.13 ms per 270 kB model at p50, BENCHMARKS.md). A new
    model is loaded and warmed up in the loader thread, off the control path, then swapped in one
    assignment. Building an onnxruntime session holds the GIL for about a millisecond, so the
    loader starts each such step (and each deserialization) right after a control step (the
    longest gap before the next observation) rather than at a random moment; and when policies
    are swapped in at once (deploy, or ``swap_delay: -1``), a model with the same graph as an
    earlier one is not built at all: its weights are copied into an idle session of that graph
    (``reuse_sessions``, :mod:`~opolo_ros.nodes.session_pool`). A model whose dimensions do not match
    (``obs_dim``/``act_dim`` when set, the JointState spec's size, else the current model's) is
    refused with an error and the old one kept. The newest loaded version is announced on
    ``policy_version`` (std_msgs/Int64, transient local) for lock-step bridges that synchronise.
    Until the first model is loaded the actor publishes nothing (a lock-step bridge re-requests).

    With ``swap_delay: n >= 0`` (train mode, lock-step) a loaded policy of version V (the
    learner's transitions consumed at export) is staged and serves the observations from step
    V + n on; with n = the bridge's ``max_ahead`` the policy behind every action is a function of
    the step, not of message timing, so a lock-step run is reproducible for a seed even while the
    bridge runs ahead of the learner. Steps count distinct observations; when the first policy
    has version V > 0 (a resumed learner) the count starts at V, where the bridge continues.
"""


from __future__ import annotations

import gc
import math
import os
import queue
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.duration import Duration as RclpyDuration
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float32MultiArray, Float64MultiArray, Int64, UInt8MultiArray

from opolo_ros.export.onnx_policy import PolicyLoadError, PolicyMetadata, PolicyRunError
from opolo_ros.nodes.actor_params import (
    ANY_TASK,
    MODES,
    OBSERVATION_TYPES,
    PARAMETERS,
    QOS_CHOICES,
    SPIN_MODES,
    action_limits,
    clamp_bounds,
    observation_spec,
    vector_parameter,
)
from opolo_ros.nodes.actor_runtime import CommandBuffer, LoadedPolicy, tune_process
from opolo_ros.nodes.common import EXECUTORS, FinishableNode, ParameterError, declare, run_node
from opolo_ros.nodes.session_pool import SessionPool
from opolo_ros.ros import latency
from opolo_ros.ros import messages as m
from opolo_ros.ros.qos import ACTION_QOS, COMMAND_QOS, POLICY_VERSION_QOS, qos_for
from opolo_ros.ros.subscribe import subscribe
from opolo_ros.sim.task_ids import joint_order_error, same_task_name


@dataclass(frozen=True)
class SerializedPolicy:
    """A policy message as it came off the topic, for the loader thread to deserialize."""

    data: bytes


COUNTER_QOS = POLICY_VERSION_QOS  # a late `ros2 topic echo` sees the current count
RELIABLE_DEFAULT_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)  # rclpy's default
SEED_OFFSET = 3  # the direct loop's action generator is default_rng(seed + 3)
LOG_THROTTLE_S = 5.0
STALE_RECHECK_S = 5.0  # while stale: how often the publishers of the observation topic are looked at again
MIN_RATE_HZ = 1e-3  # rate_hz / watchdog_rate_hz: a period of at most 1000 s
RATE_TOLERANCE = 0.1  # deploy: a rate_hz this far (relative) from the model's training rate is warned of
MAX_REJECT_REASONS = 64  # dropped observations: reasons whose last log time is kept (each throttled)
RATE_WINDOW = 250  # deploy, once per observation: the observation rate is measured over this many
SAFE_POINT_POLL_S = 2e-4  # the loader's poll for the end of a control step
SAFE_POINT_MAX_WAIT_S = 0.05  # no control step within this: the actor is idle, go ahead
FINAL_ACK_S = 0.5  # deploy, stopping: how long the safe command waits for reliable subscribers


def _reason(err: Exception, expected: type) -> str:
    """Why a policy was refused, for the log: the expected error's message, else also its type."""
    why = str(err) if isinstance(err, expected) else f"{type(err).__name__}: {err}"
    return why[:500]


def _clock_hint(meta: PolicyMetadata) -> str:
    """What to set ``time_feature_clock`` to for a time-feature policy: the T its metadata records,
    else the usual one."""
    steps = meta.time_feature_steps
    return (f"{steps} (the training episode length, in the policy's metadata)" if steps else
            "the training episode length (1000 for the Gymnasium MuJoCo tasks)")


def _task_joints(env_id: str) -> tuple[str, ...]:
    """The observed joints of a task's model (a Gymnasium task's, or an MJCF file's where it is
    here), for a policy exported without its own ``joint_names`` (the shipped experts, an MJCF
    policy exported before policies named them); () where the task cannot be made here. Imported here
    only: the simulator is no import of an actor that reads arrays."""
    from opolo_ros.sim.tasks import task_joint_names

    return task_joint_names(env_id)


class Actor(FinishableNode):
    def __init__(self, *, node_name: str = "actor", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        p = self._declare_parameters()
        self.mode = p["mode"]
        self.seed = p["seed"]
        self.policy_topic = p["policy_topic"]  # where model bytes come from (named in messages)
        self.rng = np.random.default_rng(self.seed + SEED_OFFSET)
        self.current: LoadedPolicy | None = None
        self.steps = 0  # distinct observations acted on
        self.actions = 0  # actions published (re-requests and safe commands included)
        self.repeats = 0  # re-requested observations answered from the cache
        self.swaps = 0
        self.rejected = 0  # policies refused (messages without a usable policy included)
        self.rejected_observations = 0  # non-finite or wrong-length observations dropped
        self.safe_commands = 0  # watchdog commands published
        self.stale_events = 0  # times observations went stale
        self.nonfinite_actions = 0  # policy outputs replaced by the safe command
        self.failed_runs = 0  # observations the model failed on (onnxruntime raised)
        self.stale = False
        self._stale_note, self._stale_checked = "", 0.0  # the publishers note last logged, and when
        self._final_sent = False  # the safe command on exit (close() may run twice)
        self._rate_warned: float | None = None  # the training rate a rate_hz mismatch was warned of
        self._rejects_logged: dict[str, float] = {}  # reason of a dropped observation -> when logged
        self._obs_rate_warned: float | None = None  # ... an observation rate mismatch was warned of
        self._window_at = 0.0  # once per observation: when the rate window began (0: not yet)
        self._off_windows = 0  # rate windows in a row off the policy's training rate
        self.actions_by_version: dict[int, int] = {}  # train mode: steps acted on per policy version
        self.inference_ns = latency.DurationLog()  # policy run, deploy
        self.callback_ns = latency.DurationLog()  # observation callback, entry to published command
        self._gc_monitor: latency.GcMonitor | None = None
        self._ticks = 0  # control steps done: the loader's safe points
        self._tick_at = 0.0  # monotonic time of the last control step
        self._tick_gap = 0.0  # moving average of the time between control steps
        self._last_obs_key: bytes | None = None
        self._last_action_msg: Float64MultiArray | None = None
        self._latest_obs: np.ndarray | None = None
        self._latest_seq: int | None = None  # echo_sequence: the tag of _latest_obs
        self._started = time.monotonic()  # discovery_grace_s counts from here
        self._starting = False  # stale since start-up, within the grace: said at info level
        self._last_obs_time = self._started  # no observation yet: stale after the timeout
        self._command: CommandBuffer | None = None
        self._spec = observation_spec(p["joints"], p["joint_fields"], p["joint_offset"], p["joint_scale"])
        if self._spec is not None and self.obs_dim and self._spec.obs_dim + self._extra != self.obs_dim:
            raise ParameterError(f"joints x joint_fields give {self._spec.describe_size()}"
                                 + (" + the clock's time feature" if self._extra else "")
                                 + f", parameter 'obs_dim' is {self.obs_dim}")

        self.newest_version = -1
        self._requests: queue.Queue[tuple[bytes | str | SerializedPolicy, int | None]] = queue.Queue()
        self._staged: list[LoadedPolicy] = []
        self._stage_lock = threading.Lock()
        self._stop = threading.Event()
        self._loader = threading.Thread(target=self._loader_loop, name=f"{node_name}_loader", daemon=True)

        self._create_entities(p)
        self._model_path = Path(p["model"]) if p["model"] else None
        self._model_mtime = 0.0
        if self._model_path is not None:
            # The first model loads synchronously: a deploy actor must not start without it.
            self._model_mtime = self._mtime()
            first = self._load(str(self._model_path), None, self.obs_dim, self.act_dim)
            mismatch = self._input_mismatch(first.metadata, first.origin)
            if mismatch:
                raise ParameterError(mismatch)
            self._install(first)
            if p["watch_model"]:
                self.create_timer(1.0, self._check_model_file)
        self._loader.start()
        if p["cpu_affinity"] or p["sched_priority"]:
            tune_process(p["cpu_affinity"], p["sched_priority"])
        if p["gc_freeze"] and self.mode == "deploy":  # process-wide: not in a composed training graph
            gc.collect()
            gc.freeze()
        if self.stats_file:  # from here on: the pauses the control path can see
            self._gc_monitor = latency.GcMonitor()
        origin = self.current.origin if self.current else f"waiting for {p['policy_topic']}"
        if self.current is not None:
            meta = self.current.metadata
            origin += f" (trained on {meta.env_id}: obs_dim {meta.obs_dim}, act_dim {meta.act_dim})"
        kind = (f"sensor_msgs/JointState ({self._spec.describe_size()})" if self._spec is not None
                else self._array_type.__module__.split(".")[0] + "/" + self._array_type.__name__)
        topic = self._observation_topic = self.resolve_topic_name(p["observation_topic"])
        command = self.resolve_topic_name(p["action_topic"])
        self.get_logger().info(f"{self.mode} mode; policy: {origin}; observations: {kind} on {topic}; "
                               f"commands: std_msgs/Float64MultiArray on {command} {self._command_rate()}")

    def _command_rate(self) -> str:
        """When commands go out, for the start-up line."""
        return f"at {self.rate_hz:g} Hz" if self.rate_hz > 0 else "once per observation"

    def _declare_parameters(self) -> dict[str, Any]:
        p = {name: declare(self, name, default, desc) for name, (default, desc) in PARAMETERS.items()}
        for name, choices in (("mode", MODES), ("command_qos", QOS_CHOICES),
                              ("observation_qos", QOS_CHOICES), ("executor", EXECUTORS),
                              ("spin", SPIN_MODES), ("observation_type", OBSERVATION_TYPES)):
            if p[name] not in choices:
                raise ParameterError(f"parameter '{name}' must be one of {choices}, got {p[name]!r}")
        for name in ("seed", "warmup_steps", "exploration_noise", "rate_hz", "watchdog_rate_hz",
                     "max_action_rate", "discovery_grace_s"):
            if not 0 <= p[name] < math.inf:  # NaN too: it would switch the limit or the timer off
                raise ParameterError(f"parameter '{name}' must be a finite number >= 0, got {p[name]}")
        for name in ("rate_hz", "watchdog_rate_hz"):
            if 0 < p[name] < MIN_RATE_HZ:  # its period would overflow the timer's nanoseconds
                raise ParameterError(f"parameter '{name}' must be 0 (off) or at least {MIN_RATE_HZ:g} Hz, "
                                     f"got {p[name]:g}")
        if not 0 < p["observation_timeout_s"] < math.inf:
            raise ParameterError(f"parameter 'observation_timeout_s' must be a finite number > 0, "
                                 f"got {p['observation_timeout_s']}")
        p["joints"] = [j for j in p["joints"] if j]
        self.obs_dim = p["obs_dim"] or None
        self.act_dim = p["act_dim"] or None
        self._array_type = Float64MultiArray if p["observation_type"] == "float64" else Float32MultiArray
        self.task = p["task"].strip() or None  # None: the first policy's task, then that one
        self.warmup_steps = p["warmup_steps"]
        self.swap_delay = p["swap_delay"] if p["mode"] == "train" else -1
        self.noise = p["exploration_noise"]
        self.rate_hz = p["rate_hz"]
        self.clock_steps = p["time_feature_clock"]
        if self.clock_steps < 0:
            raise ParameterError(f"parameter 'time_feature_clock' must be >= 0, got {self.clock_steps}")
        if self.clock_steps and p["mode"] != "deploy":
            raise ParameterError("parameter 'time_feature_clock' is for deploy mode (in training the "
                                 "sim bridge's observation holds the time feature)")
        self._extra = 1 if self.clock_steps else 0  # policy inputs the actor adds (the clock's)
        self._clock_t = 0
        self._clocked: np.ndarray | None = None  # observation + time feature, reused
        self.obs_timeout = p["observation_timeout_s"]
        self.discovery_grace = p["discovery_grace_s"]
        self.max_action_rate = p["max_action_rate"]
        self.ramp_to_safe = p["ramp_to_safe"] and self.max_action_rate > 0
        self.rate_check = p["rate_check"]
        if p["ramp_to_safe"] and not self.max_action_rate and p["mode"] == "deploy":
            self.get_logger().warning("ramp_to_safe is set but max_action_rate is 0 (no rate limit): "
                                      "the safe command is reached at once")
        self.executor_kind = p["executor"]
        self.spin_timeout_s = 0.0 if p["spin"] == "poll" else 0.1  # read by run_node()
        self.stats_file = p["stats_file"]
        self.echo = p["echo_sequence"]
        self._safe_point = self._wait_for_safe_point if p["load_at_safe_points"] else lambda: None
        self.pool = SessionPool() if p["reuse_sessions"] and self.swap_delay < 0 else None
        self.limits = action_limits(p["action_low"], p["action_high"])
        low, high = self.limits
        if low is not None and high is not None and np.all(low == high):
            self.get_logger().warning(  # before session 15 such a pair meant "the model's bounds"
                f"action_low == action_high ({low.tolist()}): every command is pinned there; leave "
                "both empty ([]) for the model's bounds")
        self.safe = vector_parameter("safe_command", p["safe_command"])
        if not all(isinstance(c, int) and c >= 0 for c in p["cpu_affinity"]):
            raise ParameterError(f"parameter 'cpu_affinity' must list CPU ids, got {p['cpu_affinity']}")
        if not 0 <= p["sched_priority"] <= 99:
            raise ParameterError(f"parameter 'sched_priority' must be in [0, 99], got {p['sched_priority']}")
        return p

    def _create_entities(self, p: dict[str, Any]) -> None:
        command_qos = COMMAND_QOS if p["command_qos"] == "reliable" else ACTION_QOS
        self.action_pub = self.create_publisher(Float64MultiArray, p["action_topic"], command_qos)
        self.version_pub = self.create_publisher(Int64, p["policy_version_topic"], POLICY_VERSION_QOS)
        self.rejected_pub = (self.create_publisher(Int64, p["rejected_topic"], COUNTER_QOS)
                             if p["rejected_topic"] else None)
        if self.rejected_pub is not None:  # the count is there from the start (transient local)
            self.rejected_pub.publish(Int64(data=0))
        reliable = p["observation_qos"] == "reliable"
        if self._spec is not None:
            qos = RELIABLE_DEFAULT_QOS if reliable else qos_for("joint_states")
            subscribe(self, JointState, p["observation_topic"], self._on_joint_state, qos, self._reject,
                      "joint state")
        else:
            qos = RELIABLE_DEFAULT_QOS if reliable else qos_for("observation")
            subscribe(self, self._array_type, p["observation_topic"], self._on_observation, qos,
                      self._reject, "observation")
        if p["subscribe_policy"]:  # taken serialized either way; decoded here or in the loader
            self.create_subscription(UInt8MultiArray, p["policy_topic"],
                                     self._on_serialized_policy if p["decode_policy_in_loader"]
                                     else self._on_policy, qos_for("policy"), raw=True)
            if self.mode == "deploy":
                self.get_logger().warning(
                    f"deploy mode with subscribe_policy: any participant on this ROS domain can "
                    f"replace the policy on {p['policy_topic']}; set subscribe_policy:=false on a "
                    "robot that should run only its model file (deploy.launch.py does)")
        # Deploy timers run on the steady clock: staleness is measured in wall time, and a watchdog
        # on a simulated /clock (use_sim_time) would stop with the clock it guards against.
        steady = Clock(clock_type=ClockType.STEADY_TIME) if self.mode == "deploy" else None
        if self.rate_hz > 0:
            self.create_timer(1.0 / self.rate_hz, self._on_timer, clock=steady)
        elif self.mode == "deploy" and not p["watchdog_rate_hz"]:
            self.get_logger().warning(
                "no watchdog (rate_hz 0 and watchdog_rate_hz 0): when observations stop, the last "
                "command stays applied; set watchdog_rate_hz (or rate_hz) for safe_command then")
        elif self.mode == "deploy":
            if 1.0 / p["watchdog_rate_hz"] > self.obs_timeout:
                self.get_logger().warning(
                    f"watchdog_rate_hz {p['watchdog_rate_hz']:g}: a check every "
                    f"{1.0 / p['watchdog_rate_hz']:g} s, longer than observation_timeout_s "
                    f"{self.obs_timeout:g}; stale observations may go unanswered that long")
            self.create_timer(1.0 / p["watchdog_rate_hz"], self._on_watchdog, clock=steady)

    # ------------------------------------------------------------------ policies
    def _on_policy(self, msg: UInt8MultiArray | bytes) -> None:
        """Decodes the message (or its serialized bytes) and hands the model to the loader thread:
        loading is off the control path."""
        policy = self._decoded(m.serialized_to_policy if isinstance(msg, bytes) else m.msg_to_policy, msg)
        if policy is not None:
            self.request_load(policy.model, policy.version)

    def _on_serialized_policy(self, data: bytes) -> None:
        """Queues the serialized message as it came: the loader thread decodes it at a safe point."""
        self._requests.put((SerializedPolicy(data), None))

    def _decoded(self, decode: Callable[[Any], m.PolicyMessage], msg: Any) -> m.PolicyMessage | None:
        """The policy in a message; None (logged and counted in `rejected`) when it holds none."""
        try:
            return decode(msg)
        except Exception as err:  # MessageError, or anything else odd bytes may bring: never raised on
            self.rejected += 1
            self.get_logger().error(f"rejected policy message: {_reason(err, m.MessageError)}")
            return None

    def request_load(self, source: bytes | str, version: int | None = None) -> None:
        """Queue a model for the loader thread (file path or ONNX bytes, with the topic's version)."""
        self._requests.put((source, version))

    def _loader_loop(self) -> None:
        while not self._stop.is_set():
            try:
                source, version = self._requests.get(timeout=0.2)
            except queue.Empty:
                continue
            if isinstance(source, SerializedPolicy):
                self._safe_point()  # deserializing holds the GIL: right after a control step
                policy = self._decoded(m.serialized_to_policy, source.data)
                if policy is None:
                    continue
                source, version = policy.model, policy.version
            if version is not None and version <= self.newest_version and not isinstance(source, str):
                continue  # an older policy (e.g. a transient-local replay of one already loaded)
            reference = self._reference()
            obs_dim = (self.obs_dim or (self._spec.obs_dim + self._extra if self._spec is not None else None)
                       or (reference.metadata.obs_dim if reference else None))
            act_dim = self.act_dim or (reference.metadata.act_dim if reference else None)
            try:
                loaded = self._load(source, version, obs_dim, act_dim, self._safe_point)
                mismatch = self._input_mismatch(loaded.metadata, loaded.origin)
                if mismatch:  # e.g. a model without the time feature for an actor with the clock
                    raise PolicyLoadError(mismatch)
                self._install(loaded)
            except Exception as err:  # whatever a model does, the loader thread lives on
                self.rejected += 1
                kept = f"version {reference.version}" if reference else "none"
                self.get_logger().error(f"policy refused, keeping {kept}: {_reason(err, PolicyLoadError)}")

    def _input_mismatch(self, meta: PolicyMetadata, origin: str) -> str | None:
        """Why this actor cannot run the model, or None when it can: a model of another task than
        parameter `task` (or the running policy's), a clock for a model trained without the time
        feature, a JointState spec naming the policy's joints, all or some, in another order than
        its observation's (its metadata's ``joint_names``, else its task's: the deploy launch's and
        training's rule, :func:`~opolo_ros.sim.task_ids.reordered_joints`), or a JointState
        spec of the wrong size (it must give all ``obs_dim`` inputs, the time feature included,
        unless the clock adds that)."""
        reference = self._reference()
        task = self.task or (reference.metadata.env_id if reference else None)
        if task not in (None, *ANY_TASK) and not same_task_name(meta.env_id, task):
            given = "parameter 'task' is" if self.task else "the running policy was trained on"
            return (f"the policy {origin} was trained on {meta.env_id}, {given} {task} (set task "
                    "to any to accept policies of any task)")
        if self._extra and not meta.time_feature:
            return (f"time_feature_clock is {self.clock_steps}, but the policy {origin} was trained "
                    "without the time feature: set time_feature_clock to 0")
        spec = self._spec
        if spec is None:
            return None
        names = meta.joint_names or _task_joints(meta.env_id)
        reordered = joint_order_error(spec.joints, names, f"the policy {origin}")
        if reordered:
            return reordered
        if spec.obs_dim + self._extra == meta.obs_dim:
            return None
        text = (f"joints x joint_fields give {spec.describe_size()}"
                + (" + the clock's time feature" if self._extra else "")
                + f", the policy {origin} has obs_dim {meta.obs_dim}")
        if meta.time_feature and not self._extra and spec.obs_dim + 1 == meta.obs_dim:
            text += ("; it was trained with time_feature: true, so its last input is 1 - t/T: set "
                     f"time_feature_clock to {_clock_hint(meta)} and the actor appends it")
        return text

    def _rate_mismatch(self, meta: PolicyMetadata, origin: str) -> str | None:
        """Why the fixed command rate does not suit the model, or None: `rate_hz` more than
        RATE_TOLERANCE from the rate the policy was trained at (its metadata's control period). A
        policy commanded slower than that sees each command held for several of its steps, one
        commanded faster gets observations its training never had between two steps."""
        trained = meta.control_rate_hz
        if self.rate_hz <= 0 or trained is None or abs(self.rate_hz - trained) <= RATE_TOLERANCE * trained:
            return None
        return (f"commands at {self.rate_hz:g} Hz, the policy {origin} was trained at {trained:g} Hz "
                f"(control period {meta.control_period_s:g} s): set rate_hz to {trained:g} (deploy.launch.py "
                "takes the model's rate when neither its argument nor the params file sets rate_hz)")

    def _load(self, source: bytes | str, version: int | None, obs_dim: int | None, act_dim: int | None,
              safe_point: Callable[[], None] = lambda: None) -> LoadedPolicy:
        origin = self.policy_topic  # (model bytes come from the policy topic)
        if self.pool is not None:
            return self.pool.load(source, version, obs_dim, act_dim, self.current, safe_point, origin)
        return LoadedPolicy.load(source, version, obs_dim, act_dim, safe_point, origin)

    def _count_tick(self) -> None:
        now = time.monotonic()
        if self._ticks:
            self._tick_gap += 0.1 * (now - self._tick_at - self._tick_gap)
        self._tick_at = now
        self._ticks += 1

    def _wait_for_safe_point(self) -> None:
        """Return right after a control step, when the next observation is furthest away.

        Session creation holds the GIL for ~1 ms; started at a random moment it would delay a
        control step by that much, started here it fits in the gap before the next observation.
        No step for three usual gaps (at most ``SAFE_POINT_MAX_WAIT_S``) since the last one: the
        actor is idle (e.g. a lock-step bridge waiting for this very policy), so no waiting then.
        """
        seen = self._ticks
        gap = self._tick_gap
        patience = min(3 * gap, SAFE_POINT_MAX_WAIT_S) if gap > 0 else SAFE_POINT_MAX_WAIT_S
        deadline = max(self._tick_at + patience, time.monotonic()) if seen else time.monotonic()
        while self._ticks == seen and time.monotonic() < deadline and not self._stop.is_set():
            time.sleep(SAFE_POINT_POLL_S)

    def _bounds(self, loaded: LoadedPolicy) -> tuple[np.ndarray, np.ndarray]:
        """The deploy clamp: the model's bounds, tightened by `action_low`/`action_high`."""
        try:
            return clamp_bounds(self.limits, loaded.low, loaded.high)
        except ValueError as err:
            raise PolicyLoadError(f"{loaded.origin}: {err}") from None

    def _check_safe_command(self, loaded: LoadedPolicy) -> None:
        """The safe command must fit the model's action size and the limits in force."""
        safe = self.safe
        if safe.size not in (1, loaded.act_dim):
            raise PolicyLoadError(f"{loaded.origin}: safe_command has {safe.size} values, the "
                                  f"policy has act_dim {loaded.act_dim}")
        low, high = loaded.bounds
        safe = np.broadcast_to(safe, (loaded.act_dim,))
        if np.any(safe < low) or np.any(safe > high):
            raise PolicyLoadError(f"{loaded.origin}: safe_command {safe.tolist()} is outside the "
                                  f"action limits [{np.asarray(low).tolist()}, {np.asarray(high).tolist()}]")

    def _install(self, loaded: LoadedPolicy) -> None:
        """Make a loaded model available: active at once, or staged for its step (`swap_delay`)."""
        loaded = replace(loaded, bounds=self._bounds(loaded))
        if self.mode == "deploy":
            self._check_safe_command(loaded)
            if loaded.metadata.time_feature and not self._extra:
                self.get_logger().warning(
                    f"the policy {loaded.origin} was trained with time_feature: true: its last input is "
                    "1 - t/T, which the observations must then carry; a robot's state does not: set "
                    f"time_feature_clock to {_clock_hint(loaded.metadata)} and the actor appends it",
                    once=True)
            mismatch = self._rate_mismatch(loaded.metadata, loaded.origin)
            if mismatch and loaded.metadata.control_rate_hz != self._rate_warned:  # once per rate
                self._rate_warned = loaded.metadata.control_rate_hz
                self.get_logger().warning(mismatch)
        if self._command is None or self._command.values.size != loaded.act_dim:
            self._command = CommandBuffer(loaded.act_dim, self.echo)
            if self.mode == "deploy":  # the rate limit ramps the first command from the safe one
                self._safe_into(self._command, time.monotonic())
        if self.swap_delay < 0:
            self.current = loaded  # the swap: one assignment, read once per control step
            self.swaps += 1
            self._log_swap(f"policy version {loaded.version} active ({loaded.origin})")
        else:
            with self._stage_lock:
                if self.newest_version < 0 and self.steps == 0 and loaded.version > 0:
                    self.steps = loaded.version  # a resumed learner: its bridge continues from here
                    # and new exploration noise: the seed's own would repeat the first run's
                    self.rng = np.random.default_rng([self.seed + SEED_OFFSET, self.steps])
                self._staged.append(loaded)
                self._staged.sort(key=lambda p: p.version)
        self.newest_version = max(self.newest_version, loaded.version)
        try:
            self.version_pub.publish(Int64(data=int(self.newest_version)))
        except Exception as err:  # shutting down
            self.get_logger().debug(f"could not announce policy version: {err}")

    def _log_swap(self, text: str) -> None:
        """The first policy (deploy: the first ten) at info level, later ones at debug: a learner
        or a 10 Hz stream of updates would flood the log."""
        if self.swaps == 1 or (self.mode == "deploy" and self.swaps <= 10):
            self.get_logger().info(text)
        else:
            self.get_logger().debug(text)

    def _activate(self, step: int) -> None:
        """Swap in the newest staged policy due at `step`: version <= step - swap_delay."""
        if not self._staged:
            return
        with self._stage_lock:
            limit = max(step - self.swap_delay, 0)
            due = [p for p in self._staged if p.version <= limit]
            if not due and self.current is None:
                due = self._staged[:1]  # started late: the oldest we have beats none
            if not due:
                return
            chosen = due[-1]
            self._staged = [p for p in self._staged if p.version > chosen.version]
        self.current = chosen
        self.swaps += 1
        self._log_swap(f"policy version {chosen.version} active from step {step} ({chosen.origin})")

    def _mtime(self) -> float:
        try:
            return self._model_path.stat().st_mtime
        except OSError:
            return 0.0

    def _check_model_file(self) -> None:
        mtime = self._mtime()
        if mtime and mtime != self._model_mtime:
            self._model_mtime = mtime
            self.request_load(str(self._model_path))

    # ------------------------------------------------------------------ control path
    def _on_observation(self, msg: Float32MultiArray | Float64MultiArray) -> None:
        start = perf_counter_ns()
        seq = latency.pop_sequence(msg) if self.echo else None
        if m.pop_episode_start(msg):  # the first state of an episode (sim_bridge reset_markers)
            self._clock_t = 0
        try:
            obs = m.msg_to_observation(msg, self._expected_obs_dim())
        except m.MessageError as err:
            self._reject(err)
            return
        self._handle(obs, seq, start)

    def _on_joint_state(self, msg: JointState) -> None:
        start = perf_counter_ns()
        if not (len(msg.name) or len(msg.position) or len(msg.velocity) or len(msg.effort)):
            self._clock_t = 0  # a reset marker (sim_bridge reset_markers): the next state starts an episode
            return
        try:
            obs = m.joint_state_to_obs(msg, self._spec, self._expected_obs_dim())
        except m.MessageError as err:
            self._reject(err)
            return
        self._handle(obs, latency.stamp_sequence(msg.header.stamp) if self.echo else None, start)

    def _reject(self, err: m.MessageError) -> None:
        """Drop a bad observation: count it, publish the count, log (throttled)."""
        self.rejected_observations += 1
        if self.rejected_pub is not None:
            self.rejected_pub.publish(Int64(data=self.rejected_observations))
        current, expected = self.current, self._expected_obs_dim()
        one_short = expected is not None and f" is {expected - 1}, this node expects {expected}" in str(err)
        hint = (" (the policy takes the time feature as its last input: time_feature_clock?)"
                if self.mode == "deploy" and one_short and current is not None
                and current.metadata.time_feature and not self._extra else "")
        # Throttled per reason (numbers aside): one shared throttle hid every later reason behind
        # the first (a NaN logged, then a missing joint counted without a word)
        reason, now = re.sub(r"\d+(\.\d+)?", "#", str(err)), time.monotonic()
        if now - self._rejects_logged.get(reason, -math.inf) < LOG_THROTTLE_S:
            return
        if len(self._rejects_logged) >= MAX_REJECT_REASONS:
            self._rejects_logged.clear()  # (a bounded memory: reasons that vary without end)
        self._rejects_logged[reason] = now
        self.get_logger().warning(f"observation dropped ({self.rejected_observations} so far): {err}{hint}")

    def _reference(self) -> LoadedPolicy | None:
        """The running policy, else the newest one staged to run (the list read once: the executor
        thread replaces it as it activates one)."""
        current, staged = self.current, self._staged
        return current or (staged[-1] if staged else None)

    def _expected_obs_dim(self) -> int | None:
        """Values an observation message must hold: the model's input less what the clock adds
        (the staged policy's before the first runs: a train-mode actor activates it in the step
        itself, and a first observation of another size went unchecked into it)."""
        current = self.current  # (the control path: the staged list only before a first policy)
        reference = current if current is not None else self._reference()
        dim = self.obs_dim or (reference.metadata.obs_dim if reference else None)
        return dim - self._extra if dim else None

    def _handle(self, obs: np.ndarray, seq: int | None, start: int) -> None:
        now = time.monotonic()
        self._last_obs_time = now
        if self.stale:
            self._recover()
        if self.rate_hz > 0:
            self._latest_obs, self._latest_seq = obs, seq
            return
        if self.mode == "train":
            self._respond_train(obs)
        else:
            self._respond_deploy(obs, seq, now)
            self.callback_ns.add(perf_counter_ns() - start)
            if self._ticks % RATE_WINDOW == 0 and self.rate_check:
                self._check_observation_rate(now)
        self._count_tick()

    def _check_observation_rate(self, now: float) -> None:
        """Deploy, a command per observation: the policy runs at the rate observations come. More
        than RATE_TOLERANCE from its training rate in two windows in a row (one pause is no rate)
        is warned of once per rate (a robot's joint_state_broadcaster publishes at the controller
        manager's rate, often 100 Hz or more)."""
        start, self._window_at = self._window_at, now
        current = self.current
        trained = current.metadata.control_rate_hz if current is not None else None
        if not start or trained is None or trained == self._obs_rate_warned:
            return
        rate = RATE_WINDOW / (now - start)
        off = abs(rate - trained) > RATE_TOLERANCE * trained
        self._off_windows = self._off_windows + 1 if off else 0
        if self._off_windows >= 2:
            self._obs_rate_warned = trained
            self.get_logger().warning(
                f"observations come at {rate:.3g} Hz and each gets a command, but the policy "
                f"{current.origin} was trained at {trained:g} Hz: publish them at {trained:g} Hz, or set "
                f"rate_hz to {trained:g} for commands on a fixed-rate timer from the newest observation "
                "(a lock-step simulation, or one faster or slower than real time: rate_check false)")

    def _on_timer(self) -> None:
        """Fixed-rate commands from the newest observation; the safe command when it is stale."""
        now = time.monotonic()
        if now - self._last_obs_time > self.obs_timeout:
            if self.mode == "deploy":
                self._publish_safe(now)
            return
        latest = self._latest_obs
        if latest is None:
            return
        current = self.current
        if current is not None and latest.shape[0] + self._extra != current.metadata.obs_dim:
            self._latest_obs = None  # checked against a policy of another input size: not for this one
            return
        if self.mode == "train":
            action = self.act(latest)
            if action is not None:
                self._publish(m.action_to_msg(action))
        else:
            self._respond_deploy(latest, self._latest_seq, now)
        self._count_tick()

    def _on_watchdog(self) -> None:
        """Per-observation deploy: the safe command while observations are stale."""
        now = time.monotonic()
        if now - self._last_obs_time > self.obs_timeout:
            self._publish_safe(now)

    def _publishers_note(self, now: float) -> str:
        """Why no observation may come: nobody publishes the topic (within ``discovery_grace_s`` of
        start-up: none discovered yet, as DDS discovery and a sim bridge's wait_for_controller take
        seconds), or publishers of another type (which DDS never matches: a JointState actor on a
        Float32MultiArray topic hears nothing)."""
        topic = self._observation_topic
        wanted = ("sensor_msgs/msg/JointState" if self._spec is not None
                  else f"std_msgs/msg/{self._array_type.__name__}")
        types = sorted({info.topic_type for info in self.get_publishers_info_by_topic(topic)})
        if not types:
            if now - self._started < self.discovery_grace:
                return f" (no publisher of {topic} discovered yet)"
            return f" (nothing publishes {topic})"
        other = [t for t in types if t != wanted]
        if not other:
            return ""
        arrays = {"std_msgs/msg/Float32MultiArray": "float32", "std_msgs/msg/Float64MultiArray": "float64"}
        no_joints = "leave joints empty, " if self._spec is not None else ""
        fixes = ["set joints" if t == "sensor_msgs/msg/JointState" else
                 f"{no_joints}set observation_type {arrays[t]}" for t in other
                 if t in arrays or t == "sensor_msgs/msg/JointState"]
        fix = (fixes[0] if fixes else "the actor reads std_msgs/msg/Float32MultiArray or "
               "Float64MultiArray (observation_type), or sensor_msgs/msg/JointState with joints: publish "
               "one of those")
        return (f" ({topic} is published as {', '.join(other)}, this actor reads {wanted}: {fix}, or "
                "remap observation_topic)")

    def _publish_safe(self, now: float) -> None:
        command = self._command
        if command is None:
            return  # no model yet: the action size is unknown
        if not self.stale:
            self.stale = True
            self.stale_events += 1
            self._stale_note, self._stale_checked = self._publishers_note(now), now
            # Waiting for the first observation at start-up, with no sign of a wrong set-up (a
            # publisher of another type) is how every deploy starts: info, and a warning only if
            # it lasts beyond the grace (every normal start warned before, a walkthrough).
            self._starting = (self._last_obs_time == self._started and " is published as " not in
                              self._stale_note and now - self._started < self.discovery_grace)
            text = (f"no valid observation for {self.obs_timeout:g} s: publishing the safe command "
                    f"{np.broadcast_to(self.safe, command.values.shape).tolist()} until observations "
                    "return" + self._stale_note)
            if self._starting:  # (rclpy: one severity per call site)
                self.get_logger().info(text)
            else:
                self.get_logger().warning(text)
        elif now - self._stale_checked > STALE_RECHECK_S:  # a publisher that came (or went) since
            self._stale_checked = now
            note = self._publishers_note(now)
            lasted = self._starting and now - self._started >= self.discovery_grace
            if note != self._stale_note or lasted:
                self._stale_note, self._starting = note, False
                self.get_logger().warning("still no valid observation: safe command" + (note or
                                          f" ({self._observation_topic} is published with the type this "
                                          "actor reads, yet nothing valid arrives: it has not published yet, "
                                          "its QoS does not match the actor's, or its observations are "
                                          "rejected)"))
        self._safe_into(command, now)
        self._send(command, None)
        self.safe_commands += 1

    def _recover(self) -> None:
        self.stale = False
        self._window_at, self._off_windows = 0.0, 0  # a silence is no rate: measure anew
        self._clock_t = 0
        self.get_logger().info("observations are back: policy commands again"
                               + (" (time feature clock restarted)" if self._extra else ""))

    def _with_clock(self, obs: np.ndarray) -> np.ndarray:
        """`obs` + 1 - t/T (as the training env's TimeFeature computes it), then t advances."""
        out = self._clocked
        if out is None or out.shape[0] != obs.shape[0] + 1:
            out = self._clocked = np.empty(obs.shape[0] + 1, dtype=np.float32)
        out[:-1] = obs
        out[-1] = 1.0 - self._clock_t / self.clock_steps
        self._clock_t = (self._clock_t + 1) % self.clock_steps
        return out

    def _respond_train(self, obs: np.ndarray) -> None:
        key = obs.tobytes()
        if key == self._last_obs_key and self._last_action_msg is not None:
            self.repeats += 1
            self._publish(self._last_action_msg)
            return
        action = self.act(obs)
        if action is None:
            return
        msg = m.action_to_msg(action)
        self._last_obs_key, self._last_action_msg = key, msg
        self._publish(msg)

    def _respond_deploy(self, obs: np.ndarray, seq: int | None, now: float) -> None:
        """pi(obs), clamped and rate limited in place into the preallocated command message."""
        current, command = self.current, self._command  # read once: a swap cannot mix policies
        if current is None or command is None:
            self._no_policy()
            return
        if self._extra:
            obs = self._with_clock(obs)
        start = perf_counter_ns()
        action = self._run(current, obs)
        self.inference_ns.add(perf_counter_ns() - start)
        if action is None:
            self._safe_into(command, now)
        else:
            self._clamp_into(action, current, command, now)
        self._send(command, seq)

    def _run(self, current: LoadedPolicy, obs: np.ndarray) -> np.ndarray | None:
        """pi(obs), or None (counted, logged) when the model fails on it: a graph whose shapes or
        indices depend on the input can pass every load-time check and still fail here. An
        observation of another size than `current` takes (checked against a policy a swap has since
        replaced) is dropped as a bad observation."""
        if obs.shape[0] != current.metadata.obs_dim:
            self._reject(m.MessageError(f"observation has {obs.shape[0]} values, the policy (version "
                                        f"{current.version}) takes {current.metadata.obs_dim}"))
            return None
        try:
            return current.run(obs)
        except PolicyRunError as err:
            self.failed_runs += 1
            self.get_logger().error(f"{err}: safe command instead" if self.mode == "deploy"
                                    else f"{err}: observation not answered",
                                    throttle_duration_sec=LOG_THROTTLE_S)
            return None

    def _safe_into(self, command: CommandBuffer, now: float, ramp: bool = True) -> None:
        """The safe command into `command`: at once, or at the rate limit (`ramp_to_safe`)."""
        command.values[:] = self.safe
        current = self.current
        if ramp and self.ramp_to_safe and current is not None and command.previous_time is not None:
            self._rate_limit(command, now)
            np.clip(command.values, *current.bounds, out=command.values)  # the limits win, as below
        command.remember(now)

    def _rate_limit(self, command: CommandBuffer, now: float) -> None:
        """Clip the command just written to `max_action_rate` from the previous one (the callers
        have one: ``previous_time`` set)."""
        step = self.max_action_rate * min(now - command.previous_time, 1.0)
        previous = command.previous
        np.clip(command.values, previous - step, previous + step, out=command.values)

    def _clamp_into(self, action: np.ndarray, current: LoadedPolicy, command: CommandBuffer,
                    now: float) -> None:
        """Write the safe version of `action` into the command: limits, finiteness, rate limit.

        The limits win over the rate limit: after a swap to a model with narrower bounds the
        command moves into them at once. A safe command sent instead of a non-finite action is the
        rate limit's next reference, as the watchdog's is, and the first command ramps from the
        safe command (set as the reference when the command buffer is made).
        Few numpy calls (each costs a microsecond or more at act_dim 1..20): float64 bounds
        computed at install, NaN and inf found through the sum (before the clip, which would turn
        an inf into a full-range command), the last command kept only when the rate limit needs it.
        """
        out = command.values
        if not math.isfinite(action.sum(dtype=np.float64)):  # NaN or inf anywhere (before clip hides an inf)
            self.nonfinite_actions += 1
            self.get_logger().error("the policy returned a non-finite action: safe command instead",
                                    throttle_duration_sec=LOG_THROTTLE_S)
            self._safe_into(command, now)
            return
        np.clip(action, *current.bounds, out=out)
        if self.max_action_rate > 0:
            if command.previous_time is not None:
                self._rate_limit(command, now)
                np.clip(out, *current.bounds, out=out)  # a reference outside new, narrower bounds
            command.remember(now)

    def _send(self, command: CommandBuffer, seq: int | None, counted: bool = True) -> None:
        if command.echo is not None:
            command.echo.set(seq)
        if counted:
            self._publish(command.msg)
        else:
            self.action_pub.publish(command.msg)

    def _publish(self, msg: Float64MultiArray) -> None:
        self.action_pub.publish(msg)
        self.actions += 1

    def _no_policy(self) -> None:
        self.get_logger().warning("no policy yet: observation not answered",
                                  throttle_duration_sec=LOG_THROTTLE_S)

    def act(self, obs: np.ndarray) -> np.ndarray | None:
        """The action for `obs` in environment units (a new array), or None without a policy.

        Train mode: exploration (advances the step count); deploy mode: pi(obs) clamped to the
        limits (no rate limit: that needs the command history of the control path; `obs` is the
        model's whole input, the time feature included: the clock belongs to the control path).
        """
        if self.mode == "train":
            self._activate(self.steps)
        current = self.current  # read once: a swap mid-step cannot mix two policies
        if current is None:
            self._no_policy()
            return None
        if self.mode == "train":
            return self._explore(obs, current)
        action = self._run(current, obs)
        return None if action is None else np.clip(action, *current.bounds).astype(np.float64)

    def _explore(self, obs: np.ndarray, current: LoadedPolicy) -> np.ndarray | None:
        act_dim = current.low.size
        warm = self.steps < self.warmup_steps and current.version < self.warmup_steps
        if warm:
            unit = self.rng.uniform(-1.0, 1.0, act_dim).astype(np.float32)
        else:
            action = self._run(current, obs)
            if action is None:
                return None
            a = current.scaler.to_unit(action)
            noise = self.rng.normal(0.0, self.noise, act_dim)
            unit = np.clip(a + noise, -1.0, 1.0).astype(np.float32)
        self.steps += 1
        self.actions_by_version[current.version] = self.actions_by_version.get(current.version, 0) + 1
        return current.scaler.to_env(unit).astype(np.float64)

    @property
    def version(self) -> int:
        return self.current.version if self.current is not None else -1

    def statistics(self) -> dict[str, Any]:
        """Counters and control-path timings (what ``stats_file`` holds)."""
        out: dict[str, Any] = {
            "node": self.get_fully_qualified_name(), "pid": os.getpid(), "mode": self.mode,
            "inference": self.inference_ns.summary(), "callback": self.callback_ns.summary(),
            "counters": {name: getattr(self, name) for name in (
                "actions", "steps", "swaps", "rejected", "rejected_observations", "safe_commands",
                "stale_events", "nonfinite_actions", "failed_runs")},
            "version": self.version,
        }
        if self.pool is not None:
            out["counters"].update(session_builds=self.pool.builds, weight_copies=self.pool.copies)
        if self._gc_monitor is not None:
            out["gc"] = self._gc_monitor.summary()
        return out

    def close(self) -> None:
        self._stop.set()
        self._final_safe_command()
        if self._loader.is_alive():
            self._loader.join(timeout=2.0)
        if self._gc_monitor is not None:
            self._gc_monitor.close()
        if self.stats_file:
            latency.write_json(self.stats_file, self.statistics())
            self.stats_file = ""  # close() may run twice

    def _final_safe_command(self) -> None:
        """Deploy: `safe_command` once more as the actor stops (a signal, the launch's end), so that
        a controller that holds the last command (ros2_control's forward_command_controller) does
        not go on applying the policy's; waits up to FINAL_ACK_S for reliable subscribers to have it."""
        command = self._command
        if self.mode != "deploy" or command is None or self._final_sent:
            return
        self._final_sent = True
        try:
            self._safe_into(command, time.monotonic(), ramp=False)  # the last command: all the way
            self._send(command, None, counted=False)  # the counters are the run's
            self.action_pub.wait_for_all_acked(RclpyDuration(seconds=FINAL_ACK_S))
        except Exception as err:  # the context shut down already: nothing can be sent
            self.get_logger().warning(f"could not send the safe command on exit: {err}")
            return
        self.get_logger().info(f"stopping: sent the safe command {command.values.tolist()}")


def main(args: list[str] | None = None) -> int:
    return run_node(Actor, args)


if __name__ == "__main__":
    raise SystemExit(main())
