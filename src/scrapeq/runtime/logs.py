"""Log lines: the text and the JSON formats.

Every line is one record of a logger under ``scrapeq``. Lines about a job, a domain or an
event carry structured fields as ``extra=`` attributes (``domain``, ``job_id``, ``kind``,
``delay``...): the text format shows them in the message already (``job=… domain=…``), the
JSON format (``log_format = "json"``, for log shippers) writes one object per line::

    {"time": "2026-03-01T12:00:00.123+00:00", "level": "INFO", "logger": "scrapeq.worker",
     "message": "dead letter job=b1f domain=shop-43.example.com reason=http_404",
     "job_id": "b1f", "domain": "shop-43.example.com", "kind": "http_404"}

``time`` is ISO 8601 in UTC with milliseconds; a traceback, when the line has one, is in
``exc``.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

__all__ = ["LOG_FORMATS", "JsonFormatter", "formatter"]

#: The values of the ``log_format`` setting.
LOG_FORMATS = ("text", "json")

#: Attributes every LogRecord has (whatever the Python version): not structured fields.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the line's own fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_") and key not in doc:
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        # default=str: a field that is not JSON (a Path, an exception) is written as text, so
        # a log line never fails; no ASCII escaping keeps IDN domains readable.
        return json.dumps(doc, default=str, ensure_ascii=False)


def formatter(log_format: str) -> logging.Formatter:
    """The formatter of ``log_format``: ``text`` (one readable line) or ``json``.

    Raises:
        ValueError: not one of :data:`LOG_FORMATS`.
    """
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s", "%Y-%m-%dT%H:%M:%S"
        )
    raise ValueError(f"unknown log format {log_format!r}: use one of {', '.join(LOG_FORMATS)}")
