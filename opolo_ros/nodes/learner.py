"""learner: OPOLO on the replay stream and the demonstrations, in a worker thread.

Subscribes ``/opolo/demonstrations`` and ``/opolo/replay``; callbacks only enqueue. The worker:

1. waits for the demonstrations (``num_demos`` episodes, or fewer once none has arrived for
   ``demo_settle_s``), builds the expert dataset, and resumes from ``<run_dir>/checkpoint.pt``
   when there is one;
2. consumes what its replay journal holds beyond the checkpoint, then exports its current policy
   and publishes it on ``/opolo/policy`` (version = transitions consumed, 0 for a new run;
   transient local), so actors have a model before the first step, and its first progress (a
   restarted bridge and actor go on counting from these);
3. hands the replay batches, in ``seq`` order per bridge (one that arrives after a gap waits up
   to ``replay_gap_timeout_s`` for the ones before it, which a bridge re-sends:
   :mod:`opolo_ros.train.reorder`), to a :class:`~opolo_ros.train.stream.StreamTrainer`
   (no ROS in it), which takes the transitions one at a time: add to the replay buffer, consume
   transition n, run ``schedule.plan(n)`` through :class:`UpdateRunner` -- the direct loop's
   code path, so the graph runs exactly the direct loop's updates -- then per n the direct loop's
   evaluation (``eval_every``), checkpoint (``checkpoint_every``) and, every ``policy_every``
   transitions, an ONNX export to ``<run_dir>/policy.onnx`` that this node publishes;
4. after each replay batch publishes ``/opolo/learner_progress`` (critic gradient steps, transitions
   consumed, per-source acknowledgement) -- the flow control of the sim bridges;
5. after ``total_steps`` transitions (or at the first evaluation that reaches ``stop_at_return``):
   final evaluation, checkpoint, export, learning-curve PNG;
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
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from std_msgs.msg import Float32MultiArray, Int64MultiArray, UInt8MultiArray

from opolo_ros.algo.config import (
    LEARNER_PARAMETERS,
    RunConfig,
    check_run_config,
    flatten,
    to_dict,
    unflatten,
    update_dataclass,
)
from opolo_ros.data.demos import Episode
from opolo_ros.data.journal import JournalWriteError
from opolo_ros.nodes.common import (
    FinishableNode,
    ParameterError,
    declare,
    default_policy_every,
    run_node,
)
from opolo_ros.ros import messages as m
from opolo_ros.ros.qos import qos_for
from opolo_ros.ros.subscribe import subscribe
from opolo_ros.sim.envs import EvaluationInterrupted, add_time_feature
from opolo_ros.train.checkpoint import CheckpointError, CheckpointWriteError, TrainingDiverged
from opolo_ros.train.direct import TrainResult
from opolo_ros.train.reorder import ReceivedSeqs, ReorderBuffer
from opolo_ros.train.runfolder import write_text_atomic
from opolo_ros.train.runlock import RunFolderInUse
from opolo_ros.train.stream import StreamHooks, StreamTrainer


def run_config_parameters() -> dict[str, Any]:
    """Every run-config key as a (dotted) ROS parameter name -> default."""
    return flatten(to_dict(RunConfig()))


# The node's parameters beyond the run config; in algo.config, where the direct loop checks the
# learner section of a parameter file without ROS.
PARAMETERS = LEARNER_PARAMETERS


LOG_THROTTLE_S = 1.0
# batches with a consumed number and other rows before it is called a second bridge of the same id:
# a restarted bridge's first few (its earlier batches queued here took their numbers) are not one
COLLISIONS_FOR_ERROR = 20
MIN_PERIOD_S = 1e-3  # a timer period below this is a busy loop
MAX_PERIOD_S = 1e6  # rcl's timers hold the period in int64 nanoseconds
ACTION_TOLERANCE = 1e-3  # of half an action range: float32 rounding of a clipped action, not more


class Learner(FinishableNode):
    """The ROS side of the learner: parameters, topics and the worker thread around a
    :class:`StreamTrainer`, which does the training (``self.trainer``)."""

    def __init__(self, *, node_name: str = "learner", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        cfg, p = self._declare_parameters()
        self.cfg, self.params = cfg, p
        self._stop = threading.Event()
        hooks = StreamHooks(self._publish_policy, self._publish_progress, self.get_logger())
        policy_every = p["policy_every"] or default_policy_every(cfg.schedule.train_freq)
        self.trainer = StreamTrainer(cfg, policy_every=policy_every, hooks=hooks, stop=self._stop)
        self.rejected = {"replay": 0, "demonstration": 0}  # messages that did not decode
        self.duplicates = 0  # replay batches received again (re-sent by a bridge), dropped
        self.collisions: dict[int, int] = {}  # source -> "duplicates" with other rows (_collide)
        self.sources: set[int] = set()  # replay sources (bridges) seen by this process
        self.error: BaseException | None = None
        self.demos: dict[int, Episode] = {}
        self._demos_taken = False  # the worker took its demonstrations: later ones are not used
        self._demo_lock = threading.Lock()  # the worker's take against a callback's store
        self._demo_last = 0.0
        self._replay_queue: queue.Queue[Float32MultiArray | bytes] = queue.Queue()
        self._received = ReceivedSeqs(lambda source: getattr(self.trainer.acks.get(source), "seq", None))
        self._progress_lock = threading.Lock()
        self._progress: m.LearnerProgress | None = None  # the last published (its acks journalled)
        self.run_folder_taken = threading.Event()  # set once the run folder is locked and resumed

        self.policy_pub = self.create_publisher(UInt8MultiArray, p["policy_topic"], qos_for("policy"))
        self.progress_pub = self.create_publisher(Int64MultiArray, p["progress_topic"],
                                                  qos_for("learner_progress"))
        subscribe(self, Float32MultiArray, p["demonstrations_topic"], self._on_demo,
                  qos_for("demonstrations"), self._reject_demo, "demonstration")
        # replay bytes go to the ingest thread as they came: read and decoded there (take)
        self.create_subscription(Float32MultiArray, p["replay_topic"], self._on_replay, qos_for("replay"),
                                 raw=True)
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
            check_run_config(cfg)
        except ValueError as err:
            raise ParameterError(str(err)) from None
        p = {name: declare(self, name, default, desc) for name, (default, desc) in PARAMETERS.items()}
        if p["policy_every"] < 0:
            raise ParameterError(f"parameter 'policy_every' must be >= 0, got {p['policy_every']}")
        # `not 0 <= x < inf` refuses NaN too, which would make a wait never end
        for name, least in (("demo_settle_s", 0.0), ("replay_gap_timeout_s", 0.0),
                            ("progress_period_s", MIN_PERIOD_S)):
            if not least <= p[name] < math.inf:
                raise ParameterError(f"parameter '{name}' must be a finite number >= {least:g}, "
                                     f"got {p[name]}")
        if p["progress_period_s"] > MAX_PERIOD_S:
            raise ParameterError(f"parameter 'progress_period_s' must be at most {MAX_PERIOD_S:g} s, "
                                 f"got {p['progress_period_s']:g}")
        return cfg, p

    @property
    def result(self) -> TrainResult | None:
        """The finished run's figures (None until the run is done)."""
        return self.trainer.result

    # ------------------------------------------------------------------ callbacks: enqueue only
    def _on_demo(self, msg: Float32MultiArray) -> None:
        trainer = self.trainer
        try:
            demo = m.msg_to_demonstration(msg)
            obs = add_time_feature(demo.obs, trainer.max_steps) if self.cfg.time_feature else demo.obs
            if obs.shape[1] != trainer.obs_dim:
                raise m.MessageError(f"demonstration {demo.episode}: obs_dim {demo.obs.shape[1]} "
                                     f"does not match {self.cfg.env_id}")
            episode = Episode(obs, demo.episode_return, {"episode": demo.episode})
        except ValueError as err:  # MessageError, or an Episode that fails its own checks
            self._reject_demo(err)
            return
        earlier = self.demos.get(demo.episode)
        if earlier is not None and np.array_equal(earlier.obs, episode.obs) \
                and np.array_equal(earlier.ret, episode.ret, equal_nan=True):
            return  # the same episode again (a transient-local re-delivery): no news
        with self._demo_lock:  # taken by the worker, or kept: never stored after it took them
            if self._demos_taken:  # not kept: a live recorder's stream would fill the memory for nothing
                self.get_logger().warning(f"demonstration episode {demo.episode} arrived after training "
                                          "started: not used", throttle_duration_sec=LOG_THROTTLE_S)
                return
            if earlier is not None:
                what = "other states" if not np.array_equal(earlier.obs, episode.obs) else \
                    f"another return ({episode.ret} instead of {earlier.ret})"
                self.get_logger().warning(
                    f"demonstration episode {demo.episode} received again with {what}: the later one "
                    "replaces it (two demo players on one learner number their episodes alike)")
            self.demos[demo.episode] = episode
            self._demo_last = time.monotonic()

    def _reject_demo(self, err: ValueError) -> None:
        self.rejected["demonstration"] += 1
        self.get_logger().error(f"rejected demonstration ({self.rejected['demonstration']} so far): "
                                f"{err}", throttle_duration_sec=LOG_THROTTLE_S)

    def _on_replay(self, msg: Float32MultiArray | bytes) -> None:
        self._replay_queue.put(msg)
        try:  # what is received, told in the progress: a bridge need not send a queued batch again
            self._received.add(*m.replay_origin(msg))
        except m.MessageError:
            pass  # the worker reads it in full: rejected there, counted and logged

    def _republish_progress(self) -> None:
        with self._progress_lock:  # publishing under the lock too: never an older message after a newer
            if self._progress is not None:  # the same acknowledgements, what is received by now
                received = self._received.snapshot()
                self.progress_pub.publish(m.progress_to_msg(dataclasses.replace(self._progress,
                                                                                received=received)))

    # ------------------------------------------------------------------ worker
    def _work(self) -> None:
        try:
            if not self._prepare():
                return
            self._loop()
            if self.trainer.done and not self._stop.is_set():
                self.trainer.finish()
        except EvaluationInterrupted:
            pass  # checkpointed below
        except (RunFolderInUse, CheckpointError, CheckpointWriteError, JournalWriteError,
                TrainingDiverged) as err:  # one line
            self.error = err
            self.get_logger().error(f"learner failed: {err}")
        except Exception as err:  # reported, and the node ends instead of hanging the graph
            self.error = err
            self.get_logger().error(f"learner failed: {err}\n{traceback.format_exc()}")
        finally:
            self._stopped()

    def _stopped(self) -> None:
        """The worker's last act: a checkpoint if a stop request cut the run short, then close files."""
        try:
            if self.error is None and self.trainer.checkpoint_if_stopped():
                self.get_logger().info(f"stopped at {self.trainer.step} transitions; checkpoint written")
        except Exception as err:
            self.error = err
            self.get_logger().error(f"could not write the checkpoint when stopping: {err}")
        finally:
            try:
                self.trainer.close()
            except Exception as err:  # e.g. a full disk: still an end, not a node waiting forever
                self.error = self.error or err
                self.get_logger().error(f"could not close the run's files: {err}")
            finally:
                self.finished.set()

    def _prepare(self) -> bool:
        episodes = None
        if self.cfg.algo == "opolo":
            episodes = self._wait_for_demos()
            if episodes is None:
                return False
        self.trainer.start(episodes, resume=self.params["resume"], journal=self.params["journal"],
                           journal_fsync=self.params["journal_fsync"])  # takes the run folder's lock
        params = {**flatten(to_dict(self.cfg)), **self.params, "policy_every": self.trainer.policy_every}
        write_text_atomic(self.trainer.run_dir / "learner_params.yaml",
                          yaml.safe_dump({"learner": {"ros__parameters": params}}, sort_keys=False))
        self.run_folder_taken.set()
        return True

    def _wait_for_demos(self) -> list[Episode] | None:
        want = self.cfg.num_demos or math.inf  # 0: all the player has, once they stop coming
        last_note = -math.inf  # the first note at once, then every 10 s
        while not self._stop.is_set():
            n = len(self.demos)
            settled = n > 0 and time.monotonic() - self._demo_last > self.params["demo_settle_s"]
            if n >= want or settled:
                with self._demo_lock:
                    episodes = [self.demos[k] for k in sorted(self.demos)][: self.cfg.num_demos or None]
                    self._demos_taken = True
                if len(episodes) < want < math.inf:
                    rejected = self.rejected["demonstration"]
                    self.get_logger().warning(f"only {len(episodes)} of num_demos={want} demonstrations "
                                              f"arrived ({rejected} rejected); training with those")
                self.get_logger().info(f"{len(episodes)} demonstrations, "
                                       f"{sum(len(ep.obs) - 1 for ep in episodes)} expert transitions")
                return episodes
            if time.monotonic() - last_note > 10.0:
                rejected = self.rejected["demonstration"]
                why = f", {rejected} rejected (see the errors above)" if rejected else ""
                self.get_logger().info("waiting for demonstrations on "
                                       f"{self.params['demonstrations_topic']} ({n} so far{why})")
                last_note = time.monotonic()
            time.sleep(0.05)
        return None

    def _loop(self) -> None:
        trainer = self.trainer
        timeout = self.params["replay_gap_timeout_s"]
        reorder = ReorderBuffer(timeout, lambda source: getattr(trainer.acks.get(source), "seq", None))
        trainer.open_progress_bar()
        try:
            trainer.catch_up()
            while not trainer.done and not self._stop.is_set():
                try:
                    batch = self.take(self._replay_queue.get(timeout=0.1))
                except queue.Empty:
                    batch = None
                for ready in reorder.push(batch) if batch is not None else []:
                    trainer.ingest(ready)
                if batch is not None and batch.seq in reorder.waiting(batch.source):
                    self.get_logger().info(
                        f"replay source {batch.source}: batch {batch.seq} came after a gap; waiting up "
                        f"to {timeout:g} s for the batches before it (batches waiting: "
                        f"{reorder.waiting(batch.source)})", throttle_duration_sec=LOG_THROTTLE_S)
                for ready, missing in reorder.expired():
                    if missing:
                        self.get_logger().warning(
                            f"replay source {ready.source}: batches {missing.start}..{missing.stop - 1} "
                            f"did not come within {timeout:g} s; going on without them")
                    trainer.ingest(ready)
        finally:
            trainer.close_progress_bar()

    def take(self, msg: Float32MultiArray | bytes) -> m.ReplayBatch | None:
        """A received replay message (or its serialized bytes) as a batch to consume; None (counted)
        when it is rejected or a duplicate. Never raises for any message."""
        try:
            if isinstance(msg, bytes):
                msg = m.deserialize(msg, Float32MultiArray, "replay batch")
            batch = m.msg_to_replay(msg, self.trainer.obs_dim, self.trainer.act_dim)
            scaler = self.trainer.scaler
            outside = np.abs(scaler.to_unit(batch.action)).max(initial=0.0) - 1.0
            if outside > ACTION_TOLERANCE:  # a sim bridge stores the action it applied, clipped
                raise m.MessageError(f"actions outside the task's bounds [{scaler.low.tolist()}, "
                                     f"{scaler.high.tolist()}] (by {outside:.3g} half ranges)")
        except m.MessageError as err:
            try:  # it was told as received when it came (_on_replay): it is not held after all
                self._received.reject(*m.replay_origin(msg))
            except m.MessageError:
                pass
            self.rejected["replay"] += 1
            self.get_logger().error(f"rejected replay batch ({self.rejected['replay']} so far): {err}",
                                    throttle_duration_sec=LOG_THROTTLE_S)
            return None
        if self.trainer.is_duplicate(batch):
            self.duplicates += 1
            if self.trainer.differs_from_consumed(batch):
                self._collide(batch)
                return None
            self.get_logger().info(f"dropped replay batch {batch.seq} of source {batch.source}: "
                                   f"consumed already ({self.duplicates} duplicates)",
                                   throttle_duration_sec=LOG_THROTTLE_S)
            return None
        if batch.source not in self.sources:
            self.sources.add(batch.source)
            if len(self.sources) > 1:
                self.get_logger().warning(
                    f"replay from a new source {batch.source} ({len(self.sources)} sources): several "
                    "bridges feed this learner, or another training shares this ROS domain and the "
                    "two runs mix their data (give each training its own ROS_DOMAIN_ID)")
        return batch

    def _collide(self, batch: m.ReplayBatch) -> None:
        """A batch whose (source, seq) was consumed with other transitions: a bridge restarted
        while its earlier batches were queued here (its first few new ones have their numbers:
        they are dropped, and count for nothing), or, when it goes on, a second bridge with this
        source id on this ROS domain (another training on this machine, its bridge of the same
        name and namespace): the two runs mix their data."""
        count = self.collisions[batch.source] = self.collisions.get(batch.source, 0) + 1
        if count < COLLISIONS_FOR_ERROR:
            self.get_logger().info(
                f"dropped replay batch {batch.seq} of source {batch.source}: its number was consumed "
                f"with other transitions ({count} so far; a bridge restarted while its earlier batches "
                "were queued here, or a second bridge of this id)", throttle_duration_sec=LOG_THROTTLE_S)
        elif count == COLLISIONS_FOR_ERROR:
            self.get_logger().error(
                f"{count} replay batches of source {batch.source} came with numbers consumed with other "
                "transitions: a second bridge with this source id publishes on this ROS domain (another "
                "training on this machine, its bridge of the same name and namespace): the two runs mix "
                "their data; give each training its own ROS_DOMAIN_ID")

    # ------------------------------------------------------------------ outputs
    def _publish_progress(self) -> None:
        t = self.trainer
        with self._progress_lock:  # the received snapshot too: a republish between could show newer
            progress = m.LearnerProgress(t.learner.critic_steps, t.step, dict(t.acks),
                                         self._received.snapshot())
            self._progress = progress
            self.progress_pub.publish(m.progress_to_msg(progress))

    def _publish_policy(self, path: Path, version: int) -> None:
        self.policy_pub.publish(m.policy_to_msg(path.read_bytes(), version))

    # ------------------------------------------------------------------ lifecycle
    def request_stop(self) -> None:
        """Ask the worker to stop at the next transition boundary (it writes a checkpoint)."""
        self._stop.set()

    def close(self) -> None:
        self.request_stop()
        if self._worker.is_alive():
            self._worker.join(timeout=60.0)


def main(args: list[str] | None = None) -> int:
    return run_node(Learner, args)


if __name__ == "__main__":
    raise SystemExit(main())
