"""Deploy-mode safety of the actor over real DDS: bad observations, watchdog, clamping, rate limit.

The actor runs as ``opolo-ros launch`` composes it (GraphRunner: its own context and executor); a
peer node in another context (another DDS participant, as another process would be) publishes
observations and records the commands.
"""

from __future__ import annotations

import array
import dataclasses
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rclpy")
pytest.importorskip("torch")

from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float32MultiArray, Float64MultiArray, Int64, MultiArrayDimension  # noqa: E402
from test_nodes import onnx_policy  # noqa: E402

from opolo_ros.launch_runner import GraphRunner, NodeSpec  # noqa: E402
from opolo_ros.nodes.actor import COUNTER_QOS, RELIABLE_DEFAULT_QOS  # noqa: E402
from opolo_ros.ros import messages as m  # noqa: E402
from opolo_ros.ros.runtime import linked, spin_until  # noqa: E402

pytestmark = pytest.mark.ros
JOINTS = ["slider", "hinge"]
NAN, INF = float("nan"), float("inf")


class Spy:
    """Wraps the actor's inference: records every observation the model is given."""

    def __init__(self, runner: Callable[[np.ndarray], np.ndarray]) -> None:
        self.runner = runner
        self.inputs: list[np.ndarray] = []

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        self.inputs.append(np.array(obs, copy=True))
        return self.runner(obs)


class Rig:
    """A deploy actor plus a peer that publishes observations and timestamps the commands.

    Both directions are reliable (the actor's ``observation_qos``/``command_qos``), so that a test
    on a loaded machine loses no sample; the best-effort default is exercised by test_deploy.py.
    """

    def __init__(self, graph: GraphRunner, peer, peer_executor, joint_state: bool = False) -> None:
        self.graph = graph
        self.actor = graph.nodes["actor"]
        self.executors = [graph.executor, peer_executor]
        kind = JointState if joint_state else Float32MultiArray
        self.obs_pub = peer.create_publisher(kind, "observation", RELIABLE_DEFAULT_QOS)
        self.commands: list[tuple[float, float]] = []  # (receive time, first value)
        self.full: list[list[float]] = []  # every value of each command
        self.counts: list[int] = []
        peer.create_subscription(Float64MultiArray, "action", self._on_command, RELIABLE_DEFAULT_QOS)
        peer.create_subscription(Int64, "/actor/rejected_observations",
                                 lambda msg: self.counts.append(msg.data), COUNTER_QOS)
        links = [(self.obs_pub, self.actor), (self.actor.action_pub, peer), (self.actor.rejected_pub, peer)]
        assert self.spin_until(lambda: all(linked(pub, node) for pub, node in links), 10.0)

    def _on_command(self, msg: Float64MultiArray) -> None:
        self.commands.append((time.monotonic(), float(msg.data[0])))
        self.full.append(list(msg.data))

    def spin_until(self, done: Callable[[], bool], timeout: float = 5.0) -> bool:
        return spin_until(self.executors, done, timeout_sec=timeout)

    def spin_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        spin_until(self.executors, lambda: time.monotonic() > end, timeout_sec=seconds + 1.0)

    def send(self, msg) -> None:
        """Publish one observation and wait until the actor has answered or dropped it."""
        actor = self.actor
        before = (actor.actions, actor.rejected_observations)
        self.obs_pub.publish(msg)
        assert self.spin_until(lambda: (actor.actions, actor.rejected_observations) != before), \
            "the actor neither answered nor dropped the observation"

    def stream(self, obs: np.ndarray, seconds: float, hz: float = 50.0) -> None:
        """Publish `obs` at `hz` for `seconds`, spinning in between."""
        msg = m.observation_to_msg(obs)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.obs_pub.publish(msg)
            self.spin_for(1.0 / hz)


def start(tmp_path: Path, ros_domain_id: int, ros_node, model: Path, joint_state: bool = False,
          **params) -> tuple[GraphRunner, Rig]:
    parameters = {"mode": "deploy", "model": str(model), "subscribe_policy": False,
                  "observation_qos": "reliable", "command_qos": "reliable", **params}
    if joint_state:
        parameters["joints"] = JOINTS
    graph = GraphRunner([NodeSpec("actor", "actor", parameters=parameters)], ros_domain_id)
    peer, peer_executor = ros_node("peer")
    return graph, Rig(graph, peer, peer_executor, joint_state)


def raw_observation(values, dim: int | None = None) -> Float32MultiArray:
    """A Float32MultiArray as any publisher could send it (no encoder checks)."""
    msg = Float32MultiArray()
    msg.data = array.array("f", values)
    if dim is not None:
        msg.layout.dim = [MultiArrayDimension(label="obs", size=dim, stride=dim)]
    return msg


def joint_state(names, positions, velocities) -> JointState:
    msg = JointState()
    msg.name = list(names)
    msg.position = array.array("d", positions)
    msg.velocity = array.array("d", velocities)
    return msg


GOOD = [np.array([0.1, 0.2, 0.3, 0.4], np.float32), np.array([-0.1, 0.0, 0.05, 0.2], np.float32)]
BAD_ARRAYS = {
    "nan": raw_observation([0.1, NAN, 0.3, 0.4], 4),
    "inf": raw_observation([0.1, 0.2, -INF, 0.4], 4),
    "too short": raw_observation([0.1, 0.2, 0.3], 3),
    "too long, no layout": raw_observation([0.1, 0.2, 0.3, 0.4, 0.5]),
    "layout disagrees": raw_observation([0.1, 0.2, 0.3, 0.4], 5),
}
BAD_JOINT_STATES = {
    "nan position": joint_state(JOINTS, [0.1, NAN], [0.3, 0.4]),
    "inf velocity": joint_state(JOINTS, [0.1, 0.2], [INF, 0.4]),
    "missing joint": joint_state(["slider"], [0.1], [0.3]),
    "short velocity": joint_state(JOINTS, [0.1, 0.2], [0.3]),
    "long velocity": joint_state(JOINTS, [0.1, 0.2], [0.3, 0.4, 0.5]),  # another joint list's values
    "values without names": joint_state([], [0.1, 0.2], [0.3, 0.4]),  # no reset marker
}


def good_message(obs: np.ndarray, as_joint_state: bool):
    if as_joint_state:  # positions of (slider, hinge), then velocities: the policy order
        return joint_state(reversed(JOINTS), obs[1::-1], obs[3:1:-1])  # message order is free
    return m.observation_to_msg(obs)


@pytest.mark.parametrize("as_joint_state", [False, True], ids=["Float32MultiArray", "JointState"])
def test_bad_observations_are_dropped_counted_and_never_reach_the_model(tmp_path, ros_domain_id, ros_node,
                                                                         as_joint_state, capfd):
    """... and logged once per reason in 5 s: one throttle for all hid every reason after the first."""
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4, bias=0.1)
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, as_joint_state,
                       observation_timeout_s=60.0)
    with graph:
        actor = rig.actor
        spy = Spy(actor.current.runner)
        actor.current = dataclasses.replace(actor.current, runner=spy)
        bad = BAD_JOINT_STATES if as_joint_state else BAD_ARRAYS
        assert rig.spin_until(lambda: rig.counts == [0]), rig.counts  # there from the start (it was not)
        rig.send(good_message(GOOD[0], as_joint_state))
        for msg in bad.values():
            rig.send(msg)
        logged = re.findall(r"observation dropped \(\d+ so far\): (.*)", capfd.readouterr().err)
        for msg in bad.values():  # again, within 5 s: counted, not logged
            rig.send(msg)
        again = re.findall(r"observation dropped", capfd.readouterr().err)
        rig.send(good_message(GOOD[1], as_joint_state))
        assert rig.spin_until(lambda: len(rig.commands) == 2 and rig.counts[-1:] == [2 * len(bad)]), \
            f"commands {rig.commands}, counts {rig.counts}"
    assert len(logged) >= 3 and len({re.sub(r"\d", "", line) for line in logged}) == len(logged), logged
    assert again == [], again
    assert actor.rejected_observations == 2 * len(bad)
    assert actor.actions == 2 and actor.safe_commands == 0
    assert len(spy.inputs) == 2, "a bad observation reached the model"
    for seen, sent in zip(spy.inputs, GOOD):
        np.testing.assert_array_equal(seen, sent)
    assert rig.counts == sorted(rig.counts) and rig.counts[-1] == 2 * len(bad)  # published, counting up


@pytest.mark.parametrize("rate_hz", [0.0, 50.0], ids=["per-observation", "fixed-rate"])
def test_joint_state_of_another_size_than_the_policy_is_dropped_and_counted(tmp_path, ros_domain_id,
                                                                            ros_node, rate_hz):
    """A policy of another input size swapped in (one assignment, as the loader's swap; here
    without the loader's size check): the 4 values of the JointState spec never reach its model,
    each observation is dropped and counted; with a policy of the spec's size back, the actor
    answers again. Before the fix the model got them and the callback raised (numpy broadcast)."""
    from opolo_ros.nodes.actor_runtime import LoadedPolicy

    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4, bias=0.1)  # 0.3 in env units
    wider = LoadedPolicy.load(str(onnx_policy(tmp_path / "p6.onnx", [0.0] * 6, bias=-0.1, obs_dim=6)),
                              None, None, None)
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, joint_state=True, rate_hz=rate_hz,
                       observation_timeout_s=60.0)
    with graph:
        actor = rig.actor
        rig.send(good_message(GOOD[0], True))
        assert rig.spin_until(lambda: rig.commands)
        fitting = actor.current
        spy = Spy(wider.runner)
        actor.current = dataclasses.replace(wider, runner=spy, bounds=fitting.bounds)
        for _ in range(3):
            rig.send(good_message(GOOD[1], True))
        assert rig.spin_until(lambda: rig.counts[-1:] == [3]), rig.counts
        rig.spin_for(0.2)  # a fixed-rate actor would command from a dropped observation here
        during = len(rig.commands)
        actor.current = fitting
        rig.send(good_message(GOOD[1], True))
        assert rig.spin_until(lambda: len(rig.commands) > during)
    assert actor.rejected_observations == 3 and spy.inputs == [], "a wrong-size observation reached the model"
    assert all(v == pytest.approx(0.3) for _, v in rig.commands), rig.commands  # never the 6-input policy
    assert actor.safe_commands == 0 and actor.nonfinite_actions == 0


def test_joint_state_actor_refuses_a_policy_of_another_size(tmp_path, ros_domain_id, ros_node):
    """No model at start: the first policy must still fit the JointState spec (4 values)."""
    graph = GraphRunner([NodeSpec("actor", "actor", parameters={
        "mode": "deploy", "subscribe_policy": False, "joints": JOINTS, "observation_qos": "reliable",
        "command_qos": "reliable", "observation_timeout_s": 60.0})], ros_domain_id)
    peer, peer_executor = ros_node("peer")
    rig = Rig(graph, peer, peer_executor, joint_state=True)
    with graph:
        actor = rig.actor
        actor.request_load(str(onnx_policy(tmp_path / "p6.onnx", [0.0] * 6, obs_dim=6)))
        assert rig.spin_until(lambda: actor.rejected == 1), "a policy of another size was loaded"
        assert actor.current is None
        actor.request_load(str(onnx_policy(tmp_path / "p.onnx", [0.0] * 4, bias=0.1)))
        assert rig.spin_until(lambda: actor.current is not None)
        rig.send(good_message(GOOD[0], True))
        assert rig.spin_until(lambda: rig.commands)
    assert rig.commands[0][1] == pytest.approx(0.3) and actor.rejected_observations == 0


@pytest.mark.parametrize("case", ["fewer joints", "time feature"])
def test_joint_state_spec_that_does_not_fit_the_model_is_refused_at_start_up(tmp_path, ros_domain_id, case):
    from opolo_ros.nodes.common import ParameterError

    if case == "fewer joints":
        model, joints = onnx_policy(tmp_path / "p.onnx", [0.0] * 4), ["slider"]
        expect = r"give 2 values \(1 joint x 2 fields: position, velocity\), the policy .* has obs_dim 4$"
    else:  # InvertedPendulum trained with the time feature: 4 joint values + 1 - t/T
        model, joints = onnx_policy(tmp_path / "p.onnx", [0.0] * 5, obs_dim=5, time_feature=True), JOINTS
        expect = (r"give 4 values .* obs_dim 5; it was trained with time_feature: true, so its last "
                  r"input is 1 - t/T: set time_feature_clock to the training episode length")
    spec = NodeSpec("actor", "actor", parameters={"mode": "deploy", "model": str(model),
                                                  "subscribe_policy": False, "joints": joints})
    with pytest.raises(ParameterError, match=expect) as err:
        GraphRunner([spec], ros_domain_id)
    assert "\n" not in str(err.value)
    with pytest.raises(ParameterError, match="parameter 'obs_dim' is 6"):
        GraphRunner([dataclasses.replace(spec, parameters={**spec.parameters, "obs_dim": 6})], ros_domain_id)


@pytest.mark.parametrize("as_joint_state", [False, True], ids=["Float32MultiArray", "JointState"])
def test_time_feature_clock_appends_1_minus_t_over_T_and_restarts_after_the_watchdog(
        tmp_path, ros_domain_id, ros_node, as_joint_state):
    """A policy trained with the time feature, fed 4-value observations: the actor appends
    1 - t/T (T = 4 here), t counting its commands and starting again after T; after the watchdog
    the clock starts from 1.0 again. The policy outputs 3 x its last input."""
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4 + [1.0], obs_dim=5, time_feature=True)
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, as_joint_state, time_feature_clock=4,
                       observation_timeout_s=1.0, safe_command=[-0.5], watchdog_rate_hz=50.0)
    with graph:
        actor = rig.actor
        spy = Spy(actor.current.runner)
        actor.current = dataclasses.replace(actor.current, runner=spy)
        for k in range(6):
            rig.send(good_message(GOOD[k % 2], as_joint_state))

        def policy_commands() -> list[float]:
            return [v for _, v in rig.commands if v != pytest.approx(-0.5)]

        # send() waits for the actor to publish; the sixth command may still be on its way here
        # (a loaded full run once compared before it arrived)
        assert rig.spin_until(lambda: len(policy_commands()) >= 6), rig.commands
        first = policy_commands()
        assert rig.spin_until(lambda: actor.stale, 5.0)  # silence: the watchdog takes over
        rig.send(good_message(GOOD[0], as_joint_state))
        rig.send(good_message(GOOD[1], as_joint_state))
        assert rig.spin_until(lambda: len(policy_commands()) >= 8), rig.commands
        again = policy_commands()[-2:]
    assert first == pytest.approx([3.0, 2.25, 1.5, 0.75, 3.0, 2.25])
    assert again == pytest.approx([3.0, 2.25])  # the clock restarted
    assert len(spy.inputs) == 8 and all(x.shape == (5,) for x in spy.inputs)
    for k, x in enumerate(spy.inputs[:6]):
        np.testing.assert_array_equal(x[:4], GOOD[k % 2])  # the observation, then the clock
    assert actor.rejected_observations == 0 and actor.stale_events >= 1


def test_time_feature_clock_at_a_fixed_rate(tmp_path, ros_domain_id, ros_node):
    """The fixed-rate timer checks the observation with the clock's value added against the model:
    without it every observation was dropped there and no command went out (a mutation test)."""
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4 + [1.0], obs_dim=5, time_feature=True)
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, time_feature_clock=4, rate_hz=50.0,
                       observation_timeout_s=5.0, safe_command=[-0.5])
    with graph:
        rig.send(good_message(GOOD[0], False))
        assert rig.spin_until(lambda: len(rig.commands) >= 5), rig.commands
    assert [v for _, v in rig.commands][:5] == pytest.approx([3.0, 2.25, 1.5, 0.75, 3.0])


@pytest.mark.parametrize("case", ["no time feature", "train mode", "negative"])
def test_time_feature_clock_that_cannot_apply_is_refused_at_start_up(tmp_path, ros_domain_id, case):
    from opolo_ros.nodes.common import ParameterError

    time_feature = case != "no time feature"
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 5, obs_dim=5, time_feature=time_feature)
    params = {"mode": "deploy", "model": str(model), "subscribe_policy": False,
              "time_feature_clock": -1 if case == "negative" else 1000}
    expect = {"no time feature": r"time_feature_clock is 1000, but the policy .* was trained without",
              "train mode": r"'time_feature_clock' is for deploy mode",
              "negative": r"'time_feature_clock' must be >= 0, got -1"}[case]
    if case == "train mode":
        params["mode"] = "train"
    with pytest.raises(ParameterError, match=expect) as err:
        GraphRunner([NodeSpec("actor", "actor", parameters=params)], ros_domain_id)
    assert "\n" not in str(err.value)


def test_clock_actor_refuses_a_hot_swapped_model_without_the_time_feature(tmp_path, ros_domain_id, ros_node):
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4 + [1.0], obs_dim=5, time_feature=True)
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, time_feature_clock=1000,
                       observation_timeout_s=60.0)
    with graph:
        actor = rig.actor
        first = actor.current
        actor.request_load(str(onnx_policy(tmp_path / "plain.onnx", [0.0] * 5, bias=0.1, obs_dim=5)))
        assert rig.spin_until(lambda: actor.rejected == 1), "a model without the time feature was loaded"
        rig.send(good_message(GOOD[0], False))
    assert actor.current is first and rig.commands[-1][1] == pytest.approx(3.0)  # 3 x the clock's 1.0


@pytest.mark.parametrize("task", ["", "any", "*"], ids=["the first policy's task", "any task", "'*'"])
def test_actor_refuses_a_hot_swapped_policy_of_another_task(tmp_path, ros_domain_id, ros_node, task):
    """HalfCheetah and Walker2d policies both take 17 values and give 6: a policy of another task
    with the same sizes (another learner on the same topic, a wrong file) is refused and the running
    one kept, unless parameter `task` is any (or '*': a bare * is YAML alias syntax, hard to give)."""
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4, bias=0.1)
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, observation_timeout_s=60.0, task=task)
    with graph:
        actor = rig.actor
        first = actor.current
        actor.request_load(str(onnx_policy(tmp_path / "other.onnx", [0.0] * 4, bias=0.2, env="Other-v5")))
        if task in ("any", "*"):
            assert rig.spin_until(lambda: actor.current is not first), "the policy was not swapped in"
        else:
            assert rig.spin_until(lambda: actor.rejected == 1), "a policy of another task was loaded"
        rig.send(good_message(GOOD[0], False))
        assert rig.spin_until(lambda: rig.commands)
    assert rig.commands[-1][1] == pytest.approx(0.6 if task else 0.3)  # 3 x the bias
    assert actor.rejected == (0 if task else 1)


def test_task_parameter_matches_mjcf_policies_by_file_name(tmp_path, ros_domain_id):
    """An MJCF policy names the file it was trained from, a path of the training machine: `task`
    matches it by file name; a policy of another task is refused at start-up, in one line."""
    from opolo_ros.nodes.common import ParameterError

    params = {"mode": "deploy", "subscribe_policy": False, "task": "arm.xml"}
    arm = onnx_policy(tmp_path / "arm.onnx", [0.0] * 4, env="/home/trainer/robots/arm.xml")
    with GraphRunner([NodeSpec("actor", "actor", parameters={**params, "model": str(arm)})],
                     ros_domain_id) as graph:
        assert graph.nodes["actor"].current.metadata.env_id == "/home/trainer/robots/arm.xml"
    for env in ("/home/trainer/robots/leg.xml", "arm-v5"):
        model = onnx_policy(tmp_path / "other.onnx", [0.0] * 4, env=env)
        with pytest.raises(ParameterError, match=rf"trained on {env}, parameter 'task' is arm.xml \(set task "
                                                 r"to any to accept policies of any task\)$") as err:
            GraphRunner([NodeSpec("actor", "actor", parameters={**params, "model": str(model)})],
                        ros_domain_id)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("joints,published,fix", [
    (True, Float32MultiArray, "leave joints empty, set observation_type float32"),
    (False, Float64MultiArray, "set observation_type float64"),
    (False, Int64, "the actor reads std_msgs/msg/Float32MultiArray or Float64MultiArray (observation_type), "
                   "or sensor_msgs/msg/JointState with joints: publish one of those"),
], ids=["JointState actor, arrays published", "array actor, Float64MultiArray published",
        "array actor, another type published"])
def test_the_watchdog_warning_names_publishers_of_another_type(tmp_path, ros_domain_id, ros_node, capfd,
                                                               joints, published, fix):
    """A JointState actor left on the default 'observation' topic, where a bridge publishes
    Float32MultiArray, heard nothing: the only sign was "no valid observation" (a walkthrough). A
    Float64MultiArray state (ros2_control's array type) was told to set joints, which reads JointState."""
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4)
    peer, _ = ros_node("bridge")
    peer.create_publisher(published, "observation", 10)
    graph = GraphRunner([NodeSpec("actor", "actor", parameters={
        "mode": "deploy", "model": str(model), "subscribe_policy": False,
        "joints": JOINTS if joints else [""], "observation_timeout_s": 1.0, "watchdog_rate_hz": 20.0})],
        ros_domain_id)
    with graph:
        assert graph.spin_until(lambda: graph.nodes["actor"].stale, timeout_s=10.0)
    err = capfd.readouterr().err
    kind = published.__name__
    wanted = "sensor_msgs/msg/JointState" if joints else "std_msgs/msg/Float32MultiArray"
    assert ("no valid observation for 1 s: publishing the safe command [0.0] until observations return "
            f"(/observation is published as std_msgs/msg/{kind}, this actor reads {wanted}: {fix}, or "
            "remap observation_topic)") in err, err
    assert re.search(r"\[WARN\] \[[\d.]+\] \[actor\]: no valid observation for 1 s", err), err  # at once


def test_a_publisher_of_another_type_that_starts_after_the_actor_is_named(tmp_path, ros_domain_id, ros_node,
                                                                            capfd):
    """The type hint came only with the first stale warning: a robot started after the actor (the
    usual order with a launch) got "nothing publishes", and then nothing more while it published
    JointState to an array actor. While stale, the actor looks again (every STALE_RECHECK_S)."""
    from opolo_ros.nodes import actor as actor_module

    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4)
    graph = GraphRunner([NodeSpec("actor", "actor", parameters={
        "mode": "deploy", "model": str(model), "subscribe_policy": False, "observation_timeout_s": 0.5,
        "watchdog_rate_hz": 20.0})], ros_domain_id)
    with graph:
        actor = graph.nodes["actor"]
        assert graph.spin_until(lambda: actor.stale, timeout_s=10.0)
        first = capfd.readouterr().err  # within the discovery grace
        assert "until observations return (no publisher of /observation discovered yet)" in first
        peer, peer_executor = ros_node("robot")
        peer.create_publisher(JointState, "observation", 10)
        hinted = ("still no valid observation: safe command (/observation is published as "
                  "sensor_msgs/msg/JointState")
        err = ""

        def told() -> bool:
            nonlocal err
            peer_executor.spin_once(timeout_sec=0.0)
            err += capfd.readouterr().err
            return hinted in err

        assert graph.spin_until(told, timeout_s=actor_module.STALE_RECHECK_S + 10.0), err
    assert "set joints" in err and actor.safe_commands > 0


def test_the_first_watchdog_warning_within_the_discovery_grace_says_no_publisher_is_discovered_yet(
        tmp_path, ros_domain_id, capfd, monkeypatch):
    """A deploy actor started beside a sim bridge (wait_for_controller) warned "nothing publishes
    /observation" half a second in, while the bridge was still being discovered (a walkthrough).
    Within discovery_grace_s of start-up the note says none is discovered yet; once the grace is
    over, a look again (every STALE_RECHECK_S while stale) says nothing publishes it."""
    from opolo_ros.nodes import actor as actor_module

    monkeypatch.setattr(actor_module, "STALE_RECHECK_S", 0.5)
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4)
    graph = GraphRunner([NodeSpec("actor", "actor", parameters={
        "mode": "deploy", "model": str(model), "subscribe_policy": False, "observation_timeout_s": 0.5,
        "watchdog_rate_hz": 20.0, "discovery_grace_s": 2.0})], ros_domain_id)
    with graph:
        assert graph.spin_until(lambda: graph.nodes["actor"].stale, timeout_s=10.0)
        err = capfd.readouterr().err
        assert "until observations return (no publisher of /observation discovered yet)" in err, err
        assert "nothing publishes" not in err
        # and said at info level: every deploy starts so (it warned at each start, a walkthrough)
        assert re.search(r"\[INFO\] \[[\d.]+\] \[actor\]: no valid observation for 0.5 s", err), err
        later = "still no valid observation: safe command (nothing publishes /observation)"

        def told() -> bool:
            nonlocal err
            err += capfd.readouterr().err
            return later in err

        assert graph.spin_until(told, timeout_s=10.0), err
        assert re.search(r"\[WARN\] \[[\d.]+\] \[actor\]: still no valid observation", err), err



def test_a_publisher_that_never_sends_is_warned_of_once_the_grace_is_over(tmp_path, ros_domain_id, ros_node,
                                                                          capfd, monkeypatch):
    """A publisher of the right type that sends nothing (a bridge stuck waiting, a driver that
    never starts): the start-up wait is said at info level, then, once discovery_grace_s is over,
    warned of with what it may be."""
    from std_msgs.msg import Float32MultiArray

    from opolo_ros.nodes import actor as actor_module

    monkeypatch.setattr(actor_module, "STALE_RECHECK_S", 0.5)
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4)
    peer, _ = ros_node("bridge")
    peer.create_publisher(Float32MultiArray, "observation", 10)
    graph = GraphRunner([NodeSpec("actor", "actor", parameters={
        "mode": "deploy", "model": str(model), "subscribe_policy": False, "observation_timeout_s": 0.5,
        "watchdog_rate_hz": 20.0, "discovery_grace_s": 2.0})], ros_domain_id)
    with graph:
        err = ""

        def told() -> bool:
            nonlocal err
            err += capfd.readouterr().err
            return "still no valid observation" in err

        assert graph.spin_until(told, timeout_s=10.0), err
    assert re.search(r"\[INFO\] \[[\d.]+\] \[actor\]: no valid observation for 0.5 s", err), err
    assert re.search(r"\[WARN\] \[[\d.]+\] \[actor\]: still no valid observation: safe command "
                     r"\(/observation is published with the type this actor reads, yet nothing valid "
                     "arrives", err), err


CART_POLE_XML = """<mujoco>
  <worldbody>
    <body name="cart">
      <joint name="slider" type="slide" axis="1 0 0"/>
      <geom type="box" size="0.1 0.1 0.1" mass="1"/>
      <body name="pole">
        <joint name="hinge" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 0.5" size="0.02" mass="0.1"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="slider" ctrllimited="true" ctrlrange="-1 1"/></actuator>
</mujoco>
"""


def test_joints_in_another_order_than_the_mjcf_policys_are_refused(tmp_path, ros_domain_id):
    """A deploy with `joints:=hinge,slider` fed a slider,hinge policy swapped inputs without a word
    (training refuses that order; the ONNX file did not say its joints). An MJCF policy's metadata
    now names them, and the actor refuses the same names in another order, at start and on a swap."""
    from test_nodes import Linear

    from opolo_ros.algo.config import RunConfig
    from opolo_ros.export.onnx_policy import export_policy, load_policy
    from opolo_ros.nodes.common import ParameterError
    from opolo_ros.train.direct import policy_metadata

    robot = tmp_path / "cart.xml"
    robot.write_text(CART_POLE_XML)
    meta = policy_metadata(RunConfig(env_id=str(robot)), training_step=1, version=1, trainer="test",
                           control_period_s=None)
    assert meta["joint_names"] == "slider,hinge"
    model = export_policy(Linear([0.0] * 4), tmp_path / "cart.onnx", action_low=-1.0, action_high=1.0,
                          metadata=meta)
    assert load_policy(model).metadata.joint_names == ("slider", "hinge")
    params = {"mode": "deploy", "model": str(model), "subscribe_policy": False}
    with GraphRunner([NodeSpec("actor", "actor", parameters={**params, "joints": ["slider", "hinge"]})],
                     ros_domain_id) as graph:
        actor = graph.nodes["actor"]
        swapped = tmp_path / "swapped.onnx"  # the same policy, its joints said the other way round
        export_policy(Linear([0.0] * 4), swapped, action_low=-1.0, action_high=1.0,
                      metadata={**meta, "joint_names": "hinge,slider", "version": 2})
        actor.request_load(str(swapped))
        assert graph.spin_until(lambda: actor.rejected == 1, timeout_s=10.0)
        assert actor.current.metadata.joint_names == ("slider", "hinge")
    with pytest.raises(ParameterError, match=r"joints hinge,slider name the joints of the policy .* in "
                                             r"another order than its observation's, slider,hinge"):
        GraphRunner([NodeSpec("actor", "actor", parameters={**params, "joints": ["hinge", "slider"]})],
                    ros_domain_id)



def test_some_of_the_policys_joints_in_another_order_are_refused_by_the_actor(tmp_path, ros_domain_id):
    """Training and the deploy launch refuse joints that name some of the model's joints in another
    order (sim.tasks.reordered_joints); the actor refused only all of them in another order, and
    started a three-joint arm's policy on `joints:=hinge2,slider` with position, velocity and effort
    (6 inputs, as its 3 x 2), feeding it swapped values (a walkthrough). One rule now, and the
    message says the order to give; the same joints in the policy's order start."""
    from test_nodes import Linear

    from opolo_ros.algo.config import RunConfig
    from opolo_ros.export.onnx_policy import export_policy
    from opolo_ros.nodes.common import ParameterError
    from opolo_ros.train.direct import policy_metadata

    robot = tmp_path / "arm.xml"
    robot.write_text(CART_POLE_XML.replace(
        '<geom type="capsule" fromto="0 0 0 0 0 0.5" size="0.02" mass="0.1"/>',
        '<geom type="capsule" fromto="0 0 0 0 0 0.5" size="0.02" mass="0.1"/>\n'
        '        <body name="tip" pos="0 0 0.5"><joint name="hinge2" type="hinge" axis="0 1 0"/>\n'
        '          <geom type="sphere" size="0.05" mass="0.1"/></body>'))
    meta = policy_metadata(RunConfig(env_id=str(robot)), training_step=1, version=1, trainer="test",
                           control_period_s=None)
    assert meta["joint_names"] == "slider,hinge,hinge2"
    model = export_policy(Linear([0.0] * 6, obs_dim=6), tmp_path / "arm.onnx", action_low=-1.0,
                          action_high=1.0, metadata=meta)
    params = {"mode": "deploy", "model": str(model), "subscribe_policy": False,
              "joint_fields": ["position", "velocity", "effort"]}
    with pytest.raises(ParameterError, match=r"joints hinge2,slider name the joints of the policy .* in "
                                             r"another order than its observation's, slider,hinge2: give "
                                             r"joints in that order"):
        GraphRunner([NodeSpec("actor", "actor", parameters={**params, "joints": ["hinge2", "slider"]})],
                    ros_domain_id)
    with GraphRunner([NodeSpec("actor", "actor", parameters={**params, "joints": ["slider", "hinge2"]})],
                     ros_domain_id) as graph:
        assert graph.nodes["actor"].current.metadata.joint_names == ("slider", "hinge", "hinge2")


def test_joints_in_another_order_than_a_gymnasium_policys_task_are_refused_by_a_bare_actor(ros_domain_id):
    """The deploy launch refused `joints:=hinge,slider` for the shipped InvertedPendulum expert, but
    an actor started on its own (`ros2 run opolo_ros actor`) took them and fed the policy swapped
    values: a Gymnasium policy records no joint_names, and the actor now reads its task's (a
    walkthrough). The task's own order, and a robot's own names, still start."""
    from opolo_ros.nodes.common import ParameterError

    expert = Path(__file__).resolve().parents[1] / "models" / "experts" / "InvertedPendulum-v5.onnx"
    params = {"mode": "deploy", "model": str(expert), "subscribe_policy": False}
    with pytest.raises(ParameterError, match=r"joints hinge,slider name the joints of the policy .* in "
                                             r"another order than its observation's, slider,hinge"):
        GraphRunner([NodeSpec("actor", "actor", parameters={**params, "joints": ["hinge", "slider"]})],
                    ros_domain_id)
    for joints in (["slider", "hinge"], ["cart", "pole"]):
        with GraphRunner([NodeSpec("actor", "actor", parameters={**params, "joints": joints})],
                         ros_domain_id) as graph:
            assert graph.nodes["actor"].current.metadata.env_id == "InvertedPendulum-v5"

def test_a_fixed_rate_off_the_policys_training_rate_is_warned_of_once(tmp_path, ros_domain_id, capfd):
    """An MJCF arm trained at 100 Hz was commanded at the deploy launch's 50 Hz, and half its steps
    found no new command (a walkthrough). The start-up line says the command rate; a fixed rate more
    than 10 % off the rate the model says it was trained at is warned of, once."""
    from opolo_ros.export.onnx_policy import stamp_metadata

    arm = onnx_policy(tmp_path / "arm.onnx", [0.0] * 4)
    stamp_metadata(arm, {"control_period_s": 0.01})
    plain = onnx_policy(tmp_path / "plain.onnx", [0.0] * 4)  # says no training rate

    def started(model: Path, rate_hz: float, swap_in: Path | None = None) -> str:
        graph = GraphRunner([NodeSpec("actor", "actor", parameters={
            "mode": "deploy", "model": str(model), "subscribe_policy": False, "rate_hz": rate_hz})],
            ros_domain_id)
        with graph:
            actor = graph.nodes["actor"]
            if swap_in is not None:
                actor.request_load(str(swap_in))
                assert graph.spin_until(lambda: actor.swaps == 2, timeout_s=10.0), "not swapped in"
        return capfd.readouterr().err

    capfd.readouterr()
    for model, rate in ((arm, 100.0), (arm, 91.0), (arm, 0.0), (plain, 50.0)):
        err = started(model, rate)
        assert "was trained at" not in err, (model, rate, err)
    assert "commands: std_msgs/Float64MultiArray on /action once per observation" in started(arm, 0.0)
    err = started(arm, 50.0, swap_in=arm)  # the same mismatch again: said once
    assert "commands: std_msgs/Float64MultiArray on /action at 50 Hz" in err, err
    assert err.count("commands at 50 Hz, the policy") == 1, err
    assert (f"commands at 50 Hz, the policy {arm} was trained at 100 Hz (control period 0.01 s): set "
            "rate_hz to 100") in err, err
    fast = onnx_policy(tmp_path / "fast.onnx", [0.0] * 4)  # swapped in, another training rate: said too
    stamp_metadata(fast, {"control_period_s": 0.005})
    err = started(arm, 50.0, swap_in=fast)
    assert err.count("commands at 50 Hz, the policy") == 2 and "was trained at 200 Hz" in err, err


def test_a_deploy_actor_without_a_watchdog_says_so(tmp_path, ros_domain_id, capfd):
    """rate_hz 0 and watchdog_rate_hz 0 turn the watchdog off: said at start-up, not silently."""
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4)
    for watchdog_hz, warned in ((0.0, True), (50.0, False)):
        capfd.readouterr()
        with GraphRunner([NodeSpec("actor", "actor", parameters={
                "mode": "deploy", "model": str(model), "subscribe_policy": False, "rate_hz": 0.0,
                "watchdog_rate_hz": watchdog_hz})], ros_domain_id):
            pass
        assert ("no watchdog (rate_hz 0 and watchdog_rate_hz 0): when observations stop, the last "
                "command stays applied" in capfd.readouterr().err) == warned


def test_observations_off_the_policys_training_rate_are_warned_of_once(tmp_path, ros_domain_id, ros_node,
                                                                       capfd, monkeypatch):
    """A command per observation (rate_hz 0): the policy runs at the rate observations come. A
    robot's joint states at 100 Hz drove a 25 Hz policy at about 77 Hz without a word (a
    walkthrough); observations more than 10 % off the training rate are now warned of, once."""
    from opolo_ros.export.onnx_policy import stamp_metadata
    from opolo_ros.nodes import actor as actor_module

    monkeypatch.setattr(actor_module, "RATE_WINDOW", 20)  # measured over 20 observations, not 250
    slow = onnx_policy(tmp_path / "slow.onnx", [0.0] * 4)
    stamp_metadata(slow, {"control_period_s": 0.1})  # trained at 10 Hz
    plain = onnx_policy(tmp_path / "plain.onnx", [0.0] * 4)  # says no training rate
    for model, warned in ((plain, False), (slow, True)):
        capfd.readouterr()
        graph, rig = start(tmp_path, ros_domain_id, ros_node, model, observation_timeout_s=60.0)
        with graph:
            rig.stream(np.zeros(4, np.float32), 3.0, hz=50.0)  # 60-150 observations: 3-7 windows
        err = capfd.readouterr().err
        assert rig.actor.actions >= 60, rig.actor.actions  # warned after two off-rate windows in a row
        assert err.count("each gets a command") == warned, err
    rate = float(re.search(r"observations come at ([0-9.]+) Hz and each gets a command", err).group(1))
    assert 25 < rate < 60, rate
    assert f"the policy {slow} was trained at 10 Hz: publish them at 10 Hz, or set rate_hz to 10" in err, err


def test_float64_array_observations_with_observation_type_float64(tmp_path, ros_domain_id, ros_node):
    """A robot whose state comes as std_msgs/Float64MultiArray (ros2_control's array type) was not
    heard at all: observation_type float64 reads it (a value beyond float32 is dropped, counted)."""
    model = onnx_policy(tmp_path / "p.onnx", [1 / 3, 0.0, 0.0, 0.0])  # command = the first value
    graph = GraphRunner([NodeSpec("actor", "actor", parameters={
        "mode": "deploy", "model": str(model), "subscribe_policy": False, "observation_type": "float64",
        "observation_qos": "reliable", "command_qos": "reliable", "observation_timeout_s": 60.0})],
        ros_domain_id)
    peer, executor = ros_node("robot")
    pub = peer.create_publisher(Float64MultiArray, "observation", RELIABLE_DEFAULT_QOS)
    commands: list[float] = []
    peer.create_subscription(Float64MultiArray, "action", lambda msg: commands.append(msg.data[0]),
                             RELIABLE_DEFAULT_QOS)
    with graph:
        actor = graph.nodes["actor"]
        executors = [graph.executor, executor]
        assert spin_until(executors, lambda: linked(pub, actor) and linked(actor.action_pub, peer), 10.0)
        pub.publish(Float64MultiArray(data=[1e300, 0.0, 0.0, 0.0]))
        pub.publish(Float64MultiArray(data=[0.5, 0.0, 0.0, 0.0]))
        assert spin_until(executors, lambda: commands, 10.0)
    assert commands == [pytest.approx(0.5)] and actor.rejected_observations == 1


def test_joint_state_spec_with_the_clock_fits_the_time_feature_model(tmp_path, ros_domain_id):
    """4 joint values + the clock = the model's 5 inputs; 4 values + the clock against a
    4-input model is refused with the clock named."""
    from opolo_ros.nodes.common import ParameterError

    model5 = onnx_policy(tmp_path / "p5.onnx", [0.0] * 5, obs_dim=5, time_feature=True)
    params = {"mode": "deploy", "subscribe_policy": False, "joints": JOINTS, "time_feature_clock": 1000}
    with GraphRunner([NodeSpec("actor", "actor", parameters={**params, "model": str(model5)})],
                     ros_domain_id) as graph:
        assert graph.nodes["actor"].current.metadata.obs_dim == 5
    model4 = marked_time_feature(onnx_policy(tmp_path / "p4.onnx", [0.0] * 4))
    with pytest.raises(ParameterError, match=r"give 4 values .* \+ the clock's time feature, the policy"):
        GraphRunner([NodeSpec("actor", "actor", parameters={**params, "model": str(model4)})], ros_domain_id)


def marked_time_feature(path: Path) -> Path:
    """The same ONNX model, its metadata saying it was trained with the time feature."""
    import onnx

    model = onnx.load(str(path))
    for prop in model.metadata_props:
        if prop.key == "time_feature":
            prop.value = "1"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("sim_time", [False, True], ids=["", "use_sim_time without /clock"])
@pytest.mark.parametrize("rate_hz", [0.0, 50.0], ids=["per-observation", "fixed-rate"])
def test_watchdog_publishes_the_safe_command_when_observations_stop_and_recovers(
        tmp_path, ros_domain_id, ros_node, rate_hz, sim_time):
    """Also with use_sim_time and no /clock (a shared bringup file, a simulator that died): the
    deploy timers run on the steady clock, so the watchdog and the fixed rate go on."""
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4, bias=0.1)  # always 0.3 in env units
    timeout, silence = 0.3, 1.0
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, observation_timeout_s=timeout,
                       safe_command=[0.5], watchdog_rate_hz=50.0, rate_hz=rate_hz, use_sim_time=sim_time)
    obs = np.zeros(4, np.float32)
    with graph:
        actor = rig.actor
        rig.stream(obs, 0.6)
        policy_start = next(i for i, (_, v) in enumerate(rig.commands) if v == pytest.approx(0.3))
        before, events_before = len(rig.commands), actor.stale_events  # stale before the first too
        last_obs = time.monotonic()
        rig.spin_for(silence)
        stale, events = actor.stale, actor.stale_events
        during = rig.commands[before:]
        rig.stream(obs, 0.5)
        after = rig.commands[before + len(during):]
        recovered = actor.stale
    assert all(v == pytest.approx(0.3) for _, v in rig.commands[policy_start:before])
    safe = [(t, v) for t, v in during if v == pytest.approx(0.5)]
    assert stale and events == events_before + 1  # went stale once (one warning logged)
    assert 15 <= len(safe) <= 60, len(safe)  # ~50 Hz for silence - timeout = 0.7 s
    assert safe[0][0] - last_obs > timeout - 0.05  # not before the timeout
    assert all(v == pytest.approx(0.5) for _, v in during[len(during) - len(safe):])
    assert not recovered and actor.safe_commands >= len(safe)
    first_policy = next(i for i, (_, v) in enumerate(after) if v == pytest.approx(0.3))
    assert first_policy <= 2 and len(after) >= 10
    assert all(v == pytest.approx(0.3) for _, v in after[first_policy:]), "the watchdog kept firing"


def narrowed(path: Path, low: float, high: float) -> Path:
    """The same ONNX model with other action bounds in its metadata (the graph is unchanged)."""
    import onnx

    model = onnx.load(str(path))
    for prop in model.metadata_props:
        if prop.key in ("action_low", "action_high"):
            prop.value = f"[{low if prop.key == 'action_low' else high}]"
    out = path.with_name(f"narrow_{path.name}")
    onnx.save(model, str(out))
    return out


@pytest.mark.parametrize("limits", ["parameters", "model metadata"])
def test_commands_are_clamped(tmp_path, ros_domain_id, ros_node, limits):
    model = onnx_policy(tmp_path / "p.onnx", [1.0, 0.0, 0.0, 0.0])  # 3 * clamp(obs[0], -1, 1)
    params = {"observation_timeout_s": 60.0}
    if limits == "parameters":
        params.update(action_low=[-1.0], action_high=[1.5])
        bound_low, bound_high = -1.0, 1.5
    else:
        model = narrowed(model, -2.0, 2.0)
        bound_low, bound_high = -2.0, 2.0
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, **params)
    with graph:
        for x in (0.9, -0.9, 0.2):
            rig.send(m.observation_to_msg(np.array([x, 0.0, 0.0, 0.0], np.float32)))
        assert rig.spin_until(lambda: len(rig.commands) == 3)
    values = [v for _, v in rig.commands]
    assert values == pytest.approx([bound_high, bound_low, 0.6])


def test_action_limits_only_tighten_the_models_bounds():
    """Either side alone, wider than the model's (ignored), equal (a pinned command), of one value
    or one per action; of another size, or leaving nothing inside the model's bounds: refused."""
    from opolo_ros.nodes.actor_params import action_limits, clamp_bounds
    from opolo_ros.nodes.common import ParameterError

    model_low, model_high = np.array([-3.0, -2.0], np.float32), np.array([3.0, 2.0], np.float32)

    def bounds(low: list, high: list) -> list:
        return [b.tolist() for b in clamp_bounds(action_limits(low, high), model_low, model_high)]

    assert bounds([], []) == [[-3.0, -2.0], [3.0, 2.0]]
    assert bounds([-1.0], []) == [[-1.0, -1.0], [3.0, 2.0]]  # the other side stays the model's
    assert bounds([], [0.5, 1.0]) == [[-3.0, -2.0], [0.5, 1.0]]
    assert bounds([-10.0], [10.0]) == [[-3.0, -2.0], [3.0, 2.0]]  # limits never widen the bounds
    assert bounds([0.5], [0.5]) == [[0.5, 0.5], [0.5, 0.5]]  # a pinned command is a limit too
    assert bounds([-0.5], [0.5, 1.0]) == [[-0.5, -0.5], [0.5, 1.0]]
    with pytest.raises(ParameterError, match="action_low has 2 values, action_high 3"):
        action_limits([-1.0, -1.0], [1.0, 1.0, 1.0])
    with pytest.raises(ParameterError, match="exceeds action_high"):
        action_limits([1.0], [0.0])
    assert bounds(-1.0, []) == [[-1.0, -1.0], [3.0, 2.0]]  # a YAML scalar is one value (was a TypeError)
    with pytest.raises(ParameterError, match="'action_high' must be a list of numbers, got 'x'"):
        action_limits([], "x")
    with pytest.raises(ValueError, match="parameter 'action_low' has 3 values, the policy has act_dim 2"):
        clamp_bounds(action_limits([-1.0] * 3, []), model_low, model_high)
    with pytest.raises(ValueError, match="leave no command inside the model's bounds"):
        clamp_bounds(action_limits([4.0], [5.0]), model_low, model_high)
    with pytest.raises(ValueError, match="leave no command inside the model's bounds"):
        clamp_bounds(action_limits([2.5], []), model_low, model_high)  # empty in one dimension only


def test_non_finite_or_unusable_parameters_are_refused(tmp_path, ros_domain_id):
    """NaN would switch the watchdog or the rate limit off, inf makes a zero-period timer."""
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4)
    for params, says in [({"observation_timeout_s": NAN}, "'observation_timeout_s' must be a finite"),
                         ({"watchdog_rate_hz": NAN}, "'watchdog_rate_hz' must be a finite number"),
                         ({"max_action_rate": NAN}, "'max_action_rate' must be a finite number"),
                         ({"discovery_grace_s": NAN}, "'discovery_grace_s' must be a finite number"),
                         ({"discovery_grace_s": -1.0}, "'discovery_grace_s' must be a finite number >= 0"),
                         ({"rate_hz": INF}, "'rate_hz' must be a finite number"),
                         ({"rate_hz": 1e-300}, r"'rate_hz' must be 0 \(off\) or at least 0.001 Hz"),
                         ({"cpu_affinity": [4000]},
                          r"cpu_affinity \[4000\]: Invalid argument \(CPUs available"),
                         ({"watchdog_rate_hz": 1e-10}, "'watchdog_rate_hz' must be 0 \\(off\\) or at least"),
                         ({"joint_scale": [1.0, 2.0]}, "'joint_offset' / 'joint_scale' are for JointState"),
                         ({"joints": JOINTS, "joint_scale": [1.0, 2.0]}, "spec scale must have length 4"),
                         ({"joints": JOINTS, "joint_scale": [0.0, 1.0, 1.0, 1.0]},
                          r"spec scale has a 0 \(at \[0\]\)"),
                         ({"action_low": [-1.0, -1.0]}, "'action_low' has 2 values, the policy has act_dim")]:
        spec = NodeSpec("actor", "actor", parameters={"mode": "deploy", "model": str(model), **params})
        with pytest.raises(ValueError, match=says):
            GraphRunner([spec], ros_domain_id)


def test_joint_state_offset_and_scale_shape_the_observation(tmp_path, ros_domain_id, ros_node):
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4)
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, joint_state=True,
                       joint_offset=[1.0, 0.0, 0.0, 0.0], joint_scale=[2.0, 1.0, 1.0, 0.5],
                       observation_timeout_s=60.0)
    with graph:
        spy = Spy(rig.actor.current.runner)
        rig.actor.current = dataclasses.replace(rig.actor.current, runner=spy)
        rig.send(joint_state(JOINTS, [3.0, 0.25], [0.5, 4.0]))
    np.testing.assert_allclose(spy.inputs[0], [4.0, 0.25, 0.5, 2.0])  # (obs - offset) * scale


def test_a_joint_state_reset_marker_is_neither_an_observation_nor_a_rejection(tmp_path, ros_domain_id,
                                                                              ros_node):
    """An episode boundary of a recording (sim_bridge reset_markers: no joints, frame_id 'reset')
    reaching a deploy actor is skipped: not run, not counted as a bad observation."""
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4)
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, joint_state=True,
                       observation_timeout_s=60.0)
    with graph:
        marker = JointState()
        marker.header.frame_id = "reset"
        rig.obs_pub.publish(marker)
        rig.send(joint_state(JOINTS, [0.1, 0.2], [0.3, 0.4]))  # after the marker, in order
        assert (rig.actor.actions, rig.actor.rejected_observations) == (1, 0)



def test_a_reset_marker_restarts_the_time_feature_clock(tmp_path, ros_domain_id, ros_node):
    """A deploy in simulation with a time-feature policy: the bridge resets its episode (and says so
    with a reset marker, reset_markers:=true) while the actor's clock ran on from the last episode,
    feeding the new episode's first states 1 - t/T of the old one's end. The marker restarts the
    clock: the next command is the policy's at t = 0. The policy outputs 3 x its last input."""
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4 + [1.0], obs_dim=5, time_feature=True)
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, joint_state=True, time_feature_clock=4,
                       observation_timeout_s=60.0)
    with graph:
        for k in range(2):
            rig.send(good_message(GOOD[k], True))
        rig.obs_pub.publish(JointState())  # the episode ended
        rig.send(good_message(GOOD[0], True))
        assert rig.spin_until(lambda: len(rig.commands) >= 3), rig.commands
    assert [v for _, v in rig.commands] == pytest.approx([3.0, 2.25, 3.0])
    assert rig.actor.rejected_observations == 0

def unbounded_policy(path: Path, gains: list[float] | None = None) -> Path:
    """A policy whose output overflows float32 for large inputs: gains[i] * sum(obs) for each
    action i (default one action, 1e38 * sum(obs))."""
    import torch

    from opolo_ros.export.onnx_policy import export_policy

    rows = [[g] * 4 for g in (gains or [1e38])]

    class Net(torch.nn.Module):
        obs_dim, act_dim = 4, len(rows)

        def __init__(self) -> None:
            super().__init__()
            self.k = torch.nn.Parameter(torch.tensor(rows), requires_grad=False)

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return obs @ self.k.T

    torch.set_num_threads(1)
    return export_policy(Net(), path, action_low=-3.0, action_high=3.0, verify=False,
                         metadata={"env_id": "InvertedPendulum-v5", "version": 0, "source": "test"})


def test_an_infinite_policy_output_gets_the_safe_command_not_the_bound(tmp_path, ros_domain_id, ros_node):
    graph, rig = start(tmp_path, ros_domain_id, ros_node, unbounded_policy(tmp_path / "inf.onnx"),
                       safe_command=0.25, observation_timeout_s=60.0)  # one number, as action_low takes
    with graph:
        assert np.isinf(rig.actor.current.runner(np.array([5.0, 0.0, 0.0, 0.0], np.float32))).all()
        rig.send(m.observation_to_msg(np.array([5.0, 0.0, 0.0, 0.0], np.float32)))
        rig.send(m.observation_to_msg(np.array([5e-39, 0.0, 0.0, 0.0], np.float32)))  # 0.5: finite
        assert rig.spin_until(lambda: len(rig.commands) == 2)
    assert [v for _, v in rig.commands] == pytest.approx([0.25, 1.5], abs=1e-4)  # 0.5 of [-3, 3]
    assert rig.actor.nonfinite_actions == 1


def test_a_first_observation_of_another_size_is_dropped_before_any_policy_runs(tmp_path, ros_domain_id):
    """A train-mode actor activates its first policy inside the step: the first observation was
    checked against no policy and went into it, and the size error escaped the callback (the
    graph ended; a concurrency review). It is dropped and counted as every later one is; so is one
    checked against a policy that a swap has since replaced."""
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4, bias=0.1)
    spec = NodeSpec("actor", "actor", parameters={"mode": "train", "swap_delay": 0, "warmup_steps": 0,
                                                  "model": str(model), "subscribe_policy": False})
    with GraphRunner([spec], ros_domain_id) as graph:
        actor = graph.nodes["actor"]
        assert actor.current is None and actor._staged  # staged, activated by the first step
        actor._on_observation(raw_observation([0.0] * 7))
        assert (actor.rejected_observations, actor.steps) == (1, 0)
        actor._on_observation(m.observation_to_msg(np.zeros(4, np.float32)))
        assert actor.current is not None and actor.steps == 1
        assert actor._run(actor.current, np.zeros(7, np.float32)) is None  # (after a swap)
        assert actor.rejected_observations == 2 and actor.failed_runs == 0


def test_a_non_finite_value_in_any_action_dimension_gets_the_safe_command(tmp_path, ros_domain_id, ros_node):
    """Only the first dimension of an action was tested for NaN/inf by every other test (act_dim 1):
    a check of action[0] alone passed a command whose second value was inf (a mutation test)."""
    model = unbounded_policy(tmp_path / "inf2.onnx", [0.0, 1e38])  # [0, 1e38 * sum(obs)]
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, safe_command=[0.25, -0.25],
                       observation_timeout_s=60.0)
    with graph:
        rig.send(m.observation_to_msg(np.array([5.0, 0.0, 0.0, 0.0], np.float32)))
        assert rig.spin_until(lambda: len(rig.full) == 1)
    assert rig.full == [pytest.approx([0.25, -0.25])] and rig.actor.nonfinite_actions == 1


def test_safe_command_outside_the_models_bounds_is_refused_inside_wider_limits(tmp_path, ros_domain_id):
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4)  # bounds [-3, 3]
    spec = NodeSpec("actor", "actor", parameters={"mode": "deploy", "model": str(model),
                                                  "safe_command": [5.0], "action_low": [-10.0],
                                                  "action_high": [10.0]})
    with pytest.raises(ValueError, match=r"safe_command \[5.0\] is outside the action limits \[\[-3.0\], "):
        GraphRunner([spec], ros_domain_id)


@pytest.mark.parametrize("safe", [2.0, -2.0], ids=["above", "below"])
def test_safe_command_outside_the_limits_is_refused(tmp_path, ros_domain_id, safe):
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4)
    spec = NodeSpec("actor", "actor", parameters={"mode": "deploy", "model": str(model),
                                                  "action_low": [-1.0], "action_high": [1.0],
                                                  "safe_command": [safe]})
    with pytest.raises(ValueError, match="safe_command"):
        GraphRunner([spec], ros_domain_id)


def test_rate_limit_ramps_commands(tmp_path, ros_domain_id, ros_node):
    model = onnx_policy(tmp_path / "p.onnx", [1.0, 0.0, 0.0, 0.0])  # 3 * clamp(obs[0], -1, 1)
    rate = 2.0  # per second
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, max_action_rate=rate,
                       observation_timeout_s=60.0)
    with graph:
        rig.send(m.observation_to_msg(np.zeros(4, np.float32)))
        assert rig.spin_until(lambda: len(rig.commands) == 1)
        start_time = rig.commands[-1][0]
        rig.stream(np.array([1.0, 0.0, 0.0, 0.0], np.float32), 1.0)
    ramp = rig.commands[1:]
    values = [v for _, v in ramp]
    assert len(ramp) >= 10 and rig.commands[0][1] == 0.0
    assert values == sorted(values), "the ramp went down"
    assert all(v <= rate * (t - start_time) + 0.02 for t, v in ramp), "faster than max_action_rate"
    assert 1.0 <= values[-1] < 3.0  # ramping towards the policy's 3.0, not there after ~1 s


def test_rate_limit_after_a_silence_moves_at_most_one_seconds_worth(tmp_path, ros_domain_id, ros_node):
    """Observations stop for 2.5 s (inside the watchdog's timeout): the next command moves from the
    last one by at most max_action_rate * 1 s, not by rate * the whole silence."""
    model = onnx_policy(tmp_path / "p.onnx", [1.0, 0.0, 0.0, 0.0])  # 3 * clamp(obs[0], -1, 1)
    rate = 1.0  # per second: 2.5 s of silence would allow 2.5
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, max_action_rate=rate,
                       observation_timeout_s=60.0)
    with graph:
        rig.send(m.observation_to_msg(np.zeros(4, np.float32)))
        assert rig.spin_until(lambda: len(rig.commands) == 1)
        rig.spin_for(2.5)
        rig.send(m.observation_to_msg(np.array([1.0, 0.0, 0.0, 0.0], np.float32)))
        assert rig.spin_until(lambda: len(rig.commands) == 2)
    (t0, first), (t1, second) = rig.commands
    assert first == 0.0 and t1 - t0 > 2.0 and rig.actor.safe_commands == 0
    assert second == pytest.approx(rate * 1.0, abs=1e-6)


def test_bound_inference_matches_session_run(tmp_path):
    """The actor's I/O-bound inference gives what ``OnnxPolicy.__call__`` gives, call after call."""
    from opolo_ros.export.onnx_policy import load_policy

    policy = load_policy(onnx_policy(tmp_path / "p.onnx", [1.0, -0.5, 0.25, 0.0], bias=0.1))
    bound = policy.bind()
    rng = np.random.default_rng(0)
    for obs in rng.standard_normal((20, 4)).astype(np.float32):
        np.testing.assert_array_equal(bound(obs), policy(obs))


def test_sequence_tag_round_trip_and_duration_log():
    from opolo_ros.ros import latency

    obs = m.observation_to_msg(np.zeros(4, np.float32))
    latency.tag_sequence(obs, 41)
    assert latency.read_sequence(obs) == 41
    assert latency.pop_sequence(obs) == 41 and latency.pop_sequence(obs) is None
    from sensor_msgs.msg import JointState

    assert latency.pop_sequence(JointState()) is None  # not a multi-array: left to its decoder
    assert m.msg_to_observation(obs, 4).shape == (4,)  # a standard observation again
    command = m.action_to_msg(np.zeros(1))
    echo = latency.SequenceEcho(command)
    echo.set(7)
    assert latency.read_sequence(command) == 7
    echo.set(None)
    assert latency.read_sequence(command) == latency.NO_SEQUENCE
    log = latency.DurationLog(4)
    for ns in (1000, 2000, 3000, 4000, 5000):  # the ring keeps the newest 4
        log.add(ns)
    assert log.count == 5 and sorted(log.values_ns()) == [2000, 3000, 4000, 5000]
    assert log.summary()["max_us"] == 5.0


def test_stamp_sequence_is_the_stamp_in_microseconds_and_never_the_no_sequence_tag():
    from builtin_interfaces.msg import Time

    from opolo_ros.ros import latency

    assert latency.stamp_sequence(Time(sec=3, nanosec=250_999)) == 3_000_250
    assert latency.stamp_sequence(Time(sec=4295, nanosec=0)) == 4_295_000_000 - 2**32  # wraps
    assert latency.stamp_sequence(Time(nanosec=1000)) == 1 != latency.stamp_sequence(Time(nanosec=2000))
    wrap = latency.NO_SEQUENCE  # the stamp whose tag would read "answers no observation"
    assert latency.stamp_sequence(Time(sec=wrap // 1_000_000, nanosec=wrap % 1_000_000 * 1000)) == wrap - 1


def test_rate_limit_ramps_the_first_command_from_the_safe_one(tmp_path, ros_domain_id, ros_node):
    """No safe command has gone out before the first observation (the watchdog waits 60 s): the
    first policy command still ramps from the safe command, not straight to the policy's 3.0."""
    model = onnx_policy(tmp_path / "p.onnx", [1.0, 0.0, 0.0, 0.0])  # 3 * clamp(obs[0], -1, 1)
    rate = 0.2  # slow: ramped from -0.5 it stays below -0.3; ramped from 0 it would be >= 0
    before_start = time.monotonic()  # the reference is set when the model is installed, after this
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, max_action_rate=rate,
                       observation_timeout_s=60.0, safe_command=[-0.5])
    with graph:
        rig.send(m.observation_to_msg(np.array([1.0, 0.0, 0.0, 0.0], np.float32)))
        assert rig.spin_until(lambda: len(rig.commands) == 1)
    assert rig.actor.safe_commands == 0
    received, first = rig.commands[0]
    ramp = rate * min(received - before_start, 1.0)  # the most the reference can be older than that
    assert -0.5 < first <= -0.5 + ramp + 1e-9, (first, ramp)  # moved up from -0.5, by at most the ramp


def test_rate_limit_ramps_from_the_safe_command_sent_for_a_non_finite_action(tmp_path, ros_domain_id,
                                                                              ros_node):
    expert = Path(__file__).resolve().parents[1] / "models" / "experts" / "InvertedPendulum-v5.onnx"
    rate = 2.0
    graph, rig = start(tmp_path, ros_domain_id, ros_node, expert, max_action_rate=rate,
                       observation_timeout_s=60.0, action_low=[-1.0], action_high=[1.5])
    good = np.array([0.1, 0.2, 0.3, 0.4], np.float32)  # the expert answers ~3.0: clamped to 1.5
    with graph:
        rig.stream(good, 1.5)
        assert rig.commands[-1][1] == pytest.approx(1.5)
        rig.send(raw_observation([3e38, -3e38, 3e38, -3e38], 4))  # finite; the expert returns NaN
        rig.send(m.observation_to_msg(good))
    (t_safe, safe), (t_next, after) = rig.commands[-2:]
    assert rig.actor.nonfinite_actions == 1 and safe == 0.0
    assert after <= safe + rate * (t_next - t_safe) + 0.05, "jumped back past max_action_rate"


def test_ramp_to_safe_approaches_the_safe_command_at_the_rate_limit(tmp_path, ros_domain_id, ros_node):
    """With ramp_to_safe, a non-finite action and then stale observations (the watchdog) move the
    command towards safe_command by at most max_action_rate per second, not at once (the default,
    above); the command sent as the actor stops is the safe one, whole."""
    expert = Path(__file__).resolve().parents[1] / "models" / "experts" / "InvertedPendulum-v5.onnx"
    rate = 2.0
    graph, rig = start(tmp_path, ros_domain_id, ros_node, expert, max_action_rate=rate, ramp_to_safe=True,
                       observation_timeout_s=0.3, watchdog_rate_hz=50.0, action_low=[-1.0], action_high=[1.5])
    good = np.array([0.1, 0.2, 0.3, 0.4], np.float32)  # the expert answers ~3.0: clamped to 1.5
    with graph:
        rig.stream(good, 1.5)
        assert rig.commands[-1][1] == pytest.approx(1.5)
        t_good = rig.commands[-1][0]
        rig.send(raw_observation([3e38, -3e38, 3e38, -3e38], 4))  # finite; the expert returns NaN
        t_nan, after_nan = rig.commands[-1]
        assert rig.actor.nonfinite_actions == 1
        assert 1.5 - rate * (t_nan - t_good) - 0.05 <= after_nan < 1.5, "not ramped towards safe"
        rig.stream(good, 0.5)  # back up to 1.5 (ramped), then silence: the watchdog ramps down
        before = len(rig.commands)
        assert rig.spin_until(lambda: rig.actor.safe_commands >= 15, 5.0)
    t_ref, last_policy = rig.commands[before - 1]
    watchdog = rig.commands[before:]
    values = [v for _, v in watchdog]
    assert last_policy == pytest.approx(1.5) and values == sorted(values, reverse=True), values
    assert all(v >= 1.5 - rate * (t - t_ref) - 0.05 for t, v in watchdog), "faster than max_action_rate"
    assert values[-1] > 0.0, "reached the safe command at once"  # 15 commands at 50 Hz: about 0.3 left
    got = len(rig.commands)
    spin_until([rig.executors[1]], lambda: len(rig.commands) > got, timeout_sec=5.0)  # sent as it stopped
    assert rig.commands[-1][1] == 0.0, "the stop command is the whole safe command"


def test_limits_win_over_the_rate_limit_after_a_swap_to_narrower_bounds(tmp_path, ros_domain_id, ros_node):
    model = onnx_policy(tmp_path / "p.onnx", [1.0, 0.0, 0.0, 0.0])  # 3 * clamp(obs[0], -1, 1)
    narrow = narrowed(model, -1.0, 1.0)
    live = tmp_path / "live.onnx"
    live.write_bytes(model.read_bytes())
    # 5 per second: from 3.0, a rate-limited command would take ~0.4 s (about 20 commands at 50 Hz)
    # to come down into the new [-1, 1]; the limits must hold from the first command after the swap.
    graph, rig = start(tmp_path, ros_domain_id, ros_node, live, max_action_rate=5.0, watch_model=True,
                       observation_timeout_s=60.0)
    obs = np.array([1.0, 0.0, 0.0, 0.0], np.float32)
    with graph:
        rig.stream(obs, 1.0)
        assert rig.commands[-1][1] == pytest.approx(3.0)
        os.replace(narrow, live)
        msg, swapped_at, end = m.observation_to_msg(obs), None, time.monotonic() + 10.0
        while time.monotonic() < end and (swapped_at is None or len(rig.commands) < swapped_at + 11):
            rig.obs_pub.publish(msg)  # commands keep coming while the watcher loads the new model
            rig.spin_for(0.02)
            if swapped_at is None and rig.actor.swaps >= 2:
                swapped_at = len(rig.commands)
    assert swapped_at is not None, "the new model was not loaded"
    after = [v for _, v in rig.commands[swapped_at + 1:]]  # the first may have left before the swap
    assert len(after) >= 10 and all(v <= 1.0 + 1e-9 for v in after), after


def with_metadata(model: Path, **props: str) -> bytes:
    """The model's bytes with some metadata values replaced."""
    import onnx

    proto = onnx.load(str(model))
    for prop in proto.metadata_props:
        if prop.key in props:
            prop.value = props[prop.key]
    return proto.SerializeToString()


def failing_when_run(model: Path) -> bytes:
    """A model that builds, with the right input and output, whose Gather reads past its input."""
    import onnx
    from onnx import TensorProto, helper

    good = onnx.load(str(model))
    graph = helper.make_graph(
        [helper.make_node("Gather", ["obs", "index"], ["action"], axis=1)], "bad",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["batch", 1])],
        [helper.make_tensor("index", TensorProto.INT64, [1], [9])])
    bad = helper.make_model(graph, opset_imports=good.opset_import)
    bad.ir_version = good.ir_version
    bad.metadata_props.extend(good.metadata_props)
    return bad.SerializeToString()


@pytest.mark.parametrize("case", ["nan_bound", "huge_bound", "huge_integer", "low_above_high", "deep_json",
                                  "fails_when_run"])
def test_odd_models_are_policy_load_errors(tmp_path, case):
    """What a policy topic may carry and the loader must refuse (not die on): bounds no float32 graph
    holds, JSON nested past Python's recursion limit, a graph that builds but cannot run."""
    from opolo_ros.export.onnx_policy import PolicyLoadError
    from opolo_ros.nodes.actor_runtime import LoadedPolicy

    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4, bias=0.1)
    data = {"nan_bound": lambda: with_metadata(model, action_low="[NaN]"),
            "huge_bound": lambda: with_metadata(model, action_high="[1e39]"),
            "huge_integer": lambda: with_metadata(model, action_high="[1" + "0" * 400 + "]"),
            "low_above_high": lambda: with_metadata(model, action_low="[4.0]"),
            "deep_json": lambda: with_metadata(model, action_low="[" * 100_000),
            "fails_when_run": lambda: failing_when_run(model)}[case]()
    says = {"fails_when_run": "the model fails when run", "deep_json": "malformed policy metadata",
            "huge_integer": "malformed policy metadata"}
    with pytest.raises(PolicyLoadError, match=says.get(case, "action bounds must be finite float32 values")):
        LoadedPolicy.load(data, 7, None, None)


def test_loader_thread_lives_on_after_any_error(tmp_path, ros_domain_id, ros_node, monkeypatch):
    """A load that raises something no check foresaw is refused and counted; the next policy loads."""
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4, bias=0.1)
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model)
    with graph:
        actor = rig.actor
        load = actor._load

        def load_or_fail(source, version, *args, **kwargs):
            if version == 5:
                raise RuntimeError("unforeseen")
            return load(source, version, *args, **kwargs)

        monkeypatch.setattr(actor, "_load", load_or_fail)
        actor.request_load(with_metadata(model, action_low="[NaN]"), 4)
        actor.request_load(model.read_bytes(), 5)
        actor.request_load(onnx_policy(tmp_path / "p6.onnx", [0.0] * 4, bias=0.2).read_bytes(), 6)
        assert rig.spin_until(lambda: actor.version == 6), (actor.version, actor.rejected)
        assert actor._loader.is_alive() and actor.rejected == 2


def test_safe_points_follow_the_control_rhythm_and_skip_an_idle_actor(tmp_path, ros_domain_id, ros_node):
    """The loader starts GIL-holding work right after a control step, waiting at most three usual
    gaps; an actor with no step for longer (a lock-step bridge waiting for this very policy) or
    none yet is not waited for."""
    import threading

    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4, bias=0.1)
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model)
    with graph:
        actor = rig.actor

        def waited() -> float:
            t0 = time.monotonic()
            actor._wait_for_safe_point()
            return time.monotonic() - t0

        assert actor._ticks == 0 and waited() < 0.01  # no control step yet
        actor._ticks, actor._tick_gap, actor._tick_at = 5, 0.005, time.monotonic() - 1.0
        assert waited() < 0.01  # idle for a second
        actor._tick_at = time.monotonic()
        assert 0.01 < waited() < 0.045  # three 5 ms gaps after the last step, then on
        actor._tick_gap, actor._tick_at = 0.02, time.monotonic()
        timer = threading.Timer(0.01, actor._count_tick)  # the next step, 10 ms on
        t0 = time.monotonic()  # (before the timer's thread starts: it took 3.5 ms once, loaded)
        timer.start()
        waited()
        took = time.monotonic() - t0
        timer.join()
        assert 0.009 < took < 0.04 and actor._ticks == 6  # right after it


def test_a_model_that_fails_on_an_observation_gets_the_safe_command(tmp_path, ros_domain_id, ros_node):
    """onnxruntime raising inside the control step killed the actor (no command from then on)."""
    from test_session_pool import gather_policy

    model = tmp_path / "fails.onnx"
    model.write_bytes(gather_policy(None))  # tanh(obs[obs[0]]): fails for obs[0] >= 4
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, safe_command=[0.25],
                       observation_timeout_s=60.0)
    with graph:
        for first in (1.0, 9.0, 2.0):
            rig.send(m.observation_to_msg(np.array([first, 0.5, -0.5, 0.0], np.float32)))
        assert rig.spin_until(lambda: len(rig.commands) == 3)
        assert rig.actor.failed_runs == 1 and rig.actor.statistics()["counters"]["failed_runs"] == 1
    assert [v for _, v in rig.commands] == pytest.approx([np.tanh(0.5), 0.25, np.tanh(-0.5)], abs=1e-6)


def test_observations_that_stop_within_the_discovery_grace_are_warned_of(tmp_path, ros_domain_id, ros_node,
                                                                          capfd):
    """Only the wait for the *first* observation is how every deploy starts (info level within
    discovery_grace_s): observations that came and stopped within the grace are a lost stream,
    warned of at once (a mutation test: without the first-observation condition they were said at
    info level until the grace was over)."""
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4)
    graph, rig = start(tmp_path, ros_domain_id, ros_node, model, observation_timeout_s=0.5,
                       watchdog_rate_hz=20.0, discovery_grace_s=60.0)
    with graph:
        rig.send(m.observation_to_msg(np.zeros(4, dtype=np.float32)))
        assert not rig.actor.stale
        assert rig.spin_until(lambda: rig.actor.stale, 10.0)
        rig.spin_for(0.2)
        err = capfd.readouterr().err
    assert re.search(r"\[WARN\] \[[\d.]+\] \[actor\]: no valid observation for 0.5 s", err), err
    assert not re.search(r"\[INFO\] \[[\d.]+\] \[actor\]: no valid observation", err), err
