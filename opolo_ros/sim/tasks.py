"""The simulated task of a sim bridge: a Gymnasium MuJoCo id or any MJCF file, plus its joints.

A Gymnasium id (``InvertedPendulum-v5``) gives the task with its reward and termination. An MJCF
file (``robot.xml``) gives a generic task: observation = all hinge/slide joint positions then
velocities (MuJoCo's qpos-then-qvel order, the convention of ``ObservationSpec``), action = the
actuator controls within their ``ctrlrange``, reward 0 (OPOLO needs none), no termination and a
time limit. One env step is ``frame_skip`` MuJoCo steps: the control period is the model's
``timestep`` times the model's own ``<custom><numeric name="frame_skip" data="N"/></custom>`` (1
without one), so the bridge, the learner, an exported policy's ``control_period_s`` and ``evaluate``
all read the same period from the file. Either way :func:`joint_layout` names the joints for
``/joint_states``.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import gymnasium as gym
import numpy as np

from opolo_ros.sim.envs import DivergenceGuard, TimeFeature, make_env, route_mujoco_warnings
from opolo_ros.sim.task_ids import is_mjcf, reordered_joints

if TYPE_CHECKING:
    from opolo_ros.algo.config import RunConfig

T = TypeVar("T")

DEFAULT_MJCF_STEPS = 1000
MAX_CTRL = 1e10  # |ctrlrange| beyond this: MuJoCo refuses the command (BADCTRL) and applies 0
FRAME_SKIP_NUMERIC = "frame_skip"  # an MJCF <custom><numeric> naming MuJoCo steps per env step
MAX_FRAME_SKIP = 10_000


class MjcfEnv(gym.Env):
    """A MuJoCo model from an MJCF file as a Gymnasium env (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self, path: str | Path, frame_skip: int | None = None, reset_noise: float = 0.01) -> None:
        import mujoco

        self._mujoco = mujoco
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"MJCF file not found: {path}")
        route_mujoco_warnings()  # a load-time warning goes to stderr, not to MUJOCO_LOG.TXT
        try:
            self.model = mujoco.MjModel.from_xml_path(str(path))
        except Exception as err:  # mujoco raises ValueError with the parser's message
            raise ValueError(f"cannot load MJCF {path}: {err}") from None
        if self.model.nu == 0:
            raise ValueError(f"MJCF {path} has no actuators: nothing for a policy to command")
        if not np.isfinite(self.model.qpos0).all():
            raise ValueError(f"MJCF {path}: the initial state (qpos0) holds NaN or inf")
        limited = self.model.actuator_ctrllimited.astype(bool)
        ranges = self.model.actuator_ctrlrange[limited]
        if ranges.size and not np.abs(ranges).max() <= MAX_CTRL:
            raise ValueError(f"MJCF {path}: a ctrlrange beyond +-{MAX_CTRL:g} (MuJoCo ignores such "
                             "commands and simulates with 0)")
        self.data = mujoco.MjData(self.model)
        self.frame_skip = model_frame_skip(self.model, path) if frame_skip is None else frame_skip
        self.reset_noise = reset_noise
        self.joints = joint_layout_of_model(self.model)
        names, qpos, qvel = self.joints
        if not names:
            raise ValueError(f"MJCF {path} has no hinge or slide joint: the observation (their positions "
                             "and velocities) would be empty; free and ball joints are not observed")
        dim = 2 * len(names)
        inf = np.full(dim, np.inf, dtype=np.float32)
        self.observation_space = gym.spaces.Box(-inf, inf, dtype=np.float32)
        low = np.full(self.model.nu, -1.0, dtype=np.float32)
        high = np.full(self.model.nu, 1.0, dtype=np.float32)
        low[limited] = self.model.actuator_ctrlrange[limited, 0]
        high[limited] = self.model.actuator_ctrlrange[limited, 1]
        self.action_space = gym.spaces.Box(low, high, dtype=np.float32)
        self.dt = float(self.model.opt.timestep) * self.frame_skip
        self.notes = self._notes(path, limited)  # what the task leaves out: the bridge logs them

    def _notes(self, path: Path, limited: np.ndarray) -> list[str]:
        import mujoco

        model, notes = self.model, []
        unlimited = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, a) or f"actuator{a}"
                     for a in np.flatnonzero(~limited)]
        if unlimited:
            notes.append(f"MJCF {path}: actuator(s) {unlimited} are not ctrllimited (no ctrlrange, or "
                         "ctrllimited=\"false\"): their commands are limited to [-1, 1]; give them a "
                         "ctrlrange (and ctrllimited=\"true\" where set false) to use other limits")
        skipped = [name for _, name, one_dof in model_joints(model) if not one_dof]
        if skipped:
            notes.append(f"MJCF {path}: free/ball joint(s) {skipped} are not observed (only hinge and "
                         "slide joints are)")
        numerics = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_NUMERIC, k) or ""
                    for k in range(model.nnumeric)]
        near = difflib.get_close_matches(FRAME_SKIP_NUMERIC, numerics, n=1, cutoff=0.7)
        if near and FRAME_SKIP_NUMERIC not in numerics:
            notes.append(f"MJCF {path}: <numeric name=\"{near[0]}\"> is not read; the control step's is "
                         f"named \"{FRAME_SKIP_NUMERIC}\" (without it: one MuJoCo step per control step, "
                         f"{self.dt:g} s)")
        return notes

    def _obs(self) -> np.ndarray:
        _, qpos, qvel = self.joints
        return np.concatenate([self.data.qpos[qpos], self.data.qvel[qvel]]).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):  # type: ignore[override]
        super().reset(seed=seed)
        mujoco = self._mujoco
        mujoco.mj_resetData(self.model, self.data)
        noise = self.reset_noise
        self.data.qpos[:] += self.np_random.uniform(-noise, noise, self.model.nq)
        self.data.qvel[:] += self.np_random.uniform(-noise, noise, self.model.nv)
        mujoco.mj_forward(self.model, self.data)
        return self._obs(), {}

    def set_state(self, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """The physics state (as Gymnasium's MuJoCo envs): a resumed run goes on in the same episode."""
        self.data.qpos[:], self.data.qvel[:] = qpos, qvel
        self._mujoco.mj_forward(self.model, self.data)

    def step(self, action):  # type: ignore[override]
        self.data.ctrl[:] = np.clip(action, self.action_space.low, self.action_space.high)
        self._mujoco.mj_step(self.model, self.data, nstep=self.frame_skip)
        return self._obs(), 0.0, False, False, {}


def model_frame_skip(model, path: str | Path) -> int:
    """MuJoCo steps per env step of an MJCF model: its ``frame_skip`` custom numeric, else 1.
    ValueError (one line) for a value that is not one whole number from 1 to MAX_FRAME_SKIP."""
    try:
        values = model.numeric(FRAME_SKIP_NUMERIC).data
    except KeyError:
        return 1
    if not (values.size == 1 and float(values[0]).is_integer() and 1 <= values[0] <= MAX_FRAME_SKIP):
        raise ValueError(f"MJCF {path}: <numeric name=\"{FRAME_SKIP_NUMERIC}\"> must hold one whole number "
                         f"of MuJoCo steps per control step, 1 to {MAX_FRAME_SKIP}, got "
                         f"{' '.join(f'{v:g}' for v in values) or 'nothing'}")
    return int(values[0])


JointLayout = tuple[list[str], np.ndarray, np.ndarray]


def joint_layout_of_model(model) -> JointLayout:
    """Names and qpos/qvel addresses of the 1-dof (hinge, slide) joints of a MuJoCo model.

    Free and ball joints have no scalar position, so they are left out of ``/joint_states``.
    """
    names, qpos, qvel = [], [], []
    for j, name, one_dof in model_joints(model):
        if one_dof:
            names.append(name)
            qpos.append(model.jnt_qposadr[j])
            qvel.append(model.jnt_dofadr[j])
    return names, np.asarray(qpos, dtype=np.intp), np.asarray(qvel, dtype=np.intp)


def env_joint_names(env) -> tuple[str, ...]:
    """The observed (hinge, slide) joints of a MuJoCo env's model (Gymnasium or MJCF), in the
    model's order; () for an env without a MuJoCo model."""
    model = getattr(env.unwrapped, "model", None)
    return tuple(joint_layout_of_model(model)[0]) if model is not None else ()


def check_joint_order(names: Sequence[str], model: Sequence[str], task: str) -> None:
    """JointState demonstrations select joints (`names`, ``demos_joints``) in the policy's
    observation order, which is the model's: the model's own joint names in another order would
    train on scrambled observations without a word (a ValueError). Names the model does not have
    (a real robot's, mapped onto the task) are not checked here."""
    ordered = reordered_joints(names, model)
    if ordered is not None:
        raise ValueError(f"demos_joints {','.join(names)} names {task}'s joints in another order than the "
                         f"model's, {','.join(ordered)}: the policy's observation is in the model's order "
                         "(give them in that order; with demos_joints empty they are read by name "
                         "in it)")


@functools.cache
def mjcf_joint_names(path: str) -> tuple[str, ...]:
    """The observed (hinge, slide) joints of the MJCF model at `path`, in its observation's order;
    () when the file cannot be read here (a policy exported away from its model)."""
    import mujoco

    try:
        return tuple(joint_layout_of_model(mujoco.MjModel.from_xml_path(str(path)))[0])
    except (ValueError, OSError):
        return ()


def model_joints(model) -> list[tuple[int, str, bool]]:
    """(index, name, whether it is a 1-dof hinge or slide joint) of every joint of a MuJoCo model."""
    import mujoco

    one_dof = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(model.njnt)]
    used = {n for n in names if n}
    out = []
    for j, name in enumerate(names):
        if not name:  # an unnamed joint: a name no named joint has (joint3, else joint3_, ...)
            name = f"joint{j}"
            while name in used:
                name += "_"
            used.add(name)
        out.append((j, name, int(model.jnt_type[j]) in one_dof))
    return out


def joint_layout(env: gym.Env) -> JointLayout:
    """The 1-dof joints of a MuJoCo env (any Gymnasium MuJoCo task or :class:`MjcfEnv`)."""
    base = env.unwrapped
    if not hasattr(base, "model"):
        return [], np.zeros(0, np.intp), np.zeros(0, np.intp)
    return joint_layout_of_model(base.model)


def make_task_env(env_id: str, seed: int | None = None, time_feature: bool = False,
                  max_episode_steps: int = 0) -> gym.Env:
    """A Gymnasium id or an MJCF path as an env, seeded as the direct loop seeds its env.

    `max_episode_steps` > 0 overrides the task's time limit (MJCF default: 1000 steps).
    """
    if is_mjcf(env_id):
        steps = max_episode_steps or DEFAULT_MJCF_STEPS
        env: gym.Env = gym.wrappers.TimeLimit(MjcfEnv(env_id), max_episode_steps=steps)
        if time_feature:
            env = TimeFeature(env, max_steps=steps)
        env = DivergenceGuard(env)
        if seed is not None:
            env.reset(seed=seed)
            env.action_space.seed(seed)
        return env
    kwargs = {"max_episode_steps": max_episode_steps} if max_episode_steps > 0 else {}
    return make_env(env_id, seed=seed, time_feature=time_feature, **kwargs)


def time_limit(env_id: str, max_episode_steps: int = 0) -> int | None:
    """A task's episode time limit without making its env (the time feature's T): an MJCF robot's
    `max_episode_steps` or 1000, a Gymnasium task's registered one (None for an id not registered
    here)."""
    if is_mjcf(env_id):
        return max_episode_steps or DEFAULT_MJCF_STEPS
    try:
        return gym.spec(env_id).max_episode_steps or DEFAULT_MJCF_STEPS
    except (gym.error.Error, ImportError):
        return None


def max_steps_of(env: gym.Env) -> int:
    """The episode time limit of an env made by :func:`make_task_env`."""
    spec_steps = env.spec.max_episode_steps if env.spec is not None else None
    e = env
    while isinstance(e, gym.Wrapper):
        if isinstance(e, gym.wrappers.TimeLimit):
            return int(e._max_episode_steps)
        e = e.env
    return int(spec_steps or DEFAULT_MJCF_STEPS)


def control_period(env: gym.Env) -> float:
    """Seconds of simulated time per env step (the real-time mode's timer period)."""
    return float(getattr(env.unwrapped, "dt", 0.02))


def _of_task_env(env_id: str, read: Callable[[gym.Env], T]) -> T | None:
    """`read` of the task's env (a Gymnasium id or an MJCF file), made and closed again; None when
    the environment cannot be made here (an MJCF file left behind, an id Gymnasium does not know)."""
    try:
        env = make_task_env(env_id)
    except (gym.error.Error, OSError, ValueError):
        return None
    try:
        return read(env)
    finally:
        env.close()


def task_control_period(env_id: str) -> float | None:
    """The control period of a task, for a model or checkpoint that does not record its own; None
    when the task cannot be made here."""
    return _of_task_env(env_id, control_period)


@functools.cache
def task_joint_names(env_id: str) -> tuple[str, ...]:
    """The observed joints of a task's model in its observation's order, for a policy that does not
    record its own ``joint_names`` (one of a Gymnasium task); () when the task cannot be made here."""
    return _of_task_env(env_id, env_joint_names) or ()


def continuation_seed(seed: int, step: int) -> int:
    """A reset seed for a run that goes on at `step` in a new process: derived from both, so it
    neither repeats the run's first episodes (the seed's own) nor another seed's."""
    return int(np.random.SeedSequence([seed, step]).generate_state(1)[0])


# ------------------------------------------------------------ JointState demonstrations of a task

MODEL_FIELDS = ("position", "velocity")  # the observation layout env_joint_names describes


def demo_joints(cfg: RunConfig, joints: Sequence[str], obs_dim: int) -> str:
    """The joints a JointState bag of `cfg.demos` is read by: ``demos_joints`` when given; else the
    task model's observed `joints` (in the model's order), where their positions then velocities
    (``demos_fields`` position,velocity) make its observation. Before, such a bag was read in its
    first message's order: a robot that lists its joints otherwise trained on swapped observations
    without a word (given in that order they are refused). '' for other demonstrations (arrays
    are the observation as they are; ``demos_obs_field`` reads fields, not joints)."""
    from opolo_ros.data.bags import JOINT_STATE, demonstration_type
    from opolo_ros.data.demos import split_names

    if cfg.demos_joints or not joints or not cfg.demos or cfg.demos_obs_field:
        return cfg.demos_joints
    if split_names(cfg.demos_fields) != MODEL_FIELDS or 2 * len(joints) + cfg.time_feature != obs_dim:
        return ""
    if demonstration_type(cfg.demos, cfg.demos_topic or None) != JOINT_STATE:
        return ""
    return ",".join(joints)


def with_joints_hint(err: ValueError, joints: str, env_id: str) -> ValueError:
    """`err`, for a bag read by the model's joint names (:func:`demo_joints`) that lacks them, with
    what to give instead."""
    if "missing from the JointState" not in str(err):
        return err
    train = "" if is_mjcf(env_id) else ", --set demos_joints=... (opolo-ros train)"
    return ValueError(f"{err} (without demos_joints a JointState bag is read by the model's joint "
                      f"names, {joints}: a bag whose joints are named otherwise needs "
                      f"demos_joints:=<its names of those joints, in that order> (launch){train})")


def task_demo_joints(cfg: RunConfig) -> str:
    """:func:`demo_joints` for the run's task (made here to know its joints and observation)."""
    env = make_task_env(cfg.env_id, time_feature=cfg.time_feature)
    try:
        return demo_joints(cfg, env_joint_names(env), int(env.observation_space.shape[0]))
    finally:
        env.close()
