"""Configs: paper defaults, YAML overrides, clear errors on bad input."""

import pytest

from opolo_ros.algo.config import RunConfig, load_run_config, merge_overrides


def test_defaults_are_the_papers():
    cfg = RunConfig()
    assert cfg.opolo.net.hidden == (400, 300)
    assert (cfg.opolo.gamma, cfg.opolo.lr, cfg.opolo.lam) == (0.99, 3e-4, 0.1)
    s = cfg.schedule
    assert (s.batch_size, s.train_freq, s.gradient_steps) == (100, 1000, 1000)
    assert (s.disc_freq, s.disc_steps, s.inverse_freq, s.inverse_steps) == (500, 10, 500, 50)
    assert s.update_to_data == 1.0


def test_yaml_and_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("env_id: Hopper-v5\nopolo:\n  lam: 0.01\n  net: {hidden: [64, 64]}\n"
                 "schedule:\n  batch_size: 256\n")
    cfg = load_run_config(p, merge_overrides(["opolo.residual_mode=residual", "seed=3"]))
    assert cfg.env_id == "Hopper-v5" and cfg.seed == 3
    assert cfg.opolo.lam == 0.01 and cfg.opolo.net.hidden == (64, 64)
    assert cfg.opolo.residual_mode == "residual" and cfg.schedule.batch_size == 256


@pytest.mark.parametrize("text,match", [
    ("schedule:\n  batch_sise: 3\n", "unknown key 'schedule.batch_sise'"),
    ("schedule:\n  batch_size: many\n", "schedule.batch_size.*integer"),
    ("opolo:\n  residual_mode: sometimes\n", "opolo.residual_mode.*must be one of"),
    ("opolo:\n  normalize_disc: 3\n", "true/false"),
    ("schedule: [1, 2]\n", "expected a mapping"),
    ("env_id: [unclosed\n", "not valid YAML"),
])
def test_bad_yaml_gives_clear_errors(tmp_path, text, match):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_run_config(p)


def test_missing_file_and_bad_override(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_run_config(tmp_path / "nope.yaml")
    with pytest.raises(ValueError, match="key=value"):
        merge_overrides(["seed"])


def test_ros_parameter_file_gives_the_learner_section(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("/**:\n  ros__parameters:\n    env_id: Hopper-v5\n    seed: 4\n"
                 "learner:\n  ros__parameters:\n    opolo:\n      lam: 0.01\n    export_period: 3\n"
                 "sim_bridge:\n  ros__parameters:\n    seed: 99\n    realtime: false\n")
    cfg = load_run_config(p)
    assert (cfg.env_id, cfg.seed, cfg.opolo.lam) == ("Hopper-v5", 4, 0.01)  # node-only keys ignored


def test_exponent_without_dot_is_a_number(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("opolo:\n  lr: 1e-4\n")
    assert load_run_config(p, merge_overrides(["opolo.disc_lr=3e-5"])).opolo.lr == 1e-4
    assert load_run_config(p, merge_overrides(["opolo.disc_lr=3e-5"])).opolo.disc_lr == 3e-5
