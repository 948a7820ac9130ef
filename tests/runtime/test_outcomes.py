"""outcomes.timed: the settlement with the fetch's latency, copied field by field (issue 40)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from scrapeq.engine.lua.args import Settlement
from scrapeq.engine.queue import Queue
from scrapeq.runtime.classify import Classification, Outcome
from scrapeq.runtime.outcomes import latency, timed


def _every_field_set() -> Settlement:
    """A settlement whose every field is away from its default."""
    return Settlement(
        "j1", 7, "retry", domain_failed=True, delay_ms=5, backoff=True, retry_after_ms=9,
        kind="http_503", message="m", reason="r", shutdown=True, latency_ms=1, overload=False,
        exit_result="ok", bytes_in=600, jar={"set": [], "del": []}, not_modified=True,
        changed=False, signature="0123456789abcdef", etag='"e"', last_modified="lm",
        line='{"id":"j1"}',
    )  # fmt: skip


def test_timed_is_replace_of_the_latency_and_overload_alone() -> None:
    """Every field of the settlement is kept but the two timed() sets, as
    ``dataclasses.replace`` would (every field goes through ``__init__``)."""
    assert all(f.init for f in dataclasses.fields(Settlement))
    settlement = _every_field_set()
    for reason, overload in (("http_503", True), ("http_404", False)):
        verdict = Classification(Outcome.RETRY, reason, True)
        got = timed(settlement, verdict, 0.2504)
        assert got == dataclasses.replace(settlement, latency_ms=250, overload=overload)
        assert got.jar == settlement.jar and got.line == settlement.line


def test_timed_leaves_ours_and_releases_unchanged() -> None:
    settlement = _every_field_set()
    ours = Classification(Outcome.OURS, "proxy_down", False)
    assert timed(settlement, ours, 1.0) is settlement
    release = dataclasses.replace(settlement, outcome="release")
    ok = Classification(Outcome.OK, "ok", False)
    assert timed(release, ok, 1.0) is release
    assert timed(dataclasses.replace(settlement, outcome="done"), ok, -1.0).latency_ms == 0


def test_done_built_with_its_latency_is_the_done_timed(
    make_queue: Callable[..., Queue],
) -> None:
    """A worker's done job is one settlement, built with the fetch's latency and overload
    flag (``queue.done(latency_ms=..., overload=...)``, :func:`latency`): the same settlement
    as the done job copied by :func:`timed`, for a slow call and a plain answer."""
    queue = make_queue()
    queue.enqueue("http://example.com/a")
    (job,) = queue.claim(1).jobs
    for verdict in (
        Classification(Outcome.OK, "ok", False),
        Classification(Outcome.OK, "slow_call", True),
        Classification(Outcome.OK, "http_503", False),
    ):  # fmt: skip (overload)
        for seconds in (0.0, 0.0004, 0.2506, 3.0):
            before = timed(queue.done(job, domain_failed=verdict.counts_against_domain),
                           verdict, seconds)  # fmt: skip
            latency_ms, overload = latency(verdict, seconds)
            once = queue.done(job, domain_failed=verdict.counts_against_domain,
                              latency_ms=latency_ms, overload=overload)  # fmt: skip
            assert once == before
