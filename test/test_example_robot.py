"""The shipped example robot: models/robots/two_link_arm.xml, its demonstrations and its task file fit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "robots" / "two_link_arm.xml"
DEMOS = ROOT / "models" / "demos" / "two_link_arm"
TASK = ROOT / "config" / "two_link_arm.yaml"


def test_the_demonstrations_are_the_robots_joint_states_at_its_control_rate() -> None:
    """A robot's own bag (no task named, no returns) of 4 whole episodes, read by the model's joint
    names, at the model's 50 Hz: training takes it without a warning."""
    from opolo_ros.data.bags import read_bag_metadata
    from opolo_ros.data.demos import load_episodes, rate_note, short_episodes_note
    from opolo_ros.sim.tasks import make_task_env

    env = make_task_env(str(MODEL), max_episode_steps=300)
    assert env.unwrapped.joints[0] == ["shoulder", "elbow"] and env.unwrapped.dt == 0.02
    episodes = load_episodes(DEMOS, joints="shoulder,elbow")
    assert [len(ep.obs) for ep in episodes] == [301] * 4
    assert all(np.isnan(ep.ret) for ep in episodes) and "env_id" not in read_bag_metadata(DEMOS)
    assert not rate_note(episodes, env.unwrapped.dt) and not short_episodes_note(episodes, 300)
    assert episodes[0].obs.shape[1] == env.observation_space.shape[0] == 4
    # the waving motion: the shoulder raised about 0.6 rad, the elbow swinging about 0
    late = np.concatenate([ep.obs[100:] for ep in episodes])
    assert 0.5 < late[:, 0].mean() < 0.7 and abs(late[:, 1].mean()) < 0.1 and late[:, 1].std() > 0.3
    env.close()


def test_the_shipped_bag_is_what_its_script_writes(tmp_path: Path) -> None:
    """models/demos/two_link_arm comes from bench/arm_demos.py with its defaults (its docstring's
    command): writing it again gives the same states."""
    from opolo_ros.data.demos import load_episodes

    out = tmp_path / "again"
    subprocess.run([sys.executable, str(ROOT / "bench" / "arm_demos.py"), "--out", str(out)], check=True,
                   capture_output=True, cwd=ROOT)
    for shipped, again in zip(load_episodes(DEMOS), load_episodes(out), strict=True):
        np.testing.assert_allclose(shipped.obs, again.obs, atol=1e-6)


def test_the_task_file_trains_the_robot_in_both_trainers(tmp_path: Path, monkeypatch) -> None:
    """config/two_link_arm.yaml names the model, the bag and the episode length for the direct loop
    and for the graph (the launch resolves the model's path, as it does the bag's)."""
    from opolo_ros import launch_runner as lr
    from opolo_ros.algo.config import load_run_config
    from opolo_ros.train.direct import check_demonstrations

    cfg = load_run_config(TASK)
    assert (cfg.env_id, cfg.max_episode_steps, cfg.eval_max_episode_steps) == (
        "models/robots/two_link_arm.xml", 300, 1000)
    monkeypatch.chdir(ROOT)  # the file's paths are the repository's (or an installed package's)
    check_demonstrations(cfg)  # the bag fits the model
    specs = lr.describe_launch("sim_train", [f"params_file:={TASK}", f"run_dir:={tmp_path / 'run'}"])[2]
    by_name = {s.name: s.parameters for s in specs}
    assert by_name["learner"]["env_id"] == by_name["sim_bridge"]["env_id"] == str(MODEL)
    assert by_name["sim_bridge"]["max_episode_steps"] == 300
