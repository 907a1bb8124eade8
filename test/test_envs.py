"""Environment wrappers: a simulation that blows up ends its episode instead of passing as a transition."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from opolo_ros.sim.envs import DivergenceGuard, make_env
from opolo_ros.sim.tasks import make_task_env

PENDULUM = """<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body>
      <joint name="hinge" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0 0 0.5" size="0.05" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="hinge" gear="{gear}" ctrlrange="-2 2" ctrllimited="true"/></actuator>
</mujoco>
"""


def mjcf(tmp_path, gear: float) -> str:
    path = tmp_path / f"pendulum_{gear:g}.xml"
    path.write_text(PENDULUM.format(gear=gear))
    return str(path)


def test_a_stable_model_steps_normally(tmp_path):
    env = make_task_env(mjcf(tmp_path, 1.0), seed=0)
    env.reset(seed=0)
    for _ in range(50):
        obs, _, _, truncated, info = env.step(np.array([2.0]))
        assert "diverged" not in info and not truncated
    assert abs(obs[0]) > 1e-3  # the motor moved the pole


def test_mujoco_reset_on_a_blow_up_is_reported(tmp_path):
    """A 1e12 gear makes qacc huge: MuJoCo resets mjData by itself (warning BADQACC)."""
    env = make_task_env(mjcf(tmp_path, 1e12), seed=0)
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step(np.array([2.0]))
    assert info.get("diverged") is True and truncated and not terminated
    env.reset(seed=1)  # and the env is usable after a reset
    assert env.step(np.array([0.0]))[4].get("diverged") is None


class NaNEnv(gym.Env):
    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self) -> None:
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(2), {}

    def step(self, action):
        self.t += 1
        obs = np.array([np.nan if self.t == 3 else 0.0, 0.0])
        return obs, (np.inf if self.t == 5 else 1.0), False, False, {}


def test_non_finite_observation_or_reward_is_reported():
    env = DivergenceGuard(NaNEnv())
    env.reset()
    flags = [env.step(np.zeros(1))[4].get("diverged", False) for _ in range(6)]
    assert flags == [False, False, True, False, True, False]


@pytest.mark.parametrize("env_id", ["InvertedPendulum-v5", "Hopper-v5"])
def test_gymnasium_tasks_are_guarded_and_unaffected(env_id):
    env = make_env(env_id, seed=0, time_feature=True)
    assert isinstance(env, DivergenceGuard)
    env.reset(seed=0)
    for _ in range(20):
        _, _, terminated, truncated, info = env.step(env.action_space.sample())
        assert "diverged" not in info
        if terminated or truncated:
            env.reset()
    # step for step the same observations, rewards and ends as the plain Gymnasium env
    guarded, plain = make_env(env_id, seed=0), gym.make(env_id)
    np.testing.assert_array_equal(guarded.reset(seed=0)[0], plain.reset(seed=0)[0])
    rng = np.random.default_rng(0)
    for _ in range(50):
        action = rng.uniform(guarded.action_space.low, guarded.action_space.high).astype(np.float32)
        ours, theirs = guarded.step(action), plain.step(action)
        np.testing.assert_array_equal(ours[0], theirs[0])
        assert ours[1:4] == theirs[1:4] and "diverged" not in ours[4]
        if ours[2] or ours[3]:
            break


def test_mujoco_warnings_are_shown_a_few_times_then_counted(tmp_path, monkeypatch, capfd):
    """MuJoCo would print every divergence warning and append it to MUJOCO_LOG.TXT in the working
    folder; routed, each kind shows MUJOCO_WARNINGS_SHOWN times and no log file grows."""
    from opolo_ros.sim import envs

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(envs, "mujoco_warning_counts", envs.Counter())
    env = make_task_env(mjcf(tmp_path, 1e12), seed=0)
    for _ in range(10):
        env.reset()
        assert env.step(np.array([2.0]))[4].get("diverged") is True
    printed = [line for line in capfd.readouterr().err.splitlines() if line.startswith("MuJoCo warning")]
    assert len(printed) == envs.MUJOCO_WARNINGS_SHOWN and "counted, not printed" in printed[-1]
    assert sum(envs.mujoco_warning_counts.values()) == 10
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


def test_mjcf_models_the_task_cannot_observe_or_that_it_limits_are_named(tmp_path):
    (tmp_path / "free.xml").write_text(
        "<mujoco><worldbody><body><freejoint/><geom size='0.1'/></body></worldbody>"
        "<actuator><motor site='s' gear='1 0 0 0 0 0'/></actuator></mujoco>".replace(
            "<geom size='0.1'/>", "<geom size='0.1'/><site name='s'/>"))
    with pytest.raises(ValueError, match="has no hinge or slide joint: the observation .* would be empty"):
        make_task_env(str(tmp_path / "free.xml"))
    unlimited = PENDULUM.replace('ctrlrange="-2 2" ctrllimited="true"', 'ctrllimited="false"')
    (tmp_path / "ROBOT.XML").write_text(unlimited.format(gear=1.0))  # the extension in capitals
    env = make_task_env(str(tmp_path / "ROBOT.XML"))
    assert env.action_space.high.tolist() == [1.0]
    (note,) = env.unwrapped.notes
    assert "actuator(s) ['actuator0'] are not ctrllimited (no ctrlrange, or ctrllimited=\"false\"): " \
           "their commands are limited to [-1, 1]" in note


def test_mjcf_models_that_would_give_wrong_data_are_refused_or_named_apart(tmp_path):
    """Found by a probe: a NaN initial state crashed the bridge at its first tick; a ctrlrange MuJoCo
    cannot apply (it simulates 0 for such a command) was accepted; an unnamed joint took the name
    of a named one (joint0 twice on /joint_states, which crashed the bridge at its first step)."""
    (tmp_path / "nan.xml").write_text(PENDULUM.replace('axis="0 1 0"', 'axis="0 1 0" ref="nan"')
                                      .format(gear=1.0))
    with pytest.raises(ValueError, match=r"nan.xml: the initial state \(qpos0\) holds NaN or inf"):
        make_task_env(str(tmp_path / "nan.xml"))
    (tmp_path / "huge.xml").write_text(PENDULUM.replace('ctrlrange="-2 2"', 'ctrlrange="-1e30 1e30"')
                                       .format(gear=1.0))
    with pytest.raises(ValueError, match=r"huge.xml: a ctrlrange beyond \+-1e\+10"):
        make_task_env(str(tmp_path / "huge.xml"))
    two = PENDULUM.replace('<joint name="hinge" type="hinge" axis="0 1 0"/>',
                           '<joint name="joint1" type="hinge" axis="0 1 0"/>'
                           '<joint type="slide" axis="1 0 0"/>').replace('joint="hinge"', 'joint="joint1"')
    (tmp_path / "unnamed.xml").write_text(two.format(gear=1.0))  # joint 1 is unnamed: not "joint1"
    from opolo_ros.sim.tasks import joint_layout

    names, _, _ = joint_layout(make_task_env(str(tmp_path / "unnamed.xml")))
    assert names == ["joint1", "joint1_"]


def test_a_policy_of_another_size_than_an_mjcf_task_is_refused_before_any_rollout(tmp_path):
    """record_expert checked Gymnasium ids only: on an MJCF file a misfit expert's observations were
    all dropped and the actor's watchdog commands recorded as the expert's."""
    from opolo_ros.sim.envs import check_policy_fits

    with pytest.raises(ValueError, match=r"takes obs_dim 4 and gives act_dim 1, but .*pendulum_1.xml without "
                                         r"time feature has obs_dim 2 and act_dim 1"):
        check_policy_fits("expert.onnx", 4, 1, mjcf(tmp_path, 1.0), False)
    check_policy_fits("fits.onnx", 2, 1, mjcf(tmp_path, 1.0), False)


def test_updates_with_nothing_stored_say_why():
    """Every step void (a model that diverges on each): a clear error, not 'cannot sample from an
    empty replay buffer'."""
    from opolo_ros.algo.config import load_run_config
    from opolo_ros.data.replay import ReplayBuffer
    from opolo_ros.train.runner import UpdateRunner, make_learner, make_schedule

    cfg = load_run_config(None, {"algo": "td3", "td3": {"net": {"hidden": [8]}}})
    runner = UpdateRunner(make_learner(cfg, 2, 1), make_schedule(cfg), ReplayBuffer(2, 1, 10), None)
    with pytest.raises(ValueError, match="every step so far was void"):
        runner._sample()


def test_demonstration_joints_must_follow_the_models_order():
    """`demos_joints` select a JointState bag's joints in the observation's order, the model's: the
    model's names in another order, all of them or some, trained on scrambled observations."""
    from opolo_ros.sim.tasks import check_joint_order, env_joint_names

    env = gym.make("Hopper-v5")
    model = env_joint_names(env)
    env.close()
    assert model == ("rootx", "rootz", "rooty", "thigh_joint", "leg_joint", "foot_joint")
    check_joint_order(["rootz", "thigh_joint", "foot_joint"], model, "Hopper-v5")  # a subset, in order
    check_joint_order(["shoulder", "elbow"], model, "Hopper-v5")  # a robot's own names: not checked
    with pytest.raises(ValueError, match="foot_joint,thigh_joint names Hopper-v5's joints in another order "
                                         "than the model's, thigh_joint,foot_joint"):
        check_joint_order(["foot_joint", "thigh_joint"], model, "Hopper-v5")


FREE_AND_HINGE = """<mujoco>
  <worldbody>
    <body name="base"><freejoint name="float"/><geom size="0.1"/>
      <body><joint name="hinge" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 0.5" size="0.05" mass="1"/></body>
    </body>
  </worldbody>
  <actuator><motor joint="hinge" ctrlrange="-2 2" ctrllimited="true"/></actuator>
</mujoco>
"""


def test_an_mjcf_task_observes_commands_and_resets_as_its_model_says(tmp_path):
    """The generic MJCF task: a hinge after a free joint is observed at its own velocity (its qvel
    address is not its qpos address), a free joint left out is named, a command beyond the
    ctrlrange is clipped to it, the reset noise moves velocities too, and the time limit given is
    the task's (a mutation test)."""
    from opolo_ros.sim.tasks import max_steps_of

    (tmp_path / "floating.xml").write_text(FREE_AND_HINGE)
    env = make_task_env(str(tmp_path / "floating.xml"), max_episode_steps=50)
    assert max_steps_of(env) == 50  # (not the MJCF default, 1000)
    base = env.unwrapped
    assert any("free/ball joint(s) ['float'] are not observed" in note for note in base.notes), base.notes
    obs, _ = env.reset(seed=3)
    assert obs[1] != 0.0 and obs[1] == np.float32(base.data.qvel[6])  # the hinge's velocity, with reset noise
    base.data.qvel[:] = np.arange(7.0)
    assert base._obs()[1] == 6.0  # dof 6 (qpos 7 is a quaternion of the free joint's)
    env.step(np.array([100.0]))
    assert base.data.ctrl.tolist() == [2.0]  # clipped to the ctrlrange


def test_an_mjcf_task_without_actuators_is_refused_and_an_unloadable_one_has_no_period(tmp_path):
    """An MJCF model with nothing to command is refused by name; a file MuJoCo cannot load gives no
    control period (a model left behind) rather than an error (a mutation test)."""
    from opolo_ros.sim.tasks import task_control_period

    (tmp_path / "passive.xml").write_text(PENDULUM.split("<actuator>")[0] + "</mujoco>\n")
    with pytest.raises(ValueError, match=r"passive.xml has no actuators: nothing for a policy to command"):
        make_task_env(str(tmp_path / "passive.xml"))
    (tmp_path / "broken.xml").write_text("<mujoco><worldbody><body></mujoco>")
    assert task_control_period(str(tmp_path / "broken.xml")) is None
    assert task_control_period(mjcf(tmp_path, 1.0)) == pytest.approx(0.01)


def test_a_continued_run_resets_from_a_seed_of_its_own_step(tmp_path):
    """A run that goes on in a new process at another step draws other initial states than at its
    start and than at any other step (a mutation test)."""
    from opolo_ros.sim.tasks import continuation_seed

    seeds = {continuation_seed(7, step) for step in (0, 1000, 2000)}
    assert len(seeds) == 3 and continuation_seed(7, 1000) == continuation_seed(7, 1000)
    assert 7 not in seeds


def test_a_mix_of_model_and_robot_joint_names_is_not_checked_for_order():
    """`demos_joints` naming some model joints and some a robot's own are a mapping the order check
    cannot judge: they are taken as given, not refused nor a KeyError (a mutation test)."""
    from opolo_ros.sim.tasks import check_joint_order, reordered_joints

    model = ("rootx", "rootz", "rooty", "thigh_joint", "leg_joint", "foot_joint")
    assert reordered_joints(["foot_joint", "elbow", "thigh_joint"], model) is None
    check_joint_order(["foot_joint", "elbow", "thigh_joint"], model, "Hopper-v5")


def test_a_joint_state_bag_of_a_task_with_the_time_feature_is_read_by_the_models_joints(tmp_path):
    """With the time feature the observation is one longer than the joints' positions and
    velocities: the bag is still read by the model's joint names (a mutation test)."""
    from test_bags import JS, SEC, _joint_state, _write_stream

    from opolo_ros.algo.config import load_run_config
    from opolo_ros.sim.tasks import demo_joints

    msgs = [(SEC + k * 10_000_000, _joint_state(["hinge", "slider"], [0.0, 0.1], [0.0, 0.0]))
            for k in range(5)]
    bag = _write_stream(tmp_path / "robot", {"/joint_states": (JS, msgs)})
    cfg = load_run_config(None, {"env_id": "InvertedPendulum-v5", "demos": str(bag), "time_feature": True})
    assert demo_joints(cfg, ("slider", "hinge"), 5) == "slider,hinge"


def test_the_time_feature_counts_down_the_tasks_own_limit_and_restarts_on_reset():
    """The time feature is 1 - t/T with T the task's own step limit (Pendulum-v1: 200), within its
    declared [0, 1], restarting at 1 on reset; a recorded episode gets the same column (a mutation
    test)."""
    from opolo_ros.sim.envs import TimeFeature, add_time_feature

    env = TimeFeature(gym.make("Pendulum-v1"))
    assert env.max_steps == 200
    assert (env.observation_space.low[-1], env.observation_space.high[-1]) == (0.0, 1.0)
    assert env.reset(seed=0)[0][-1] == 1.0
    for _ in range(3):
        obs = env.step(env.action_space.sample())[0]
    assert obs[-1] == np.float32(1.0 - 3 / 200)
    assert env.reset(seed=1)[0][-1] == 1.0
    assert env.step(env.action_space.sample())[0][-1] == np.float32(1 - 1 / 200)
    column = add_time_feature(np.zeros((3, 2), np.float32), 200)[:, -1]
    np.testing.assert_array_equal(column, np.float32([1.0, 1 - 1 / 200, 1 - 2 / 200]))


def test_a_task_with_discrete_actions_is_a_value_error():
    """A task with discrete actions is refused as one ValueError naming its id (a mutation test)."""
    with pytest.raises(ValueError, match=r"environment 'CartPole-v1' has a non-continuous action space"):
        make_env("CartPole-v1")


def test_each_evaluation_episode_starts_from_the_reset_of_its_own_seed():
    """Episode k of an evaluation starts from the reset of seed + k, not every one from the same
    state (a mutation test)."""
    from opolo_ros.sim.envs import evaluate

    env = gym.make("InvertedPendulum-v5")
    starts = [env.reset(seed=5 + k)[0] for k in range(3)]
    env.close()
    seen = []

    def policy(obs: np.ndarray) -> np.ndarray:
        seen.append(np.array(obs))
        return np.zeros(1, np.float32)

    evaluate(policy, "InvertedPendulum-v5", episodes=3, seed=5)
    assert [any(np.array_equal(start, obs) for obs in seen) for start in starts] == [True, True, True]


def test_the_random_baseline_is_repeatable_and_the_score_is_relative_to_it():
    """R_random draws its actions from the seeded action space (the same baseline every time) and
    the normalised score is (R - R_random) / (R_expert - R_random) (a mutation test)."""
    from opolo_ros.sim.envs import normalised_score, random_policy_return

    assert random_policy_return("Pendulum-v1", episodes=1) == random_policy_return("Pendulum-v1", episodes=1)
    assert normalised_score(50.0, 10.0, 110.0) == pytest.approx(0.4)


def test_an_env_state_restored_continues_the_episode_with_its_clock_and_time_feature():
    """get_env_state / set_env_state carry the simulation time and the time feature's step count:
    the restored env steps exactly as the original goes on (a mutation test)."""
    from opolo_ros.sim.envs import get_env_state, set_env_state

    env, other = (make_env("InvertedPendulum-v5", time_feature=True) for _ in range(2))
    env.reset(seed=0)
    for _ in range(5):
        env.step(np.zeros(1))
    other.reset(seed=1)
    set_env_state(other, get_env_state(env))
    ours, theirs = env.step(np.full(1, 0.1)), other.step(np.full(1, 0.1))
    np.testing.assert_array_equal(ours[0], theirs[0])
    assert ours[0][-1] == np.float32(1 - 6 / 1000) and other.unwrapped.data.time == env.unwrapped.data.time


def test_a_policy_trained_on_another_gymnasium_task_is_refused_by_name():
    """A policy whose metadata names another Gymnasium task is refused before any rollout, even when
    its dimensions fit (a mutation test)."""
    from opolo_ros.sim.envs import check_policy_fits

    check_policy_fits("p.onnx", 11, 3, "Hopper-v5", False, trained_on="Hopper-v5")
    with pytest.raises(ValueError, match=r"^p\.onnx was trained on Walker2d-v5 \(its metadata's env_id\), "
                                         r"not Hopper-v5$"):
        check_policy_fits("p.onnx", 11, 3, "Hopper-v5", False, trained_on="Walker2d-v5")


def test_an_mjcf_models_frame_skip_sets_its_control_step_and_bad_ones_are_refused(tmp_path):
    """``<custom><numeric name="frame_skip">`` in the file: each env step runs that many MuJoCo
    steps, and the control period (the bridge's timer, the exported ``control_period_s``) is the
    timestep times it; without one, one step per control step; a value that is not one whole
    number of steps is refused by name."""
    from opolo_ros.sim.tasks import task_control_period

    def model(name: str, custom: str) -> str:
        path = tmp_path / name
        path.write_text(PENDULUM.format(gear=1.0).replace("<worldbody>", custom + "\n  <worldbody>"))
        return str(path)

    skip5 = model("skip5.xml", '<custom><numeric name="frame_skip" data="5"/></custom>')
    env = make_task_env(skip5, seed=0)
    base = env.unwrapped
    env.reset(seed=0)
    start = base.data.time
    env.step(np.array([1.0]))
    assert base.frame_skip == 5 and base.data.time - start == pytest.approx(0.05)
    assert not base.notes  # the name itself is no near miss (a mutation test)
    assert task_control_period(skip5) == pytest.approx(0.05)
    plain = make_task_env(mjcf(tmp_path, 1.0), seed=0)
    plain.reset(seed=0)
    plain.step(np.array([1.0]))
    assert plain.unwrapped.data.time == pytest.approx(0.01)
    assert task_control_period(mjcf(tmp_path, 1.0)) == 0.01
    # a near miss of the name is not read, and said (info and the bridge show the notes)
    for name in ("frameskip", "frame-skip", "Frame_Skip", "frame_skips"):
        miss = model(f"miss_{name}.xml", f'<custom><numeric name="{name}" data="5"/></custom>')
        env = make_task_env(miss)
        assert env.unwrapped.frame_skip == 1
        notes = " ".join(env.unwrapped.notes)
        assert (f'<numeric name="{name}"> is not read; the control step\'s is named "frame_skip" '
                "(without it: one MuJoCo step per control step, 0.01 s)") in notes, name
    other = model("other.xml", '<custom><numeric name="gain" data="5"/></custom>')
    assert not make_task_env(other).unwrapped.notes
    for data in ("0", "2.5", "3 4", "-1", "20000"):
        custom = f'<custom><numeric name="frame_skip" data="{data}"/></custom>'
        bad = model(f"bad_{data.replace(' ', '_')}.xml", custom)
        with pytest.raises(ValueError, match=rf'bad_\S+\.xml: <numeric name="frame_skip"> must hold one '
                                             rf'whole number of MuJoCo steps per control step, 1 to '
                                             rf'10000, got {data}$'):
            make_task_env(bad)


def test_an_mjcf_robots_saved_state_includes_its_actuators_activations(tmp_path):
    """A resumed direct run restores the physics of its env: for an MJCF robot with actuator
    dynamics (a filtered motor, a muscle) that is qpos, qvel and the activations; without them the
    resumed episode would go on from a motor at rest."""
    from opolo_ros.sim.envs import get_env_state, set_env_state

    xml = tmp_path / "filtered.xml"
    xml.write_text("""<mujoco><worldbody><body><joint name="hinge" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.1"/></body></worldbody>
      <actuator><general name="m" joint="hinge" dyntype="filter" dynprm="0.2" gear="1"
        ctrlrange="-1 1" ctrllimited="true"/></actuator></mujoco>""")
    a = make_task_env(str(xml), seed=0)
    for _ in range(5):
        a.step(np.array([1.0], np.float32))
    state = get_env_state(a)
    assert state["act"][0] > 0.01
    b = make_task_env(str(xml), seed=1)
    set_env_state(b, state)
    for _ in range(5):
        obs_a, *_ = a.step(np.array([-1.0], np.float32))
        obs_b, *_ = b.step(np.array([-1.0], np.float32))
    np.testing.assert_array_equal(obs_a, obs_b)
