"""Nodes over real DDS: expert recording -> bag -> player, and the actor's hot swap.

Graphs are composed with :class:`GraphRunner` (one context, one executor, as ``opolo-ros launch``);
observer and publisher nodes of the tests live in their own contexts (separate DDS participants,
as separate processes would be), from the ``ros_node`` fixture.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("rclpy")
torch = pytest.importorskip("torch")

from std_msgs.msg import Float32MultiArray, Float64MultiArray, UInt8MultiArray  # noqa: E402

from opolo_ros.data.bags import read_demonstrations  # noqa: E402
from opolo_ros.export.onnx_policy import export_policy, load_policy  # noqa: E402
from opolo_ros.launch_runner import GraphRunner, NodeSpec, load_launch_module  # noqa: E402
from opolo_ros.ros import messages as m  # noqa: E402
from opolo_ros.ros.qos import qos_for  # noqa: E402
from opolo_ros.ros.runtime import linked, spin_until  # noqa: E402
from opolo_ros.sim.envs import make_env  # noqa: E402
from opolo_ros.train.logger import RunLogger  # noqa: E402

pytestmark = pytest.mark.ros
ROOT = Path(__file__).resolve().parents[1]
ENV = "InvertedPendulum-v5"


class Linear(torch.nn.Module):
    """a = clamp(K obs + b, -1, 1) in [-1, 1] units (the ONNX contract rescales to [-3, 3])."""

    def __init__(self, gains, bias: float = 0.0, obs_dim: int = 4) -> None:
        super().__init__()
        self.obs_dim, self.act_dim = obs_dim, 1
        self.k = torch.nn.Parameter(torch.tensor([gains], dtype=torch.float32), requires_grad=False)
        self.b = torch.nn.Parameter(torch.tensor([bias], dtype=torch.float32), requires_grad=False)

    def forward(self, obs):
        return torch.clamp(obs @ self.k.T + self.b, -1.0, 1.0)


def onnx_policy(path: Path, gains, bias: float = 0.0, version: int = 0, obs_dim: int = 4,
                time_feature: bool = False, env: str = ENV) -> Path:
    torch.set_num_threads(1)
    return export_policy(Linear(gains, bias, obs_dim), path, action_low=-3.0, action_high=3.0,
                         metadata={"env_id": env, "version": version, "source": "test",
                                   "time_feature": int(time_feature)})


@pytest.mark.parametrize("storage,time_feature", [("mcap", False), ("sqlite3", False), ("mcap", True)])
def test_record_bag_play_round_trip(tmp_path, ros_domain_id, ros_node, storage, time_feature):
    """With an expert that takes the time feature (its metadata says so: the launch's `auto`), the
    bridge appends it and the bag still holds the environment's observations."""
    # A stabilising state feedback (K = [2, 20, 1, 1], /3 for [-1, 1] units) as the ONNX expert.
    gains = [2 / 3, 20 / 3, 1 / 3, 1 / 3] + [0.0] * time_feature
    expert = onnx_policy(tmp_path / "expert.onnx", gains, obs_dim=len(gains), time_feature=time_feature)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"sim_bridge": {"ros__parameters": {"max_episode_steps": 120}}}))
    record = load_launch_module(ROOT / "launch" / "record_expert.launch.py")
    args = {a.name: a.default for a in record.ARGUMENTS}
    bag = tmp_path / "bag"
    args.update(env=ENV, model=str(expert), output=str(bag), episodes="2", storage=storage, seed="4",
                params_file=str(params))
    specs = record.describe(args)
    assert specs[0].parameters["time_feature"] is time_feature
    assert specs[1].parameters["rate_check"] is False  # lock-step: no warning of the observation rate
    with GraphRunner(specs, ros_domain_id) as graph:
        assert graph.spin_until(graph.done, timeout_s=60.0), "the recorder did not finish"
        recorded = graph.nodes["demo_recorder"].episodes
    assert [len(ep.obs) for ep in recorded] == [121, 121]  # the expert balances: time-limit ends
    first_obs, _ = make_env(ENV, seed=4).reset(seed=4)  # the bridge's seeded first reset
    np.testing.assert_array_equal(recorded[0].obs[0], first_obs.astype(np.float32))
    assert [ep.ret for ep in recorded] == [120.0, 120.0]

    # The bag reads back with rosbags, identical.
    assert (bag / "metadata.yaml").is_file()
    assert list(bag.glob("*.mcap" if storage == "mcap" else "*.db3"))
    from_bag = read_demonstrations(bag)
    assert len(from_bag) == 2 and from_bag[0].meta["env_id"] == ENV
    for a, b in zip(recorded, from_bag):
        np.testing.assert_array_equal(a.obs, b.obs)
        assert a.ret == b.ret

    # The player publishes the bag's episodes; a late subscriber receives them (transient local).
    player = NodeSpec("demo_player", "demo_player", parameters={"demos": str(bag)})
    with GraphRunner([player], ros_domain_id) as graph:
        node, executor = ros_node("demo_listener")
        got = {}
        node.create_subscription(Float32MultiArray, "/opolo/demonstrations",
                                 lambda msg: got.setdefault(m.msg_to_demonstration(msg).episode,
                                                            m.msg_to_demonstration(msg)),
                                 qos_for("demonstrations"))
        assert spin_until([executor, graph.executor], lambda: len(got) == 2, timeout_sec=20.0)
    for k, ep in enumerate(recorded):
        np.testing.assert_array_equal(got[k].obs, ep.obs)
        assert got[k].episode_return == ep.ret


EPISODE_STATES = np.arange(8, dtype=np.float32).reshape(4, 2)


def replay_episode(seq: int) -> Float32MultiArray:
    """One replay batch holding a whole episode: states 0..3 (EPISODE_STATES), ended by the time limit."""
    obs = EPISODE_STATES
    return m.replay_to_msg(obs[:3], np.zeros((3, 1)), obs[1:], np.ones(3), np.zeros(3),
                           np.array([0.0, 0.0, 1.0]), seq=seq, source=7)


def replay_source(ros_node, graph: GraphRunner, *recorders):
    """A /opolo/replay publisher matched with `recorders`, and the executors to spin."""
    node, executor = ros_node("replay_source")
    pub = node.create_publisher(Float32MultiArray, "/opolo/replay", qos_for("replay"))
    executors = [executor, graph.executor]
    assert spin_until(executors, lambda: all(linked(pub, r) for r in recorders), 10.0)
    return pub, executors


def run_recorder(tmp_path, ros_domain_id, ros_node, batches, until=None, **params):
    """A demo_recorder (1 episode unless `params` say, bag at tmp_path/bag) fed `batches` on
    /opolo/replay until `until(node)` (default: it is finished), then stopped; returns the node."""
    recorder = NodeSpec("demo_recorder", "demo_recorder",
                        parameters={"output": str(tmp_path / "bag"), "episodes": 1, **params})
    with GraphRunner([recorder], ros_domain_id) as graph:
        recorder_node = graph.nodes["demo_recorder"]
        pub, executors = replay_source(ros_node, graph, recorder_node)
        for batch in batches:
            pub.publish(batch)
        done = until or (lambda node: node.finished.is_set())
        assert spin_until(executors, lambda: done(recorder_node), timeout_sec=10.0)
    return recorder_node


@pytest.mark.parametrize("ended", [2, 0])
def test_a_recorder_stopped_early_writes_the_episodes_that_had_ended(tmp_path, ros_domain_id, ros_node,
                                                                     ended):
    """Stopped (the launch's SIGINT) after 2 of 3 episodes: they are in the bag, whose metadata says
    the recording was cut short (before, nothing was written); stopped before any ended: no bag."""
    run_recorder(tmp_path, ros_domain_id, ros_node, [replay_episode(k) for k in range(ended)],
                 until=lambda r: len(r.episodes) == ended and not r.finished.is_set(), episodes=3)
    if not ended:
        assert not (tmp_path / "bag").exists()
        return
    from opolo_ros.data.bags import read_bag_metadata

    episodes = read_demonstrations(tmp_path / "bag")
    assert len(episodes) == 2 and all(np.array_equal(ep.obs, EPISODE_STATES) for ep in episodes)
    assert read_bag_metadata(tmp_path / "bag")["interrupted"] == "2 of 3 episodes recorded"


def test_a_recorder_whose_bag_cannot_be_written_does_not_write_again_on_close(tmp_path, ros_domain_id,
                                                                            ros_node):
    """The write after the last episode failed (its error ends the node); close() then wrote again,
    calling the recording cut short, and its second error escaped run_node's clean-up."""
    folder = tmp_path / "sub"
    spec = NodeSpec("demo_recorder", "demo_recorder",
                    parameters={"output": str(folder / "bag"), "episodes": 1})
    with GraphRunner([spec], ros_domain_id) as graph:
        recorder = graph.nodes["demo_recorder"]
        pub, executors = replay_source(ros_node, graph, recorder)
        folder.rmdir()
        folder.write_text("not a folder")  # the bag cannot be created in it
        pub.publish(replay_episode(0))
        with pytest.raises(Exception, match="bag"):  # the write's own error, out of the callback
            spin_until(executors, lambda: False, timeout_sec=10.0)
        recorder.close()  # nothing more: no second write
        assert recorder.bag is None and len(recorder.episodes) == 1


def test_nodes_of_one_name_in_two_namespaces_are_each_run_and_closed(tmp_path, ros_domain_id, ros_node):
    """`opolo-ros launch` kept its nodes by name: of two recorders named alike in two namespaces the
    first was never closed (its bag never written) nor destroyed. They are kept by namespace/name."""
    specs = [NodeSpec("demo_recorder", "demo_recorder", namespace=ns,
                      parameters={"output": str(tmp_path / ns / "bag"), "episodes": 2})
             for ns in ("r1", "r2")]
    with GraphRunner(specs, ros_domain_id) as graph:
        assert sorted(graph.nodes) == ["r1/demo_recorder", "r2/demo_recorder"]
        recorders = list(graph.nodes.values())
        pub, executors = replay_source(ros_node, graph, *recorders)
        pub.publish(replay_episode(0))
        assert spin_until(executors, lambda: all(len(r.episodes) == 1 for r in recorders), 10.0)
    for ns in ("r1", "r2"):  # each closed: the episode that had ended is in its bag
        assert len(read_demonstrations(tmp_path / ns / "bag")) == 1


def test_recorder_drops_an_episode_whose_simulation_diverged(tmp_path, ros_domain_id, ros_node):
    """A void replay step (the bridge's sim blew up) ends no demonstration: that episode is dropped."""
    obs = np.arange(12, dtype=np.float32).reshape(6, 2)  # states s0..s5; the sim resets to s3
    diverged = m.replay_to_msg(obs[:3], np.zeros((3, 1)), obs[1:4], np.ones(3), np.zeros(3), np.zeros(3),
                               seq=0, source=7, void=np.array([False, False, True]))  # s0 s1 s2 blew up
    ended = m.replay_to_msg(obs[3:5], np.zeros((2, 1)), obs[4:6], np.ones(2), np.zeros(2),
                            np.array([0.0, 1.0]), seq=1, source=7)  # s3 s4 s5, time limit
    episodes = run_recorder(tmp_path, ros_domain_id, ros_node, [diverged, ended]).episodes
    from opolo_ros.data.bags import read_bag_metadata

    assert "seed" not in read_bag_metadata(tmp_path / "bag")  # not given: not known, not recorded
    assert len(episodes) == 1
    np.testing.assert_array_equal(episodes[0].obs, obs[3:])
    assert episodes[0].ret == 2.0


def test_recorder_skips_episodes_that_end_by_termination(tmp_path, ros_domain_id, ros_node):
    """skip_terminated: a fall is no demonstration; the recorder waits for one at the time limit."""
    from opolo_ros.data.bags import read_bag_metadata

    obs = np.arange(12, dtype=np.float32).reshape(6, 2)  # s0 s1 s2 fall; s3 s4 s5 reach the time limit
    fell = m.replay_to_msg(obs[:2], np.zeros((2, 1)), obs[1:3], np.ones(2), np.array([0.0, 1.0]),
                           np.zeros(2), seq=0, source=7)
    ended = m.replay_to_msg(obs[3:5], np.zeros((2, 1)), obs[4:6], np.full(2, 2.0), np.zeros(2),
                            np.array([0.0, 1.0]), seq=1, source=7)
    recorder = run_recorder(tmp_path, ros_domain_id, ros_node, [fell, ended], skip_terminated=True, seed=5)
    assert len(recorder.episodes) == 1 and recorder.skipped == 1
    np.testing.assert_array_equal(recorder.episodes[0].obs, obs[3:])
    assert recorder.episodes[0].ret == 4.0
    custom = read_bag_metadata(tmp_path / "bag")
    assert custom["skipped_terminated"] == "1" and custom["seed"] == "5"



@pytest.mark.parametrize("decode_in_loader", [True, False])
def test_actor_hot_swaps_without_dropping_a_step(tmp_path, ros_domain_id, ros_node, decode_in_loader):
    """Policies arrive mid-run on /opolo/policy; a mismatched one and messages holding no policy
    are refused; no step is lost. Taken serialized and read in the loader thread (default) or in
    the subscription's callback.

    Each policy outputs a constant, so the actions on the wire show which policy chose them.
    """
    zero = [0.0, 0.0, 0.0, 0.0]
    first = onnx_policy(tmp_path / "v1.onnx", zero, bias=0.1, version=1)
    swaps = {2: 0.2, 4: 0.4}  # version -> constant in [-1, 1] units (0.6 and 1.2 in env units)
    specs = [
        NodeSpec("sim_bridge", "sim_bridge", parameters={
            "env_id": ENV, "mode": "lockstep", "flow_control": False, "publish_replay": False,
            "joint_states_topic": "", "max_episode_steps": 50}),
        NodeSpec("actor", "actor", parameters={"mode": "deploy", "model": str(first),
                                               "decode_policy_in_loader": decode_in_loader,
                                               # lock-step: no real-time deadline (a loaded machine
                                               # paused the loop past 0.5 s: a safe command, 0.0)
                                               "observation_timeout_s": 30.0}),
    ]
    sender, sender_exec = ros_node("policy_sender")
    policy_pub = sender.create_publisher(UInt8MultiArray, "/opolo/policy", qos_for("policy"))
    seen: list[float] = []
    sender.create_subscription(Float64MultiArray, "action", lambda msg: seen.append(float(msg.data[0])),
                               qos_for("action"))
    with GraphRunner(specs, ros_domain_id) as graph:
        bridge, actor = graph.nodes["sim_bridge"], graph.nodes["actor"]
        both = [graph.executor, sender_exec]
        steps_at_swap = []
        plan = [(2, onnx_policy(tmp_path / "v2.onnx", zero, swaps[2], 2)),
                (3, onnx_policy(tmp_path / "v3.onnx", [0.0] * 5, 0.3, 3, obs_dim=5)),  # wrong obs_dim
                (4, onnx_policy(tmp_path / "v4.onnx", zero, swaps[4], 4))]
        assert spin_until(both, lambda: bridge.steps > 100, timeout_sec=20.0)
        for version, path in plan:
            steps_at_swap.append(bridge.steps)
            policy_pub.publish(m.policy_to_msg(path.read_bytes(), version))
            target = bridge.steps + 150
            assert spin_until(both, lambda t=target: bridge.steps > t, timeout_sec=20.0)
            if version != 3:
                assert spin_until(both, lambda v=version: actor.version == v, timeout_sec=5.0)
        policy_pub.publish(UInt8MultiArray(data=[1, 2, 3]))  # no onnx/version layout
        assert spin_until(both, lambda: actor.rejected == 2, timeout_sec=5.0)
        # over the wire, bytes that are no UInt8MultiArray in CDR: a header whose options claim
        # padding and no body (rclpy's own deserializer reads past it)
        policy_pub.publish(b"\x00\x00\xe6\x61")
        garbled = b"\x00\x01\x00\x00" + bytes(range(40))
        (actor._on_serialized_policy if decode_in_loader else actor._on_policy)(garbled)
        assert spin_until(both, lambda: actor.rejected == 4, timeout_sec=5.0)
        deadline = time.monotonic() + 0.3
        spin_until(both, lambda: time.monotonic() > deadline, timeout_sec=1.0)
        steps, actions, republished = bridge.steps, actor.actions, bridge.republished
        version, origin = actor.version, actor.current.origin
    assert version == 4  # the obs_dim-5 model was refused, v2 kept until v4, the messages changed nothing
    assert origin == "/opolo/policy"  # named by its topic in the log ("<bytes>" said nothing)
    assert republished == 0, "an observation went unanswered (a dropped control step)"
    assert actions - steps in (0, 1), (actions, steps)  # one action per observation (+1 in flight)
    values = np.round(np.array(seen), 6)
    expected = {round(3.0 * c, 6): v for v, c in {1: 0.1, **swaps}.items()}
    assert set(values) <= set(expected), set(values)  # nothing from the refused model, nothing mixed
    order = [expected[x] for x in values]
    assert order == sorted(order) and set(order) == {1, 2, 4}  # swaps happen once, in order


MJCF = """<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body name="pole" pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0 0 0.5" size="0.05" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="hinge" ctrlrange="-2 2" ctrllimited="true"/></actuator>
</mujoco>
"""


def realtime_mjcf_graph(tmp_path: Path, mjcf: str) -> list[NodeSpec]:
    """A real-time bridge on the MJCF at 100 Hz and a deploy actor on /joint_states at 50 Hz whose
    policy always commands 0.25 (in [-1, 1] units of the motor's [-2, 2] range)."""
    model = tmp_path / "model.xml"
    model.write_text(mjcf)
    policy = export_policy(Linear([0.0, 0.0], bias=0.25, obs_dim=2), tmp_path / "p.onnx", action_low=-2.0,
                           action_high=2.0, metadata={"env_id": str(model)})
    return [
        NodeSpec("sim_bridge", "sim_bridge", parameters={
            "env_id": str(model), "mode": "realtime", "rate_hz": 100.0, "publish_replay": False}),
        NodeSpec("actor", "actor", parameters={
            "mode": "deploy", "model": str(policy), "subscribe_policy": False, "joints": ["hinge"],
            "observation_topic": "/joint_states", "rate_hz": 50.0, "command_qos": "reliable",
            "echo_sequence": True}),
    ]


def test_lockstep_bridge_driven_by_an_actor_that_reads_only_joint_states(tmp_path, ros_domain_id):
    """The joint states go out with every observation, the initial state's included: before, the
    first came only after a step, so a JointState actor never answered and the bridge waited."""
    specs = realtime_mjcf_graph(tmp_path, MJCF)
    # wait_for_controller: the first step waits until the actor's joint-state subscription matched,
    # so the initial state cannot be lost to discovery, and no re-publish is ever needed for it
    specs[0].parameters.update(mode="lockstep", flow_control=False, wait_for_controller=True)
    specs[1].parameters.update(rate_hz=0.0, mode="train")  # no watchdog: only the joint states drive it
    with GraphRunner(specs, ros_domain_id) as graph:
        bridge = graph.nodes["sim_bridge"]
        assert graph.spin_until(lambda: bridge.steps >= 20, timeout_s=20.0), \
            f"bridge steps {bridge.steps}, observation re-published {bridge.republished}"
        # the first joint state went out with the initial observation: no re-publish had to send it
        assert bridge.republished == 0, bridge.republished


def test_realtime_mjcf_bridge_with_joint_state_deploy_actor(tmp_path, ros_domain_id):
    """Any MJCF file, stepped on a wall-clock timer; a deploy actor reads /joint_states at 50 Hz.

    The sim runs at 100 Hz and holds the newest command between two (zero-order hold); the bridge
    counts the steps that found no new command (``held``).
    """
    with GraphRunner(realtime_mjcf_graph(tmp_path, MJCF), ros_domain_id) as graph:
        bridge, actor = graph.nodes["sim_bridge"], graph.nodes["actor"]
        start = time.monotonic()
        assert graph.spin_until(lambda: bridge.answered > 0, timeout_s=10.0)
        before_first = bridge.steps - bridge.answered  # steps before the first command
        assert graph.spin_until(lambda: time.monotonic() - start > 2.0 and actor.actions > 20, timeout_s=10.0)
        elapsed = time.monotonic() - start
        steps, actions, held = bridge.steps, actor.actions, bridge.held
        applied = bridge._latest_action.copy()
        angle = float(bridge.env.unwrapped.data.qpos[0])
    assert bridge.joint_names == ["hinge"] and bridge.obs_dim == 2 and bridge.act_dim == 1
    assert 0.3 * 100 * elapsed < steps < 1.3 * 100 * elapsed  # wall-clock paced (a loaded machine)
    assert steps > actions  # 100 Hz sim, 50 Hz commands: the newest command is held in between
    # A step is fresh only if a command came since the last one, so held >= steps - actions (less
    # the few steps before the first command); about every other step here.
    assert 0 < held < steps and held >= steps - actions - 25, (held, steps, actions)
    # The actor echoes the stamp of the joint state it answers: a held step applies a command that
    # answers an older observation, so stale >= held; every step after the first command is matched.
    assert held <= bridge.stale <= bridge.answered == steps - before_first, \
        (held, bridge.stale, bridge.answered, steps, before_first)
    # the steps before the first command ran with zero action and are counted (and logged) apart
    assert bridge.uncommanded == before_first, (bridge.uncommanded, before_first)
    np.testing.assert_allclose(applied, [0.5], rtol=1e-6)  # 0.25 in [-1, 1] units of [-2, 2]
    assert abs(angle) > 1e-3  # the motor turned the pole


def test_a_realtime_bridge_without_a_controller_counts_its_uncommanded_steps(tmp_path, ros_domain_id):
    """A real-time bridge that no controller commands ran on with zero action without a word (a
    walkthrough): it counts those steps apart from the held ones, and logs them."""
    specs = realtime_mjcf_graph(tmp_path, MJCF)[:1]  # the bridge alone
    with GraphRunner(specs, ros_domain_id) as graph:
        bridge = graph.nodes["sim_bridge"]
        assert graph.spin_until(lambda: bridge.steps >= 20, timeout_s=10.0), bridge.steps
        steps, uncommanded, held, answered = bridge.steps, bridge.uncommanded, bridge.held, bridge.answered
    assert uncommanded == steps >= 20 and held == answered == 0, (uncommanded, steps, held, answered)


@pytest.mark.parametrize("lag", [0, 1])
def test_realtime_bridge_counts_commands_that_answer_an_older_observation(ros_domain_id, ros_node, lag):
    """A controller that answers each joint state at once with the stamp of the one `lag` before:
    with lag 1 every command comes in time (``held`` stays near 0) yet is one step stale, which
    only the echoed stamp shows (``stale`` == ``answered``); with lag 0 almost none is stale."""
    from sensor_msgs.msg import JointState

    from opolo_ros.ros import latency

    node, executor = ros_node("lagging_controller")
    command = m.action_to_msg([0.0])
    echo = latency.SequenceEcho(command)
    stamps: list[int] = []
    publisher = node.create_publisher(Float64MultiArray, "/action", qos_for("action"))

    def answer(msg: JointState) -> None:
        stamps.append(latency.stamp_sequence(msg.header.stamp))
        if len(stamps) > lag:
            echo.set(stamps[-1 - lag])
            publisher.publish(command)

    node.create_subscription(JointState, "/joint_states", answer, qos_for("joint_states"))
    bridge_spec = NodeSpec("sim_bridge", "sim_bridge", parameters={
        "env_id": ENV, "mode": "realtime", "rate_hz": 50.0, "publish_replay": False,
        "max_episode_steps": 10_000, "joint_states_topic": "/joint_states"})
    with GraphRunner([bridge_spec], ros_domain_id) as graph:
        bridge = graph.nodes["sim_bridge"]
        executors = [graph.executor, executor]
        assert spin_until(executors, lambda: bridge.answered > 0, 20.0), bridge.steps
        before_first = bridge.steps - bridge.answered  # steps before the first command
        assert spin_until(executors, lambda: bridge.answered >= 100, 20.0), (bridge.steps, bridge.answered)
        steps, held, stale, answered = bridge.steps, bridge.held, bridge.stale, bridge.answered
    assert answered == steps - before_first, (answered, steps, before_first)  # each after the first command
    if lag:
        assert stale == answered and held < answered / 2, (stale, held, answered)
        assert bridge.max_lag >= 1
    else:
        assert stale < answered / 2 and stale >= held, (stale, held, answered)


def test_bridge_survives_a_diverging_simulation(tmp_path, ros_domain_id):
    """A model that blows up under the actor's command: each such step ends its episode, is counted
    and logged, and the bridge goes on stepping (MuJoCo resets the state; nothing is published as a
    transition to the reset state)."""
    from sensor_msgs.msg import JointState

    unstable = MJCF.replace('<motor joint="hinge"', '<motor joint="hinge" gear="1e12"')
    specs = realtime_mjcf_graph(tmp_path, unstable)
    specs[0].parameters.update(reset_markers=True, joint_states_topic="/joint_states")
    states: list = []
    with GraphRunner(specs, ros_domain_id) as graph:
        bridge, actor = graph.nodes["sim_bridge"], graph.nodes["actor"]
        bridge.create_subscription(JointState, "/joint_states", states.append, qos_for("joint_states"))
        assert graph.spin_until(lambda: bridge.diverged >= 20, timeout_s=15.0)
        steps_then = bridge.steps
        assert graph.spin_until(lambda: bridge.steps > steps_then + 20, timeout_s=5.0)
        assert actor.actions > 0
    assert bridge.episodes >= bridge.diverged >= 20
    assert np.all(np.isfinite(bridge.obs))
    # with reset markers: no "last state" of a diverged episode (MuJoCo's data is reset to qpos0 by
    # then: a recording got a fake transition to it, a review)
    last = [states[k - 1] for k, msg in enumerate(states) if msg.header.frame_id == "reset" and k]
    assert len(last) >= 10 and not any(not np.any(msg.position) for msg in last), \
        [list(msg.position) for msg in last[:5]]


def test_mjcf_training_run_is_evaluated_by_its_imitation_distance(tmp_path, ros_domain_id):
    """An MJCF task has no reward: the graph trains and exports, and evaluates the policy by how far
    its states are from the demonstrations' (it used to print 'nan +- nan (10 deterministic
    episodes)', then 'no evaluation')."""
    import gymnasium

    from opolo_ros.ros import runtime

    xml = tmp_path / "inverted_pendulum.xml"
    xml.write_text((Path(gymnasium.__file__).parent / "envs/mujoco/assets/inverted_pendulum.xml").read_text())
    env = {**os.environ, runtime.DOMAIN_ID_ENV: str(ros_domain_id)}
    launch = [str(Path(sys.executable).parent / "opolo-ros"), "launch", "sim_train", f"env:={xml}"]
    # Named like a shipped task, still the user's own model: no task file, so no demonstrations.
    refused = subprocess.run(launch, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "needs demonstrations: demos:=" in refused.stderr, refused.stderr[-2000:]
    sys.path.insert(0, str(ROOT / "test"))
    from test_bags import pendulum_robot_demos

    demos = pendulum_robot_demos(tmp_path / "robot_demos.npz")
    run = subprocess.run([*launch, "params_file:=config/inverted_pendulum.yaml", "total_steps:=1100",
                          f"run_dir:={tmp_path / 'run'}", f"demos:={demos}"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-2000:]
    said = re.search(r"imitation distance: ([\d.]+) \(random actions: ([\d.]+); 0 = the demonstrations' "
                     r"states, \d+ deterministic episodes\), score (-?[\d.]+)", run.stdout)
    assert said and "nan" not in run.stdout, run.stdout[-2000:]
    rows = RunLogger.read_evaluations(tmp_path / "run" / "eval.csv")
    assert [r["env_step"] for r in rows] == [1100]  # (eval_every 5000: the final one)
    last = rows[-1]
    assert (f"{last['imitation_distance']:.3f}", f"{last['imitation_random']:.3f}") == said.groups()[:2]
    assert 0 < last["imitation_distance"] and last["imitation_random"] > 0
    assert np.isnan(last["return_mean"]) and f"{last['imitation_score']:.3f}" == said.group(3)
    assert "done: 1100 transitions, imitation distance " in run.stderr
    best = load_policy(tmp_path / "run" / "policy_best.onnx").metadata.extra  # the evaluation that made it
    assert float(best["eval_imitation_distance"]) == pytest.approx(last["imitation_distance"], abs=1e-4)
    assert best["eval_max_episode_steps"] == "1000"
    # the progress lines show no return (0 throughout: noise, a walkthrough)
    assert "1000/1100 transitions, " in run.stderr and "training return" not in run.stderr
    assert re.search(r"1000/1100 transitions, \d+ steps/s\n", run.stderr)  # no time to go yet: the
    # task file's warm-up is 1000 steps (test_direct.py: the time to go)
    assert "mean return of the" not in run.stderr
    assert "no learning-curve plot" not in run.stderr and (tmp_path / "run" / "learning_curve.png").is_file()
    assert (tmp_path / "run" / "policy.onnx").is_file()
    # export rebuilt the env with the Gymnasium-only make_env: "Malformed environment ID" (a walkthrough)
    export = subprocess.run([str(Path(sys.executable).parent / "opolo-ros"), "export",
                             str(tmp_path / "run" / "checkpoint.pt"), str(tmp_path / "out.onnx")],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert export.returncode == 0, export.stderr[-2000:]
    assert load_policy(tmp_path / "out.onnx").metadata.env_id == str(xml)  # absolute, as the run's
    # The same file written relative to another working folder resumes the run (it was refused as
    # another task: "is for opolo on /abs/robot.xml, not opolo on robot.xml").
    resumed = subprocess.run([*launch[:3], "env:=inverted_pendulum.xml", f"demos:={demos}",
                              f"params_file:={ROOT / 'config' / 'inverted_pendulum.yaml'}",
                              "total_steps:=1200", f"run_dir:={tmp_path / 'run'}"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming under config values changed since the checkpoint: " in \
        resumed.stderr + resumed.stdout
    changes = re.search(r"resuming under config values changed since the checkpoint: (.*)", resumed.stderr)
    assert changes and "env_id" not in changes.group(1) and "total_steps: 1100 -> 1200" in changes.group(1)


def test_demo_player_reads_a_robot_bag_with_the_task_files_bag_keys(tmp_path, ros_domain_id):
    """demos_topic / demos_joints / demos_fields in a task file reach the graph's demo_player, which
    reads the bag with them (two JointState topics: without demos_topic the bag is ambiguous)."""
    sys.path.insert(0, str(ROOT / "test"))
    from test_bags import robot_bag

    from opolo_ros.launch_runner import describe_launch

    bag, want = robot_bag(tmp_path / "robot")
    params = tmp_path / "task.yaml"
    params.write_text(f"/**:\n  ros__parameters:\n    env_id: InvertedPendulum-v5\n    demos: {bag}\n"
                      "    demos_topic: /joint_states\n    demos_joints: shoulder,elbow\n"
                      "    demos_fields: velocity,position\n")
    _, _, specs = describe_launch("sim_train", [f"params_file:={params}", f"run_dir:={tmp_path / 'run'}"])
    player = next(s for s in specs if s.name == "demo_player")
    with GraphRunner([player], ros_domain_id) as graph:
        (episode,) = graph.nodes["demo_player"].episodes
    np.testing.assert_array_equal(episode.obs, want)


def test_demo_player_alone_reads_a_joint_state_bag_by_its_tasks_joint_names(tmp_path, ros_domain_id, capfd):
    """Started alone it knew no task and took the first message's order (hinge before slider: a
    swapped observation). Given `env_id` it reads by the model's joint names as the graph does; a
    bag without them is refused saying what to give, and a task that does not exist is refused.
    States recorded at 100 Hz for the pendulum's 25 Hz step are warned of (a walkthrough)."""
    sys.path.insert(0, str(ROOT / "test"))
    from test_bags import JS, SEC, _joint_state, _write_stream

    names = ["base_yaw", "hinge", "slider", "gripper"]
    msgs = [(SEC + k * 10_000_000, _joint_state(names, [9.0, 0.01 * k, 0.02 * k, 9.0], [9.0, 0.1, 0.2, 9.0]))
            for k in range(5)]
    bag = _write_stream(tmp_path / "robot", {"/joint_states": (JS, msgs)})

    def player(**params: object) -> NodeSpec:
        return NodeSpec("demo_player", "demo_player", parameters={"demos": str(bag), **params})

    with GraphRunner([player(env_id=ENV)], ros_domain_id) as graph:
        (episode,) = graph.nodes["demo_player"].episodes
    np.testing.assert_allclose(episode.obs[2], [0.04, 0.02, 0.2, 0.1], rtol=1e-6)  # slider, hinge
    assert ("the demonstrations' states come every 0.01 s (100 Hz), the task's control step is 0.04 s "
            "(25 Hz)") in capfd.readouterr().err
    other = [(SEC + k * 10_000_000, _joint_state(["shoulder", "elbow"], [0.0, 0.1], [0.0, 0.0]))
             for k in range(5)]
    bag = _write_stream(tmp_path / "arm", {"/joint_states": (JS, other)})
    with pytest.raises(ValueError, match=r"read by the model's joint names, slider,hinge: .*bag_joints:="):
        GraphRunner([player(env_id=ENV)], ros_domain_id)
    with pytest.raises(ValueError, match=r"parameter 'env_id' 'NoSuchTask-v0'"):
        GraphRunner([player(env_id="NoSuchTask-v0")], ros_domain_id)


def test_demo_player_passes_its_bag_keys_and_makes_no_task_for_other_demonstrations(tmp_path, ros_domain_id):
    """The player's `episode_gap_s` splits an observation stream (not the default 0.5 s); with
    `bag_fields` other than position,velocity a JointState bag is read in its first message's
    order, not by the model's joint names; and a bag that is no JointState (the project's own
    layout) is played without making `env_id`'s task, which need not exist on this machine (an MJCF
    file left behind) (a mutation test)."""
    from test_bags import F32, JS, SEC, _joint_state, _stream, _write_stream

    from opolo_ros.data.bags import write_demonstrations
    from opolo_ros.data.demos import Episode

    def played(demos: Path, **params: object) -> list:
        spec = NodeSpec("demo_player", "demo_player", parameters={"demos": str(demos), **params})
        with GraphRunner([spec], ros_domain_id) as graph:
            return graph.nodes["demo_player"].episodes

    obs = np.arange(8, dtype=np.float32).reshape(4, 2)
    stream = _write_stream(tmp_path / "stream", {"/observation": (F32, _stream(obs, dt=SEC))})  # 1 s apart
    with pytest.raises(ValueError, match=r"more than the episode gap 0.5 s"):  # every state alone
        played(stream)
    (episode,) = played(stream, episode_gap_s=2.0)
    np.testing.assert_array_equal(episode.obs, obs)
    msgs = [(SEC + k * 10_000_000, _joint_state(["hinge", "slider"], [0.1 * k, 0.2], [0.3, 0.4]))
            for k in range(3)]
    joints = _write_stream(tmp_path / "joints", {"/joint_states": (JS, msgs)})
    (episode,) = played(joints, env_id=ENV, bag_fields="velocity,position")
    np.testing.assert_allclose(episode.obs[2], [0.3, 0.4, 0.2, 0.2], rtol=1e-6)  # hinge, slider
    own = write_demonstrations(tmp_path / "own", [Episode(obs, 1.0, {})])
    (episode,) = played(own, env_id=str(tmp_path / "absent" / "robot.xml"))
    np.testing.assert_array_equal(episode.obs, obs)


@pytest.mark.parametrize("executable,params,match", [
    ("demo_player", {"demos": ""}, r"parameter 'demos' \(the bag or .npz to play\) is required"),
    ("demo_player", {"demos": "x.npz", "num_demos": -1}, r"'num_demos' must be >= 0, got -1"),
    ("demo_recorder", {"seed": -2}, r"'seed' must be >= 0 \(or -1: not known\), got -2"),
    ("demo_recorder", {"output": "{tmp}"}, r"already exists; refusing to overwrite a bag"),
    ("demo_recorder", {"storage": "zip"}, r"'storage' must be one of \('mcap', 'sqlite3'\), got 'zip'"),
    ("demo_recorder", {"episodes": 0}, r"'episodes' must be >= 1, got 0"),
    ("demo_recorder", {"skip_terminated": True, "episodes": 3, "max_tries": 2},
     r"'max_tries' \(2\) must be at least 'episodes' \(3\)"),
])
def test_player_and_recorder_refuse_parameters_they_cannot_run_with_naming_them(tmp_path, ros_domain_id,
                                                                                executable, params, match):
    """Refused when the node starts, by the parameter's name: not a bag that fails to be written at
    the end of a recording, an overwritten bag, nor a player that plays nothing (a mutation test)."""
    base = {"output": str(tmp_path / "bag")} if executable == "demo_recorder" else {}
    params = {k: str(tmp_path) if v == "{tmp}" else v for k, v in params.items()}
    spec = NodeSpec(executable, executable, parameters={**base, **params})
    with pytest.raises(ValueError, match=match):
        GraphRunner([spec], ros_domain_id)


def test_recorder_keeps_to_the_first_source_and_records_seed_0(tmp_path, ros_domain_id, ros_node):
    """Another replay source's transitions (a second bridge) do not go into the recording, and a
    seed of 0 is recorded in the bag's metadata like any other (a mutation test)."""
    from opolo_ros.data.bags import read_bag_metadata

    other = np.full((4, 2), 50.0, dtype=np.float32)
    intruder = m.replay_to_msg(other[:3], np.zeros((3, 1)), other[1:], np.ones(3), np.zeros(3),
                               np.array([0.0, 0.0, 1.0]), seq=0, source=8)
    run_recorder(tmp_path, ros_domain_id, ros_node, [replay_episode(0), intruder, replay_episode(1)],
                 episodes=2, seed=0)
    episodes = read_demonstrations(tmp_path / "bag")
    assert len(episodes) == 2 and all(np.array_equal(ep.obs, EPISODE_STATES) for ep in episodes)
    assert read_bag_metadata(tmp_path / "bag")["seed"] == "0"  # (metadata values are strings)


def test_a_description_with_one_node_name_twice_is_refused(tmp_path, ros_domain_id):
    """Two nodes of one name in one namespace: refused by name before any starts (one would be kept
    and the other never closed: its bag never written) (a mutation test)."""
    specs = [NodeSpec("demo_recorder", "demo_recorder", parameters={"output": str(tmp_path / f"bag{k}")})
             for k in range(2)]
    with pytest.raises(ValueError, match=r"duplicate node names in the description: \['/demo_recorder', "
                                         r"'/demo_recorder'\]"):
        GraphRunner(specs, ros_domain_id)


class FakeLearner:
    """The learner's side of flow control, by hand: receives replay, publishes progress with the
    acknowledgements the test sets (every 0.1 s unless paused), and answers each observation."""

    def __init__(self, ros_node) -> None:
        from std_msgs.msg import Int64MultiArray

        node, self.executor = ros_node("fake_learner")
        self.received: list[m.ReplayBatch] = []
        self.acks: dict[int, m.SourceAck] = {}
        self.holding: dict[int, int] = {}  # source -> newest seq received with all before it
        self.paused = False
        node.create_subscription(Float32MultiArray, "/opolo/replay",
                                 lambda msg: self.received.append(m.msg_to_replay(msg)), qos_for("replay"))
        self.progress = node.create_publisher(Int64MultiArray, "/opolo/learner_progress",
                                              qos_for("learner_progress"))
        node.create_timer(0.1, lambda: None if self.paused else self.publish_progress())
        action = node.create_publisher(Float64MultiArray, "/action", qos_for("action"))
        node.create_subscription(Float32MultiArray, "/observation",
                                 lambda msg: action.publish(m.action_to_msg([0.0])), qos_for("observation"))

    def publish_progress(self) -> None:
        transitions = sum(a.transitions for a in self.acks.values())
        self.progress.publish(m.progress_to_msg(m.LearnerProgress(0, transitions, dict(self.acks),
                                                                  dict(self.holding))))

    def seqs(self) -> list[int]:
        return [b.seq for b in self.received]


def spin_for(executors: list, seconds: float) -> None:
    until = time.monotonic() + seconds
    spin_until(executors, lambda: time.monotonic() > until, seconds + 5.0)


def flow_bridge(**parameters: object) -> NodeSpec:
    return NodeSpec("sim_bridge", "sim_bridge", parameters={
        "env_id": ENV, "sync_policy": False, "learner_timeout_s": 0.5, "joint_states_topic": "",
        **parameters})


def test_bridge_units_truncation_flag_due_version_duplicate_guard_and_stall_clock(ros_domain_id):
    """Survivors of a mutation spot check, on the bridge's own methods: a time-limit end stored as
    terminal (wrong TD targets); the policy due at exactly `policy_every` transitions past
    `max_ahead`; a late duplicate answer to a re-published observation stepping the sim twice; a
    first batch after a long idle time counted as stalled at once (and re-sent)."""
    spec = flow_bridge(max_ahead=0, replay_batch=100, max_episode_steps=5, policy_every=1000)
    with GraphRunner([spec], ros_domain_id) as graph:
        bridge = graph.nodes["sim_bridge"]
        flushed: list[np.ndarray] = []
        flush = bridge._flush
        bridge._flush = lambda: (flushed.append(np.stack(bridge._pending)), flush())
        for _ in range(5):
            bridge._step(np.zeros(1))
        rows = np.concatenate(flushed) if flushed else np.stack(bridge._pending)
        assert rows[:, -2].tolist() == [0.0] * 5 and rows[:, -1].tolist() == [0.0] * 4 + [1.0]

        bridge.sent = 1000
        assert bridge.due_version() == 1000

        steps = bridge.steps
        bridge._waiting_action, bridge._step_republished = True, True
        bridge._on_action(m.action_to_msg([0.1]))
        bridge._waiting_action = True  # the re-published observation's second answer, the same
        bridge._on_action(m.action_to_msg([0.1]))
        assert bridge.steps == steps + 1

        bridge._unacked.clear()
        bridge._pending.clear()
        bridge._last_ack_move = time.monotonic() - 100.0  # a long idle time with nothing unacknowledged
        bridge._step(np.zeros(1))
        bridge._flush()
        assert bridge._unacked and not bridge._stalled(time.monotonic())

        msg = bridge._unacked[0][1]  # a re-send skips what the learner says it holds, the newest of them too
        bridge._unacked.clear()
        bridge._unacked.extend([(3, msg, 1), (4, msg, 1), (5, msg, 1)])
        bridge._learner_has = 4
        assert bridge._resend() == 1


def test_bridge_resends_a_batch_the_learner_never_got(ros_domain_id, ros_node):
    """A learner that keeps announcing itself but never acknowledges a batch (it was published
    before DDS matched the restarted learner's subscription): after ``learner_timeout_s`` the
    bridge publishes it again, and steps on once it is acknowledged."""
    learner = FakeLearner(ros_node)
    with GraphRunner([flow_bridge(max_ahead=0, replay_batch=1)], ros_domain_id) as graph:
        bridge = graph.nodes["sim_bridge"]
        executors = [graph.executor, learner.executor]
        assert spin_until(executors, lambda: len(learner.received) >= 1, 20.0)
        first = learner.received[0]
        assert first.seq == 0 and bridge.sent == 1  # strict alternation: it waits for the ack
        # Not acknowledged ("lost"): the same batch comes again, and nothing new is stepped.
        assert spin_until(executors, lambda: len(learner.received) >= 2, 5.0), "no re-send"
        assert learner.received[1].seq == 0 and bridge.resent >= 1 and bridge.sent == 1
        np.testing.assert_array_equal(learner.received[1].rows(), first.rows())
        learner.acks[first.source] = m.SourceAck(0, 1)
        assert spin_until(executors, lambda: 1 in learner.seqs(), 5.0)
        assert bridge.sent >= 2


def test_bridge_does_not_resend_what_a_busy_learner_holds(ros_domain_id, ros_node):
    """A learner still training on earlier batches (or on another bridge's) has this bridge's
    unacknowledged batches in its queue and says so in its progress: the acknowledgement stalls,
    yet nothing is sent again (every batch went twice to a learner slower than learner_timeout_s:
    693 duplicates in one 20k-step run of two bridges on a loaded machine). Once it says it lacks
    them (a restarted learner), they are sent again."""
    learner = FakeLearner(ros_node)
    with GraphRunner([flow_bridge(max_ahead=3, replay_batch=1)], ros_domain_id) as graph:
        bridge = graph.nodes["sim_bridge"]
        executors = [graph.executor, learner.executor]
        assert spin_until(executors, lambda: len(set(learner.seqs())) >= 3, 20.0)
        source = learner.received[0].source
        learner.acks[source] = m.SourceAck(0, 1)
        assert spin_until(executors, lambda: bridge.acked == 1 and len(bridge._unacked) >= 2, 5.0)
        spin_for(executors, 0.3)
        unacked = [seq for seq, _, _ in bridge._unacked]
        learner.holding[source] = unacked[-1]  # all of them queued at the learner
        spin_for(executors, 0.3)  # (a re-send under way before the learner said so)
        resent, copies = bridge.resent, len(learner.received)
        spin_for(executors, 2.0)  # four learner_timeout_s without an acknowledgement
        assert bridge.resent == resent and len(learner.received) == copies, "sent the held batches again"
        learner.holding[source] = 0  # a learner that lacks them
        assert spin_until(executors, lambda: all(learner.seqs().count(seq) >= 2 for seq in unacked), 5.0), \
            "no re-send"


def test_the_learners_progress_says_which_batches_it_holds(tmp_path, ros_domain_id):
    """Batches that wait in the learner's queue (its worker busy: here, waiting for demonstrations)
    count as received, up to the first one missing; the progress published after a batch and the
    one re-published every second carry it, beside the unchanged acknowledgement."""
    from rclpy.serialization import serialize_message

    spec = NodeSpec("learner", "learner", parameters={"env_id": ENV, "num_demos": 100, "demo_settle_s": 1e6,
                                                      "run_dir": str(tmp_path / "run"), "progress": False})
    rows = np.zeros((2, 4))
    flags = np.zeros(2)

    def batch(seq: int) -> bytes:
        return serialize_message(m.replay_to_msg(rows, rows[:, :1], rows, flags, flags, flags, seq=seq,
                                                 source=5))

    with GraphRunner([spec], ros_domain_id) as graph:
        learner = graph.nodes["learner"]
        sent: list = []
        learner.progress_pub = type("Capture", (), {"publish": lambda _self, msg: sent.append(msg)})()
        learner.trainer.acks[5] = m.SourceAck(0, 2)  # batch 0 consumed (as if from a checkpoint)
        for seq in (1, 2, 4):
            learner._on_replay(batch(seq))
        learner._on_replay(b"\x00\x01 not a batch")  # left to the worker, which rejects it
        learner._publish_progress()
        assert m.msg_to_progress(sent[-1]).received == {5: 2}  # 3 is missing
        learner._on_replay(batch(3))
        learner._republish_progress()
        progress = m.msg_to_progress(sent[-1])
        assert progress.received == {5: 4} and progress.acks == {5: m.SourceAck(0, 2)}


def test_bridge_resends_to_a_learner_that_comes_back(ros_domain_id, ros_node):
    """Progress silent for longer than ``learner_timeout_s``, then back (a restarted learner): the
    bridge, not waiting on it (``max_ahead`` large), holds its steps from the learner's first
    message and re-sends every unacknowledged batch, oldest first, with its second (by then DDS
    has matched the learner's replay subscription too), then steps on."""
    learner = FakeLearner(ros_node)
    bridge_spec = flow_bridge(max_ahead=1_000_000, replay_batch=20, learner_timeout_s=1.0)
    with GraphRunner([bridge_spec], ros_domain_id) as graph:
        bridge = graph.nodes["sim_bridge"]
        executors = [graph.executor, learner.executor]

        assert spin_until(executors, lambda: len(learner.received) >= 3, 20.0)
        learner.paused = True
        spin_for(executors, 1.5)
        steps = bridge.sent
        assert bridge.resent == 0 and steps > 60  # no learner: nothing re-sent; it steps on
        learner.publish_progress()  # back: the first message
        spin_for(executors, 0.2)
        # a step under way when it came is finished (its observation may need a re-publish)
        assert spin_until(executors, lambda: not bridge._waiting_action, 5.0)
        held = bridge.sent
        spin_for(executors, 0.3)
        assert bridge.sent == held and bridge.resent == 0  # holding, nothing re-sent yet
        learner.paused = False  # the next messages (every 0.1 s)
        assert spin_until(executors, lambda: bridge.resent > 0, 5.0), "no re-send"
        last = bridge.seq - 1
        assert spin_until(executors, lambda: learner.seqs().count(last) == 2, 5.0)
        seqs = learner.seqs()
        assert seqs[seqs.index(last) + 1:][:last + 1] == list(range(last + 1))  # all again, in order
        assert bridge.resent == last + 1
        learner.acks[learner.received[0].source] = m.SourceAck(last, bridge.sent)
        assert spin_until(executors, lambda: last + 1 in learner.seqs(), 5.0)
        assert bridge.sent > held


def test_a_bridge_held_by_a_silent_learner_says_so(ros_domain_id, ros_node, capfd, monkeypatch):
    """A learner killed mid-run: its bridge, held by flow control, waited without a word until the
    learner came back (a walkthrough). It warns once the learner is silent for a while."""
    from opolo_ros.nodes import sim_bridge

    monkeypatch.setattr(sim_bridge, "WAIT_NOTE_AFTER_S", 1.0)
    learner = FakeLearner(ros_node)  # acknowledges nothing: the bridge is held after max_ahead steps
    spec = flow_bridge(max_ahead=10, replay_batch=5, learner_timeout_s=0.5)
    with GraphRunner([spec], ros_domain_id) as graph:
        bridge = graph.nodes["sim_bridge"]
        executors = [graph.executor, learner.executor]
        assert spin_until(executors, lambda: bridge.sent >= 11, 20.0)
        spin_for(executors, 1.5)
        assert "no progress from the learner" not in capfd.readouterr().err  # it speaks: just held
        learner.paused = True
        spin_for(executors, 2.0)
    err = capfd.readouterr().err
    assert re.search(r"no progress from the learner for \d+ s \(stopped\? restarted, it resumes from its "
                     r"checkpoint\): waiting, 11 transitions not acknowledged yet", err), err


def test_bridge_takes_the_count_of_a_learner_that_started_over(ros_domain_id, ros_node):
    """A learner started again with resume:=false while the bridge ran counts this source from 0: its
    acknowledgements stayed below the bridge's, `sent - acked` above `max_ahead`, and the graph
    waited for good without a word (3 of 3 runs of a probe)."""
    learner = FakeLearner(ros_node)
    with GraphRunner([flow_bridge(max_ahead=20, replay_batch=10)], ros_domain_id) as graph:
        bridge = graph.nodes["sim_bridge"]
        executors = [graph.executor, learner.executor]

        def acknowledge_all() -> bool:
            if learner.received:
                last = learner.received[-1]
                learner.acks[last.source] = m.SourceAck(last.seq, 10 * (last.seq + 1))
            return bridge.acked >= 60

        assert spin_until(executors, acknowledge_all, 20.0)
        spin_for(executors, 1.0)  # the old learner is gone: nothing more acknowledged, the bridge waits
        waiting, seq = bridge.steps, bridge.seq
        assert bridge.sent - bridge.acked > 20
        source = learner.received[0].source
        learner.acks[source] = m.SourceAck(seq - 1, 10)  # the new one consumed the newest batch only
        assert spin_until(executors, lambda: bridge.steps > waiting, 5.0), "the bridge waits for good"
        assert bridge.acked == 10 and bridge.sent - bridge.acked <= 20 + 10


def test_a_restarted_bridge_goes_on_from_another_initial_state(ros_domain_id, ros_node):
    """A bridge restarted with its learner continues the learner's count (300 transitions here)
    from an initial state of its own: reset with the seed again, it and the actor's noise from the
    same seed repeated the run's first transitions bit for bit (a probe found 509 duplicate rows)."""
    from opolo_ros.sim.tasks import continuation_seed

    learner = FakeLearner(ros_node)
    learner.acks[m.bridge_source_id("/sim_bridge")] = m.SourceAck(29, 300)
    with GraphRunner([flow_bridge(max_ahead=20, replay_batch=5, seed=3)], ros_domain_id) as graph:
        bridge = graph.nodes["sim_bridge"]
        assert spin_until([graph.executor, learner.executor], lambda: len(learner.received) >= 1, 20.0)
    first = learner.received[0]
    assert first.seq == 30 and bridge.sent >= 305
    fresh, _ = make_env(ENV, seed=3).reset(seed=3)
    again, _ = make_env(ENV).reset(seed=continuation_seed(3, 300))
    np.testing.assert_array_equal(first.obs[0], again.astype(np.float32))
    assert not np.array_equal(first.obs[0], fresh.astype(np.float32))


def test_bridge_resends_when_progress_is_always_late(ros_domain_id, ros_node):
    """Progress slower than ``learner_timeout_s`` every time (a learner's ``progress_period_s`` set
    above the bridge's timeout): each message looks like a return, yet the bridge holds for one
    message at most and re-sends with the next; it never waits for ever."""
    learner = FakeLearner(ros_node)
    learner.paused = True
    with GraphRunner([flow_bridge(max_ahead=1_000_000, replay_batch=20)], ros_domain_id) as graph:
        bridge = graph.nodes["sim_bridge"]
        executors = [graph.executor, learner.executor]
        def started() -> bool:  # the learner announces itself until the bridge has matched it
            learner.publish_progress()
            return len(learner.received) >= 2

        # (20 s ran out once, in a full suite beside two training jobs: discovery and 40 lock-step
        # round trips over DDS on a loaded machine; it returns as soon as both batches are in)
        assert spin_until(executors, started, 60.0)
        before = bridge.resent  # (re-sends for the acknowledgement that never moved, so far)
        for _ in range(3):  # one message every 0.8 s against the 0.5 s timeout
            spin_for(executors, 0.8)
            learner.publish_progress()
        # no progress comes after the third message: a re-send now can only answer those three (the
    # wait is long for a loaded machine; the bridge steps and publishes replay all the while)
    assert spin_until(executors, lambda: bridge.resent > before, 10.0), "held for ever, no re-send"


@pytest.mark.parametrize("params,match", [
    ({"replay_batch": 0}, r"'replay_batch' must be >= 1, got 0"),
    ({"rate_hz": -1.0}, r"'rate_hz' must be a finite number >= 0, got -1.0"),
    ({"time_scale": float("nan")}, r"'time_scale' must be a finite number > 0, got nan"),
    ({"action_timeout_s": float("nan")}, r"'action_timeout_s' must be a finite number >= 0.001"),
    ({"learner_timeout_s": float("nan")}, r"'learner_timeout_s' must be a finite number >= 0.001"),
    ({"action_timeout_s": 1e-9}, r"'action_timeout_s' must be a finite number >= 0.001, got 1e-09"),
    ({"report_period_s": float("nan")}, r"'report_period_s' must be a finite number >= 0, got nan"),
    ({"seed": 2**32}, r"'seed' must be at most 4294967295, got 4294967296"),
    ({"mode": "realtime", "rate_hz": 1e-12}, r"real-time step rate 1e-12 Hz .* is outside 1e-3..1e5 Hz"),
])
def test_bridge_refuses_parameters_it_cannot_run_with_naming_them(ros_domain_id, params, match):
    spec = NodeSpec("sim_bridge", "sim_bridge", parameters={"env_id": ENV, **params})
    with pytest.raises(ValueError, match=match):
        GraphRunner([spec], ros_domain_id)


@pytest.mark.parametrize("params,match", [
    ({"demo_settle_s": float("nan")}, r"'demo_settle_s' must be a finite number >= 0, got nan"),  # hung
    ({"replay_gap_timeout_s": float("nan")}, r"'replay_gap_timeout_s' must be a finite number >= 0"),
    ({"progress_period_s": float("inf")}, r"'progress_period_s' must be a finite number >= 0.001, got inf"),
    ({"progress_period_s": 1e-12}, r"'progress_period_s' must be a finite number >= 0.001"),
    ({"progress_period_s": 1e10}, r"'progress_period_s' must be at most 1e\+06 s, got 1e\+10"),
    ({"policy_every": -1}, r"'policy_every' must be >= 0, got -1"),
    ({"opolo.lr": float("nan")}, r"config 'opolo.lr': must be a finite number > 0, got nan"),
])
def test_learner_refuses_parameters_it_cannot_run_with_naming_them(tmp_path, ros_domain_id, params, match):
    spec = NodeSpec("learner", "learner", parameters={"env_id": ENV, "run_dir": str(tmp_path / "run"),
                                                      "progress": False, **params})
    with pytest.raises(ValueError, match=match):
        GraphRunner([spec], ros_domain_id)


def test_learner_with_num_demos_0_trains_on_every_episode_the_player_sends(tmp_path, ros_domain_id):
    """num_demos 0 = all: the learner takes every episode once they stop coming (demo_settle_s),
    not the first 4 (the default) nor none."""
    from opolo_ros.data.demos import Episode, save_npz

    rng = np.random.default_rng(0)
    demos = tmp_path / "six.npz"
    save_npz(demos, [Episode(rng.normal(0, 0.1, (20, 4)), float(k)) for k in range(6)])
    specs = [NodeSpec("demo_player", "demo_player", parameters={"demos": str(demos), "num_demos": 0}),
             NodeSpec("learner", "learner", parameters={
                 "env_id": ENV, "run_dir": str(tmp_path / "run"), "progress": False, "demos": str(demos),
                 "num_demos": 0, "demo_settle_s": 0.5})]
    with GraphRunner(specs, ros_domain_id) as graph:
        learner = graph.nodes["learner"]
        assert graph.spin_until(learner.run_folder_taken.is_set, timeout_s=30.0), "no demonstrations taken"
        assert learner.trainer.evaluator.expert_return == pytest.approx(2.5)  # the mean of returns 0..5


@pytest.mark.parametrize("num_demos,sent,settle,starts", [(2, 2, 1e6, True), (0, 1, 5.0, False)],
                         ids=["exactly num_demos: at once", "num_demos 0: waits for the settle time"])
def test_the_learner_takes_its_demonstrations_when_they_are_all_there_or_settled(tmp_path, ros_domain_id,
                                                                                   num_demos, sent, settle,
                                                                                   starts):
    """Survivors of a mutation spot check: exactly num_demos episodes waited the whole settle time
    (`>` for `>=`), and without the time of the last arrival the settle time counted from 0, so
    num_demos 0 trained on the first episode to arrive."""
    spec = NodeSpec("learner", "learner", parameters={"env_id": ENV, "run_dir": str(tmp_path / "run"),
                                                      "progress": False, "num_demos": num_demos,
                                                      "demo_settle_s": settle})
    rng = np.random.default_rng(0)
    with GraphRunner([spec], ros_domain_id) as graph:
        learner = graph.nodes["learner"]
        for k in range(sent):
            learner._on_demo(m.demonstration_to_msg(rng.normal(0, 0.1, (20, 4)).astype(np.float32), 1.0, k))
        taken = graph.spin_until(learner.run_folder_taken.is_set, timeout_s=10.0 if starts else 1.5)
        assert taken is starts


def test_the_learner_warns_of_a_second_source_only_and_a_refused_batch_is_not_held(tmp_path, ros_domain_id,
                                                                                    capfd):
    """Survivors of a mutation spot check: the several-bridges warning came with the first source of
    every run; and a batch told as received, then refused (actions out of bounds), stayed counted
    as held, so its bridge would never send it again."""
    spec = NodeSpec("learner", "learner", parameters={"env_id": ENV, "run_dir": str(tmp_path / "run"),
                                                      "progress": False, "num_demos": 100,
                                                      "demo_settle_s": 1e6})
    rows, flags = np.zeros((2, 4)), np.zeros(2)

    def batch(seq: int, source: int, action: float = 0.0):
        return m.replay_to_msg(rows, np.full((2, 1), action), rows, flags, flags, flags, seq=seq,
                               source=source)

    with GraphRunner([spec], ros_domain_id) as graph:
        learner = graph.nodes["learner"]
        learner.trainer.acks[5] = m.SourceAck(0, 2)
        assert learner.take(batch(7, 5)) is not None
        graph.spin_until(lambda: False, timeout_s=0.2)
        assert "several bridges feed this learner" not in capfd.readouterr().err
        assert learner.take(batch(7, 6)) is not None
        graph.spin_until(lambda: False, timeout_s=0.2)
        assert "several bridges feed this learner" in capfd.readouterr().err
        learner._on_replay(batch(1, 5, action=50.0))  # told as received as it comes ...
        assert learner._received.snapshot()[5] == 1
        assert learner.take(batch(1, 5, action=50.0)) is None  # ... then refused: not held
        assert learner._received.snapshot()[5] == 0


def test_record_expert_with_an_expert_that_always_falls_ends_as_an_error(tmp_path, ros_domain_id, capfd):
    """skip_terminated from the parameter file (the launch argument left empty keeps it): after
    max_tries falls the recording ends, as an error naming the recorder, with no bag. Before, the
    node path had no limit and ran on for ever."""
    from opolo_ros.launch_runner import launch_command

    falling = onnx_policy(tmp_path / "falls.onnx", [-2 / 3, -20 / 3, -1 / 3, -1 / 3])  # pushes it over
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"demo_recorder": {"ros__parameters": {"skip_terminated": True,
                                                                             "max_tries": 3}}}))
    status = launch_command("record_expert", [f"model:={falling}", "episodes:=1",
                                              f"output:={tmp_path / 'bag'}", f"params_file:={params}"])
    err = capfd.readouterr().err
    assert status == 1, err
    assert "the demo_recorder failed: only 0 of 3 episodes reached the time limit without terminating" in err
    assert not (tmp_path / "bag").exists()


def test_a_node_that_fails_its_work_exits_1(tmp_path, ros_domain_id, ros_node):
    """`ros2 run` of a recorder that gives up (max_tries): exit status 1 and why, not 0."""
    import threading

    from opolo_ros.nodes.common import run_node
    from opolo_ros.nodes.demo_recorder import DemoRecorder

    node, _ = ros_node("replay_feeder")
    pub = node.create_publisher(Float32MultiArray, "/opolo/replay", qos_for("replay"))
    done = threading.Event()

    def feed() -> None:  # episodes of 3 steps that end in a fall, until the recorder is done
        o, a = np.zeros((3, 4)), np.zeros((3, 1))
        for k in range(200):
            if done.is_set():
                return
            fell = np.array([0, 0, 1.0])
            pub.publish(m.replay_to_msg(o, a, o, np.zeros(3), fell, np.zeros(3), seq=k, source=7))
            time.sleep(0.05)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        status = run_node(DemoRecorder, ["demo_recorder", "--ros-args", "-p", "skip_terminated:=true",
                                         "-p", "max_tries:=2", "-p", "episodes:=1",
                                         "-p", f"output:={tmp_path / 'bag'}"])
    finally:
        done.set()
        feeder.join()
    assert status == 1 and not (tmp_path / "bag").exists()


def test_record_expert_on_a_robot_model_records_no_return(tmp_path, ros_domain_id, capfd):
    """An MJCF task has no reward: its episodes' returns are unknown (NaN, as everywhere else for a
    robot model), not 0.0 ("return 0.0 +- 0.0", a walkthrough)."""
    import gymnasium

    from opolo_ros.launch_runner import launch_command

    xml = tmp_path / "arm.xml"
    xml.write_text((Path(gymnasium.__file__).parent / "envs/mujoco/assets/inverted_pendulum.xml").read_text())
    expert = onnx_policy(tmp_path / "expert.onnx", [2 / 3, 20 / 3, 1 / 3, 1 / 3], env=str(xml))
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"sim_bridge": {"ros__parameters": {"max_episode_steps": 30}}}))
    assert launch_command("record_expert", [f"env:={xml}", f"model:={expert}", "episodes:=2",
                                            f"output:={tmp_path / 'bag'}", f"params_file:={params}"]) == 0
    assert "wrote 2 episodes (no reward: an MJCF task)" in capfd.readouterr().err
    episodes = read_demonstrations(tmp_path / "bag")
    assert [len(ep.obs) for ep in episodes] == [31, 31] and all(np.isnan(ep.ret) for ep in episodes)


def test_record_expert_launch_names_its_launch_file_at_the_end(tmp_path, ros_domain_id, capfd):
    from opolo_ros.launch_runner import launch_command

    assert launch_command("record_expert", ["episodes:=1", f"output:={tmp_path / 'bag'}"]) == 0
    assert "opolo-ros launch: record_expert finished after" in capfd.readouterr().err


@pytest.mark.parametrize("ends, bag", [("fall fall ok", False), ("ok fall fall ok", False),
                                       ("fall ok ok", True)])
def test_recorder_max_tries_counts_every_episode(tmp_path, ros_domain_id, ends, bag):
    """max_tries 3 for 2 episodes: the third episode ends the recording, a success or not (as
    `opolo-ros record --skip-terminated` stops after its tries)."""
    specs = [NodeSpec("demo_recorder", "demo_recorder", parameters={
        "output": str(tmp_path / "bag"), "episodes": 2, "skip_terminated": True, "max_tries": 3})]
    with GraphRunner(specs, ros_domain_id) as graph:
        recorder = graph.nodes["demo_recorder"]
        o, a = np.zeros((3, 4)), np.zeros((3, 1))
        for k, end in enumerate(ends.split()):
            last = np.array([0, 0, 1.0])  # the episode's last step: a fall, or the time limit
            fell, limit = (last, np.zeros(3)) if end == "fall" else (np.zeros(3), last)
            recorder._on_replay(m.replay_to_msg(o, a, o, np.zeros(3), fell, limit, seq=k, source=7))
        assert recorder.finished.is_set()
    assert (tmp_path / "bag").exists() is bag and (recorder.error is None) is bag


def test_an_actor_restarted_with_its_learner_counts_on_with_new_noise(tmp_path, ros_domain_id, ros_node):
    """The first policy of a resumed learner (version 300): the actor's steps go on from there, and
    its exploration noise is not the seed's own from step 0 again (which, with the bridge's reset,
    repeated the run's first transitions)."""
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4, version=300)
    spec = NodeSpec("actor", "actor", parameters={"mode": "train", "seed": 5, "swap_delay": 10,
                                                  "warmup_steps": 1000})
    peer, peer_executor = ros_node("policy_peer")
    pub = peer.create_publisher(UInt8MultiArray, "/opolo/policy", qos_for("policy"))
    with GraphRunner([spec], ros_domain_id) as graph:
        actor = graph.nodes["actor"]
        assert spin_until([graph.executor, peer_executor], lambda: linked(pub, actor), 10.0)
        pub.publish(m.policy_to_msg(model.read_bytes(), 300))
        assert spin_until([graph.executor, peer_executor], lambda: actor.newest_version == 300, 10.0)
    assert actor.steps == 300
    assert actor.rng.bit_generator.state == np.random.default_rng([5 + 3, 300]).bit_generator.state


def test_bridge_ignores_an_overtaken_progress_message(ros_domain_id):
    """The learner's timer could publish an older progress message after the worker's newer one:
    taken as a learner that started over, it made the bridge under-count `sent` for good (a review
    found it). A lower count with an older batch is stale; with a newer batch, a new count, on which
    what is still in flight (batches after the acknowledged one, rows not yet sent) is counted."""
    with GraphRunner([flow_bridge(max_ahead=100, replay_batch=10)], ros_domain_id) as graph:
        bridge = graph.nodes["sim_bridge"]
        for _ in range(30):
            bridge._step(np.zeros(1))
        assert bridge.sent == 30 and [seq for seq, _, _ in bridge._unacked] == [0, 1, 2]

        def progress(seq: int, transitions: int):
            acks = {bridge.source: m.SourceAck(seq, transitions)}
            return m.progress_to_msg(m.LearnerProgress(0, transitions, acks))

        bridge._on_progress(m.progress_to_msg(m.LearnerProgress(0, 0, {})))  # a learner, new to it
        bridge._on_progress(progress(1, 20))
        bridge._on_progress(progress(0, 10))  # overtaken: nothing new
        assert (bridge.sent, bridge.acked) == (30, 20)
        bridge._on_progress(progress(2, 30))
        assert (bridge.sent, bridge.acked, len(bridge._unacked)) == (30, 30, 0)
        for _ in range(25):  # batches 3 and 4 sent, 5 rows not yet in a batch
            bridge._step(np.zeros(1))
        bridge._on_progress(progress(3, 10))  # batch 3 as a new learner's first: its count from there,
        assert (bridge.sent, bridge.acked) == (10 + 10 + 5, 10)  # plus batch 4 and the pending rows


def test_a_learner_back_with_an_older_acknowledgement_gets_what_it_lacks(ros_domain_id):
    """A learner that held batches 2 and 3 in its queue, killed (journal off) and resumed from an
    older checkpoint, acknowledges less than the one before: what it holds comes from its own
    messages, not the dead one's, and the bridge re-sends (it re-sent nothing and waited for ever,
    a review found)."""
    with GraphRunner([flow_bridge(max_ahead=20, replay_batch=10)], ros_domain_id) as graph:
        bridge = graph.nodes["sim_bridge"]
        for _ in range(40):
            bridge._step(np.zeros(1))

        def progress(seq: int, transitions: int, holds: int):
            acks = {bridge.source: m.SourceAck(seq, transitions)}
            return m.progress_to_msg(m.LearnerProgress(0, transitions, acks, {bridge.source: holds}))

        bridge._on_progress(m.progress_to_msg(m.LearnerProgress(0, 0, {})))
        bridge._on_progress(progress(1, 20, 3))  # holds 2 and 3 queued
        bridge._last_ack_move -= 10.0  # long past learner_timeout_s
        bridge._on_progress(progress(1, 20, 3))
        assert bridge.resent == 0  # held by the learner: not sent again
        bridge._last_ack_move -= 10.0
        bridge._on_progress(progress(0, 10, 0))  # the resumed learner: batch 0 only
        assert bridge.resent == 2  # batches 2 and 3 (1 is acknowledged for good)


def test_a_real_time_bridge_told_to_wait_for_its_controller_steps_only_once_matched(ros_domain_id, ros_node):
    """wait_for_controller: no uncommanded steps while DDS discovery completes (a deployed actor in
    another process was matched only after the pendulum had fallen, once in a loaded full run)."""
    from rclpy.qos import qos_profile_sensor_data
    from std_msgs.msg import Float32MultiArray, Float64MultiArray

    from opolo_ros.launch_runner import GraphRunner, NodeSpec

    spec = NodeSpec("sim_bridge", "sim_bridge", parameters={
        "env_id": "InvertedPendulum-v5", "mode": "realtime", "time_scale": 10.0, "publish_replay": False,
        "wait_for_controller": True, "max_episode_steps": 100_000})
    controller, controller_executor = ros_node("controller")
    seen: list[np.ndarray] = []
    with GraphRunner([spec], ros_domain_id) as graph:
        bridge = graph.nodes["sim_bridge"]
        initial = bridge.obs.copy()
        graph.spin_until(lambda: False, timeout_s=1.0)
        assert bridge.steps == 0 and not bridge.started
        controller.create_publisher(Float64MultiArray, "action", 10)
        graph.spin_until(lambda: False, timeout_s=1.0)
        assert bridge.steps == 0  # a command publisher alone: nobody reads the state yet
        controller.create_subscription(Float32MultiArray, "observation",
                                       lambda msg: seen.append(np.asarray(msg.data)),
                                       qos_profile_sensor_data)  # best effort, as the bridge publishes
        assert spin_until([graph.executor, controller_executor], lambda: bridge.steps > 5 and len(seen) > 5,
                          timeout_sec=20.0), bridge.steps
        assert bridge.held == 0  # no command yet: nothing held, nothing missed
    # the controller sees the initial state before the first step (the first published was s_1)
    np.testing.assert_array_equal(seen[0], initial.astype(np.float32))


def test_a_bridge_told_to_wait_for_state_subscribers_steps_once_a_recorder_listens(ros_domain_id, ros_node):
    """wait_for_state_subscribers: a recorder started with the bridge subscribed seconds after it
    discovered it, and the first episode it recorded was the tail of one (a walkthrough: 69 states
    of 201). The bridge waits for that many subscribers of its joint states."""
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from opolo_ros.launch_runner import GraphRunner, NodeSpec

    spec = NodeSpec("sim_bridge", "sim_bridge", parameters={
        "env_id": "InvertedPendulum-v5", "mode": "realtime", "time_scale": 10.0, "publish_replay": False,
        "wait_for_state_subscribers": 2, "max_episode_steps": 100_000})
    node, executor = ros_node("controller_and_recorder")
    states: list[JointState] = []
    with GraphRunner([spec], ros_domain_id) as graph:
        bridge = graph.nodes["sim_bridge"]
        node.create_publisher(Float64MultiArray, "action", 10)
        node.create_subscription(JointState, "/joint_states", lambda msg: None,
                                 qos_profile_sensor_data)  # the controller (best effort, as published)
        graph.spin_until(lambda: False, timeout_s=1.5)
        assert bridge.steps == 0 and not bridge.started  # one subscriber of two
        node.create_subscription(JointState, "/joint_states", states.append, qos_profile_sensor_data)
        assert spin_until([graph.executor, executor], lambda: bridge.steps > 5 and len(states) > 5,
                          timeout_sec=20.0), bridge.steps
    spec.parameters.update(joint_states_topic="")
    with pytest.raises(ValueError, match="'wait_for_state_subscribers' needs a joint_states_topic"):
        GraphRunner([spec], ros_domain_id)


@pytest.mark.parametrize("argv,refused", [
    (["--params-file", "{task}", "-p", "run_dir:={tmp}/mine"], True),  # the file's learner: wins
    (["--params-file", "{task}", "-p", "learner:run_dir:={tmp}/mine"], False),  # the form that wins
    (["-r", "__ns:=/robot", "--params-file", "{task}", "-p", "run_dir:={tmp}/mine"], False),  # not its
    (["--params-file", "{own}", "-p", "run_dir:={tmp}/mine"], False),  # a file with the node's section only
], ids=["plain -p after a task file", "-p learner:", "namespaced node", "own section only"])
def test_a_p_that_did_not_reach_the_node_is_refused(tmp_path, ros_domain_id, argv, refused, capfd):
    """`learner --ros-args --params-file config/<task>.yaml -p run_dir:=...` trained in the file's
    run folder: rcl applied the file's learner section over the -p (a walkthrough). The node checks
    what it got against each -p, so where rcl's order lets the -p win nothing is refused."""
    from opolo_ros.nodes.common import run_node
    from opolo_ros.nodes.learner import Learner

    own = tmp_path / "own.yaml"
    own.write_text(yaml.safe_dump({"learner": {"ros__parameters": {"run_dir": str(tmp_path / "file")}}}))
    files = {"task": str(ROOT / "config" / "inverted_pendulum.yaml"), "own": str(own), "tmp": str(tmp_path)}
    args = ["learner", "--ros-args", *(a.format(**files) for a in argv), "-p", "demo_settle_s:=0.0"]
    if refused:
        assert run_node(Learner, args) == 2
        assert f"-p run_dir:={tmp_path}/mine did not reach the node" in capfd.readouterr().err
        return
    import rclpy
    from rclpy.parameter import Parameter

    from opolo_ros.nodes.common import check_param_overrides

    context = rclpy.Context()
    context.init(args, domain_id=ros_domain_id)
    try:
        node = rclpy.create_node("learner", context=context)
        node.declare_parameter("run_dir", "")
        node.declare_parameter("demo_settle_s", 2.0)
        assert node.get_parameter("run_dir").value == str(tmp_path / "mine")
        check_param_overrides(node, args)  # nothing refused
        node.set_parameters([Parameter("run_dir", value="x")])
        with pytest.raises(ValueError, match=r"-p (learner:)?run_dir:=.* did not reach the node"):
            check_param_overrides(node, args)
        node.destroy_node()
    finally:
        context.try_shutdown()


def test_a_p_that_did_not_reach_the_node_is_refused_before_the_node_acts(tmp_path, ros_domain_id, capfd):
    """The demo player published its episodes (transient local) in its constructor, and the check of
    each -p came after it: the refused program had already put them on the topic (an audit)."""
    from opolo_ros.nodes.common import run_node
    from opolo_ros.nodes.demo_player import DemoPlayer

    task = tmp_path / "task.yaml"
    task.write_text(yaml.safe_dump({"/**": {"ros__parameters": {"seed": 0}},
                                    "demo_player": {"ros__parameters": {"topic": "/from_file"}}}))
    demos = ROOT / "models" / "demos" / "InvertedPendulum-v5"
    args = ["demo_player", "--ros-args", "--params-file", str(task), "-p", "topic:=/mine",
            "-p", f"demos:={demos}"]
    assert run_node(DemoPlayer, args) == 2
    err = capfd.readouterr().err
    assert "-p topic:=/mine did not reach the node" in err and "published" not in err, err


@pytest.mark.parametrize("value, message", [
    ("233", "ROS_DOMAIN_ID must be in [0, 232], got 233"),
    ("-1", "ROS_DOMAIN_ID must be in [0, 232], got -1"),
    ("abc", "ROS_DOMAIN_ID must be an integer domain id, got 'abc'"),
])
def test_a_node_program_refuses_a_bad_ros_domain_id_in_one_line(monkeypatch, capfd, value, message):
    """A walkthrough with ROS_DOMAIN_ID=235: `opolo-ros launch` refused it in one line (status 2),
    but the node programs (and `opolo-ros record-topics`) printed Fast DDS's colored port error and
    exited 1, and with -1 rcl put them on domain 0 without a word."""
    from opolo_ros.nodes.common import run_node
    from opolo_ros.nodes.demo_player import DemoPlayer

    monkeypatch.setenv("ROS_DOMAIN_ID", value)
    demos = ROOT / "models" / "demos" / "InvertedPendulum-v5"
    assert run_node(DemoPlayer, ["demo_player", "--ros-args", "-p", f"demos:={demos}"]) == 2
    err = capfd.readouterr().err
    assert err.strip() == f"demo_player: error: {message}", err


def test_p_values_rcl_reads_otherwise_than_pyyaml_are_not_refused():
    """PyYAML (YAML 1.1) keeps `5e-1` as text and rcl reads it as 0.5; rcl leaves `-p topics:=[]`
    unset. Checked at each declaration, these were refused as "did not reach the node" (a review;
    the topic recorder's own "at least one topic" error was hidden by it)."""
    from opolo_ros.nodes.common import _same_value

    assert _same_value(0.5, yaml.safe_load("5e-1")) and _same_value(0.001, "1e-3")
    assert _same_value([0.001, 2.0], yaml.safe_load("[1e-3, 2]"))
    assert _same_value(None, yaml.safe_load("[]"))
    assert not _same_value(0.5, "fast") and not _same_value(0.5, yaml.safe_load("6e-1"))
    assert not _same_value(None, yaml.safe_load("[1]"))


def test_train_mode_exploration_adds_noise_in_the_policys_unit_box(tmp_path, ros_domain_id):
    """Past warm-up an action is to_env(clip(to_unit(pi(s)) + noise, -1, 1)): the model's output is in
    environment units (here [-3, 3]) and goes back to [-1, 1] before the noise. Taken as unit
    actions it was scaled by 3 again, and no test saw it (a mutation test; the graph still learned)."""
    model = onnx_policy(tmp_path / "p.onnx", [0.0] * 4, bias=0.1)  # pi(s) = 0.3 in env units
    for noise, check in ((0.0, lambda a: a == pytest.approx([0.3])),
                         (0.2, lambda a: -3.0 <= a[0] <= 3.0)):
        spec = NodeSpec("actor", "actor", parameters={"mode": "train", "model": str(model), "warmup_steps": 0,
                                                      "exploration_noise": noise, "subscribe_policy": False})
        with GraphRunner([spec], ros_domain_id) as graph:
            actor = graph.nodes["actor"]
            actions = np.array([actor.act(np.zeros(4, np.float32)) for _ in range(400)])
        assert all(check(a) for a in actions), actions[:5]
        if noise:  # the noise is 0.2 in unit terms: 0.6 in env units around 0.3, not 0.9
            assert actions.mean() == pytest.approx(0.3, abs=0.1)
            assert actions.std() == pytest.approx(0.6, rel=0.15)
