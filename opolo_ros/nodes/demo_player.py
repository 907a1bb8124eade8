"""demo_player: publishes the expert episodes of a bag (or folder of bags, or .npz) for the learner.

One ``/opolo/demonstrations`` message per episode (the demonstration layout of
:mod:`opolo_ros.ros.messages`), reliable and transient local, published once at start-up. The
node then stays up: a transient-local topic is only replayed to late subscribers (a learner that
starts or restarts later) while its publisher lives.
"""

from __future__ import annotations

import math
from typing import Any

from std_msgs.msg import Float32MultiArray

from opolo_ros.algo.config import RunConfig
from opolo_ros.data.demos import Episode, cut_last_note, load_episodes, rate_note
from opolo_ros.errors import one_line
from opolo_ros.nodes.common import FinishableNode, ParameterError, declare, run_node
from opolo_ros.ros import messages as m
from opolo_ros.ros.qos import DEMONSTRATIONS_DEPTH, qos_for
from opolo_ros.sim.tasks import demo_joints, env_joint_names, make_task_env, task_control_period

PARAMETERS: dict[str, tuple] = {
    "demos": ("", "rosbag2 bag folder, storage file, folder of bags, or .npz"),
    "topic": ("/opolo/demonstrations", "demonstrations topic"),
    "num_demos": (0, "publish at most this many episodes; 0 = all"),
    "bag_topic": ("", "topic to read from the bag; empty = automatic (/opolo/demonstrations, else "
                      "the only state topic)"),
    "bag_joints": ("", "sensor_msgs/JointState bags: joint names in policy order, comma-separated; "
                       "empty = env_id's model joints, else the first message's order"),
    "env_id": ("", "the task (Gymnasium id or MJCF file) whose policy the episodes are for: a "
                   "JointState bag without bag_joints is read by its model's joint names"),
    "bag_fields": ("position,velocity", "sensor_msgs/JointState bags: the fields, in order"),
    "episode_gap_s": (0.5, "observation streams: a gap this long (seconds) starts a new episode"),
    "bag_obs_field": ("", "other message types: the fields that make the observation, "
                          "comma-separated dotted paths (e.g. pose.pose,twist.twist)"),
}


class DemoPlayer(FinishableNode):
    def __init__(self, *, node_name: str = "demo_player", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        p = {name: declare(self, name, default, desc) for name, (default, desc) in PARAMETERS.items()}
        demos, topic, count = p["demos"], p["topic"], p["num_demos"]
        if not demos:
            raise ParameterError("parameter 'demos' (the bag or .npz to play) is required")
        if count < 0:
            raise ParameterError(f"parameter 'num_demos' must be >= 0, got {count}")
        joints = p["bag_joints"] or self._model_joints(p)
        try:
            episodes = load_episodes(demos, topic=p["bag_topic"], joints=joints, fields=p["bag_fields"],
                                     episode_gap_s=p["episode_gap_s"], obs_field=p["bag_obs_field"])
        except ValueError as err:
            if joints == p["bag_joints"] or "missing from the JointState" not in str(err):
                raise
            raise ValueError(f"{err} (with env_id and no bag_joints a JointState bag is read by the model's "
                             f"joint names, {joints}: a bag whose joints are named otherwise needs "
                             "bag_joints:=<its names of those joints, in that order>)") from None
        self.episodes: list[Episode] = episodes[:count] if count else episodes
        rate = rate_note(self.episodes, task_control_period(p["env_id"]) if p["env_id"] else None)
        if rate:
            self.get_logger().warning(f"{rate} ({p['env_id']})")
        cut = cut_last_note(self.episodes)
        if cut:
            self.get_logger().warning(f"{cut} ({demos})")
        if len(self.episodes) > DEMONSTRATIONS_DEPTH:
            self.get_logger().warning(f"{len(self.episodes)} episodes but the topic keeps the last "
                                      f"{DEMONSTRATIONS_DEPTH} for late subscribers")
        self.pub = self.create_publisher(Float32MultiArray, topic, qos_for("demonstrations"))
        for k, ep in enumerate(self.episodes):
            self.pub.publish(m.demonstration_to_msg(ep.obs, ep.ret, k))
        returns = [ep.ret for ep in self.episodes]
        left = len(episodes) - len(self.episodes)
        note = (f"; {left} more in it left out (num_demos {count}; 0 = all)" if left
                else f"; num_demos {count}: it holds no more" if count > len(episodes) else "")
        said = ("returns unknown" if all(math.isnan(r) for r in returns)  # a state stream, an MJCF task
                else f"returns {', '.join(f'{r:.1f}' for r in returns)}")
        self.get_logger().info(f"published {len(self.episodes)} episodes from {demos} on {topic} "
                               f"({said}){note}")


    @staticmethod
    def _model_joints(p: dict[str, Any]) -> str:
        """The joints a JointState bag is read by for `env_id`'s model (as sim_train's graph and
        the direct loop read it: ``sim.tasks.demo_joints``); '' without a task, or for a bag that
        is no JointState of the model's positions and velocities."""
        import gymnasium as gym

        from opolo_ros.data.bags import JOINT_STATE, demonstration_type

        if not p["env_id"] or demonstration_type(p["demos"], p["bag_topic"] or None) != JOINT_STATE:
            return ""  # (no task to make for the project's own layout or an array stream)
        try:
            env = make_task_env(p["env_id"])
        except (ValueError, OSError, gym.error.Error) as err:  # no such task
            raise ParameterError(f"parameter 'env_id' {p['env_id']!r}: {one_line(err)}") from None
        try:
            cfg = RunConfig(env_id=p["env_id"], demos=p["demos"], demos_topic=p["bag_topic"],
                            demos_fields=p["bag_fields"], demos_obs_field=p["bag_obs_field"],
                            time_feature=False)
            return demo_joints(cfg, env_joint_names(env), int(env.observation_space.shape[0]))
        finally:
            env.close()


def main(args: list[str] | None = None) -> int:
    return run_node(DemoPlayer, args)


if __name__ == "__main__":
    raise SystemExit(main())
