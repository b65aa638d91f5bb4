"""Kafka's checkpoint text files, written atomically.

Format (as Kafka's CheckpointFile)::

    <version>
    <count>
    <entry>            count lines, fields separated by one space

Writes go to ``<name>.tmp``, are fsynced, renamed over the target, and the directory
is fsynced, so a crash leaves either the old file or the new one, never a mix.
Reading returns None for a missing, truncated or malformed file: callers fall back to
a safe default (a full recovery scan), they never fail to open a log over it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

TMP_SUFFIX = ".tmp"


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename or unlink in it is durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_durably(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably: write a temporary file
    beside it, fsync it, rename it over ``path``, fsync the directory. A crash leaves
    either the old file or the new one, never a torn one (a stray temporary file at
    most, which readers ignore and recovery removes)."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_checkpoint(path: Path, version: int, entries: Sequence[Sequence[int | str]]) -> None:
    """Atomically replace ``path`` with a checkpoint holding ``entries``."""
    lines = [str(version), str(len(entries))]
    lines.extend(" ".join(str(field) for field in entry) for entry in entries)
    write_file_durably(path, ("\n".join(lines) + "\n").encode("ascii"))


def read_checkpoint(path: Path, version: int, fields: int) -> list[list[int]] | None:
    """Entries of integer fields, or None if the file is absent or not well formed."""
    lines = read_checkpoint_lines(path, version, fields)
    if lines is None:
        return None
    try:
        return [[int(x) for x in line] for line in lines]
    except ValueError:
        return None


def read_checkpoint_lines(path: Path, version: int, fields: int) -> list[list[str]] | None:
    """Entries as their space-separated text fields (for files whose entries name a
    topic, such as ``cleaner-offset-checkpoint``), or None if the file is absent or
    not well formed."""
    try:
        text = path.read_text("ascii")
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    lines = text.split("\n")
    if len(lines) < 2 or lines[-1] != "":
        return None  # a torn write would lack the final newline
    try:
        if int(lines[0]) != version:
            return None
        count = int(lines[1])
    except ValueError:
        return None
    body = lines[2:-1]
    if count != len(body):
        return None
    entries = [line.split(" ") for line in body]
    if any(len(e) != fields or "" in e for e in entries):
        return None
    return entries
