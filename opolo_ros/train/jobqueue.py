"""A queue of long, resumable training jobs: a few at a time, in order, each stopped gracefully.

Expert training and benchmark runs take hours on a small machine and are resumable from their
checkpoints. A queue file lists them in priority order; `opolo-ros queue FILE` keeps `--parallel`
of them running (one per core), starts the next when one ends, and on SIGINT/SIGTERM passes the
signal on to every running job (which writes its checkpoint and exits), starts nothing more and
exits 130. Run it again and it carries on: a job that exited 0 is marked done and skipped, every
other job (stopped, failed, never started) runs again and resumes from its own checkpoint. The file
is read again before each start, so jobs can be added, removed or reordered while the queue runs.

Queue file (YAML)::

    jobs:
      - name: hc_opolo_seed0              # letters, digits, '.', '_', '-'
        command: .venv/bin/python bench/suite.py --tasks HalfCheetah-v5 --variants opolo --seeds 0
      - name: walker_expert
        command: [.venv/bin/opolo-ros, train-expert, --config, config/experts/Walker2d-v5.yaml]
      - name: walker_ship
        command: .venv/bin/python bench/ship_expert.py --task Walker2d-v5
        after: walker_expert                # starts once that job is done (exited 0)

A command string is split into words as a shell would (quotes), then run without a shell: pipes,
redirections, ``&&``, ``;`` and ``$VARIABLES`` need ``sh -c '...'``; an unquoted ``|&;<>`` is
refused (a ``$`` reaches the command as it is).

State lives in `--state-dir` (default: `runs/queue/<queue file stem>`): `<name>.log` (the job's
stdout and stderr, appended), `<name>.pid` while it runs (or what it started does: a job has
ended when every process of its group has), `<name>.done` once it exited 0 (when, and its command:
a done job whose command is changed in the file is said, not run again; rename it to run it),
`<name>.exit` with the last non-zero exit status, and `queue.pid`. One queue runs a file at a time,
whatever its `--state-dir`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from opolo_ros.algo.config import read_yaml
from opolo_ros.errors import one_line

GROUP_GRACE_S = 5.0  # a job that exited on its own: how long what it started may still run
NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")  # (fullmatch)  # not ".", "..", a hidden file, > 100
RESERVED = {"queue"}  # queue.pid is the queue's own
SHELL_CHARS = set("|&;<>")  # pipes, &&, ;, redirections: shell syntax when not quoted
INTERRUPTED = 130
CANNOT_START = 127  # as a shell reports a command it cannot run
REQUIRED = {"name", "command"}


@dataclass(frozen=True)
class Job:
    name: str
    command: tuple[str, ...]
    after: tuple[str, ...] = ()  # jobs that must be done before this one starts


def load_queue(path: str | Path) -> list[Job]:
    """The jobs of a queue file, in order; ValueError naming the file and the entry on any problem."""
    path = Path(path)
    data = read_yaml(path, "queue file")  # one line for a missing, malformed or non-UTF-8 file
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list) or not data["jobs"]:
        raise ValueError(f"{path}: expected a mapping with a non-empty list 'jobs'")
    if set(data) != {"jobs"}:
        raise ValueError(f"{path}: unknown top-level keys {sorted(set(data) - {'jobs'})}: a queue file holds "
                         "only 'jobs' (the options are command-line flags: --parallel, --nice)")
    jobs: list[Job] = []
    for k, entry in enumerate(data["jobs"]):
        where = f"{path}: jobs[{k}]"
        if not isinstance(entry, dict) or not REQUIRED <= set(entry) <= REQUIRED | {"after"}:
            raise ValueError(f"{where}: expected the keys 'name', 'command' and optionally 'after', "
                             f"got {entry!r}")
        name, command, after = entry["name"], entry["command"], entry.get("after", [])
        if not isinstance(name, str) or not NAME.fullmatch(name) or name in RESERVED:
            raise ValueError(f"{where}: name {name!r} must be 1-100 letters, digits, '.', '_' or '-', "
                             f"not starting with '.', and not {sorted(RESERVED)}")
        if isinstance(command, str):
            try:
                argv = shlex.split(command, comments=True)  # "# ..." ends it, as in a shell
            except ValueError as exc:  # an unclosed quote
                raise ValueError(f"{where}: command {command!r} cannot be split into words: {exc}") from None
        elif isinstance(command, list) and all(isinstance(a, str) or type(a) is int for a in command):
            argv = [str(a) for a in command]
        elif isinstance(command, list):  # YAML reads yes / 0.10 / 010 as True / 0.1 / 8: refused, not mangled
            odd = next(a for a in command if not (isinstance(a, str) or type(a) is int))
            raise ValueError(f"{where}: command list item {odd!r} is a {type(odd).__name__} to YAML, not "
                             "the text written there; quote it")
        else:
            raise ValueError(f"{where}: command must be a string or a list of strings, got {command!r}")
        if not argv:
            raise ValueError(f"{where}: empty command")
        shell = _unquoted_shell_chars(command) if isinstance(command, str) else ""
        if shell:
            raise ValueError(f"{where}: command {command!r} uses shell syntax ({shell}), but a "
                             "command runs without a shell: write it as sh -c '...'")
        if any(j.name == name for j in jobs):
            raise ValueError(f"{where}: duplicate name {name!r}")
        if isinstance(after, str):
            after = [after]
        if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
            raise ValueError(f"{where}: after must be a job name or a list of them, got {after!r}")
        jobs.append(Job(name, tuple(argv), tuple(after)))
    names = {j.name for j in jobs}
    for job in jobs:
        if job.name in job.after:
            raise ValueError(f"{path}: job {job.name!r} comes after itself")
        unknown = [a for a in job.after if a not in names]
        if unknown:
            raise ValueError(f"{path}: job {job.name!r} comes after {unknown}, which is not another job here")
    cycle = _cycle({j.name: j.after for j in jobs})
    if cycle:
        raise ValueError(f"{path}: jobs wait for each other in a circle: {' -> '.join(cycle)}")
    return jobs


def _unquoted_shell_chars(command: str) -> str:
    """The characters of |&;<> that stand outside quotes (and unescaped) in a command string."""
    found, quote, escaped = [], "", False
    for ch in command:
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in SHELL_CHARS and ch not in found:
            found.append(ch)
    return " ".join(found)


def _cycle(after: dict[str, tuple[str, ...]]) -> list[str]:
    """A circle of `after` relations (its names, the first repeated at the end), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: checked

    def visit(name: str, path: list[str]) -> list[str]:
        state[name] = 1
        for dep in after[name]:
            if state.get(dep) == 1:
                return [*path[path.index(dep):], name, dep] if dep in path else [name, dep]
            if dep not in state:
                found = visit(dep, [*path, name])
                if found:
                    return found
        state[name] = 2
        return []

    for name in after:
        if name not in state:
            found = visit(name, [])
            if found:
                return found
    return []


def _start_time(pid: int) -> str:
    """The kernel's start time of a process (field 22 of /proc/PID/stat), "" when there is none:
    with the pid it names one process, so a pid reused after a reboot is not taken for a job."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rindex(")") + 2:].split()[19]


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (a job's group: what its command started)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _group_members(pgid: int) -> list[int]:
    """The pids of process group `pgid` (from /proc)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if int(text[text.rindex(")") + 2:].split()[2]) == pgid:
            members.append(int(stat.parent.name))
    return sorted(members)


def _job_pid(pid_file: Path) -> int | None:
    """The pid of the job a pid file names while that very process still runs, or while what it
    started does (`sh -c '...'` ended, its child writing a checkpoint); else None (an unreadable or
    half-written file, a process that ended with all it started, a pid now used by another process)."""
    try:
        pid_text, started = pid_file.read_text().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    now = _start_time(pid)
    if now == started or (not now and _group_alive(pid)):  # (its pid is taken by no new process)
        return pid
    return None


def last_progress(log: Path, max_bytes: int = 4096) -> str:
    """The last line (or carriage-return segment, as progress bars write) of a log file."""
    if not log.exists():
        return ""
    with log.open("rb") as f:
        f.seek(max(0, log.stat().st_size - max_bytes))
        tail = f.read().decode(errors="replace")
    parts = [p.strip() for p in re.split(r"[\r\n]", tail) if p.strip()]
    return parts[-1] if parts else ""


def clipped(text: str, width: int = 100) -> str:
    """The end of a long progress line, marked as cut: ``[-100:]`` began "v step 1000; checkpoint
    ..." mid-word, which read as the job's own words (a walkthrough)."""
    return text if len(text) <= width else "..." + text[-(width - 3):]


class JobQueue:
    def __init__(self, jobs: list[Job], state_dir: str | Path, parallel: int = 1, nice: int = 0,
                 cwd: str | Path | None = None, poll_s: float = 0.5,
                 log: Callable[[str], None] = print, source: str | Path | None = None) -> None:
        """`source`: the queue file, read again before each start (None: `jobs` as given)."""
        if parallel < 1:
            raise ValueError(f"parallel must be at least 1, got {parallel}")
        if not 0 <= nice <= 19:
            raise ValueError(f"nice must be in 0..19, got {nice}")
        self.jobs, self.parallel, self.nice = jobs, parallel, nice
        self.state_dir = Path(state_dir)
        self.cwd, self.poll_s, self.log = cwd, poll_s, log
        self.source = Path(source) if source is not None else None
        self._reload_error = ""
        self._running: dict[str, tuple[Job, subprocess.Popen]] = {}
        self._signalled: set[str] = set()  # running jobs sent SIGTERM once (a second one aborts them)
        self._told_changed: set[str] = set()  # done jobs whose command changed since, said once
        self._exited: dict[str, float] = {}  # running jobs whose command exited: since when

    def say(self, text: str) -> None:
        """A progress line; if the output is gone (a closed pipe: `| head`, a `| tee` that was
        stopped), the queue goes on without it: the jobs' logs hold everything."""
        try:
            self.log(text)
        except OSError:
            self.log = lambda _text: None

    def _file(self, job: Job, suffix: str) -> Path:
        return self.state_dir / f"{job.name}.{suffix}"

    def state(self, job: Job) -> str:
        """done | running (pid N) | exit N (stopped or failed, runs again) | pending."""
        if self._file(job, "done").exists():
            return "done"
        pid_file = self._file(job, "pid")
        pid = _job_pid(pid_file)
        if pid is not None:
            return f"running (pid {pid})"
        if pid_file.exists():  # its queue did not see it end (killed with SIGKILL): runs again
            return "ended, not recorded"
        exit_file = self._file(job, "exit")
        if exit_file.exists():
            return f"exit {exit_file.read_text().strip()}"
        return "pending"

    def status_lines(self) -> list[str]:
        width = max(len(j.name) for j in self.jobs)
        lines = []
        for j in self.jobs:
            state = self.state(j)
            waits = [a for a in j.after if self.state(next(k for k in self.jobs if k.name == a)) != "done"]
            if state == "pending" and waits:
                state = f"after {', '.join(waits)}"
            lines.append(f"{j.name:<{width}}  {state:<20}  {clipped(last_progress(self._file(j, 'log')))}")
        return lines

    def _start(self, job: Job) -> subprocess.Popen | None:
        """Start a job; None (said in its log) when its command cannot be started at all."""
        argv = ["nice", "-n", str(self.nice), *job.command] if self.nice else list(job.command)
        with self._file(job, "log").open("ab") as out:
            out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(job.command)}\n".encode())
            out.flush()
            try:
                # Its own session: a terminal's Ctrl-C reaches the queue only, which passes it on once.
                proc = subprocess.Popen(argv, cwd=self.cwd, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as err:
                out.write(f"queue: cannot start the command: {one_line(err)}\n".encode())
                return None
        try:
            self._file(job, "pid").write_text(f"{proc.pid} {_start_time(proc.pid)}\n")
        except BaseException:  # not watched yet: stopped here, not left behind
            self._signal(proc, signal.SIGTERM)
            proc.wait()
            raise
        self.say(f"queue: started {job.name} (pid {proc.pid})")
        return proc

    def _finish(self, job: Job, rc: int) -> None:
        """Record how a job ended (its ``.done``: when, and the command that did it)."""
        self._exited.pop(job.name, None)
        self._file(job, "pid").unlink(missing_ok=True)
        if rc == 0:
            self._file(job, "exit").unlink(missing_ok=True)
            self._file(job, "done").write_text(f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n"
                                               f"{json.dumps(list(job.command))}\n")
            self.say(f"queue: {job.name} done")
            return
        self._file(job, "exit").write_text(f"{rc}\n")
        why = "stopped" if rc in (INTERRUPTED, -signal.SIGTERM, -signal.SIGINT) else "FAILED"
        self.say(f"queue: {job.name} {why} with exit status {rc} (see {self._file(job, 'log')})")

    def _next(self, tried: set[str]) -> Job | None:
        """The first job neither done nor started by this run, from the queue file as it is now
        (edit it while the queue runs: jobs added, removed or reordered count from the next start)."""
        if self.source is not None:
            try:
                self.jobs = load_queue(self.source)
                self._reload_error = ""
            except (ValueError, OSError) as err:
                if one_line(err) != self._reload_error:
                    self._reload_error = one_line(err)
                    self.say(f"queue: {self._reload_error}; keeping the jobs read before")
        done = {j.name for j in self.jobs if self.state(j) == "done"}
        for j in self.jobs:
            self._changed_since_done(j, done)
        running = {job.command: name for name, (job, _) in self._running.items()}
        for j in self.jobs:
            if j.name in tried or j.name in done or not set(j.after) <= done:
                continue
            if j.command in running:  # a job renamed in the file while it runs: not twice at once
                tried.add(j.name)
                self.say(f"queue: {j.name} has the command of {running[j.command]}, which is running: "
                         "not started (start the queue again once it has ended)")
                continue
            return j
        return None

    def _changed_since_done(self, job: Job, done: set[str]) -> None:
        """Say (once) that a done job's command was changed in the file since: a job extended
        from 300k to 1M steps under its old name was taken for done without a word."""
        if job.name not in done or job.name in self._told_changed:
            return
        try:
            lines = self._file(job, "done").read_text().splitlines()
            done_with = tuple(json.loads(lines[1])) if len(lines) > 1 else job.command  # (older: a time)
        except (OSError, ValueError, TypeError):
            return
        if done_with != job.command:
            self._told_changed.add(job.name)
            self.say(f"queue: {job.name} is done, with the command {shlex.join(done_with)}; its command "
                     f"in the file is now {shlex.join(job.command)}: not run again (give it a new name "
                     "to run it)")

    def run(self, stop: threading.Event) -> int:
        """Run every job not done yet; 0 when all are done, 130 when stopped, else 1 (a job failed,
        was stopped from outside, or waits for one that is not done)."""
        if self.state_dir.exists() and not self.state_dir.is_dir():
            raise ValueError(f"--state-dir {self.state_dir} is a file, not a folder")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for pid_file in sorted(self.state_dir.glob("*.pid")):  # jobs renamed or removed since too
            pid = _job_pid(pid_file) if pid_file.stem not in RESERVED else None  # (queue.pid: the queue's)
            if pid is not None:
                raise ValueError(f"job {pid_file.stem} is running already (pid {pid}: another queue on "
                                 f"{self.state_dir}, or left by one that was killed); wait for it or stop "
                                 f"it with `kill -TERM -- -{pid}`")
        done = sum(self.state(j) == "done" for j in self.jobs)
        self.say(f"queue: {done} of {len(self.jobs)} jobs done, {len(self.jobs) - done} to run, "
                 f"{self.parallel} at a time")
        self._signalled.clear()
        try:
            self._loop(stop)
        except BaseException:  # the queue itself failed (a state file it cannot write): no job left unwatched
            self._abandon()
            raise
        if stop.is_set():
            return INTERRUPTED
        return 0 if all(self.state(j) == "done" for j in self.jobs) else 1

    def _loop(self, stop: threading.Event) -> None:
        tried: set[str] = set()
        signalled = self._signalled
        while True:
            while not stop.is_set() and len(self._running) < self.parallel:
                job = self._next(tried)
                if job is None:
                    break
                tried.add(job.name)
                proc = self._start(job)
                if proc is None:
                    self._finish(job, CANNOT_START)
                else:
                    self._running[job.name] = (job, proc)
            if stop.is_set():
                for name, (_, proc) in self._running.items():
                    if name not in signalled:
                        self._signal(proc, signal.SIGTERM)
                        signalled.add(name)
            for name, (job, proc) in list(self._running.items()):
                rc = proc.poll()
                if rc is not None and self._ended(job, proc, rc, stopping=name in signalled):
                    del self._running[name]
                    self._finish(job, rc)
            if not self._running and (stop.is_set() or self._next(tried) is None):
                break
            if stop.is_set():
                time.sleep(self.poll_s)  # the jobs are writing their checkpoints
            else:
                stop.wait(self.poll_s)

    def _ended(self, job: Job, proc: subprocess.Popen, rc: int, stopping: bool) -> bool:
        """Whether a job whose command exited has ended: once what it started has too. A stopped
        job's (`sh -c`'s child, writing its checkpoint) is waited for; a job that exited on its own
        and left a process behind (`cmd &`) ends after GROUP_GRACE_S, said with their pids."""
        if not _group_alive(proc.pid):
            return True
        exited = self._exited.setdefault(job.name, time.monotonic())
        if stopping or time.monotonic() - exited < GROUP_GRACE_S:
            return False
        left = _group_members(proc.pid)
        self.say(f"queue: {job.name} exited with {rc}; its process group still runs "
                 f"{', '.join(map(str, left)) or 'processes'} (`kill -TERM -- -{proc.pid}` stops them)")
        return True

    def _abandon(self) -> None:
        """SIGTERM to every running job (once: a second one would abort its checkpoint), wait for each,
        record what can be."""
        for name, (_, proc) in self._running.items():
            if name not in self._signalled:
                self._signal(proc, signal.SIGTERM)
        for job, proc in list(self._running.values()):
            rc = proc.wait()
            deadline = time.monotonic() + 60.0  # what it started, writing its checkpoint (bounded:
            while _group_alive(proc.pid) and time.monotonic() < deadline:  # the queue is failing)
                time.sleep(self.poll_s)
            try:
                self._finish(job, rc)
            except OSError:
                pass
        self._running.clear()

    def interrupt_again(self) -> None:
        """SIGTERM again to every running job."""
        for _, proc in list(self._running.values()):
            self._signal(proc, signal.SIGTERM)

    @staticmethod
    def _signal(proc: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)  # the job's process group: `nice` and what it started
        except ProcessLookupError:
            pass


def check_owner(queue: JobQueue) -> None:
    """ValueError unless the state folder is new or holds the job states of this very queue file."""
    owner = queue.state_dir / "queue_file"
    if queue.source is None or not owner.exists():
        return
    mine, theirs = str(queue.source.resolve()), owner.read_text().strip()
    if theirs != mine:
        raise ValueError(f"queue state folder {queue.state_dir} holds the jobs of {theirs}, not {mine}; "
                         "choose another --state-dir")


def lock_queue_file(source: Path) -> int:
    """Hold the queue file for this process (an flock on ``.<file name>.lock`` beside it, which an
    editor's rename-on-save leaves alone): a second queue on the same file with another
    --state-dir ran its jobs a second time beside the first. Returns the lock's file descriptor
    (closing it releases the lock); ValueError when another queue holds it or it cannot be made."""
    from opolo_ros.train.runlock import take_lock_file

    resolved = source.resolve()
    path = resolved.with_name(f".{resolved.name}.lock")
    try:
        fd, holder = take_lock_file(path, f"pid {os.getpid()}\n")
    except OSError as err:
        raise ValueError(f"cannot make the queue file's lock {path} ({err.strerror}): the queue file's "
                         "folder must be writable") from None
    if fd is None:
        raise ValueError(f"queue file {resolved} is run by another queue ({holder or '?'}); one queue "
                         "per file, whatever its --state-dir")
    return fd


def run_queue(queue: JobQueue) -> int:
    """`queue.run` in the foreground, stopped by SIGINT/SIGTERM/SIGHUP; one queue per state folder.

    The first signal stops the queue (each job gets SIGTERM once and writes its checkpoint); every
    further one is passed on to the jobs again, and a training job stopped twice ends at once,
    without that last checkpoint (its periodic one, written atomically, stays). SIGHUP counts as a
    stop too: a dropped terminal must not leave jobs running that no queue watches. `queue.pid`
    names the queue while it runs; `queue_file` records which file the folder's job states belong to.
    """
    from opolo_ros.train.runlock import RunFolderLock

    stop = threading.Event()

    def handler(_signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            queue.interrupt_again()
        stop.set()

    lock = RunFolderLock(queue.state_dir, label="queue state folder", holder="queue").acquire()
    file_lock = None
    try:
        if queue.source is not None:
            check_owner(queue)
            file_lock = lock_queue_file(queue.source)
            (queue.state_dir / "queue_file").write_text(str(queue.source.resolve()) + "\n")
        pid_file = queue.state_dir / "queue.pid"
        pid_file.write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")  # as a job's: pid, start time
        signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        previous = {sig: signal.signal(sig, handler) for sig in signals}
        try:
            return queue.run(stop)
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
            pid_file.unlink(missing_ok=True)
    finally:
        if file_lock is not None:
            os.close(file_lock)
        lock.release()
