"""Results records as a sink takes them (the results JSONL format's fields)."""

from __future__ import annotations

from typing import Any


def record(job_id: str, **changes: Any) -> dict[str, Any]:
    """A done record of job ``job_id`` on ``x.test``, with ``changes`` applied."""
    fields = {
        "id": job_id, "url": f"http://x.test/{job_id}", "final_url": None, "domain": "x.test",
        "lane": "normal", "outcome": "done", "status": 200, "attempts": 1, "elapsed_ms": 1.5,
        "bytes": 10, "finished_at": "2026-01-01T00:00:00+00:00", "error": None,
        "result": {"title": "t", "tags": ["a"]}, "depth": 0, "parent": None, "parent_url": None,
    }  # fmt: skip
    fields.update(changes)
    return fields
