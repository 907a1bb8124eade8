"""An MJCF robot trained through the graph and by the direct loop, evaluated by its imitation distance.

The robot is InvertedPendulum-v5's model written out as a plain MJCF file with its task's control
step (``frame_skip`` 2 in the file: 2 x 0.02 s), so the shipped InvertedPendulum demonstrations fit
it; they are given as the robot's own (an .npz without the recorded task). Each trainer
(`--trainers`: ``graph``, ``opolo-ros launch sim_train``; ``direct``, ``opolo-ros train``) runs the
pendulum task file with evaluations every `--eval-every` steps, and the script prints each
evaluation's imitation distance and score from the runs' eval.csv, side by side. The shipped
expert's distance (the same evaluation, `opolo-ros evaluate --demos`) is printed first as the
reference for a good policy.

    .venv/bin/python bench/mjcf_imitation.py --steps 8000 --eval-every 1000 --out /tmp/mjcf_imitation
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def write_inputs(out: Path) -> tuple[Path, Path]:
    """The robot model (frame_skip 2) and the demonstrations as the robot's own, in `out`."""
    import gymnasium
    import numpy as np

    from opolo_ros.data.demos import Episode, load_episodes, save_npz

    asset = (Path(gymnasium.__file__).parent / "envs/mujoco/assets/inverted_pendulum.xml").read_text()
    xml = out / "pendulum_robot.xml"
    xml.write_text(asset.replace("<worldbody>", '<custom><numeric name="frame_skip" data="2"/></custom>'
                                                "<worldbody>", 1))
    demos = out / "demos.npz"
    episodes = load_episodes(ROOT / "models" / "demos" / "InvertedPendulum-v5")
    save_npz(demos, [Episode(ep.obs, np.nan) for ep in episodes])
    return xml, demos


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8000)
    parser.add_argument("--eval-every", dest="eval_every", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--domain", type=int, default=121, help="ROS_DOMAIN_ID of the graph")
    parser.add_argument("--trainers", nargs="+", choices=("graph", "direct"), default=["graph", "direct"])
    parser.add_argument("--out", default="/tmp/mjcf_imitation",
                        help="a new folder for the model, demos and run")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=False)
    xml, demos = write_inputs(out)
    task = yaml.safe_load((ROOT / "config" / "inverted_pendulum.yaml").read_text())
    task["learner"]["ros__parameters"]["eval_every"] = args.eval_every
    (out / "task.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
    exe = str(Path(sys.executable).parent / "opolo-ros")
    expert = ROOT / "models" / "experts" / "InvertedPendulum-v5.onnx"
    subprocess.run([exe, "evaluate", str(expert), "--env-id", str(xml), "--demos", str(demos)], check=True)
    if "graph" in args.trainers:
        env = {**os.environ, "ROS_DOMAIN_ID": str(args.domain)}
        subprocess.run([exe, "launch", "sim_train", f"env:={xml}", f"demos:={demos}",
                        f"params_file:={out / 'task.yaml'}", f"total_steps:={args.steps}",
                        f"seed:={args.seed}", f"run_dir:={out / 'graph'}"], check=True, env=env, cwd=ROOT)
    if "direct" in args.trainers:
        subprocess.run([exe, "train", "--config", str(out / "task.yaml"), "--env-id", str(xml), "--demos",
                        str(demos), "--total-steps", str(args.steps), "--seed", str(args.seed),
                        "--run-dir", str(out / "direct")], check=True, cwd=ROOT)
    from opolo_ros.train.logger import RunLogger

    rows = {name: {int(r["env_step"]): r for r in RunLogger.read_evaluations(out / name / "eval.csv")}
            for name in args.trainers}
    print("\n  step  " + "  ".join(f"{name + ' distance':>16}  {'score':>6}" for name in args.trainers)
          + "  random actions")
    for step in sorted(set().union(*rows.values())):
        cells = [(rows[name][step]["imitation_distance"], rows[name][step]["imitation_score"])
                 if step in rows[name] else (float("nan"), float("nan")) for name in args.trainers]
        random_distance = next(rows[n][step]["imitation_random"] for n in args.trainers if step in rows[n])
        print(f"{step:6d}  " + "  ".join(f"{d:16.3f}  {sc:6.3f}" for d, sc in cells)
              + f"  {random_distance:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
