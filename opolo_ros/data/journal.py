"""Append-only replay journal: the learner's record of transitions received since its last checkpoint.

The learner acknowledges transitions to the sim bridges (``/opolo/learner_progress``) as soon as
it has trained on them, long before the next checkpoint. So that a crash (``kill -9``, an OOM
kill, a power cut) never loses an acknowledged transition, every replay batch is appended here --
written, and with ``fsync`` made durable -- *before* the learner consumes it, hence before it is
acknowledged. On restart the learner restores its checkpoint (step S) and consumes again every
journalled transition from step S on, through the same code path as live data, so the run
continues as if it had not stopped.

File format (``<run_dir>/replay_journal.bin``, little endian), a sequence of records::

    magic b"OPJ1" | first_step int64 | source uint32 | seq uint32 | rows uint32 | fields uint32 |
    crc32 uint32 | rows * fields float32 (the replay rows, :meth:`ReplayBatch.rows` layout)

``first_step`` is the learner's step (transitions consumed) before the record's first row, so row
``i`` is transition ``first_step + i``. A record is one ``write`` call; a torn or corrupt tail (a
crash in the middle of an append) ends the journal when it is read, and is dropped: its rows were
never acknowledged.

Truncation keeps the file small: after each checkpoint at step S the journal is rewritten to the
records that still hold a transition at or after S (usually none or the batch in progress), into
a temporary file that atomically replaces the old one. The checkpoint is written first, so at any
moment the pair (checkpoint, journal) holds every acknowledged transition.

Durability: a record is in the operating system's page cache when :meth:`ReplayJournal.append`
returns, which is enough to survive the death of the process (``kill -9``). With ``fsync`` it is
also forced to the disk, in a background thread (an fsync costs 0.2-4 ms on this machine's
virtual disk) while the learner trains on the batch; :meth:`ReplayJournal.sync` waits for it and
is called before the batch is acknowledged.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"OPJ1"
HEADER = struct.Struct("<4sqIIIII")  # magic, first_step, source, seq, rows, fields, crc32


class JournalWriteError(OSError):
    """A record that could not be appended (a full disk); what the journal held before is kept."""


@dataclass(frozen=True, eq=False)
class JournalRecord:
    """One replay batch as the learner received it, with the step of its first transition."""

    first_step: int
    source: int
    seq: int
    rows: np.ndarray  # float32 [n, fields]

    @property
    def end_step(self) -> int:
        """The step after the record's last transition."""
        return self.first_step + self.rows.shape[0]

    def encode(self) -> bytes:
        payload = np.ascontiguousarray(self.rows, dtype=np.float32).tobytes()
        n, fields = self.rows.shape
        return HEADER.pack(MAGIC, self.first_step, self.source, self.seq, n, fields,
                           zlib.crc32(payload)) + payload


def _records(data: bytes) -> Iterator[tuple[int, JournalRecord]]:
    """(offset, record) for each valid record of `data`, up to the first torn or corrupt one."""
    offset = 0
    while offset + HEADER.size <= len(data):
        magic, first, source, seq, n, fields, crc = HEADER.unpack_from(data, offset)
        end = offset + HEADER.size + 4 * n * fields
        if magic != MAGIC or n == 0 or fields == 0 or first < 0 or end > len(data):
            return
        payload = data[offset + HEADER.size:end]
        if zlib.crc32(payload) != crc:
            return
        rows = np.frombuffer(payload, dtype=np.float32).reshape(n, fields)
        yield offset, JournalRecord(first, source, seq, rows)
        offset = end


def _whole_record_after(data: bytes, start: int) -> bool:
    """Whether a whole, valid record starts anywhere in `data` after `start`: then what ends the
    journal at `start` is damage in its middle, not a tail a crash cut short."""
    offset = data.find(MAGIC, start + 1)
    while offset != -1:
        if next(_records(data[offset:]), None) is not None:
            return True
        offset = data.find(MAGIC, offset + 1)
    return False


# what each end kind of a damaged journal (:func:`_end_kind`) looks like, for messages
DAMAGE = {"last": "its last record is all there but fails its check",
          "middle": "whole records follow bad bytes in its middle"}


def _end_kind(data: bytes, offset: int) -> str:
    """What ends the journal's whole records at `offset`: "" (nothing), "torn" (part of a record: an
    append a crash cut short, never acknowledged), "last" (a last record whose every byte is there
    but whose check fails: a power cut's unfinished write, or damage to an acknowledged batch) or
    "middle" (whole valid records follow: damage, and acknowledged transitions after it)."""
    if offset >= len(data):
        return ""
    if _whole_record_after(data, offset):
        return "middle"
    if offset + HEADER.size <= len(data):
        magic, first, _, _, n, fields, _ = HEADER.unpack_from(data, offset)
        whole_length = offset + HEADER.size + 4 * n * fields == len(data)
        if magic == MAGIC and n and fields and first >= 0 and whole_length:
            return "last"
    return "torn"


def _whole_length(parsed: list[tuple[int, JournalRecord]]) -> int:
    """The bytes the whole records `parsed` (from :func:`_records`) take from the file's start."""
    return parsed[-1][0] + HEADER.size + parsed[-1][1].rows.nbytes if parsed else 0


def read_records(path: Path) -> tuple[list[JournalRecord], str]:
    """The whole records of a journal file, and what ends them (:func:`_end_kind`), without opening
    it for appending (nor rewriting it)."""
    data = path.read_bytes() if path.is_file() else b""
    parsed = list(_records(data))
    return [rec for _, rec in parsed], _end_kind(data, _whole_length(parsed))


class ReplayJournal:
    """The journal file of one run: :meth:`open`, :meth:`append` per batch, :meth:`sync` before
    acknowledging it, :meth:`truncate` per checkpoint, :meth:`close`. With `fsync` every record is
    made durable against a machine crash too; without, against a crash of the process only."""

    def __init__(self, path: str | Path, fields: int, fsync: bool = False) -> None:
        self.path = Path(path)
        self.fields = fields
        self.fsync = fsync
        self._fd: int | None = None
        self._index: list[tuple[int, int]] = []  # (end_step, offset) of each record in the file
        self._size = 0
        # what open() left out of the file: (bytes, the step after the last whole record or None)
        self.dropped: tuple[int, int | None] = (0, None)
        # what ended the whole records (_end_kind), and the file's bytes kept for "last" or "middle"
        self.end_kind = ""
        self.damaged_copy: Path | None = None
        self._syncer = ThreadPoolExecutor(1, thread_name_prefix="journal_fsync") if fsync else None
        self._sync: Future | None = None  # the fsync of the newest records, running

    def open(self, keep_from: int = 0, discard: bool = False) -> list[JournalRecord]:
        """Open for appending; return the records that hold a transition at or after `keep_from`.

        The file is rewritten to those records (dropping older ones and a torn tail); `discard`
        starts an empty journal (a run that does not resume).
        """
        data = b"" if discard or not self.path.is_file() else self.path.read_bytes()
        parsed = list(_records(data))
        whole = _whole_length(parsed)
        self.dropped = (len(data) - whole, parsed[-1][1].end_step if parsed else None)
        records = [rec for _, rec in parsed if rec.end_step > keep_from]
        for rec in records:
            if rec.rows.shape[1] != self.fields:
                raise ValueError(f"replay journal {self.path} holds transitions of {rec.rows.shape[1]} "
                                 f"fields, this run has {self.fields} (another task's run folder?)")
        self.end_kind, self.damaged_copy = _end_kind(data, whole), None
        if self.end_kind in ("last", "middle"):  # maybe damage: keep the file before the rewrite
            stamp = time.strftime("%Y%m%d-%H%M%S")
            self.damaged_copy = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
            self.damaged_copy.write_bytes(data)
            fsync_dir(self.path.parent)
        self._rewrite(b"".join(rec.encode() for rec in records))
        return records

    def append(self, record: JournalRecord) -> None:
        """Write one record (one ``write`` call: it survives the process from here on) and start its
        fsync; call :meth:`sync` before acknowledging it."""
        if self._fd is None:
            raise RuntimeError("the replay journal is not open")
        if record.rows.shape[1] != self.fields:
            raise ValueError(f"journal record has {record.rows.shape[1]} fields, expected {self.fields}")
        data = record.encode()
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as err:  # (the record's torn start is dropped on restart)
            raise self._error("append to", err, "the batch is not acknowledged") from err
        self._size += len(data)
        self._index.append((record.end_step, self._size - len(data)))
        if self._syncer is not None:
            self.sync()  # at most one fsync in flight: it covers every record written before it
            self._sync = self._syncer.submit(os.fsync, self._fd)

    def _error(self, doing: str, err: OSError, consequence: str) -> JournalWriteError:
        """A disk error (a full disk, most often) as one line naming the file and the free space."""
        try:
            free = f"; {shutil.disk_usage(self.path.parent).free / 2**20:.0f} MiB free on its disk"
        except OSError:
            free = ""
        why = err.strerror or err
        return JournalWriteError(f"could not {doing} replay journal {self.path} ({why}{free}): "
                                 f"{consequence}; the checkpoint and the journal before it are kept")

    def sync(self) -> None:
        """Wait until every appended record is on the disk (with `fsync`; else nothing to wait for)."""
        if self._sync is not None:
            sync, self._sync = self._sync, None
            try:
                sync.result()
            except OSError as err:
                raise self._error("sync", err, "the newest batches are not acknowledged") from err

    def make_durable(self) -> None:
        """Force every record to the disk, and the file's name (its last rewrite) into its folder,
        whatever `fsync` says: before a checkpoint that relies on the records is written."""
        if self._fd is None:
            return
        self.sync()
        try:
            os.fsync(self._fd)
            fsync_dir(self.path.parent)
        except OSError as err:
            raise self._error("sync", err, "no checkpoint relies on it") from err

    def truncate(self, keep_from: int) -> None:
        """After a checkpoint at step `keep_from`: keep only records with transitions from there on."""
        if self._fd is None:
            return
        start = next((offset for end, offset in self._index if end > keep_from), self._size)
        if start == 0:
            return
        tail = os.pread(self._fd, self._size - start, start) if start < self._size else b""
        self._rewrite(tail)

    def close(self) -> None:
        """Close the file (after the running fsync) and end the fsync thread; final."""
        self._close_file()
        if self._syncer is not None:
            self._syncer.shutdown()
            self._syncer = None

    def _close_file(self) -> None:
        self.sync()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def size(self) -> int:
        """Bytes in the journal file."""
        return self._size

    def _rewrite(self, data: bytes) -> None:
        """Atomically replace the file with `data` (whole records) and reopen it for appending."""
        self._close_file()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            if self.fsync:
                fsync_dir(self.path.parent)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            raise self._error("rewrite", err, "it is left as it was") from err
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        self._index = [(rec.end_step, offset) for offset, rec in _records(data)]
        self._size = len(data)


def fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
