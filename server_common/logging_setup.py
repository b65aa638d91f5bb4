"""Process-wide structured logging: one JSON object per line on stderr.

Theory of operation
-------------------
Every raftka server process (controller, broker, combined) calls
:func:`configure_logging` once at start-up, before anything logs. It replaces the root
logger's handlers with one stderr handler whose :class:`JsonLogFormatter` writes one
JSON object per record: time (ISO 8601, UTC, milliseconds), level, logger, message,
the record's structured ``fields`` (``log.info("...", extra={"fields": {...}})``) and
the exception text when there is one. Nothing here knows about metadata, brokers or
Raft: it is process configuration, beside ``process_config``.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

__all__ = ["JsonLogFormatter", "configure_logging"]


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: time (ISO 8601, UTC), level, logger, message, fields
    (``extra={"fields": {...}}``), and the exception text when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields:
            out["fields"] = fields
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def configure_logging(level: str = "INFO") -> None:
    """Send every log record to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLogFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # aiohttp's access log is one line per request: too chatty at INFO.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
