"""One training process per run folder: an advisory lock on `<run_dir>/.lock`.

Two trainers on one run folder (a queue restarted while the old job still runs, a second
`ros2 launch` with the same run_dir) would overwrite each other's checkpoints, journal and logs.
The lock is `flock`-based, so the kernel drops it when its process ends in any way, `kill -9`
included: a crash never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def take_lock_file(path: Path, stamp: str) -> tuple[int | None, str]:
    """An exclusive flock on `path` (created if need be), `stamp` written into it: (its file
    descriptor, ''; closing it releases the lock), or (None, the holder's stamp) when another
    process holds it. OSError when the file cannot be made."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
        os.close(fd)
        return None, holder
    os.ftruncate(fd, 0)
    os.pwrite(fd, stamp.encode(), 0)
    return fd, ""


class RunFolderInUse(OSError):
    """Another process trains in this run folder."""


class RunFolderLock:
    def __init__(self, run_dir: str | Path, *, label: str = "run folder",
                 holder: str = "training process") -> None:
        """`label` / `holder` name the folder and its owner in the error (another use: a queue's
        state folder, held by a queue)."""
        self.path = Path(run_dir) / ".lock"
        self.label, self.holder = label, holder
        self._fd: int | None = None

    def acquire(self) -> RunFolderLock:
        """Take the lock (idempotent); RunFolderInUse names the process holding it."""
        if self._fd is not None:
            return self
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise NotADirectoryError(f"{self.label} {self.path.parent} is not a folder (a file of that "
                                     "name, or a file on its path)") from None
        fd, owner = take_lock_file(self.path, f"{os.getpid()}\n")
        if fd is None:
            raise RunFolderInUse(f"{self.label} {self.path.parent} is in use by another {self.holder} "
                                 f"(pid {owner[:32] or 'unknown'}); stop it first or choose another folder")
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None
