"""Crashes and signals: every node in its own process, as ``ros2 launch`` runs them.

Each node runs as ``python -m opolo_ros.nodes.<node> --ros-args --params-file <file>`` (what
``ros2 run`` does), with its parameters from ``launch/sim_train.launch.py``'s ``describe()``, on
the test's isolated ROS domain. The test process observes the topics through its own context.
Every process a test starts is stopped (by PID) when the test ends, also on failure.
"""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("rclpy")
torch = pytest.importorskip("torch")

from std_msgs.msg import (  # noqa: E402
    Float32MultiArray,
    Float64MultiArray,
    Int64,
    Int64MultiArray,
    UInt8MultiArray,
)

from opolo_ros.algo.config import flatten, unflatten  # noqa: E402
from opolo_ros.export.onnx_policy import load_policy  # noqa: E402
from opolo_ros.launch_runner import GraphRunner, NodeSpec, load_launch_module  # noqa: E402
from opolo_ros.ros import messages as m  # noqa: E402
from opolo_ros.ros.qos import POLICY_VERSION_QOS, qos_for  # noqa: E402
from opolo_ros.ros.runtime import spin_until  # noqa: E402
from opolo_ros.sim.rollout import rollout_episodes  # noqa: E402
from opolo_ros.train.checkpoint import load_checkpoint  # noqa: E402
from opolo_ros.train.runner import make_schedule  # noqa: E402

pytestmark = pytest.mark.ros
ROOT = Path(__file__).resolve().parents[1]
ENV = "InvertedPendulum-v5"
EXIT_LIMIT_S = 2.0  # the limit from signal to process exit
TINY = [16, 16]
LEARNER = {  # small and fast, with every kind of update
    "opolo": {"net": {"hidden": TINY, "disc_hidden": TINY, "inverse_hidden": TINY}},
    "schedule": {"warmup_steps": 100, "inverse_pretrain_steps": 10, "disc_freq": 50, "disc_steps": 2,
                 "inverse_freq": 50, "inverse_steps": 2, "batch_size": 16},
    "progress": False, "torch_threads": 1, "eval_every": 0, "eval_episodes": 2,
}


# ------------------------------------------------------------------------------------ processes

class NodeProcess:
    """One node executable in its own process, its output in a log file."""

    def __init__(self, executable: str, params: Path, log: Path, *ros_args: str) -> None:
        self.executable, self.log = executable, log
        command = [sys.executable, "-m", f"opolo_ros.nodes.{executable}", "--ros-args",
                   "--params-file", str(params), *ros_args]
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                         env=dict(os.environ, PYTHONUNBUFFERED="1"))

    def check_pid(self) -> None:
        """sys.executable is the interpreter itself (no launcher): the PID is the node's process."""
        want = f"opolo_ros.nodes.{self.executable}".encode()
        deadline = time.monotonic() + 5.0
        while want not in self.cmdline() and time.monotonic() < deadline:
            time.sleep(0.01)  # between fork and exec
        assert want in self.cmdline(), self.cmdline()

    def cmdline(self) -> list[bytes]:
        try:
            return Path(f"/proc/{self.proc.pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return []

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int, timeout: float = 30.0) -> float:
        """Send `sig`; seconds until the process has exited."""
        start = time.monotonic()
        self.proc.send_signal(sig)
        self.proc.wait(timeout=timeout)
        return time.monotonic() - start

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def children_of(pid: int) -> list[int]:
    """PIDs whose parent is `pid` (what psutil's children() gives, from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def survivors(pids: list[int]) -> list[int]:
    """The ones of `pids` still running (an orphan is re-parented, not gone; a zombie is gone)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def test_the_left_running_check_finds_an_orphaned_child():
    """The signal tests' "nothing left running" check, on a parent that leaves a child behind:
    the nodes start no child processes today, so this shows the check would catch one."""
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
                               "print('started', flush=True); time.sleep(30)"],
                              stdout=subprocess.PIPE, text=True)
    children: list[int] = []
    try:
        assert parent.stdout.readline().strip() == "started"
        children = children_of(parent.pid)
        assert len(children) == 1
        parent.terminate()
        parent.wait(timeout=10)
        assert survivors(children) == children  # the orphan runs on
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait(timeout=10)
        parent.stdout.close()
    deadline = time.monotonic() + 5
    while survivors(children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert survivors(children) == []


@pytest.fixture
def processes(ros_domain_id: int) -> Iterator[Callable[..., NodeProcess]]:
    """Factory ``start(executable, params, log, *ros_args)``; kills what is still running at the end."""
    started: list[NodeProcess] = []

    def start(*args: object) -> NodeProcess:
        started.append(NodeProcess(*args))
        started[-1].check_pid()
        return started[-1]

    try:
        yield start
    finally:
        for p in started:
            if p.alive():
                p.proc.kill()
                p.proc.wait(timeout=10.0)


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: object) -> bool:
        return True  # rcl's parameter-file parser refuses YAML aliases


def write_params(path: Path, sections: dict[str, dict]) -> Path:
    """A ROS 2 parameter file: ``{node key: {ros__parameters: nested parameters}}``."""
    data = {key: {"ros__parameters": unflatten(params)} for key, params in sections.items()}
    path.write_text(yaml.dump(data, Dumper=_NoAliases))
    return path


def sim_train_specs(tmp_path: Path, demos: Path, **args: str) -> dict[str, NodeSpec]:
    """The nodes of sim_train.launch.py for a test-sized run, by name."""
    module = load_launch_module(ROOT / "launch" / "sim_train.launch.py")
    base = yaml.safe_load((ROOT / "config" / "inverted_pendulum.yaml").read_text())
    learner = base["learner"]["ros__parameters"]
    learner["opolo"].update(LEARNER["opolo"])
    learner["schedule"].update(LEARNER["schedule"])
    learner.update({k: v for k, v in LEARNER.items() if k not in ("opolo", "schedule")})
    base["sim_bridge"]["ros__parameters"].update(replay_batch=5)
    params = tmp_path / "task.yaml"
    params.write_text(yaml.safe_dump(base))
    values = {a.name: a.default for a in module.ARGUMENTS}
    values.update(params_file=str(params), demos=str(demos), run_dir=str(tmp_path / "run"), **args)
    return {spec.name: spec for spec in module.describe(values)}


@pytest.fixture(scope="module")
def demos(tmp_path_factory) -> Path:
    """Four short episodes of a stabilising controller, as .npz (the player reads bags and .npz)."""
    from opolo_ros.data.demos import save_npz

    gains = np.array([2.0, 20.0, 1.0, 1.0])
    episodes = rollout_episodes(lambda o: np.clip(gains @ o, -3, 3).reshape(1), ENV, 4, seed=7)
    path = tmp_path_factory.mktemp("demos") / "pd.npz"
    save_npz(path, [type(ep)(ep.obs[:201], ep.ret) for ep in episodes])
    return path


# ------------------------------------------------------------------------------------ observer

class Observer:
    """The test's view of the graph: learner progress, replay batches and probe actions."""

    def __init__(self, node, executor) -> None:
        self.node, self.executor = node, executor
        self.progress: m.LearnerProgress | None = None
        self.max_ack: dict[int, int] = {}
        self.batches: dict[tuple[int, int], np.ndarray] = {}  # (source, seq) -> rows
        self.actions: list[float] = []
        self.policies: dict[int, bytes] = {}  # version -> ONNX bytes, as the learner published them
        self.probe_version = -1  # the robot actor's active policy
        node.create_subscription(Int64MultiArray, "/opolo/learner_progress", self._on_progress,
                                 qos_for("learner_progress"))
        node.create_subscription(Float32MultiArray, "/opolo/replay", self._on_replay, qos_for("replay"))
        # Deeper than the contract's depth 1: the observer keeps every version, also those that
        # arrive while the test is not spinning (with depth 1 a newer one could replace one the
        # robot actor is running, and the test would have no model to check its actions against).
        policy_qos = copy.copy(qos_for("policy"))
        policy_qos.depth = 100
        node.create_subscription(UInt8MultiArray, "/opolo/policy", self._on_policy, policy_qos)
        node.create_subscription(Int64, "/probe/policy_version",
                                 lambda msg: setattr(self, "probe_version", msg.data), POLICY_VERSION_QOS)
        node.create_subscription(Float64MultiArray, "/probe/action",
                                 lambda msg: self.actions.append(float(msg.data[0])), qos_for("action"))
        self.probe = node.create_publisher(Float32MultiArray, "/probe/observation", qos_for("observation"))

    def _on_progress(self, msg: Int64MultiArray) -> None:
        self.progress = m.msg_to_progress(msg)
        for source, ack in self.progress.acks.items():
            self.max_ack[source] = max(self.max_ack.get(source, 0), ack.transitions)

    def _on_policy(self, msg: UInt8MultiArray) -> None:
        policy = m.msg_to_policy(msg)
        self.policies[policy.version] = policy.model

    def _on_replay(self, msg: Float32MultiArray) -> None:
        batch = m.msg_to_replay(msg)
        self.batches.setdefault((batch.source, batch.seq), batch.rows())

    @property
    def transitions(self) -> int:
        return self.progress.transitions if self.progress is not None else -1

    def wait(self, done: Callable[[], bool], timeout: float, what: str,
             state: Callable[[], str] = lambda: "") -> None:
        assert spin_until(self.executor, done, timeout), f"timed out waiting for {what} {state()}"

    def published(self, source: int) -> np.ndarray:
        """Every transition the bridge published, in order (each batch once, re-sends merged)."""
        seqs = sorted(seq for src, seq in self.batches if src == source)
        assert seqs == list(range(len(seqs))), "the observer missed a replay batch"
        return np.concatenate([self.batches[(source, seq)] for seq in seqs])


@pytest.fixture
def observer(ros_node) -> Observer:
    return Observer(*ros_node("fault_observer"))


# ---------------------------------------------------------------------------------------- tests

def test_killed_learner_resumes_and_loses_no_acknowledged_transition(tmp_path, demos, processes,
                                                                     observer):
    """kill -9 mid-run: the actors keep their policy; a new learner continues from the checkpoint and
    the journal; every transition the bridge published ends up in the replay buffer exactly once."""
    total, ckpt = 420, 200
    specs = sim_train_specs(tmp_path, demos, total_steps=str(total), max_ahead="10", policy_every="50",
                            seed="1")
    specs["learner"].parameters.update(checkpoint_every=ckpt)
    # the learner and this test's observer: the bridge's first batches must reach the observer too
    specs["sim_bridge"].parameters.update(wait_for_subscribers=2)
    files = {name: write_params(tmp_path / f"{name}.yaml", {name: spec.parameters})
             for name, spec in specs.items()}
    probe = write_params(tmp_path / "probe.yaml", {"/**": {"mode": "deploy", "command_qos": "best_effort",
                                                           "watchdog_rate_hz": 0.0}})
    logs = tmp_path / "logs"
    logs.mkdir()

    def start_learner(k: int) -> NodeProcess:
        return processes("learner", files["learner"], logs / f"learner{k}.log")

    learner = start_learner(0)
    others = [processes(name, files[name], logs / f"{name}.log") for name in ("demo_player", "actor",
                                                                             "sim_bridge")]
    robot = processes("actor", probe, logs / "probe.log", "-r", "__ns:=/probe")

    # Past the first checkpoint, and between two: the journal holds what the checkpoint does not.
    # The bridge is then paused (SIGSTOP): the learner, at some 300 steps/s, finished all 420
    # transitions before this test saw its policy (once in a full run beside two training jobs).
    # And the observer has the policy the robot actor runs (the learner can be killed before DDS
    # has matched the observer to its policy publisher: then the observer would never get one).
    bridge = next(p for p in others if p.executable == "sim_bridge")

    def training_state() -> str:
        return (f"at {observer.transitions} transitions, robot actor's version {observer.probe_version}, "
                f"versions seen {sorted(observer.policies)}")

    observer.wait(lambda: observer.transitions >= ckpt + 60, 120.0, "the learner to train", training_state)
    os.kill(bridge.pid, signal.SIGSTOP)
    try:
        assert observer.transitions < total, "the run ended before the learner could be killed"
        observer.wait(lambda: observer.probe_version in observer.policies, 30.0,
                      "the robot actor's policy", training_state)
        learner.proc.kill()
        learner.proc.wait(timeout=10.0)
    finally:
        os.kill(bridge.pid, signal.SIGCONT)
    acked = max(observer.max_ack.values())
    assert acked > ckpt

    # The actors keep running the last policy: the robot actor answers with the one it has.
    x = np.array([0.05, -0.1, 0.2, 0.3], np.float32)
    expected: dict[int, float] = {}  # policy version -> its action for x
    observer.actions.clear()

    def probe_answered() -> bool:
        observer.probe.publish(m.observation_to_msg(x))
        version = observer.probe_version  # as announced by the robot actor
        if version not in expected and version in observer.policies:
            expected[version] = float(load_policy(observer.policies[version])(x)[0])
        return version in expected and sum(abs(a - expected[version]) < 1e-5
                                           for a in observer.actions[-20:]) >= 5

    observer.wait(probe_answered, 20.0, "the robot actor to act without a learner", lambda: (
        f"announced version {observer.probe_version}, versions seen {sorted(observer.policies)}, "
        f"expected {expected}, last actions {observer.actions[-5:]}"))
    assert observer.probe_version > 0  # a policy the learner exported
    assert all(p.alive() for p in [*others, robot])

    learner = start_learner(1)

    def graph_state() -> str:
        return (f"at {observer.transitions} transitions, acks {observer.max_ack}\n--- learner:\n"
                f"{learner.output()[-1500:]}\n--- sim_bridge:\n{bridge.output()[-1500:]}")

    observer.wait(lambda: observer.transitions >= acked, 60.0, "the new learner to catch up", graph_state)
    observer.wait(lambda: not learner.alive(), 120.0, "the run to finish", graph_state)
    assert learner.proc.returncode == 0, learner.output()[-3000:]
    log = learner.output()
    assert f"resumed from {tmp_path / 'run' / 'checkpoint.pt'} at {ckpt} transitions" in log
    assert "again from the replay journal" in log

    state = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    replay = state["runner"]["replay"]
    assert state["step"] == total and replay["size"] == total
    (source,) = observer.max_ack
    published = observer.published(source)[:total]
    stored = np.concatenate([replay["obs"].numpy(), replay["next_obs"].numpy(),
                             replay["reward"].numpy()[:, None]], axis=1)
    o = 4
    expected = np.concatenate([published[:, :o], published[:, o + 1:2 * o + 1], published[:, -3:-2]], axis=1)
    np.testing.assert_array_equal(stored, expected)  # in order, none lost, none twice
    schedule = make_schedule(load_config(specs["learner"]))
    assert state["runner"]["learner"]["counters"]["critic_steps"] == schedule.critic_steps_due(total)
    assert all(p.alive() for p in [*others, robot])


def load_config(spec: NodeSpec):
    from opolo_ros.algo.config import RunConfig, update_dataclass

    known = {k: v for k, v in spec.parameters.items() if k.split(".")[0] in RunConfig.__dataclass_fields__}
    return update_dataclass(RunConfig(), unflatten(known))


# ------------------------------------------------------------------------------ signals: nodes

SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}
KINDS = ("sim_bridge", "actor", "demo_player", "demo_recorder", "learner")
READY = {"sim_bridge": "lockstep", "actor": "policy version", "demo_player": "published",
         "demo_recorder": "recording", "learner": ""}  # the learner: feed_learners()
BURST = 100_000  # critic steps per burst: the signal always lands inside one
WARMUP = 50


def signal_node_params(kind: str, ns: str, tmp: Path, demos: Path) -> dict:
    """Each node busy with its job, in namespace `ns` with its own copies of the /opolo topics."""
    if kind == "sim_bridge":  # steps with the actor of its namespace
        return {"publish_replay": False, "flow_control": False, "joint_states_topic": ""}
    if kind == "actor":
        return {"mode": "deploy", "model": str(ROOT / "models" / "experts" / f"{ENV}.onnx"),
                "subscribe_policy": False, "command_qos": "best_effort"}
    if kind == "demo_player":
        return {"demos": str(demos), "topic": f"{ns}/demos_out"}
    if kind == "demo_recorder":
        return {"output": str(tmp / ns.strip("/") / "bag"), "replay_topic": f"{ns}/recorder_in",
                "demonstrations_topic": ""}
    schedule = {**LEARNER["schedule"], "warmup_steps": WARMUP, "train_freq": WARMUP, "gradient_steps": BURST}
    return {**LEARNER, "schedule": schedule, "total_steps": 10 * WARMUP, "checkpoint_every": 0,
            "run_dir": str(tmp / ns.strip("/") / "run"),
            **{f"{topic}_topic": f"{ns}/opolo/{topic}" for topic in ("replay", "policy", "progress")},
            "demonstrations_topic": f"{ns}/opolo/demonstrations"}


class SignalTargets:
    """Two copies of every node (one per signal), started together, each busy with its work."""

    def __init__(self, tmp: Path, domain_id: int) -> None:
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node

        from opolo_ros.ros import runtime

        self.tmp, self.procs = tmp, {}
        self.context = runtime.init_context(domain_id, args=[])
        self.node = Node("signal_feeder", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)

    def start(self, demos: Path) -> None:
        tmp = self.tmp
        for signame in SIGNALS:
            ns = f"/{signame.lower()}"
            for kind in KINDS:
                params = write_params(tmp / f"{kind}_{signame}.yaml",
                                      {"/**": signal_node_params(kind, ns, tmp, demos)})
                self.procs[(kind, signame)] = NodeProcess(kind, params, tmp / f"{kind}_{signame}.log",
                                                          "-r", f"__ns:={ns}")
                self.procs[(kind, signame)].check_pid()

    def feed_learners(self, demos: Path) -> None:
        """Demonstrations, then one batch that ends warm-up: each learner is then in a long burst."""
        from opolo_ros.data.demos import load_episodes

        episodes = load_episodes(demos)
        rng = np.random.default_rng(0)
        obs = rng.normal(0, 0.1, (WARMUP + 1, 4)).astype(np.float32)
        batch = m.replay_to_msg(obs[:-1], rng.uniform(-3, 3, (WARMUP, 1)), obs[1:], np.ones(WARMUP),
                                np.zeros(WARMUP), np.zeros(WARMUP), seq=0, source=1)
        policies: dict[str, bytes] = {}
        replay_pubs = {}
        for signame in SIGNALS:
            ns = f"/{signame.lower()}"
            demo_pub = self.node.create_publisher(Float32MultiArray, f"{ns}/opolo/demonstrations",
                                                  qos_for("demonstrations"))
            for k, ep in enumerate(episodes):
                demo_pub.publish(m.demonstration_to_msg(ep.obs, ep.ret, k))
            self.node.create_subscription(UInt8MultiArray, f"{ns}/opolo/policy",
                                          lambda msg, s=signame: policies.setdefault(s, msg.data),
                                          qos_for("policy"))
            replay_pub = self.node.create_publisher(Float32MultiArray, f"{ns}/opolo/replay",
                                                    qos_for("replay"))
            assert spin_until(self.executor, lambda p=replay_pub: p.get_subscription_count() > 0, 60.0)
            replay_pub.publish(batch)
            replay_pubs[signame] = replay_pub
        sent = [time.monotonic()]

        def every_learner_has_a_policy() -> bool:
            # Our writer sees the learner's reader before that reader has matched our writer (it is
            # in another process, so linked() cannot tell): a batch sent in between is dropped.
            # Send it again to a learner still silent; it skips a batch it has (same source, seq).
            if time.monotonic() - sent[0] > 2.0:
                for signame, pub in replay_pubs.items():
                    if signame not in policies:
                        pub.publish(batch)
                sent[0] = time.monotonic()
            return len(policies) == len(SIGNALS)

        assert spin_until(self.executor, every_learner_has_a_policy, 60.0), "no learner policy"

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 90.0
        for (kind, signame), proc in self.procs.items():
            while READY[kind] not in proc.output():
                assert proc.alive(), f"{kind} ({signame}) died:\n{proc.output()[-2000:]}"
                assert time.monotonic() < deadline, f"{kind} ({signame}) not ready:\n{proc.output()}"
                self.executor.spin_once(timeout_sec=0.05)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.alive():
                proc.proc.kill()
                proc.proc.wait(timeout=10.0)
        from opolo_ros.ros import runtime

        runtime.shutdown(self.context, [self.node], [self.executor])


@pytest.fixture(scope="module")
def signal_targets(ros_domain_id, tmp_path_factory, demos) -> Iterator[SignalTargets]:
    targets = SignalTargets(tmp_path_factory.mktemp("signals"), ros_domain_id)
    try:
        targets.start(demos)
        targets.wait_ready()
        targets.feed_learners(demos)
        time.sleep(1.0)  # the learners are now inside their burst of BURST critic steps
        yield targets
    finally:
        targets.close()


@pytest.mark.parametrize("signame", SIGNALS)
@pytest.mark.parametrize("kind", KINDS)
def test_node_stops_within_2s_on_signal(signal_targets, kind, signame):
    """SIGINT/SIGTERM: exit status 0 within 2 s, nothing left running; the learner checkpoints the
    exact point of its burst."""
    proc = signal_targets.procs[(kind, signame)]
    assert proc.alive(), proc.output()[-3000:]
    children = children_of(proc.pid)
    elapsed = proc.stop(SIGNALS[signame])
    output = proc.output()
    print(f"{kind} {signame}: exit {proc.proc.returncode} after {elapsed:.2f} s")
    assert proc.proc.returncode == 0 and "Traceback" not in output, output[-3000:]
    assert elapsed < EXIT_LIMIT_S, f"{kind} took {elapsed:.2f} s to exit on {signame}"
    assert survivors(children) == []
    if kind == "learner":
        state = load_checkpoint(signal_targets.tmp / signame.lower() / "run" / "checkpoint.pt")
        assert state["step"] == WARMUP and 0 < state["pending"]["critic"] < BURST, state["pending"]
        assert f"stopped at {WARMUP} transitions; checkpoint written" in output


@pytest.mark.parametrize("signame", SIGNALS)
def test_launch_stops_within_2s_on_signal(tmp_path, demos, ros_domain_id, signame):
    """`opolo-ros launch sim_train` (all nodes in one process): a signal -> checkpoint, exit 130."""
    sim_train_specs(tmp_path, demos)  # writes the test-sized task.yaml
    params = tmp_path / "task.yaml"
    run = tmp_path / "run"
    command = [str(Path(sys.executable).parent / "opolo-ros"), "launch", "sim_train",
               f"params_file:={params}", f"demos:={demos}", f"run_dir:={run}", "total_steps:=100000"]
    with open(tmp_path / "launch.log", "wb") as log:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        deadline = time.monotonic() + 90.0
        while "4 demonstrations" not in (text := (tmp_path / "launch.log").read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, text[-3000:]
            time.sleep(0.1)
        time.sleep(1.0)  # training
        children = children_of(proc.pid)
        start = time.monotonic()
        proc.send_signal(SIGNALS[signame])
        proc.wait(timeout=30.0)
        elapsed = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10.0)
    text = (tmp_path / "launch.log").read_text()
    print(f"opolo-ros launch sim_train {signame}: exit {proc.returncode} after {elapsed:.2f} s")
    assert proc.returncode == 130 and "Traceback" not in text, text[-3000:]
    assert elapsed < EXIT_LIMIT_S, f"took {elapsed:.2f} s"
    assert "checkpoint written" in text and (run / "checkpoint.pt").is_file()
    assert survivors(children) == []


# ------------------------------------------------------------------------------ in one process

def test_nodes_leave_no_threads_behind(tmp_path, demos, ros_domain_id):
    """Closing a graph (what SIGINT ends with) joins every Python thread the nodes started."""
    specs = sim_train_specs(tmp_path, demos, total_steps="100000")
    before = set(threading.enumerate())
    with GraphRunner(list(specs.values()), ros_domain_id) as graph:
        learner = graph.nodes["learner"]
        assert graph.spin_until(lambda: learner.trainer.step >= 120, timeout_s=60.0)
        assert len(set(threading.enumerate()) - before) >= 2  # the learner's worker, the actor's loader
        graph.stop()
    left = [t.name for t in set(threading.enumerate()) - before]
    assert not left, left


# ------------------------------------------------------------------------- exact resume, in process

RESUME_BATCH, RESUME_TOTAL = 40, 120


def resume_learner_spec(run_dir: Path) -> NodeSpec:
    """A learner with a burst of 200 critic steps every 40 transitions, a checkpoint every 40, and
    the fsynced journal."""
    schedule = {**LEARNER["schedule"], "warmup_steps": RESUME_BATCH, "train_freq": RESUME_BATCH,
                "gradient_steps": 200, "disc_freq": RESUME_BATCH, "inverse_freq": RESUME_BATCH}
    params = {**LEARNER, "schedule": schedule, "total_steps": RESUME_TOTAL, "checkpoint_every": RESUME_BATCH,
              "policy_every": RESUME_BATCH, "run_dir": str(run_dir), "num_demos": 4, "journal_fsync": True}
    return NodeSpec("learner", "learner", parameters=flatten(params), exit_ends_launch=True)


def publish_random_demos(ros_node, graph, rng: np.random.Generator) -> list:
    """4 random InvertedPendulum-sized demonstrations on /opolo/demonstrations from a node of its own,
    once the graph's learner listens; the executors to spin (that node's and the graph's)."""
    from opolo_ros.ros.runtime import spin_until

    node, executor = ros_node("demo_publisher")
    demo_pub = node.create_publisher(Float32MultiArray, "/opolo/demonstrations", qos_for("demonstrations"))
    both = [executor, graph.executor]
    assert spin_until(both, lambda: demo_pub.get_subscription_count() > 0, 20.0)
    for k in range(4):
        demo_pub.publish(m.demonstration_to_msg(rng.normal(size=(30, 4)), 1.0, k))
    return both


def replay_batches() -> list[Float32MultiArray]:
    rng = np.random.default_rng(3)
    n = RESUME_TOTAL
    obs = rng.normal(0, 0.2, (n + 1, 4)).astype(np.float32)
    ends = (np.arange(n) % 30) == 29
    return [m.replay_to_msg(obs[i:i + RESUME_BATCH], rng.uniform(-3, 3, (RESUME_BATCH, 1)),
                            obs[i + 1:i + RESUME_BATCH + 1], rng.normal(size=RESUME_BATCH),
                            ends[i:i + RESUME_BATCH], np.zeros(RESUME_BATCH), seq=k, source=9)
            for k, i in enumerate(range(0, n, RESUME_BATCH))]


def run_learner(run_dir: Path, domain_id: int, demos: Path, batches: list, until: Callable | None = None,
                crash: bool = False):
    """Feed demonstrations and `batches` to a learner; stop when `until(learner)` (a crash: no
    checkpoint when stopping), else run to the end. Returns the learner's final actor weights."""
    from opolo_ros.data.demos import load_episodes

    with GraphRunner([resume_learner_spec(run_dir)], domain_id) as graph:
        learner = graph.nodes["learner"]
        for k, ep in enumerate(load_episodes(demos)):
            learner._on_demo(m.demonstration_to_msg(ep.obs, ep.ret, k))
        for msg in batches:
            learner._on_replay(msg)
        if until is not None:
            assert graph.spin_until(lambda: until(learner), timeout_s=60.0)
            if crash:
                # as kill -9: the state since the last checkpoint is lost
                learner.trainer.save = lambda light=False: None
            graph.stop()
            return learner
        assert graph.spin_until(graph.done, timeout_s=90.0)
        assert learner.error is None, learner.error
        return learner


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, demos, ros_domain_id) -> tuple[list[np.ndarray], dict]:
    learner = run_learner(tmp_path_factory.mktemp("whole"), ros_domain_id, demos, replay_batches())
    weights = [p.detach().numpy().copy() for p in learner.trainer.learner.actor.parameters()]
    return weights, learner.trainer.learner.state_dict()["counters"]


@pytest.mark.parametrize("how", ["stop_mid_burst", "crash_after_checkpoint"])
def test_resumed_learner_matches_an_uninterrupted_one(tmp_path, demos, ros_domain_id, uninterrupted, how):
    """A stop in the middle of a burst (the rest of the burst is checkpointed), or a crash 20
    transitions after a checkpoint (the journal has them): the resumed run ends with the very same
    networks as a run that never stopped."""
    batches = replay_batches()
    if how == "stop_mid_burst":  # inside the burst of step 80
        stopped = run_learner(tmp_path, ros_domain_id, demos, batches[:2],
                              until=lambda lr: lr.trainer.step == 80 and lr.trainer.pending is not None
                              and 0 < lr.trainer.pending.critic < 150)
        state = load_checkpoint(tmp_path / "checkpoint.pt")
        assert state["step"] == 80 and 0 < state["pending"]["critic"] < 150
    else:  # 20 transitions after the checkpoint at 40
        stopped = run_learner(tmp_path, ros_domain_id, demos, batches[:2],
                              until=lambda lr: lr.trainer.step >= 60, crash=True)
        assert load_checkpoint(tmp_path / "checkpoint.pt")["step"] == 40
    assert stopped.error is None
    # The bridge re-sends batch 1 (a duplicate now) and goes on with batch 2.
    resumed = run_learner(tmp_path, ros_domain_id, demos, batches[1:])
    weights, counters = uninterrupted
    for a, b in zip(weights, resumed.trainer.learner.actor.parameters()):
        np.testing.assert_array_equal(a, b.detach().numpy())
    assert resumed.trainer.learner.state_dict()["counters"] == counters
    assert resumed.duplicates == 1 and resumed.trainer.step == RESUME_TOTAL


def test_learner_takes_a_bridges_batches_in_seq_order(tmp_path, demos, ros_domain_id, uninterrupted):
    """Batch 2 arrives before batch 1 (re-sent after a restart): it waits for batch 1, and the run
    ends with the very networks of the run that got them in order."""
    batches = replay_batches()
    learner = run_learner(tmp_path, ros_domain_id, demos, [batches[0], batches[2], batches[1]])
    weights, counters = uninterrupted
    for a, b in zip(weights, learner.trainer.learner.actor.parameters()):
        np.testing.assert_array_equal(a, b.detach().numpy())
    assert learner.trainer.learner.state_dict()["counters"] == counters


def test_a_restarted_bridge_without_flow_control_continues_its_counts(tmp_path, demos, ros_domain_id):
    """A realtime bridge (no flow control: it waits for no learner) stopped and started again with
    the same name and seed: its new batch 0 is bit-identical to its first one. It hears the
    running learner's acknowledgement before its first step and continues the count, so the learner
    takes every new batch (before: batch 0 was taken for a re-send and every batch up to the old
    count dropped as one)."""
    from opolo_ros.data.demos import load_episodes

    schedule = {**LEARNER["schedule"], "warmup_steps": 10**6}  # consume only: no update in the way
    learner_spec = NodeSpec("learner", "learner", parameters=flatten({
        **LEARNER, "schedule": schedule, "total_steps": 10**6, "run_dir": str(tmp_path / "run"),
        "num_demos": 4}))
    bridge_spec = NodeSpec("sim_bridge", "sim_bridge", parameters={
        "env_id": ENV, "mode": "realtime", "rate_hz": 400.0, "replay_batch": 10, "seed": 5,
        "joint_states_topic": ""})
    with GraphRunner([learner_spec], ros_domain_id) as learning:
        learner = learning.nodes["learner"]
        for k, ep in enumerate(load_episodes(demos)):
            learner._on_demo(m.demonstration_to_msg(ep.obs, ep.ret, k))

        def consumed(bridge) -> tuple[int, int]:
            ack = learner.trainer.acks.get(bridge.source) if learner.trainer is not None else None
            return (ack.seq, ack.transitions) if ack is not None else (-1, 0)

        def run_bridge(until: Callable[[object], bool]) -> tuple[int, int, int]:
            """(transitions this bridge published, its count at the end, the learner's count of it)"""
            with GraphRunner([bridge_spec], ros_domain_id) as simulating:
                bridge = simulating.nodes["sim_bridge"]
                published, publish = [], bridge.replay_pub.publish

                def counted(msg) -> None:
                    published.append(msg.layout.dim[0].size)  # the batch's transitions
                    publish(msg)

                bridge.replay_pub.publish = counted
                assert spin_until([learning.executor, simulating.executor], lambda: until(bridge), 30.0)
                simulating.close()  # no more batches; the learner takes the last ones
                seq = bridge.seq
                assert spin_until([learning.executor], lambda: consumed(bridge)[0] == seq - 1, 10.0), \
                    (consumed(bridge), seq)
                spin_until([learning.executor], lambda: False, 0.3)  # the worker stores what it acknowledged
                return sum(published), bridge.sent - len(bridge._pending), consumed(bridge)[1]

        made, sent, taken = run_bridge(lambda b: b.seq >= 20)
        assert made == taken == sent == len(learner.trainer.replay) >= 200
        made_again, sent_again, taken_again = run_bridge(lambda b: b.seq >= 30)
        stored = len(learner.trainer.replay)
    assert taken_again == sent_again == made + made_again  # the count went on
    assert stored == made + made_again, "batches of the restarted bridge were dropped as re-sends"


def test_a_node_started_with_sigint_ignored_keeps_a_sigint_that_comes_while_it_starts(ros_domain_id):
    """A script's background job (`sim_bridge ... &`) starts with SIGINT ignored; a SIGINT sent while
    it imported was lost, and the node ran on for good (a probe's bridges ran 10 minutes)."""
    argv = ["sim_bridge", "--ros-args", "-p", f"env_id:={ENV}", "-p", "mode:=realtime",
            "-p", "publish_replay:=false"]
    command = [sys.executable, "-c", "import signal, runpy, sys; "
               f"signal.signal(signal.SIGINT, signal.SIG_IGN); sys.argv = {argv!r}; "
               "runpy.run_module('opolo_ros.nodes.sim_bridge', run_name='__main__')"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, ROS_DOMAIN_ID=str(ros_domain_id)))
    try:
        time.sleep(0.3)  # importing
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60.0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10.0)
    assert proc.returncode == 0 and "Traceback" not in output, output[-3000:]


def test_a_learner_whose_files_fail_to_close_still_ends(tmp_path, demos, ros_domain_id):
    """A full disk: the stop checkpoint fails, then closing the TensorBoard writer raises its failed
    write. The learner used to wait for ever (its `finished` never set, the run folder's lock held,
    the launch hanging until its stop timeout); now it ends at once with the error."""
    import errno

    from opolo_ros.data.demos import load_episodes

    with GraphRunner([resume_learner_spec(tmp_path)], ros_domain_id) as graph:
        learner = graph.nodes["learner"]
        for k, ep in enumerate(load_episodes(demos)):
            learner._on_demo(m.demonstration_to_msg(ep.obs, ep.ret, k))
        for msg in replay_batches()[:1]:
            learner._on_replay(msg)
        assert graph.spin_until(lambda: learner.trainer.step >= 20, timeout_s=60.0)

        def disk_full(*args, **kwargs) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        learner.trainer.save = disk_full
        learner.trainer.logger.close = disk_full
        started = time.monotonic()
        graph.stop(timeout_s=10.0)
        assert learner.finished.is_set() and time.monotonic() - started < 5.0
        assert isinstance(learner.error, OSError) and not learner.trainer._lock.held


def test_batches_with_consumed_numbers_and_other_rows_are_dropped_and_then_called_a_second_bridge(
        tmp_path, demos, ros_domain_id, capfd, monkeypatch):
    """A few batches whose numbers were consumed with other rows come from a bridge restarted while
    its earlier batches were queued here: dropped, said at info level. When they go on, a second
    bridge of the same id publishes (two trainings on one domain and machine): an error, once."""
    from opolo_ros.data.demos import load_episodes
    from opolo_ros.nodes import learner as learner_module

    monkeypatch.setattr(learner_module, "COLLISIONS_FOR_ERROR", 3)
    batches = replay_batches()
    other = [m.replay_to_msg(*(np.asarray(x) for x in _rows_of(b, scale=2.0)), seq=k, source=9)
             for k, b in enumerate(batches)]
    capfd.readouterr()
    with GraphRunner([resume_learner_spec(tmp_path)], ros_domain_id) as graph:
        learner = graph.nodes["learner"]
        for k, ep in enumerate(load_episodes(demos)):
            learner._on_demo(m.demonstration_to_msg(ep.obs, ep.ret, k))
        for msg in batches[:2]:  # (not all: the run would end, and take no more)
            learner._on_replay(msg)
        consumed = 2 * RESUME_BATCH
        assert graph.spin_until(lambda: learner.trainer.step == consumed, timeout_s=60.0)
        learner._on_replay(other[1])  # one: a restarted bridge's first batch, maybe
        assert graph.spin_until(lambda: learner.collisions.get(9) == 1, timeout_s=60.0)
        assert "came with numbers consumed" not in capfd.readouterr().err
        learner._on_replay(batches[1])  # a re-send: a duplicate, no collision
        learner._on_replay(other[1])  # (batch 0 with other rows is a bridge counting anew: consumed)
        learner._on_replay(other[1])
        assert graph.spin_until(lambda: learner.collisions.get(9) == 3, timeout_s=60.0)
        assert learner.duplicates == 4
        assert learner.trainer.step == consumed  # none of them consumed
    err = capfd.readouterr().err
    assert err.count("3 replay batches of source 9 came with numbers consumed with other transitions: a "
                     "second bridge with this source id") == 1, err


def _rows_of(msg, scale: float) -> tuple:
    """A replay message's arrays, the observations scaled: another bridge's batch of that number."""
    batch = m.msg_to_replay(msg)
    return (batch.obs * scale, batch.action, batch.next_obs * scale, batch.reward, batch.terminated,
            batch.truncated)
