"""learner: OPOLO on the replay stream and the demonstrations, in a worker thread.

Subscribes ``/opolo/demonstrations`` and ``/opolo/replay``; callbacks only enqueue. The worker:

1. waits for the demonstrations (``num_demos`` episodes, or fewer once none has arrived for
   ``demo_settle_s``), builds the expert dataset, and resumes from ``<run_dir>/checkpoint.pt``
   when there is one;
2. exports its current policy and publishes it on ``/opolo/policy`` (version = transitions
   consumed, 0 for a new run; transient local), so actors have a model before the first step;
3. takes the transitions in arrival order, one at a time: add to the replay buffer, consume
   transition n, run ``schedule.plan(n)`` through :class:`UpdateRunner` -- the direct loop's
   code path, so the graph runs exactly the direct loop's updates -- then per n the direct loop's
   evaluation (``eval_every``), checkpoint (``checkpoint_every``) and, every ``policy_every``
   transitions, an ONNX export to ``<run_dir>/policy.onnx`` that is also published;
4. after each replay batch publishes ``/opolo/learner_progress`` (critic gradient steps, transitions
   consumed, per-source acknowledgement) -- the flow control of the sim bridges;
5. after ``total_steps`` transitions: final evaluation, checkpoint, export, learning-curve PNG;
   then the node is finished (``opolo-ros launch`` and ``ros2 launch`` end the run with it).

Crashes and stops
    Every replay batch is appended to ``<run_dir>/replay_journal.bin``
    (:mod:`opolo_ros.data.journal`) before it is consumed, so before it is acknowledged (with
    ``journal_fsync`` also forced to the disk first); each checkpoint truncates the journal. A
    learner killed at any moment (``kill -9``) and started again restores the checkpoint (step
    count, networks, optimisers, normalisers, replay buffer, random generators) and consumes the
    journalled transitions again, with their updates: no acknowledged transition is lost and the
    schedule continues where it was. A batch whose ``(source, seq)`` was consumed already (a
    bridge re-sends unacknowledged batches when the learner comes back) is dropped as a duplicate.

    A stop request (SIGINT/SIGTERM, :meth:`Learner.request_stop`) is honoured between two gradient
    updates, also in the middle of a burst or of an evaluation: the worker checkpoints the exact
    point (the remaining updates of the current step's plan, and whether its evaluation is still
    due) and ends, so the node exits within a second or two and resumes exactly there.

Bad input
    A replay batch or demonstration that does not decode (wrong layout, dimensions of another task,
    NaN or inf anywhere) is rejected, logged (throttled) and counted in ``rejected``; nothing of
    it reaches the replay buffer or the expert data.

Every run-config key (:class:`opolo_ros.algo.config.RunConfig`, nested keys dotted, e.g.
``schedule.batch_size``) is a parameter of this node, so the ``learner`` section of a parameter
file is the same run config the direct loop (``opolo-ros train --config``) reads.

Replay actions arrive in the environment's units (what was sent to the robot); the learner maps
them to the policy's [-1, 1] units with the task's action bounds.
"""

from __future__ import annotations

import dataclasses
import math
import queue
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from std_msgs.msg import Float32MultiArray, Int64MultiArray, UInt8MultiArray

from opolo_ros.algo.config import RunConfig, flatten, to_dict, unflatten, update_dataclass
from opolo_ros.algo.schedule import Plan
from opolo_ros.data.demos import Episode, ExpertDataset
from opolo_ros.data.journal import JournalRecord, ReplayJournal
from opolo_ros.data.replay import ReplayBuffer
from opolo_ros.export.onnx_policy import export_policy_or_warn
from opolo_ros.nodes.common import (
    FinishableNode,
    ParameterError,
    declare,
    default_policy_every,
    run_node,
)
from opolo_ros.nodes.tasks import is_mjcf, make_task_env, max_steps_of
from opolo_ros.ros import messages as m
from opolo_ros.ros.qos import qos_for
from opolo_ros.sim.actions import ActionScaler
from opolo_ros.sim.envs import (
    add_time_feature,
    evaluate,
    normalised_score,
    random_policy_return,
)
from opolo_ros.train.checkpoint import load_checkpoint, save_checkpoint
from opolo_ros.train.direct import PolicyFn, TrainResult, seed_everything
from opolo_ros.train.logger import RunLogger
from opolo_ros.train.runner import UpdateRunner, make_learner, make_schedule


def run_config_parameters() -> dict[str, Any]:
    """Every run-config key as a (dotted) ROS parameter name -> default."""
    return flatten(to_dict(RunConfig()))


PARAMETERS: dict[str, tuple] = {
    "policy_every": (0, "export + publish the policy every this many transitions consumed; "
                        "0 = a multiple of schedule.train_freq near 250"),
    "demo_settle_s": (2.0, "start with fewer than num_demos episodes once none arrived "
                           "for this long"),
    "resume": (True, "resume from <run_dir>/checkpoint.pt when it exists"),
    "progress_period_s": (1.0, "also re-publish the learner progress this often"),
    "journal": (True, "append each replay batch to <run_dir>/replay_journal.bin before acknowledging "
                      "it, and consume the journal again after a restart (no acknowledged transition "
                      "is lost to a crash)"),
    "journal_fsync": (False, "also fsync the journal before each acknowledgement: durable against a "
                             "machine crash, not only a crash of the process (costs 6% of the steps/s "
                             "with max_ahead 50, 20% with max_ahead 0 here; BENCHMARKS.md)"),
    "replay_topic": ("/opolo/replay", "replay transitions topic"),
    "demonstrations_topic": ("/opolo/demonstrations", "state-only expert episodes topic"),
    "policy_topic": ("/opolo/policy", "ONNX policy topic (bytes + version)"),
    "progress_topic": ("/opolo/learner_progress", "learner progress topic (flow control)"),
}


PolicyCall = Callable[[np.ndarray], np.ndarray]
LOG_THROTTLE_S = 1.0


class _Interrupted(Exception):
    """A stop request arrived in the middle of a long operation (an evaluation)."""


class Learner(FinishableNode):
    def __init__(self, *, node_name: str = "learner", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self.cfg, p = self._declare_parameters()
        cfg = self.cfg
        if cfg.torch_threads > 0:
            torch.set_num_threads(cfg.torch_threads)
        seed_everything(cfg.seed)
        self.env = make_task_env(cfg.env_id, seed=cfg.seed, time_feature=cfg.time_feature)
        self.obs_dim = int(self.env.observation_space.shape[0])
        self.act_dim = int(self.env.action_space.shape[0])
        self.max_steps = max_steps_of(self.env)
        self.scaler = ActionScaler.from_space(self.env.action_space)
        self.learner = make_learner(cfg, self.obs_dim, self.act_dim)
        self.schedule = make_schedule(cfg)
        self.replay = ReplayBuffer(self.obs_dim, self.act_dim,
                                   min(cfg.schedule.buffer_size, max(cfg.total_steps, 1)), seed=cfg.seed + 2)
        self.runner: UpdateRunner | None = None
        self.run_dir = Path(cfg.run_dir)
        self.policy_every = p["policy_every"] or default_policy_every(cfg.schedule.train_freq)
        self.demo_settle = p["demo_settle_s"]
        self.resume = p["resume"]
        self.params = p

        self.step = 0  # transitions consumed (= n of schedule.plan(n))
        self.acks: dict[int, m.SourceAck] = {}
        self.rejected = {"replay": 0, "demonstration": 0}  # messages that did not decode
        self.duplicates = 0  # replay batches received again (re-sent by a bridge), dropped
        self.journal: ReplayJournal | None = None
        self._backlog: list[JournalRecord] = []  # journalled after the checkpoint: consumed first
        self._pending: Plan | None = None  # updates of self.step's plan not run yet (a stop came)
        self._periodic_due = False  # self.step's evaluation/checkpoint/export not done yet
        self._metrics: dict[str, Any] = {}
        self.episode_stats: dict[int, tuple[float, int]] = {}
        self.expert_return = math.nan
        self.random_return = math.nan
        self.result: TrainResult | None = None
        self.error: BaseException | None = None
        self.last_eval: tuple[int, float, float] = (-1, math.nan, math.nan)
        self.demos: dict[int, Episode] = {}
        self._demo_last = 0.0
        self._replay_queue: queue.Queue[Float32MultiArray] = queue.Queue()
        self._stop = threading.Event()
        self._progress_lock = threading.Lock()
        self._progress_msg: Int64MultiArray | None = None
        self._wall_offset = 0.0
        self._t0 = time.perf_counter()
        self.logger: RunLogger | None = None
        self.plot_path: Path | None = None
        self._bar = None
        self._last_log, self._last_log_t, self._last_ret = 0, time.perf_counter(), math.nan

        self.policy_pub = self.create_publisher(UInt8MultiArray, p["policy_topic"], qos_for("policy"))
        self.progress_pub = self.create_publisher(Int64MultiArray, p["progress_topic"],
                                                  qos_for("learner_progress"))
        self.create_subscription(Float32MultiArray, p["demonstrations_topic"], self._on_demo,
                                 qos_for("demonstrations"))
        self.create_subscription(Float32MultiArray, p["replay_topic"], self._on_replay, qos_for("replay"))
        self.create_timer(p["progress_period_s"], self._republish_progress)
        self._worker = threading.Thread(target=self._work, name=f"{node_name}_worker", daemon=True)
        self._worker.start()

    def _declare_parameters(self) -> tuple[RunConfig, dict[str, Any]]:
        values = {}
        for name, default in run_config_parameters().items():
            values[name] = declare(self, name, default, f"run config '{name}' "
                                   "(opolo_ros.algo.config.RunConfig; same meaning as in the direct loop)")
        try:
            cfg = update_dataclass(RunConfig(), unflatten(values))
        except ValueError as err:
            raise ParameterError(str(err)) from None
        p = {name: declare(self, name, default, desc) for name, (default, desc) in PARAMETERS.items()}
        if p["policy_every"] < 0 or p["demo_settle_s"] < 0 or p["progress_period_s"] <= 0:
            raise ParameterError("policy_every >= 0, demo_settle_s >= 0, progress_period_s > 0 required")
        return cfg, p

    # ------------------------------------------------------------------ callbacks: enqueue only
    def _on_demo(self, msg: Float32MultiArray) -> None:
        try:
            demo = m.msg_to_demonstration(msg)
            obs = add_time_feature(demo.obs, self.max_steps) if self.cfg.time_feature else demo.obs
            if obs.shape[1] != self.obs_dim:
                raise m.MessageError(f"demonstration {demo.episode}: obs_dim {demo.obs.shape[1]} "
                                     f"does not match {self.cfg.env_id}")
            episode = Episode(obs, demo.episode_return, {"episode": demo.episode})
        except ValueError as err:  # MessageError, or an Episode that fails its own checks
            self.rejected["demonstration"] += 1
            self.get_logger().error(f"rejected demonstration ({self.rejected['demonstration']} so far): "
                                    f"{err}", throttle_duration_sec=LOG_THROTTLE_S)
            return
        self.demos[demo.episode] = episode
        self._demo_last = time.monotonic()

    def _on_replay(self, msg: Float32MultiArray) -> None:
        self._replay_queue.put(msg)

    def _republish_progress(self) -> None:
        with self._progress_lock:
            msg = self._progress_msg
        if msg is not None:
            self.progress_pub.publish(msg)

    # ------------------------------------------------------------------ worker
    def _work(self) -> None:
        try:
            if not self._prepare():
                return
            self._loop()
            if self.step >= self.cfg.total_steps and not self._stop.is_set():
                self._finish()
        except _Interrupted:
            pass  # checkpointed below
        except Exception as err:  # reported, and the node ends instead of hanging the graph
            self.error = err
            self.get_logger().error(f"learner failed: {err}\n{traceback.format_exc()}")
        finally:
            self._stopped()

    def _stopped(self) -> None:
        """The worker's last act: a checkpoint if a stop request cut the run short, then close files."""
        try:
            if self.error is None and self._stop.is_set() and self.runner is not None and self.result is None:
                self._save()
                self.get_logger().info(f"stopped at {self.step} transitions; checkpoint written")
        except Exception as err:
            self.error = err
            self.get_logger().error(f"could not write the checkpoint when stopping: {err}")
        finally:
            for resource in (self.journal, self.logger):
                if resource is not None:
                    resource.close()
            self.finished.set()

    def _prepare(self) -> bool:
        cfg = self.cfg
        experts = None
        if cfg.algo == "opolo":
            episodes = self._wait_for_demos()
            if episodes is None:
                return False
            experts = ExpertDataset(episodes, self.obs_dim, seed=cfg.seed + 1)
            self.expert_return = float(np.nanmean([ep.ret for ep in episodes])) \
                if not all(math.isnan(ep.ret) for ep in episodes) else math.nan
        self.runner = UpdateRunner(self.learner, self.schedule, self.replay, experts)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        (self.run_dir / "learner_params.yaml").write_text(yaml.safe_dump(
            {"learner": {"ros__parameters": {**flatten(to_dict(cfg)), **self.params,
                                             "policy_every": self.policy_every}}}, sort_keys=False))
        if self.resume and self.checkpoint_path.is_file():
            self._restore()
            self.get_logger().info(f"resumed from {self.checkpoint_path} at {self.step} transitions")
        self._backlog = self._open_journal()
        if math.isnan(self.random_return) and not is_mjcf(cfg.env_id):
            self.random_return = random_policy_return(cfg.env_id, cfg.eval_episodes)
        self.logger = RunLogger(self.run_dir)
        self._t0 = time.perf_counter()
        self._publish_policy()
        self._publish_progress()
        return True

    def _wait_for_demos(self) -> list[Episode] | None:
        want = self.cfg.num_demos
        last_note = time.monotonic()
        while not self._stop.is_set():
            n = len(self.demos)
            settled = n > 0 and time.monotonic() - self._demo_last > self.demo_settle
            if n >= want or settled:
                episodes = [self.demos[k] for k in sorted(self.demos)][:want]
                if len(episodes) < want:
                    self.get_logger().warning(f"only {len(episodes)} of num_demos={want} demonstrations "
                                              "arrived; training with those")
                self.get_logger().info(f"{len(episodes)} demonstrations, "
                                       f"{sum(len(ep.obs) - 1 for ep in episodes)} expert transitions")
                return episodes
            if time.monotonic() - last_note > 10.0:
                self.get_logger().info("waiting for demonstrations on "
                                       f"{self.params['demonstrations_topic']} ({n} so far)")
                last_note = time.monotonic()
            time.sleep(0.05)
        return None

    def _loop(self) -> None:
        cfg = self.cfg
        bar = None
        if cfg.progress:
            from tqdm import tqdm

            bar = tqdm(total=cfg.total_steps, initial=self.step, desc=f"graph {cfg.algo} {cfg.env_id}",
                       unit="step", dynamic_ncols=True)
        self._bar = bar
        self._last_log, self._last_log_t, self._last_ret = self.step, time.perf_counter(), math.nan
        try:
            if self._finish_step():  # the rest of a step that a stop interrupted
                self._consume_backlog()
            while self.step < cfg.total_steps and not self._stop.is_set():
                try:
                    msg = self._replay_queue.get(timeout=0.1)
                except queue.Empty:
                    continue
                batch = self.take(msg)
                if batch is not None:
                    if self.journal is not None:
                        self.journal.append(JournalRecord(self.step, batch.source, batch.seq, batch.rows()))
                    self._consume(batch)
        finally:
            if bar is not None:
                bar.close()

    def take(self, msg: Float32MultiArray) -> m.ReplayBatch | None:
        """A received replay message as a batch to consume; None (counted) when it is rejected or a
        duplicate. Never raises for any message."""
        try:
            batch = m.msg_to_replay(msg, self.obs_dim, self.act_dim)
        except m.MessageError as err:
            self.rejected["replay"] += 1
            self.get_logger().error(f"rejected replay batch ({self.rejected['replay']} so far): {err}",
                                    throttle_duration_sec=LOG_THROTTLE_S)
            return None
        previous = self.acks.get(batch.source)
        if previous is not None and 0 < batch.seq <= previous.seq:  # seq 0: a restarted bridge
            self.duplicates += 1
            self.get_logger().info(f"dropped replay batch {batch.seq} of source {batch.source}: "
                                   f"consumed already ({self.duplicates} duplicates)",
                                   throttle_duration_sec=LOG_THROTTLE_S)
            return None
        return batch

    def _consume_backlog(self) -> None:
        """Consume again what the journal holds beyond the checkpoint (after a crash or a stop)."""
        first = self.step
        for record in self._backlog:
            if self.step >= self.cfg.total_steps or self._stop.is_set():
                break
            if record.end_step <= self.step:
                continue
            if record.first_step > self.step:
                self.get_logger().warning(f"replay journal: transitions {self.step}..{record.first_step} "
                                          "are missing")
            batch = m.ReplayBatch.from_rows(record.rows, self.obs_dim, seq=record.seq, source=record.source)
            self._consume(batch, start=max(self.step - record.first_step, 0))
        self._backlog = []
        if self.step > first:
            self.get_logger().info(f"consumed transitions {first}..{self.step} again from the replay journal")

    def _consume(self, batch: m.ReplayBatch, start: int = 0) -> None:
        """Consume the batch from row `start` on, one transition at a time, then acknowledge."""
        cfg = self.cfg
        previous = self.acks.get(batch.source)
        if start == 0 and previous is not None and batch.seq != previous.seq + 1:
            self.get_logger().warning(f"replay source {batch.source}: batch {batch.seq} after "
                                      f"{previous.seq} (lost or reordered batches)")
        done = previous.transitions if previous is not None else 0
        actions = self.scaler.to_unit(batch.action).astype(np.float32)
        taken = 0
        for i in range(start, len(batch)):
            if self.step >= cfg.total_steps or self._stop.is_set():
                break
            if not batch.void[i]:  # a void step (diverged sim) counts for the schedule, is not stored
                self.replay.add(batch.obs[i], actions[i], batch.next_obs[i], batch.reward[i],
                                batch.terminated[i], batch.truncated[i])
            self.step += 1
            taken += 1
            self.acks[batch.source] = m.SourceAck(batch.seq, done + taken)
            self._track_episode(batch.source, float(batch.reward[i]),
                                bool(batch.terminated[i] or batch.truncated[i]))
            self._pending, self._periodic_due = self.schedule.plan(self.step), True
            if not self._finish_step():
                break
        if self._bar is not None:
            self._bar.update(taken)
        self._publish_progress()

    def _finish_step(self) -> bool:
        """Run what transition `self.step` still owes: the rest of its plan, then the periodic work.

        False when a stop request interrupted it; what is left stays in ``_pending`` /
        ``_periodic_due`` and goes into the checkpoint.
        """
        if self._pending is not None and not self._run_plan():
            return False
        return self._periodic() if self._periodic_due else True

    def _run_plan(self) -> bool:
        """Run ``_pending``, honouring a stop request between two updates (what is left stays)."""
        metrics, self._pending = self.runner.run_until_stopped(self._pending, self._stop, self._set_pending)
        self._metrics.update(metrics)
        return self._pending is None

    def _set_pending(self, rest: Plan) -> None:
        self._pending = rest  # readable from other threads while a burst runs

    def _track_episode(self, source: int, reward: float, episode_end: bool) -> None:
        ret, length = self.episode_stats.get(source, (0.0, 0))
        ret, length = ret + reward, length + 1
        if episode_end:
            self._last_ret = ret
            self.logger.scalars(self.step, {"train/episode_return": ret,
                                            "train/episode_length": float(length)})
            ret, length = 0.0, 0
        self.episode_stats[source] = (ret, length)

    def _periodic(self) -> bool:
        """Logging, evaluation, checkpoint and export due at ``self.step``; False when a stop request
        interrupted the evaluation (it is then still due when the run resumes)."""
        cfg, n = self.cfg, self.step
        if n - self._last_log >= 1000 or n == cfg.total_steps:
            self._log_rate()
        if cfg.eval_every and n % cfg.eval_every == 0:
            try:
                self._evaluate()
            except _Interrupted:
                return False
        self._periodic_due = False
        if cfg.checkpoint_every and n % cfg.checkpoint_every == 0:
            self._save()
        if n % self.policy_every == 0:
            self._publish_policy()
        return True

    def _log_rate(self) -> None:
        n, now = self.step, time.perf_counter()
        sps = (n - self._last_log) / max(now - self._last_log_t, 1e-9)
        self.logger.scalars(n, {**self._metrics, "perf/steps_per_sec": sps,
                                "perf/gradient_steps": float(self.learner.critic_steps)})
        if self._bar is not None:
            self._bar.set_postfix(ret=f"{self._last_ret:.0f}", sps=f"{sps:.0f}")
        else:
            self.get_logger().info(f"{n}/{self.cfg.total_steps} transitions, {sps:.0f} steps/s, "
                                   f"training return {self._last_ret:.1f}")
        self._last_log, self._last_log_t = n, now

    # ------------------------------------------------------------------ outputs
    def _publish_progress(self) -> None:
        if self.journal is not None:
            self.journal.sync()  # acknowledge only what the journal holds on the disk
        msg = m.progress_to_msg(m.LearnerProgress(self.learner.critic_steps, self.step, dict(self.acks)))
        with self._progress_lock:
            self._progress_msg = msg
        self.progress_pub.publish(msg)

    def export(self, path: Path) -> Path:
        """Export the policy (checked against PyTorch); version = transitions consumed.

        A policy that misses the exporter's check by float32 kernel differences (seen: 3.6e-5 on
        actions in [-3, 3] against a 1e-5 tolerance) is still exported, with a warning: an actor
        waiting for this version must not wait forever.
        """
        kwargs = {"action_low": self.scaler.low, "action_high": self.scaler.high,
                  "metadata": {"env_id": self.cfg.env_id, "training_step": self.learner.critic_steps,
                               "version": self.step, "source": f"opolo_ros learner {self.cfg.algo}",
                               "time_feature": int(self.cfg.time_feature)}}
        return export_policy_or_warn(self.learner.actor, path, self.get_logger().warning, **kwargs)

    def _publish_policy(self) -> None:
        path = self.export(self.policy_path)
        self.policy_pub.publish(m.policy_to_msg(path.read_bytes(), self.step))

    @property
    def policy_path(self) -> Path:
        return self.run_dir / "policy.onnx"

    @property
    def checkpoint_path(self) -> Path:
        return self.run_dir / "checkpoint.pt"

    @property
    def journal_path(self) -> Path:
        return self.run_dir / "replay_journal.bin"

    def _open_journal(self) -> list[JournalRecord]:
        """Open the replay journal; return its records beyond the restored checkpoint."""
        if not self.params["journal"]:
            self.journal_path.unlink(missing_ok=True)  # a stale one must never be replayed later
            return []
        self.journal = ReplayJournal(self.journal_path, m.replay_fields(self.obs_dim, self.act_dim),
                                     fsync=self.params["journal_fsync"])
        return self.journal.open(keep_from=self.step, discard=not self.resume)

    def _elapsed(self) -> float:
        return self._wall_offset + time.perf_counter() - self._t0

    def _evaluate(self) -> tuple[float, float]:
        cfg = self.cfg
        if is_mjcf(cfg.env_id):
            return math.nan, math.nan
        policy = self._interruptible(PolicyFn(self.learner.actor, self.scaler))
        returns = evaluate(policy, cfg.env_id, cfg.eval_episodes, seed=10_000 + cfg.seed,
                           time_feature=cfg.time_feature)
        mean, std = float(returns.mean()), float(returns.std())
        norm = normalised_score(mean, self.random_return, self.expert_return)
        self.logger.scalars(self.step, {"eval/return": mean, "eval/return_std": std, "eval/normalised": norm})
        self.logger.evaluation({"env_step": self.step, "return_mean": mean, "return_std": std,
                                "normalised": norm, "wall_s": self._elapsed()})
        line = f"step {self.step}: eval return {mean:.1f} +- {std:.1f} (normalised {norm:.3f})"
        if self._bar is not None:
            self._bar.write(line)
        else:
            self.get_logger().info(line)
        self.last_eval = (self.step, mean, std)
        return mean, std

    def _interruptible(self, policy: PolicyCall) -> PolicyCall:
        """`policy` that raises :class:`_Interrupted` once a stop is requested (ends an evaluation)."""
        stop = self._stop

        def act(obs: np.ndarray) -> np.ndarray:
            if stop.is_set():
                raise _Interrupted
            return policy(obs)

        return act

    def _save(self) -> None:
        """Checkpoint, then truncate the replay journal to what the checkpoint does not hold."""
        save_checkpoint(self.checkpoint_path, {
            "config": to_dict(self.cfg), "step": self.step, "runner": self.runner.state_dict(),
            "torch_rng": torch.get_rng_state(), "acks": {k: tuple(v) for k, v in self.acks.items()},
            "episode_stats": dict(self.episode_stats), "random_return": self.random_return,
            "wall": self._elapsed(), "source": "learner node",
            "pending": dataclasses.asdict(self._pending) if self._pending is not None else None,
            "periodic_due": self._periodic_due,
        })
        if self.journal is not None:
            self.journal.truncate(self.step)

    def _restore(self) -> None:
        state = load_checkpoint(self.checkpoint_path)
        if state.get("source") != "learner node":
            raise ValueError(f"checkpoint {self.checkpoint_path} was written by the direct loop, not by the "
                             "learner node; use another run_dir (or resume:=false to start over)")
        if state["config"]["env_id"] != self.cfg.env_id or state["config"]["algo"] != self.cfg.algo:
            raise ValueError(f"checkpoint {self.checkpoint_path} is for {state['config']['algo']} on "
                             f"{state['config']['env_id']}, not {self.cfg.algo} on {self.cfg.env_id}")
        self.step = state["step"]
        self.runner.load_state_dict(state["runner"])
        torch.set_rng_state(state["torch_rng"])
        self.acks = {int(k): m.SourceAck(*v) for k, v in state.get("acks", {}).items()}
        self.episode_stats = dict(state.get("episode_stats", {}))
        self.random_return = state.get("random_return", math.nan)
        self._wall_offset = state.get("wall", 0.0)
        pending = state.get("pending")
        self._pending = Plan(**pending) if pending else None
        self._periodic_due = bool(state.get("periodic_due", False))

    def _finish(self) -> None:
        cfg = self.cfg
        step, mean, std = self.last_eval
        if step != self.step:
            mean, std = self._evaluate()
        self._save()
        self._publish_policy()
        self.logger.close()
        plot = None
        try:
            from opolo_ros.plot import plot_learning_curve

            title = f"{cfg.algo.upper()} through the ROS graph: {cfg.env_id}, seed {cfg.seed}"
            plot = plot_learning_curve(self.run_dir / "eval.csv", self.run_dir / "learning_curve.png",
                                       title=title, expert_return=self.expert_return)
        except Exception as err:  # a missing plot must not lose a finished run
            self.get_logger().warning(f"no learning-curve plot: {err}")
        self.result = TrainResult(self.run_dir, self.step, mean, std,
                                  normalised_score(mean, self.random_return, self.expert_return),
                                  self.expert_return, self.random_return, self.policy_path)
        self.plot_path = plot
        self.get_logger().info(f"done: {self.step} transitions, eval return {mean:.1f} +- {std:.1f}, "
                               f"run folder {self.run_dir}")

    # ------------------------------------------------------------------ lifecycle
    def request_stop(self) -> None:
        """Ask the worker to stop at the next transition boundary (it writes a checkpoint)."""
        self._stop.set()

    def close(self) -> None:
        self.request_stop()
        if self._worker.is_alive():
            self._worker.join(timeout=60.0)
        self.env.close()


def main(args: list[str] | None = None) -> int:
    return run_node(Learner, args)


if __name__ == "__main__":
    raise SystemExit(main())
