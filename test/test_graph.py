"""The training graph over real DDS (sim_bridge + actor + learner + demo_player, isolated domain).

The graphs are built by ``launch/sim_train.launch.py``'s ``describe()`` (the description
``ros2 launch`` and ``opolo-ros launch`` both use) and composed in one process by
:class:`GraphRunner`, one rclpy context and executor, as ``opolo-ros launch`` runs them.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("rclpy")

from opolo_ros.algo.config import deep_merge, load_run_config  # noqa: E402
from opolo_ros.data.bags import write_demonstrations  # noqa: E402
from opolo_ros.launch_runner import GraphRunner, load_launch_module  # noqa: E402
from opolo_ros.sim.rollout import rollout_episodes  # noqa: E402
from opolo_ros.train.checkpoint import CheckpointError  # noqa: E402
from opolo_ros.train.direct import DirectTrainer  # noqa: E402
from opolo_ros.train.logger import RunLogger  # noqa: E402
from opolo_ros.train.runner import make_schedule  # noqa: E402

pytestmark = pytest.mark.ros
ROOT = Path(__file__).resolve().parents[1]
SHIPPED_DEMOS = ROOT / "models" / "demos" / "InvertedPendulum-v5"
PD_GAINS = np.array([2.0, 20.0, 1.0, 1.0])  # a stabilising state feedback for InvertedPendulum-v5


def pd_expert(obs: np.ndarray) -> np.ndarray:
    return np.clip(PD_GAINS @ obs, -3.0, 3.0).reshape(1)


@pytest.fixture(scope="module")
def demos(tmp_path_factory) -> Path:
    """The shipped expert bag, or (before it ships) a bag of a hand-written stabilising controller."""
    if (SHIPPED_DEMOS / "metadata.yaml").is_file():
        return SHIPPED_DEMOS
    episodes = rollout_episodes(pd_expert, "InvertedPendulum-v5", 4, seed=100)
    return write_demonstrations(tmp_path_factory.mktemp("demos") / "pd", episodes,
                                metadata={"env_id": "InvertedPendulum-v5", "expert": "pd"})


def params_file(tmp_path: Path, learner: dict, bridge: dict | None = None) -> Path:
    """The shipped InvertedPendulum parameter file with test-sized learner settings on top."""
    data = yaml.safe_load((ROOT / "config" / "inverted_pendulum.yaml").read_text())

    deep_merge(data["learner"]["ros__parameters"], {
        "progress": False, "torch_threads": 1, "checkpoint_every": 0, "eval_every": 0,
        "eval_episodes": 5, **learner})
    if bridge:
        data.setdefault("sim_bridge", {"ros__parameters": {}})
        deep_merge(data["sim_bridge"]["ros__parameters"], bridge)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def sim_train(tmp_path: Path, demos: Path, learner: dict, bridge: dict | None = None, **args: str):
    module = load_launch_module(ROOT / "launch" / "sim_train.launch.py")
    values = {a.name: a.default for a in module.ARGUMENTS}
    values.update(params_file=str(params_file(tmp_path, learner, bridge)), demos=str(demos),
                  run_dir=str(tmp_path / "run"), **args)
    return module.describe(values)


def test_graph_learns_inverted_pendulum(tmp_path, demos, ros_domain_id):
    specs = sim_train(tmp_path, demos, {"opolo": {"net": {"hidden": [64, 64]}}, "eval_every": 1000},
                      total_steps="5000", seed="0")
    start = time.monotonic()
    with GraphRunner(specs, ros_domain_id) as graph:
        assert graph.spin_until(graph.done, timeout_s=240.0), "the learner did not finish in time"
        learner, bridge = graph.nodes["learner"], graph.nodes["sim_bridge"]
        assert learner.error is None, learner.error
        result = learner.result
        assert bridge.republished == 0  # no control step was lost on the way
    elapsed = time.monotonic() - start
    print(f"graph: 5000 steps in {elapsed:.0f} s, eval return {result.eval_mean:.1f} "
          f"(random {result.random_return:.1f}, expert {result.expert_return:.1f})")
    # Random actions balance the pole for ~5-10 steps; the learned policy for about ten times longer
    # after 5000 steps (the direct loop: 137 at this budget and seed), and it keeps improving.
    evaluations = [row["return_mean"] for row in RunLogger.read_evaluations(tmp_path / "run" / "eval.csv")]
    print("evaluations every 1000 steps:", [round(x) for x in evaluations])
    assert result.random_return < 30.0
    assert result.eval_mean >= 75.0, result
    assert max(evaluations) >= 100.0
    run = tmp_path / "run"
    for name in ("policy.onnx", "eval.csv", "learning_curve.png", "config.yaml", "checkpoint.pt",
                 "learner_params.yaml"):
        assert (run / name).is_file(), name
    assert any((run / "tb").iterdir())
    from opolo_ros.export.onnx_policy import load_policy

    meta = load_policy(run / "policy.onnx").metadata  # env steps, as the direct loop writes them
    assert meta.training_step == meta.version == 5000, meta  # (the learner wrote its gradient steps)


def test_two_bridges_in_two_namespaces_feed_one_learner(tmp_path, demos, ros_domain_id):
    """Scaling out (design: several bridges and actors, on other hosts or in namespaces, feed one
    learner's /opolo/replay): a second bridge + actor pair in namespace robot2, another seed. The
    learner takes the transitions of both sources, each bridge under flow control on its own
    acknowledgements, and ends at total_steps."""
    import dataclasses

    small = [32, 32]
    learner_cfg = {"opolo": {"net": {"hidden": small, "disc_hidden": small, "inverse_hidden": small}},
                   "schedule": {"warmup_steps": 200, "inverse_pretrain_steps": 20, "batch_size": 32}}
    specs = sim_train(tmp_path, demos, learner_cfg, {"replay_batch": 10}, total_steps="600", max_ahead="50",
                      seed="3")
    pair = [dataclasses.replace(s, namespace="robot2", parameters={**s.parameters, "seed": 4})
            for s in specs if s.executable in ("sim_bridge", "actor")]
    with GraphRunner(specs + pair, ros_domain_id) as graph:
        assert graph.spin_until(graph.done, timeout_s=120.0), "the learner did not finish in time"
        learner = graph.nodes["learner"]
        bridges = [graph.nodes[key] for key in ("/sim_bridge", "robot2/sim_bridge")]
        assert learner.error is None, learner.error
        taken = {source: ack.transitions for source, ack in learner.trainer.acks.items()}
        steps = learner.trainer.step
    assert sorted(taken) == sorted(b.source for b in bridges)  # two sources, one per bridge
    assert steps == sum(taken.values()) == 600 and min(taken.values()) >= 100, taken
    for bridge in bridges:  # flow control held for each on its own acknowledgements
        assert bridge.acked <= taken[bridge.source] and bridge.sent - bridge.acked <= 50 + 10


def test_bridge_ahead_waits_for_learner(tmp_path, demos, ros_domain_id):
    """Flow control: the bridge never runs more than max_ahead ahead; the UTD ratio holds within 5%.

    Two critic steps per env step make the learner the slow side, so the bridge must wait.
    """
    max_ahead, total = 10, 700
    small = [32, 32]
    learner_cfg = {"opolo": {"net": {"hidden": small, "disc_hidden": small, "inverse_hidden": small}},
                   "schedule": {"warmup_steps": 100, "inverse_pretrain_steps": 20, "train_freq": 1,
                                "gradient_steps": 2, "batch_size": 32}}
    specs = sim_train(tmp_path, demos, learner_cfg, {"replay_batch": 5}, total_steps=str(total),
                      max_ahead=str(max_ahead), policy_every="100", seed="3")
    samples = []
    with GraphRunner(specs, ros_domain_id) as graph:
        learner, bridge = graph.nodes["learner"], graph.nodes["sim_bridge"]
        schedule = learner.trainer.schedule

        def record() -> bool:
            samples.append((bridge.sent, bridge.acked, learner.trainer.learner.critic_steps))
            return graph.done()

        assert graph.spin_until(record, timeout_s=150.0)
        assert learner.error is None, learner.error
        gradient_steps = learner.trainer.learner.critic_steps
        waits = bridge.waits
        counters = {k: getattr(learner.trainer.learner, k) for k in learner.trainer.learner.counter_names}
    sent, acked, grads = (np.array(x) for x in zip(*samples))
    assert waits > 0, "the bridge never had to wait: the test did not exercise flow control"
    assert (sent - acked).max() <= max_ahead + 1  # + the step taken once the condition held
    due = np.array([schedule.critic_steps_due(int(n)) for n in sent])
    late = sent >= 400
    ratio = grads[late] / due[late]
    assert ratio.min() >= 0.95 and ratio.max() <= 1.0, (ratio.min(), ratio.max())
    assert gradient_steps == schedule.critic_steps_due(total)

    # The graph ran exactly the direct loop's schedule (same update counts of every kind).
    cfg = load_run_config(tmp_path / "params.yaml", {"demos": str(demos), "total_steps": total, "seed": 3,
                                                     "run_dir": str(tmp_path / "direct")})
    direct = DirectTrainer(cfg)
    for _ in range(total):
        direct.env_step()
    assert counters == {k: getattr(direct.learner, k) for k in direct.learner.counter_names}
    assert make_schedule(cfg).critic_steps_due(total) == gradient_steps


def test_lockstep_run_is_reproducible(tmp_path, demos, ros_domain_id):
    """Same seed, same graph: the same policy, although the bridge runs ahead of the learner."""
    tiny = [16, 16]
    learner_cfg = {"opolo": {"net": {"hidden": tiny, "disc_hidden": tiny, "inverse_hidden": tiny}},
                   "schedule": {"warmup_steps": 60, "inverse_pretrain_steps": 10, "disc_freq": 20,
                                "inverse_freq": 20, "batch_size": 16}}
    weights = []
    for k in range(2):
        run = tmp_path / f"r{k}"
        run.mkdir()
        specs = sim_train(run, demos, learner_cfg, total_steps="300", max_ahead="15", policy_every="50",
                          seed="5")
        with GraphRunner(specs, ros_domain_id) as graph:
            assert graph.spin_until(graph.done, timeout_s=90.0)
            learner, actor = graph.nodes["learner"], graph.nodes["actor"]
            assert learner.error is None, learner.error
            weights.append([p.detach().clone() for p in learner.trainer.learner.actor.parameters()])
            # policy version V served steps V + max_ahead ... V + max_ahead + 49
            assert actor.actions_by_version[50] == 50
    for a, b in zip(*weights):
        assert np.array_equal(a.numpy(), b.numpy())
    assert not math.isnan(float(weights[0][0].sum()))


def test_diverged_steps_keep_every_count_in_step(tmp_path, demos, ros_domain_id):
    """A step where the simulation blows up is a void replay step: the learner counts it (its schedule
    stays the environment's, as in the direct loop) but does not store it, and the actor, which
    counts observations, stays in step with the bridge, so policy swaps still land on their step."""
    tiny = [16, 16]
    learner_cfg = {"opolo": {"net": {"hidden": tiny, "disc_hidden": tiny, "inverse_hidden": tiny}},
                   "schedule": {"warmup_steps": 60, "inverse_pretrain_steps": 10, "disc_freq": 20,
                                "inverse_freq": 20, "batch_size": 16}}
    total, every = 300, 23
    specs = sim_train(tmp_path, demos, learner_cfg, total_steps=str(total), max_ahead="15",
                      policy_every="50", seed="5")
    with GraphRunner(specs, ros_domain_id) as graph:
        learner, actor, bridge = graph.nodes["learner"], graph.nodes["actor"], graph.nodes["sim_bridge"]
        real_step, calls = bridge.env.step, [0]

        def blowing_up_step(action):  # what DivergenceGuard reports for a blown-up MuJoCo state
            obs, reward, terminated, truncated, info = real_step(action)
            calls[0] += 1
            if calls[0] % every:
                return obs, reward, terminated, truncated, info
            return np.full_like(obs, np.nan), math.nan, False, True, {**info, "diverged": True}

        bridge.env.step = blowing_up_step
        assert graph.spin_until(graph.done, timeout_s=90.0)
        assert learner.error is None, learner.error
        void = total // every
        assert bridge.diverged >= void
        assert learner.trainer.step == total and len(learner.trainer.replay) == total - void
        assert learner.trainer.void_steps == void  # said in the run's last line ("... void ...")
        assert np.isfinite(learner.trainer.replay.next_obs[:total - void].numpy()).all()
        assert actor.steps - bridge.sent in (0, 1)  # the observation out now may be answered already
        assert actor.actions_by_version[50] == 50  # version V serves steps V + 15 ... V + 64, as without


def test_stopped_learner_checkpoints_and_the_graph_resumes(tmp_path, demos, ros_domain_id):
    """Stop (what SIGINT does in opolo-ros launch) -> checkpoint; a new graph continues the schedule."""
    tiny = [16, 16]
    learner_cfg = {"opolo": {"net": {"hidden": tiny, "disc_hidden": tiny, "inverse_hidden": tiny}},
                   "schedule": {"warmup_steps": 60, "inverse_pretrain_steps": 10, "batch_size": 16}}
    specs = sim_train(tmp_path, demos, learner_cfg, total_steps="400", max_ahead="10", policy_every="50")
    with GraphRunner(specs, ros_domain_id) as graph:
        learner = graph.nodes["learner"]
        assert graph.spin_until(lambda: learner.trainer.step >= 150, timeout_s=60.0)
        graph.stop()
        stopped_at = learner.trainer.step
        assert learner.finished.is_set() and learner.error is None and learner.result is None
    assert 150 <= stopped_at < 400
    assert (tmp_path / "run" / "checkpoint.pt").is_file()
    with GraphRunner(specs, ros_domain_id) as graph:
        learner, bridge = graph.nodes["learner"], graph.nodes["sim_bridge"]
        assert graph.spin_until(lambda: learner.trainer.step > 0, timeout_s=30.0)
        assert learner.trainer.step >= stopped_at  # restored, not restarted
        assert graph.spin_until(graph.done, timeout_s=60.0)
        assert learner.error is None and learner.result.env_steps == 400
        assert bridge.sent >= 400 - stopped_at  # the bridge continued the counts from the acknowledgement
        assert learner.trainer.learner.critic_steps == learner.trainer.schedule.critic_steps_due(400)
    # The same run folder with other network sizes: refused in one line; the folder keeps its config.
    wider = [24, 24]
    changed = sim_train(tmp_path, demos, {**learner_cfg, "opolo": {"net": {
        "hidden": wider, "disc_hidden": tiny, "inverse_hidden": tiny}}}, total_steps="400", max_ahead="10")
    before = (tmp_path / "run" / "config.yaml").read_text()
    with GraphRunner(changed, ros_domain_id) as graph:
        learner = graph.nodes["learner"]
        assert graph.spin_until(learner.finished.is_set, timeout_s=60.0)
    assert isinstance(learner.error, CheckpointError), learner.error
    assert "opolo.net.hidden: [16, 16] -> [24, 24]" in str(learner.error)
    assert (tmp_path / "run" / "config.yaml").read_text() == before


def test_opolo_ros_launch_command_stops_cleanly_and_resumes(tmp_path, demos, ros_domain_id):
    """`opolo-ros launch sim_train ...` in a subprocess: SIGINT -> checkpoint, exit 130; then it resumes
    and ends with the evaluation, the normalised score and the run folder."""
    import os
    import signal
    import subprocess
    import sys

    tiny = [16, 16]
    params = params_file(tmp_path, {"opolo": {"net": {"hidden": tiny, "disc_hidden": tiny,
                                                      "inverse_hidden": tiny}},
                                    "schedule": {"warmup_steps": 60, "inverse_pretrain_steps": 10,
                                                 "batch_size": 16}})
    run = tmp_path / "run"
    command = [sys.executable, "-m", "opolo_ros.cli", "launch", "sim_train", f"params_file:={params}",
               f"demos:={demos}", f"run_dir:={run}", "seed:=2"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([*command, "total_steps:=1000000"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60.0
        while not (run / "learner_params.yaml").is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3.0)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60.0)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output[-2000:]
    assert (run / "checkpoint.pt").is_file() and (run / "launch_params.yaml").is_file()

    done = subprocess.run([*command, "total_steps:=400"], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=120.0)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "resumed from" in done.stderr
    assert "evaluation return:" in done.stdout and "normalised score:" in done.stdout
    assert f"run folder: {run}" in done.stdout
    assert (run / "learning_curve.png").is_file()
