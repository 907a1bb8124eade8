"""The direct training loop: checkpoint -> resume gives the same next updates as an uninterrupted run."""

import logging
import math
import os
import re
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from opolo_ros.algo.config import load_run_config, to_dict
from opolo_ros.algo.schedule import Plan
from opolo_ros.data.batches import ReplayBatch
from opolo_ros.data.demos import Episode, save_npz
from opolo_ros.export.onnx_policy import load_policy
from opolo_ros.train.direct import DirectTrainer, TrainingInterrupted
from opolo_ros.train.stream import StreamHooks, StreamTrainer


@pytest.fixture
def demos(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "demos.npz"
    save_npz(path, [Episode(rng.normal(0, 0.1, (60, 4)), 59.0) for _ in range(4)])
    return path


def small_cfg(tmp_path, demos, algo="opolo", **extra):
    return load_run_config(None, {
        "algo": algo, "env_id": "InvertedPendulum-v5", "demos": str(demos), "total_steps": 400,
        "run_dir": str(tmp_path / f"run_{algo}"), "progress": False, "eval_episodes": 1,
        "eval_every": 0, "checkpoint_every": 0, "export_every": 0, "seed": 7,
        "opolo": {"net": {"hidden": [32, 32], "disc_hidden": [16, 16], "inverse_hidden": [16, 16]}},
        "td3": {"net": {"hidden": [32, 32]}},
        "schedule": {"warmup_steps": 50, "inverse_pretrain_steps": 20, "disc_freq": 25, "disc_steps": 2,
                     "inverse_freq": 25, "inverse_steps": 3, "train_freq": 5, "gradient_steps": 5,
                     "batch_size": 16}, **extra})


def quiet_hooks() -> StreamHooks:
    return StreamHooks(lambda path, version: None, lambda: None, logging.getLogger("s"))


def stop_in_evaluation(trainer: DirectTrainer, step: int | None, after: int) -> list[int]:
    """Make `trainer` stop itself after `after` policy calls at `step` (None: any step, the
    evaluation's calls when the warm-up acts at random); the calls counted, returned."""
    policy, calls = trainer.policy, []

    def policy_that_stops(obs):
        if step is None or trainer.step == step:
            calls.append(1)
            if len(calls) == after:
                trainer.stop.set()
        return policy(obs)

    trainer.policy = policy_that_stops
    return calls


def params(trainer):
    return [p.detach().clone() for m in trainer.learner.modules().values() for p in m.state_dict().values()]


@pytest.mark.parametrize("algo,task", [("opolo", "gymnasium"), ("td3", "gymnasium"), ("opolo", "mjcf")])
def test_resume_gives_the_same_next_updates(tmp_path, demos, algo, task):
    """Also for an MJCF robot, whose env had no set_state: the checkpoint holds its physics state."""
    cfg = small_cfg(tmp_path, demos, algo)
    if task == "mjcf":
        from test_bags import pendulum_robot_demos
        from test_imitation import pendulum_model

        cfg = small_cfg(tmp_path, pendulum_robot_demos(tmp_path / "robot.npz"), algo,
                        env_id=pendulum_model(tmp_path), max_episode_steps=100)
    a = DirectTrainer(cfg)
    for _ in range(137):  # mid-episode, mid-schedule
        a.env_step()
    a.save()
    for _ in range(63):
        a.env_step()
    b = DirectTrainer(cfg)
    b.restore()
    assert b.step == 137
    for _ in range(63):
        b.env_step()
    assert a.step == b.step == 200 and a.episodes_done == b.episodes_done
    assert a.learner.critic_steps == b.learner.critic_steps > 0
    for x, y in zip(params(a), params(b)):
        assert torch.equal(x, y)
    assert np.array_equal(a.obs, b.obs)
    assert torch.equal(a.runner.replay.obs, b.runner.replay.obs)


def test_checkpoint_for_another_env_is_refused(tmp_path, demos):
    cfg = small_cfg(tmp_path, demos)
    a = DirectTrainer(cfg)
    a.save()
    other = DirectTrainer(small_cfg(tmp_path, demos, algo="td3"))
    with pytest.raises(ValueError, match="checkpoint .* is for opolo on .*, not td3 on"):
        other.restore(a.checkpoint_path)
    # the same algorithm and networks, written for another task: refused too
    from opolo_ros.train.checkpoint import load_checkpoint, save_checkpoint

    state = load_checkpoint(a.checkpoint_path)
    state["config"]["env_id"] = "InvertedPendulumReal-v0"
    save_checkpoint(a.checkpoint_path, state)
    with pytest.raises(ValueError, match=r"is for opolo on InvertedPendulumReal-v0, not opolo on "
                                         r"InvertedPendulum-v5"):
        DirectTrainer(small_cfg(tmp_path, demos)).restore(a.checkpoint_path)


def test_checkpoint_of_another_network_shape_is_refused_naming_the_change(tmp_path, demos):
    a = DirectTrainer(small_cfg(tmp_path, demos))
    a.save()
    other = DirectTrainer(small_cfg(tmp_path, demos, time_feature=not a.cfg.time_feature))
    with pytest.raises(ValueError, match=r"does not fit this config .*changed since it was written: "
                                         r"time_feature: (False -> True|True -> False)\. Resume with") as err:
        other.restore(a.checkpoint_path)
    assert "\n" not in str(err.value)
    # which tensor does not fit (torch's first line alone, "Error(s) in loading state_dict for
    # Actor:", said nothing: a walkthrough)
    assert re.search(r"\(\w+: (size mismatch for|Missing key|Unexpected key)", str(err.value)), str(err.value)
    # through train() too, and the run folder keeps the config the checkpoint was written with
    (a.run_dir / "config.yaml").write_text("written with the checkpoint\n")
    with pytest.raises(ValueError, match="does not fit this config"):
        DirectTrainer(small_cfg(tmp_path, demos, time_feature=not a.cfg.time_feature)).train()
    assert (a.run_dir / "config.yaml").read_text() == "written with the checkpoint\n"


def test_both_trainers_export_the_control_period_of_their_task(tmp_path, demos):
    """A deploy actor commands at the rate a policy was trained at, which its metadata now says
    (control_period_s, the env's dt): InvertedPendulum-v5 steps 0.04 s, 25 Hz, where the deploy
    launch sent 50 Hz whatever the task."""
    from opolo_ros.sim.envs import make_env
    from opolo_ros.sim.tasks import control_period

    cfg = small_cfg(tmp_path, demos, "td3")
    dt = control_period(make_env("InvertedPendulum-v5"))
    assert dt == pytest.approx(0.04)
    direct = DirectTrainer(cfg)
    stream = StreamTrainer(load_run_config(None, {**to_dict(cfg), "run_dir": str(tmp_path / "stream")}),
                           policy_every=cfg.total_steps, hooks=quiet_hooks())
    try:
        for trainer in (direct, stream):
            meta = load_policy(trainer.export(tmp_path / "p.onnx")).metadata
            assert (meta.control_period_s, meta.control_rate_hz) == (dt, pytest.approx(25.0)), meta
    finally:
        stream.close()


def test_train_writes_run_folder(tmp_path, demos):
    cfg = small_cfg(tmp_path, demos, total_steps=120, eval_every=60)
    result = DirectTrainer(cfg).train()
    run = result.run_dir
    for name in ("config.yaml", "checkpoint.pt", "policy.onnx", "eval.csv", "learning_curve.png"):
        assert (run / name).is_file(), name
    assert any((run / "tb").iterdir())
    rows = (run / "eval.csv").read_text().splitlines()
    assert len(rows) == 3  # header + evaluations at 60 and 120
    assert result.env_steps == 120 and np.isfinite(result.eval_mean)
    evals = [tuple(map(float, r.split(",")[:2])) for r in rows[1:]]
    best_step, best_return = max(evals, key=lambda e: e[1])  # the first of equal bests
    best = load_policy(run / "policy_best.onnx").metadata
    assert best.training_step == best_step
    # the evaluation that made it the best, in evaluate --stamp's keys (it said none, a walkthrough)
    assert float(best.extra["eval_return_mean"]) == pytest.approx(best_return, abs=1e-4)
    assert (best.extra["eval_episodes"], best.extra["eval_seed"]) == ("1", "10007")
    assert "eval_return_mean" not in load_policy(run / "policy.onnx").metadata.extra

    again = DirectTrainer(cfg).train()  # a finished run run again: nothing trained, nothing added
    assert (run / "eval.csv").read_text().splitlines() == rows
    assert (again.env_steps, again.eval_mean) == (120, evals[-1][1])


@pytest.mark.parametrize("name", ["gpu", "cuda:x"])
def test_bad_device_is_a_config_error(tmp_path, demos, name):
    with pytest.raises(ValueError, match="config 'device'"):
        DirectTrainer(small_cfg(tmp_path, demos, device=name))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_without_a_gpu_is_a_config_error(tmp_path, demos):
    with pytest.raises(ValueError, match="no CUDA device"):
        DirectTrainer(small_cfg(tmp_path, demos, device="cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("algo", ["opolo", "td3"])
def test_cuda_run_trains_and_its_checkpoint_resumes_on_cpu(tmp_path, demos, algo):
    gpu = DirectTrainer(small_cfg(tmp_path, demos, algo, device="cuda", total_steps=200))
    before = params(gpu)
    gpu.train()
    assert all(p.is_cuda for p in gpu.learner.actor.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, params(gpu)))
    cpu = DirectTrainer(small_cfg(tmp_path, demos, algo, device="cpu", total_steps=260))
    cpu.restore()
    assert cpu.step == 200
    for a, b in zip(params(gpu), params(cpu)):
        torch.testing.assert_close(a.cpu(), b)
    cpu.train()
    assert cpu.step == 260


def test_sigterm_checkpoints_and_the_same_run_resumes(tmp_path, demos, capsys):
    """A signal stops training after the current step with a checkpoint; training again resumes there."""
    cfg = small_cfg(tmp_path, demos, total_steps=100_000)
    trainer = DirectTrainer(cfg)

    def send_when_training() -> None:
        while trainer.step < 120:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=send_when_training, daemon=True)
    sender.start()
    with pytest.raises(TrainingInterrupted) as info:
        trainer.train()
    sender.join(5)
    stopped = trainer.step
    assert 120 <= stopped < 100_000 and info.value.step == stopped
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
    assert (tmp_path / "run_opolo" / "policy.onnx").is_file()
    resumed = DirectTrainer(small_cfg(tmp_path, demos, total_steps=stopped + 30))
    calls, env_step = [], resumed.env_step
    resumed.env_step = lambda: (calls.append(1), env_step())[1]
    capsys.readouterr()
    result = resumed.train()
    assert result.env_steps == stopped + 30 and len(calls) == 30  # continued from the checkpoint, not 0
    assert f"resumed from {resumed.checkpoint_path} at step {stopped}" in capsys.readouterr().out  # said
    assert resumed.learner.critic_steps >= trainer.learner.critic_steps + 30
    plain = DirectTrainer(small_cfg(tmp_path / "plain", demos, total_steps=stopped + 30))
    plain.train()
    for a, b in zip(params(plain), params(resumed)):  # and it ends where a run never stopped ends
        assert torch.equal(a, b)


def test_stop_inside_an_update_burst_resumes_to_the_uninterrupted_run(tmp_path, demos):
    """Stopped between two updates of step 100's plan (which is also an evaluation step): the
    resumed run runs the rest of the plan and the evaluation, and ends bit-identical."""
    extra = {"total_steps": 160, "eval_every": 100}
    plain = DirectTrainer(small_cfg(tmp_path / "a", demos, **extra))
    plain.train()
    stopped = DirectTrainer(small_cfg(tmp_path / "b", demos, **extra))
    run, updates = stopped.runner.run, []

    def run_and_stop_after_two(plan):
        out = run(plan)
        if stopped.step == 100:
            updates.append(plan)
            if len(updates) == 2:
                stopped.stop.set()
        return out

    stopped.runner.run = run_and_stop_after_two
    with pytest.raises(TrainingInterrupted):
        stopped.train()
    # step 100's plan: 2 D, 3 P_I, 5 critic updates; stopped after the two D updates
    assert stopped.step == 100 and stopped.pending == Plan(inverse=3, critic=5)
    assert not (tmp_path / "b" / "run_opolo" / "eval.csv").exists()  # step 100's evaluation is due
    resumed = DirectTrainer(small_cfg(tmp_path / "b", demos, **extra))
    resumed.train()
    for x, y in zip(params(plain), params(resumed)):
        assert torch.equal(x, y)
    assert resumed.learner.critic_steps == plain.learner.critic_steps
    evals = (tmp_path / "b" / "run_opolo" / "eval.csv").read_text().splitlines()[1:]
    assert [row.split(",")[0] for row in evals] == ["100", "160"]


def test_stop_inside_an_evaluation_ends_it_and_the_resumed_run_evaluates_again(tmp_path, demos):
    """A stop in the middle of step 100's evaluation (10 episodes) ends it within a step; the
    evaluation is still due in the checkpoint, done on resume, and the run ends bit-identical."""
    extra = {"total_steps": 160, "eval_every": 100, "eval_episodes": 10}
    plain = DirectTrainer(small_cfg(tmp_path / "a", demos, **extra))
    plain.train()
    stopped = DirectTrainer(small_cfg(tmp_path / "b", demos, **extra))
    calls = stop_in_evaluation(stopped, None, 5)  # the evaluation's policy: stop after 5 of its steps
    with pytest.raises(TrainingInterrupted):
        stopped.train()
    assert stopped.step == 100 and stopped.eval_due and len(calls) == 5  # not one step more
    assert not (tmp_path / "b" / "run_opolo" / "eval.csv").exists()
    resumed = DirectTrainer(small_cfg(tmp_path / "b", demos, **extra))
    resumed.train()
    for x, y in zip(params(plain), params(resumed)):
        assert torch.equal(x, y)
    plain_rows = (tmp_path / "a" / "run_opolo" / "eval.csv").read_text().splitlines()[1:]
    rows = (tmp_path / "b" / "run_opolo" / "eval.csv").read_text().splitlines()[1:]
    assert [r.split(",")[:3] for r in rows] == [r.split(",")[:3] for r in plain_rows]  # steps, returns
    assert [r.split(",")[0] for r in rows] == ["100", "160"]

@pytest.mark.parametrize("algo", ["opolo", "td3"])
def test_stream_trainer_runs_the_direct_loops_updates(tmp_path, demos, algo):
    """The learner node's trainer, fed the direct loop's transitions as replay batches (actions in the
    environment's units, as a bridge sends them), ends with the direct loop's networks: the graph's
    training is the direct loop's, only the transitions arrive another way."""
    cfg = small_cfg(tmp_path, demos, algo)
    direct = DirectTrainer(cfg)
    rows, add = [], direct.runner.replay.add

    def recording_add(obs, action, next_obs, reward, terminated, truncated):
        sent = direct.scaler.to_env(action).astype(np.float32)  # float32 on the wire: the unit action
        rows.append(np.concatenate([obs, sent, next_obs, [reward, terminated, truncated]]).astype(np.float32))
        add(obs, direct.scaler.to_unit(sent), next_obs, reward, terminated, truncated)  # comes back 1 ulp off

    direct.runner.replay.add = recording_add
    for _ in range(cfg.total_steps):
        direct.env_step()
    exported = []
    stream_cfg = load_run_config(None, {**to_dict(cfg), "run_dir": str(tmp_path / "stream")})
    stream = StreamTrainer(stream_cfg, policy_every=cfg.total_steps,
                           hooks=StreamHooks(lambda path, version: exported.append(version), lambda: None,
                                             logging.getLogger("stream")))
    stream.start(direct.demos or None, resume=False, journal=True, journal_fsync=False)
    stream.catch_up()  # as the learner node does: nothing owed, the first policy goes out
    for k in range(0, len(rows), 37):  # batches of a bridge
        stream.ingest(ReplayBatch.from_rows(np.stack(rows[k:k + 37]), stream.obs_dim, seq=k // 37, source=5))
    stream.finish()
    stream.close()
    assert stream.step == cfg.total_steps and exported == [0, cfg.total_steps, cfg.total_steps]
    assert {k: getattr(stream.learner, k) for k in stream.learner.counter_names} == \
        {k: getattr(direct.learner, k) for k in direct.learner.counter_names}
    for a, b in zip(params(direct), params(stream), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_run_ends_early_once_an_evaluation_reaches_stop_at_return(tmp_path, demos):
    """`stop_at_return`: the direct loop and the learner node's trainer both end at the first
    evaluation that reaches it (an expert run stops spending compute once it is good enough), and a
    finished run run again stays finished."""
    cfg = small_cfg(tmp_path, demos, "td3", eval_every=100, stop_at_return=-1e9)  # any return reaches it
    result = DirectTrainer(cfg).train()
    assert result.env_steps == 100 and (result.run_dir / "policy_best.onnx").is_file()
    assert DirectTrainer(cfg).train().env_steps == 100
    assert len((result.run_dir / "eval.csv").read_text().splitlines()) == 2  # header + step 100

    stream_cfg = load_run_config(None, {**to_dict(cfg), "run_dir": str(tmp_path / "stream")})
    hooks = StreamHooks(lambda path, version: None, lambda: None, logging.getLogger("s"))
    stream = StreamTrainer(stream_cfg, policy_every=cfg.total_steps, hooks=hooks)
    stream.start(None, resume=False, journal=False, journal_fsync=False)
    rows = np.zeros((250, 4 + 1 + 4 + 3), np.float32)
    stream.ingest(ReplayBatch.from_rows(rows, stream.obs_dim, seq=0, source=1))
    assert stream.done and stream.step == 100 and stream.evaluator.best_return >= -1e9
    assert stream.finish().env_steps == 100 and (tmp_path / "stream" / "policy_best.onnx").is_file()
    stream_best = load_policy(tmp_path / "stream" / "policy_best.onnx").metadata.extra
    assert float(stream_best["eval_return_mean"]) == pytest.approx(stream.evaluator.best_return, abs=1e-4)
    stream.close()
    again = StreamTrainer(stream_cfg, policy_every=cfg.total_steps, hooks=hooks)
    again.start(None, resume=True, journal=False, journal_fsync=False)
    assert again.done and again.finish().env_steps == 100
    again.close()
    assert len((tmp_path / "stream" / "eval.csv").read_text().splitlines()) == 2  # not evaluated again
    from opolo_ros.train.logger import RunLogger

    row, = RunLogger.read_evaluations(tmp_path / "stream" / "eval.csv")  # baselines (TD3: no expert)
    assert np.isfinite(row["r_random"]) and np.isnan(row["r_expert"])

    with pytest.raises(ValueError, match="'stop_at_return' .* needs evaluations: set 'eval_every' > 0"):
        small_cfg(tmp_path, demos, "td3", eval_every=0, stop_at_return=100.0)


def test_read_evaluations_until_a_step(tmp_path):
    from opolo_ros.train.logger import RunLogger

    path = tmp_path / "eval.csv"
    path.write_text("env_step,return_mean\n100,1.0\n200,\n300,3.0\n")
    rows = RunLogger.read_evaluations(path)
    assert [r["env_step"] for r in rows] == [100, 200, 300] and math.isnan(rows[1]["return_mean"])
    assert [r["env_step"] for r in RunLogger.read_evaluations(path, until=200)] == [100, 200]
    assert RunLogger.read_evaluations(tmp_path / "missing.csv", until=200) == []


def test_torch_rng_state_round_trip_and_checkpoints_without_cuda_state():
    import torch

    from opolo_ros.train.checkpoint import restore_torch_rng, torch_rng_state

    state = torch_rng_state()
    first = torch.rand(3)
    restore_torch_rng(state)
    assert torch.equal(torch.rand(3), first)
    restore_torch_rng({"torch_rng": state["torch_rng"]})  # written before the CUDA states were saved
    assert torch.equal(torch.rand(3), first)


def test_checkpoint_files_left_by_a_killed_save_are_removed_and_errors_say_how_to_start_over(tmp_path):
    from opolo_ros.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

    path = tmp_path / "checkpoint.pt"
    (tmp_path / ".checkpoint.pt.abc123.tmp").write_bytes(b"half a checkpoint")  # kill -9 mid-save
    save_checkpoint(path, {"config": {"env_id": "x", "algo": "opolo"}, "step": 1, "runner": {}})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]
    path.write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match=r"cannot be read .*; start over with --no-resume$"):
        load_checkpoint(path, "start over with --no-resume")
    assert "without --no-resume to resume" in str(TrainingInterrupted(5, path, same_command_resumes=False))
    assert "run the same command again to resume" in str(TrainingInterrupted(5, path))


def test_a_re_sent_batch_0_is_a_duplicate_a_restarted_bridges_batch_0_is_not(tmp_path, demos):
    """A bridge re-sends its unacknowledged batches when the learner's acknowledgement stalls (the
    P_I pre-training inside the first batch is enough): a re-sent batch 0 was consumed twice, and
    the acknowledgement fell back to seq 0. A restarted bridge's new batch 0 is still consumed."""
    cfg = small_cfg(tmp_path, demos, "td3", total_steps=10_000)
    hooks = StreamHooks(lambda path, version: None, lambda: None, logging.getLogger("s"))
    stream = StreamTrainer(cfg, policy_every=cfg.total_steps, hooks=hooks)
    stream.start(None, resume=False, journal=False, journal_fsync=False)
    rng = np.random.default_rng(0)

    def batch(seq: int) -> ReplayBatch:
        rows = rng.normal(0, 0.1, (20, 4 + 1 + 4 + 3)).astype(np.float32)
        rows[:, -2:] = 0.0  # not terminated, not truncated
        return ReplayBatch.from_rows(rows, stream.obs_dim, seq=seq, source=3)

    first, second = batch(0), batch(1)
    for b in (first, second):
        assert not stream.is_duplicate(b)
        stream.ingest(b)
    assert stream.is_duplicate(first) and stream.is_duplicate(second)  # re-sent: dropped
    restarted = batch(0)  # another first batch: a bridge counting anew
    assert not stream.is_duplicate(restarted)
    stream.ingest(restarted)
    assert stream.step == 60 and stream.acks[3].seq == 0
    stream.save()
    stream.close()
    again = StreamTrainer(cfg, policy_every=cfg.total_steps, hooks=hooks)
    again.start(None, resume=True, journal=False, journal_fsync=False)
    assert again.is_duplicate(restarted) and not again.is_duplicate(first)  # kept in the checkpoint
    again.close()


def test_a_batch_released_behind_one_a_stop_cut_short_is_left_for_the_resend(tmp_path, demos):
    """The learner releases batches 1 and 2 together (2 came first and waited for 1); a stop cuts
    batch 1 short after 4 transitions. Batch 2 is neither journalled nor acknowledged: the resumed
    learner takes the rest of batch 1 from the journal, then the bridge's re-send of batch 2 whole.
    Before, batch 2 was journalled from step 14, over batch 1's last 6 rows, and 6 transitions were
    lost."""
    base = to_dict(small_cfg(tmp_path, demos, "td3"))
    cfg = load_run_config(None, {**base, "schedule": {**base["schedule"], "warmup_steps": 10**6}})
    rng = np.random.default_rng(0)
    rows = [np.concatenate([rng.normal(size=(10, 10)), np.zeros((10, 2))], axis=1)  # s, a, s', r; not ended
            for _ in range(3)]
    batches = [ReplayBatch.from_rows(r.astype(np.float32), 4, seq=k, source=9) for k, r in enumerate(rows)]
    hooks = StreamHooks(lambda path, version: None, lambda: None, logging.getLogger("s"))
    stream = StreamTrainer(cfg, policy_every=10**6, hooks=hooks)
    stream.start(None, resume=False, journal=True, journal_fsync=False)
    stream.ingest(batches[0])
    add, added = stream.replay.add, []

    def add_then_stop(*row) -> None:
        add(*row)
        added.append(1)
        if len(added) == 4:
            stream.stop.set()  # SIGTERM in the middle of batch 1

    stream.replay.add = add_then_stop
    for batch in batches[1:]:  # as the learner's loop ingests what the reorder buffer released
        stream.ingest(batch)
    assert stream.step == 14 and stream.acks[9].seq == 1 and stream.checkpoint_if_stopped()
    stream.close()
    again = StreamTrainer(cfg, policy_every=10**6, hooks=hooks)
    again.start(None, resume=True, journal=True, journal_fsync=False)
    again.catch_up()
    assert again.step == 20 and not again.is_duplicate(batches[2])  # unacknowledged: the bridge re-sends it
    again.ingest(batches[2])
    stored = {tuple(row) for row in again.replay.obs[:len(again.replay)].tolist()}
    again.close()
    assert again.step == 30 and stored == {tuple(row) for b in batches for row in b.obs.tolist()}


def test_starting_over_sets_the_previous_runs_files_aside(tmp_path, demos):
    """--no-resume in a folder that holds a run: its checkpoint, evaluations, TensorBoard events and
    policies move to previous-<time>/ (nothing deleted, nothing mixed into the new run's)."""
    cfg = small_cfg(tmp_path, demos, "td3", total_steps=100, eval_every=50)
    DirectTrainer(cfg).train()
    run = tmp_path / "run_td3"
    before = {p.name for p in run.iterdir()}
    assert {"checkpoint.pt", "eval.csv", "tb", "policy.onnx"} <= before
    DirectTrainer(cfg).train(resume=False)
    previous = [p for p in run.iterdir() if p.name.startswith("previous-")]
    assert len(previous) == 1
    kept = {p.name for p in previous[0].iterdir()}
    assert {"checkpoint.pt", "config.yaml", "eval.csv", "tb", "policy.onnx"} <= kept  # exportable as it was
    assert len((run / "eval.csv").read_text().splitlines()) == 3  # header + 50 + 100: the new run's only
    assert len(list((run / "tb").iterdir())) == 1  # one events file: the new run's
    # the command's --no-resume does the same (a mutation test: it was not passed on unnoticed)
    from opolo_ros import cli

    config = tmp_path / "td3.yaml"
    config.write_text(yaml.safe_dump(to_dict(cfg)))
    assert cli.main(["train-expert", "--config", str(config), "--no-resume"]) == 0
    assert len([p for p in run.iterdir() if p.name.startswith("previous-")]) == 2


def test_config_changes_name_the_shape_changing_keys_first() -> None:
    """With seven harmless changes the one that stopped the resume was cut off as 'and 1 more'."""
    from opolo_ros.train.checkpoint import config_changes

    saved = {"checkpoint_every": 200, "eval_every": 100, "eval_episodes": 1, "export_every": 100,
             "time_feature": False, "schedule": {"warmup_steps": 10, "inverse_pretrain_steps": 5,
                                                 "batch_size": 32},
             "opolo": {"net": {"hidden": [64, 64]}}}
    current = {"checkpoint_every": 5000, "eval_every": 5000, "eval_episodes": 10, "export_every": 500,
               "time_feature": True, "schedule": {"warmup_steps": 1000, "inverse_pretrain_steps": 50,
                                                  "batch_size": 100},
               "opolo": {"net": {"hidden": [400, 300]}}}
    changes = config_changes(saved, current)
    assert changes[:2] == ["opolo.net.hidden: [64, 64] -> [400, 300]", "time_feature: False -> True"]
    assert changes[2:] == sorted(changes[2:]) and len(changes) == 9


@pytest.mark.parametrize("policy_every", [10**6, 5], ids=["no-export-in-journal", "exports-in-journal"])
def test_a_restart_publishes_its_first_progress_after_the_journal(tmp_path, demos, policy_every):
    """The whole graph killed before the first checkpoint: the journal holds batches 0..3 of the
    bridge's source. The restarted learner published its progress before consuming them (no ack for
    the source: the restarted bridge began again at batch 0), then acknowledged batch 3, dropped the
    bridge's new batches 1..3 as consumed already and waited for 4, which the bridge, held by flow
    control, never sent. The first progress must carry the journal's acknowledgement, and the first
    policy the journal's end as its version (policies due inside the journal are not published:
    a restarted actor took one as its step count, a review found)."""
    base = to_dict(small_cfg(tmp_path, demos, "td3"))
    cfg = load_run_config(None, {**base, "schedule": {**base["schedule"], "warmup_steps": 10**6}})
    rng = np.random.default_rng(0)
    batches = [ReplayBatch.from_rows(np.concatenate([rng.normal(size=(5, 10)), np.zeros((5, 2))], axis=1)
                                     .astype(np.float32), 4, seq=k, source=9) for k in range(4)]
    stream = StreamTrainer(cfg, policy_every=10**6, hooks=quiet_hooks())
    stream.start(None, resume=False, journal=True, journal_fsync=False)
    for batch in batches:
        stream.ingest(batch)
    stream.close()  # killed: no checkpoint, the journal on disk
    seen: list = []
    again = StreamTrainer(cfg, policy_every=policy_every, hooks=StreamHooks(
        lambda path, version: seen.append(("policy", version)), lambda: seen.append(dict(again.acks)),
        logging.getLogger("s")))
    again.start(None, resume=True, journal=True, journal_fsync=False)
    assert seen == []  # nothing a bridge or an actor could take its counts from yet
    again.catch_up()
    again.close()
    # the first policy's version is the actor's step count: the journal's end, as the bridge's
    assert again.step == 20 and seen == [("policy", 20), {9: (3, 20)}]  # SourceAck(seq, transitions)


@pytest.mark.parametrize("total", [160, 200], ids=["final-only", "final-is-periodic"])
def test_stop_inside_the_final_evaluation_checkpoints_and_resume_evaluates(tmp_path, demos, total):
    """A signal in the final evaluation ran on (160: it was outside the signal handling, and the
    run ended by KeyboardInterrupt without its last checkpoint; 200: the interrupted periodic
    evaluation was done again in full, and the run exited 0)."""
    extra = {"total_steps": total, "eval_every": 100, "eval_episodes": 10}
    plain = DirectTrainer(small_cfg(tmp_path / "a", demos, **extra))
    plain.train()
    stopped = DirectTrainer(small_cfg(tmp_path / "b", demos, **extra))
    calls = stop_in_evaluation(stopped, total, 5)  # only the final evaluation's calls
    with pytest.raises(TrainingInterrupted):
        stopped.train()
    assert stopped.step == total and stopped.eval_due and len(calls) == 5
    run = tmp_path / "b" / "run_opolo"
    assert torch.load(run / "checkpoint.pt", weights_only=False)["step"] == total
    resumed = DirectTrainer(small_cfg(tmp_path / "b", demos, **extra))
    resumed.train()
    plain_rows = (tmp_path / "a" / "run_opolo" / "eval.csv").read_text().splitlines()[1:]
    rows = (run / "eval.csv").read_text().splitlines()[1:]
    assert [r.split(",")[:3] for r in rows] == [r.split(",")[:3] for r in plain_rows]
    assert [r.split(",")[0] for r in rows] == (["100", "160"] if total == 160 else ["100", "200"])


def test_the_direct_loop_refuses_a_learner_node_checkpoint(tmp_path, demos):
    """It failed with KeyError: 'rng' (a traceback); the learner node refuses the direct loop's."""
    cfg = small_cfg(tmp_path, demos, "td3")
    stream = StreamTrainer(cfg, policy_every=10**6, hooks=quiet_hooks())
    stream.start(None, resume=False, journal=False, journal_fsync=False)
    stream.save()
    stream.close()
    with pytest.raises(ValueError, match=r"was written by the learner node \(opolo-ros launch sim_train\), "
                                         r"not by the direct loop; start over"):
        DirectTrainer(cfg).restore()


def test_tensorboard_shows_steps_once_after_a_crash_and_resume(tmp_path, demos):
    """A crashed run logged past its last checkpoint; the resumed run logs those steps again, and
    TensorBoard showed both (the probe found 7 duplicate episode returns after a kill -9)."""
    import shutil

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = small_cfg(tmp_path, demos, "td3", total_steps=100, eval_every=0, checkpoint_every=100)
    DirectTrainer(cfg).train()
    run = tmp_path / "run_td3"
    shutil.copy(run / "checkpoint.pt", tmp_path / "at100.pt")
    DirectTrainer(small_cfg(tmp_path, demos, "td3", total_steps=300, eval_every=0)).train()
    shutil.copy(tmp_path / "at100.pt", run / "checkpoint.pt")  # as if killed after step 300's logs
    DirectTrainer(small_cfg(tmp_path, demos, "td3", total_steps=300, eval_every=0)).train()
    events = EventAccumulator(str(run / "tb"))
    events.Reload()
    steps = [e.step for e in events.Scalars("train/episode_return")]
    assert len(steps) > 5 and steps == sorted(set(steps)), steps


def test_resuming_with_another_seed_or_variant_is_refused_and_other_changes_are_named(tmp_path, demos,
                                                                                     capsys):
    """Seed 7's run resumed as seed 8 or as OPOLO-x went on silently (config.yaml rewritten)."""
    first = DirectTrainer(small_cfg(tmp_path, demos, total_steps=60))
    first.train()
    for extra, says in [({"seed": 8}, r"was written with seed 7, not 8 \(also changed: total_steps: 60 -> "
                                      r"80\): a resumed run goes on"),
                        ({"opolo": {"lam": 0.0}}, r"is a run of OPOLO \(opolo.lam 0.1\), not of OPOLO-x"),
                        # one refusal names every change (a walkthrough fixed them one by one)
                        ({"seed": 8, "eval_episodes": 3}, r"not 8 \(also changed: eval_episodes: 1 -> 3; "
                                                          r"total_steps: 60 -> 80\)"),
                        ({"opolo": {"lam": 0.0}, "eval_episodes": 3},
                         r"OPOLO-x \(opolo.lam 0.0\) \(also changed: .*eval_episodes: 1 -> 3; total_steps")]:
        with pytest.raises(ValueError, match=says):
            DirectTrainer(small_cfg(tmp_path, demos, total_steps=80, **extra)).train()
    assert yaml.safe_load((first.run_dir / "config.yaml").read_text())["seed"] == 7
    capsys.readouterr()
    DirectTrainer(small_cfg(tmp_path, demos, total_steps=80, eval_episodes=2)).train()
    assert ("resuming under config values changed since the checkpoint: eval_episodes: 1 -> 2; "
            "total_steps: 60 -> 80") in capsys.readouterr().out


def test_another_tasks_replay_journal_is_refused_in_one_line_and_leaves_the_config(tmp_path, demos):
    """A ValueError from the journal reached the learner's generic handler (a traceback), after
    config.yaml had been overwritten."""
    from opolo_ros.data.journal import JournalRecord, ReplayJournal

    cfg = small_cfg(tmp_path, demos, "td3")
    run = tmp_path / "run_td3"
    run.mkdir()
    (run / "config.yaml").write_text("the other run's\n")
    other = ReplayJournal(run / "replay_journal.bin", fields=7)
    other.open()
    other.append(JournalRecord(0, 1, 0, np.zeros((3, 7), np.float32)))
    other.close()
    stream = StreamTrainer(cfg, policy_every=10**6, hooks=quiet_hooks())
    with pytest.raises(ValueError, match=r"holds transitions of 7 fields, this run has 12 .*; use another "
                                         r"run_dir \(or resume:=false to start over\)$"):
        stream.start(None, resume=True, journal=True, journal_fsync=False)
    stream.close()
    assert (run / "config.yaml").read_text() == "the other run's\n"


def test_tensorboard_keeps_the_checkpoints_own_step_when_it_owes_an_evaluation(tmp_path, demos):
    """Checkpointed inside step 200's (final) evaluation: the resumed run logs that evaluation at
    step 200, and the scalars the run logged at step 200 before its checkpoint stay (purging from
    the checkpoint's own step dropped them for good, a review found)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    extra = {"total_steps": 200, "eval_every": 100, "eval_episodes": 3}
    first = DirectTrainer(small_cfg(tmp_path, demos, **extra))
    stop_in_evaluation(first, 200, 3)
    with pytest.raises(TrainingInterrupted):
        first.train()
    DirectTrainer(small_cfg(tmp_path, demos, **extra)).train()
    events = EventAccumulator(str(tmp_path / "run_opolo" / "tb"))
    events.Reload()
    assert [e.step for e in events.Scalars("eval/return")] == [100, 200]
    assert [e.step for e in events.Scalars("perf/steps_per_sec")] == [200]


def test_a_stop_during_the_last_steps_checkpoint_still_owes_the_final_evaluation(tmp_path, demos):
    """The stop came in the last step's own checkpoint: train() returned step 100's evaluation as
    the result, exit 0, no evaluation at the last step (found by a review)."""
    trainer = DirectTrainer(small_cfg(tmp_path, demos, total_steps=160, eval_every=100, checkpoint_every=80))
    save = trainer.save

    def save_then_stop() -> None:
        save()
        if trainer.step == 160:
            trainer.stop.set()

    trainer.save = save_then_stop
    with pytest.raises(TrainingInterrupted):
        trainer.train()
    assert trainer.eval_due
    resumed = DirectTrainer(small_cfg(tmp_path, demos, total_steps=160, eval_every=100, checkpoint_every=80))
    result = resumed.train()
    rows = (tmp_path / "run_opolo" / "eval.csv").read_text().splitlines()[1:]
    assert [r.split(",")[0] for r in rows] == ["100", "160"] and result.env_steps == 160


def test_resume_refusals_name_the_task_first() -> None:
    """A TD3 checkpoint of another seed, resumed as OPOLO-x on another task, was refused as 'a run of
    OPOLO' or for its seed (found by a review): the task and algorithm come first."""
    from opolo_ros.train.checkpoint import resume_changes

    saved = to_dict(load_run_config(None, {"algo": "td3", "env_id": "InvertedPendulum-v5", "seed": 7}))
    opolo_x = {"algo": "opolo", "env_id": "InvertedPendulum-v5", "seed": 8, "opolo": {"lam": 0.0}}
    for config, says in [(opolo_x,
                          "is for td3 on InvertedPendulum-v5, not opolo on InvertedPendulum-v5"),
                         ({"algo": "td3", "env_id": "Hopper-v5", "seed": 8},
                          r"is for td3 on InvertedPendulum-v5, not td3 on Hopper-v5 \(also changed: "
                          r"seed: 7 -> 8\)")]:
        with pytest.raises(ValueError, match=says):
            resume_changes({"config": saved}, to_dict(load_run_config(None, config)), "ck.pt", "start over")
    same = to_dict(load_run_config(None, {"algo": "td3", "env_id": "InvertedPendulum-v5", "seed": 7,
                                          "opolo": {"lam": 0.0}}))  # not an OPOLO run: lam means nothing
    assert resume_changes({"config": saved}, same, "ck.pt", "start over") == ["opolo.lam: 0.1 -> 0.0"]


def test_a_diverged_run_writes_nothing_over_its_last_checkpoint_and_policies(tmp_path, demos):
    """Networks gone to NaN kept training, were checkpointed and exported over the good files, and
    the run exited 0 (a probe found it with learning rates of 1e30, and with demonstrations holding
    3e38). Now the first write refuses, in one line, and a NaN checkpoint is not resumed."""
    trainer = DirectTrainer(small_cfg(tmp_path, demos, total_steps=100, checkpoint_every=100,
                                      export_every=100))
    trainer.train()
    run = trainer.run_dir
    before = {name: (run / name).read_bytes() for name in ("checkpoint.pt", "policy.onnx")}
    with torch.no_grad():
        next(trainer.learner.actor.parameters()).fill_(float("nan"))
    for write in (trainer.save, lambda: trainer.export(run / "policy.onnx")):
        with pytest.raises(ValueError, match=r"training diverged by step 100: NaN or inf in actor\..*; "
                                             r"(checkpoint.pt|policy.onnx) not written"):
            write()
    assert {name: (run / name).read_bytes() for name in before} == before
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    state["runner"]["learner"]["actor"] = {k: torch.full_like(v, float("nan"))
                                           for k, v in state["runner"]["learner"]["actor"].items()}
    torch.save(state, run / "checkpoint.pt")
    with pytest.raises(ValueError, match="holds NaN or inf .*a run that diverged"):
        DirectTrainer(small_cfg(tmp_path, demos, total_steps=200)).restore()


def test_a_nan_evaluation_is_no_best_and_a_nan_policy_scores_nan() -> None:
    from opolo_ros.sim.envs import evaluate
    from opolo_ros.train.run_eval import note_evaluation

    cfg = load_run_config(None, {})
    exported: list[int] = []
    assert note_evaluation(float("nan"), 5.0, cfg, 10, lambda: exported.append(1), print) == 5.0
    assert note_evaluation(float("nan"), -math.inf, cfg, 10, lambda: exported.append(1), print) == -math.inf
    assert exported == []  # a NaN policy never becomes policy_best.onnx
    # MuJoCo runs a NaN control as 0 and the episode ended at once: scored 1.0 on the pendulum
    assert np.isnan(evaluate(lambda obs: np.array([np.nan]), "InvertedPendulum-v5", 2)).all()


def test_stop_at_return_is_reached_by_an_equal_return_and_policy_best_is_kept_for_a_better_one() -> None:
    """README: a run ends at the first evaluation whose mean return *reaches* stop_at_return (the
    pendulum's 1000 is its most: a strict > never ended such a run); policy_best.onnx is the first of
    the best evaluations (an equal one later does not replace it), and none with keep_best off (a
    mutation test; both trainers decide with these)."""
    import dataclasses

    from opolo_ros.train.direct import run_finished
    from opolo_ros.train.run_eval import note_evaluation

    cfg = load_run_config(None, {"stop_at_return": 1000.0, "total_steps": 5000})
    said, exported = [], []
    best = note_evaluation(1000.0, -math.inf, cfg, 100, lambda: exported.append(100), said.append)
    assert best == 1000.0 and exported == [100] and run_finished(100, best, cfg)
    assert said == ["step 100: evaluation reached stop_at_return=1000; the run ends here"]
    assert not run_finished(100, 999.5, cfg) and run_finished(5000, -math.inf, cfg)
    assert note_evaluation(1000.0, 1000.0, cfg, 200, lambda: exported.append(200), said.append) == 1000.0
    assert exported == [100]  # the equal evaluation at 200 is no better one
    off = dataclasses.replace(cfg, keep_best=False)
    assert note_evaluation(5.0, -math.inf, off, 300, lambda: exported.append(300), said.append) == 5.0
    assert exported == [100]


def test_mean_return_of_demonstrations_without_returns_is_nan_without_a_warning():
    """A robot's recorded joint states carry no returns: numpy warned 'Mean of empty slice' with its
    source line in the middle of the run's output (a walkthrough)."""
    import warnings

    from opolo_ros.data.demos import Episode
    from opolo_ros.train.run_eval import mean_return

    unknown = [Episode(np.zeros((3, 2)), math.nan), Episode(np.zeros((4, 2)), math.nan)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(mean_return(unknown)) and math.isnan(mean_return([]))
        known = [Episode(np.zeros((3, 2)), 10.0), Episode(np.zeros((3, 2)), 20.0)]
        assert mean_return([*unknown, *known]) == 15.0


@pytest.mark.parametrize("num_demos,taken", [(2, 2), (0, 6), (9, 6)])
def test_num_demos_takes_the_first_episodes_and_0_takes_all(tmp_path, capsys, num_demos, taken):
    """... and `opolo-ros train` says how many it takes, and how many it leaves out (they were
    dropped without a word, a walkthrough)."""
    from opolo_ros.cli import _check_demos
    from opolo_ros.train.direct import prepare_demos

    rng = np.random.default_rng(1)
    path = tmp_path / "six.npz"
    save_npz(path, [Episode(rng.normal(0, 0.1, (10 + k, 4)), float(k)) for k in range(6)])
    cfg = small_cfg(tmp_path, path, num_demos=num_demos)
    episodes = prepare_demos(cfg, max_steps=1000)
    assert [len(ep.obs) for ep in episodes] == [10 + k for k in range(taken)]
    _check_demos(cfg)
    said = capsys.readouterr().out
    assert f"demonstrations: {taken} episodes of {path}" in said
    assert ("4 more in it left out (num_demos 2; 0 = all)" in said) == (taken == 2), said
    assert ("6 episodes of " + str(path) + ", 69 transitions (num_demos 9: it holds no more)" in said) == \
        (num_demos == 9), said  # more asked for than there are: said, not silent (a walkthrough)


def test_a_resume_under_changed_values_keeps_the_config_it_ran_under(tmp_path, demos):
    """config.yaml says what produced the folder's results: a run resumed under changed values keeps
    the old file as config-until-step<N>.yaml; a finished run started again with other values leaves
    config.yaml alone (nothing trained under them). Both trainers; starting over sets both aside."""
    def configs(run):
        return {p.name: yaml.safe_load(p.read_text()) for p in run.glob("config*.yaml")}

    cfg = small_cfg(tmp_path, demos, "td3", total_steps=100)
    DirectTrainer(cfg).train()
    run = tmp_path / "run_td3"
    DirectTrainer(small_cfg(tmp_path, demos, "td3", total_steps=100, eval_episodes=3)).train()
    assert configs(run) == {"config.yaml": to_dict(cfg)}  # finished: nothing ran under the new values
    longer = small_cfg(tmp_path, demos, "td3", total_steps=150)
    DirectTrainer(longer).train()
    assert configs(run) == {"config.yaml": to_dict(longer), "config-until-step100.yaml": to_dict(cfg)}
    DirectTrainer(longer).train(resume=False)
    assert configs(run) == {"config.yaml": to_dict(longer)}
    previous = next(run.glob("previous-*"))
    assert configs(previous) == {"config.yaml": to_dict(longer), "config-until-step100.yaml": to_dict(cfg)}

    stream_dir = tmp_path / "stream"
    rows = np.zeros((100, 4 + 1 + 4 + 3), np.float32)
    for seq, total in enumerate((100, 100, 150)):
        stream_cfg = load_run_config(None, {**to_dict(cfg), "run_dir": str(stream_dir), "total_steps": total,
                                            "eval_episodes": 1 + seq})
        stream = StreamTrainer(stream_cfg, policy_every=total, hooks=quiet_hooks())
        stream.start(None, resume=True, journal=False, journal_fsync=False)
        stream.ingest(ReplayBatch.from_rows(rows, stream.obs_dim, seq=seq, source=1))
        stream.finish()
        stream.close()
        if seq == 1:  # finished at 100: started again with eval_episodes 2, config.yaml unchanged
            assert configs(stream_dir) == {"config.yaml": {**to_dict(cfg), "run_dir": str(stream_dir)}}
    assert yaml.safe_load((stream_dir / "config.yaml").read_text())["total_steps"] == 150
    assert yaml.safe_load((stream_dir / "config-until-step100.yaml").read_text())["eval_episodes"] == 1


def test_a_finished_learner_journals_no_batch_it_will_not_consume(tmp_path, demos):
    """A batch that comes after the run's end is neither consumed nor journalled: a journal record
    of it would be consumed by a resume with a larger total_steps, and its bridge, never
    acknowledged, sends it again."""
    from opolo_ros.data.journal import read_records

    cfg = small_cfg(tmp_path, demos, "td3", total_steps=100)
    stream_cfg = load_run_config(None, {**to_dict(cfg), "run_dir": str(tmp_path / "stream")})
    stream = StreamTrainer(stream_cfg, policy_every=100, hooks=quiet_hooks())
    stream.start(None, resume=False, journal=True, journal_fsync=False)
    rows = np.zeros((120, 4 + 1 + 4 + 3), np.float32)
    stream.ingest(ReplayBatch.from_rows(rows, stream.obs_dim, seq=0, source=1))
    assert stream.done and stream.step == 100
    stream.ingest(ReplayBatch.from_rows(rows, stream.obs_dim, seq=1, source=1))
    stream.sync_journal()
    assert [r.seq for r in read_records(stream.journal_path)[0]] == [0]
    assert stream.acks[1].seq == 0 and stream.step == 100
    stream.finish()
    stream.close()


def test_a_stop_while_a_restarted_learner_catches_up_publishes_no_older_acknowledgement(tmp_path, demos):
    """Learner A acknowledged 5 batches (50 transitions) with a checkpoint at 20, then crashed. B
    resumes and is stopped before, or in the middle of, the journal's replay: before, B published
    the checkpoint's acknowledgement (or one inside the journal) all the same, a bridge numbered new
    batches from it, and C, replaying the whole journal, dropped them as duplicates yet
    acknowledged them. Now nothing goes out until the journal is consumed; B's stop checkpoint is
    not written again where it stands where B loaded it; C acknowledges all of A's batches."""
    base = to_dict(small_cfg(tmp_path, demos, "td3"))
    cfg = load_run_config(None, {**base, "schedule": {**base["schedule"], "warmup_steps": 10**6}})
    rng = np.random.default_rng(0)
    batches = [ReplayBatch.from_rows(np.concatenate([rng.normal(size=(10, 10)), np.zeros((10, 2))], axis=1)
                                     .astype(np.float32), 4, seq=k, source=9) for k in range(5)]
    published: list[tuple] = []

    def trainer() -> StreamTrainer:
        hooks = StreamHooks(lambda path, version: published.append(("policy", version)),
                            lambda: published.append(("progress", tuple(stream.acks[9]))),
                            logging.getLogger("s"))
        stream = StreamTrainer(cfg, policy_every=10**6, hooks=hooks)
        stream.start(None, resume=True, journal=True, journal_fsync=False)
        return stream

    a = trainer()
    for k, batch in enumerate(batches):
        a.ingest(batch)
        if k == 1:
            a.save()
    assert published[-1] == ("progress", (4, 50))
    a.close()  # a crash after the last acknowledgement: no checkpoint at the end
    checkpoint = tmp_path / "run_td3" / "checkpoint.pt"
    written = checkpoint.stat().st_mtime_ns

    for stop_after_rows in (0, 15):  # stopped before the journal's replay, then inside it
        published.clear()
        b = trainer()
        add, added = b.replay.add, []

        def add_then_stop(*row, b=b, add=add, added=added, n=stop_after_rows) -> None:
            add(*row)
            added.append(1)
            if len(added) == n:
                b.stop.set()

        b.replay.add = add_then_stop
        if stop_after_rows == 0:
            b.stop.set()
        b.catch_up()
        assert published == [] and b.step == 20 + stop_after_rows
        assert b.checkpoint_if_stopped()
        # nothing new since the checkpoint B loaded: not written again
        assert (checkpoint.stat().st_mtime_ns == written) == (stop_after_rows == 0)
        b.close()

    published.clear()
    c = trainer()
    c.catch_up()
    assert c.step == 50 and published == [("policy", 50), ("progress", (4, 50))]
    c.close()


def test_a_stop_during_a_periodic_checkpoint_does_not_write_it_again(tmp_path, demos, monkeypatch):
    import opolo_ros.train.stream as stream_module

    cfg = small_cfg(tmp_path, demos, "td3", checkpoint_every=10)
    stream = StreamTrainer(cfg, policy_every=10**6, hooks=quiet_hooks())
    stream.start(None, resume=False, journal=False, journal_fsync=False)
    writes = []

    def save_then_stop(path, state, stop=None) -> None:
        writes.append(state["step"])
        stream.stop.set()  # SIGTERM while the checkpoint is written

    monkeypatch.setattr(stream_module, "save_checkpoint", save_then_stop)
    rows = np.zeros((10, 4 + 1 + 4 + 3), np.float32)
    stream.ingest(ReplayBatch.from_rows(rows, stream.obs_dim, seq=0, source=1))
    assert stream.checkpoint_if_stopped() and writes == [10]
    stream.close()


def test_a_checkpoint_that_cannot_be_written_says_so_in_one_line_and_keeps_the_old_one(tmp_path, monkeypatch):
    """A full disk: torch's message ("[enforce fail at inline_container.cc:672] . unexpected pos
    ...") named neither the file nor the disk. Now one line does; the previous checkpoint stays
    and no temporary file is left."""
    import opolo_ros.train.checkpoint as ckpt

    path = tmp_path / "checkpoint.pt"
    ckpt.save_checkpoint(path, {"step": 1})
    before = path.read_bytes()

    def full_disk(state, f) -> None:
        f.write(b"PK\x03\x04 partial")
        raise RuntimeError("[enforce fail at inline_container.cc:672] .\nunexpected pos 58752 vs 58640")

    monkeypatch.setattr(ckpt.torch, "save", full_disk)
    with pytest.raises(ckpt.CheckpointWriteError) as err:
        ckpt.save_checkpoint(path, {"step": 2})
    message = str(err.value)
    assert "\n" not in message and f"could not write checkpoint {path}" in message
    assert re.search(r"\d+ MiB free on its disk\): the previous checkpoint is kept$", message), message
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


def crashed_run(tmp_path, demos, after: int):
    """A TD3 stream run checkpointed after one batch of 10 transitions, then `after` batches more
    journalled and no checkpoint (a crash): its config and journal file."""
    cfg = small_cfg(tmp_path, demos, "td3", total_steps=10_000)
    rows = np.zeros((10, 4 + 1 + 4 + 3), np.float32)
    crashed = StreamTrainer(cfg, policy_every=10**6, hooks=quiet_hooks())
    crashed.start(None, resume=True, journal=True, journal_fsync=False)
    crashed.ingest(ReplayBatch.from_rows(rows, crashed.obs_dim, seq=0, source=1))
    crashed.save()
    for seq in range(1, after + 1):
        crashed.ingest(ReplayBatch.from_rows(rows, crashed.obs_dim, seq=seq, source=1))
    crashed.close()
    return cfg, tmp_path / "run_td3" / "replay_journal.bin"


def test_a_crashed_runs_journal_is_not_deleted_by_a_restart_without_journal(tmp_path, demos):
    """journal: false used to delete the journal of a crashed run, and with it the transitions it had
    acknowledged after its checkpoint; now such a start is refused in one line, the file kept."""
    from opolo_ros.train.checkpoint import CheckpointError

    cfg, journal = crashed_run(tmp_path, demos, after=1)  # the journal holds transitions 10..20
    size = journal.stat().st_size
    without = StreamTrainer(cfg, policy_every=10**6, hooks=quiet_hooks())
    with pytest.raises(CheckpointError, match=r"holds 10 transitions after the checkpoint \(step 10\).*"
                                              r"journal:=true"):
        without.start(None, resume=True, journal=False, journal_fsync=False)
    without.close()
    assert journal.stat().st_size == size
    fresh = StreamTrainer(cfg, policy_every=10**6, hooks=quiet_hooks())  # starting over: set aside
    fresh.start(None, resume=False, journal=False, journal_fsync=False)
    fresh.close()
    assert not journal.exists()


def test_a_damaged_journal_is_not_deleted_by_a_restart_without_journal(tmp_path, demos):
    """A journal damaged before its records beyond the checkpoint read as empty to a start with
    journal: false, which deleted it, and every acknowledged transition after the damage with it."""
    from opolo_ros.data.journal import HEADER
    from opolo_ros.train.checkpoint import CheckpointError

    cfg, journal = crashed_run(tmp_path, demos, after=2)  # the journal holds 10..20 and 20..30
    data = bytearray(journal.read_bytes())
    data[HEADER.size + 5] ^= 0x40  # one flipped bit in the payload of 10..20
    journal.write_bytes(bytes(data))
    for tail, kind in ((bytes(data), "whole records follow bad bytes"),
                       (bytes(data[:len(data) // 2]), "its last record is all there")):
        journal.write_bytes(tail)
        without = StreamTrainer(cfg, policy_every=10**6, hooks=quiet_hooks())
        with pytest.raises(CheckpointError, match=rf"replay journal .* is damaged \({kind}.*journal:=true"):
            without.start(None, resume=True, journal=False, journal_fsync=False)
        without.close()
        assert journal.read_bytes() == tail


def test_a_stop_checkpoint_leaves_the_replay_to_the_last_full_one_and_the_journal(tmp_path, demos):
    """A stop writes a light checkpoint: no replay rows (a full 1M-transition Ant buffer took 6-10 s
    to write, past the 2 s a node has to stop), the full checkpoint before it kept as replay_base.pt
    (a hard link), the journal kept from that one's step. The resumed replay buffer is the stopped
    one, row for row, with its sampling generator; the next full checkpoint drops the base. Without
    the journal such a checkpoint is refused, and so is one whose journal lacks the transitions."""
    from opolo_ros.train.checkpoint import CheckpointError, load_checkpoint

    cfg = small_cfg(tmp_path, demos, "td3", total_steps=10_000, checkpoint_every=30)
    rng = np.random.default_rng(1)

    def batch(seq: int) -> ReplayBatch:
        rows = np.concatenate([rng.normal(size=(10, 10)), np.zeros((10, 2))], axis=1).astype(np.float32)
        rows[3, -2] = -1.0 if seq == 3 else 0.0  # one void step: counted, not stored
        return ReplayBatch.from_rows(rows, 4, seq=seq, source=5)

    def trainer(journal: bool = True) -> StreamTrainer:
        stream = StreamTrainer(cfg, policy_every=10**6, hooks=quiet_hooks())
        try:
            stream.start(None, resume=True, journal=journal, journal_fsync=False)
        except CheckpointError:
            stream.close()  # (as the learner node does when its start fails)
            raise
        return stream

    run = tmp_path / "run_td3"
    a = trainer()
    for seq in range(5):  # a full checkpoint at 30
        a.ingest(batch(seq))
    full = (run / "checkpoint.pt").stat().st_ino
    a.stop.set()
    assert a.checkpoint_if_stopped()
    state = load_checkpoint(run / "checkpoint.pt")
    assert state["step"] == 50 and state["runner"]["replay"]["base_step"] == 30
    assert "obs" not in state["runner"]["replay"]
    assert (run / "replay_base.pt").stat().st_ino == full  # the full one, not a copy
    stopped = {name: getattr(a.replay, name)[:len(a.replay)].clone() for name in a.replay.FIELDS}
    counts = (a.replay.pos, len(a.replay), a.replay.total_added)
    generator = a.replay.generator.get_state()
    a.close()

    with pytest.raises(CheckpointError, match="resume with the learner.s journal: true .*-p journal:=true"):
        trainer(journal=False)
    b = trainer()
    assert b.step == 50 and (b.replay.pos, len(b.replay), b.replay.total_added) == counts == (49, 49, 49)
    for name, rows in stopped.items():
        torch.testing.assert_close(getattr(b.replay, name)[:len(b.replay)], rows, rtol=0, atol=0)
    assert torch.equal(b.replay.generator.get_state(), generator)
    b.stop.set()
    assert b.checkpoint_if_stopped()  # nothing new: not written again, the base stays
    b.close()
    b = trainer()
    b.ingest(batch(5))  # the full checkpoint at 60 drops the base
    assert "obs" in load_checkpoint(run / "checkpoint.pt")["runner"]["replay"]
    assert not (run / "replay_base.pt").exists()
    b.ingest(batch(6))
    b.stop.set()
    assert b.checkpoint_if_stopped()  # light again, on the full one at 60
    assert load_checkpoint(run / "checkpoint.pt")["runner"]["replay"]["base_step"] == 60
    b.close()
    c = trainer()
    assert c.step == 70 and c.replay.total_added == 69
    for seq in range(7, 9):  # to the full checkpoint at 90, where it stops: not written again
        c.ingest(batch(seq))
    c.stop.set()
    c.checkpoint_if_stopped()
    c.close()
    assert "obs" in load_checkpoint(run / "checkpoint.pt")["runner"]["replay"]

    d = trainer()
    assert d.step == 90 and d.replay.total_added == 89
    d.ingest(batch(9))
    d.stop.set()
    d.checkpoint_if_stopped()  # light, on the full one at 90
    d.close()
    (run / "replay_journal.bin").unlink()  # the transitions 90..100 gone
    with pytest.raises(CheckpointError, match=r"does not hold the transitions 90\.\.100"):
        trainer()


def light_run(tmp_path, demos, **values) -> tuple:
    """A stream trainer factory (journal on, resumes) and a batch maker, for the light-checkpoint
    tests: 10 transitions a batch, one void step in batch 3."""
    from opolo_ros.train.checkpoint import CheckpointError

    cfg = small_cfg(tmp_path, demos, "td3", **{"total_steps": 10_000, "checkpoint_every": 30, **values})
    rng = np.random.default_rng(1)

    def batch(seq: int) -> ReplayBatch:
        rows = np.concatenate([rng.normal(size=(10, 10)), np.zeros((10, 2))], axis=1).astype(np.float32)
        rows[3, -2] = -1.0 if seq == 3 else 0.0
        return ReplayBatch.from_rows(rows, 4, seq=seq, source=5)

    def trainer(config=cfg) -> StreamTrainer:
        stream = StreamTrainer(config, policy_every=10**6, hooks=quiet_hooks())
        try:
            stream.start(None, resume=True, journal=True, journal_fsync=False)
        except CheckpointError:
            stream.close()
            raise
        return stream

    return cfg, batch, trainer


def stop_at(stream: StreamTrainer, batches) -> None:
    for b in batches:
        stream.ingest(b)
    stream.stop.set()
    assert stream.checkpoint_if_stopped()
    stream.close()


def replay_of(stream: StreamTrainer) -> tuple:
    r = stream.replay
    return ((r.pos, len(r), r.total_added, r.capacity), r.generator.get_state(),
            [getattr(r, name)[:len(r)].clone() for name in r.FIELDS])


@pytest.mark.parametrize("buffer_size", [60, 25])
def test_a_light_checkpoint_resumes_under_another_buffer_size_as_a_full_one(tmp_path, demos, buffer_size):
    """A stop's light checkpoint resumed under a changed schedule.buffer_size (allowed) was refused:
    its counts were compared in the new capacity. Now its buffer is the full checkpoint's."""
    base = to_dict(small_cfg(tmp_path, demos, "td3"))
    resized = {"schedule": {**base["schedule"], "buffer_size": buffer_size}}
    buffers = []
    for light in (True, False):
        schedule = {**base["schedule"], "buffer_size": 40}  # full from step 40 on
        cfg, batch, trainer = light_run(tmp_path / str(light), demos, schedule=schedule)
        stream = trainer()
        for b in map(batch, range(5)):
            stream.ingest(b)
        stream.stop.set()
        stream.save(light=light)
        stream.close()
        again = trainer(load_run_config(None, {**to_dict(cfg), **resized}))
        buffers.append(replay_of(again))
        again.close()
    (counts, generator, rows), (full_counts, full_generator, full_rows) = buffers
    assert counts == full_counts and counts[3] == buffer_size and torch.equal(generator, full_generator)
    for a, b in zip(rows, full_rows, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_light_checkpoints_stay_near_a_full_one_and_a_run_ends_on_a_full_one(tmp_path, demos, monkeypatch):
    """With checkpoint_every 0 every stop was light on the first full checkpoint, the journal grew
    for ever and each restart replayed it all: a light checkpoint refers to one at most LIGHT_SPAN
    transitions back. The journal is on the disk before a light checkpoint relies on it. A run
    stopped after its last step's work ends on a full checkpoint (the light one's point was the
    same, and the full save was skipped). A missing replay_base.pt is one line."""
    import opolo_ros.train.stream as stream_module
    from opolo_ros.data.journal import ReplayJournal
    from opolo_ros.train.checkpoint import CheckpointError, load_checkpoint

    monkeypatch.setattr(stream_module, "LIGHT_SPAN", 20)
    order = []
    durable, save = ReplayJournal.make_durable, stream_module.save_checkpoint
    monkeypatch.setattr(ReplayJournal, "make_durable", lambda self: (order.append("journal"), durable(self)))
    monkeypatch.setattr(stream_module, "save_checkpoint",
                        lambda *a, **kw: (order.append("checkpoint"), save(*a, **kw)))
    cfg, batch, trainer = light_run(tmp_path, demos, checkpoint_every=0, total_steps=60)
    run = tmp_path / "run_td3"

    def replay_rows() -> dict:
        return load_checkpoint(run / "checkpoint.pt")["runner"]["replay"]

    stop_at(trainer(), [batch(0)])
    assert "obs" in replay_rows() and order == ["checkpoint"]  # no full one to refer to: full
    order.clear()
    stop_at(trainer(), [batch(1), batch(2)])
    assert replay_rows()["base_step"] == 10 and order == ["journal", "checkpoint"]
    stop_at(trainer(), [batch(3)])  # 30 transitions past the base: full again
    assert "obs" in replay_rows() and not (run / "replay_base.pt").exists()
    stream = trainer()
    for b in map(batch, range(4, 6)):  # the last step, 60: its work done, then the stop
        stream.ingest(b)
    assert stream.done
    stream.stop.set()
    stream.save(light=True)
    assert replay_rows()["base_step"] == 40
    stream.close()
    (run / "replay_base.pt").rename(run / "moved.pt")
    with pytest.raises(CheckpointError, match="whose rows are in .*replay_base.pt, which is missing"):
        trainer()
    (run / "moved.pt").rename(run / "replay_base.pt")
    end = trainer()
    assert end.done and end.finish().env_steps == 60
    end.close()
    assert "obs" in replay_rows() and not (run / "replay_base.pt").exists()


def test_a_joint_state_bag_is_read_by_the_task_models_joint_names(tmp_path):
    """Without demos_joints a Gymnasium task's JointState bag was read in its first message's order:
    joints listed otherwise (hinge before slider; a robot's extra joints) trained on swapped or
    wrong-sized observations without a word (walkthroughs). It is read by the model's joint names
    now, and a bag whose joints are named otherwise is refused saying what to give."""
    from test_bags import JS, SEC, _joint_state, _write_stream

    from opolo_ros.train.direct import check_demonstrations, expert_data

    names = ["base_yaw", "hinge", "slider", "gripper"]
    msgs = [(SEC + k * 10_000_000, _joint_state(names, [9.0, 0.01 * k, 0.02 * k, 9.0], [9.0, 0.1, 0.2, 9.0]))
            for k in range(5)]
    bag = _write_stream(tmp_path / "robot", {"/joint_states": (JS, msgs)})
    demos, _ = expert_data(small_cfg(tmp_path, bag), 4, 1000, ("slider", "hinge"))
    np.testing.assert_allclose(demos[0].obs[2], [0.04, 0.02, 0.2, 0.1], rtol=1e-6)  # slider, hinge
    other = [(SEC + k * 10_000_000, _joint_state(["shoulder", "elbow"], [0.0, 0.1], [0.0, 0.0]))
             for k in range(5)]
    arm = _write_stream(tmp_path / "arm", {"/joint_states": (JS, other)})
    with pytest.raises(ValueError, match=r"joint\(s\) \['slider', 'hinge'\] missing .* read by the model's "
                       r"joint names, slider,hinge: a bag whose joints are named otherwise needs "
                       r"demos_joints"):
        check_demonstrations(small_cfg(tmp_path, arm))
    check_demonstrations(small_cfg(tmp_path, arm, demos_joints="elbow,shoulder"))  # mapped by the user
    # opolo-ros train's early read reads it as the trainer does (it read the first message's order)
    from opolo_ros.cli import _check_demos
    from opolo_ros.sim.tasks import demo_joints

    changing = [(SEC, _joint_state(["slider", "hinge", "gripper"], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]))]
    changing += [(SEC + k * 10_000_000, _joint_state(["hinge", "slider"], [0.0, 0.1], [0.0, 0.0]))
                 for k in range(1, 5)]  # the gripper's joint only in the first message
    _check_demos(small_cfg(tmp_path, _write_stream(tmp_path / "changing", {"/joint_states": (JS, changing)})))
    # not by the model's names: fields other than the model's layout, or fields read by name
    model = ("slider", "hinge")
    assert demo_joints(small_cfg(tmp_path, bag), model, 4) == "slider,hinge"
    assert demo_joints(small_cfg(tmp_path, bag, demos_fields="velocity,position"), model, 4) == ""
    assert demo_joints(small_cfg(tmp_path, bag, demos_obs_field="position"), model, 4) == ""
    assert demo_joints(small_cfg(tmp_path, bag), ("slider", "hinge", "x"), 4) == ""  # not its observation
    # the run records the joints it read by (config.yaml, checkpoint), as the graph's learner does
    trainer = DirectTrainer(small_cfg(tmp_path, bag))
    assert trainer.cfg.demos_joints == "slider,hinge"
    trainer.env.close()
    trainer = DirectTrainer(small_cfg(tmp_path, bag, demos_joints="slider,hinge"))
    assert trainer.cfg.demos_joints == "slider,hinge"
    trainer.env.close()

def test_exploration_actions_are_clipped_to_the_unit_box_before_the_replay(tmp_path, demos):
    """pi(s) + noise is clipped to [-1, 1] before it is stored: the env clips its own copy anyway,
    so a mutation test that dropped the clip survived (the replay then held actions up to ~2.5)."""
    cfg = small_cfg(tmp_path, demos, schedule={"warmup_steps": 0, "exploration_noise": 0.5,
                                               "batch_size": 16})
    trainer = DirectTrainer(cfg)
    with torch.no_grad():  # pi(s) = tanh(large) = 1 everywhere: half the noisy actions exceed 1
        trainer.learner.actor.net[-1].bias.fill_(10.0)
    actions = np.array([trainer.select_action() for _ in range(50)])
    assert np.abs(actions).max() <= 1.0 and (actions == 1.0).sum() >= 10, actions.ravel()
    for _ in range(10):
        trainer.env_step()
    stored = trainer.runner.replay.action[: len(trainer.runner.replay)]
    assert stored.abs().max() <= 1.0 and (stored == 1.0).any()


def test_evaluations_start_from_the_resets_of_seed_10000_plus_the_run_seed(tmp_path, demos):
    """`opolo-ros evaluate --help`: "a run's evaluations use 10000 + its seed" (episode k reset
    with 10000 + seed + k): runs of other seeds are evaluated on other episodes, and a run's own
    evaluations are repeatable with `opolo-ros evaluate --seed` (a mutation test)."""
    from opolo_ros.sim.envs import make_env

    trainer = DirectTrainer(small_cfg(tmp_path, demos, "td3"))  # seed 7, 1 evaluation episode
    policy, seen = trainer.policy, []
    trainer.policy = lambda obs: seen.append(np.array(obs)) or policy(obs)
    from opolo_ros.train.logger import RunLogger

    trainer._log_eval(RunLogger(tmp_path / "eval"), None)
    env = make_env("InvertedPendulum-v5")
    first, _ = env.reset(seed=10_007)
    env.close()
    np.testing.assert_array_equal(seen[0], first)


def test_a_time_limit_resets_the_env_and_a_diverged_step_counts_but_is_not_stored(tmp_path, demos):
    """A truncation (the time limit) ends the episode as a termination does: the env is reset and
    the episode logged; a step where the simulation blew up (what DivergenceGuard reports) counts
    for the schedule and ends the episode, but its transition and reward are no real ones and are
    not stored (the graph's test_diverged_steps_keep_every_count_in_step, for the direct loop); a
    short run's replay holds only the rows it can fill (a mutation test: none was pinned here)."""
    reacher = DirectTrainer(small_cfg(tmp_path, demos, "td3", env_id="Reacher-v5", total_steps=120))
    lengths = []  # Reacher-v5: a 50-step time limit and no termination
    for _ in range(120):
        metrics = reacher.env_step()
        if "train/episode_length" in metrics:
            lengths.append(int(metrics["train/episode_length"]))
    assert lengths == [50, 50] and reacher.episodes_done == 2 and reacher.episode_len == 20
    assert len(reacher.runner.replay) == reacher.runner.replay.capacity == 120  # not 1e6 rows for 120 steps

    trainer = DirectTrainer(small_cfg(tmp_path, demos, "td3"))
    real_step = trainer.env.step

    def blowing_up_step(action):
        obs, reward, terminated, truncated, info = real_step(action)
        if trainer.step != 2:
            return obs, reward, terminated, truncated, info
        return np.full_like(obs, np.nan), math.nan, False, True, {**info, "diverged": True}

    trainer.env.step = blowing_up_step
    returns = []
    for _ in range(5):
        metrics = trainer.env_step()
        if "train/episode_return" in metrics:
            returns.append(float(metrics["train/episode_return"]))
    replay = trainer.runner.replay
    assert trainer.step == 5 and len(replay) == 4 and np.isfinite(replay.next_obs[:4].numpy()).all()
    assert returns[0] == 2.0 and trainer.episodes_done >= 1  # two real steps of reward 1, then the void one


def test_the_random_baseline_waits_for_the_first_evaluation_and_a_stop_ends_it(tmp_path, demos, monkeypatch):
    """R_random (10 random episodes: seconds for a task without termination) ran as a new learner
    started, where no stop was checked: a Ctrl-C right after starting Swimmer took 10-15 s (a
    review). Neither trainer starts with it now, and a stop ends it as it ends an evaluation."""
    from opolo_ros.sim import envs
    from opolo_ros.train import run_eval

    stop = threading.Event()
    stop.set()
    with pytest.raises(envs.EvaluationInterrupted):
        envs.random_policy_return("InvertedPendulum-v5", 10, stop=stop)

    def not_at_start(*args, **kwargs):
        raise AssertionError("R_random computed at start-up")

    monkeypatch.setattr(run_eval, "random_policy_return", not_at_start)  # both trainers'
    cfg = small_cfg(tmp_path, demos, run_dir=str(tmp_path / "stream"))
    hooks = StreamHooks(lambda path, version: None, lambda: None, logging.getLogger("stream"))
    stream = StreamTrainer(cfg, policy_every=10**6, hooks=hooks)
    stream.start(DirectTrainer(cfg).demos, resume=False, journal=True, journal_fsync=False)
    assert math.isnan(stream.evaluator.random_return)
    stream.close()
    monkeypatch.undo()
    trainer = DirectTrainer(small_cfg(tmp_path, demos, total_steps=100))
    real, at_step = envs.random_policy_return, []
    monkeypatch.setattr(run_eval, "random_policy_return",
                        lambda *a, **kw: at_step.append(trainer.step) or real(*a, **kw))
    trained = trainer.train()
    assert at_step == [100]  # at the final evaluation (eval_every 0), once, not as the loop started
    assert math.isfinite(trained.random_return) and trained.random_return > 0


def test_a_write_cut_short_leaves_the_run_config_whole(tmp_path, monkeypatch):
    """config.yaml was written in place: a kill in the middle left a torn file, which the next
    resume kept as the config the run had used (a review). It is renamed into place now."""
    from opolo_ros.train.runfolder import write_run_config

    write_run_config(tmp_path, {"seed": 1, "env_id": "Hopper-v5"}, step=0)
    before = (tmp_path / "config.yaml").read_text()
    real = Path.write_text

    def torn(self, text, *args, **kwargs):
        real(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError("killed mid-write")

    monkeypatch.setattr(Path, "write_text", torn)
    with pytest.raises(OSError, match="killed mid-write"):
        write_run_config(tmp_path, {"seed": 2, "env_id": "Hopper-v5"}, step=0)
    monkeypatch.undo()
    assert (tmp_path / "config.yaml").read_text() == before
    write_run_config(tmp_path, {"seed": 2, "env_id": "Hopper-v5"}, step=0)  # the next write replaces all
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["seed"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_a_stop_while_a_periodic_checkpoint_is_written_gives_it_up_for_the_light_one(tmp_path, demos,
                                                                                      monkeypatch):
    """A stop that came while a periodic full checkpoint was written waited for the whole file
    (250k Ant transitions: 3.2 s; 1M: 6.5-8.3 s; a node has 2 s). The write is given up at the next
    tensor, the full checkpoint before it stays, and the stop's light checkpoint on that one resumes
    the run as an uninterrupted one has it."""
    from opolo_ros.train import checkpoint as checkpoint_module
    from opolo_ros.train.checkpoint import load_checkpoint

    _, batch, trainer = light_run(tmp_path / "stopped", demos)
    _, ref_batch, ref_trainer = light_run(tmp_path / "reference", demos)
    reference = ref_trainer()
    for seq in range(6):
        reference.ingest(ref_batch(seq))
    expected = replay_of(reference)
    reference.close()

    a = trainer()
    for seq in range(5):  # the full checkpoint at 30, then on to 50
        a.ingest(batch(seq))
    run = tmp_path / "stopped" / "run_td3"
    write = checkpoint_module._StopWriter.write

    def stop_arrives(self, data):  # the signal comes while the checkpoint at 60 is written
        a.stop.set()
        return write(self, data)

    monkeypatch.setattr(checkpoint_module._StopWriter, "write", stop_arrives)
    a.ingest(batch(5))
    monkeypatch.undo()
    assert a.step == 60 and load_checkpoint(run / "checkpoint.pt")["step"] == 30  # the one before, whole
    assert not list(run.glob(".checkpoint.pt.*.tmp"))
    assert a.checkpoint_if_stopped()
    state = load_checkpoint(run / "checkpoint.pt")
    assert state["step"] == 60 and state["runner"]["replay"]["base_step"] == 30  # light, on the one at 30
    a.close()
    b = trainer()
    assert b.step == 60
    got = replay_of(b)
    assert got[0] == expected[0] and torch.equal(got[1], expected[1])
    for x, y in zip(got[2], expected[2], strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    b.catch_up()  # the full checkpoint given up is made up, so that the next stop is light again
    assert "obs" in load_checkpoint(run / "checkpoint.pt")["runner"]["replay"]
    assert not (run / "replay_base.pt").exists()
    stop_at(b, [batch(6)])
    assert load_checkpoint(run / "checkpoint.pt")["runner"]["replay"]["base_step"] == 60


def test_a_batch_taken_for_a_duplicate_with_other_rows_is_told_apart(tmp_path, demos):
    """Two trainings on one ROS domain and one machine: their bridges share a source id (of the host
    and the node name), so each learner dropped the other's batches as re-sends of its own, or
    consumed them, and the warning of a second source never came (a walkthrough). A batch whose
    (source, seq) was consumed but whose rows differ is told apart from a re-send."""
    _, batch, trainer = light_run(tmp_path, demos)
    stream = trainer()
    first, second = batch(0), batch(1)
    stream.ingest(first)
    stream.ingest(second)
    again = ReplayBatch.from_rows(second.rows(), stream.obs_dim, seq=1, source=5)  # a re-send
    other = batch(1)  # another bridge's batch 1, same id
    assert stream.is_duplicate(again) and not stream.differs_from_consumed(again)
    assert stream.is_duplicate(other) and stream.differs_from_consumed(other)
    stream.close()


def test_a_signal_as_the_run_writes_its_last_files_leaves_them_written(tmp_path, demos, monkeypatch):
    """A Ctrl-C just as `opolo-ros train` reached its last step landed in the final save and export,
    outside the loop's signal handling: a KeyboardInterrupt, and no policy.onnx (a walkthrough). A
    first signal there only asks to stop now; the files are written and the result returned."""
    from opolo_ros.signals import clear_interrupted, raise_interrupt

    trainer = DirectTrainer(small_cfg(tmp_path, demos, total_steps=100))
    save = DirectTrainer.save

    def save_with_a_signal(self, *args, **kwargs):
        if self.step == 100:
            os.kill(os.getpid(), signal.SIGINT)  # handled before the next bytecode: inside the save
        return save(self, *args, **kwargs)

    monkeypatch.setattr(DirectTrainer, "save", save_with_a_signal)
    previous = signal.signal(signal.SIGINT, raise_interrupt)  # the command's own handler (cli.run)
    try:
        result = trainer.train()
    finally:
        signal.signal(signal.SIGINT, previous)
        clear_interrupted()  # (had it come out as an interrupt, later tests would see it)
    assert result.env_steps == 100 and (result.run_dir / "policy.onnx").is_file()
    assert (result.run_dir / "checkpoint.pt").is_file() and trainer.stop.is_set()


def test_the_graphs_progress_bar_is_drawn_on_a_terminal_only(tmp_path, demos):
    """Into a pipe (`make train | tee`) the learner's bar glued the other nodes' log lines onto its
    carriage-return updates: there it logs a line per rate period instead."""
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = StreamTrainer(small_cfg(tmp_path, demos, "td3", progress=True), policy_every=10**6,
                           hooks=quiet_hooks())
    stream.open_progress_bar(io.StringIO())
    assert stream._bar is None
    terminal = Terminal()
    stream.open_progress_bar(terminal)
    assert stream._bar is not None and "graph td3 InvertedPendulum-v5" in terminal.getvalue()
    stream.close_progress_bar()
    stream.close()


def test_the_direct_loops_progress_bar_is_drawn_on_a_terminal_only(tmp_path, demos, capsys):
    """Into a file or a pipe (a queue job's log) the direct loop's bar wrote 50 KB of carriage-return
    updates per 3000 steps (a walkthrough): there it writes a line per 1000 steps instead."""
    DirectTrainer(small_cfg(tmp_path, demos, "td3", total_steps=2000, progress=True)).train()
    err = capsys.readouterr().err
    assert "\r" not in err and "%|" not in err, err[-500:]
    said = [line for line in err.splitlines() if "steps/s" in line and "training return" in line]
    assert [line.split(": ")[1].split(" ")[0] for line in said] == ["1000/2000", "2000/2000"], said
    assert " to go, training return" in said[0] and "to go" not in said[1], said  # the time left


def test_time_to_go_of_a_progress_line():
    from opolo_ros.train.logger import time_to_go

    assert time_to_go(9000, 1000, 100.0) == ", about 15 min to go"  # 10 steps/s
    assert time_to_go(100, 1000, 100.0) == ", under a minute to go"
    assert time_to_go(290_000, 10_000, 100.0) == ", about 48 min to go"
    assert time_to_go(1_000_000, 10_000, 100.0) == ", about 2 h 47 min to go"
    assert time_to_go(0, 1000, 100.0) == ""  # done
    assert time_to_go(1000, 0, 100.0) == time_to_go(1000, 1000, 0.0) == ""  # no rate yet


def test_time_to_go_leaves_out_a_warm_ups_fast_steps():
    """A run's first 10k random steps went at five times its training rate: an estimate from the
    start of the process said half the time left, and one over its last 20 lines did so until
    the warm-up left them."""
    from opolo_ros.train.logger import TimeToGo

    eta, now = TimeToGo(100_000, after=10_000, window=20), 0.0
    assert eta.mark(0, now) == ""
    for step in range(1000, 10_001, 1000):  # warm-up: 50 steps/s... of a run that trains at 10
        now += 20.0
        assert eta.mark(step, now) == ""  # nothing said during the warm-up
    now += 100.0
    assert eta.mark(11_000, now) == ", about 2 h 28 min to go"  # 89k at 10 steps/s: at once
    for step in range(12_000, 50_001, 1000):
        now += 100.0 if step % 5000 else 150.0  # an evaluation every 5k
        said = eta.mark(step, now)
    assert said == ", about 1 h 32 min to go"  # 50k at 1000 steps per 110 s, the last 20 lines'


def test_eval_csv_records_the_scores_baselines_and_a_changed_expert_return_is_said(tmp_path, capsys):
    """R_expert was not in the checkpoint nor in eval.csv: a run resumed over a replaced bag (or
    another num_demos) scored on a new scale without a word, and a report could not tell."""
    import csv

    from opolo_ros.train.logger import RunLogger

    rng = np.random.default_rng(0)
    path = tmp_path / "demos.npz"
    save_npz(path, [Episode(rng.normal(0, 0.1, (60, 4)), ret) for ret in (50.0, 70.0, 90.0, 110.0)])
    DirectTrainer(small_cfg(tmp_path, path, total_steps=120, eval_every=60, checkpoint_every=60,
                            num_demos=2)).train()
    assert "R_expert" not in capsys.readouterr().err
    DirectTrainer(small_cfg(tmp_path, path, total_steps=180, eval_every=60, checkpoint_every=60,
                            num_demos=4)).train()
    assert "is 80.0, the run scored against 60.0 until its checkpoint" in capsys.readouterr().err
    with open(tmp_path / "run_opolo" / "eval.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["r_expert"]) for r in rows] == [60.0, 60.0, 80.0]
    assert len({r["r_random"] for r in rows}) == 1 and np.isfinite(float(rows[0]["r_random"]))
    old = tmp_path / "old"  # a log of an older version: its rows keep blanks in the new columns
    old.mkdir()
    (old / "eval.csv").write_text("env_step,return_mean,return_std,normalised,wall_s\n10,1.0,0.0,0.5,3.0\n")
    logger = RunLogger(old)
    logger.evaluation({"env_step": 20, "return_mean": 2.0, "return_std": 0.0, "normalised": 0.6,
                       "wall_s": 4.0, "r_expert": 3.0, "r_random": 0.0})
    logger.close()
    rows = RunLogger.read_evaluations(old / "eval.csv")
    assert [r["env_step"] for r in rows] == [10, 20] and np.isnan(rows[0]["r_expert"])
    assert (old / "eval.csv").read_text().splitlines()[1] == "10,1.0,0.0,0.5,3.0,,"  # blank, not "nan"
    from opolo_ros.train.checkpoint import expert_return_note

    assert expert_return_note({}, 80.0) == ""  # an older checkpoint, without the value: no warning
    assert expert_return_note({"expert_return": 80.0}, 80.0) == ""
    assert rows[1]["r_expert"] == 3.0


def test_a_run_whose_length_is_no_multiple_of_eval_every_ends_with_an_evaluation(tmp_path, demos):
    """The learner node's trainer evaluates once more at its last step when that step had none: a
    mutation that skipped it survived (the result reported the 100-step return for a 150-step run)."""
    from opolo_ros.train.logger import RunLogger

    cfg = small_cfg(tmp_path, demos, "td3", total_steps=150, eval_every=100)
    stream = StreamTrainer(cfg, policy_every=10**6, hooks=quiet_hooks())
    stream.start(None, resume=False, journal=False, journal_fsync=False)
    stream.ingest(ReplayBatch.from_rows(np.zeros((150, 4 + 1 + 4 + 3), np.float32), stream.obs_dim, seq=0,
                                        source=1))
    assert stream.done
    result = stream.finish()
    stream.close()
    rows = RunLogger.read_evaluations(tmp_path / "run_td3" / "eval.csv")
    assert [r["env_step"] for r in rows] == [100, 150]
    assert result.env_steps == 150


def test_progress_acknowledges_a_batch_only_after_its_journal_record_is_synced(tmp_path, demos):
    """With journal_fsync a power cut must not lose an acknowledged transition: the sync comes
    before the progress that acknowledges it (a mutation that skipped it survived)."""
    order: list[str] = []
    hooks = StreamHooks(lambda path, version: None, lambda: order.append("progress"), logging.getLogger("s"))
    stream = StreamTrainer(small_cfg(tmp_path, demos, "td3", total_steps=10_000), policy_every=10**6,
                           hooks=hooks)
    stream.start(None, resume=False, journal=True, journal_fsync=True)
    journal = stream.journal
    sync, append = journal.sync, journal.append
    journal.sync = lambda: (order.append("sync"), sync())[1]
    # append's own sync waits for the record before: this one's fsync may still run when it returns
    journal.append = lambda record: (append(record), order.append("appended"))[0]
    for seq in range(2):
        stream.ingest(ReplayBatch.from_rows(np.zeros((10, 4 + 1 + 4 + 3), np.float32), stream.obs_dim,
                                            seq=seq, source=1))
    stream.close()
    assert order.count("progress") == 2
    for k in (k for k, step in enumerate(order) if step == "progress"):
        last_append = max(j for j in range(k) if order[j] == "appended")
        assert "sync" in order[last_append + 1:k], order


def test_a_run_on_demonstrations_recorded_at_another_rate_warns(tmp_path, capsys):
    """InvertedPendulum-v5 steps every 0.04 s; a stream of its states recorded at 200 Hz trained it
    without a word (a walkthrough): the run says both rates as it starts."""
    from test_bags import SEC, _stream, _write_stream

    rng = np.random.default_rng(0)
    bag = _write_stream(tmp_path / "fast", {"/state": ("std_msgs/msg/Float32MultiArray", _stream(
        rng.normal(scale=0.01, size=(40, 4)), dt=SEC // 200))})
    DirectTrainer(small_cfg(tmp_path, bag, total_steps=20, num_demos=0)).train()
    assert ("warning: the demonstrations' states come every 0.005 s (200 Hz), the task's control step is "
            "0.04 s (25 Hz)") in capsys.readouterr().err


def test_a_time_feature_run_on_demonstrations_shorter_than_its_time_limit_warns(tmp_path, demos, capsys,
                                                                                 caplog):
    """59-step demonstrations of InvertedPendulum-v5 (T=1000) with time_feature: the discriminator
    sees no expert state late in an episode, which trained without a word (a walkthrough). Both
    trainers say so as they start (the learner node's through its StreamTrainer); without the time
    feature neither does."""
    from opolo_ros.train.direct import prepare_demos

    said = ("time_feature is on with a time limit of T=1000 steps, but the 4 demonstration episodes have "
            "59 steps")
    DirectTrainer(small_cfg(tmp_path, demos, total_steps=20)).train()
    assert said not in capsys.readouterr().err
    cfg = small_cfg(tmp_path, demos, total_steps=20, time_feature=True, run_dir=str(tmp_path / "tf"))
    DirectTrainer(cfg).train()
    assert f"warning: {said}" in capsys.readouterr().err

    stream = StreamTrainer(load_run_config(None, {**to_dict(cfg), "run_dir": str(tmp_path / "stream")}),
                           policy_every=cfg.total_steps, hooks=quiet_hooks())
    try:
        with caplog.at_level(logging.WARNING, logger="s"):
            stream.start(prepare_demos(cfg, stream.max_steps), resume=False, journal=False,
                         journal_fsync=False)
    finally:
        stream.close()
    assert any(text.startswith(said) for text in caplog.messages), caplog.messages


def test_an_evaluation_at_a_logged_step_replaces_it_and_unknown_baselines_stay_blank(tmp_path, monkeypatch):
    """eval.csv holds one row per step: an evaluation logged again at a step (a resumed run owes its
    checkpoint's) replaces the row; unknown baselines are blank cells, as older logs have them; a
    write cut short leaves the file as it was (a mutation test)."""
    import csv

    from opolo_ros.train.logger import RunLogger

    log = RunLogger(tmp_path, tensorboard=False)
    row = {"env_step": 100, "return_mean": 1.0, "return_std": 0.0, "normalised": math.nan, "wall_s": 1.0,
           "r_expert": math.nan, "r_random": math.nan}
    log.evaluation(row)
    log.evaluation({**row, "return_mean": 2.0})
    log.evaluation({**row, "env_step": 200, "return_mean": 3.0})
    text = log.eval_csv.read_text()
    cells = list(csv.DictReader(text.splitlines()))
    assert [(c["env_step"], c["return_mean"], c["r_expert"], c["r_random"]) for c in cells] == [
        ("100", "2.0", "", ""), ("200", "3.0", "", "")]

    def cut_short(*_args) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(csv.DictWriter, "writerow", cut_short)
    with pytest.raises(OSError, match="No space left"):
        log.evaluation({**row, "env_step": 300})
    assert log.eval_csv.read_text() == text


def test_a_checkpoint_is_synced_under_its_temporary_name_before_its_rename(tmp_path, fsync_spy):
    """save_checkpoint fsyncs the file it wrote before renaming it over the old checkpoint, then the
    folder (a crash after the rename must not leave an empty checkpoint) (a mutation test)."""
    from opolo_ros.train import checkpoint

    synced = fsync_spy(checkpoint)
    checkpoint.save_checkpoint(tmp_path / "checkpoint.pt", {"step": 1})
    assert len(synced) == 2 and synced[0].startswith(f"{tmp_path}/.checkpoint.pt.")
    assert synced[1] == str(tmp_path)


def test_a_torch_file_without_a_runner_or_a_cut_text_file_or_an_empty_protobuf_is_named(tmp_path):
    """load_checkpoint refuses a torch file without the runner state as no training run's checkpoint;
    a text file whose 512th byte cuts a character is still named a text file; bytes that parse as
    an ONNX model without a graph are not called an ONNX policy (a mutation test)."""
    from opolo_ros.train.checkpoint import CheckpointError, load_checkpoint

    torch.save({"config": {"env_id": "Hopper-v5", "algo": "opolo"}, "step": 1}, tmp_path / "no_runner.pt")
    (tmp_path / "cut.txt").write_text("a" * 511 + "é")
    (tmp_path / "header.bin").write_bytes(b"\x08\x01")
    for name, what in (("no_runner.pt", "is not an opolo_ros checkpoint"),
                       ("cut.txt", "is a text file, not a checkpoint"), ("header.bin", "is a text file")):
        with pytest.raises(CheckpointError, match=what):
            load_checkpoint(tmp_path / name)


def test_refusals_name_how_many_more_tensors_or_values_they_leave_out():
    """A diverged learner's error names four tensors and how many more; a refused resume lists six
    changed values and how many more (a mutation test)."""
    from opolo_ros.train.checkpoint import CheckpointError, TrainingDiverged, check_finite, resume_changes

    class Learner:
        def modules(self) -> dict:
            nets = {name: torch.nn.Linear(2, 2) for name in "abc"}
            for net in nets.values():
                torch.nn.init.constant_(net.weight, math.nan)
                torch.nn.init.constant_(net.bias, math.inf)
            return nets

    with pytest.raises(TrainingDiverged, match=r"NaN or inf in a\.weight, a\.bias, b\.weight, b\.bias and 2 "
                                               r"more; "):
        check_finite(Learner(), 100, "the checkpoint")
    saved = {"env_id": "Hopper-v5", "algo": "opolo", "seed": 0, **{f"k{i}": 0 for i in range(8)}}
    config = {**saved, "seed": 1, **{f"k{i}": 1 for i in range(8)}}
    with pytest.raises(CheckpointError, match=r"\(also changed: k0: 0 -> 1; .*; k5: 0 -> 1; and 2 more\)"):
        resume_changes({"config": saved}, config, "ck.pt", "start over")


def test_a_resume_may_change_opolos_lam_and_an_unknown_expert_return_is_no_change():
    """Only OPOLO <-> OPOLO-x (lam 0 against > 0) is another experiment: lam 0.5 -> 1.0 resumes,
    named as a change. Demonstrations without a return (R_expert unknown) give no warning of a
    changed score scale (a mutation test)."""
    from opolo_ros.train.checkpoint import expert_return_note, resume_changes

    saved = {"env_id": "Hopper-v5", "algo": "opolo", "seed": 0, "opolo": {"lam": 0.5}}
    changes = resume_changes({"config": saved}, {**saved, "opolo": {"lam": 1.0}}, "ck.pt", "start over")
    assert changes == ["opolo.lam: 0.5 -> 1.0"]
    assert expert_return_note({"expert_return": 100.0}, math.nan) == ""
    assert expert_return_note({}, 100.0) == ""
    assert "is 50.0, the run scored against 100.0" in expert_return_note({"expert_return": 100.0}, 50.0)
    assert expert_return_note({"expert_return": 100.0}, 100.5)  # another bag, however close its mean


def test_a_recording_cut_off_mid_episode_is_said_where_its_last_episode_is_used(tmp_path, capsys):
    """A stream bag whose last episode is shorter than the others (a recording stopped early): the
    direct loop says so when it trains on it (num_demos 0: all); with num_demos 3 it is not used
    and nothing is said."""
    from test_bags import F32, SEC, _stream, _write_stream

    rows = np.random.default_rng(0).normal(size=(210, 4)) * 0.01
    lengths = (60, 60, 60, 30)
    starts = np.cumsum((0,) + lengths[:-1])
    msgs = [msg for k, (start, n) in enumerate(zip(starts, lengths))
            for msg in _stream(rows[start:start + n], SEC + k * 2 * SEC)]
    bag = _write_stream(tmp_path / "cut", {"/observation": (F32, msgs)})
    said = "warning: the last demonstration episode has 30 states, every other one 60"
    DirectTrainer(small_cfg(tmp_path, bag, total_steps=20, num_demos=0)).train()
    assert said in capsys.readouterr().err
    DirectTrainer(small_cfg(tmp_path, bag, total_steps=20, num_demos=3, run_dir=str(tmp_path / "r3"))).train()
    assert said not in capsys.readouterr().err
