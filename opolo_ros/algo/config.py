"""Dataclass configs with the paper's defaults, overridable from YAML.

Three concerns are kept apart, as in d3rlpy: *what* is learned (`OPOLOConfig`, `TD3Config`: networks,
losses, optimiser), *when* it is learned (`ScheduleConfig`: warm-up, update frequencies, delays), and
the run around it (`RunConfig`: env, seeds, budgets, logging). Every value where the authors' released
code differs from the paper is a named option here; see README, "Where the paper and the authors'
code differ: named options".
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from opolo_ros.errors import short_repr
from opolo_ros.params_file import is_parameter_file, own_sections, parameter_sections, sections_reaching
from opolo_ros.sim.task_ids import is_mjcf

ResidualMode = Literal["residual", "stop_gradient"]
DoneMode = Literal["ignore", "terminal"]
PolicyUpdate = Literal["sequential", "simultaneous"]


@dataclass
class NetworkConfig:
    """Network sizes: policy/critic MLP [400, 300] ReLU; D and P_I 2x256 tanh (released code)."""

    hidden: tuple[int, ...] = (400, 300)
    disc_hidden: tuple[int, ...] = (256, 256)
    inverse_hidden: tuple[int, ...] = (256, 256)
    # Adam as one fused kernel per parameter (torch `fused=True`, about 3x faster on CPU than the
    # multi-tensor `foreach` form); same update up to float rounding (test_speed_equivalence.py).
    fused_adam: bool = True


@dataclass
class OPOLOConfig:
    """What OPOLO learns and with which losses (Algorithm 1 and the appendix of the paper)."""

    net: NetworkConfig = field(default_factory=NetworkConfig)
    gamma: float = 0.99
    tau: float = 0.005
    lr: float = 3e-4
    disc_lr: float = 3e-4
    inverse_lr: float = 3e-4
    # DICE objective: linear term weight is 2 * alpha * (1 - gamma), next to the Bellman residual
    # terms of both twin critics (summed); alpha = 1 is the paper's balance, (1 - gamma)
    # E[Q(s0, pi(s0))] against one residual term (the loss is then twice the paper's J for equal
    # critics: test_losses.py); the released code, which sums the same way, uses alpha = 0.1.
    alpha: float = 0.1
    # f*(y) = |y|^q / q with 1/p + 1/q = 1; q = 2 is the paper's f(x) = x^2 / 2.
    f_q: float = 2.0
    # Bellman residual clip (released code clips to [0, 100] in the actor term); beyond it the
    # residual policy gradient saturates at f*'(clip) (AlgaeDICE), it is not cut off.
    residual_clip: float = 100.0
    # (a) residual: gradient to pi through Q(s', pi(s')) inside the clipped residual (paper /
    #     AlgaeDICE); stop_gradient: residual carries no policy gradient (released code). The
    #     default is the one that measured better (BENCHMARKS.md, "Residual gradient").
    residual_mode: ResidualMode = "stop_gradient"
    # (b) ignore: no (1 - done) mask (released code; its s' at an episode end is the reset state, an
    #     artefact not reproduced: s' is the true last state); terminal: mask true terminations only,
    #     time-limit truncation bootstraps.
    done_mode: DoneMode = "terminal"
    # (e) sequential: the policy step evaluates the critic after the critic's own step (PyTorch TD3
    #     style); simultaneous: critic and policy gradients come from the same parameters and one
    #     critic backward pass, as when the released code runs both train ops in one session run.
    #     Simultaneous saves a critic forward and backward per policy step (BENCHMARKS.md).
    policy_update: PolicyUpdate = "sequential"
    # Inverse-action regulariser weight; 0 gives OPOLO-x.
    lam: float = 0.1
    # Discriminator: BCE - entropy_coef * Bernoulli entropy + gp_coef * (|grad| - 1)^2.
    disc_entropy_coef: float = 1e-3
    disc_gp_coef: float = 10.0
    # Reward r = -log(1 - D) with 1 - D clipped to [reward_eps_low, 1 - reward_eps_high].
    reward_eps_low: float = 1e-4
    reward_eps_high: float = 1e-8
    inverse_l2: float = 1e-3
    # (d) running mean/std normalisation of D inputs (from expert batches, std floor) and of
    #     P_I inputs (from replay batches), as in the released code.
    normalize_disc: bool = True
    normalize_inverse: bool = True
    norm_std_floor: float = 0.1
    # torch.compile the critic loss graph (forward + backward; same maths up to float rounding):
    # ~3% more env steps/s on CPU (HalfCheetah, bench/throughput.py) for 13-37 s of compilation (measured),
    # so it pays on runs of ~100k steps or more. A compile failure falls back to eager, warning.
    compile_critic: bool = False


@dataclass
class TD3Config:
    """TD3 on the environment reward (Fujimoto et al. 2018), used to train experts."""

    net: NetworkConfig = field(default_factory=NetworkConfig)
    gamma: float = 0.99
    tau: float = 0.005
    lr: float = 3e-4
    target_noise: float = 0.2
    target_noise_clip: float = 0.5
    done_mode: DoneMode = "terminal"


@dataclass
class ScheduleConfig:
    """When each part is updated, per environment step (paper table / released code defaults)."""

    warmup_steps: int = 10_000  # uniform random actions before this
    inverse_pretrain_steps: int = 2_500  # P_I gradient steps once, at the end of warm-up
    disc_freq: int = 500
    disc_steps: int = 10
    inverse_freq: int = 500
    inverse_steps: int = 50
    train_freq: int = 1_000  # critic/policy updates every train_freq env steps ...
    gradient_steps: int = 1_000  # ... this many critic steps each time (UTD 1)
    policy_delay: int = 2
    batch_size: int = 100
    buffer_size: int = 1_000_000
    exploration_noise: float = 0.1

    @property
    def update_to_data(self) -> float:
        """Critic gradient steps per environment step."""
        return self.gradient_steps / self.train_freq


@dataclass
class RunConfig:
    """One training run: the environment, the budget, seeds, logging and the algorithm parts."""

    env_id: str = "InvertedPendulum-v5"
    algo: Literal["opolo", "td3"] = "opolo"
    seed: int = 0
    total_steps: int = 20_000
    time_feature: bool = False
    # An MJCF task's time limit, env steps per episode (the time feature's T); 0 = 1000. A Gymnasium
    # task keeps its own (the benchmark's scores are for it): refused there.
    max_episode_steps: int = 0
    # An MJCF task's evaluation episodes (its imitation distance), env steps; 0 = max_episode_steps.
    # Longer than the training episodes, it shows a policy that drifts after them (a robot runs on).
    eval_max_episode_steps: int = 0
    demos: str = ""  # path to a bag, folder of bags, or .npz of state-only episodes
    num_demos: int = 4  # demonstration episodes to train on (the first ones); 0 = all there are
    # Reading a bag (opolo_ros.data.bags.read_demonstrations): the topic ("" = /opolo/demonstrations,
    # else the bag's only state topic); for sensor_msgs/JointState the joint names in policy order
    # ("a,b,c"; "" = the task model's joints, sim.tasks.demo_joints) and the fields; the gap that
    # splits an observation stream into episodes (seconds; the reset marker splits too); for any
    # other message type, the fields that make the observation ("pose.pose,twist.twist" for
    # nav_msgs/Odometry).
    demos_topic: str = ""
    demos_joints: str = ""
    demos_fields: str = "position,velocity"
    demos_episode_gap_s: float = 0.5
    demos_obs_field: str = ""

    def demo_options(self) -> dict[str, Any]:
        """The keyword arguments of `opolo_ros.data.demos.load_episodes` for this run's bag."""
        return {"topic": self.demos_topic, "joints": self.demos_joints, "fields": self.demos_fields,
                "episode_gap_s": self.demos_episode_gap_s, "obs_field": self.demos_obs_field}
    eval_every: int = 5_000
    eval_episodes: int = 10
    checkpoint_every: int = 5_000
    export_every: int = 5_000
    keep_best: bool = True  # also export policy_best.onnx at each evaluation that beats the best so far
    stop_at_return: float = math.inf  # end the run early once an evaluation's mean return reaches this
    run_dir: str = "runs/default"
    torch_threads: int = 0  # 0: leave torch's default
    device: str = "cpu"  # torch device for the networks and updates: cpu, cuda, cuda:N, or auto
    progress: bool = True
    opolo: OPOLOConfig = field(default_factory=OPOLOConfig)
    td3: TD3Config = field(default_factory=TD3Config)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)


# Run config strings that list names ("slider,hinge"): a YAML list of them is taken too (an actor's
# `joints` parameter is one, so a task file may write both alike)
NAME_LISTS = frozenset({"demos_joints", "demos_fields", "demos_obs_field"})


def names_text(value: Any) -> Any:
    """A list of names (strings) as the comma-separated text :data:`NAME_LISTS` keys hold; any
    other value as it is."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return ",".join(v.strip() for v in value)
    return value


def _coerce(value: Any, current: Any, name: str) -> Any:
    """Convert a YAML value to the type of the default it replaces, with a clear error."""
    if name in NAME_LISTS:
        value = names_text(value)
    if isinstance(current, bool):
        if not isinstance(value, bool):
            raise ValueError(f"config '{name}': expected true/false, got {value!r}")
        return value
    if isinstance(current, int):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value) or int(value) != value:
            raise ValueError(f"config '{name}': expected an integer, got {value!r}")
        return int(value)
    if isinstance(current, float):
        if isinstance(value, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"config '{name}': expected a number, got {value!r}")
        return float(value)
    if isinstance(current, tuple):  # layer sizes
        if not isinstance(value, (list, tuple)) or not value or \
                not all(type(v) is int and v >= 1 for v in value):
            raise ValueError(f"config '{name}': expected a list of positive integers, got {value!r}")
        return tuple(value)
    if isinstance(current, str):
        if not isinstance(value, str):
            raise ValueError(f"config '{name}': expected a string, got {value!r}")
        return value
    return value


def update_dataclass(obj: Any, values: Mapping[str, Any], prefix: str = "") -> Any:
    """Return a copy of dataclass `obj` with `values` (nested mappings) applied, type-checked."""
    if not isinstance(values, Mapping):
        raise ValueError(f"config '{prefix.rstrip('.') or '<root>'}': expected a mapping, got {values!r}")
    known = {f.name: f for f in dataclasses.fields(obj)}
    changes: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1)
            hint = f"did you mean '{prefix}{close[0]}'? " if close else ""
            raise ValueError(f"config: unknown key '{name}' ({hint}known: {', '.join(sorted(known))})")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            changes[key] = update_dataclass(current, value, prefix=f"{name}.")
        else:
            changes[key] = _coerce(value, current, name)
    new = dataclasses.replace(obj, **changes)
    _validate(new, prefix)
    return new


def _validate(obj: Any, prefix: str) -> None:
    literals = {"residual_mode": ("residual", "stop_gradient"), "done_mode": ("ignore", "terminal"),
                "policy_update": ("sequential", "simultaneous"), "algo": ("opolo", "td3")}
    for name, allowed in literals.items():
        if hasattr(obj, name) and getattr(obj, name) not in allowed:
            raise ValueError(f"config '{prefix}{name}': must be one of {allowed}, "
                             f"got {getattr(obj, name)!r}")


RUN_NODE = "learner"
RUN_SECTIONS = ("/**", RUN_NODE, f"/{RUN_NODE}")  # the sections of a parameter file the direct loop reads
# Parameters rclpy declares on every node: a parameter file may set them for any node.
ROS_NODE_PARAMETERS = frozenset({"use_sim_time", "start_type_description_service"})
# The learner node's parameters beyond the run config (name: (default, description)). They live here,
# not in opolo_ros.nodes.learner, so that the direct loop can tell them from typos in a parameter
# file's learner section without importing ROS.
LEARNER_PARAMETERS: dict[str, tuple] = {
    "policy_every": (0, "export + publish the policy every this many transitions consumed; "
                        "0 = the smallest multiple of schedule.train_freq >= 250"),
    "demo_settle_s": (2.0, "start with fewer than num_demos episodes (num_demos 0: with all "
                           "that came) once none arrived for this long"),
    "resume": (True, "resume from <run_dir>/checkpoint.pt when it exists; false: start over, the "
                     "previous run's files moved to <run_dir>/previous-<date>-<time>/"),
    "progress_period_s": (1.0, "also re-publish the learner progress this often"),
    "journal": (True, "append each replay batch to <run_dir>/replay_journal.bin before acknowledging "
                      "it, and consume the journal again after a restart (no acknowledged transition "
                      "is lost to a crash); false: a crash loses every transition acknowledged since "
                      "the last checkpoint, a stop in the middle of a batch the rest of that batch (a "
                      "run folder whose journal holds transitions after its checkpoint is refused "
                      "with false)"),
    "journal_fsync": (False, "also fsync the journal before each acknowledgement: durable against a "
                             "machine crash, not only a crash of the process (costs 6% of the steps/s "
                             "with max_ahead 50, 20% with max_ahead 0 here; BENCHMARKS.md)"),
    "replay_gap_timeout_s": (10.0, "a replay batch that comes after a gap in its bridge's seq waits "
                                   "this long for the missing ones (a flow-controlled bridge re-sends "
                                   "them) before it is consumed without them; 0 = never wait"),
    "replay_topic": ("/opolo/replay", "replay transitions topic"),
    "demonstrations_topic": ("/opolo/demonstrations", "state-only expert episodes topic"),
    "policy_topic": ("/opolo/policy", "ONNX policy topic (bytes + version)"),
    "progress_topic": ("/opolo/learner_progress", "learner progress topic (flow control)"),
}


def learner_parameter_names() -> frozenset[str]:
    """Every parameter the learner node declares: the run config's keys (nested ones dotted, e.g.
    ``schedule.batch_size``), :data:`LEARNER_PARAMETERS` and rclpy's own."""
    return frozenset(flatten(to_dict(RunConfig()))) | LEARNER_PARAMETERS.keys() | ROS_NODE_PARAMETERS


def check_parameter_names(names: Iterable[str], known: Collection[str], where: str, who: str) -> None:
    """Refuse the first of `names` (dotted) that is not in `known` nor a group of known names (``opolo``
    of ``opolo.lr``), in one line: `where` (file and section), the name, whose parameters `known` are
    (`who`) and the closest known name when there is one."""
    groups = {k.rsplit(".", i)[0] for k in known for i in range(1, k.count(".") + 1)}
    for name in names:
        if name in known or name in groups:
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"{where}: unknown key '{name}', not a parameter of {who}{hint}")


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load that refuses a key given twice in one mapping (PyYAML keeps the last one
    silently: a second ``schedule:`` block would drop the first's settings)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: the parent class merges it
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the parent class says so
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (line {key_node.start_mark.line + 1})",
                    key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(path: str | Path, what: str = "config file") -> Any:
    """A YAML file's content, with one-line errors for a missing file, malformed YAML or a key given
    twice in one mapping."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}" if not path.exists()
                                else f"{what} {path} is not a regular file")
    try:
        return yaml.load(path.read_text(), Loader=_UniqueKeyLoader) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{what} {path} is not valid YAML: {exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{what} {path} is not a text (UTF-8) file") from None


def run_section(data: Any, path: Path | str = "<config>",
                node_names: Collection[str] | None = None) -> Mapping[str, Any]:
    """The run-config mapping of a YAML document.

    A plain mapping is a run config. A ROS 2 parameter file (`node: {ros__parameters: ...}`), read
    as rcl reads it (:mod:`opolo_ros.params_file`: what rcl refuses is refused), gives the merge of
    the sections that reach a `/learner` node (`/**`, a wildcard that matches it, `learner`,
    `/learner`, `/**/learner`), so one file per task serves both `ros2 launch` and the direct loop.
    Their keys beyond the run config are checked, not ignored: the learner's sections may hold the
    learner node's other parameters (:data:`LEARNER_PARAMETERS`), `/**` and wildcards (every
    node's) those of any node of the package (`node_names`: every parameter the nodes declare,
    ``opolo_ros.nodes.parameters.package_parameter_names()``, which the callers above the ROS-free
    layers pass in; None: their keys beyond the learner's are not checked here); anything else is
    refused with the closest known key (a typo must not change a run silently). Sections of other
    nodes (sim_bridge, actor, ...) are not read here (``opolo_ros.nodes.parameters.node_parameters``
    checks them).
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"config file {path}: expected a mapping at the top level")
    param_file = is_parameter_file(data)
    for node in RUN_SECTIONS:  # a parameter-file section of another shape: say so, not "unknown key"
        section = data.get(node)  # (a mapping in a parameter file: its reader names what is wrong)
        shaped = isinstance(section, Mapping) and ("ros__parameters" in section or param_file)
        if node in data and not shaped:
            raise ValueError(f"config file {path}: section '{node}' must hold a 'ros__parameters' mapping "
                             f"(a ROS 2 parameter file), got {short_repr(section)}")
    if not param_file:
        return data
    sections = parameter_sections(data, path)  # what rcl refuses is refused here too
    own = own_sections(RUN_NODE)
    merged: dict[str, Any] = {}
    known = {f.name for f in dataclasses.fields(RunConfig)}
    learner = learner_parameter_names()
    for key in sections_reaching(sections, RUN_NODE):
        flat = flatten(sections[key])
        where = f"config file {path}, section '{key}'"
        if key not in own:  # /** (or a wildcard), every node's: the run config's keys, or any node's
            check_parameter_names([k for k in flat if k.split(".")[0] in known], learner, where,
                                  f"the {RUN_NODE} node")
            others = [k for k in flat if k.split(".")[0] not in known and k not in learner]
            if others and node_names is not None:
                check_parameter_names(others, frozenset(node_names) | learner, where, "any opolo_ros node")
        else:
            check_parameter_names(flat, learner, where, f"the {RUN_NODE} node")
        deep_merge(merged, unflatten({k: v for k, v in flat.items() if k.split(".")[0] in known}))
    return merged


def load_run_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None,
                    node_names: Collection[str] | None = None) -> RunConfig:
    """Build a RunConfig from defaults, then a YAML file (`node_names`: see :func:`run_section`), then
    a mapping of overrides."""
    cfg = RunConfig()
    if path is not None:
        cfg = update_dataclass(cfg, run_section(read_yaml(path), path, node_names))
    if overrides:
        cfg = update_dataclass(cfg, overrides)
    check_run_config(cfg)
    return cfg


# Run config values that must be >= 1 / >= 0 (0 turns the periodic ones off).
POSITIVE_KEYS = ("total_steps", "eval_episodes", "schedule.buffer_size")
NON_NEGATIVE_KEYS = ("seed", "max_episode_steps", "eval_max_episode_steps", "num_demos", "eval_every",
                     "checkpoint_every", "export_every", "torch_threads",
                     "schedule.warmup_steps", "schedule.inverse_pretrain_steps", "schedule.disc_steps",
                     "schedule.inverse_steps", "schedule.gradient_steps", "schedule.exploration_noise")


# Ranges of the float hyper-parameters (each also finite, unless said): (low, high, what is allowed)
OPEN_UNIT_KEYS = ("opolo.gamma", "td3.gamma")  # 0 < x < 1
RATE_KEYS = ("opolo.tau", "td3.tau")  # 0 < x <= 1
POSITIVE_FLOAT_KEYS = ("opolo.lr", "opolo.disc_lr", "opolo.inverse_lr", "td3.lr", "opolo.norm_std_floor")
NON_NEGATIVE_FLOAT_KEYS = ("opolo.alpha", "opolo.lam", "opolo.disc_entropy_coef", "opolo.disc_gp_coef",
                           "opolo.inverse_l2", "td3.target_noise", "td3.target_noise_clip")
MAX_TORCH_THREADS = 256
SEED_MAX = 2**32 - 1  # numpy's and Gymnasium's


def _check_floats(values: Mapping[str, Any]) -> None:
    def bad(key: str, rule: str) -> ValueError:
        return ValueError(f"config '{key}': must be {rule}, got {values[key]!r}")

    for key in OPEN_UNIT_KEYS:
        if not 0 < values[key] < 1:
            raise bad(key, "between 0 and 1 (exclusive)")
    for key in RATE_KEYS:
        if not 0 < values[key] <= 1:
            raise bad(key, "in (0, 1]")
    for key in POSITIVE_FLOAT_KEYS:
        if not 0 < values[key] < math.inf:
            raise bad(key, "a finite number > 0")
    for key in NON_NEGATIVE_FLOAT_KEYS:
        if not 0 <= values[key] < math.inf:
            raise bad(key, "a finite number >= 0")
    if not 1 < values["opolo.f_q"] < math.inf:
        raise bad("opolo.f_q", "a finite number > 1 (the p/q family's q)")
    if not values["opolo.residual_clip"] > 0:
        raise bad("opolo.residual_clip", "> 0 (.inf: no clip)")
    low, high = values["opolo.reward_eps_low"], values["opolo.reward_eps_high"]
    if not (0 < low < 1 and 0 <= high < 1 and low + high < 1):
        raise ValueError(f"config 'opolo.reward_eps_low' / 'opolo.reward_eps_high': low in (0, 1), "
                         f"high in [0, 1), their sum < 1 (1 - D is clipped to [low, 1 - high] and "
                         f"its log taken), got {low!r}, {high!r}")
    if not 0 <= values["schedule.exploration_noise"] < math.inf:
        raise bad("schedule.exploration_noise", "a finite number >= 0")
    if not values["demos_episode_gap_s"] > 0:
        raise bad("demos_episode_gap_s", "> 0 seconds (.inf: no gap rule)")
    if not (math.isfinite(values["stop_at_return"]) or values["stop_at_return"] == math.inf):
        raise bad("stop_at_return", "a finite return, or .inf (off)")


def check_run_config(cfg: RunConfig) -> None:
    """ValueError (one line, naming the key) for values no run can use; the schedule's frequencies
    are checked where it is built (:class:`opolo_ros.algo.schedule.Schedule`)."""
    values = flatten(to_dict(cfg))
    for key in POSITIVE_KEYS:
        if not values[key] >= 1:
            raise ValueError(f"config '{key}': must be at least 1, got {values[key]!r}")
    for key in NON_NEGATIVE_KEYS:
        if not values[key] >= 0:
            raise ValueError(f"config '{key}': must not be negative, got {values[key]!r}")
    if cfg.seed > SEED_MAX:
        raise ValueError(f"config 'seed': must be at most {SEED_MAX}, got {cfg.seed}")
    if cfg.torch_threads > MAX_TORCH_THREADS:
        raise ValueError(f"config 'torch_threads': must be at most {MAX_TORCH_THREADS} (0 = torch's "
                         f"default), got {cfg.torch_threads}")
    if not cfg.run_dir.strip():
        raise ValueError("config 'run_dir': must name a folder (empty would be the working folder)")
    if Path(cfg.run_dir).exists() and not Path(cfg.run_dir).is_dir():
        raise ValueError(f"config 'run_dir': {cfg.run_dir} exists and is not a folder")
    _check_floats(values)
    for key in ("max_episode_steps", "eval_max_episode_steps"):
        if getattr(cfg, key) and not is_mjcf(cfg.env_id):
            raise ValueError(f"config '{key}': sets an MJCF robot's time limit; {cfg.env_id} keeps "
                             f"the task's own (leave it 0), got {getattr(cfg, key)}")
    if cfg.eval_max_episode_steps and cfg.time_feature:
        raise ValueError("config 'eval_max_episode_steps' with time_feature: the time feature 1 - t/T "
                         "runs out at the training episodes' end (leave it 0)")
    if math.isfinite(cfg.stop_at_return) and cfg.eval_every <= 0:
        raise ValueError(f"config 'stop_at_return' ({cfg.stop_at_return:g}) needs evaluations: "
                         "set 'eval_every' > 0")


def parse_override(text: str) -> dict[str, Any]:
    """Turn 'a.b.c=value' into {'a': {'b': {'c': value}}}; value parsed as YAML scalar."""
    if "=" not in text:
        raise ValueError(f"override '{text}' must look like key=value (e.g. schedule.batch_size=256)")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not raw.strip():  # `--set demos_joints=`: empty text, not YAML's null
        raw = "''"
    if not all(parts):
        raise ValueError(f"override '{text}': the key {key.strip()!r} has an empty part")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        detail = " ".join(str(getattr(err, "problem", None) or err).split())
        raise ValueError(f"override '{text}': the value is not valid YAML ({detail})") from None
    out: dict[str, Any] = {}
    node = out
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def merge_overrides(items: list[str]) -> dict[str, Any]:
    """Merge several 'key=value' overrides into one nested mapping."""
    merged: dict[str, Any] = {}
    for item in items:
        deep_merge(merged, parse_override(item))
    return merged


def deep_merge(dst: dict[str, Any], src: Mapping[str, Any]) -> dict[str, Any]:
    """Merge nested mapping `src` into `dst` in place (mappings merge, other values replace)."""
    for k, v in src.items():
        if isinstance(v, Mapping) and isinstance(dst.get(k), dict):
            deep_merge(dst[k], v)
        else:
            dst[k] = v
    return dst


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"opolo": {"net": {"hidden": [64]}}}`` -> ``{"opolo.net.hidden": [64]}`` (ROS names)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = list(value) if isinstance(value, tuple) else value
    return out


def unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`flatten`."""
    out: dict[str, Any] = {}
    for name, value in flat.items():
        node = out
        parts = name.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain dict of a config (tuples as lists), for YAML dumps and checkpoints."""
    def conv(v: Any) -> Any:
        if isinstance(v, tuple):
            return list(v)
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        return v
    return conv(dataclasses.asdict(cfg))
