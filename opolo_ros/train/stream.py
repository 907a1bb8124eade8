"""Training on a stream of transition batches: the learner node's work, without ROS.

The learner node (:mod:`opolo_ros.nodes.learner`) decodes what arrives over DDS and hands each
batch to a :class:`StreamTrainer`, which consumes it one transition at a time: add it to the
replay buffer, run ``schedule.plan(n)`` through :class:`UpdateRunner` (the direct loop's code
path, so both run the same updates), then the direct loop's evaluation, checkpoint and, every
``policy_every`` transitions, an ONNX export that the node publishes.

Batches go into the replay journal (:mod:`opolo_ros.data.journal`) before they are consumed, so
before they are acknowledged; a checkpoint truncates the journal, and a trainer started again on
the run folder restores the checkpoint and consumes the journalled rest again
(:meth:`StreamTrainer.catch_up`). A stop (the `stop` event) is honoured between two gradient
updates, also inside a burst or an evaluation; :meth:`StreamTrainer.checkpoint_if_stopped` then
saves the exact point, the rest of the interrupted plan included.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

import numpy as np
import torch

from opolo_ros.algo.config import RunConfig, to_dict
from opolo_ros.algo.schedule import Plan
from opolo_ros.data.batches import ReplayBatch, SourceAck, replay_fields
from opolo_ros.data.demos import Episode, ExpertDataset, short_episodes_note
from opolo_ros.data.journal import DAMAGE, JournalRecord, ReplayJournal, read_records
from opolo_ros.data.replay import ReplayBuffer
from opolo_ros.export.onnx_policy import export_policy_or_warn
from opolo_ros.sim.actions import ActionScaler
from opolo_ros.sim.envs import EvaluationInterrupted
from opolo_ros.sim.task_ids import is_mjcf, task_label
from opolo_ros.sim.tasks import control_period, make_task_env, max_steps_of
from opolo_ros.train.checkpoint import (
    GRAPH_SOURCE,
    CheckpointAborted,
    CheckpointError,
    changes_note,
    check_finite,
    expert_return_note,
    load_checkpoint,
    policy_io,
    restore_runner,
    restore_torch_rng,
    resume_changes,
    save_checkpoint,
    torch_rng_state,
)
from opolo_ros.train.direct import (
    PolicyFn,
    TrainResult,
    policy_metadata,
    recorded_joints,
    run_finished,
    seed_everything,
)
from opolo_ros.train.logger import RunLogger, TimeToGo, purge_step
from opolo_ros.train.run_eval import RunEvaluator, evaluated_text, stop_at_return_note
from opolo_ros.train.runfolder import set_aside_previous_run, write_run_config
from opolo_ros.train.runlock import RunFolderLock
from opolo_ros.train.runner import UpdateRunner, make_learner, make_schedule, untrained_warning

PolicyCall = Callable[[np.ndarray], np.ndarray]
RECENT_FINGERPRINTS = 1024  # per source: consumed batches whose fingerprint is kept (differs_from_consumed)
REPLAY_BASE = "replay_base.pt"  # the full checkpoint a light (stop) checkpoint takes its replay from
# a light checkpoint refers to a full one at most this many transitions back (with checkpoint_every
# 0: else the journal grew for ever and every restart replayed all of it); checkpoint_every if set
LIGHT_SPAN = 10_000
RECOVER_FROM_BASE = ("to resume from the full checkpoint it was written over (step {step}), with the "
                     "journal's transitions after it, rename replay_base.pt to checkpoint.pt; or use "
                     "another run_dir (or resume:=false to start over)")


class Log(Protocol):
    """What the trainer logs to (an rclpy logger fits)."""

    def info(self, message: str) -> Any: ...

    def warning(self, message: str) -> Any: ...


@dataclass
class StreamHooks:
    """How the trainer's outputs leave it (the node publishes them)."""

    publish_policy: Callable[[Path, int], None]  # exported ONNX file, version (transitions consumed)
    publish_progress: Callable[[], None]  # after each batch, once the journal holds it
    log: Log


class StreamTrainer:
    """OPOLO (or TD3) on transition batches, with the direct loop's schedule and outputs."""

    def __init__(self, cfg: RunConfig, *, policy_every: int, hooks: StreamHooks,
                 stop: threading.Event | None = None) -> None:
        self.cfg = cfg
        self.hooks = hooks
        self.stop = stop or threading.Event()
        self.policy_every = policy_every
        if cfg.torch_threads > 0:
            torch.set_num_threads(cfg.torch_threads)
        seed_everything(cfg.seed)
        self.env = make_task_env(cfg.env_id, seed=cfg.seed, time_feature=cfg.time_feature,
                                 max_episode_steps=cfg.max_episode_steps)
        self.obs_dim = int(self.env.observation_space.shape[0])
        self.act_dim = int(self.env.action_space.shape[0])
        self.max_steps = max_steps_of(self.env)
        self.scaler = ActionScaler.from_space(self.env.action_space)
        self.control_period = control_period(self.env)  # the exported policies' control_period_s
        self.learner = make_learner(cfg, self.obs_dim, self.act_dim)
        self.schedule = make_schedule(cfg)
        self.replay = ReplayBuffer(self.obs_dim, self.act_dim,
                                   min(cfg.schedule.buffer_size, max(cfg.total_steps, 1)), seed=cfg.seed + 2)
        self.runner: UpdateRunner | None = None
        self.run_dir = Path(cfg.run_dir)
        self._lock = RunFolderLock(self.run_dir)

        self.step = 0  # transitions consumed (= n of schedule.plan(n))
        self.acks: dict[int, SourceAck] = {}
        self.journal: ReplayJournal | None = None
        self._backlog: list[JournalRecord] = []  # journalled after the checkpoint: consumed first
        self.pending: Plan | None = None  # updates of self.step's plan not run yet (a stop came)
        self._periodic_due = False  # self.step's evaluation/checkpoint/export not done yet
        self._saved_at: tuple | None = None  # the _save_point of the checkpoint on disk (its step first)
        # a light checkpoint on disk: the step of the full one (replay_base.pt) whose replay it uses
        self._base_step: int | None = None
        self._light_replay: dict | None = None  # a light checkpoint's replay state, until refilled
        self._base_replay: dict | None = None  # replay_base.pt's: a refill into another capacity
        self._metrics: dict[str, Any] = {}
        self.episode_stats: dict[int, tuple[float, int]] = {}
        self.evaluator = RunEvaluator(cfg, cfg.eval_max_episode_steps or self.max_steps)
        self.result: TrainResult | None = None
        self.last_eval: tuple[int, float, float] = (-1, math.nan, math.nan)
        self.void_steps = 0  # transitions of diverged simulation steps: counted, never stored
        self.first_batches: dict[int, int] = {}  # source -> fingerprint of the batch 0 consumed last
        # source -> {seq: fingerprint} of the batches consumed lately (RECENT_FINGERPRINTS at most)
        self._recent: dict[int, dict[int, int]] = {}
        self._wall_offset = 0.0
        self._t0 = time.perf_counter()
        self.logger: RunLogger | None = None
        self.plot_path: Path | None = None
        self._bar = None
        self._last_log, self._last_log_t, self._last_ret = 0, time.perf_counter(), math.nan
        # the progress lines' time to go
        self._eta = TimeToGo(cfg.total_steps, after=cfg.schedule.warmup_steps)

    # ------------------------------------------------------------------ set-up
    def start(self, episodes: list[Episode] | None, *, resume: bool, journal: bool,
              journal_fsync: bool) -> None:
        """Expert data (OPOLO), run folder, checkpoint (with `resume`), journal. The first policy
        and progress wait for :meth:`catch_up`."""
        cfg = self.cfg
        experts = None
        if episodes is not None:
            experts = ExpertDataset(episodes, self.obs_dim, seed=cfg.seed + 1)
            self.evaluator.use_demonstrations(episodes, self.obs_dim)
        self.runner = UpdateRunner(self.learner, self.schedule, self.replay, experts)
        self._lock.acquire()  # before anything in the run folder is read or written
        if not resume:
            moved = set_aside_previous_run(self.run_dir)
            if moved is not None:
                self.hooks.log.info(f"starting over: the previous run's files are in {moved}")
        if resume and self.checkpoint_path.is_file():
            self._restore()
            self.hooks.log.info(f"resumed from {self.checkpoint_path} at {self.step} transitions")
        else:  # where the run goes, from its start (it was said only by the final `done:` line)
            self.hooks.log.info(f"new run of {cfg.total_steps} transitions in {self.run_dir}")
        self._backlog = self._open_journal(journal, journal_fsync, resume)
        if self._light_replay is not None:
            self._refill_replay(self._backlog, self._light_replay)
            self._light_replay = None
        # after the restore and the journal: a run refused for this config keeps the config it was
        # written with, and so does a finished run started again
        if not (self.done and self.pending is None and not self._periodic_due and not self._backlog):
            kept = write_run_config(self.run_dir, to_dict(cfg), self.step)
            if kept is not None:
                self.hooks.log.info(f"the config it ran under until now is kept as {kept}")
        untrained = untrained_warning(cfg, self.schedule)
        if untrained:
            self.hooks.log.warning(untrained)
        short = short_episodes_note(episodes or [], self.max_steps if cfg.time_feature else None)
        if short:
            self.hooks.log.warning(short)
        no_stop = stop_at_return_note(cfg)
        if no_stop:
            self.hooks.log.warning(no_stop)
        self.logger = RunLogger(self.run_dir, purge_from=purge_step(self.step))
        self._t0 = time.perf_counter()

    def _open_journal(self, journal: bool, fsync: bool, resume: bool) -> list[JournalRecord]:
        """Open the replay journal; return its records beyond the restored checkpoint."""
        if not journal:
            if self._light_replay is not None:
                raise CheckpointError(f"checkpoint {self.checkpoint_path} was written at a stop without its "
                                      "replay buffer, which replay_base.pt and the replay journal hold: "
                                      "resume with the learner's journal: true (a task file's learner "
                                      "section, or -p journal:=true to the learner program)")
            records, end = read_records(self.journal_path)
            beyond = [rec for rec in records if rec.end_step > self.step]
            if resume and end in ("last", "middle"):  # its records after the damage were not counted
                raise CheckpointError(f"the replay journal {self.journal_path} is damaged ({DAMAGE[end]}): "
                                      "transitions acknowledged to a bridge may follow the damage; resume "
                                      "with the learner's journal: true (a task file's learner section, or "
                                      "-p journal:=true to the learner program) to keep the file's bytes "
                                      "and train on its whole records, or delete the file to go on "
                                      "without them")
            if resume and beyond:  # a crash before: deleting it would lose acknowledged transitions
                n = sum(rec.end_step - max(rec.first_step, self.step) for rec in beyond)
                raise CheckpointError(f"the replay journal {self.journal_path} holds {n} transitions after "
                                      f"the checkpoint (step {self.step}) the run has not trained on (a "
                                      "crash after acknowledging them, or a stop inside a batch): resume "
                                      "with the learner's journal: true (a task file's learner section, or "
                                      "-p journal:=true to the learner program) to train on them, or "
                                      "delete the file to go on "
                                      "without them")
            self.journal_path.unlink(missing_ok=True)  # a stale one must never be replayed later
            return []
        fields = replay_fields(self.obs_dim, self.act_dim)
        self.journal = ReplayJournal(self.journal_path, fields, fsync=fsync)
        try:
            keep_from = self.step if self._base_step is None else self._base_step  # (a light checkpoint's)
            records = self.journal.open(keep_from=keep_from, discard=not resume)
        except ValueError as err:  # another task's journal: one line, as a checkpoint that does not fit
            raise CheckpointError(f"{err}; use another run_dir (or resume:=false to start over)") from None
        dropped, after = self.journal.dropped
        where = "at its start" if after is None else f"after transition {after}"
        kept = f"; the file as it was is kept as {self.journal.damaged_copy}"
        if self.journal.end_kind == "middle":
            self.hooks.log.error(f"replay journal {self.journal_path} is damaged {where}: whole records "
                                 f"follow the damage, so acknowledged transitions after it are lost to "
                                 f"this run ({dropped} bytes){kept}")
        elif self.journal.end_kind == "last":
            self.hooks.log.warning(f"replay journal {self.journal_path}: its last record ({dropped} bytes "
                                   f"{where}) is all there but fails its check: a write a power cut left "
                                   "unfinished (never acknowledged), or damage (then that batch is "
                                   f"lost){kept}")
        elif dropped:
            self.hooks.log.warning(f"replay journal {self.journal_path}: {dropped} bytes {where} are no "
                                   "whole record and were dropped: a write a crash cut short (never "
                                   "acknowledged)")
        return records

    @property
    def done(self) -> bool:
        return run_finished(self.step, self.evaluator.best_return, self.cfg)

    @property
    def policy_path(self) -> Path:
        return self.run_dir / "policy.onnx"

    @property
    def checkpoint_path(self) -> Path:
        return self.run_dir / "checkpoint.pt"

    @property
    def journal_path(self) -> Path:
        return self.run_dir / "replay_journal.bin"

    # ------------------------------------------------------------------ the stream
    def open_progress_bar(self, stream: TextIO | None = None) -> None:
        """A progress bar on a terminal (`stream`, stderr by default); into a file or a pipe
        (``make train | tee``), where the bar's carriage returns glued the other nodes' log lines
        onto it, a log line per rate period instead."""
        stream = sys.stderr if stream is None else stream
        if self.cfg.progress and stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=self.cfg.total_steps, initial=self.step, unit="step", dynamic_ncols=True,
                             file=stream, desc=f"graph {self.cfg.algo} {self.cfg.env_id}")
        self._last_log, self._last_log_t, self._last_ret = self.step, time.perf_counter(), math.nan
        self._eta.mark(self._last_log, self._last_log_t)  # where this process's rate starts

    def close_progress_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def catch_up(self) -> None:
        """What a restart owes: the rest of an interrupted step, then the journalled transitions;
        then the first policy (so actors have a model before the first step) and progress go out.
        Not before: a bridge restarted with the learner takes the acknowledgement for its source in
        the first progress it sees to go on counting from, and an actor restarted with it its step
        count from the first policy's version. Published before (or while) the journal was
        consumed, they had the bridge start again at batch 0, whose batches up to the journal's last
        were then dropped as consumed already (both sides then waited on each other for good), and
        the actor count its steps from the checkpoint's (its policies ran that many steps late).
        Nor after a stop that cut the journal short: that progress would acknowledge less than
        the learner before the restart had, and a bridge would number new batches as ones the
        journal holds (the next learner dropped them as duplicates, yet acknowledged them)."""
        if self._finish_step():
            self._consume_backlog()
            if self.stop.is_set():
                return
            self._make_up_full_checkpoint()
            self._publish_policy()
            self.hooks.publish_progress()

    def _make_up_full_checkpoint(self) -> None:
        """Resumed from a light checkpoint whose full one is a span or more back (a periodic
        checkpoint given up for a stop): the full one now. Else every stop until the next periodic
        one would be a full write (the slow one) and the journal grow to twice the span."""
        span = self.cfg.checkpoint_every or LIGHT_SPAN
        if self._base_step is None or self.step - self._base_step < span:
            return
        try:
            self.save(stop=self.stop)
        except CheckpointAborted:
            pass  # stopped again: the light checkpoint on disk holds this point

    def differs_from_consumed(self, batch: ReplayBatch) -> bool:
        """Whether a batch taken for a duplicate (:meth:`is_duplicate`) holds other rows than the
        one consumed with its ``(source, seq)`` lately: not a re-send but a second bridge with the
        same source id (two trainings on one ROS domain and one machine: their bridges' ids are of
        the host and the node name), whose batches are dropped or consumed as the other's."""
        consumed = self._recent.get(batch.source, {}).get(batch.seq)
        return consumed is not None and consumed != batch.fingerprint()

    def is_duplicate(self, batch: ReplayBatch) -> bool:
        """Whether the batch's ``(source, seq)`` was consumed already (a bridge re-sent it).

        ``seq`` 0 from a source seen before is either a bridge that restarted without a learner to
        continue its count from (a new count: consumed) or a re-send of the batch 0 consumed
        already (a bridge whose first batch stayed unacknowledged past its timeout, e.g. through
        the P_I pre-training): the batch-0 fingerprint tells them apart."""
        previous = self.acks.get(batch.source)
        if previous is None:
            return False
        if batch.seq == 0:
            return self.first_batches.get(batch.source) == batch.fingerprint()
        return batch.seq <= previous.seq

    def ingest(self, batch: ReplayBatch) -> None:
        """Journal the batch, then consume it (and acknowledge what was consumed).

        Not after a stop request or the end: a batch released with one that a stop cut short
        would be journalled from the step where that one stopped, over its unconsumed rows (which
        the journal replays on resume); unacknowledged, it is re-sent by its bridge instead."""
        if self.done or self.stop.is_set():
            return
        if self.journal is not None:
            self.journal.append(JournalRecord(self.step, batch.source, batch.seq, batch.rows()))
        self._consume(batch)

    def sync_journal(self) -> None:
        """Force the journal to the file (and disk with fsync): call before acknowledging."""
        if self.journal is not None:
            self.journal.sync()

    def _consume_backlog(self) -> None:
        first = self.step
        for record in self._backlog:
            if self.done or self.stop.is_set():
                break
            if record.end_step <= self.step:
                continue
            if record.first_step > self.step:
                self.hooks.log.warning(f"replay journal: transitions {self.step}..{record.first_step} "
                                       "are missing")
            batch = ReplayBatch.from_rows(record.rows, self.obs_dim, seq=record.seq, source=record.source)
            self._consume(batch, start=max(self.step - record.first_step, 0))
        self._backlog = []  # (after the loop: _consume publishes no progress while it is not empty)
        if self.step > first:
            self.hooks.log.info(f"consumed transitions {first}..{self.step} again from the replay journal")

    def _consume(self, batch: ReplayBatch, start: int = 0) -> None:
        """Consume the batch from row `start` on, one transition at a time, then acknowledge."""
        previous = self.acks.get(batch.source)
        fingerprint = batch.fingerprint()
        if start == 0 and batch.seq == 0:
            self.first_batches[batch.source] = fingerprint
        recent = self._recent.setdefault(batch.source, {})
        recent[batch.seq] = fingerprint
        if len(recent) > RECENT_FINGERPRINTS:
            del recent[next(iter(recent))]  # the oldest (dicts keep insertion order)
        if start == 0 and previous is not None and batch.seq != previous.seq + 1:
            self.hooks.log.warning(f"replay source {batch.source}: batch {batch.seq} after "
                                   f"{previous.seq} (lost or reordered batches)")
        done = previous.transitions if previous is not None else 0
        actions = self.scaler.to_unit(batch.action).astype(np.float32)
        taken = 0
        for i in range(start, len(batch)):
            if self.done or self.stop.is_set():
                break
            if not batch.void[i]:  # a void step (diverged sim) counts for the schedule, is not stored
                self.replay.add(batch.obs[i], actions[i], batch.next_obs[i], batch.reward[i],
                                batch.terminated[i], batch.truncated[i])
            else:
                self.void_steps += 1
            self.step += 1
            taken += 1
            self.acks[batch.source] = SourceAck(batch.seq, done + taken)
            self._track_episode(batch.source, float(batch.reward[i]),
                                bool(batch.terminated[i] or batch.truncated[i]))
            self.pending, self._periodic_due = self.schedule.plan(self.step), True
            if not self._finish_step():
                break
        if self._bar is not None:
            self._bar.update(taken)
        self.sync_journal()  # acknowledge only what the journal holds
        if not self._backlog:  # the journal's own batches: acknowledged once all are consumed
            self.hooks.publish_progress()

    def _refill_replay(self, records: list[JournalRecord], light: dict) -> None:
        """A light checkpoint's replay buffer: the full one's (replay_base.pt), then the journal's
        transitions from that one's step to this checkpoint's, stored as they were when consumed
        (void rows left out), then the sampling generator of the moment of the stop. Into a buffer
        of the capacity the run had then; re-laid into this run's where ``schedule.buffer_size``
        changed since, as a full checkpoint's buffer is."""
        replay = self.replay  # holds the base's rows already (restored with the checkpoint)
        if light["capacity"] != self.replay.capacity:
            replay = ReplayBuffer(self.obs_dim, self.act_dim, light["capacity"])
            replay.load_state_dict(self._base_replay)
        expected = self._base_step
        for record in records:
            if record.first_step >= self.step or record.first_step > expected:
                break  # done, or a gap: told below
            batch = ReplayBatch.from_rows(record.rows, self.obs_dim, seq=record.seq, source=record.source)
            first, end = max(expected - record.first_step, 0), min(self.step - record.first_step, len(batch))
            keep = np.arange(first, end)[~batch.void[first:end]]
            if keep.size:
                replay.add(batch.obs[keep], self.scaler.to_unit(batch.action[keep]).astype(np.float32),
                           batch.next_obs[keep], batch.reward[keep], batch.terminated[keep],
                           batch.truncated[keep])
            expected = max(expected, record.first_step + end)
        if expected != self.step:
            raise CheckpointError(f"checkpoint {self.checkpoint_path} was written at a stop without its "
                                  f"replay buffer, and the replay journal does not hold the transitions "
                                  f"{self._base_step}..{self.step} it needs (it reaches {expected}): "
                                  f"{RECOVER_FROM_BASE.format(step=self._base_step)}")
        counts = (replay.pos, replay.size, replay.total_added)
        if counts != (light["pos"], light["size"], light["total_added"]):
            raise CheckpointError(f"checkpoint {self.checkpoint_path}: its replay buffer rebuilt from "
                                  f"replay_base.pt and the journal has position, size, total "
                                  f"{counts}, not the checkpoint's "
                                  f"{(light['pos'], light['size'], light['total_added'])}: "
                                  f"{RECOVER_FROM_BASE.format(step=self._base_step)}")
        replay.generator.set_state(light["generator"])
        if replay is not self.replay:
            self.replay.load_state_dict(replay.state_dict())
        self._base_replay = None

    def _finish_step(self) -> bool:
        """Run what transition `self.step` still owes: the rest of its plan, then the periodic work.

        False when a stop request interrupted it; what is left stays in ``pending`` /
        ``_periodic_due`` and goes into the checkpoint.
        """
        if self.pending is not None and not self._run_plan():
            return False
        return self._periodic() if self._periodic_due else True

    def _run_plan(self) -> bool:
        """Run ``pending``, honouring a stop request between two updates (what is left stays)."""
        metrics, self.pending = self.runner.run_until_stopped(self.pending, self.stop, self._set_pending)
        self._metrics.update(metrics)
        return self.pending is None

    def _set_pending(self, rest: Plan) -> None:
        self.pending = rest  # readable from other threads while a burst runs

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
            except EvaluationInterrupted:
                return False
        self._periodic_due = False
        if cfg.checkpoint_every and n % cfg.checkpoint_every == 0:
            try:  # a stop while it writes gives it up: the stop's light checkpoint comes instead
                self.save(stop=self.stop)
            except CheckpointAborted:
                self.hooks.log.info(f"periodic checkpoint at {n} given up for the stop's")
        if n % self.policy_every == 0 and not self._backlog:  # the first one follows the journal
            self._publish_policy()
        return True

    def _log_rate(self) -> None:
        n, now = self.step, time.perf_counter()
        sps = (n - self._last_log) / max(now - self._last_log_t, 1e-9)
        self.logger.scalars(n, {**self._metrics, "perf/steps_per_sec": sps,
                                "perf/gradient_steps": float(self.learner.critic_steps)})
        no_reward = is_mjcf(self.cfg.env_id)  # its returns are 0: not worth showing
        to_go = self._eta.mark(n, now)
        if self._bar is not None:
            shown = {} if no_reward else {"ret": f"{self._last_ret:.0f}"}
            self._bar.set_postfix({**shown, "sps": f"{sps:.0f}"})
        else:
            said = "" if no_reward else f", training return {self._last_ret:.1f}"
            self.hooks.log.info(f"{n}/{self.cfg.total_steps} transitions, {sps:.0f} steps/s{to_go}{said}")
        self._last_log, self._last_log_t = n, now

    # ------------------------------------------------------------------ outputs
    def export(self, path: Path, evaluation: Mapping[str, object] | None = None) -> Path:
        """Export the policy (checked against PyTorch); version = transitions consumed; with
        `evaluation` in its metadata (policy_best.onnx: the evaluation that made it the best).

        A policy that fails the exporter's check is still exported, with a warning: an actor
        waiting for this version must not wait forever.
        """
        check_finite(self.learner, self.step, path.name)
        # training_step and version: env steps (transitions consumed), as the direct loop's
        metadata = policy_metadata(self.cfg, training_step=self.step, version=self.step, trainer="learner",
                                   control_period_s=self.control_period)
        return export_policy_or_warn(self.learner.actor, path, self.hooks.log.warning,
                                     action_low=self.scaler.low, action_high=self.scaler.high,
                                     metadata={**metadata, **(evaluation or {})})

    def _publish_policy(self) -> None:
        self.hooks.publish_policy(self.export(self.policy_path), self.step)

    def _elapsed(self) -> float:
        return self._wall_offset + time.perf_counter() - self._t0

    def _evaluate(self) -> tuple[float, float]:
        mean, std = self.evaluator(self.step, PolicyFn(self.learner.actor, self.scaler), self.logger,
                                   self._elapsed(),
                                   export_best=lambda meta: self.export(self.run_dir / "policy_best.onnx",
                                                                        meta),
                                   say=self._bar.write if self._bar is not None else self.hooks.log.info,
                                   stop=self.stop)
        self.last_eval = (self.step, mean, std)
        return mean, std

    def _save_point(self) -> tuple:
        """What tells two checkpoints of this run apart: every update, evaluation and transition
        moves one of these (a checkpoint at the same point would be the same, bar its wall time)."""
        return (self.step, dataclasses.asdict(self.pending) if self.pending is not None else None,
                self._periodic_due, self.last_eval, self.evaluator.best_return)

    @property
    def replay_base_path(self) -> Path:
        return self.run_dir / REPLAY_BASE

    def save(self, light: bool = False, stop: threading.Event | None = None) -> bool:
        """Checkpoint, then truncate the replay journal to what the checkpoint does not hold; False
        (nothing written) when the checkpoint on disk is at this point already: a stop during a
        periodic checkpoint, or during the start, wrote the same file again (seconds for a large
        replay buffer, against the 2 s a node has to stop).

        `light` (a stop): without the replay buffer's rows, which the full checkpoint on disk (kept
        as replay_base.pt, a hard link: no copy) and the journal's records since it hold; its
        write no longer grows with the buffer (Ant's 1M transitions: 896 MB). Full where there is
        no journal or no full checkpoint to refer to. A full checkpoint drops replay_base.pt.
        `stop`: :class:`CheckpointAborted` when it is set while the file is written (nothing
        changed: the checkpoint on disk, replay_base.pt and the journal are as they were)."""
        if self._saved_at == self._save_point() and (light or self._base_step is None):
            return False  # (a full one replaces a light one at the same point: a finished run's)
        check_finite(self.learner, self.step, self.checkpoint_path.name)
        light = light and self.journal is not None and self._keep_replay_base()
        if light:  # the journal's records since the base are part of this checkpoint: on the disk first
            self.journal.make_durable()
        runner = self.runner.state_dict(replay_rows=not light)
        if light:
            runner["replay"].update(base=REPLAY_BASE, base_step=self._base_step)
        save_checkpoint(self.checkpoint_path, {
            "config": to_dict(self.cfg), "step": self.step, "runner": runner,
            **torch_rng_state(), "acks": {k: tuple(v) for k, v in self.acks.items()},
            "episode_stats": dict(self.episode_stats), **self.evaluator.state(),
            "expert_return": self.evaluator.expert_return,
            "wall": self._elapsed(), "source": GRAPH_SOURCE,
            "pending": dataclasses.asdict(self.pending) if self.pending is not None else None,
            "periodic_due": self._periodic_due, "last_eval": self.last_eval,
            "void_steps": self.void_steps, "first_batches": dict(self.first_batches),
            "policy_io": policy_io(self.obs_dim, self.act_dim, self.scaler.low, self.scaler.high,
                                   self.control_period, recorded_joints(self.cfg.env_id)),
        }, stop=stop)
        if not light:
            self._base_step = None
            self.replay_base_path.unlink(missing_ok=True)
        if self.journal is not None:
            self.journal.truncate(self.step if self._base_step is None else self._base_step)
        self._saved_at = self._save_point()
        return True

    def _keep_replay_base(self) -> bool:
        """Whether a light checkpoint can refer to a full one's replay: replay_base.pt in place (the
        full checkpoint on disk, hard-linked) or there already (the checkpoint on disk is light)."""
        span = self.cfg.checkpoint_every or LIGHT_SPAN
        if self._base_step is not None:
            return self.step - self._base_step <= span
        on_disk = self._saved_at[0] if self._saved_at is not None else None  # the checkpoint's step
        if on_disk is None or self.step - on_disk > span or not self.checkpoint_path.is_file():
            return False
        try:
            self.replay_base_path.unlink(missing_ok=True)
            os.link(self.checkpoint_path, self.replay_base_path)
        except OSError:  # a file system without hard links: a full checkpoint then
            return False
        self._base_step = on_disk
        return True

    def _restore(self) -> None:
        start_over = "use another run_dir (or resume:=false to start over)"
        state = load_checkpoint(self.checkpoint_path, start_over)
        if state.get("source") != GRAPH_SOURCE:
            raise CheckpointError(f"checkpoint {self.checkpoint_path} was written by the direct loop, not by "
                                  f"the learner node; {start_over}")
        changes = resume_changes(state, to_dict(self.cfg), self.checkpoint_path, start_over)
        replay = state["runner"]["replay"]
        if "base" in replay:  # light: the rows are the full checkpoint's, then the journal's
            base_path = self.run_dir / replay["base"]
            if not base_path.is_file():
                raise CheckpointError(f"checkpoint {self.checkpoint_path} was written at a stop without its "
                                      f"replay buffer, whose rows are in {base_path}, which is missing; "
                                      f"{start_over}")
            base = load_checkpoint(base_path, start_over)["runner"]["replay"]
            # the learner's state from this checkpoint, the buffer's once the journal is open
            state["runner"]["replay"] = {**base, "generator": replay["generator"]}
            self._base_step, self._light_replay, self._base_replay = int(replay["base_step"]), replay, base
        else:
            self.replay_base_path.unlink(missing_ok=True)  # of a light one a full one replaced
        restore_runner(self.runner, state, to_dict(self.cfg), self.checkpoint_path, start_over)
        if changes:
            self.hooks.log.info(changes_note(changes))
        rescaled = expert_return_note(state, self.evaluator.expert_return)
        if rescaled:
            self.hooks.log.warning(rescaled)
        self.step = state["step"]
        restore_torch_rng(state)
        self.acks = {int(k): SourceAck(*v) for k, v in state.get("acks", {}).items()}
        self.episode_stats = dict(state.get("episode_stats", {}))
        self.evaluator.restore(state)
        self._wall_offset = state.get("wall", 0.0)
        pending = state.get("pending")
        self.pending = Plan(**pending) if pending else None
        self._periodic_due = bool(state.get("periodic_due", False))
        self.void_steps = int(state.get("void_steps", 0))
        self.first_batches = {int(k): int(v) for k, v in state.get("first_batches", {}).items()}
        # a finished run started again reports its last evaluation instead of running another
        self.last_eval = tuple(state.get("last_eval", self.last_eval))
        self._saved_at = self._save_point()

    def checkpoint_if_stopped(self) -> bool:
        """After a stop request cut the run short: write the checkpoint, a light one (unless the one
        on disk is at this point already); True when the checkpoint holds the stop's point."""
        if not self.stop.is_set() or self.runner is None or self.result is not None:
            return False
        self.save(light=True)
        return True

    def finish(self) -> TrainResult:
        """After ``total_steps``: final evaluation, checkpoint, export, learning-curve PNG."""
        cfg = self.cfg
        step, mean, std = self.last_eval
        if step != self.step:
            mean, std = self._evaluate()
        self.save()
        self._publish_policy()
        self.logger.close()
        from opolo_ros.plot import draw_run_curve

        title = f"{cfg.algo.upper()} through the ROS graph: {task_label(cfg.env_id)}, seed {cfg.seed}"
        self.plot_path = draw_run_curve(self.run_dir, title, self.evaluator.expert_return,
                                        self.hooks.log.warning)
        ev = self.evaluator
        self.result = TrainResult(self.run_dir, self.step, mean, std, ev.normalised(mean), ev.expert_return,
                                  ev.random_return, self.policy_path, ev.last_imitation)
        evaluated = evaluated_text(mean, std, ev.last_imitation)
        void = f" ({self.void_steps} of them void: the simulation diverged)" if self.void_steps else ""
        self.hooks.log.info(f"done: {self.step} transitions{void}, {evaluated}, run folder {self.run_dir}")
        if 2 * self.void_steps > self.step:
            self.hooks.log.warning(f"most steps of this run diverged ({self.void_steps} of {self.step}): the "
                                   "policy learned from few real transitions; check the model (actuator "
                                   "gains and ranges, timestep)")
        return self.result

    def close(self) -> None:
        """Close the files (journal, logs), the env and the run folder's lock; the trainer is not
        used afterwards. Each is closed even when one before it fails (a full disk: TensorBoard's
        writer raises its failed write on close); the first error is raised after all of them."""
        first: BaseException | None = None
        for close in (self.close_progress_bar, getattr(self.journal, "close", None),
                      getattr(self.logger, "close", None), self.env.close, self._lock.release):
            if close is None:
                continue
            try:
                close()
            except Exception as err:
                first = first or err
        if first is not None:
            raise first
