"""The direct (no-ROS) training loop: env -> actor -> replay -> learner.

It is the yardstick the ROS graph is held to. Seedable (one seed sets Python, NumPy, torch and the
env), resumable from the run folder's checkpoint (learner, optimisers, normalisers, replay, RNGs and
the env's physics state), with a progress bar, TensorBoard scalars and a final evaluation.
SIGINT/SIGTERM stop it between two gradient updates (inside an update burst too): a checkpoint
with the updates still due and the policy are written and `TrainingInterrupted` is raised; running
it again resumes there, with the same updates as an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import math
import random
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from opolo_ros.algo.config import RunConfig, to_dict
from opolo_ros.algo.schedule import Plan
from opolo_ros.data.demos import (
    Episode,
    ExpertDataset,
    cut_last_note,
    load_episodes,
    rate_note,
    recorded_on_other_task,
    short_episodes_note,
    split_names,
)
from opolo_ros.data.replay import ReplayBuffer
from opolo_ros.export.onnx_policy import (
    EPISODE_STEPS_KEY,
    JOINT_NAMES_KEY,
    NUM_DEMOS_KEY,
    TIME_FEATURE_STEPS_KEY,
    export_policy_or_warn,
)
from opolo_ros.signals import stop_on_signals
from opolo_ros.sim.actions import ActionScaler
from opolo_ros.sim.envs import (
    EvaluationInterrupted,
    add_time_feature,
    get_env_state,
    score_line,
    set_env_state,
)
from opolo_ros.sim.imitation import imitation_score
from opolo_ros.sim.task_ids import is_mjcf, task_label
from opolo_ros.sim.tasks import (
    check_joint_order,
    control_period,
    demo_joints,
    env_joint_names,
    make_task_env,
    max_steps_of,
    mjcf_joint_names,
    task_control_period,
    time_limit,
    with_joints_hint,
)
from opolo_ros.train.checkpoint import (
    GRAPH_SOURCE,
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
    trainer_of,
)
from opolo_ros.train.logger import RunLogger, TimeToGo, purge_step
from opolo_ros.train.run_eval import RunEvaluator, stop_at_return_note
from opolo_ros.train.runfolder import set_aside_previous_run, write_run_config
from opolo_ros.train.runlock import RunFolderLock
from opolo_ros.train.runner import UpdateRunner, make_learner, make_schedule, untrained_warning


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by a signal after writing its checkpoint; the same command resumes it."""

    def __init__(self, step: int, checkpoint: Path, same_command_resumes: bool = True) -> None:
        how = ("run the same command again to resume" if same_command_resumes else
               "run the command again without --no-resume to resume (with it, the run starts over)")
        super().__init__(f"stopped at env step {step}; checkpoint {checkpoint} written, {how}")
        self.step, self.checkpoint = step, checkpoint


@dataclass
class TrainResult:
    run_dir: Path
    env_steps: int
    eval_mean: float
    eval_std: float
    normalised: float
    expert_return: float
    random_return: float
    policy_path: Path
    # a task without a reward (MJCF): the last imitation distance and the random policy's
    imitation: tuple[float, float] | None = None

    def summary_lines(self, episodes: int, algo: str) -> list[str]:
        """The final evaluation as the run's last lines (the direct loop's and the graph's):
        the imitation distance of an MJCF robot, else the return and, for OPOLO, the score."""
        if self.imitation is not None:
            distance, random_distance = self.imitation
            return [f"imitation distance: {distance:.3f} (random actions: {random_distance:.3f}; 0 = the "
                    f"demonstrations' states, {episodes} deterministic episodes), score "
                    f"{imitation_score(distance, random_distance):.3f}"]
        if math.isnan(self.eval_mean):
            return ["no evaluation: the task has no reward (an MJCF file), so only the policy is the result"]
        lines = [f"evaluation return: {self.eval_mean:.1f} +- {self.eval_std:.1f} "
                 f"({episodes} deterministic episodes)"]
        if algo == "opolo":
            lines.append(score_line(self.normalised, self.expert_return, self.random_return))
        return lines


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def prepare_demos(cfg: RunConfig, max_steps: int) -> list[Episode]:
    """Load `num_demos` state-only episodes, with the time feature appended when the run uses it."""
    if not cfg.demos:
        raise ValueError("algo 'opolo' needs demonstrations: set 'demos' to a bag, folder or .npz "
                         "(--demos PATH, or --config config/<task>.yaml for a task's shipped ones)")
    episodes = load_episodes(cfg.demos, **cfg.demo_options())[: cfg.num_demos or None]
    if cfg.time_feature:
        episodes = [Episode(add_time_feature(ep.obs, max_steps), ep.ret, ep.meta) for ep in episodes]
    return episodes


def demos_read_by(cfg: RunConfig, joints: Sequence[str], obs_dim: int) -> RunConfig:
    """`cfg` with ``demos_joints`` set to the model's `joints` when its JointState bag is read by
    them (:func:`demo_joints`), else `cfg` itself. The run's config.yaml records the joints it read
    by, as the graph's learner does: a run resumed by the other way kept a config-until-step file."""
    if cfg.algo != "opolo" or cfg.demos_joints or not demo_joints(cfg, joints, obs_dim):
        return cfg
    return dataclasses.replace(cfg, demos_joints=",".join(joints))


def expert_data(cfg: RunConfig, obs_dim: int, max_steps: int, joints: Sequence[str] = (),
                read: RunConfig | None = None) -> tuple[list[Episode], ExpertDataset | None]:
    """The run's demonstrations (OPOLO; none for TD3) and the (s, s') data over them, checked against
    the environment's `obs_dim` (a ValueError naming both for another task's demonstrations) and,
    for a JointState bag, ``demos_joints`` against the order of the model's `joints`; without
    ``demos_joints`` such a bag is read by the model's joint names (:func:`demo_joints`)."""
    if cfg.algo == "opolo" and cfg.demos_joints:
        check_joint_order(split_names(cfg.demos_joints), joints,
                          Path(cfg.env_id).name if is_mjcf(cfg.env_id) else cfg.env_id)
    read = read or demos_read_by(cfg, joints, obs_dim)  # (given: the caller's, read once)
    by_model = read is not cfg
    try:
        demos = prepare_demos(read, max_steps) if cfg.algo == "opolo" else []
    except ValueError as err:
        if by_model:
            raise with_joints_hint(err, ",".join(joints), cfg.env_id) from None
        raise
    if not demos:
        return demos, None
    try:
        data = ExpertDataset(demos, obs_dim, seed=cfg.seed + 1)
    except ValueError as err:
        raise ValueError(f"demonstrations {cfg.demos} do not fit {cfg.env_id}: {err}") from None
    other = recorded_on_other_task(cfg.demos, demos, cfg.env_id)
    if other:
        raise ValueError(other)
    return demos, data


def check_demonstrations(cfg: RunConfig) -> None:
    """The direct loop's start-up check (:func:`expert_data`) alone: the demonstrations load and fit
    the task's observations (with the time feature when the run uses it). A graph runs it before any
    node starts: its learner, given another task's demonstrations, would only reject them and wait."""
    if cfg.algo != "opolo":
        return
    from opolo_ros.sim.tasks import make_task_env, max_steps_of

    env = make_task_env(cfg.env_id, time_feature=cfg.time_feature, max_episode_steps=cfg.max_episode_steps)
    try:
        expert_data(cfg, int(env.observation_space.shape[0]), max_steps_of(env), env_joint_names(env))
    finally:
        env.close()


def recorded_joints(env_id: str) -> tuple[str, ...]:
    """The joints a policy of the task records (metadata ``joint_names``, a checkpoint's policy_io):
    an MJCF task's observed joints, read from its file (() where it cannot be read); none for a
    Gymnasium task, whose actor reads them from the task."""
    return mjcf_joint_names(env_id) if is_mjcf(env_id) else ()


def policy_metadata(cfg: RunConfig, *, training_step: int, version: int, trainer: str,
                    control_period_s: float | None,
                    joint_names: Sequence[str] | None = None) -> dict[str, object]:
    """The ONNX metadata a trained policy carries besides its dimensions and bounds (README "ONNX
    policy contract"), the same for both trainers. `control_period_s` (the env's dt; None: not
    known, left out) tells a deploy actor the rate to command at; `joint_names` (None: the task
    file's, :func:`recorded_joints`) the order of its observed joints."""
    meta: dict[str, object] = {"env_id": cfg.env_id, "training_step": training_step, "version": version,
                               "seed": cfg.seed, "source": f"opolo_ros {trainer} {cfg.algo}",
                               "time_feature": int(cfg.time_feature)}
    if control_period_s is not None:  # 12 digits: 0.002 * 5 is 0.01, not 0.010000000000000002
        meta["control_period_s"] = float(f"{control_period_s:.12g}")
    steps = time_limit(cfg.env_id, cfg.max_episode_steps) if cfg.time_feature else None
    if steps:  # the T of its time feature, 1 - t/T: a deploy actor's time_feature_clock
        meta[TIME_FEATURE_STEPS_KEY] = steps
    names = recorded_joints(cfg.env_id) if joint_names is None else joint_names
    if is_mjcf(cfg.env_id) and names:  # a deploy actor checks its joints
        meta[JOINT_NAMES_KEY] = ",".join(names)
    if is_mjcf(cfg.env_id):  # evaluate's defaults: the episodes and demonstrations it was measured on
        meta[EPISODE_STEPS_KEY] = time_limit(cfg.env_id, cfg.max_episode_steps)
    if cfg.algo == "opolo":
        meta[NUM_DEMOS_KEY] = cfg.num_demos
    return meta


def run_finished(step: int, best_return: float, cfg: RunConfig) -> bool:
    """All `total_steps` taken, or an evaluation reached `stop_at_return` (both trainers)."""
    return step >= cfg.total_steps or best_return >= cfg.stop_at_return


class PolicyFn:
    """Deterministic env-unit policy for evaluation, from the learner's actor."""

    def __init__(self, actor: torch.nn.Module, scaler: ActionScaler) -> None:
        self.actor, self.scaler = actor, scaler

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return self.scaler.to_env(actor_action(self.actor, obs))


def actor_action(actor: torch.nn.Module, obs: np.ndarray) -> np.ndarray:
    """pi(s) in [-1, 1] for one observation, on whatever device the actor lives."""
    device = next(actor.parameters()).device
    with torch.no_grad():
        return actor(torch.as_tensor(obs, dtype=torch.float32, device=device).unsqueeze(0))[0].cpu().numpy()


class _LearnerOnly:
    """A runner stand-in that restores only the learner's networks and normalisers from a checkpoint."""

    def __init__(self, learner: object) -> None:
        self.learner = learner

    def load_state_dict(self, state: dict) -> None:
        self.learner.load_state_dict(state["learner"])


def run_facts(cfg: RunConfig, saved: dict[str, object]) -> RunConfig:
    """`cfg` with the seed and time feature of the run that wrote a checkpoint (its saved config):
    what the exported policy's metadata says of it, whatever config the networks are built from."""
    return dataclasses.replace(cfg, seed=int(saved.get("seed", cfg.seed)),
                               time_feature=bool(saved.get("time_feature", cfg.time_feature)))


PolicyIO = tuple[int, int, ActionScaler, float | None]  # obs_dim, act_dim, bounds, control period


def policy_io_of(state: dict, cfg: RunConfig, checkpoint: Path) -> PolicyIO:
    """The policy's observation and action sizes, action bounds and control period: the
    checkpoint's record of them, or, for a checkpoint written before checkpoints held them, the
    task's environment (an MJCF task's file, which a run folder moved to another machine may have
    left behind)."""
    from opolo_ros.sim.task_ids import is_mjcf
    from opolo_ros.sim.tasks import make_task_env

    io = state.get("policy_io")
    if io is not None:
        period = io.get("control_period_s")
        return (int(io["obs_dim"]), int(io["act_dim"]),
                ActionScaler(np.array(io["action_low"]), np.array(io["action_high"])),
                float(period) if period is not None else task_control_period(cfg.env_id))
    if is_mjcf(cfg.env_id) and not Path(cfg.env_id).is_file():
        raise FileNotFoundError(f"checkpoint {checkpoint} does not record the policy's sizes and action "
                                f"bounds (written before checkpoints did), so export takes them from the "
                                f"task's MJCF file, and {cfg.env_id} is not there: give the file with "
                                f"--set env_id=path/to/{Path(cfg.env_id).name}")
    env = make_task_env(cfg.env_id, time_feature=cfg.time_feature)  # a Gymnasium id or an MJCF file
    try:
        return (int(env.observation_space.shape[0]), int(env.action_space.shape[0]),
                ActionScaler.from_space(env.action_space), control_period(env))
    finally:
        env.close()


def restore_config(cfg: RunConfig, saved: dict) -> dict[str, object]:
    """`cfg` as a checkpoint's config is compared with on export: an MJCF file given by another path
    than the run's (the run folder moved to another machine) is the run's task when its file name is."""
    from opolo_ros.sim.task_ids import same_task_name

    config = to_dict(cfg)
    if same_task_name(str(saved["env_id"]), cfg.env_id):
        config["env_id"] = saved["env_id"]
    return config


def export_checkpoint(cfg: RunConfig, checkpoint: Path, out: Path, state: dict | None = None) -> Path:
    """The policy of a checkpoint (`state`: its content, loaded already) as ONNX. Only the networks
    are rebuilt: no demonstrations, replay buffer, environment steps, nor environment (the
    checkpoint records the sizes and action bounds; an older one without them takes them from the
    environment)."""
    state = load_checkpoint(checkpoint) if state is None else state
    cfg = run_facts(cfg, state["config"])
    obs_dim, act_dim, scaler, period = policy_io_of(state, cfg, checkpoint)
    joints = (state.get("policy_io") or {}).get("joint_names")  # None: a checkpoint from before it did
    if joints is None or (not joints and is_mjcf(cfg.env_id)):
        joints = recorded_joints(cfg.env_id)
        if not joints and is_mjcf(cfg.env_id):
            DirectTrainer._warn(f"the policy's metadata will not name its joints: the checkpoint does not "
                                f"record them and {cfg.env_id} is not here (give it with --set "
                                f"env_id=path/to/{Path(cfg.env_id).name}); a deploy actor cannot check the "
                                "order of its joints against it")
    # on the CPU, where the checkpoint is loaded: a run trained on a GPU exports on a machine without one
    learner = make_learner(dataclasses.replace(cfg, device="cpu"), obs_dim, act_dim)
    restore_runner(_LearnerOnly(learner), state, restore_config(cfg, state["config"]), checkpoint,
                   "export it with the run's own config (the config.yaml next to it)")
    return export_actor(learner.actor, scaler, cfg, state["step"], out, trainer=trainer_of(state),
                        control_period_s=period, joint_names=joints)


def export_actor(actor: torch.nn.Module, scaler: ActionScaler, cfg: RunConfig, step: int, out: Path, *,
                 control_period_s: float | None, trainer: str = "direct",
                 joint_names: Sequence[str] | None = None,
                 evaluation: Mapping[str, object] | None = None) -> Path:
    """The ONNX export of `actor` at env step `step` (checked; a failed check warns), its metadata
    naming the `trainer` that trained it: the direct loop's, or a checkpoint's (export_checkpoint),
    the control period it was trained at (None: not known, left out), its joints (None: the
    task file's) and `evaluation` (policy_best.onnx: the evaluation that made it the best)."""
    metadata = policy_metadata(cfg, training_step=step, version=step, trainer=trainer,
                               control_period_s=control_period_s, joint_names=joint_names)
    return export_policy_or_warn(actor, out, DirectTrainer._warn, action_low=scaler.low,
                                 action_high=scaler.high, metadata={**metadata, **(evaluation or {})})


class DirectTrainer:
    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        if cfg.torch_threads > 0:
            torch.set_num_threads(cfg.torch_threads)
        seed_everything(cfg.seed)
        self.run_dir = Path(cfg.run_dir)
        self.env = make_task_env(cfg.env_id, seed=cfg.seed, time_feature=cfg.time_feature,
                                 max_episode_steps=cfg.max_episode_steps)
        obs_dim = int(self.env.observation_space.shape[0])
        act_dim = int(self.env.action_space.shape[0])
        self.max_steps = max_steps_of(self.env)
        self.scaler = ActionScaler.from_space(self.env.action_space)
        self.control_period = control_period(self.env)  # the exported policies' control_period_s
        joints = env_joint_names(self.env)
        read = demos_read_by(cfg, joints, obs_dim)  # the config.yaml records the joints read by
        self.demos, experts = expert_data(cfg, obs_dim, self.max_steps, joints, read)
        self.cfg = cfg = read
        self.learner = make_learner(cfg, obs_dim, act_dim)
        self.schedule = make_schedule(cfg)
        replay = ReplayBuffer(obs_dim, act_dim, min(cfg.schedule.buffer_size, max(cfg.total_steps, 1)),
                              seed=cfg.seed + 2)
        self.runner = UpdateRunner(self.learner, self.schedule, replay, experts)
        self.rng = np.random.default_rng(cfg.seed + 3)
        self.policy = PolicyFn(self.learner.actor, self.scaler)
        self.step = 0
        self.episode_return, self.episode_len, self.episodes_done = 0.0, 0, 0
        self.obs, _ = self.env.reset(seed=cfg.seed)
        self.evaluator = RunEvaluator(cfg, cfg.eval_max_episode_steps or self.max_steps)
        self.evaluator.use_demonstrations(self.demos, obs_dim)
        self.wall_offset = 0.0
        self._t0 = time.perf_counter()
        self._last_eval, self._last_eval_step = (math.nan, math.nan), -1
        self.stop = threading.Event()  # set by SIGINT/SIGTERM during `train`
        self.pending: Plan | None = None  # updates of this step's plan not run yet (a stop came)
        self.eval_due = False  # this step's evaluation was cut short by a stop: done on resume

    # ------------------------------------------------------------------ checkpoints
    @property
    def checkpoint_path(self) -> Path:
        return self.run_dir / "checkpoint.pt"

    def save(self) -> None:
        check_finite(self.learner, self.step, self.checkpoint_path.name)
        save_checkpoint(self.checkpoint_path, {
            "config": to_dict(self.cfg), "step": self.step, "runner": self.runner.state_dict(),
            "rng": self.rng.bit_generator.state, **torch_rng_state(),
            "env": get_env_state(self.env), "obs": self.obs,
            "episode": (self.episode_return, self.episode_len, self.episodes_done),
            **self.evaluator.state(), "expert_return": self.evaluator.expert_return,
            "wall": self.wall_offset + self._elapsed(),
            "pending": dataclasses.asdict(self.pending) if self.pending is not None else None,
            "eval_due": self.eval_due,
            "policy_io": policy_io(self.learner.obs_dim, self.learner.act_dim, self.scaler.low,
                                   self.scaler.high, self.control_period, recorded_joints(self.cfg.env_id)),
        })

    def restore(self, path: Path | None = None) -> None:
        path = path or self.checkpoint_path
        start_over = "start over in another run_dir (or with --no-resume)"
        state = load_checkpoint(path, start_over)
        if state.get("source") == GRAPH_SOURCE:
            raise CheckpointError(f"checkpoint {path} was written by the learner node (opolo-ros launch "
                                  f"sim_train), not by the direct loop; {start_over}")
        changes = resume_changes(state, to_dict(self.cfg), path, start_over)
        restore_runner(self.runner, state, to_dict(self.cfg), path, start_over)
        if changes:
            tqdm.write(changes_note(changes))
        rescaled = expert_return_note(state, self.evaluator.expert_return)
        if rescaled:
            self._warn(rescaled)
        self.step = state["step"]
        self.rng.bit_generator.state = state["rng"]
        restore_torch_rng(state)
        set_env_state(self.env, state["env"])
        self.obs = state["obs"]
        self.episode_return, self.episode_len, self.episodes_done = state["episode"]
        self.evaluator.restore(state)
        self.wall_offset = state["wall"]
        self.pending = Plan(**state["pending"]) if state.get("pending") else None
        self.eval_due = bool(state.get("eval_due", False))

    # ------------------------------------------------------------------ loop
    @property
    def finished(self) -> bool:
        return run_finished(self.step, self.evaluator.best_return, self.cfg)

    def _elapsed(self) -> float:
        return time.perf_counter() - self._t0

    def select_action(self) -> np.ndarray:
        """Action in [-1, 1]: uniform during warm-up, else pi(s) + N(0, sigma), clipped."""
        act_dim = self.learner.act_dim
        if self.schedule.random_action(self.step):
            return self.rng.uniform(-1.0, 1.0, act_dim).astype(np.float32)
        a = actor_action(self.learner.actor, self.obs)
        noise = self.rng.normal(0.0, self.cfg.schedule.exploration_noise, act_dim)
        return np.clip(a + noise, -1.0, 1.0).astype(np.float32)

    def env_step(self) -> dict[str, torch.Tensor]:
        action = self.select_action()
        next_obs, reward, term, trunc, info = self.env.step(self.scaler.to_env(action))
        if info.get("diverged"):  # a blown-up sim's step counts but is no transition (DivergenceGuard)
            reward = 0.0
        else:
            self.runner.replay.add(self.obs, action, next_obs, reward, term, trunc)
        self.step += 1
        self.episode_return += float(reward)
        self.episode_len += 1
        self.obs = next_obs
        metrics, self.pending = self.runner.run_until_stopped(self.schedule.plan(self.step), self.stop)
        if term or trunc:
            metrics["train/episode_return"] = torch.tensor(self.episode_return)
            metrics["train/episode_length"] = torch.tensor(float(self.episode_len))
            self.episodes_done += 1
            self.episode_return, self.episode_len = 0.0, 0
            self.obs, _ = self.env.reset()
        return metrics

    def export(self, path: Path, evaluation: Mapping[str, object] | None = None) -> Path:
        check_finite(self.learner, self.step, path.name)
        return export_actor(self.learner.actor, self.scaler, self.cfg, self.step, path,
                            control_period_s=self.control_period, evaluation=evaluation)

    @staticmethod
    def _warn(text: str) -> None:
        tqdm.write(f"warning: {text}", file=sys.stderr)

    def train(self, resume: bool = True) -> TrainResult:
        untrained = untrained_warning(self.cfg, self.schedule)
        if untrained:
            self._warn(untrained)
        notes = (rate_note(self.demos, self.control_period),
                 short_episodes_note(self.demos, self.max_steps if self.cfg.time_feature else None),
                 cut_last_note(self.demos), stop_at_return_note(self.cfg))
        for note in filter(None, notes):
            self._warn(note)
        lock = RunFolderLock(self.run_dir).acquire()
        try:
            return self._train(resume)
        finally:
            lock.release()

    def _train(self, resume: bool) -> TrainResult:
        cfg = self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not resume:
            moved = set_aside_previous_run(self.run_dir)
            if moved is not None:
                tqdm.write(f"starting over: the previous run's files are in {moved}")
        nothing_to_train = False
        if resume and self.checkpoint_path.is_file():
            self.restore()
            self._recall_last_evaluation()
            nothing_to_train = self.finished and self.pending is None and not self.eval_due
            if nothing_to_train:
                tqdm.write(f"{self.run_dir} holds a finished run (step {self.step}): nothing to train; "
                           "its result again (--no-resume or another run_dir trains anew)")
            else:  # as the graph's learner says it
                tqdm.write(f"resumed from {self.checkpoint_path} at step {self.step}")
        else:  # where the run goes, from its start (the final lines said it only at the end)
            tqdm.write(f"new run of {cfg.total_steps} steps in {self.run_dir}")
        # after the restore: a checkpoint refused for this config keeps the config it was written
        # with, and so does a finished run run again
        if not nothing_to_train:
            kept = write_run_config(self.run_dir, to_dict(cfg), self.step)
            if kept is not None:
                tqdm.write(f"the config it ran under until now is kept as {kept}")
        logger = RunLogger(self.run_dir, purge_from=purge_step(self.step))
        self._t0 = time.perf_counter()
        # A bar on a terminal; into a file or a pipe (a queue job's log, `| tee`), where its carriage
        # returns made 50 KB per 3000 steps, a line per 1000 steps instead (as the graph's learner)
        lines = cfg.progress and not sys.stderr.isatty()
        bar = tqdm(total=cfg.total_steps, initial=self.step, disable=not cfg.progress or lines,
                   desc=f"{cfg.algo} {cfg.env_id}", unit="step", dynamic_ncols=True)
        last_log, last_log_t, last_ret = self.step, time.perf_counter(), math.nan
        eta = TimeToGo(cfg.total_steps, after=cfg.schedule.warmup_steps)
        eta.mark(last_log, last_log_t)
        with stop_on_signals(self.stop):  # the loop and the last writes (a first signal asks to stop)
            try:
                if self.pending is not None:  # stopped inside a step's updates: finish that step
                    _, self.pending = self.runner.run_until_stopped(self.pending, self.stop)
                    if self.pending is None:
                        self._periodic(logger, bar)
                elif self.eval_due:  # stopped inside this step's evaluation: do it now
                    self._periodic(logger, bar)
                while not self.finished and not self.stop.is_set():
                    metrics = self.env_step()
                    bar.update(1)
                    if "train/episode_return" in metrics:
                        last_ret = float(metrics["train/episode_return"])
                        logger.scalars(self.step, {k: metrics.pop(k) for k in
                                                   ("train/episode_return", "train/episode_length")})
                    if self.pending is not None:
                        break  # the rest of this step's updates, and its periodic work, on resume
                    if self.step - last_log >= 1000 or self.step == cfg.total_steps:
                        now = time.perf_counter()
                        sps = (self.step - last_log) / max(now - last_log_t, 1e-9)
                        logger.scalars(self.step, {**metrics, "perf/steps_per_sec": sps})
                        last_log, last_log_t = self.step, now
                        no_reward = is_mjcf(cfg.env_id)  # its returns are 0: not worth showing
                        bar.set_postfix({**({} if no_reward else {"ret": f"{last_ret:.0f}"}),
                                         "sps": f"{sps:.0f}"})
                        to_go = eta.mark(self.step, now)
                        if lines:
                            said = "" if no_reward else f", training return {last_ret:.1f}"
                            print(f"{cfg.algo} {cfg.env_id}: {self.step}/{cfg.total_steps} steps, "
                                  f"{sps:.0f} steps/s{to_go}{said}", file=sys.stderr)
                    self._periodic(logger, bar)
                if self.finished and self.pending is None and self._last_eval_step != self.step:
                    try:  # the final evaluation, which a signal ends as it ends the periodic ones
                        if self.stop.is_set():  # (one during the last step's checkpoint or export)
                            raise EvaluationInterrupted
                        self._log_eval(logger, None, self.stop)
                    except EvaluationInterrupted:
                        self.eval_due = True
            finally:
                bar.close()
            # The last writes under the same handling: a first signal here only asks to stop (they
            # were outside it, and a Ctrl-C as the run ended left no policy.onnx); a second aborts
            if self.stop.is_set() and (not self.finished or self.pending is not None or self.eval_due):
                self.save()
                self.export(self.run_dir / "policy.onnx")
                logger.close()
                raise TrainingInterrupted(self.step, self.checkpoint_path, same_command_resumes=resume)
            mean, std = self._last_eval
            self.save()
            policy_path = self.export(self.run_dir / "policy.onnx")
            logger.close()
            from opolo_ros.plot import draw_run_curve

            draw_run_curve(self.run_dir, f"{cfg.algo.upper()}: {task_label(cfg.env_id)}, seed {cfg.seed}",
                           self.evaluator.expert_return,
                           lambda text: tqdm.write(f"warning: {text}", file=sys.stderr))
        ev = self.evaluator
        return TrainResult(self.run_dir, self.step, mean, std, ev.normalised(mean), ev.expert_return,
                           ev.random_return, policy_path, ev.last_imitation)

    def _recall_last_evaluation(self) -> None:
        """A resumed run that ends where its checkpoint is (a finished run run again) reports the
        evaluation eval.csv holds for that step instead of appending a second one."""
        rows = RunLogger.read_evaluations(self.run_dir / "eval.csv")
        if rows and int(rows[-1]["env_step"]) == self.step and self.pending is None:
            self._last_eval = (rows[-1]["return_mean"], rows[-1]["return_std"])
            self._last_eval_step = self.step

    def _periodic(self, logger: RunLogger, bar: tqdm | None) -> None:
        """Evaluation, checkpoint and export, each when due at this step. A stop request ends the
        evaluation at once; it is then still due (``eval_due``, checkpointed) and done on resume."""
        cfg = self.cfg
        if cfg.eval_every and self.step % cfg.eval_every == 0:
            try:
                self._log_eval(logger, bar, self.stop)
            except EvaluationInterrupted:
                self.eval_due = True
                return  # the stop path writes the checkpoint and the policy
        self.eval_due = False
        if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0:
            self.save()
        if cfg.export_every and self.step % cfg.export_every == 0:
            self.export(self.run_dir / "policy.onnx")

    def _log_eval(self, logger: RunLogger, bar: tqdm | None,
                  stop: threading.Event | None = None) -> tuple[float, float]:
        mean, std = self.evaluator(self.step, self.policy, logger, self.wall_offset + self._elapsed(),
                                   export_best=lambda meta: self.export(self.run_dir / "policy_best.onnx",
                                                                        meta),
                                   say=bar.write if bar is not None else tqdm.write, stop=stop)
        self._last_eval, self._last_eval_step = (mean, std), self.step
        return mean, std


def train_direct(cfg: RunConfig, resume: bool = True) -> TrainResult:
    return DirectTrainer(cfg).train(resume=resume)

