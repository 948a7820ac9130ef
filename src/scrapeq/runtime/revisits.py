"""What a worker does for revisits (``revisit = on``): the conditional request a revisit
sends, and what its answer says of the content, for the settle item.

What the fetch saw is reported; what it means (changed or not, the page's rate, its next
visit) is decided by the settle script (``lua/includes/revisit.lua``), whose answer the
results line says (``changed``, ``not_modified``: :class:`~scrapeq.engine.lua.scripts.Settled`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Final

from scrapeq.engine.lua.scripts import Settlement
from scrapeq.engine.model.job import Job
from scrapeq.engine.model.request import Request
from scrapeq.runtime.follow import Content

#: Validators longer than this are not stored (the settle script refuses them).
MAX_VALIDATOR: Final = 100
_PRINTABLE: Final = re.compile(r"^[\x20-\x7e\x80-\xff]+$")


def plain_get(job: Job) -> bool:
    """Whether fetching the job is a GET of its URL alone: no request of its own, no exit,
    and no validators for :func:`conditional` to send (the worker's short path)."""
    return (
        job.request_text is None
        and job.exit is None
        and job.etag is None
        and job.last_modified is None
    )


def conditional(job: Job) -> Request | None:
    """The job's request with ``If-None-Match`` / ``If-Modified-Since`` from the validators
    its revisit carries; None when it carries none."""
    if job.etag is None and job.last_modified is None:
        return None
    base = job.request
    extra = []
    if job.etag is not None:
        extra.append(("If-None-Match", job.etag))
    if job.last_modified is not None:
        extra.append(("If-Modified-Since", job.last_modified))
    kept = [
        (n, v) for n, v in base.headers if n.lower() not in ("if-none-match", "if-modified-since")
    ]
    return Request(
        base.url, method=base.method, headers=kept + extra, body=base.body or None,
        cookies=base.cookies, meta=base.meta,
    )  # fmt: skip


def not_modified(job: Job, status: int) -> bool:
    """A 304 answering the job's conditional request."""
    return status == 304 and (job.etag is not None or job.last_modified is not None)


#: The request headers that make a GET conditional: a 304 answers only such a request.
CONDITIONS: Final = frozenset({"if-none-match", "if-modified-since"})


def sends_conditional(job: Job) -> bool:
    """Whether the job's request is conditional: a revisit's validators (:func:`conditional`),
    or an ``If-None-Match`` / ``If-Modified-Since`` of the job's own request."""
    if job.etag is not None or job.last_modified is not None:
        return True
    if job.request_text is None:  # a plain GET
        return False
    return any(name.lower() in CONDITIONS for name, _ in job.request.headers)


def signature(body: bytes) -> str:
    """The body's 64-bit content signature, 16 hex digits (BLAKE2b)."""
    return hashlib.blake2b(body, digest_size=8).hexdigest()


def _validator(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None or len(value.encode()) > MAX_VALIDATOR or not _PRINTABLE.fullmatch(value):
        return None
    return value


def observed(
    settlement: Settlement,
    headers: Mapping[str, str],
    body: bytes | None,
    content: Content | None = None,
) -> Settlement:
    """The done settlement with what the fetch saw: a 304 (``body`` None), or the content's
    signature (the hash of what the handler said stands for it, else of the body) and what
    the handler said of a change; the answer's validators (each at most 100 bytes)."""
    if settlement.outcome != "done":
        return settlement
    etag, lm = _validator(headers, "ETag"), _validator(headers, "Last-Modified")
    if body is None:
        return replace(settlement, not_modified=True, etag=etag, last_modified=lm)
    said = None if content is None else content.signature
    if isinstance(said, str):
        said = said.encode()
    changed = None if content is None else content.changed
    return replace(
        settlement, signature=signature(body if said is None else said), changed=changed,
        etag=etag, last_modified=lm,
    )  # fmt: skip
