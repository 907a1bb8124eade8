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
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunFolderInUse(f"{self.label} {self.path.parent} is in use by another {self.holder} "
                                 f"(pid {owner}); stop it first or choose another folder") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None
