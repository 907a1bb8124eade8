"""sim_bridge: a MuJoCo simulation behind the robot's topics, and the replay stream for the learner.

Publishes ``observation`` (and ``/joint_states``), applies what arrives on ``action``, publishes
every transition on ``/opolo/replay`` (in batches) and each episode's environment return on
``episode_return`` (monitoring only: OPOLO never sees the reward). Two modes:

Lock-step (``mode: lockstep``, training)
    One action per observation, nothing dropped, reproducible for a seed. The bridge is an event
    driven state machine (no callback blocks, so it composes with any executor):

    1. publish the observation and wait for the action; observation and action are best effort,
       so if no action comes within ``action_timeout_s`` the same observation is published again
       (the actor answers a repeated observation with the action it already chose);
    2. step MuJoCo with the action (clipped to the bounds), queue the transition (s, a, s',
       terminated, truncated) with a in the environment's units, reset at an episode end;
    3. flow control (``flow_control: true``): the next observation goes out only while this
       bridge is at most ``max_ahead`` transitions ahead of what the learner has consumed *and
       trained on* (its acknowledgement on ``/opolo/learner_progress``); pending transitions are
       flushed before waiting, so the learner always has what it needs to catch up. With
       ``sync_policy`` it also waits until the actor has loaded the policy the learner exports
       once it has consumed the data up to ``max_ahead`` steps ago (version
       ``policy_every * floor((sent - max_ahead) / policy_every)``, announced by the actor on
       ``policy_version``). With the actor's ``swap_delay`` equal to ``max_ahead`` (and
       ``max_ahead < policy_every``) the policy behind each action is a function of the step
       alone: the run is reproducible for a seed, while the bridge and the actor work in parallel
       with the learner. With ``max_ahead: 0`` and ``policy_every`` equal to the schedule's
       ``train_freq`` every action comes from the policy the direct loop would use.

    The bridge starts stepping once the replay topic has ``wait_for_subscribers`` subscribers and,
    with flow control, once the learner has announced itself (without, it waits up to
    ``learner_wait_s`` for a learner whose progress publisher it sees, and up to
    ``DISCOVERY_GRACE_S`` for that publisher while only a replay subscriber is seen; a graph without
    a learner, as record_expert's, sets ``learner_wait_s`` 0); a restarted bridge
    continues its counts from the learner's acknowledgement (so a resumed learner keeps its
    schedule, and no batch of the new count is taken for a re-send of the old one).

    With flow control the bridge keeps the replay batches the learner has not acknowledged yet.
    When the learner's progress, which it re-publishes every second, falls silent for longer than
    ``learner_timeout_s`` and then returns (a learner that crashed and was started again), those
    batches are published again, same ``seq``: the ones the dead learner received but never
    journalled are not lost, and the learner drops the ones it has (``seq`` already acknowledged).
    The bridge holds its next step from the returned learner's first progress message to its
    second and re-sends then: a message reaches only the subscriptions DDS has matched when it is
    published, and the new learner's replay subscription may be matched a little after its
    progress publisher. The batches are also published again whenever some are unacknowledged
    and the acknowledgement has not moved for ``learner_timeout_s`` while the learner's progress
    keeps coming (at most once per ``learner_timeout_s``), so a re-send that was lost anyway, or a
    learner back within ``learner_timeout_s``, cannot leave the two waiting on each other. The
    learner consumes each bridge's batches in ``seq`` order: one that arrives after a gap waits
    there (its ``replay_gap_timeout_s``) for the re-sent ones before it. Its progress also says
    which batches it holds already, received with every one before them but not trained on yet
    (a busy learner, or one that several bridges feed): those are never sent again, so a slow
    learner is not sent its whole queue a second time every ``learner_timeout_s``.

Real time (``mode: realtime``)
    A wall-clock timer steps the simulation at ``rate_hz`` (default: the task's control rate),
    applying the newest action received (zero-order hold, zeros before the first), as a robot
    would. No flow control: a real robot cannot wait for a learner. ``time_scale`` > 1 runs the
    timer that much faster than real time (60 s of simulated time in 30 s with 2), for tests.
    ``held`` counts the steps, after the first command, that found no new command since the
    previous step (a controller meant to answer every step missed its deadline), logged at most
    every ``report_period_s``. ``held`` misses a command that comes late by more than a step: it
    is new at the step after, and applied there one step stale. A controller that echoes the
    ``/joint_states`` stamp in its command's layout (the actor's ``echo_sequence``) lets the bridge
    tell: ``answered`` counts the steps whose command names the observation it answers, ``stale``
    those of them whose command answers an older observation than the newest one published
    (held steps included), ``max_lag`` the most steps such a command was behind.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any

import numpy as np
from sensor_msgs.msg import JointState
from std_msgs.msg import Float32MultiArray, Float64, Float64MultiArray, Int64, Int64MultiArray

from opolo_ros.algo.config import SEED_MAX
from opolo_ros.data.bags import RESET_LABEL
from opolo_ros.nodes.common import FinishableNode, ParameterError, declare, run_node
from opolo_ros.ros import latency
from opolo_ros.ros import messages as m
from opolo_ros.ros.qos import EPISODE_RETURN_QOS, POLICY_VERSION_QOS, qos_for
from opolo_ros.ros.subscribe import subscribe
from opolo_ros.sim.task_ids import is_mjcf
from opolo_ros.sim.tasks import continuation_seed, control_period, joint_layout, make_task_env

MODES = ("lockstep", "realtime")
MIN_TIMEOUT_S = 1e-3  # a shorter one makes its timer a busy loop (re-sends every few microseconds)
DISCOVERY_GRACE_S = 3.0  # no flow control: how long a learner's progress publisher may lag its replay reader
WAIT_NOTE_AFTER_S = 5.0  # a bridge still waiting for its replay subscribers says why after this
TAGS_KEPT = 1000  # realtime: published observations a command can still be matched to


PARAMETERS: dict[str, tuple] = {
    "env_id": ("InvertedPendulum-v5", "Gymnasium MuJoCo task id, or a path to an MJCF (.xml) file"),
    "seed": (0, "seed of the simulation (first reset); the run is reproducible for a seed"),
    "time_feature": (False, "append 1 - t/T to the observation (must match the learner's run)"),
    "max_episode_steps": (0, "time limit per episode; 0 = the task's own (MJCF: 1000)"),
    "mode": ("lockstep", "lockstep: one action per observation (training); realtime: "
                         "wall-clock timer with zero-order hold of the newest action"),
    "rate_hz": (0.0, "realtime mode: steps per second; 0 = the task's control rate (1/dt)"),
    "time_scale": (1.0, "realtime mode: run the step timer this many times faster than rate_hz "
                        "(simulated seconds per wall-clock second, e.g. 10 for tests)"),
    "action_timeout_s": (0.5, "lockstep: re-publish the observation when no action came "
                              "within this time (observation/action are best effort)"),
    "flow_control": (True, "lockstep: wait on /opolo/learner_progress when ahead of the learner"),
    "max_ahead": (0, "lockstep flow control: most transitions this bridge may be ahead of the "
                     "learner's acknowledgement (0 = strict alternation with the learner)"),
    "sync_policy": (True, "lockstep flow control: wait until the actor runs the policy exported "
                          "for the learner's progress (needs policy_every as the learner's)"),
    "policy_every": (0, "the learner's policy export period in transitions (for sync_policy); "
                        "0 disables the policy wait"),
    "publish_replay": (True, "publish transitions on the replay topic"),
    "replay_batch": (50, "transitions per replay message (flushed earlier before waiting)"),
    "wait_for_subscribers": (1, "start stepping once the replay topic has this many subscribers"),
    "wait_for_state_subscribers": (0, "start stepping once the joint_states topic has this many "
                                      "subscribers: 2 for a controller and a recorder (opolo-ros "
                                      "record-topics), whose subscription comes up seconds after it "
                                      "discovers the bridge: else the first episode it records is "
                                      "the tail of one; 0 = no wait"),
    "reset_markers": (False, "publish a reset marker on the joint_states topic when an episode ends (a "
                             "JointState with header.frame_id 'reset' and no joints): a recording of "
                             "the joint states is then cut into episodes there (opolo-ros "
                             "record-topics; the demonstration reader's marker rule). Realtime mode "
                             "publishes the episode's last state before it (lockstep does not: a "
                             "controller would answer that state). On the observation topic, each "
                             "episode's first state carries a trailing layout dim labelled "
                             "'episode_start' (stride 0): a deploy actor's time-feature clock restarts "
                             "at either"),
    "wait_for_controller": (False, "start stepping once a controller is matched: a publisher on the "
                                   "action topic and a subscriber of the observation or joint_states "
                                   "topic (a simulated robot that must not run its first seconds "
                                   "uncommanded while DDS discovery completes)"),
    "observation_topic": ("observation", "observation topic (std_msgs/Float32MultiArray)"),
    "action_topic": ("action", "action topic (std_msgs/Float64MultiArray, environment units)"),
    "joint_states_topic": ("/joint_states", "sensor_msgs/JointState topic; empty = none"),
    "replay_topic": ("/opolo/replay", "replay transitions topic"),
    "progress_topic": ("/opolo/learner_progress", "learner progress topic (flow control)"),
    "policy_version_topic": ("policy_version", "the actor's active policy version (std_msgs/Int64)"),
    "episode_return_topic": ("episode_return", "environment return of each finished episode "
                                               "(std_msgs/Float64, monitoring only)"),
    "report_period_s": (30.0, "log the recent episode returns (and, in real time, the held steps) "
                              "at most this often"),
    "learner_timeout_s": (3.0, "flow control: learner progress silent this long = the learner is gone; "
                               "unacknowledged replay batches are re-sent when it returns, and "
                               "when its acknowledgement has not moved for this long"),
    "learner_wait_s": (30.0, "without flow control: before the first step, wait up to this long for "
                             "a learner whose progress publisher is there to announce itself (its "
                             "acknowledgement continues a restarted bridge's counts); 0 = do not wait"),
}


class SimBridge(FinishableNode):
    def __init__(self, *, node_name: str = "sim_bridge", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        p = self._declare_parameters()
        self.mode = p["mode"]
        self.no_reward = is_mjcf(p["env_id"])  # its returns are 0: not worth a log line
        self.env = make_task_env(p["env_id"], seed=p["seed"], time_feature=p["time_feature"],
                                 max_episode_steps=p["max_episode_steps"])
        for note in getattr(self.env.unwrapped, "notes", []):  # what an MJCF task leaves out
            self.get_logger().warning(note)
        self.obs_dim = int(self.env.observation_space.shape[0])
        self.act_dim = int(self.env.action_space.shape[0])
        self.low = self.env.action_space.low.astype(np.float64)
        self.high = self.env.action_space.high.astype(np.float64)
        self.seed = p["seed"]
        self.obs, _ = self.env.reset(seed=self.seed)
        self.joint_names, self._qpos, self._qvel = joint_layout(self.env)
        self.source = m.bridge_source_id(self.get_fully_qualified_name())

        # counters: `sent` transitions produced (queued or published), `acked` consumed by the learner
        self.steps = 0  # env steps taken by this bridge process
        self.diverged = 0  # steps where the simulation blew up (sent as void replay steps)
        self.sent = 0
        self.acked = 0
        self.acked_seq = -1  # the newest batch acknowledged
        self.learner_transitions = 0
        self.learner_gradient_steps = 0
        self.actor_version = -1
        self.seq = 0
        self.episodes = 0
        self.episode_return = 0.0
        self.episode_len = 0
        self.republished = 0
        self.waits = 0  # times the bridge had to wait for the learner
        self.resent = 0  # replay batches published again for a restarted learner
        self.rejected = {"action": 0, "learner progress": 0, "policy version": 0}  # messages dropped
        self.held = 0  # realtime: steps after the first command that got no new one (missed deadline)
        self.uncommanded = 0  # realtime: steps before any command came (run with zero action)
        self.answered = 0  # realtime: steps whose command names the observation it answers
        self.stale = 0  # realtime: ... and it is not the newest one published (late by >= 1 step)
        self.max_lag = 0  # realtime: most steps between the observation answered and the newest
        self._published_tags: dict[int, int] = {}  # JointState stamp tag -> steps done, oldest first
        self._answers: int | None = None  # the observation (steps done) the newest command answers
        # (seq, msg, transitions in it), flow control only
        self._unacked: deque[tuple[int, Float32MultiArray, int]] = deque()
        self._last_progress = time.monotonic()
        self._last_ack_move = self._last_progress  # when the ack last moved, or batches were re-sent
        self._learner_has = -1  # newest seq the learner holds with all before it (its progress)
        self._returned = 0.0  # > 0: the learner came back after this much silence; re-send is due
        self.started = False
        self._learner_seen = False
        self._created = time.monotonic()
        self._pending: list[np.ndarray] = []
        self._waiting_action = False
        self._step_republished = False
        self._last_obs_pub = 0.0
        self._dup_guard: bytes | None = None
        self._latest_action = np.zeros(self.act_dim)
        self._fresh_action = False  # realtime: a command arrived since the last step
        self._commanded = False  # realtime: any command arrived yet
        self._returns: list[float] = []
        self._last_report = time.monotonic()

        self._obs_msg = m.make_observation_msg(self.obs_dim)
        self.obs_pub = self.create_publisher(Float32MultiArray, p["observation_topic"],
                                             qos_for("observation"))
        self.joint_pub = (self.create_publisher(JointState, p["joint_states_topic"],
                                                qos_for("joint_states"))
                          if p["joint_states_topic"] and self.joint_names else None)
        self.replay_pub = (self.create_publisher(Float32MultiArray, p["replay_topic"],
                                                 qos_for("replay"))
                           if p["publish_replay"] else None)
        self.return_pub = self.create_publisher(Float64, p["episode_return_topic"], EPISODE_RETURN_QOS)
        self.action_sub = subscribe(self, Float64MultiArray, p["action_topic"], self._on_action,
                                    qos_for("action"), self._reject_action, "action")
        self.wait_for_controller = bool(p["wait_for_controller"])
        self.reset_markers = bool(p["reset_markers"])
        self.progress_sub = (subscribe(self, Int64MultiArray, p["progress_topic"], self._on_progress,
                                       qos_for("learner_progress"), self._reject_progress,
                                       "learner progress")
                             if p["publish_replay"] else None)  # without flow control: for the counts only
        if self.flow_control and self.sync_policy:
            subscribe(self, Int64, p["policy_version_topic"], self._on_version, POLICY_VERSION_QOS,
                      self._reject_version, "policy version")
        if self.mode == "lockstep":
            self._timer = self.create_timer(min(0.02, self.action_timeout / 4), self._tick)
        else:
            rate = (p["rate_hz"] or 1.0 / control_period(self.env)) * p["time_scale"]
            if not 1e-3 <= rate <= 1e5:  # a timer period rcl can represent, and a useful one
                raise ParameterError(f"real-time step rate {rate:g} Hz (rate_hz x time_scale) is outside "
                                     "1e-3..1e5 Hz")
            self._timer = self.create_timer(1.0 / rate, self._realtime_step)
        self.get_logger().info(
            f"{p['env_id']} ({self.mode}, obs_dim {self.obs_dim}, act_dim {self.act_dim}, "
            f"seed {p['seed']}); flow control {'on' if self.flow_control else 'off'}"
            + (f", max_ahead {self.max_ahead}, sync_policy {self.sync_policy}" if self.flow_control else ""))

    def _declare_parameters(self) -> dict[str, Any]:
        p = {name: declare(self, name, default, desc) for name, (default, desc) in PARAMETERS.items()}
        if p["mode"] not in MODES:
            raise ParameterError(f"parameter 'mode' must be one of {MODES}, got {p['mode']!r}")
        for name in ("seed", "max_ahead", "policy_every", "wait_for_subscribers", "max_episode_steps",
                     "wait_for_state_subscribers"):
            if p[name] < 0:
                raise ParameterError(f"parameter '{name}' must be >= 0, got {p[name]}")
        if p["seed"] > SEED_MAX:
            raise ParameterError(f"parameter 'seed' must be at most {SEED_MAX}, got {p['seed']}")
        if p["replay_batch"] < 1:
            raise ParameterError(f"parameter 'replay_batch' must be >= 1, got {p['replay_batch']}")
        # `not x > 0` also refuses NaN, which every comparison would let through
        # (name, least, whether least itself is refused); NaN fails both comparisons
        for name, least, strict in (("action_timeout_s", MIN_TIMEOUT_S, False),
                                    ("learner_timeout_s", MIN_TIMEOUT_S, False), ("time_scale", 0.0, True),
                                    ("rate_hz", 0.0, False), ("learner_wait_s", 0.0, False),
                                    ("report_period_s", 0.0, False)):
            value = p[name]
            if not (math.isfinite(value) and (value > least if strict else value >= least)):
                raise ParameterError(f"parameter '{name}' must be a finite number "
                                     f"{'>' if strict else '>='} {least:g}, got {value}")
        self.learner_timeout = p["learner_timeout_s"]
        self.learner_wait = p["learner_wait_s"]
        self.flow_control = p["mode"] == "lockstep" and p["flow_control"] and p["publish_replay"]
        self.sync_policy = p["sync_policy"] and p["policy_every"] > 0
        self.max_ahead = p["max_ahead"]
        self.policy_every = p["policy_every"]
        self.action_timeout = p["action_timeout_s"]
        self.report_period = p["report_period_s"]
        self.replay_batch = p["replay_batch"]
        self.wait_for_subscribers = p["wait_for_subscribers"] if p["publish_replay"] else 0
        self.wait_for_state_subscribers = p["wait_for_state_subscribers"]
        if self.wait_for_state_subscribers and not p["joint_states_topic"]:
            raise ParameterError("parameter 'wait_for_state_subscribers' needs a joint_states_topic "
                                 "(it is empty: no joint states are published)")
        return p

    # ------------------------------------------------------------------ subscriptions
    # one log line each: rclpy throttles per call site, so bad actions do not hide bad progress
    def _reject_action(self, err: m.MessageError) -> None:
        self.rejected["action"] += 1
        self.get_logger().warning(f"rejected action: {err}", throttle_duration_sec=5.0)

    def _reject_progress(self, err: m.MessageError) -> None:
        self.rejected["learner progress"] += 1
        self.get_logger().warning(f"rejected learner progress: {err}", throttle_duration_sec=5.0)

    def _reject_version(self, err: m.MessageError) -> None:
        self.rejected["policy version"] += 1
        self.get_logger().warning(f"rejected policy version: {err}", throttle_duration_sec=5.0)

    def _on_action(self, msg: Float64MultiArray) -> None:
        tag = latency.pop_sequence(msg)  # a controller's echo of the observation it answers
        try:
            action = m.msg_to_action(msg, self.act_dim)
        except m.MessageError as err:
            self._reject_action(err)
            return
        if self.mode == "realtime":
            self._latest_action = action
            self._fresh_action = self._commanded = True
            self._answers = None if tag is None else self._published_tags.get(tag)
            return
        if not self._waiting_action:
            return  # a duplicate answer to an observation already stepped
        if self._dup_guard is not None:
            guard, self._dup_guard = self._dup_guard, None
            if action.tobytes() == guard:
                return  # late duplicate of the previous step's (re-requested) action
        self._waiting_action = False
        self._step(action, republished=self._step_republished)
        self._advance()

    def _on_progress(self, msg: Int64MultiArray) -> None:
        try:
            progress = m.msg_to_progress(msg)
        except m.MessageError as err:
            self._reject_progress(err)
            return
        ack = progress.acks.get(self.source)
        if not self._learner_seen:
            self._learner_seen = True
            if ack is not None and not self.started:  # a restarted bridge: continue the learner's counts
                self.sent = self.acked = ack.transitions
                self.acked_seq, self.seq = ack.seq, ack.seq + 1
                # and from another initial state: the seed's own would repeat the first run's
                # episodes (with the actor's warm-up noise, bit for bit)
                self.obs, _ = self.env.reset(seed=continuation_seed(self.seed, ack.transitions))
        if not self.flow_control:  # the counts are all it takes from the progress
            return
        self.learner_transitions = progress.transitions
        self.learner_gradient_steps = progress.gradient_steps
        now = time.monotonic()
        silent, self._last_progress = now - self._last_progress, now
        # What the learner holds, from every message: a learner back with an older acknowledgement
        # (an overtaken message, or one resumed from an older checkpoint) may lack what the last one had
        self._learner_has = -1 if ack is None else progress.received.get(self.source, ack.seq)
        if ack is not None and ack.seq < self.acked_seq:
            ack = None  # older than one already taken (a message that was overtaken): nothing new
        if ack is not None:
            if ack.transitions < self.acked:  # a newer batch, a lower count: a learner counting anew
                self._rebase(ack)
            self.acked_seq = ack.seq
            if ack.transitions > self.acked:
                self._last_ack_move = now
            self.acked = max(self.acked, ack.transitions)
            while self._unacked and self._unacked[0][0] <= ack.seq:
                self._unacked.popleft()
        if not self._unacked:
            self._returned = 0.0
        elif silent > self.learner_timeout and not self._returned:
            self._returned = silent  # hold; re-send with its next message (see module docstring)
        elif self._returned:
            self.get_logger().warning(f"learner progress returned after {self._returned:.1f} s of "
                                      f"silence: re-sent {self._resend()} unacknowledged replay batches")
            self._returned = 0.0
        elif self._stalled(now):  # a busy learner (evaluating) drops them as duplicates: info only
            waited = now - self._last_ack_move
            self.get_logger().info(f"the learner's acknowledgement has not moved for {waited:.1f} s: "
                                   f"re-sent {self._resend()} unacknowledged replay batches "
                                   f"({self.resent} so far)", throttle_duration_sec=self.report_period)
        if self.started and not self._waiting_action:
            self._advance()

    def _rebase(self, ack: m.SourceAck) -> None:
        """The learner's count for this source went back: a learner that started over (resume
        false, another run folder) while this bridge ran. Its count is taken, or `sent - acked`
        stayed above `max_ahead` for good and the graph waited without a word."""
        in_flight = sum(rows for seq, _, rows in self._unacked if seq > ack.seq) + len(self._pending)
        self.get_logger().error(
            f"the learner's count for this bridge went back from {self.acked} to {ack.transitions} "
            "transitions: a learner that started over? Counting from its count; restart the actors "
            "too (they ignore the new learner's policies, whose versions are older than theirs)",
            throttle_duration_sec=self.report_period)
        self.acked, self.sent = ack.transitions, ack.transitions + in_flight

    def _on_version(self, msg: Int64) -> None:
        version = int(msg.data)
        if not 0 <= version <= m.UINT32_MAX:  # a policy's version is a uint32 (its message's layout)
            self._reject_version(m.MessageError(f"policy version {version} is outside 0..{m.UINT32_MAX}"))
            return  # a huge one would be taken as the actor running every policy to come
        self.actor_version = max(self.actor_version, version)
        if self.started and not self._waiting_action:
            self._advance()

    # ------------------------------------------------------------------ lock-step
    def ready(self) -> bool:
        """Whether the graph is up: replay subscribers and (with flow control) the learner.

        Without flow control a learner is not waited for, but one that is there (its progress
        publisher matched; while only its replay subscriber is, for up to ``DISCOVERY_GRACE_S``) is
        heard first, for up to ``learner_wait_s`` from the bridge's start (a resumed learner
        announces itself once its checkpoint is loaded and its replay journal consumed): its
        acknowledgement gives a restarted bridge its counts. Else the new batch 0, bit-identical to
        the first one for the same seed, was taken for a re-send and every batch up to the old count
        dropped. (Batches of the old bridge still queued in the learner take the place of the new
        bridge's first ones with the same ``seq``: the counts agree, those few transitions are the
        old run's.)"""
        if self.wait_for_controller and not self._controller_matched():
            self._note_waiting("waiting for a controller (wait_for_controller): a publisher on "
                               f"{self.action_sub.topic_name} and a subscriber of the state")
            return False
        states = self.joint_pub
        if states is not None and states.get_subscription_count() < self.wait_for_state_subscribers:
            self._note_waiting(f"waiting for {self.wait_for_state_subscribers} subscriber(s) of "
                               f"{states.topic_name} (wait_for_state_subscribers: a controller and a "
                               f"recorder) before the first step; {states.get_subscription_count()} so far")
            return False
        pub = self.replay_pub
        if pub is not None and pub.get_subscription_count() < self.wait_for_subscribers:
            self._note_waiting(f"waiting for {self.wait_for_subscribers} subscriber(s) of {pub.topic_name} "
                               "(a learner) before the first step; a bridge without a learner (deploying, "
                               "recording a robot's joint states): publish_replay:=false")
            return False
        if self._learner_seen:
            return True
        if self.flow_control:
            return False
        if self.progress_sub is None:
            return True
        waited = time.monotonic() - self._created
        if self.progress_sub.get_publisher_count() > 0:
            return waited >= self.learner_wait
        # A replay subscriber (a learner, most likely) whose progress publisher is not discovered yet:
        # DDS discovers each endpoint on its own, and a restarted bridge that started before hearing
        # the learner counted anew, its batches dropped as re-sends (seen on a loaded machine).
        subscribed = pub is not None and pub.get_subscription_count() > 0
        return not subscribed or waited >= min(self.learner_wait, DISCOVERY_GRACE_S)

    def _note_waiting(self, text: str) -> None:
        """Why the bridge has not started, once it has waited WAIT_NOTE_AFTER_S (then throttled)."""
        if time.monotonic() - self._created > WAIT_NOTE_AFTER_S:
            self.get_logger().info(text, throttle_duration_sec=self.report_period)

    def _controller_matched(self) -> bool:
        """A publisher on the action topic, and a subscriber of what the bridge publishes."""
        watched = self.obs_pub.get_subscription_count() + (
            self.joint_pub.get_subscription_count() if self.joint_pub is not None else 0)
        return self.action_sub.get_publisher_count() > 0 and watched > 0

    def may_step(self) -> bool:
        """Flow control: within `max_ahead` of the learner, and the actor runs the due policy."""
        if not self.flow_control:
            return True
        if self._returned or self.sent - self.acked > self.max_ahead:
            return False
        if self.sync_policy and self.actor_version < self.due_version():
            return False
        return True

    def _stalled(self, now: float) -> bool:
        """Unacknowledged batches, and no acknowledgement for `learner_timeout` (see docstring)."""
        return (bool(self._unacked) and now - self._last_ack_move > self.learner_timeout
                and self._unacked[-1][0] > self._learner_has)  # not all in the learner's queue

    def due_version(self) -> int:
        """The policy version the actor needs before this bridge's next step (see module docstring)."""
        consumed = max(self.sent - self.max_ahead, 0)  # what the learner has surely consumed by now
        return (consumed // self.policy_every) * self.policy_every

    def _tick(self) -> None:
        if not self.started:
            if self.ready():
                self.started = True
                self._advance()
            return
        if self._waiting_action and time.monotonic() - self._last_obs_pub > self.action_timeout:
            self.republished += 1
            self._step_republished = True
            self._publish_observation()
        elif not self._waiting_action:
            self._advance()
            self._note_silent_learner()

    def _note_silent_learner(self) -> None:
        """Held back by flow control while the learner says nothing: a learner that was stopped or
        killed (restarted, it resumes from its checkpoint); the bridge waited without a word."""
        silent = time.monotonic() - self._last_progress
        patience = max(WAIT_NOTE_AFTER_S, 2 * self.learner_timeout)  # a learner set to report seldom
        if self.flow_control and not self._waiting_action and silent > patience:
            self.get_logger().warning(
                f"no progress from the learner for {silent:.0f} s (stopped? restarted, it resumes from its "
                f"checkpoint): waiting, {self.sent - self.acked} transitions not acknowledged yet",
                throttle_duration_sec=self.report_period)

    def _advance(self) -> None:
        """Publish the next observation if flow control allows, else flush and wait."""
        if self._waiting_action:
            return
        if not self.may_step():
            if self._pending:
                self._flush()
                self.waits += 1
            return
        self._waiting_action = True
        self._step_republished = False
        self._publish_observation()

    def _publish_observation(self) -> None:
        """The observation, and the same state on the joint states topic (the initial state and
        re-published observations included: a controller that reads only /joint_states waits
        for it)."""
        m.fill_observation_msg(self._obs_msg, self.obs)
        if self.reset_markers:  # a deploy actor's time-feature clock restarts at an episode's first state
            m.mark_episode_start(self._obs_msg, self.episode_len == 0)
        self._last_obs_pub = time.monotonic()
        self.obs_pub.publish(self._obs_msg)
        if self.joint_pub is not None:
            self._publish_joint_states()

    # ------------------------------------------------------------------ stepping
    def _step(self, action: np.ndarray, republished: bool = False) -> None:
        a = np.clip(action, self.low, self.high)
        next_obs, reward, term, trunc, info = self.env.step(a)
        void = bool(info.get("diverged"))
        if void:  # the step happened (it counts everywhere) but its s' and reward mean nothing
            self._diverged()
            next_obs, reward, term, trunc = self.obs, 0.0, False, True
        if self.replay_pub is not None:
            flag = m.VOID if void else float(term)
            self._pending.append(np.concatenate([self.obs, a, next_obs, [reward, flag, trunc]])
                                 .astype(np.float32))
        self.sent += 1
        self.steps += 1
        self.episode_return += float(reward)
        self.episode_len += 1
        self._dup_guard = action.tobytes() if republished else None
        self.obs = next_obs
        if term or trunc:
            self._end_episode(void)
        if len(self._pending) >= self.replay_batch:
            self._flush()

    def _diverged(self) -> None:
        """The simulation blew up on this step: counted and logged; the step goes out as a void
        replay step (counted by the learner, never stored), the episode ends, the sim resets."""
        self.diverged += 1
        self.get_logger().warning(
            f"the simulation diverged (NaN, inf or huge state; {self.diverged} so far): episode ended "
            f"after {self.episode_len + 1} steps, that step's transition is void", throttle_duration_sec=5.0)

    def _end_episode(self, void: bool = False) -> None:
        self.episodes += 1
        self._returns.append(self.episode_return)
        self.return_pub.publish(Float64(data=self.episode_return))
        now = time.monotonic()
        if now - self._last_report >= self.report_period:
            self._last_report = now
            recent = self._returns[-10:]
            said = ("no reward (an MJCF model)" if self.no_reward else
                    f"mean return of the last {len(recent)} {np.mean(recent):.1f}")
            self.get_logger().info(f"{self.episodes} episodes, {self.steps} steps: {said}")
        self.episode_return, self.episode_len = 0.0, 0
        marked = self.reset_markers and self.joint_pub is not None
        if marked and self.mode == "realtime" and not void:  # the episode's last state (a recording's
            self._publish_joint_states()  # s_T; after a diverged step MuJoCo's data is reset: none)
        self.obs, _ = self.env.reset()
        if marked:
            marker = JointState()
            marker.header.frame_id = RESET_LABEL
            marker.header.stamp = self.get_clock().now().to_msg()
            self.joint_pub.publish(marker)

    def _flush(self) -> None:
        if not self._pending or self.replay_pub is None:
            return
        rows = np.stack(self._pending)
        self._pending.clear()
        o, a = self.obs_dim, self.act_dim
        void = rows[:, -2] == m.VOID
        msg = m.replay_to_msg(rows[:, :o], rows[:, o:o + a], rows[:, o + a:2 * o + a], rows[:, -3],
                              rows[:, -2] == 1.0, rows[:, -1], seq=self.seq, source=self.source, void=void)
        if self.flow_control:
            if not self._unacked:
                self._last_ack_move = time.monotonic()  # the wait for an acknowledgement starts
            self._unacked.append((self.seq, msg, len(rows)))
        self.seq += 1
        self.replay_pub.publish(msg)

    def _resend(self) -> int:
        """Publish the unacknowledged batches again, oldest first (the learner drops duplicates),
        but for those the learner says it holds already (received, queued for training)."""
        again = [msg for seq, msg, _ in self._unacked if seq > self._learner_has]
        for msg in again:
            self.replay_pub.publish(msg)
        self.resent += len(again)
        self._last_ack_move = time.monotonic()  # at most once per learner_timeout
        return len(again)

    def _publish_joint_states(self) -> None:
        data = self.env.unwrapped.data
        msg = m.joint_state_msg(self.joint_names, data.qpos[self._qpos], data.qvel[self._qvel],
                                stamp=self.get_clock().now().to_msg())
        if self.mode == "realtime":
            self._remember_tag(latency.stamp_sequence(msg.header.stamp))
        self.joint_pub.publish(msg)

    def _remember_tag(self, tag: int) -> None:
        """Which observation a command answers, for the newest TAGS_KEPT published ones."""
        tags = self._published_tags
        tags[tag] = self.steps
        if len(tags) > TAGS_KEPT:
            del tags[next(iter(tags))]  # dicts keep insertion order: the oldest

    # ------------------------------------------------------------------ real time
    def _realtime_step(self) -> None:
        if not self.started:
            if self.ready():
                self.started = True
                self._publish_observation()  # the initial state: the first command answers it
            return
        if not self._commanded:  # no controller yet: without a word the sim ran on with zero action
            self.uncommanded += 1
            self.get_logger().info(
                f"{self.uncommanded} steps without any command yet on {self.action_sub.topic_name}: the "
                "simulation runs with zero action (wait_for_controller:=true waits for a controller)",
                throttle_duration_sec=self.report_period)
        elif not self._fresh_action:
            self.held += 1
            self.get_logger().info(f"{self.held} of {self.steps} steps found no new command (held the "
                                   "previous one)", throttle_duration_sec=self.report_period)
        if self._commanded and self._answers is not None:
            self.answered += 1
            lag = self.steps - self._answers  # the newest observation is the one after self.steps steps
            if lag > 0:
                self.stale += 1
                self.max_lag = max(self.max_lag, lag)
                self.get_logger().info(f"{self.stale} of {self.answered} steps applied a command that "
                                       "answers an older observation than the newest",
                                       throttle_duration_sec=self.report_period)
        self._fresh_action = False
        self._step(self._latest_action)
        self._publish_observation()

    @property
    def mean_recent_return(self) -> float:
        return float(np.mean(self._returns[-10:])) if self._returns else math.nan

    def close(self) -> None:
        if self.diverged:  # the running warning is throttled: the total, once
            self.get_logger().warning(f"the simulation diverged on {self.diverged} steps in all (their "
                                      "transitions were void)")
        try:
            self._flush()
        except Exception as err:  # the context may already be shut down (Ctrl-C)
            self.get_logger().warning(f"could not flush {len(self._pending)} transitions: {err}")
        self.env.close()


def main(args: list[str] | None = None) -> int:
    return run_node(SimBridge, args)


if __name__ == "__main__":
    raise SystemExit(main())
