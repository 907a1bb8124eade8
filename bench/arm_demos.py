"""Demonstrations for the example robot, models/robots/two_link_arm.xml: a PD controller's joint states.

The controller (computed torque: PD on a reference plus MuJoCo's gravity and Coriolis torques,
clipped to the motors' ranges) raises the arm from its start and waves it: the shoulder about
0.6 rad, the elbow about 0, both sinusoids of period `--period` s, a quarter period apart. Each
episode starts from the model's reset (the joints at 0 +- 0.01, the arm level) and is recorded as
a robot would record it: ``sensor_msgs/JointState`` on ``/joint_states`` at the control rate (names,
positions, velocities, the applied torques as efforts), stamped, with a pause of `--gap` s between
episodes (the demonstration reader splits the stream there). The bag has no reward and names no
task: as a real robot's, it is the robot's own.

    .venv/bin/python bench/arm_demos.py --out models/demos/two_link_arm
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "robots" / "two_link_arm.xml"
# the computed-torque loop's gains, in joint accelerations: about 1.6 Hz natural frequency, damping
# ratio 0.9, slow enough for a 50 Hz zero-order-hold command
KP, KD = 100.0, 18.0


def reference(t: float | np.ndarray, period: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The waving motion's joint positions, velocities and accelerations at time `t` (seconds; an
    array of times: one row each); `period` 0: the posture it waves about, held."""
    t = np.asarray(t)
    w = 2 * np.pi / period if period else 0.0
    phase = np.stack([w * t, w * t + np.pi / 2], axis=-1)
    amp, mid = np.array([0.5, 0.7]) if period else np.zeros(2), np.array([0.6, 0.0])
    return mid + amp * np.sin(phase), amp * w * np.cos(phase), -amp * w * w * np.sin(phase)


class WavingController:
    """The demonstrator: a torque for the env's current state at control step `k` (computed torque:
    the model's inertia times the reference's acceleration plus a PD correction, plus the gravity
    and Coriolis torques)."""

    def __init__(self, env, period: float) -> None:
        self.base, self.period = env.unwrapped, period
        self.low, self.high = env.action_space.low, env.action_space.high

    def __call__(self, k: int) -> np.ndarray:
        import mujoco

        model, data = self.base.model, self.base.data
        q_ref, qd_ref, qdd_ref = reference(k * self.base.dt, self.period)
        inertia = np.zeros((model.nv, model.nv))
        mujoco.mj_fullM(model, data, inertia)
        accel = qdd_ref + KP * (q_ref - data.qpos) + KD * (qd_ref - data.qvel)
        torque = inertia @ accel + data.qfrc_bias
        return np.clip(torque, self.low, self.high).astype(np.float32)


def record(out: Path, episodes: int, steps: int, period: float, gap_s: float, seed: int,
           start_spread: float = 0.0) -> list[np.ndarray]:
    """Run the controller for `episodes` episodes of `steps` control steps and write the bag; each
    episode's observations (positions then velocities), for the summary. `start_spread` > 0: each
    episode starts from a posture drawn uniformly within +- that many radians per joint (at rest)."""
    from opolo_ros.data.bag_writer import StreamBagWriter
    from opolo_ros.data.bags import _typestore
    from opolo_ros.sim.tasks import make_task_env

    store, topic, msgtype = _typestore(), "/joint_states", "sensor_msgs/msg/JointState"
    env = make_task_env(str(MODEL), max_episode_steps=steps)
    names = list(env.unwrapped.joints[0])
    dt_ns = round(env.unwrapped.dt * 1e9)
    writer = StreamBagWriter(out)
    writer.add_topic(topic, msgtype)
    stamp, kept = 1_700_000_000 * 10**9, []

    def write(obs: np.ndarray, effort: np.ndarray) -> None:
        t = store.types["builtin_interfaces/msg/Time"](sec=stamp // 10**9, nanosec=stamp % 10**9)
        header = store.types["std_msgs/msg/Header"](stamp=t, frame_id="")
        msg = store.types[msgtype](header=header, name=names, position=obs[:2].astype(np.float64),
                                   velocity=obs[2:].astype(np.float64), effort=effort.astype(np.float64))
        writer.write(topic, stamp, store.serialize_cdr(msg, msgtype))

    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            if start_spread > 0:  # a posture away from the reset: the demonstrations cover the way back
                rng = np.random.default_rng(seed + episode)
                env.unwrapped.set_state(rng.uniform(-start_spread, start_spread, 2), np.zeros(2))
                data = env.unwrapped.data
                obs = np.concatenate([data.qpos, data.qvel]).astype(np.float32)  # the model's 2 hinges
            controller, states = WavingController(env, period), [obs]
            for k in range(steps):
                action = controller(k)
                write(obs, action)
                obs, *_ = env.step(action)
                states.append(obs)
                stamp += dt_ns
            write(obs, np.zeros(2))  # the last state (its effort: none applied after it)
            kept.append(np.asarray(states))
            stamp += round(gap_s * 1e9)
    except BaseException:
        writer.abort()
        raise
    writer.close()
    env.close()
    return kept


def demonstrator_distance(demos: Path, episodes: int, steps: int, period: float, seed: int) -> float:
    """The demonstrator's own imitation distance to the bag `demos`, measured as a run's evaluation
    measures a policy's: `episodes` episodes of `steps` steps from the resets of seed, seed + 1, ...
    (a run of seed 0 evaluates from 10000): the reference for a policy that imitates well."""
    from opolo_ros.data.demos import load_episodes
    from opolo_ros.sim.imitation import demo_states_of, imitation_distance
    from opolo_ros.sim.tasks import make_task_env

    env, visited = make_task_env(str(MODEL), max_episode_steps=steps), []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        controller = WavingController(env, period)
        for k in range(steps):
            visited.append(obs)
            obs, _, terminated, truncated, _ = env.step(controller(k))
            if terminated or truncated:
                break
        visited.append(obs)
    env.close()
    return imitation_distance(np.asarray(visited), demo_states_of(load_episodes(demos), 4))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="the bag folder to write (must not exist)")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300, help="control steps per episode (0.02 s each)")
    parser.add_argument("--period", type=float, default=2.0,
                        help="the waving motion's period, s; 0: raise the arm and hold it")
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between episodes in the stream")
    parser.add_argument("--seed", type=int, default=0, help="episode k is reset with seed + k")
    parser.add_argument("--start-spread", dest="start_spread", type=float, default=0.0,
                        help="start each episode from a posture within +- this many rad per joint "
                             "(0: the model's reset, the joints at 0 +- 0.01)")
    parser.add_argument("--distance-of", dest="distance_of", metavar="BAG",
                        help="instead of recording: the demonstrator's imitation distance to BAG over 10 "
                             "episodes of 1000 steps from the resets 10000.. (config/two_link_arm.yaml's "
                             "evaluation, seed 0)")
    args = parser.parse_args()
    if args.distance_of:
        distance = demonstrator_distance(Path(args.distance_of), 10, 1000, args.period, 10_000)
        print(f"the demonstrator's imitation distance to {args.distance_of}: {distance:.4f}")
        return 0
    if args.out is None:
        parser.error("give --out (the bag to write) or --distance-of")
    out = Path(args.out)
    if out.exists():
        raise SystemExit(f"{out} already exists; refusing to overwrite it")
    states = record(out, args.episodes, args.steps, args.period, args.gap, args.seed, args.start_spread)
    for k, obs in enumerate(states):
        q_ref = reference(np.arange(len(obs) - 1) * 0.02, args.period)[0]
        late = slice(len(obs) // 3, None)  # after the arm has come up to the motion
        error = np.abs(obs[:-1, :2] - q_ref)[late].max()
        print(f"episode {k}: {len(obs)} states, shoulder {obs[:, 0].min():.2f}..{obs[:, 0].max():.2f} rad, "
              f"elbow {obs[:, 1].min():.2f}..{obs[:, 1].max():.2f} rad, tracking error after "
              f"{late.start * 0.02:.0f} s at most {error:.3f} rad")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
