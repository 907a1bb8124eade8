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
    fixed-rate timer from the newest observation (none when it is older than
    ``observation_timeout_s``), else once per observation.

Policies
    From ``model`` (a file; with ``watch_model`` a changed file is reloaded) and/or from
    ``/opolo/policy`` (ONNX bytes + version, transient local, so a late actor gets the newest).
    A new model is loaded and warmed up in a loader thread, off the control path, then swapped in
    one assignment; a model whose dimensions do not match (``obs_dim``/``act_dim`` when set, else
    the current model's) is refused with an error and the old one kept. The newest loaded version
    is announced on ``policy_version`` (std_msgs/Int64, transient local) for lock-step bridges
    that synchronise. Until the first model is loaded the actor publishes nothing (a lock-step
    bridge re-requests).

    With ``swap_delay: n >= 0`` (train mode, lock-step) a loaded policy of version V (the
    learner's transitions consumed at export) is staged and serves the observations from step
    V + n on; with n = the bridge's ``max_ahead`` the policy behind every action is a function of
    the step, not of message timing, so a lock-step run is reproducible for a seed even while the
    bridge runs ahead of the learner. Steps count distinct observations; when the first policy
    has version V > 0 (a resumed learner) the count starts at V, where the bridge continues.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float32MultiArray, Float64MultiArray, Int64, UInt8MultiArray

from opolo_ros.export.onnx_policy import OnnxPolicy, PolicyLoadError, load_policy
from opolo_ros.nodes.common import FinishableNode, ParameterError, declare, run_node
from opolo_ros.ros import messages as m
from opolo_ros.ros.qos import ACTION_QOS, COMMAND_QOS, qos_for
from opolo_ros.sim.actions import ActionScaler

POLICY_VERSION_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                                durability=DurabilityPolicy.TRANSIENT_LOCAL)
MODES = ("train", "deploy")
SEED_OFFSET = 3  # the direct loop's action generator is default_rng(seed + 3)


@dataclass(frozen=True)
class LoadedPolicy:
    """A ready-to-run model with its action bounds: swapped in as one object."""

    policy: OnnxPolicy
    scaler: ActionScaler  # the model's action bounds
    version: int
    origin: str

    @classmethod
    def load(cls, source: bytes | str, version: int | None, obs_dim: int | None,
             act_dim: int | None) -> LoadedPolicy:
        policy = load_policy(source, expected_obs_dim=obs_dim, expected_act_dim=act_dim)
        policy.warmup()
        meta = policy.metadata
        return cls(policy, ActionScaler(meta.action_low, meta.action_high),
                   meta.version if version is None else version, policy.origin)

    @property
    def low(self) -> np.ndarray:
        return self.scaler.low

    @property
    def high(self) -> np.ndarray:
        return self.scaler.high


PARAMETERS: dict[str, tuple] = {
    "mode": ("train", "train: warm-up random actions then Gaussian exploration noise; "
                      "deploy: deterministic, clamped, rate limited"),
    "model": ("", "ONNX policy file to start with; empty = wait for one on policy_topic"),
    "watch_model": (False, "reload `model` when the file changes"),
    "subscribe_policy": (True, "hot-swap policies published on policy_topic"),
    "policy_topic": ("/opolo/policy", "ONNX policy bytes + version (std_msgs/UInt8MultiArray)"),
    "policy_version_topic": ("policy_version", "announces the active policy version "
                                               "(std_msgs/Int64)"),
    "obs_dim": (0, "expected observation size; 0 = take it from the first model"),
    "act_dim": (0, "expected action size; 0 = take it from the first model"),
    "seed": (0, "seed of the exploration noise and warm-up actions (train mode)"),
    "warmup_steps": (0, "train mode: observations answered with uniform random actions"),
    "exploration_noise": (0.1, "train mode: std of the Gaussian noise in [-1, 1] action units"),
    "swap_delay": (-1, "train mode: -1 = use a new policy as soon as it is loaded; n >= 0 = "
                       "policy version V serves observations from step V + n on (lock-step "
                       "reproducibility; set to the sim bridge's max_ahead)"),
    "observation_topic": ("observation", "observation topic (Float32MultiArray, or JointState "
                                         "when `joints` is set)"),
    "action_topic": ("action", "command topic (std_msgs/Float64MultiArray, environment units)"),
    "command_qos": ("best_effort", "best_effort (the contract's action QoS) or reliable "
                                   "(what ros2_control's forward_command_controller requires)"),
    "joints": ([""], "JointState input: joint names in the policy's order; [''] = array input"),
    "joint_fields": (["position", "velocity"], "JointState fields concatenated per joint list"),
    "rate_hz": (0.0, "publish at this fixed rate from the newest observation; 0 = per observation"),
    "observation_timeout_s": (0.5, "with rate_hz: no command from an observation older than this"),
    "action_low": ([0.0], "deploy safety limits (lower); [] or [0.0] with action_high [0.0] = "
                          "the model's bounds"),
    "action_high": ([0.0], "deploy safety limits (upper)"),
    "max_action_rate": (0.0, "deploy: largest change of any command per second; 0 = unlimited"),
}


class Actor(FinishableNode):
    def __init__(self, *, node_name: str = "actor", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        p = self._declare_parameters()
        self.mode = p["mode"]
        self.rng = np.random.default_rng(p["seed"] + SEED_OFFSET)
        self.current: LoadedPolicy | None = None
        self.steps = 0  # distinct observations acted on
        self.actions = 0  # actions published (re-requests included)
        self.repeats = 0  # re-requested observations answered from the cache
        self.swaps = 0
        self.rejected = 0
        self.actions_by_version: dict[int, int] = {}  # train mode: steps acted on per policy version
        self._last_obs_key: bytes | None = None
        self._last_action_msg: Float64MultiArray | None = None
        self._latest_obs: tuple[np.ndarray, float] | None = None
        self._previous_command: tuple[np.ndarray, float] | None = None
        self._spec = (m.ObservationSpec(tuple(p["joints"]), tuple(p["joint_fields"]))
                      if p["joints"] else None)

        self.newest_version = -1
        self._requests: queue.Queue[tuple[bytes | str, int | None]] = queue.Queue()
        self._staged: list[LoadedPolicy] = []
        self._stage_lock = threading.Lock()
        self._stop = threading.Event()
        self._loader = threading.Thread(target=self._loader_loop, name=f"{node_name}_loader", daemon=True)

        command_qos = COMMAND_QOS if p["command_qos"] == "reliable" else ACTION_QOS
        self.action_pub = self.create_publisher(Float64MultiArray, p["action_topic"], command_qos)
        self.version_pub = self.create_publisher(Int64, p["policy_version_topic"], POLICY_VERSION_QOS)
        if self._spec is not None:
            self.create_subscription(JointState, p["observation_topic"], self._on_joint_state,
                                     qos_for("joint_states"))
        else:
            self.create_subscription(Float32MultiArray, p["observation_topic"], self._on_observation,
                                     qos_for("observation"))
        if p["subscribe_policy"]:
            self.create_subscription(UInt8MultiArray, p["policy_topic"], self._on_policy, qos_for("policy"))
        if p["rate_hz"] > 0:
            self.create_timer(1.0 / p["rate_hz"], self._on_timer)
        self._model_path = Path(p["model"]) if p["model"] else None
        self._model_mtime = 0.0
        if self._model_path is not None:
            # The first model loads synchronously: a deploy actor must not start without it.
            self._model_mtime = self._mtime()
            self._install(LoadedPolicy.load(str(self._model_path), None, self.obs_dim, self.act_dim))
            if p["watch_model"]:
                self.create_timer(1.0, self._check_model_file)
        self._loader.start()
        origin = self.current.origin if self.current else f"waiting for {p['policy_topic']}"
        self.get_logger().info(f"{self.mode} mode; policy: {origin}")

    def _declare_parameters(self) -> dict[str, Any]:
        p = {name: declare(self, name, default, desc) for name, (default, desc) in PARAMETERS.items()}
        if p["mode"] not in MODES:
            raise ParameterError(f"parameter 'mode' must be one of {MODES}, got {p['mode']!r}")
        if p["command_qos"] not in ("best_effort", "reliable"):
            raise ParameterError(f"parameter 'command_qos' must be best_effort or reliable, "
                                 f"got {p['command_qos']!r}")
        if p["warmup_steps"] < 0 or p["exploration_noise"] < 0 or p["rate_hz"] < 0:
            raise ParameterError("warmup_steps, exploration_noise and rate_hz must be >= 0")
        p["joints"] = [j for j in p["joints"] if j]
        self.obs_dim = p["obs_dim"] or None
        self.act_dim = p["act_dim"] or None
        self.warmup_steps = p["warmup_steps"]
        self.swap_delay = p["swap_delay"] if p["mode"] == "train" else -1
        self.noise = p["exploration_noise"]
        self.rate_hz = p["rate_hz"]
        self.obs_timeout = p["observation_timeout_s"]
        self.max_action_rate = p["max_action_rate"]
        low, high = np.asarray(p["action_low"], float), np.asarray(p["action_high"], float)
        same = low.shape == high.shape and low.size > 0
        self.limits = (low, high) if same and np.any(low != high) else None
        if self.limits is not None and np.any(low > high):
            raise ParameterError(f"action_low {low.tolist()} exceeds action_high {high.tolist()}")
        return p

    # ------------------------------------------------------------------ policies
    def _on_policy(self, msg: UInt8MultiArray) -> None:
        """Only hands the bytes to the loader thread: loading is off the control path."""
        try:
            policy = m.msg_to_policy(msg)
        except m.MessageError as err:
            self.get_logger().error(f"rejected policy message: {err}")
            return
        self.request_load(policy.model, policy.version)

    def request_load(self, source: bytes | str, version: int | None = None) -> None:
        """Queue a model for the loader thread (file path or ONNX bytes, with the topic's version)."""
        self._requests.put((source, version))

    def _loader_loop(self) -> None:
        while not self._stop.is_set():
            try:
                source, version = self._requests.get(timeout=0.2)
            except queue.Empty:
                continue
            if version is not None and version <= self.newest_version and not isinstance(source, str):
                continue  # an older policy (e.g. a transient-local replay of one already loaded)
            reference = self.current or (self._staged[-1] if self._staged else None)
            obs_dim = self.obs_dim or (reference.policy.metadata.obs_dim if reference else None)
            act_dim = self.act_dim or (reference.policy.metadata.act_dim if reference else None)
            try:
                loaded = LoadedPolicy.load(source, version, obs_dim, act_dim)
            except PolicyLoadError as err:
                self.rejected += 1
                kept = f"version {reference.version}" if reference else "none"
                self.get_logger().error(f"policy refused, keeping {kept}: {err}")
                continue
            self._install(loaded)

    def _install(self, loaded: LoadedPolicy) -> None:
        """Make a loaded model available: active at once, or staged for its step (`swap_delay`)."""
        if self.swap_delay < 0:
            self.current = loaded  # the swap: one assignment, read once per control step
            self.swaps += 1
            self._log_swap(f"policy version {loaded.version} active ({loaded.origin})")
        else:
            with self._stage_lock:
                if self.newest_version < 0 and self.steps == 0 and loaded.version > 0:
                    self.steps = loaded.version  # a resumed learner: its bridge continues from here
                self._staged.append(loaded)
                self._staged.sort(key=lambda p: p.version)
        self.newest_version = max(self.newest_version, loaded.version)
        try:
            self.version_pub.publish(Int64(data=int(self.newest_version)))
        except Exception as err:  # shutting down
            self.get_logger().debug(f"could not announce policy version: {err}")

    def _log_swap(self, text: str) -> None:
        """The first policy and file reloads at info level; the learner's stream of updates at debug."""
        if self.swaps == 1 or self.mode == "deploy":
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
    def _on_observation(self, msg: Float32MultiArray) -> None:
        try:
            obs = m.msg_to_observation(msg, self._expected_obs_dim())
        except m.MessageError as err:
            self.get_logger().warning(f"rejected observation: {err}", throttle_duration_sec=5.0)
            return
        self._handle(obs)

    def _on_joint_state(self, msg: JointState) -> None:
        try:
            obs = m.joint_state_to_obs(msg, self._spec)
        except m.MessageError as err:
            self.get_logger().warning(f"rejected joint state: {err}", throttle_duration_sec=5.0)
            return
        self._handle(obs)

    def _expected_obs_dim(self) -> int | None:
        current = self.current
        return self.obs_dim or (current.policy.metadata.obs_dim if current else None)

    def _handle(self, obs: np.ndarray) -> None:
        if self.rate_hz > 0:
            self._latest_obs = (obs, time.monotonic())
            return
        if self.mode == "train":
            key = obs.tobytes()
            if key == self._last_obs_key and self._last_action_msg is not None:
                self.repeats += 1
                self._publish(self._last_action_msg)
                return
        action = self.act(obs)
        if action is None:
            return
        msg = m.action_to_msg(action)
        if self.mode == "train":
            self._last_obs_key, self._last_action_msg = obs.tobytes(), msg
        self._publish(msg)

    def _on_timer(self) -> None:
        latest = self._latest_obs
        if latest is None or time.monotonic() - latest[1] > self.obs_timeout:
            return
        action = self.act(latest[0])
        if action is not None:
            self._publish(m.action_to_msg(action))

    def _publish(self, msg: Float64MultiArray) -> None:
        self.action_pub.publish(msg)
        self.actions += 1

    def act(self, obs: np.ndarray) -> np.ndarray | None:
        """The action for `obs` in environment units, or None without a policy."""
        if self.mode == "train":
            self._activate(self.steps)
        current = self.current  # read once: a swap mid-step cannot mix two policies
        if current is None:
            self.get_logger().warning("no policy yet: observation not answered", throttle_duration_sec=5.0)
            return None
        if self.mode == "train":
            return self._explore(obs, current)
        return self._safe(current.policy(obs).astype(np.float64), current)

    def _explore(self, obs: np.ndarray, current: LoadedPolicy) -> np.ndarray:
        step = self.steps
        self.steps += 1
        self.actions_by_version[current.version] = self.actions_by_version.get(current.version, 0) + 1
        act_dim = current.low.size
        warm = step < self.warmup_steps and current.version < self.warmup_steps
        if warm:
            unit = self.rng.uniform(-1.0, 1.0, act_dim).astype(np.float32)
        else:
            a = current.scaler.to_unit(current.policy(obs))
            noise = self.rng.normal(0.0, self.noise, act_dim)
            unit = np.clip(a + noise, -1.0, 1.0).astype(np.float32)
        return current.scaler.to_env(unit).astype(np.float64)

    def _safe(self, action: np.ndarray, current: LoadedPolicy) -> np.ndarray:
        low, high = self.limits if self.limits is not None else (current.low, current.high)
        action = np.clip(action, low, high)
        now = time.monotonic()
        previous = self._previous_command
        if self.max_action_rate > 0 and previous is not None and previous[0].shape == action.shape:
            step = self.max_action_rate * min(now - previous[1], 1.0)
            action = np.clip(action, previous[0] - step, previous[0] + step)
        self._previous_command = (action, now)
        return action

    @property
    def version(self) -> int:
        return self.current.version if self.current is not None else -1

    def close(self) -> None:
        self._stop.set()
        if self._loader.is_alive():
            self._loader.join(timeout=2.0)


def main(args: list[str] | None = None) -> int:
    return run_node(Actor, args)


if __name__ == "__main__":
    raise SystemExit(main())
