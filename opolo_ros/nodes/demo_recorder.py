"""demo_recorder: records the state stream of an expert run into a rosbag2 bag, episode by episode.

The states come from the replay stream of the sim bridge (``/opolo/replay``: reliable, in order,
with the episode-end flags), so nothing is lost and every episode is exact: s_0, then the s' of
each transition, the last one being the state where the episode ended (which the ``observation``
topic never shows, since a reset follows). Actions and rewards are dropped (state-only
demonstrations); the episode return is kept for the normalised score.

Each finished episode is published at once on ``/opolo/demonstrations`` (transient local, so a
learner can train from a live recording); after ``episodes`` episodes the bag is written with
``opolo_ros.data.bags.write_demonstrations`` (MCAP by default, or sqlite3) and the node is
finished, which ends ``record_expert.launch.py``. Transitions of other replay sources than the
first one seen are ignored (one expert run per recording). With ``skip_terminated`` an episode that
ends by termination (a fall) rather than the time limit is no demonstration: it is dropped, logged,
and counted in the bag's metadata (``skipped_terminated``), as ``opolo-ros record --skip-terminated``
does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from std_msgs.msg import Float32MultiArray

from opolo_ros.data.demos import Episode
from opolo_ros.nodes.common import FinishableNode, ParameterError, declare, run_node
from opolo_ros.ros import messages as m
from opolo_ros.ros.qos import qos_for
from opolo_ros.ros.subscribe import subscribe
from opolo_ros.signals import hold_signals
from opolo_ros.sim.task_ids import is_mjcf

STORAGES = ("mcap", "sqlite3")
LOG_THROTTLE_S = 1.0  # rejected messages: one log line per second at most


PARAMETERS: dict[str, tuple] = {
    "output": ("", "new bag folder to write (must not exist)"),
    "storage": ("mcap", "rosbag2 storage: mcap or sqlite3"),
    "episodes": (4, "stop after this many episodes"),
    "env_id": ("", "task id recorded in the bag's metadata"),
    "expert": ("", "expert model name recorded in the bag's metadata"),
    "seed": (-1, "the simulation's seed, recorded in the bag's metadata (as opolo-ros record does); "
                 "-1 = not known, not recorded"),
    "replay_topic": ("/opolo/replay", "replay stream to record"),
    "demonstrations_topic": ("/opolo/demonstrations", "publish each recorded episode here; empty = "
                                                      "do not publish"),
    "skip_terminated": (False, "drop episodes that end by termination (a fall), keep recording until "
                               "'episodes' reached the time limit"),
    "max_tries": (0, "with skip_terminated: give up (an error, no bag) after this many episodes "
                     "without 'episodes' that reached the time limit; 0 = 5 per episode asked for, "
                     "as opolo-ros record --skip-terminated"),
    "drop_time_feature": (False, "the replay observations end with the bridge's time feature "
                                 "(1 - t/T): store them without it, as the environment gives them "
                                 "(a learner with time_feature adds its own)"),
}


class DemoRecorder(FinishableNode):
    def __init__(self, *, node_name: str = "demo_recorder", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        p = {name: declare(self, name, default, desc) for name, (default, desc) in PARAMETERS.items()}
        self.output = Path(p["output"])
        self.storage, self.target = p["storage"], p["episodes"]
        self.env_id, self.expert, self.seed = p["env_id"], p["expert"], p["seed"]
        if self.seed < -1:
            raise ParameterError(f"parameter 'seed' must be >= 0 (or -1: not known), got {self.seed}")
        self.skip_terminated, self.skipped = bool(p["skip_terminated"]), 0
        self._keep = slice(0, -1) if p["drop_time_feature"] else slice(None)  # of each state's values
        replay_topic, demo_topic = p["replay_topic"], p["demonstrations_topic"]
        if not str(self.output) or str(self.output) == ".":
            raise ParameterError("parameter 'output' (the bag folder to write) is required")
        if self.output.exists():
            raise ParameterError(f"{self.output} already exists; refusing to overwrite a bag")
        if self.storage not in STORAGES:
            raise ParameterError(f"parameter 'storage' must be one of {STORAGES}, got {self.storage!r}")
        if self.target < 1:
            raise ParameterError(f"parameter 'episodes' must be >= 1, got {self.target}")
        if p["max_tries"] < 0:
            raise ParameterError(f"parameter 'max_tries' must be >= 0, got {p['max_tries']}")
        self.max_tries = p["max_tries"] or 5 * self.target
        if self.skip_terminated and self.max_tries < self.target:
            raise ParameterError(f"parameter 'max_tries' ({self.max_tries}) must be at least 'episodes' "
                                 f"({self.target})")
        self.error: str | None = None  # why the recording ended without a bag
        try:  # a path that cannot hold a bag fails now, not after the whole recording
            self.output.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ParameterError(f"parameter 'output': cannot create the folder {self.output.parent} "
                                 f"({err.strerror})") from None
        self.episodes: list[Episode] = []
        self.rejected = 0  # replay messages that did not decode
        self.bag: Path | None = None
        self._write_tried = False
        self._source: int | None = None
        self._states: list[np.ndarray] = []
        self._return = 0.0
        self.demo_pub = (self.create_publisher(Float32MultiArray, demo_topic, qos_for("demonstrations"))
                         if demo_topic else None)
        subscribe(self, Float32MultiArray, replay_topic, self._on_replay, qos_for("replay"), self._reject,
                  "replay batch")
        self.get_logger().info(f"recording {self.target} episodes from {replay_topic} into {self.output}")

    def _reject(self, err: m.MessageError) -> None:
        if self.finished.is_set():
            return
        self.rejected += 1
        self.get_logger().error(f"rejected replay batch ({self.rejected} so far): {err}",
                                throttle_duration_sec=LOG_THROTTLE_S)

    def _on_replay(self, msg: Float32MultiArray) -> None:
        if self.finished.is_set():
            return
        try:
            batch = m.msg_to_replay(msg)
        except m.MessageError as err:
            self._reject(err)
            return
        if self._source is None:
            self._source = batch.source
        if batch.source != self._source:
            return
        for i in range(len(batch)):
            if batch.void[i]:  # the simulation diverged: that episode is no demonstration
                self.get_logger().warning(f"dropped the episode in progress ({len(self._states)} states): "
                                          "the simulation diverged")
                self._states, self._return = [], 0.0
                continue
            if not self._states:
                self._states.append(batch.obs[i, self._keep])
            self._states.append(batch.next_obs[i, self._keep])
            self._return += float(batch.reward[i])
            if batch.terminated[i] and self.skip_terminated:
                self.skipped += 1
                self.get_logger().warning(f"skipped an episode that ended by termination after "
                                          f"{len(self._states) - 1} steps ({self.skipped} so far)")
                self._states, self._return = [], 0.0
            elif batch.terminated[i] or batch.truncated[i]:
                self._end_episode(bool(batch.terminated[i]))
                if len(self.episodes) >= self.target:
                    self._write()
                    return
            else:
                continue
            if self.skip_terminated and self.skipped + len(self.episodes) >= self.max_tries:
                self.error = (f"only {len(self.episodes)} of {self.max_tries} episodes reached the time "
                              f"limit without terminating; {self.target} were asked for (max_tries)")
                self.get_logger().error(f"{self.error}: no bag written")
                self.finished.set()
                return

    def _end_episode(self, terminated: bool) -> None:
        k = len(self.episodes)
        ret = float("nan") if is_mjcf(self.env_id) else self._return  # a robot model has no reward
        episode = Episode(np.stack(self._states), ret, {"terminated": terminated})
        self.episodes.append(episode)
        self._states, self._return = [], 0.0
        if self.demo_pub is not None:
            self.demo_pub.publish(m.demonstration_to_msg(episode.obs, episode.ret, k))
        said = "no reward" if np.isnan(episode.ret) else f"return {episode.ret:.1f}"  # (an MJCF task)
        self.get_logger().info(f"episode {k + 1}/{self.target}: {len(episode.obs) - 1} steps, {said}")

    def close(self) -> None:
        """Stopped (SIGINT, SIGTERM, the launch ending) before all its episodes came: the episodes that
        had ended go into the bag, whose metadata says the recording was cut short."""
        if self.bag is not None or self.error is not None or self._write_tried:  # (a failed write: its
            return  # error ends the node already; no second try that would call it cut short)
        if not self.episodes:
            self.get_logger().warning(f"stopped before the first episode ended: {self.output} not written")
            return
        with hold_signals():  # a second Ctrl-C must not leave half a bag
            self._write(interrupted=True)

    def _write(self, interrupted: bool = False) -> None:
        from opolo_ros.data.bags import write_demonstrations

        self._write_tried = True
        metadata: dict[str, Any] = {"source": "opolo_ros demo_recorder"}
        if interrupted:
            metadata["interrupted"] = f"{len(self.episodes)} of {self.target} episodes recorded"
        if self.skip_terminated:
            metadata["skipped_terminated"] = self.skipped
        if self.env_id:
            metadata["env_id"] = self.env_id
        if self.expert:
            metadata["expert"] = self.expert
        if self.seed >= 0:
            metadata["seed"] = self.seed
        self.bag = write_demonstrations(self.output, self.episodes, storage=self.storage, metadata=metadata)
        returns = np.array([ep.ret for ep in self.episodes])
        said = ("no reward: an MJCF task" if np.isnan(returns).all() else
                f"return {returns.mean():.1f} +- {returns.std():.1f}")
        self.get_logger().info(f"wrote {len(self.episodes)}{f' of {self.target}' if interrupted else ''} "
                               f"episodes ({said}) to {self.bag} ({self.storage})")
        self.finished.set()


def main(args: list[str] | None = None) -> int:
    return run_node(DemoRecorder, args)


if __name__ == "__main__":
    raise SystemExit(main())
