"""The imitation distance: how an MJCF robot's run (no reward) is evaluated, from its states."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from opolo_ros.sim import imitation
from opolo_ros.sim.imitation import (
    ImitationEvaluator,
    demo_scale,
    imitation_distance,
    imitation_score,
    mean_nearest,
)

ROOT = Path(__file__).resolve().parents[1]


def test_mean_nearest_is_the_mean_distance_to_the_closest_row_in_any_chunking(monkeypatch) -> None:
    a = np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 0.0]])
    b = np.array([[0.0, 0.0], [3.0, 3.0]])
    assert mean_nearest(a, b) == pytest.approx((0.0 + 1.0 + 1.0) / 3)
    assert mean_nearest(b, a) == pytest.approx((0.0 + 1.0) / 2)
    monkeypatch.setattr(imitation, "CHUNK_ROWS", 1)  # row by row: the same
    assert mean_nearest(a, b) == pytest.approx(2.0 / 3)


def test_the_scale_is_the_demonstrations_spread_with_a_floor_for_still_joints() -> None:
    states = np.array([[0.0, 5.0, 0.0], [4.0, 5.0, 2.0]])  # std 2, 0, 1: median 1, floor 0.1
    centre, scale = demo_scale(states)
    assert centre.tolist() == [2.0, 5.0, 1.0] and scale.tolist() == pytest.approx([2.0, 0.1, 1.0])
    with pytest.raises(ValueError, match="non-empty 2-D array, got shape"):
        demo_scale(np.zeros((0, 3)))


def test_demonstrations_that_hold_most_joints_still_give_a_finite_distance() -> None:
    """The floor under a dimension's scale is at least 1e-6: where most joints are held still (the
    median spread is 0, so SPREAD_FLOOR of it is too) a still joint's scale would be 0, and a
    demonstration's own states NaN away from themselves (a mutation test)."""
    demos = np.zeros((50, 3))
    demos[:, 0] = np.linspace(-1.0, 1.0, 50)  # one joint moves, two are held still
    assert demo_scale(demos)[1][1:].tolist() == [1e-6, 1e-6]
    assert imitation_distance(demos, demos) == 0.0
    assert imitation_distance(demos + [0.0, 1e-6, 0.0], demos) == pytest.approx(1.0)


def test_the_distance_is_zero_on_the_demonstrations_and_counts_both_directions() -> None:
    rng = np.random.default_rng(0)
    demos = rng.normal(size=(200, 4)) * [1.0, 10.0, 0.1, 1.0]
    assert imitation_distance(demos, demos) == pytest.approx(0.0, abs=1e-6)
    # staying at one demonstrated state: every visited state is on the demonstrations, but most of
    # them are never reached; the one-way distance would call that perfect
    stuck = np.repeat(demos[:1], 50, axis=0)
    assert mean_nearest(stuck, demos) == pytest.approx(0.0, abs=1e-6)
    assert imitation_distance(stuck, demos) > 0.5
    # in units of each dimension's spread: rescaling a dimension in both changes nothing
    shifted = demos + rng.normal(size=demos.shape) * 0.1
    scaled = [1.0, 1.0, 100.0, 1.0]
    assert imitation_distance(shifted * scaled, demos * scaled) == pytest.approx(
        imitation_distance(shifted, demos))
    # states after a blow-up are left out; a policy with none at all is infinitely far
    with_nan = np.vstack([demos, np.full((3, 4), np.nan)])
    assert imitation_distance(with_nan, demos) == pytest.approx(0.0, abs=1e-6)
    assert imitation_distance(np.full((3, 4), np.inf), demos) == np.inf


def test_the_distance_is_the_mean_of_both_directions_and_drops_partly_non_finite_states() -> None:
    """Worked values: the distance is the mean of the two directions' mean nearest distances (not
    their sum: the benchmark's figures are read in it), and a state with any non-finite value is
    left out as a whole, not only one that is non-finite throughout (a mutation test)."""
    demos = np.array([[0.0], [2.0]])  # centre 1, spread 1
    assert imitation_distance(np.array([[0.0]]), demos) == pytest.approx(0.5)  # 0 one way, (0 + 2) / 2
    assert imitation_distance(np.array([[1.0]]), demos) == pytest.approx(1.0)
    demos = np.array([[0.0, 0.0], [2.0, 2.0]])
    assert imitation_distance(np.array([[0.0, 0.0], [2.0, 2.0], [np.nan, 2.0]]), demos) == 0.0
    assert imitation_distance(np.array([[np.inf, 0.0]]), demos) == np.inf


def test_the_score_is_one_on_the_demonstrations_and_zero_as_far_as_random_actions() -> None:
    assert imitation_score(0.0, 2.0) == 1.0 and imitation_score(2.0, 2.0) == 0.0
    assert imitation_score(1.5, 2.0) == pytest.approx(0.25)
    assert np.isnan(imitation_score(1.0, 0.0)) and np.isnan(imitation_score(1.0, float("nan")))


def pendulum_model(tmp_path: Path) -> str:
    """InvertedPendulum-v5's model as an MJCF robot, at the task's control step (2 x 0.02 s)."""
    import gymnasium

    asset = (Path(gymnasium.__file__).parent / "envs/mujoco/assets/inverted_pendulum.xml").read_text()
    xml = tmp_path / "pendulum.xml"
    xml.write_text(asset.replace("<worldbody>", '<custom><numeric name="frame_skip" data="2"/></custom>'
                                                "<worldbody>", 1))
    return str(xml)


def test_the_expert_is_near_its_demonstrations_and_random_actions_are_far(tmp_path: Path) -> None:
    """The shipped InvertedPendulum expert on an MJCF copy of its model, evaluated against its own
    demonstrations: a score near 1; random actions (the pendulum falls and swings) score 0 by
    definition, and their distance is taken once."""
    from opolo_ros.data.demos import load_episodes
    from opolo_ros.export.onnx_policy import load_policy
    from opolo_ros.sim.tasks import make_task_env

    xml = pendulum_model(tmp_path)
    demos = load_episodes(ROOT / "models" / "demos" / "InvertedPendulum-v5")
    states = imitation.demo_states_of(demos, 4)
    evaluator = ImitationEvaluator(lambda: make_task_env(xml), states, episodes=2, seed=10_000)
    expert = load_policy(ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx")
    distance, random_distance = evaluator(expert)
    assert random_distance > 1.0 and distance < 0.15 * random_distance, (distance, random_distance)
    assert imitation_score(distance, random_distance) > 0.85
    still = lambda obs: np.zeros(1, dtype=np.float32)  # noqa: E731  (falls too, more slowly)
    assert evaluator(still)[1] == random_distance and evaluator(still)[0] > distance
    assert evaluator.improved(distance) and not evaluator.improved(distance + 1e-6)
    assert evaluator.improved(distance / 2)


def test_the_evaluator_uses_the_same_episode_seeds_for_both_and_takes_the_reference_once(
        tmp_path: Path, monkeypatch) -> None:
    """A run's evaluation: the policy's and random actions' states from the same episode resets
    (seed, seed + 1, ...: the reference is of the same episodes), the reference taken at the first
    evaluation only, and not at all when the run's checkpoint gave it (a mutation test: taken at
    every evaluation, or with other seeds, every test passed)."""
    from opolo_ros.sim.tasks import make_task_env

    xml = pendulum_model(tmp_path)
    make = lambda: make_task_env(xml, max_episode_steps=20)  # noqa: E731
    rng = np.random.default_rng(0)
    states = rng.normal(scale=0.1, size=(100, 4))
    still = lambda obs: np.zeros(1, dtype=np.float32)  # noqa: E731
    evaluator = ImitationEvaluator(make, states, episodes=2, seed=10_005)
    distance, random_distance = evaluator(still)
    assert random_distance == imitation_distance(imitation.random_visited_states(make, 2, 10_005, 4), states)
    assert distance == imitation_distance(imitation.visited_states(still, make, 2, 10_005, 4), states)
    assert random_distance != imitation_distance(imitation.random_visited_states(make, 2, 10_006, 4), states)
    assert distance != imitation_distance(imitation.visited_states(still, make, 2, 10_006, 4), states)

    def taken_again(*args: object, **kwargs: object) -> np.ndarray:
        raise AssertionError("the random actions' distance was taken again")

    monkeypatch.setattr(imitation, "random_visited_states", taken_again)
    assert evaluator(still) == (distance, random_distance)
    restored = ImitationEvaluator(make, states, episodes=2, seed=10_005, random_distance=7.0)
    assert restored(still) == (distance, 7.0)


def test_a_time_feature_policys_states_are_compared_without_the_time_feature(tmp_path: Path) -> None:
    """An MJCF run may train with the time feature: its policy (and random actions) see it, the
    demonstrations have no such value, so the visited states are cut to the demonstrations' values
    before they are compared (a mutation test)."""
    from opolo_ros.sim.tasks import make_task_env

    xml = pendulum_model(tmp_path)
    make = lambda: make_task_env(xml, time_feature=True, max_episode_steps=20)  # noqa: E731
    seen: list[int] = []

    def still(obs: np.ndarray) -> np.ndarray:
        seen.append(len(obs))
        return np.zeros(1, dtype=np.float32)

    assert imitation.visited_states(still, make, 1, 10_000, 4).shape == (21, 4) and set(seen) == {5}
    demos = np.random.default_rng(0).normal(size=(50, 4))
    assert np.isfinite(ImitationEvaluator(make, demos, episodes=1, seed=10_000)(still)).all()


def test_only_a_smaller_distance_is_an_improvement() -> None:
    """policy_best.onnx is written for a run's best distance: a tie keeps the earlier policy, and a
    NaN distance (a policy that diverged) is no best, nor does it stop later ones from being one (a
    mutation test)."""
    evaluator = ImitationEvaluator(lambda: None, np.zeros((2, 1)), episodes=1, seed=0)
    assert evaluator.improved(2.0) and not evaluator.improved(2.0) and evaluator.best == 2.0
    assert not evaluator.improved(float("nan")) and evaluator.best == 2.0
    assert evaluator.improved(1.0) and evaluator.best == 1.0


def test_a_random_reference_that_is_not_a_finite_positive_distance_gives_no_score() -> None:
    """Random actions that never reached a finite state (the simulation blew up at once) are an
    infinite reference: no score, not 1 for any policy (a mutation test)."""
    assert np.isnan(imitation_score(1.0, float("inf"))) and np.isnan(imitation_score(1.0, -1.0))


def test_evaluate_measures_an_mjcf_policys_motion_against_demonstrations(tmp_path: Path, capsys) -> None:
    """`opolo-ros evaluate` on an MJCF model (no reward) with --demos: the imitation distance and
    score instead of a return (it refused MJCF models before); --stamp writes them; for a Gymnasium
    task both; demonstrations of another size are one line."""
    import shutil
    import sys

    from opolo_ros import cli
    from opolo_ros.export.onnx_policy import load_policy

    sys.path.insert(0, str(ROOT / "test"))
    from test_bags import pendulum_robot_demos

    xml = pendulum_model(tmp_path)
    demos = pendulum_robot_demos(tmp_path / "demos.npz")
    model = tmp_path / "expert.onnx"
    shutil.copy(ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx", model)
    args = ["evaluate", str(model), "--env-id", xml, "--episodes", "2", "--max-episode-steps", "300"]
    assert cli.main([*args, "--demos", str(demos), "--stamp"]) == 0
    out = capsys.readouterr().out
    said = re.search(rf"pendulum.xml: imitation distance ([\d.]+) to 4 episodes of {re.escape(str(demos))} "
                     r"\(random actions ([\d.]+); 0 = the demonstrations' states\), score ([\d.]+), over 2 "
                     r"episodes of up to 300 steps", out)
    assert said and float(said.group(3)) > 0.8 and "return" not in out, out
    extra = load_policy(model).metadata.extra
    assert f"{float(extra['eval_imitation_distance']):.3f}" == said.group(1)
    shipped = load_policy(ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx").metadata.extra
    assert extra["eval_return_mean"] == shipped["eval_return_mean"]  # not a robot model's 0 return
    assert (extra["eval_num_demos"], extra["eval_max_episode_steps"]) == ("4", "300")
    # by default over the episodes and demonstrations the policy was measured on in its run (a
    # walkthrough: 1000-step episodes scored -35.7 a policy its 150-step run scored 0.934)
    from opolo_ros.export.onnx_policy import stamp_metadata

    stamp_metadata(model, {"max_episode_steps": 120, "num_demos": 2})
    assert cli.main(["evaluate", str(model), "--env-id", xml, "--episodes", "1", "--demos", str(demos)]) == 0
    out = capsys.readouterr().out
    assert " to 2 episodes of " in out and "over 1 episodes of up to 120 steps" in out
    # the model's joints in another order, demonstrations of another task of the same size: refused
    # as training refuses them (they scored scrambled states, or another task's)
    assert cli.main([*args, "--demos", str(demos), "--joints", "hinge,slider"]) == 2
    assert "--joints" not in (err := capsys.readouterr().err) and "in another order than the model's, " \
        "slider,hinge" in err
    pendulum_bag = ROOT / "models" / "demos" / "InvertedPendulum-v5"
    assert cli.main([*args, "--demos", str(pendulum_bag)]) == 2
    assert (f"demonstrations {pendulum_bag} were recorded on InvertedPendulum-v5 (the bag's metadata says "
            f"so), not on {xml}") in capsys.readouterr().err
    # a model of another control step than the policy's: said
    one_step = tmp_path / "one_step.xml"
    one_step.write_text(Path(xml).read_text().replace('data="2"', 'data="1"'))
    assert cli.main(["evaluate", str(model), "--env-id", str(one_step), "--episodes", "1",
                     "--demos", str(demos)]) == 0
    assert (f"warning: {model} was trained at a control step of 0.04 s, {one_step} steps every 0.02 s"
            in capsys.readouterr().err)
    # a Gymnasium task: the return, and the distance to its shipped bag
    bag = ROOT / "models" / "demos" / "InvertedPendulum-v5"
    assert cli.main(["evaluate", str(model), "--episodes", "1", "--demos", str(bag)]) == 0
    out = capsys.readouterr().out
    assert "InvertedPendulum-v5: return 1000.0 +- 0.0 over 1 episodes" in out
    assert "InvertedPendulum-v5: imitation distance " in out
    # the same demonstrations for a policy of another size
    hopper = ROOT / "models" / "experts" / "Hopper-v5.onnx"
    assert cli.main(["evaluate", str(hopper), "--episodes", "1", "--demos", str(bag)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"demonstrations {bag} have 4 values per state, {hopper} takes 11 (and the time "
                        "feature)") and len(err.splitlines()) == 1, err


def test_evaluate_runs_an_mjcf_models_episodes_as_long_as_its_metadata_says(tmp_path: Path, capsys) -> None:
    """An MJCF model's evaluation episodes: --max-episode-steps, else its max_episode_steps, else
    its time feature's T (a model exported before max_episode_steps was recorded), else 1000 (a
    mutation test: the T fallback was untested)."""
    import shutil
    import sys

    from opolo_ros import cli
    from opolo_ros.export.onnx_policy import stamp_metadata

    sys.path.insert(0, str(ROOT / "test"))
    from test_bags import pendulum_robot_demos

    xml = pendulum_model(tmp_path)
    demos = pendulum_robot_demos(tmp_path / "demos.npz")
    cases = [({"time_feature_steps": 90}, [], 90),
             ({"time_feature_steps": 90, "max_episode_steps": 60}, [], 60),
             ({"max_episode_steps": 60}, ["--max-episode-steps", "30"], 30), ({}, [], 1000)]
    for k, (stamped, given, want) in enumerate(cases):
        model = tmp_path / f"expert{k}.onnx"
        shutil.copy(ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx", model)
        if stamped:
            stamp_metadata(model, stamped)
        assert cli.main(["evaluate", str(model), "--env-id", xml, "--episodes", "1", "--demos", str(demos),
                         *given]) == 0
        assert f"over 1 episodes of up to {want} steps" in capsys.readouterr().out, stamped


def test_evaluate_num_demos_0_takes_every_demonstration_over_the_models_count(tmp_path: Path, capsys) -> None:
    """--num-demos 0 is all the demonstrations (as num_demos: 0 trains on all), not "unset": it
    overrides the model's num_demos as any other count does (a mutation test)."""
    import shutil
    import sys

    from opolo_ros import cli
    from opolo_ros.export.onnx_policy import stamp_metadata

    sys.path.insert(0, str(ROOT / "test"))
    from test_bags import pendulum_robot_demos

    xml = pendulum_model(tmp_path)
    demos = pendulum_robot_demos(tmp_path / "demos.npz")
    model = tmp_path / "expert.onnx"
    shutil.copy(ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx", model)
    stamp_metadata(model, {"max_episode_steps": 20, "num_demos": 2})
    for given, want in (([], 2), (["--num-demos", "3"], 3), (["--num-demos", "0"], 4)):
        assert cli.main(["evaluate", str(model), "--env-id", xml, "--episodes", "1", "--demos", str(demos),
                         *given]) == 0
        assert f" to {want} episodes of {demos} " in capsys.readouterr().out, given


def test_evaluates_random_reference_runs_the_policys_episodes(tmp_path: Path) -> None:
    """evaluate --demos: random actions' distance is taken from the same episode resets as the
    policy's (--seed, --seed + 1, ...) and over its episode length, so the score compares the two
    on the same episodes (a mutation test: other seeds passed every test)."""
    import shutil
    import sys

    from opolo_ros import cli
    from opolo_ros.data.demos import load_episodes
    from opolo_ros.export.onnx_policy import load_policy, stamp_metadata
    from opolo_ros.sim.tasks import make_task_env

    sys.path.insert(0, str(ROOT / "test"))
    from test_bags import pendulum_robot_demos

    xml = pendulum_model(tmp_path)
    demos = pendulum_robot_demos(tmp_path / "demos.npz")
    model = tmp_path / "expert.onnx"
    shutil.copy(ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx", model)
    stamp_metadata(model, {"max_episode_steps": 50})
    assert cli.main(["evaluate", str(model), "--env-id", xml, "--episodes", "2", "--seed", "123",
                     "--demos", str(demos), "--stamp"]) == 0
    extra = load_policy(model).metadata.extra
    make = lambda: make_task_env(xml, max_episode_steps=50)  # noqa: E731
    states = imitation.demo_states_of(load_episodes(demos), 4)
    want = imitation_distance(imitation.random_visited_states(make, 2, 123, 4), states)
    assert float(extra["eval_imitation_random"]) == round(want, 4)
    want = imitation_distance(imitation.visited_states(load_policy(model), make, 2, 123, 4), states)
    assert float(extra["eval_imitation_distance"]) == round(want, 4)


def test_evaluate_reads_a_joint_state_bag_by_the_models_joint_names(tmp_path: Path, capsys) -> None:
    """A robot's /joint_states bag names its joints in its own order (hinge before slider here):
    evaluate --demos reads it by the model's joints, as training does, and measures the same
    distance as for those states in the model's order (a mutation test: read in the messages'
    order, the states were scrambled without a word). The other demonstration options reach the
    reader too."""
    import shutil
    import sys

    from opolo_ros import cli
    from opolo_ros.data.demos import Episode, load_episodes, save_npz

    sys.path.insert(0, str(ROOT / "test"))
    from test_bags import JS, SEC, _joint_state, _write_stream

    shipped = load_episodes(ROOT / "models" / "demos" / "InvertedPendulum-v5")[:2]
    save_npz(tmp_path / "ordered.npz", [Episode(ep.obs) for ep in shipped])
    msgs = [(SEC * (1 + 100 * e) + k * SEC // 25, _joint_state(["hinge", "slider"], row[[1, 0]], row[[3, 2]]))
            for e, ep in enumerate(shipped) for k, row in enumerate(ep.obs)]
    bag = _write_stream(tmp_path / "robot", {"/joint_states": (JS, msgs)})
    model = tmp_path / "expert.onnx"
    shutil.copy(ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx", model)
    said = []
    for demos in (tmp_path / "ordered.npz", bag):
        assert cli.main(["evaluate", str(model), "--env-id", pendulum_model(tmp_path), "--episodes", "1",
                         "--max-episode-steps", "50", "--demos", str(demos)]) == 0
        said.append(re.search(r"imitation distance ([\d.]+) to 2 episodes", capsys.readouterr().out))
    assert said[0] and said[1] and said[0].group(1) == said[1].group(1), said
    # the demonstration options reach the reader: --episode-gap (gaps never split: one episode),
    # and compare's --joints (the bag in the npz's order: the same states)
    assert cli.main(["evaluate", str(model), "--env-id", pendulum_model(tmp_path), "--episodes", "1",
                     "--max-episode-steps", "50", "--demos", str(bag), "--episode-gap", "inf"]) == 0
    assert " to 1 episode of " in capsys.readouterr().out
    assert cli.main(["compare", str(bag), str(tmp_path / "ordered.npz"), "--joints", "slider,hinge"]) == 0
    assert capsys.readouterr().out.startswith("imitation distance 0.000 of ")


def test_an_mjcf_runs_eval_csv_has_the_imitation_columns_and_blank_returns(tmp_path: Path) -> None:
    """Rows of a run without a return: the imitation columns, and blank return cells in every row
    (a row the next evaluation rewrote said 'nan' there, a new one nothing: a walkthrough); a
    Gymnasium run's eval.csv keeps its own columns."""
    from opolo_ros.train.logger import RunLogger

    logger = RunLogger(tmp_path / "mjcf", tensorboard=False)
    for step, distance in ((1000, 2.0), (2000, 1.0)):
        logger.evaluation({"env_step": step, "wall_s": 1.0, "imitation_distance": distance,
                           "imitation_random": 4.0, "imitation_score": imitation_score(distance, 4.0)})
    header, *rows = (tmp_path / "mjcf" / "eval.csv").read_text().splitlines()
    assert header == ("env_step,return_mean,return_std,normalised,wall_s,r_expert,r_random,"
                      "imitation_distance,imitation_random,imitation_score")
    assert rows == ["1000,,,,1.0,,,2.0,4.0,0.5", "2000,,,,1.0,,,1.0,4.0,0.75"]
    logger = RunLogger(tmp_path / "gym", tensorboard=False)
    logger.evaluation({"env_step": 1000, "return_mean": 5.0, "return_std": 0.0, "normalised": float("nan"),
                       "wall_s": 1.0, "r_expert": float("nan"), "r_random": 1.0})
    assert (tmp_path / "gym" / "eval.csv").read_text().splitlines() == [
        "env_step,return_mean,return_std,normalised,wall_s,r_expert,r_random", "1000,5.0,0.0,,1.0,,1.0"]


def test_an_mjcf_runs_curve_is_its_imitation_distance_on_a_log_scale(tmp_path: Path, monkeypatch) -> None:
    """A run folder whose eval.csv has the imitation columns is drawn as its distance against the
    random actions' line, on a log scale while every distance is above 0 (the distances span
    orders of magnitude), linear with a 0 in it; not as its (blank) returns (a mutation test)."""
    from opolo_ros import plot
    from opolo_ros.train.logger import RunLogger

    drawn = []
    real_save = plot._save

    def save(fig, ax, output: str | Path, ylabel: str, title: str) -> Path:
        drawn.append((ylabel, ax.get_yscale(), [list(line.get_ydata()) for line in ax.get_lines()]))
        return real_save(fig, ax, output, ylabel, title)

    monkeypatch.setattr(plot, "_save", save)
    warned: list[str] = []
    for name, distances in (("far", (30.0, 0.5)), ("on", (30.0, 0.0))):
        logger = RunLogger(tmp_path / name, tensorboard=False)
        for step, distance in zip((1000, 2000), distances):
            logger.evaluation({"env_step": step, "wall_s": 1.0, "imitation_distance": distance,
                               "imitation_random": 40.0, "imitation_score": imitation_score(distance, 40.0)})
        assert plot.draw_run_curve(tmp_path / name, name, float("nan"), warned.append) is not None
    assert not warned and drawn == [
        ("imitation distance (log scale)", "log", [[30.0, 0.5], [40.0, 40.0]]),
        ("imitation distance (0 = the demonstrations)", "linear", [[30.0, 0.0], [40.0, 40.0]])]


def test_an_eval_csv_from_before_the_imitation_columns_gets_them_with_its_first_imitation_row(
        tmp_path: Path) -> None:
    """An MJCF run resumed from a run folder written before the imitation columns existed (its
    rows: blank returns): the next evaluation's row adds the columns to the file, blank in the old
    rows, instead of dropping the distance (a mutation test)."""
    from opolo_ros.train.logger import RunLogger

    (tmp_path / "eval.csv").write_text("env_step,return_mean,return_std,normalised,wall_s,r_expert,r_random\n"
                                       "1000,,,,1.0,,\n")
    RunLogger(tmp_path, tensorboard=False).evaluation(
        {"env_step": 2000, "wall_s": 2.0, "imitation_distance": 1.0, "imitation_random": 4.0,
         "imitation_score": 0.75})
    assert (tmp_path / "eval.csv").read_text().splitlines() == [
        "env_step,return_mean,return_std,normalised,wall_s,r_expert,r_random,imitation_distance,"
        "imitation_random,imitation_score", "1000,,,,1.0,,,,,", "2000,,,,2.0,,,1.0,4.0,0.75"]


def test_compare_gives_a_recordings_distance_to_demonstrations(tmp_path: Path, capsys) -> None:
    """`opolo-ros compare REC DEMOS`: a robot's recorded states against the demonstrations', read
    alike (the README pointed at `info` for this, which only counts: a walkthrough)."""
    from opolo_ros import cli
    from opolo_ros.data.demos import Episode, load_episodes, save_npz

    shipped = load_episodes(ROOT / "models" / "demos" / "InvertedPendulum-v5")
    save_npz(tmp_path / "same.npz", shipped[:2])
    save_npz(tmp_path / "off.npz", [Episode(ep.obs + 0.5, ep.ret) for ep in shipped[:2]])
    demos = str(ROOT / "models" / "demos" / "InvertedPendulum-v5")
    distances = []
    for name in ("same", "off"):
        assert cli.main(["compare", str(tmp_path / f"{name}.npz"), demos]) == 0
        out = capsys.readouterr().out
        rec = re.escape(str(tmp_path / f"{name}.npz"))
        said = re.search(rf"imitation distance ([\d.]+) of {rec} \(2 episodes, 2002 states\) to "
                         rf"{re.escape(demos)} \(4 episodes, 4004 states\); 0 = the demonstrations' states",
                         out)
        assert said, out
        distances.append(float(said.group(1)))
    assert distances[0] < 0.1 < 1.0 < distances[1], distances  # two of the four episodes / all moved
    save_npz(tmp_path / "wide.npz", [Episode(np.zeros((3, 5)), 0.0)])
    assert cli.main(["compare", str(tmp_path / "wide.npz"), demos]) == 2
    assert "wide.npz has 5 values per state, " in capsys.readouterr().err


def test_compare_measures_in_the_demonstrations_spread_not_the_recordings(tmp_path: Path, capsys) -> None:
    """compare REC DEMOS is the distance of the recording to the demonstrations, in the units of
    the demonstrations' spread: a robot that held one demonstrated state is as far as the states
    it never reached, not a million units of its own (no) spread away (a mutation test)."""
    from opolo_ros import cli
    from opolo_ros.data.demos import Episode, load_episodes, save_npz

    demos = ROOT / "models" / "demos" / "InvertedPendulum-v5"
    shipped = load_episodes(demos)
    held = np.repeat(shipped[0].obs[100:101], 200, axis=0)
    save_npz(tmp_path / "held.npz", [Episode(held)])
    assert cli.main(["compare", str(tmp_path / "held.npz"), str(demos)]) == 0
    said = re.search(r"imitation distance ([\d.]+) of ", capsys.readouterr().out)
    want = imitation_distance(held, imitation.demo_states_of(shipped, 4))
    assert said and said.group(1) == f"{want:.3f}" and want < 10.0, (said, want)


def test_a_gymnasium_evaluation_stamps_no_episode_length(tmp_path: Path) -> None:
    """--stamp writes eval_max_episode_steps for an MJCF model only (its episodes are the ones it
    was given); a Gymnasium task's are the task's own, and the key would say otherwise of a model
    evaluate reads it from (a mutation test)."""
    import shutil

    from opolo_ros import cli
    from opolo_ros.export.onnx_policy import load_policy

    model = tmp_path / "expert.onnx"
    shutil.copy(ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx", model)
    assert cli.main(["evaluate", str(model), "--episodes", "1", "--stamp"]) == 0
    extra = load_policy(model).metadata.extra
    assert extra["eval_episodes"] == "1" and "eval_max_episode_steps" not in extra


def test_an_mjcf_runs_evaluations_can_look_past_its_training_episodes(tmp_path: Path) -> None:
    """eval_max_episode_steps: the learner's imitation evaluations over longer episodes than it
    trains on (a walkthrough's arm held its posture through its 150-step episodes and spun after);
    0 keeps the training episodes'. Refused for a Gymnasium task and with the time feature."""
    import logging

    from opolo_ros.algo.config import load_run_config
    from opolo_ros.data.demos import Episode
    from opolo_ros.sim.tasks import max_steps_of
    from opolo_ros.train.stream import StreamHooks, StreamTrainer

    xml = pendulum_model(tmp_path)
    episodes = [Episode(np.zeros((21, 4), np.float32))] * 2
    for extra, want in (({}, 20), ({"eval_max_episode_steps": 300}, 300)):
        cfg = load_run_config(None, {"env_id": xml, "max_episode_steps": 20, "progress": False,
                                     "run_dir": str(tmp_path / str(want)),
                                     "opolo": {"net": {"hidden": [8, 8]}}, **extra})
        hooks = StreamHooks(lambda path, version: None, lambda: None, logging.getLogger("s"))
        stream = StreamTrainer(cfg, policy_every=10**6, hooks=hooks)
        try:
            stream.start(episodes, resume=False, journal=False, journal_fsync=False)
            env = stream.evaluator.imitation.make_env()
            assert (max_steps_of(stream.env), max_steps_of(env)) == (20, want)
            env.close()
        finally:
            stream.close()
    with pytest.raises(ValueError, match="'eval_max_episode_steps': sets an MJCF robot's time limit; Hopper"):
        load_run_config(None, {"env_id": "Hopper-v5", "eval_max_episode_steps": 300})
    with pytest.raises(ValueError, match="'eval_max_episode_steps' with time_feature: the time feature"):
        load_run_config(None, {"env_id": xml, "time_feature": True, "eval_max_episode_steps": 300})
    # a negative length is refused as max_episode_steps' is (a mutation test)
    with pytest.raises(ValueError, match="config 'eval_max_episode_steps': must not be negative, got -1"):
        load_run_config(None, {"env_id": xml, "eval_max_episode_steps": -1})


def test_a_resumed_mjcf_run_keeps_its_random_reference_and_best_distance(tmp_path: Path, monkeypatch,
                                                                         caplog) -> None:
    """The learner's checkpoint holds an MJCF run's imitation state: the random actions' distance
    (taken once, at the first evaluation, with the evaluations' seeds 10000 + the run's seed), the
    best distance so far and the last evaluation. A resumed run does not take the reference again,
    and does not write policy_best.onnx for a policy no better than its best before the stop (a
    mutation test: dropping the restore left every test passing). Its progress lines show no
    return (an MJCF task's are 0 throughout)."""
    import logging
    import sys

    from opolo_ros.algo.config import load_run_config
    from opolo_ros.data.demos import load_episodes
    from opolo_ros.train.stream import StreamHooks, StreamTrainer

    sys.path.insert(0, str(ROOT / "test"))
    from test_bags import pendulum_robot_demos

    episodes = load_episodes(pendulum_robot_demos(tmp_path / "demos.npz"))
    cfg = load_run_config(None, {"env_id": pendulum_model(tmp_path), "max_episode_steps": 20, "seed": 3,
                                 "eval_episodes": 2, "progress": False, "run_dir": str(tmp_path / "run"),
                                 "opolo": {"net": {"hidden": [8, 8]}}})

    def started(resume: bool) -> StreamTrainer:
        hooks = StreamHooks(lambda path, version: None, lambda: None, logging.getLogger("s"))
        stream = StreamTrainer(cfg, policy_every=10**6, hooks=hooks)
        stream.start(episodes, resume=resume, journal=False, journal_fsync=False)
        return stream

    stream = started(resume=False)
    try:
        assert (stream.evaluator.imitation.episodes, stream.evaluator.imitation.seed) == (2, 10_003)
        assert np.isnan(stream._evaluate()).all()  # no return: the imitation evaluation instead
        with caplog.at_level(logging.INFO, logger="s"):
            stream._log_rate()
        assert [m for m in caplog.messages if "steps/s" in m][-1].endswith(" steps/s"), caplog.messages
        distance, random_distance = stream.evaluator.last_imitation
        assert 0 < distance and 0 < random_distance == stream.evaluator.imitation.random_distance
        assert stream.evaluator.imitation.best == distance
        assert (tmp_path / "run" / "policy_best.onnx").is_file()
        stream.save()
    finally:
        stream.close()
    (tmp_path / "run" / "policy_best.onnx").unlink()
    resumed = started(resume=True)
    try:
        assert resumed.evaluator.last_imitation == (distance, random_distance)
        kept = resumed.evaluator.imitation
        assert (kept.random_distance, kept.best) == (random_distance, distance)

        def taken_again(*args: object, **kwargs: object) -> np.ndarray:
            raise AssertionError("the random actions' distance was taken again")

        monkeypatch.setattr(imitation, "random_visited_states", taken_again)
        resumed._evaluate()  # the same policy (the checkpoint's): the same distance, no better
        assert resumed.evaluator.last_imitation == (distance, random_distance)
        assert not (tmp_path / "run" / "policy_best.onnx").exists()
    finally:
        resumed.close()


def test_the_direct_loop_trains_an_mjcf_robot_and_evaluates_it_by_its_imitation_distance(
        tmp_path: Path, capsys) -> None:
    """`opolo-ros train --env-id robot.xml` refused an MJCF file ("it evaluates on the reward"); it
    trains one now as the graph does: the task's episodes (`max_episode_steps`), the imitation
    distance at each evaluation (eval.csv, the final lines), policy_best.onnx recording that
    evaluation, and the exported policy the robot's joints and control period. A TD3 expert, which
    learns from the reward, is still refused."""
    import sys

    import yaml

    from opolo_ros import cli
    from opolo_ros.export.onnx_policy import load_policy
    from opolo_ros.train.logger import RunLogger

    sys.path.insert(0, str(ROOT / "test"))
    from test_bags import pendulum_robot_demos
    from test_direct import small_cfg

    xml = pendulum_model(tmp_path)
    demos = pendulum_robot_demos(tmp_path / "demos.npz")
    cfg = {k: v for k, v in vars(small_cfg(tmp_path, demos)).items() if k in ("schedule", "opolo")}
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"max_episode_steps": 30, "eval_every": 100, "eval_episodes": 2,
                                      "progress": False, "seed": 7,
                                      "schedule": vars(cfg["schedule"]),
                                      "opolo": {"net": vars(cfg["opolo"].net)}}))
    run = tmp_path / "run"
    assert cli.main(["train", "--config", str(config), "--env-id", xml, "--demos", str(demos),
                     "--total-steps", "200", "--run-dir", str(run)]) == 0
    out = capsys.readouterr()
    rows = RunLogger.read_evaluations(run / "eval.csv")
    assert [int(r["env_step"]) for r in rows] == [100, 200]
    assert all(np.isnan(r["return_mean"]) and r["imitation_distance"] > 0 for r in rows)
    assert rows[0]["imitation_random"] == rows[1]["imitation_random"] > 0  # taken once
    last = rows[-1]
    assert re.search(rf"imitation distance: {last['imitation_distance']:.3f} \(random actions: "
                     rf"{last['imitation_random']:.3f}; 0 = the demonstrations' states, \d+ deterministic "
                     rf"episodes\), score {last['imitation_score']:.3f}", out.out)
    assert "evaluation return" not in out.out and "training return" not in out.err
    best = min(rows, key=lambda r: r["imitation_distance"])
    meta = load_policy(run / "policy_best.onnx").metadata
    assert float(meta.extra["eval_imitation_distance"]) == pytest.approx(best["imitation_distance"], abs=1e-4)
    assert int(meta.extra["eval_max_episode_steps"]) == 30
    meta = load_policy(run / "policy.onnx").metadata
    assert (meta.env_id, meta.joint_names, meta.control_period_s) == (xml, ("slider", "hinge"), 0.04)
    assert cli.main(["train-expert", "--env-id", xml, "--run-dir", str(tmp_path / "td3")]) == 2
    assert "a TD3 expert learns from the reward" in capsys.readouterr().err



def test_the_direct_loop_gives_a_robot_or_another_task_its_own_run_folder(tmp_path: Path) -> None:
    """Without --run-dir every MJCF robot trained in runs/default, and --env-id of another task than
    the config file's in that file's folder, whose checkpoint it then refused: as the graph does,
    runs/opolo/<task> (an expert's runs/experts/<task>); a run folder given is kept."""
    from opolo_ros import cli

    xml = pendulum_model(tmp_path)
    pendulum = str(ROOT / "config" / "inverted_pendulum.yaml")

    def run_dir(*argv: str) -> str:
        args = cli.build_parser().parse_args(list(argv))
        algo = "td3" if argv[0] == "train-expert" else "opolo"
        return cli._own_run_dir(args, cli._config(args, algo=algo)).run_dir

    assert run_dir("train", "--env-id", xml) == "runs/opolo/pendulum"
    assert run_dir("train", "--config", pendulum, "--env-id", xml) == "runs/opolo/pendulum"
    assert run_dir("train", "--config", pendulum, "--env-id", "Hopper-v5") == "runs/opolo/Hopper-v5"
    assert run_dir("train", "--config", pendulum) == "runs/opolo/InvertedPendulum-v5"  # the file's own
    assert run_dir("train", "--config", pendulum, "--env-id", "InvertedPendulum-v5") == \
        "runs/opolo/InvertedPendulum-v5"
    assert run_dir("train", "--env-id", xml, "--run-dir", "r1") == "r1"
    assert run_dir("train", "--env-id", xml, "--set", "run_dir=r2") == "r2"
    assert run_dir("train", "--env-id", "Hopper-v5") == "runs/default"  # no file: as before
    own = tmp_path / "own.yaml"  # a file that names no task: its run folder is the user's choice
    own.write_text("run_dir: runs/mine\n")
    assert run_dir("train", "--config", str(own), "--env-id", "Hopper-v5") == "runs/mine"
    assert run_dir("train", "--config", str(own), "--env-id", xml) == "runs/mine"
    expert = str(ROOT / "config" / "experts" / "Hopper-v5.yaml")
    assert run_dir("train-expert", "--config", expert, "--env-id", "Walker2d-v5") == \
        "runs/experts/Walker2d-v5"
