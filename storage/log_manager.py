"""The partition logs of one broker: their directories, and the HW checkpoint file.

Each partition replica lives in ``<log dir>/<topic>-<partition>`` (Kafka's layout), one
segment log (:class:`raftka.storage.Log`) each. A new partition goes to the log dir
holding the fewest partitions. Opening a log recovers it (the segment log keeps the
longest valid prefix after a crash); closing it writes the clean-shutdown marker.

The high watermark is not in the segment log: each log dir has a
``replication-offset-checkpoint`` file (Kafka's format: a version line ``0``, a count
line, then ``topic partition offset`` lines), written atomically (temp file, fsync,
rename, fsync of the directory) every ``replica.high.watermark.checkpoint.interval.ms``
and at shutdown, and read at start-up so a restarted replica does not begin at HW 0.

The broker's log cleaner (:class:`~raftka.storage.cleaner.LogCleaner`, given to the
manager) keeps one ``cleaner-offset-checkpoint`` per log dir; deleting a partition drops
its entry there (``LogCleaner.forget``), so a topic recreated under the same name starts
with no stale first dirty offset.

A deleted partition's directory is renamed to ``<topic>-<partition>.<uuid>-delete``
(atomic, so a crash mid-delete leaves no half partition under the live name) and then
removed.

The bookkeeping (which log is open, in which dir) is the event loop's; the broker runs
the slow parts on its I/O workers (broker/io_workers.py): opening (recovering) a log
through :meth:`LogManager.place` / :meth:`LogManager.open_detached` /
:meth:`LogManager.adopt`, and HW checkpoint writes through
:meth:`LogManager.high_watermarks_by_dir` / :meth:`LogManager.write_high_watermarks`
(a lock keeps two writers of one checkpoint file apart). :meth:`LogManager.get_or_open`
and :meth:`LogManager.checkpoint_high_watermarks` do both halves in the caller's thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Final

from raftka.common.time import wall_clock_ms
from raftka.storage import Log, LogConfig
from raftka.storage.checkpoint import TMP_SUFFIX, fsync_dir
from raftka.storage.cleaner import LogCleaner
from raftka.storage.log import CLEAN_SHUTDOWN_FILE

__all__ = [
    "HW_CHECKPOINT_FILE",
    "PARTITIONS_MAX",
    "LogManager",
    "PartitionKey",
    "partition_dir_name",
    "read_hw_checkpoint",
    "write_hw_checkpoint",
]

log = logging.getLogger(__name__)

HW_CHECKPOINT_FILE: Final = "replication-offset-checkpoint"
_CHECKPOINT_VERSION: Final = 0
# Bound on the partitions one broker stores (a sanity bound on metadata we are handed).
PARTITIONS_MAX: Final = 100_000
_DIR_RE: Final = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
DELETE_SUFFIX: Final = "-delete"

#: A partition as the log manager keys it: (topic, partition). A plain tuple, equal to
#: and hashed like ``raftka.common.structs.TopicPartition`` of the same values.
PartitionKey = tuple[str, int]


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def write_hw_checkpoint(path: Path, offsets: Mapping[PartitionKey, int]) -> None:
    """Kafka's offset checkpoint format, written atomically."""
    lines = [str(_CHECKPOINT_VERSION), str(len(offsets))]
    lines += [
        f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())
    ]
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with tmp.open("w") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    fsync_dir(path.parent)


def read_hw_checkpoint(path: Path) -> dict[PartitionKey, int]:
    """The checkpointed offsets; {} when the file is missing or malformed (a HW of 0 is
    safe: it only delays consumers until the leader's next answer)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    lines = text.splitlines()
    try:
        if int(lines[0]) != _CHECKPOINT_VERSION:
            raise ValueError(f"version {lines[0]}")
        count = int(lines[1])
        out: dict[PartitionKey, int] = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.rsplit(" ", 2)
            out[(topic, int(partition))] = int(offset)
        if len(out) != count:
            raise ValueError(f"{len(out)} entries, header says {count}")
        return out
    except (ValueError, IndexError) as e:
        log.warning(
            "ignoring a malformed HW checkpoint",
            extra={"fields": {"path": str(path), "error": str(e)}},
        )
        return {}


class LogManager:
    """The open partition logs of this broker, by (topic, partition)."""

    def __init__(
        self,
        log_dirs: Iterable[Path],
        *,
        clock_ms: Callable[[], int] | None = None,
        cleaner: LogCleaner | None = None,
    ) -> None:
        self.log_dirs = tuple(Path(d) for d in log_dirs)
        self.cleaner = cleaner
        assert self.log_dirs, "at least one log dir"
        self._clock_ms = clock_ms or wall_clock_ms
        self._logs: dict[PartitionKey, Log] = {}
        self._dir_of: dict[PartitionKey, Path] = {}
        self._checkpointed: dict[PartitionKey, int] = {}
        # Two writers of one HW checkpoint file (a worker's timer, the loop's reopen)
        # would share its temp file.
        self._checkpoint_lock = threading.Lock()
        #: A partition directory without its clean-shutdown marker when the broker
        #: started: the previous run ended uncleanly, so records it had not fsynced may
        #: be gone (the controller then drops this broker from every ELR).
        self.unclean_shutdown = False
        for d in self.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
            for entry in d.iterdir():
                if entry.name.endswith(DELETE_SUFFIX) and entry.is_dir():
                    # A delete interrupted by a crash: finish it.
                    shutil.rmtree(entry, ignore_errors=True)
                    continue
                m = _DIR_RE.match(entry.name)
                if m and entry.is_dir():
                    self._dir_of[(m["topic"], int(m["partition"]))] = d
                    if not (entry / CLEAN_SHUTDOWN_FILE).exists():
                        self.unclean_shutdown = True
            self._checkpointed.update(read_hw_checkpoint(d / HW_CHECKPOINT_FILE))

    # ------------------------------------------------------------------ views

    def get(self, tp: PartitionKey) -> Log | None:
        return self._logs.get(tp)

    def stored(self) -> list[PartitionKey]:
        """Every partition with a directory on disk (open or not)."""
        return sorted(self._dir_of)

    def stored_by_dir(self) -> dict[Path, list[PartitionKey]]:
        """Every partition with a directory, by the log dir holding it (every log dir
        present, empty or not): what DescribeLogDirs reports."""
        by_dir: dict[Path, list[PartitionKey]] = {d: [] for d in self.log_dirs}
        for tp, parent in sorted(self._dir_of.items()):
            by_dir.setdefault(parent, []).append(tp)
        return by_dir

    def compacted(self) -> list[tuple[PartitionKey, Log]]:
        """The open logs whose cleanup.policy includes compact (the cleaner's work)."""
        return [(tp, lg) for tp, lg in sorted(self._logs.items()) if lg.config.compact]

    def checkpointed_high_watermark(self, tp: PartitionKey) -> int:
        return self._checkpointed.get(tp, 0)

    def __len__(self) -> int:
        return len(self._logs)

    # ------------------------------------------------------------ open / close

    def get_or_open(self, tp: PartitionKey, config: LogConfig) -> Log:
        """The partition's log, opened (and recovered) or created on first use."""
        existing = self._logs.get(tp)
        if existing is not None:
            return existing
        path = self.place(tp)
        return self.adopt(tp, self.open_detached(path, config))

    def place(self, tp: PartitionKey) -> Path:
        """The directory of ``tp``'s log: where it is stored, else a new one in the log
        dir holding the fewest partitions (reserved now, so partitions placed before
        they are opened spread over the dirs too)."""
        if len(self._logs) >= PARTITIONS_MAX:
            raise RuntimeError(f"more than PARTITIONS_MAX={PARTITIONS_MAX} partitions")
        parent = self._dir_of.get(tp)
        if parent is None:
            counts = {d: 0 for d in self.log_dirs}
            for d in self._dir_of.values():
                counts[d] = counts.get(d, 0) + 1
            parent = min(self.log_dirs, key=lambda d: (counts[d], str(d)))
            self._dir_of[tp] = parent
        return parent / partition_dir_name(*tp)

    def open_detached(self, path: Path, config: LogConfig) -> Log:
        """Open (recover) the log in ``path`` without registering it: the slow part of
        opening, safe on any thread (it touches only that directory)."""
        return Log.open(path, config, clock_ms=self._clock_ms)

    def adopt(self, tp: PartitionKey, opened: Log) -> Log:
        """Register a log :meth:`open_detached` opened at :meth:`place`'s path."""
        existing = self._logs.get(tp)
        if existing is not None:
            opened.close()
            return existing
        self._logs[tp] = opened
        return opened

    def close(self, tp: PartitionKey) -> None:
        opened = self._logs.pop(tp, None)
        if opened is not None:
            # Kept for the checkpoints written while it is closed (see write_high_watermarks).
            self._checkpointed[tp] = opened.high_watermark
            opened.close()

    def delete(self, tp: PartitionKey) -> None:
        """Close the partition's log and remove its directory."""
        opened = self._logs.pop(tp, None)
        if opened is not None:
            with contextlib.suppress(Exception):
                opened.close()
        parent = self._dir_of.pop(tp, None)
        self._checkpointed.pop(tp, None)
        if parent is None:
            return
        path = parent / partition_dir_name(*tp)
        if not path.exists():
            return
        doomed = parent / f"{path.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
        path.rename(doomed)
        fsync_dir(parent)
        shutil.rmtree(doomed, ignore_errors=True)
        if self.cleaner is not None:
            try:
                self.cleaner.forget(path)
            except OSError as e:
                # A stale entry is clamped to the log by the cleaner (first_dirty_offset),
                # so this costs at most an uncleaned range, never data.
                log.warning(
                    "dropping the cleaner checkpoint entry failed",
                    extra={"fields": {"partition": path.name, "error": str(e)}},
                )

    # -------------------------------------------------------------- checkpoints

    def checkpoint_high_watermarks(self) -> None:
        """Write each log dir's HW checkpoint from the open logs (and keep the
        checkpointed value of partitions stored but not open, so it is not lost)."""
        by_dir = self.high_watermarks_by_dir()
        self.write_high_watermarks(by_dir)
        for offsets in by_dir.values():
            self._checkpointed.update(offsets)

    def high_watermarks_by_dir(self) -> dict[Path, dict[PartitionKey, int]]:
        """What :meth:`checkpoint_high_watermarks` writes, read now (in memory)."""
        by_dir: dict[Path, dict[PartitionKey, int]] = {d: {} for d in self.log_dirs}
        for tp, parent in self._dir_of.items():
            opened = self._logs.get(tp)
            hw = opened.high_watermark if opened is not None else self._checkpointed.get(tp)
            if hw is not None:
                by_dir.setdefault(parent, {})[tp] = hw
        return by_dir

    def write_high_watermarks(self, by_dir: Mapping[Path, Mapping[PartitionKey, int]]) -> None:
        """Write :meth:`high_watermarks_by_dir`'s answer (fsyncs: any thread). The
        in-memory copy is not updated here (a worker must not race the loop's deletes):
        an open log's HW is read again at every checkpoint and recorded when it closes."""
        with self._checkpoint_lock:
            for parent, offsets in by_dir.items():
                write_hw_checkpoint(parent / HW_CHECKPOINT_FILE, offsets)

    def close_all(self) -> None:
        """Checkpoint the HWs, then close every log cleanly (clean-shutdown markers)."""
        try:
            self.checkpoint_high_watermarks()
        finally:
            for tp in list(self._logs):
                try:
                    self.close(tp)
                except Exception:
                    log.exception(
                        "closing a log failed", extra={"fields": {"partition": f"{tp[0]}-{tp[1]}"}}
                    )
