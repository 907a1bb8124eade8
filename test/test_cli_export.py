"""`opolo-ros export`: a checkpoint's policy to ONNX, with the run folder's own config by default."""

from __future__ import annotations

from pathlib import Path

from opolo_ros import cli
from opolo_ros.export.onnx_policy import load_policy

ROOT = Path(__file__).resolve().parents[1]


def test_export_takes_the_config_next_to_the_checkpoint(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(ROOT)  # the task file's demos path is relative to the repository root
    run = tmp_path / "run"
    small = ["total_steps=300", "eval_every=300", "checkpoint_every=300", "export_every=300",
             "eval_episodes=1", "progress=false", "schedule.warmup_steps=200",
             "schedule.inverse_pretrain_steps=5", "schedule.train_freq=50", "schedule.gradient_steps=5",
             "opolo.net.hidden=[32,32]", "seed=3"]
    argv = ["train", "--config", "config/inverted_pendulum.yaml", "--run-dir", str(run)]
    assert cli.main([*argv, *[a for s in small for a in ("--set", s)]]) == 0
    out = tmp_path / "exported.onnx"
    assert cli.main(["export", str(run / "checkpoint.pt"), str(out)]) == 0  # no --config
    meta = load_policy(out).metadata
    assert (meta.env_id, meta.obs_dim, meta.extra["seed"]) == ("InvertedPendulum-v5", 4, "3")

    # no demonstrations needed: from another folder the config's relative demos path does not exist
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert cli.main(["export", str(run / "checkpoint.pt"), str(tmp_path / "far.onnx")]) == 0
    assert load_policy(tmp_path / "far.onnx").metadata.training_step == 300

    capsys.readouterr()  # an output that is the checkpoint itself (or any file but an .onnx) is refused
    before = (run / "checkpoint.pt").read_bytes()
    for output in (run / "checkpoint.pt", run / "config.yaml"):
        assert cli.main(["export", str(run / "checkpoint.pt"), str(output)]) == 2
        assert "exists and is no ONNX file to replace" in capsys.readouterr().err
    assert (run / "checkpoint.pt").read_bytes() == before

    (run / "config.yaml").unlink()
    capsys.readouterr()
    assert cli.main(["export", str(run / "checkpoint.pt"), str(tmp_path / "again.onnx")]) == 2
    err = capsys.readouterr().err
    assert "no --config given and no" in err and "config.yaml" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "again.onnx").exists()



def test_export_of_a_torch_file_that_is_no_checkpoint_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    import torch

    config = str(ROOT / "config" / "inverted_pendulum.yaml")
    for name, content in (("dict.pt", {"a": 1}), ("list.pt", [1, 2]), ("noconfig.pt", {"config": {}})):
        torch.save(content, tmp_path / name)
        assert cli.main(["export", str(tmp_path / name), str(tmp_path / "x.onnx"), "--config", config]) == 2
        err = capsys.readouterr().err
        assert "is not an opolo_ros checkpoint" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.onnx").exists()
    torch.save({"a": 1}, tmp_path / "ck.pt")
    assert cli.main(["export", str(tmp_path / "ck.pt"), str(tmp_path), "--config", config]) == 2
    assert f"output {tmp_path} is a folder" in capsys.readouterr().err
