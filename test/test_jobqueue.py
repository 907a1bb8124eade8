"""The job queue that runs long resumable jobs: order, parallelism, done/failed/stopped, signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from opolo_ros.train.jobqueue import Job, JobQueue, clipped, last_progress, load_queue

OPOLO_ROS = str(Path(sys.executable).parent / "opolo-ros")

# A stand-in for a training job: records its start, how many jobs run beside it, and, on SIGTERM,
# "writes its checkpoint" and exits 130 as `opolo-ros train` does.
JOB = r"""
import os, signal, sys, time
from pathlib import Path
name, root, seconds, rc = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
def stop(*_):
    (root / f"{name}.checkpoint").write_text("written")
    sys.exit(130)
signal.signal(signal.SIGTERM, stop)
running = root / "running"
running.mkdir(exist_ok=True)
(running / name).touch()
with (root / "starts.txt").open("a") as f:
    f.write(f"{name} {len(os.listdir(running))}\n")
print(f"{name}: step 1/2", end="\r", flush=True)
time.sleep(seconds)
print(f"{name}: step 2/2", flush=True)
(running / name).unlink()
sys.exit(rc)
"""


@pytest.fixture
def job_script(tmp_path: Path) -> Path:
    path = tmp_path / "job.py"
    path.write_text(JOB)
    return path


def job(script: Path, root: Path, name: str, seconds: float = 0.3, rc: int = 0) -> Job:
    return Job(name, (sys.executable, str(script), name, str(root), str(seconds), str(rc)))


def starts(root: Path) -> list[tuple[str, int]]:
    path = root / "starts.txt"
    lines = path.read_text().split("\n") if path.exists() else []
    return [(n, int(k)) for n, k in (line.split() for line in lines if line)]


def test_runs_in_order_a_few_at_a_time_and_skips_what_is_done(tmp_path: Path, job_script: Path) -> None:
    jobs = [job(job_script, tmp_path, f"j{k}", seconds=0.6) for k in range(4)]
    queue = JobQueue(jobs, tmp_path / "state", parallel=2, poll_s=0.05, log=lambda _: None)
    assert queue.run(threading.Event()) == 0
    runs = starts(tmp_path)
    assert sorted(n for n, _ in runs[:2]) == ["j0", "j1"]  # in the queue's order
    assert sorted(n for n, _ in runs) == ["j0", "j1", "j2", "j3"]
    assert max(k for _, k in runs) == 2  # never three at once, and two did run side by side
    assert all(queue.state(j) == "done" for j in jobs)
    assert last_progress(tmp_path / "state" / "j3.log") == "j3: step 2/2"

    assert queue.run(threading.Event()) == 0  # again: everything is done, nothing starts
    assert len(starts(tmp_path)) == 4


def test_a_failed_job_is_reported_others_go_on_and_it_runs_again_next_time(tmp_path: Path,
                                                                          job_script: Path) -> None:
    jobs = [job(job_script, tmp_path, "bad", rc=3), job(job_script, tmp_path, "good")]
    queue = JobQueue(jobs, tmp_path / "state", parallel=1, poll_s=0.05, log=lambda _: None)
    assert queue.run(threading.Event()) == 1
    assert queue.state(jobs[0]) == "exit 3" and queue.state(jobs[1]) == "done"
    assert queue.run(threading.Event()) == 1
    assert [n for n, _ in starts(tmp_path)] == ["bad", "good", "bad"]


def test_stop_passes_sigterm_on_keeps_the_job_resumable_and_starts_nothing_more(tmp_path: Path,
                                                                                 job_script: Path) -> None:
    jobs = [job(job_script, tmp_path, "long", seconds=60), job(job_script, tmp_path, "next")]
    said: list[str] = []
    queue = JobQueue(jobs, tmp_path / "state", parallel=1, poll_s=0.05, log=said.append)
    stop, result = threading.Event(), []
    worker = threading.Thread(target=lambda: result.append(queue.run(stop)))
    worker.start()
    deadline = time.monotonic() + 30
    while not starts(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert queue.state(jobs[0]).startswith("running")
    t0 = time.monotonic()
    stop.set()
    worker.join(timeout=30)
    assert result == [130] and time.monotonic() - t0 < 5
    assert (tmp_path / "long.checkpoint").read_text() == "written"
    assert queue.state(jobs[0]) == "exit 130" and queue.state(jobs[1]) == "pending"
    assert [n for n, _ in starts(tmp_path)] == ["long"]
    stopped = "queue: long stopped with exit status 130"  # not FAILED
    assert any(line.startswith(stopped) for line in said), said


def test_the_queue_file_is_read_again_before_each_start(tmp_path: Path, job_script: Path) -> None:
    def entry(name: str, seconds: float) -> str:
        argv = f"[{sys.executable}, {job_script}, {name}, {tmp_path}, '{seconds}', 0]"
        return f"  - {{name: {name}, command: {argv}}}\n"

    queue_file = tmp_path / "q.yaml"
    queue_file.write_text("jobs:\n" + entry("first", 1.5) + entry("dropped", 0.1))
    logged: list[str] = []
    queue = JobQueue(load_queue(queue_file), tmp_path / "state", parallel=1, poll_s=0.05, log=logged.append,
                     source=queue_file)
    stop, result = threading.Event(), []
    worker = threading.Thread(target=lambda: result.append(queue.run(stop)))
    worker.start()
    while not starts(tmp_path):
        time.sleep(0.05)
    queue_file.write_text("jobs: [")  # half-written: the jobs read before stay
    time.sleep(0.3)
    queue_file.write_text("jobs:\n" + entry("first", 1.5) + entry("added", 0.1))
    worker.join(timeout=60)
    assert result == [0] and [n for n, _ in starts(tmp_path)] == ["first", "added"]
    assert sum("not valid YAML" in line for line in logged) <= 1


@pytest.mark.parametrize("text, expect", [
    ("jobs: [", "not valid YAML"),
    ("jobs: []", "non-empty list 'jobs'"),
    ("- a", "non-empty list 'jobs'"),
    ("jobs: [{name: a}]", "the keys 'name', 'command'"),
    ("jobs: [{name: a, command: x, nice: 3}]", "the keys 'name', 'command'"),
    ("jobs: [{name: a, command: x, after: [b]}]", r"comes after \['b'\], which is not another job"),
    ("jobs: [{name: a, command: x, after: a}]", "job 'a' comes after itself"),
    ("jobs: [{name: a, command: \"x 'unclosed\"}]", r"command \"x 'unclosed\" cannot be split into words"),
    ("jobs: [{name: a, command: x, after: {b: 1}}]", "a job name or a list"),
    ("jobs: [{name: a, command: x, after: c}, {name: b, command: y, after: a}, "
     "{name: c, command: z, after: b}]", "wait for each other in a circle: a -> c -> b -> a"),
    ("jobs: [{name: 'a b', command: x}]", "must be 1-100 letters"),
    ("jobs: [{name: queue, command: x}]", r"and not \['queue'\]"),  # queue.pid is the queue's own
    ("jobs: [{name: '..', command: x}]", "not starting with '.'"),
    ("jobs: [{name: " + "a" * 101 + ", command: x}]", "must be 1-100 letters"),
    ("parallel: 2\njobs: [{name: a, command: x}]", r"unknown top-level keys \['parallel'\]"),
    ("jobs: [{name: a, command: 'train && ship'}]", r"uses shell syntax \(&\).*sh -c"),
    ("jobs: [{name: a, command: 'train >out.txt 2>/dev/null'}]", r"uses shell syntax \(>\)"),
    # a backslash is no escape inside single quotes (the shell's and shlex's reading): `;` stands outside
    ("jobs: [{name: a, command: \"grep 'a\\\\' x.txt ; echo\"}]", r"uses shell syntax \(;\)"),
    ("jobs: [{name: a, command: ''}]", "empty command"),
    ("jobs: [{name: a, command: {x: 1}}]", "string or a list"),
    ("jobs: [{name: a, command: x}, {name: a, command: y}]", "duplicate name 'a'"),
    ("jobs: [{name: a, command: [echo, yes]}]", "command list item True is a bool to YAML"),  # was "True"
    ("jobs: [{name: a, command: [tool, --version, 1.10]}]", "item 1.1 is a float to YAML.*quote it"),
    ("jobs: [{name: \"abc\\n\", command: x}]", "must be 1-100 letters"),  # accepted before ($)
])
def test_bad_queue_files_are_clear_errors(tmp_path: Path, text: str, expect: str) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=expect):
        load_queue(path)


def test_the_default_state_folder_is_the_queue_files_own(tmp_path: Path, monkeypatch) -> None:
    """Without --state-dir a queue's states go to runs/queue/<file stem>: two queue files each have
    their own (one folder for both refused the second as holding another file's jobs; a mutation
    test)."""
    from opolo_ros import cli

    monkeypatch.chdir(tmp_path)
    for name in ("first", "second"):
        (tmp_path / f"{name}.yaml").write_text("jobs:\n  - {name: j, command: 'true'}\n")
        assert cli.main(["queue", f"{name}.yaml"]) == 0
        assert (tmp_path / "runs" / "queue" / name / "j.done").is_file()


def test_missing_queue_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="queue file not found: .*nope.yaml"):
        load_queue(tmp_path / "nope.yaml")
    (tmp_path / "state").write_text("")
    queue = JobQueue([Job("a", ("true",), ())], tmp_path / "state", log=lambda _: None)
    with pytest.raises(ValueError, match=r"--state-dir .*state is a file, not a folder"):
        queue.run(threading.Event())


def test_quoted_shell_characters_are_plain_arguments(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_text("""jobs:
  - {name: a, command: "find . -exec echo {} ';'"}
  - {name: b, command: "tool --sep '|' --and \\\\&"}
""")
    assert [j.command for j in load_queue(path)] == [("find", ".", "-exec", "echo", "{}", ";"),
                                                     ("tool", "--sep", "|", "--and", "&")]


def test_load_queue_splits_strings_and_keeps_lists(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_text("jobs:\n  - {name: a, command: \"python -c 'print(1)'\"}\n"
                    "  - {name: b.2, command: [opolo-ros, train, --seed, 3]}\n")
    assert load_queue(path) == [Job("a", ("python", "-c", "print(1)")),
                                Job("b.2", ("opolo-ros", "train", "--seed", "3"))]
    path.write_text("jobs: [{name: a, command: x}, {name: b, command: y, after: a}, "
                    "{name: c, command: z, after: [a, b]}]")
    assert [j.after for j in load_queue(path)] == [(), ("a",), ("a", "b")]
    path.write_text("jobs: [{name: a, command: 'sleep 1  # then carry on'}]")  # a comment, as in a shell
    assert load_queue(path) == [Job("a", ("sleep", "1"))]


def test_a_job_waits_for_the_jobs_it_comes_after(tmp_path: Path, job_script: Path) -> None:
    """`ship` after `train`: not started while `train` runs (two slots), not at all when it fails."""
    train, ship = job(job_script, tmp_path, "train", seconds=0.6), job(job_script, tmp_path, "ship")
    ship = Job(ship.name, ship.command, after=("train",))
    other = job(job_script, tmp_path, "other", seconds=0.1)
    queue = JobQueue([train, ship, other], tmp_path / "state", parallel=2, poll_s=0.05, log=lambda _: None)
    assert queue.status_lines()[1].split()[:3] == ["ship", "after", "train"]
    assert queue.run(threading.Event()) == 0
    runs = [n for n, _ in starts(tmp_path)]
    assert sorted(runs[:2]) == ["other", "train"] and runs[2:] == ["ship"]  # the first two start together

    failing = Job("train2", job(job_script, tmp_path, "train2", rc=1).command)
    blocked = Job("ship2", job(job_script, tmp_path, "ship2").command, after=("train2",))
    queue = JobQueue([failing, blocked], tmp_path / "state", parallel=2, poll_s=0.05, log=lambda _: None)
    assert queue.run(threading.Event()) == 1 and queue.state(blocked) == "pending"
    assert "ship2" not in [n for n, _ in starts(tmp_path)]


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_command_stops_on_a_signal_with_its_jobs_and_reports_status(tmp_path: Path, job_script: Path,
                                                                    signame: str) -> None:
    """--nice N runs jobs N nicer than the queue; a signal stops the queue and its jobs (exit 130)."""
    queue_file = tmp_path / "q.yaml"
    queue_file.write_text("jobs:\n" + "".join(
        f"  - {{name: {n}, command: [{sys.executable}, {job_script}, {n}, {tmp_path}, 60, 0]}}\n"
        for n in ("first", "second")))
    state = tmp_path / "state"
    proc = subprocess.Popen([OPOLO_ROS, "queue", str(queue_file), "--nice", "3", "--state-dir", str(state)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not starts(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.1)
        job_pid = int((state / "first.pid").read_text().split()[0])
        # --nice 3 adds 3 to the queue's niceness (inherited from this process; nice caps it at 19)
        own = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, job_pid) == min(19, own + 3)
        status = subprocess.run([OPOLO_ROS, "queue", str(queue_file), "--status", "--state-dir", str(state)],
                                capture_output=True, text=True, check=True).stdout.splitlines()
        assert status[0].split()[:3] == ["first", "running", "(pid"] and "first: step 1/2" in status[0]
        assert status[1].split()[:2] == ["second", "pending"]
    except BaseException:
        proc.terminate()  # a failed check: stop the queue and its 60 s job, leave no process behind
        proc.communicate(timeout=30)
        raise

    proc.send_signal(getattr(signal, signame))
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, out
    assert (tmp_path / "first.checkpoint").exists()
    with pytest.raises(ProcessLookupError):
        os.kill(job_pid, 0)  # no orphan left behind
    assert not (state / "queue.pid").exists() and "first" in out and "exit 130" in out


def test_bad_parameters_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="parallel"):
        JobQueue([Job("a", ("true",))], tmp_path, parallel=0)
    with pytest.raises(ValueError, match="nice"):
        JobQueue([Job("a", ("true",))], tmp_path, nice=25)
    assert JobQueue([Job("a", ("true",))], tmp_path, nice=19).nice == 19  # `nice -n 19`, the lowest priority


def test_a_job_left_running_by_a_killed_queue_is_not_started_twice(tmp_path: Path, job_script: Path) -> None:
    jobs = [job(job_script, tmp_path, "long", seconds=60)]
    first = JobQueue(jobs, tmp_path / "state", poll_s=0.05, log=lambda _: None)
    first.state_dir.mkdir()
    proc = first._start(jobs[0])  # as if the queue that started it had been killed
    try:
        expect = rf"job long is running already \(pid {proc.pid}: .*`kill -TERM -- -{proc.pid}`"
        with pytest.raises(ValueError, match=expect):
            JobQueue(jobs, tmp_path / "state", poll_s=0.05, log=lambda _: None).run(threading.Event())
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_job_renamed_while_it_runs_is_not_started_twice(tmp_path: Path, job_script: Path) -> None:
    """Renamed in the file while it ran (or before a queue killed meanwhile is started again), the
    job was started a second time under its new name, beside the first (found by a probe)."""
    long = job(job_script, tmp_path, "r1", seconds=1.5)
    queue_file = tmp_path / "q.yaml"

    def write(name: str) -> None:
        queue_file.write_text(f"jobs:\n  - {{name: {name}, command: {list(long.command)}}}\n")

    write("r1")
    logged: list[str] = []
    queue = JobQueue(load_queue(queue_file), tmp_path / "state", parallel=2, poll_s=0.05,
                     log=logged.append, source=queue_file)
    stop, result = threading.Event(), []
    worker = threading.Thread(target=lambda: result.append(queue.run(stop)))
    worker.start()
    while not starts(tmp_path):
        time.sleep(0.05)
    write("r1_renamed")
    worker.join(timeout=60)
    assert [n for n, _ in starts(tmp_path)] == ["r1"] and result == [1]
    assert any("r1_renamed has the command of r1, which is running" in line for line in logged)

    proc = queue._start(Job("r1", long.command))  # left running by a queue killed with SIGKILL
    try:
        renamed = JobQueue(load_queue(queue_file), tmp_path / "state", poll_s=0.05, log=lambda _: None)
        with pytest.raises(ValueError, match=rf"job r1 is running already \(pid {proc.pid}"):
            renamed.run(threading.Event())
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_command_that_cannot_start_is_a_failed_job_not_a_crash(tmp_path: Path, job_script: Path) -> None:
    jobs = [Job("typo", ("no-such-command-here", "--x")), job(job_script, tmp_path, "next")]
    queue = JobQueue(jobs, tmp_path / "state", parallel=1, poll_s=0.05, log=lambda _: None)
    assert queue.run(threading.Event()) == 1
    assert queue.state(jobs[0]) == "exit 127" and queue.state(jobs[1]) == "done"
    log = (tmp_path / "state" / "typo.log").read_text()
    assert "cannot start the command: [Errno 2] No such file or directory" in log


@pytest.mark.parametrize("content", ["", "12", "abc 5", f"{os.getpid()} 1"])
def test_an_unreadable_or_stale_pid_file_is_not_a_running_job(tmp_path: Path, content: str) -> None:
    """Half-written, or naming a live pid with another start time (a pid reused after a reboot)."""
    queue = JobQueue([Job("a", ("true",))], tmp_path, poll_s=0.05, log=lambda _: None)
    (tmp_path / "a.pid").write_text(content)
    assert queue.state(queue.jobs[0]) == "ended, not recorded"  # (a killed queue's, not "exit N")
    assert queue.run(threading.Event()) == 0 and queue.state(queue.jobs[0]) == "done"


def test_one_queue_per_state_folder_and_file(tmp_path: Path) -> None:
    from opolo_ros.train.jobqueue import run_queue
    from opolo_ros.train.runlock import RunFolderInUse, RunFolderLock

    for name in ("one.yaml", "two.yaml"):
        (tmp_path / name).write_text("jobs: [{name: a, command: 'true'}]")
    state = tmp_path / "state"
    held = RunFolderLock(state).acquire()
    expect = rf"queue state folder .*state is in use by another queue \(pid {os.getpid()}\)"
    with pytest.raises(RunFolderInUse, match=expect):
        run_queue(JobQueue(load_queue(tmp_path / "one.yaml"), state, source=tmp_path / "one.yaml"))
    held.release()
    assert run_queue(JobQueue(load_queue(tmp_path / "one.yaml"), state, poll_s=0.05, log=lambda _: None,
                              source=tmp_path / "one.yaml")) == 0
    with pytest.raises(ValueError, match=r"holds the jobs of .*one.yaml, not .*two.yaml"):
        run_queue(JobQueue(load_queue(tmp_path / "two.yaml"), state, source=tmp_path / "two.yaml"))
    # one queue per file, whatever its state folder: a second one ran the jobs again beside the first
    from opolo_ros.train.jobqueue import lock_queue_file

    held_file = lock_queue_file(tmp_path / "one.yaml")
    try:
        with pytest.raises(ValueError, match=rf"one.yaml is run by another queue \(pid {os.getpid()}\)"):
            run_queue(JobQueue(load_queue(tmp_path / "one.yaml"), tmp_path / "other_state",
                               source=tmp_path / "one.yaml"))
    finally:
        os.close(held_file)
    assert run_queue(JobQueue(load_queue(tmp_path / "one.yaml"), tmp_path / "other_state", poll_s=0.05,
                              log=lambda _: None, source=tmp_path / "one.yaml")) == 0


def test_status_refuses_another_files_state_folder(tmp_path: Path) -> None:
    for name in ("one.yaml", "two.yaml"):
        (tmp_path / name).write_text("jobs: [{name: a, command: 'true'}]")
    state = str(tmp_path / "state")
    subprocess.run([OPOLO_ROS, "queue", str(tmp_path / "one.yaml"), "--state-dir", state], check=True,
                   capture_output=True)
    other = subprocess.run([OPOLO_ROS, "queue", str(tmp_path / "two.yaml"), "--status", "--state-dir", state],
                           capture_output=True, text=True)
    assert other.returncode == 2 and "holds the jobs of" in other.stderr and other.stdout == ""


def test_a_queue_that_fails_itself_stops_its_jobs_first(tmp_path: Path, job_script: Path) -> None:
    """Its state folder removed under it: the queue cannot record the short job's end, so it stops
    the long one (SIGTERM: it writes its checkpoint) before the error goes up; no orphan."""
    import shutil

    jobs = [job(job_script, tmp_path, "long", seconds=60), job(job_script, tmp_path, "short", seconds=1.0)]
    queue = JobQueue(jobs, tmp_path / "state", parallel=2, poll_s=0.05, log=lambda _: None)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            queue.run(threading.Event())
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 30
    while len(starts(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    long_pid = int((tmp_path / "state" / "long.pid").read_text().split()[0])
    shutil.rmtree(tmp_path / "state")
    thread.join(timeout=30)
    assert not thread.is_alive() and len(errors) == 1 and isinstance(errors[0], OSError), errors
    assert (tmp_path / "long.checkpoint").exists()
    with pytest.raises(ProcessLookupError):
        os.kill(long_pid, 0)


def test_a_closed_output_does_not_stop_the_queue(tmp_path: Path, job_script: Path) -> None:
    """`opolo-ros queue F | head -1`: the queue runs every job and exits 0 (all done), silently."""
    queue_file = tmp_path / "q.yaml"
    queue_file.write_text("jobs:\n" + "".join(
        f"  - {{name: {n}, command: [{sys.executable}, {job_script}, {n}, {tmp_path}, '0.5', 0]}}\n"
        for n in ("a", "b", "c")))
    state = str(tmp_path / "state")
    proc = subprocess.Popen([OPOLO_ROS, "queue", str(queue_file), "--parallel", "2", "--state-dir", state],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("queue:")
    proc.stdout.close()  # as `head -1` exits
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    assert proc.stderr.read() == ""
    status = subprocess.run([OPOLO_ROS, "queue", str(queue_file), "--status", "--state-dir", state],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    assert [line.split()[1] for line in status] == ["done", "done", "done"]


# A job that takes `saving` s to write its checkpoint on the first SIGTERM, and aborts on a second one.
PATIENT = r"""
import os, signal, sys, time
from pathlib import Path
name, root, saving = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
(root / f"{name}.started").write_text(str(os.getpid()))
def stop(*_):
    signal.signal(signal.SIGTERM, lambda *_: ((root / f"{name}.aborted").touch(), os._exit(1)))
    (root / f"{name}.saving").touch()
    time.sleep(saving)
    (root / f"{name}.checkpoint").touch()
    sys.exit(130)
signal.signal(signal.SIGTERM, stop)
time.sleep(60)
"""


def patient(tmp_path: Path, name: str, saving: float = 1.0) -> Job:
    script = tmp_path / "patient.py"
    script.write_text(PATIENT)
    return Job(name, (sys.executable, str(script), name, str(tmp_path), str(saving)))


def run_in_thread(queue: JobQueue, stop: threading.Event) -> tuple[threading.Thread, list]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            queue.run(stop)
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def test_a_queue_failing_while_it_stops_signals_no_job_twice(tmp_path: Path) -> None:
    """Stopping (one SIGTERM each), the queue cannot record one job's end: the other job, still
    writing its checkpoint, gets no second SIGTERM (which would abort it)."""
    jobs = [patient(tmp_path, "slow", saving=3.0), patient(tmp_path, "fast", saving=0.3)]
    queue = JobQueue(jobs, tmp_path / "state", parallel=2, poll_s=0.05, log=lambda _: None)
    finish = queue._finish

    def finish_or_fail(job: Job, rc: int) -> None:
        if job.name == "fast":
            raise OSError(28, "No space left on device")
        finish(job, rc)

    queue._finish = finish_or_fail
    stop = threading.Event()
    thread, errors = run_in_thread(queue, stop)
    deadline = time.monotonic() + 30
    started = lambda: all((tmp_path / f"{n}.started").exists() for n in ("slow", "fast"))  # noqa: E731
    while not started() and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    thread.join(timeout=30)
    assert len(errors) == 1 and isinstance(errors[0], OSError), errors
    assert (tmp_path / "slow.checkpoint").exists() and not (tmp_path / "slow.aborted").exists()


def test_a_second_signal_to_the_queue_is_passed_on_and_ends_a_saving_job_at_once(tmp_path: Path) -> None:
    """The first SIGTERM stops the queue and asks the job for its checkpoint; a second one, sent while
    the job still writes it (here 30 s), reaches the job too, which then ends at once."""
    job = patient(tmp_path, "slow", saving=30.0)
    queue_file = tmp_path / "q.yaml"
    queue_file.write_text(f"jobs:\n  - {{name: slow, command: {list(job.command)}}}\n")
    proc = subprocess.Popen([OPOLO_ROS, "queue", str(queue_file), "--state-dir", str(tmp_path / "state")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait_for(path: Path) -> bool:
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        return path.exists()

    try:
        assert wait_for(tmp_path / "slow.started")
        proc.send_signal(signal.SIGTERM)
        assert wait_for(tmp_path / "slow.saving")  # the job got the first one
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)  # well before the job's 30 s checkpoint
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.communicate(timeout=60)
    assert (tmp_path / "slow.aborted").exists() and not (tmp_path / "slow.checkpoint").exists(), out
    assert proc.returncode == 130, out


def test_a_job_whose_pid_file_cannot_be_written_is_not_left_running(tmp_path: Path) -> None:
    jobs = [patient(tmp_path, "b")]
    state = tmp_path / "state"
    (state / "b.pid").mkdir(parents=True)  # the pid file cannot be written
    thread, errors = run_in_thread(JobQueue(jobs, state, poll_s=0.05, log=lambda _: None), threading.Event())
    thread.join(timeout=30)
    assert len(errors) == 1 and isinstance(errors[0], OSError), errors
    mine = []  # processes whose command line names this test's folder: the job, if left running
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(tmp_path).encode() in (proc / "cmdline").read_bytes():
                mine.append(proc.name)
        except OSError:
            continue
    assert mine == []


def test_a_shell_jobs_child_is_waited_for_after_the_shell_ends(tmp_path: Path, monkeypatch) -> None:
    """`sh -c '... && ...'` (the docstring's form for shell syntax): on a stop the shell died at
    once and the queue recorded the job ended while its child still wrote its checkpoint; a queue
    started again then would have run it twice. A stopped job's child is waited for however long
    it writes, not only the grace period of a job that exited on its own (a mutation test)."""
    from opolo_ros.train import jobqueue

    monkeypatch.setattr(jobqueue, "GROUP_GRACE_S", 0.2)  # shorter than the child's 1 s checkpoint
    slow = tmp_path / "slow.py"
    slow.write_text("import signal, sys, time\nfrom pathlib import Path\n"
                    "def stop(*_):\n    time.sleep(1.0)\n"
                    f"    Path({str(tmp_path / 'checkpoint')!r}).write_text('written')\n    sys.exit(130)\n"
                    "signal.signal(signal.SIGTERM, stop)\n"
                    f"Path({str(tmp_path / 'started')!r}).touch()\ntime.sleep(60)\n")
    shell = Job("shell", ("sh", "-c", f"{sys.executable} {slow} && echo next"))
    queue = JobQueue([shell], tmp_path / "state", poll_s=0.05, log=lambda _: None)
    stop, result = threading.Event(), []
    worker = threading.Thread(target=lambda: result.append(queue.run(stop)))
    worker.start()
    deadline = time.monotonic() + 30
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    worker.join(timeout=30)
    assert result == [130] and (tmp_path / "checkpoint").read_text() == "written"
    assert not (tmp_path / "state" / "shell.pid").exists()


def test_a_done_job_whose_command_changed_is_said_not_run_again(tmp_path: Path, job_script: Path) -> None:
    """Done was keyed by name: a job extended in the file (300k -> 1M) was taken for done silently."""
    said: list[str] = []
    first = job(job_script, tmp_path, "j", seconds=0.05)
    assert JobQueue([first], tmp_path / "state", poll_s=0.05, log=said.append).run(threading.Event()) == 0
    changed = Job("j", (*first.command[:-2], "0.1", "0"))
    assert JobQueue([changed], tmp_path / "state", poll_s=0.05, log=said.append).run(threading.Event()) == 0
    assert len(starts(tmp_path)) == 1
    assert any("j is done, with the command" in line and "give it a new name" in line for line in said), said
    said.clear()
    assert JobQueue([first], tmp_path / "state", poll_s=0.05, log=said.append).run(threading.Event()) == 0
    assert not any("is done, with the command" in line for line in said)


def test_a_job_that_leaves_a_process_behind_ends_after_a_grace_period(tmp_path: Path, monkeypatch) -> None:
    """Waiting for a job's whole group (for `sh -c` children writing a checkpoint) held a queue
    slot for good when a job left a background process running (a review): without a stop, such a
    job ends GROUP_GRACE_S after its command, said with the pids left."""
    from opolo_ros.train import jobqueue

    monkeypatch.setattr(jobqueue, "GROUP_GRACE_S", 0.5)
    said: list[str] = []
    bg = Job("bg", ("sh", "-c", "sleep 30 & echo started"))
    queue = JobQueue([bg], tmp_path / "state", poll_s=0.05, log=said.append)
    t0 = time.monotonic()
    try:
        assert queue.run(threading.Event()) == 0
        assert time.monotonic() - t0 < 10 and queue.state(bg) == "done"
        left = [line for line in said if "bg exited with 0; its process group still runs" in line]
        assert left and "kill -TERM -- -" in left[0], said
    finally:
        pgid = int(left[0].split("kill -TERM -- -")[1].split("`")[0]) if left else None
        if pgid is not None:
            os.killpg(pgid, signal.SIGTERM)


def test_a_command_with_a_newline_is_not_taken_for_a_changed_one(tmp_path: Path) -> None:
    """The .done file's second line held the command as shell text, which a newline inside a quoted
    argument (a YAML `|` script) cut: the job was reported changed on every start (a review)."""
    said: list[str] = []
    script = Job("ml", ("sh", "-c", "echo a\necho b"))
    for _ in range(2):
        queue = JobQueue([script], tmp_path / "state", poll_s=0.05, log=said.append)
        assert queue.run(threading.Event()) == 0
    assert not any("is done, with the command" in line for line in said), said


def test_status_marks_a_progress_line_it_cuts(tmp_path: Path) -> None:
    """A long last line (`opolo-ros train: interrupted: stopped at env step 1000; checkpoint ...`)
    showed as "v step 1000; checkpoint ...": cut mid-word, unmarked."""
    line = "opolo-ros train: interrupted: stopped at env step 1000; checkpoint " + "x" * 80
    assert clipped("short") == "short" and clipped(line) == "..." + line[-97:] and len(clipped(line)) == 100
    queue = JobQueue([Job("pend", ("true",))], tmp_path / "state", log=lambda _: None)
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "pend.log").write_text(f"bar 10%\rbar 40%\r\n{line}\n")
    assert queue.status_lines()[0].endswith("  ..." + line[-97:])
