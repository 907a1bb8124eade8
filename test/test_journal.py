"""The replay journal (no ROS): records survive reopening, a torn tail is dropped, truncation keeps
exactly what a checkpoint does not hold."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from opolo_ros.data.journal import HEADER, JournalRecord, ReplayJournal

FIELDS = 12


def record(first: int, n: int, seq: int) -> JournalRecord:
    rows = np.arange(first * FIELDS, (first + n) * FIELDS, dtype=np.float32).reshape(n, FIELDS)
    return JournalRecord(first, source=7, seq=seq, rows=rows)


def written(path: Path, fsync: bool = False) -> list[JournalRecord]:
    """Records of 3, 2 and 4 transitions (steps 0..9), appended and closed."""
    journal = ReplayJournal(path, FIELDS, fsync=fsync)
    assert journal.open() == []
    records = [record(0, 3, 0), record(3, 2, 1), record(5, 4, 2)]
    for rec in records:
        journal.append(rec)
    journal.close()
    return records


def same(a: list[JournalRecord], b: list[JournalRecord]) -> bool:
    return [(r.first_step, r.source, r.seq) for r in a] == [(r.first_step, r.source, r.seq) for r in b] \
        and all(np.array_equal(x.rows, y.rows) for x, y in zip(a, b))


@pytest.mark.parametrize("fsync", [False, True])
def test_records_survive_reopening(tmp_path, fsync):
    records = written(tmp_path / "j.bin", fsync)
    journal = ReplayJournal(tmp_path / "j.bin", FIELDS, fsync=fsync)
    assert same(journal.open(), records)
    assert same(journal.open(keep_from=4), records[1:])  # the record of steps 3, 4 holds step 4
    assert same(ReplayJournal(tmp_path / "j.bin", FIELDS).open(), records[1:])  # rewritten to those
    journal.close()


@pytest.mark.parametrize("fsync", [False, True])
def test_with_fsync_each_record_is_on_the_disk_when_sync_returns(tmp_path, monkeypatch, fsync):
    """`fsync=True`: sync() returns after an fsync of the file that holds the record; `False`: none."""
    synced: list[int] = []  # the journal file's size at each fsync of it
    path = tmp_path / "j.bin"
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        if path.exists() and os.path.samestat(os.fstat(fd), path.stat()):
            synced.append(os.fstat(fd).st_size)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    journal = ReplayJournal(path, FIELDS, fsync=fsync)
    journal.open()
    synced.clear()  # what opening does is not the question here
    for rec in (record(0, 3, 0), record(3, 2, 1)):
        journal.append(rec)
        journal.sync()
        assert synced[-1:] == ([path.stat().st_size] if fsync else []), synced
    journal.close()


def test_torn_or_corrupt_tail_is_dropped(tmp_path):
    path = tmp_path / "j.bin"
    records = written(path)
    data = path.read_bytes()
    path.write_bytes(data[:-5])  # a crash in the middle of the last append
    torn = ReplayJournal(path, FIELDS)
    assert same(torn.open(), records[:2])
    assert torn.dropped == (len(records[2].encode()) - 5, records[1].end_step)  # what the learner logs
    assert torn.damaged_copy is None and torn.end_kind == "torn"  # a torn tail: nothing to keep
    torn.close()
    last = bytearray(data)
    last[-1] ^= 0xFF  # the last record whole in length, its check failing: a power cut's, or damage
    path.write_bytes(bytes(last))
    flipped = ReplayJournal(path, FIELDS)
    assert same(flipped.open(), records[:2]) and flipped.end_kind == "last"
    assert flipped.damaged_copy is not None and flipped.damaged_copy.read_bytes() == bytes(last)
    flipped.close()
    flipped.damaged_copy.unlink()
    corrupt = bytearray(data)
    corrupt[HEADER.size + 4] ^= 0xFF  # a flipped bit in the first record's rows: its crc fails
    path.write_bytes(bytes(corrupt))
    damaged = ReplayJournal(path, FIELDS)
    assert damaged.open() == [] and damaged.dropped == (len(data), None)
    # whole records follow the damage: not a torn tail, and the file's bytes are kept aside (they
    # were rewritten away, the acknowledged records after the damage with them)
    assert damaged.damaged_copy is not None and damaged.damaged_copy.read_bytes() == bytes(corrupt)
    assert damaged.end_kind == "middle"
    assert damaged.damaged_copy.name.startswith("j.bin.damaged-")
    damaged.close()
    damaged.damaged_copy.unlink()
    path.write_bytes(data + b"\x00" * 3)
    journal = ReplayJournal(path, FIELDS)
    assert same(journal.open(), records) and journal.dropped == (3, records[-1].end_step)
    journal.append(record(9, 1, 3))  # appends after the dropped garbage, readable again
    journal.close()
    assert same(ReplayJournal(path, FIELDS).open(), [*records, record(9, 1, 3)])


def test_truncate_keeps_what_the_checkpoint_lacks(tmp_path):
    path = tmp_path / "j.bin"
    records = written(path)
    journal = ReplayJournal(path, FIELDS)
    journal.open()
    size = journal.size
    journal.truncate(4)  # a checkpoint at step 4: the record of steps 3, 4 has step 4 still
    assert journal.size < size
    journal.truncate(4)
    journal.append(record(9, 2, 3))
    journal.truncate(11)
    assert journal.size == 0
    journal.close()
    assert ReplayJournal(path, FIELDS).open() == []
    journal = ReplayJournal(path, FIELDS)
    journal.open()
    for rec in records:
        journal.append(rec)
    journal.truncate(5)
    journal.close()
    assert same(ReplayJournal(path, FIELDS).open(), records[2:])


def test_refuses_other_tasks_and_closed_journals(tmp_path):
    path = tmp_path / "j.bin"
    written(path)
    with pytest.raises(ValueError, match="transitions of 12 fields, this run has 13"):
        ReplayJournal(path, FIELDS + 1).open()
    assert ReplayJournal(path, FIELDS + 1).open(discard=True) == []  # a run that starts over
    journal = ReplayJournal(path, FIELDS)
    with pytest.raises(RuntimeError, match="not open"):
        journal.append(record(0, 1, 0))
    journal.open()
    with pytest.raises(ValueError, match="fields"):
        journal.append(JournalRecord(0, 1, 0, np.zeros((1, FIELDS + 1), np.float32)))
    journal.close()


def test_make_durable_fsyncs_the_records_and_the_folder_without_fsync_set(tmp_path, monkeypatch):
    """A light checkpoint relies on the journal's records: they go to the disk first, even with
    journal_fsync off (a power cut after a stop lost them, and with them the run)."""
    import opolo_ros.data.journal as journal_module

    journal = ReplayJournal(tmp_path / "j.bin", FIELDS)
    journal.open()
    journal.append(record(0, 1, 3))
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(journal_module.os, "fsync", lambda fd: (synced.append(os.fstat(fd).st_ino), real(fd)))
    journal.make_durable()
    journal.close()
    assert synced == [(tmp_path / "j.bin").stat().st_ino, tmp_path.stat().st_ino]


def test_a_full_disk_is_one_line_naming_the_journal(tmp_path, monkeypatch):
    """ENOSPC while appending was a bare '[Errno 28]' and a traceback in the learner's log (a
    review): one line now, the file and the free space named; the records before stay readable."""
    import errno

    from opolo_ros.data.journal import JournalWriteError

    path = tmp_path / "j.bin"
    journal = ReplayJournal(path, FIELDS)
    journal.open()
    journal.append(record(0, 3, 0))
    real_write = os.write

    def full(fd, data):
        real_write(fd, bytes(data[:7]))  # part of the record, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(JournalWriteError, match=rf"could not append to replay journal {path} \(No space "
                       r"left on device; \d+ MiB free on its disk\): the batch is not acknowledged"):
        journal.append(record(3, 2, 1))
    monkeypatch.undo()
    journal.close()
    again = ReplayJournal(path, FIELDS)
    assert same(again.open(), [record(0, 3, 0)]) and again.dropped == (7, 3)  # the torn start dropped
    # the rewrite of a truncation too: one line, its temporary file removed, the journal as it was
    again.append(record(3, 2, 1))
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(JournalWriteError, match=rf"could not rewrite replay journal {path} .*left as it was"):
        again.truncate(keep_from=3)  # (keeps the second record: a rewrite)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j.bin"]
    assert same(ReplayJournal(path, FIELDS).open(), [record(0, 3, 0), record(3, 2, 1)])
