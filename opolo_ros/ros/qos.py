"""QoS profiles of the topic contract (see the design's topic table).

One named profile per topic, so every node that publishes or subscribes a topic uses the same
policies: a mismatch between offered and requested QoS (for instance a best-effort publisher and a
reliable subscriber, or a volatile publisher and a transient-local subscriber) is not an error in
ROS 2 but a silent "no messages", which is hard to debug in a running graph.

Why each profile is what it is:

- ``observation`` / ``action``: control data, only the newest sample matters; a late sample is
  worse than none. Best effort, keep last 1, volatile.
- ``/joint_states``: the ROS sensor-data preset (best effort, keep last 5), which is what RViz,
  ``robot_state_publisher`` and most drivers use.
- ``/opolo/replay``: every transition is training data, so reliable, and deep (keep last 1000
  *batches*) so a learner that pauses briefly (a checkpoint, a GC) does not lose any. Volatile: a
  learner that starts late must not be flooded with stale data from a previous run.
- ``/opolo/demonstrations``: reliable and transient local (keep last 100 episodes), so a learner that
  starts after the demo player has finished still receives every episode.
- ``/opolo/policy``: reliable, transient local, depth 1: a late-joining actor (also on another
  host) immediately receives the newest policy and nothing older.
- ``/opolo/learner_progress``: reliable, keep last 10; only the newest matters for flow control, but
  reliability means a bridge waiting on progress is never starved by a dropped sample.
- ``policy_version`` (actor -> bridge): reliable, transient local, depth 1: a bridge started after
  the actor learns the active version at once.
- ``episode_return``: reliable, keep last 10 (monitoring).

ros2_control caveat: ``forward_command_controller`` subscribes ``~/commands`` with
``SystemDefaultsQoS`` (reliable). A best-effort publisher is *incompatible* with a reliable
subscriber, so an actor that drives ros2_control must publish with :data:`COMMAND_QOS` (reliable,
keep last 1), which a best-effort subscriber (the sim bridge) also accepts.
"""

from __future__ import annotations

from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)

REPLAY_DEPTH = 1000
DEMONSTRATIONS_DEPTH = 100
LEARNER_PROGRESS_DEPTH = 10


def _profile(depth: int, reliability: ReliabilityPolicy,
             durability: DurabilityPolicy = DurabilityPolicy.VOLATILE) -> QoSProfile:
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth, reliability=reliability,
                      durability=durability)


OBSERVATION_QOS = _profile(1, ReliabilityPolicy.BEST_EFFORT)
ACTION_QOS = _profile(1, ReliabilityPolicy.BEST_EFFORT)
COMMAND_QOS = _profile(1, ReliabilityPolicy.RELIABLE)
JOINT_STATES_QOS = qos_profile_sensor_data
REPLAY_QOS = _profile(REPLAY_DEPTH, ReliabilityPolicy.RELIABLE)
DEMONSTRATIONS_QOS = _profile(DEMONSTRATIONS_DEPTH, ReliabilityPolicy.RELIABLE,
                              DurabilityPolicy.TRANSIENT_LOCAL)
POLICY_QOS = _profile(1, ReliabilityPolicy.RELIABLE, DurabilityPolicy.TRANSIENT_LOCAL)
LEARNER_PROGRESS_QOS = _profile(LEARNER_PROGRESS_DEPTH, ReliabilityPolicy.RELIABLE)
POLICY_VERSION_QOS = _profile(1, ReliabilityPolicy.RELIABLE, DurabilityPolicy.TRANSIENT_LOCAL)
EPISODE_RETURN_QOS = _profile(10, ReliabilityPolicy.RELIABLE)

TOPIC_QOS: dict[str, QoSProfile] = {
    "observation": OBSERVATION_QOS,
    "action": ACTION_QOS,
    "joint_states": JOINT_STATES_QOS,
    "replay": REPLAY_QOS,
    "demonstrations": DEMONSTRATIONS_QOS,
    "policy": POLICY_QOS,
    "learner_progress": LEARNER_PROGRESS_QOS,
    "policy_version": POLICY_VERSION_QOS,
    "episode_return": EPISODE_RETURN_QOS,
}


def qos_for(role: str) -> QoSProfile:
    """The contract's profile for a topic role (a key of :data:`TOPIC_QOS`, e.g. ``"replay"``).

    Keyed by role, not by topic name, because every topic name is a remappable parameter.
    """
    if role not in TOPIC_QOS:
        raise KeyError(f"no QoS profile for topic role {role!r}; known: {sorted(TOPIC_QOS)}")
    return TOPIC_QOS[role]
