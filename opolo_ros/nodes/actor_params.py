"""The actor's parameters: the declared table (default and description of each), the allowed
choices, and the pure checks of the vector-valued ones; used by :mod:`opolo_ros.nodes.actor`.
"""

from __future__ import annotations

import numpy as np

from opolo_ros.nodes.common import ParameterError
from opolo_ros.ros import messages as m

MODES = ("train", "deploy")
QOS_CHOICES = ("best_effort", "reliable")
OBSERVATION_TYPES = ("float32", "float64")
ANY_TASK = ("any", "*")  # parameter `task`: policies of every task accepted
SPIN_MODES = ("block", "poll")

PARAMETERS: dict[str, tuple] = {
    "mode": ("train", "train: warm-up random actions then Gaussian exploration noise; "
                      "deploy: deterministic, clamped, rate limited, watchdog"),
    "model": ("", "ONNX policy file to start with; empty = wait for one on policy_topic"),
    "watch_model": (False, "reload `model` when the file changes"),
    "subscribe_policy": (True, "hot-swap policies published on policy_topic"),
    "policy_topic": ("/opolo/policy", "ONNX policy bytes + version (std_msgs/UInt8MultiArray)"),
    "policy_version_topic": ("policy_version", "announces the active policy version "
                                               "(std_msgs/Int64)"),
    "task": ("", "accept only policies trained on this task (their env_id: a Gymnasium id, or an "
                 "MJCF file, compared by file name); '' = the first policy's task; any (or '*', "
                 "quoted in YAML) = any"),
    "obs_dim": (0, "expected policy input size (the model's obs_dim, a time_feature_clock's input "
                   "included); 0 = take it from the first model"),
    "act_dim": (0, "expected action size; 0 = take it from the first model"),
    "seed": (0, "seed of the exploration noise and warm-up actions (train mode)"),
    "warmup_steps": (0, "train mode: observations answered with uniform random actions"),
    "exploration_noise": (0.1, "train mode: std of the Gaussian noise in [-1, 1] action units"),
    "swap_delay": (-1, "train mode: -1 = use a new policy as soon as it is loaded; n >= 0 = "
                       "policy version V serves observations from step V + n on (lock-step "
                       "reproducibility; set to the sim bridge's max_ahead)"),
    "observation_topic": ("observation", "observation topic (Float32MultiArray, or JointState "
                                         "when `joints` is set)"),
    "observation_type": ("float32", "array input: float32 (std_msgs/Float32MultiArray, the contract) or "
                                    "float64 (std_msgs/Float64MultiArray, ros2_control's array type)"),
    "action_topic": ("action", "command topic (std_msgs/Float64MultiArray, environment units)"),
    "observation_qos": ("best_effort", "observation subscription: best_effort (keep last 1, the "
                                       "contract; JointState: the sensor-data preset) or reliable "
                                       "(keep last 10, rclpy's default)"),
    "command_qos": ("best_effort", "best_effort (the contract's action QoS) or reliable "
                                   "(what ros2_control's forward_command_controller requires)"),
    "joints": ([""], "JointState input: joint names in the policy's order; [''] = array input"),
    "joint_fields": (["position", "velocity"], "JointState fields concatenated per joint list"),
    "joint_offset": ([], "JointState input: subtracted from the observation (one value per "
                         "observation entry, in the order joints x joint_fields); [] = none"),
    "joint_scale": ([], "JointState input: multiplies the observation after the offset (as "
                        "joint_offset); [] = none"),
    "rate_hz": (0.0, "publish at this fixed rate from the newest observation; 0 = per observation; "
                     "deploy: warned of when more than 10 % off the model's training rate (1 / its "
                     "control_period_s)"),
    "time_feature_clock": (0, "deploy, a model trained with time_feature: true: T > 0 = the actor "
                              "appends 1 - t/T itself (t = commands since the clock started, "
                              "0..T-1, then 0 again; restarted when observations return after the "
                              "watchdog), so the input holds obs_dim - 1 values; T = the training "
                              "episode length (1000 for the Gymnasium MuJoCo tasks); 0 = the input "
                              "holds all obs_dim values"),
    "observation_timeout_s": (0.5, "observations older than this are stale: no policy command; "
                                   "deploy: the watchdog publishes safe_command"),
    "discovery_grace_s": (5.0, "deploy: for this long after start-up a watchdog warning says no publisher "
                               "of the observation topic is discovered yet (DDS discovery, a sim bridge "
                               "waiting for the actor) instead of that nothing publishes it"),
    "safe_command": ([0.0], "deploy watchdog: the command while observations are stale "
                            "(environment units): act_dim values, or one for every joint"),
    "watchdog_rate_hz": (50.0, "deploy with rate_hz 0: how often the watchdog checks for stale "
                               "observations and repeats the safe command; 0 = no watchdog"),
    "rejected_topic": ("~/rejected_observations", "count of observations dropped as non-finite or "
                                                  "of the wrong length (std_msgs/Int64); '' = none"),
    "action_low": ([], "deploy safety limits (lower), one value or act_dim values: commands stay "
                       "within these and the model's bounds (limits only tighten them); [] = the "
                       "model's"),
    "action_high": ([], "deploy safety limits (upper), as action_low"),
    "max_action_rate": (0.0, "deploy: largest change of a policy command per second; 0 = unlimited "
                             "(the safe command is reached at once unless ramp_to_safe)"),
    "rate_check": (True, "deploy with rate_hz 0: warn when observations come more than 10 % off "
                         "the policy's training rate (two windows of 250 in a row); false for a "
                         "lock-step simulation or one faster or slower than real time"),
    "ramp_to_safe": (False, "deploy with max_action_rate: approach the safe command (watchdog, "
                            "non-finite action, a failed run) at the rate limit too, instead of at "
                            "once; the command sent as the actor stops is never ramped"),
    "executor": ("events", "executor of the actor's own process: events (rclpy EventsExecutor) "
                           "or single (SingleThreadedExecutor)"),
    "spin": ("block", "block: sleep until an event (no CPU while idle); poll: never sleep (one core "
                      "at 100 %, no wake-up latency, caches stay warm; with cpu_affinity on a core "
                      "of its own)"),
    "gc_freeze": (True, "deploy: gc.freeze() after start-up, so a collection skips every start-up "
                        "object (a full one: 11 ms -> 2 us measured)"),
    "cpu_affinity": ([], "CPU ids to pin every thread of the process to (os.sched_setaffinity); "
                         "[] = no pinning"),
    "sched_priority": (0, "SCHED_FIFO real-time priority (1-99) for every thread of the process "
                          "(needs CAP_SYS_NICE or an rtprio limit); 0 = the normal scheduler"),
    "reuse_sessions": (True, "policies swapped in at once (deploy; train with swap_delay -1): copy a "
                             "new model's weights into an idle session of the same graph instead "
                             "of building a session (opolo_ros/nodes/session_pool.py)"),
    "load_at_safe_points": (True, "loader thread: start each GIL-holding step of a policy load "
                                  "(session creation ~1 ms) right after a control step; false = "
                                  "at once"),
    "decode_policy_in_loader": (True, "read policy messages (taken serialized, with the "
                                      "pure-Python reader that bounds every length, as every "
                                      "subscription) in the loader thread at a safe point; "
                                      "false = read them in the subscription's callback, on the "
                                      "executor thread (0.13 ms per 270 kB model at p50)"),
    "stats_file": ("", "write control-path statistics (inference and callback time percentiles, "
                       "GC pauses, counters) as JSON to this file on exit; '' = none"),
    "echo_sequence": (False, "benchmarks: copy an observation's ('seq', n, 0) layout dim (for a "
                             "JointState: its stamp in us, mod 2**32) into the command's layout, "
                             "to match commands to observations (bench/latency.py, the sim bridge's "
                             "'stale' count)"),
}


def vector_parameter(name: str, values: list) -> np.ndarray:
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(f"parameter '{name}' must be a list of numbers, got {values!r}") from None
    if x.ndim != 1 or not np.isfinite(x).all():
        raise ParameterError(f"parameter '{name}' must be a list of finite numbers, got {values!r}")
    return x


def optional_vector(name: str, values: object) -> np.ndarray | None:
    """A list parameter declared with an empty default (dynamically typed): None when empty, a
    single number as a one-value list, else :func:`vector_parameter`'s checks."""
    if isinstance(values, bool) or not isinstance(values, (list, tuple, int, float)):
        raise ParameterError(f"parameter '{name}' must be a list of numbers, got {values!r}")
    if isinstance(values, (int, float)):
        values = [values]
    return vector_parameter(name, values) if len(values) else None


def observation_spec(joints: list, fields: list, offset: list, scale: list) -> m.ObservationSpec | None:
    """The JointState input's spec (None without `joints`: array input); ParameterError if bad."""
    values = {name: optional_vector(name, given)
              for name, given in (("joint_offset", offset), ("joint_scale", scale))}
    if not joints:
        if any(v is not None for v in values.values()):
            raise ParameterError("parameters 'joint_offset' / 'joint_scale' are for JointState input "
                                 "(set 'joints')")
        return None
    try:
        return m.ObservationSpec(tuple(joints), tuple(fields), offset=values["joint_offset"],
                                 scale=values["joint_scale"])
    except ValueError as err:
        raise ParameterError(f"joints / joint_fields / joint_offset / joint_scale: {err}") from None


def action_limits(low_values: list, high_values: list) -> tuple[np.ndarray | None, np.ndarray | None]:
    """`action_low` / `action_high` as arrays, None for a side left empty (the model's bound)."""
    low, high = optional_vector("action_low", low_values), optional_vector("action_high", high_values)
    if low is not None and high is not None:
        if low.size != high.size and 1 not in (low.size, high.size):
            raise ParameterError(f"action_low has {low.size} values, action_high {high.size}: give "
                                 "one value or one per action for each")
        if np.any(low > high):
            raise ParameterError(f"action_low {low.tolist()} exceeds action_high {high.tolist()}")
    return low, high


def clamp_bounds(limits: tuple[np.ndarray | None, np.ndarray | None], model_low: np.ndarray,
                 model_high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bounds commands are clamped to: the model's, tightened by the parameters' limits.
    ValueError (with the parameter's name) for limits of another size or outside the model's."""
    act_dim = model_low.size
    low, high = np.asarray(model_low, np.float64).copy(), np.asarray(model_high, np.float64).copy()
    for name, given, tighten in (("action_low", limits[0], np.maximum),
                                 ("action_high", limits[1], np.minimum)):
        if given is None:
            continue
        if given.size not in (1, act_dim):
            raise ValueError(f"parameter '{name}' has {given.size} values, the policy has act_dim "
                             f"{act_dim}")
        target = low if name == "action_low" else high
        tighten(target, np.broadcast_to(given, (act_dim,)), out=target)
    if np.any(low > high):
        raise ValueError(f"action limits [{limits[0]}, {limits[1]}] leave no command inside the model's "
                         f"bounds [{model_low.tolist()}, {model_high.tolist()}]")
    return low, high
