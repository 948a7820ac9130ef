"""Jobs are stored compact (issue 13): short field names, defaults and the id left out, the
domain left out when it is the URL's host; a job stored in the full form (before the change,
or claimed) reads the same everywhere."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapeq.engine.model import job as job_module
from scrapeq.engine.model.job import ZERO_COUNTERS, Job, expand_stored, id_ms, url_host
from scrapeq.engine.queue import Queue

MakeQueue = Callable[..., Queue]
URL = "https://shop-1.example.com/item/1"


def _full_form(q: Queue, client: redis.Redis, job_id: str) -> dict[str, Any]:
    """Job ``job_id`` as stored, expanded to the full form (every field)."""
    return expand_stored(json.loads(client.get(q.keys.job(job_id)) or "null"), job_id)


def _enqueued_full_form(q: Queue, client: redis.Redis) -> tuple[str, dict[str, Any]]:
    """A job of ``URL`` enqueued: its id, and its stored text expanded to the full form."""
    job_id = q.enqueue(URL).id
    return job_id, _full_form(q, client, job_id)


def test_a_queued_job_is_stored_compact(make_queue: MakeQueue, redis_client: redis.Redis) -> None:
    q = make_queue()
    job_id = q.enqueue(URL).id
    text = redis_client.get(q.keys.job(job_id))
    assert isinstance(text, str)
    stored = json.loads(text)
    # the URL verbatim ('/' not escaped); the creation time only when it is not the time
    # the id was issued; the budget left out (the default, 5)
    assert set(stored) - {"c"} == {"u"}, stored
    assert f'"{URL}"' in text
    assert len(text) < len(URL) + 40

    full = expand_stored(stored, job_id)
    assert full["id"] == job_id
    assert full["domain"] == "shop-1.example.com"
    assert (full["lane"], full["attempts"], full["token"]) == ("normal", 0, 0)
    assert full["eligible"] == full["created"] == id_ms(job_id) + stored.get("c", 0)
    assert abs(full["created"] - int(redis_client.time()[0]) * 1000) < 5000


def test_fields_that_differ_from_the_defaults_are_kept(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue()
    job_id = q.enqueue(
        "https://user@shop-2.example.com:8443/a",
        lane="bulk",
        delay=60,
        payload={"k": 1},
        max_attempts=2,
    ).id
    stored = json.loads(redis_client.get(q.keys.job(job_id)) or "null")
    assert (stored["l"], stored["m"]) == ("bulk", 2)
    assert stored["e"] == 60_000  # ms after created
    job = Job.from_json(json.dumps(stored), job_id)
    assert (job.id, job.lane, job.payload, job.max_attempts) == (job_id, "bulk", {"k": 1}, 2)
    assert job.eligible_ms == job.created_ms + 60_000
    assert job.domain == url_host(job.url) == "shop-2.example.com:8443"


def test_a_claimed_job_answers_the_full_form(make_queue: MakeQueue) -> None:
    q = make_queue()
    job_id = q.enqueue(URL, payload=[1, "/x"]).id
    (job,) = q.claim(1).jobs
    assert (job.id, job.url, job.domain, job.lane) == (job_id, URL, "shop-1.example.com", "normal")
    assert (job.attempts, job.payload) == (1, [1, "/x"])
    assert q.retry(job, delay=0) == "retried"
    info = q.job_info(job_id)
    assert info is not None
    assert (info.job.url, info.job.attempts, info.job.last_error is not None) == (URL, 1, True)


def test_a_job_stored_in_the_full_form_still_reads(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    """Stored data written before the compact form: every script reads both."""
    q = make_queue()
    job_id, full = _enqueued_full_form(q, redis_client)
    redis_client.set(q.keys.job(job_id), json.dumps(full))

    info = q.job_info(job_id)
    assert info is not None and info.state == "ready" and info.job.url == URL
    (job,) = q.claim(1).jobs
    assert (job.id, job.url, job.attempts) == (job_id, URL, 1)
    assert q.fail(job, "http_404") == "dead"
    (dead,) = q.dead_letters()
    assert (dead.id, dead.url, dead.dead_reason) == (job_id, URL, "http_404")
    assert q.audit().ok


def test_a_claimed_job_leaves_its_zero_counters_out(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    """A claim stores (and answers) the full form without the counters at 0 (Python's and
    Lua's ZERO_COUNTERS, one list); every reader takes them as 0, and a counter that is not
    0 is written."""
    lua = (Path(job_module.__file__).parents[1] / "lua" / "includes" / "codec.lua").read_text()
    found = re.search(r"local ZERO_COUNTERS = \{([^}]*)\}", lua)
    assert found is not None
    assert tuple(re.findall(r"'(\w+)'", found.group(1))) == ZERO_COUNTERS
    q = make_queue()
    job_id = q.enqueue(URL).id
    (job,) = q.claim(1).jobs
    stored = json.loads(redis_client.get(q.keys.job(job_id)) or "null")
    assert not set(ZERO_COUNTERS) & set(stored), stored
    assert (stored["token"], stored["attempts"], stored["max_attempts"]) == (job.token, 1, 5)
    full = expand_stored(stored, job_id)
    assert {name: full[name] for name in ZERO_COUNTERS} == dict.fromkeys(ZERO_COUNTERS, 0)
    assert (job.throttles, job.releases, job.depth, job.unused) == (0, 0, 0, 0)
    info = q.job_info(job_id)
    assert info is not None and info.state == "inflight" and info.job.token == job.token
    assert q.audit().problems == []
    # a throttle counts: the next claim writes it
    assert q.throttle(job, 0) == "throttled"
    (again,) = q.claim(1).jobs
    stored = json.loads(redis_client.get(q.keys.job(job_id)) or "null")
    assert (stored["throttles"], again.throttles) == (1, 1)
    assert q.settle_many([q.done(again)]) == ["done"]


def _claimed_as_cjson(queued: dict[str, object], job: Job, lease_ms: int) -> dict[str, object]:
    """What cjson.encode wrote for a claimed job before claim-1.lua's claimed_text: the
    queued job in the full form, its lease's fields set, its counters at 0 left out."""
    want = dict(queued)
    want.update(attempts=job.attempts, token=job.token, claimed=job.claimed_ms, lm=lease_ms)
    return {k: v for k, v in want.items() if not (k in ZERO_COUNTERS and v == 0)}


def test_a_claimed_jobs_text_holds_what_cjson_wrote(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    """claim-1.lua writes a claimed job's seven numbers itself (claimed_text) and the rest
    through cjson: the text holds each field once, with the values cjson.encode(job) wrote
    (eligible apart from created, a lane, a payload with '/' and quotes, a budget)."""
    q = make_queue(lease=45)
    ids = [
        q.enqueue(URL).id,
        q.enqueue("https://b.example/x", lane="bulk", payload={"s": 'a/"b"'}, max_attempts=2).id,
        q.enqueue("https://c.example/", delay=0.005).id,
    ]
    texts = {i: redis_client.get(q.keys.job(i)) or "" for i in ids}
    time.sleep(0.05)
    jobs = {j.id: j for j in q.claim(3).jobs}
    assert set(jobs) == set(ids)
    for job_id in ids:
        stored = redis_client.get(q.keys.job(job_id)) or ""
        queued = expand_stored(json.loads(texts[job_id]), job_id)
        assert json.loads(stored) == _claimed_as_cjson(queued, jobs[job_id], 45_000), stored
        for name in ("token", "created", "eligible", "attempts", "max_attempts", "claimed"):
            assert stored.count(f'"{name}":') == 1, (name, stored)
        assert Job.from_json(stored, job_id) == jobs[job_id]
    assert jobs[ids[2]].eligible_ms > jobs[ids[2]].created_ms
    assert q.settle_many([q.done(j) for j in jobs.values()]) == ["done"] * 3
    assert q.audit().ok


def test_a_claimed_job_with_a_fraction_is_written_by_cjson(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    """A number claimed_text does not write (here a created time with a fraction, stored in
    the full form by hand) leaves the whole text to cjson, as before."""
    q = make_queue()
    job_id, full = _enqueued_full_form(q, redis_client)
    full["created"] = full["created"] + 0.5
    redis_client.set(q.keys.job(job_id), json.dumps(full))
    (job,) = q.claim(1).jobs
    stored = json.loads(redis_client.get(q.keys.job(job_id)) or "null")
    assert stored["created"] == full["created"] and job.created_ms == full["created"]
    assert (stored["attempts"], stored["token"]) == (1, job.token)
    assert q.settle_many([q.done(job)]) == ["done"]


_WRONG_TYPES = [
    *((name, value) for name in ("url", "domain", "lane") for value in (5, None, [1], True)),
    *(
        (name, value)
        for name in ("attempts", "max_attempts", "off", "eligible")
        for value in ("5", "x", None, [1], {"a": 1}, False)
    ),
]


@pytest.mark.parametrize(("name", "value"), _WRONG_TYPES)
def test_a_job_field_of_another_type_is_corrupt(
    make_queue: MakeQueue, redis_client: redis.Redis, name: str, value: object
) -> None:
    """load_job (codec.lua) tells a field every script reads of the wrong type without
    type(): a string where a number belongs (even a numeric one), a number where a string
    belongs, null, a list, an object or a boolean all make the job corrupt; the claim
    dead-letters it and claims the job behind it."""
    q = make_queue(domain_concurrency=10)
    bad, good = q.enqueue(URL).id, q.enqueue(URL + "?2").id
    full = _full_form(q, redis_client, bad)
    full[name] = value
    redis_client.set(q.keys.job(bad), json.dumps(full))
    assert [j.id for j in q.claim(2).jobs] == [good]
    (dead,) = q.dead_letters()
    assert (dead.id, dead.dead_reason) == (bad, "corrupt_payload")


def test_a_job_with_numbers_written_as_floats_is_read(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    """The other side of the check above: numbers with a fraction or an exponent are numbers."""
    q = make_queue()
    job_id, full = _enqueued_full_form(q, redis_client)
    text = json.dumps(full).replace('"max_attempts": 5', '"max_attempts": 5e0')
    text = text.replace('"off": 0', '"off": 0.0')
    assert "5e0" in text and "0.0" in text
    redis_client.set(q.keys.job(job_id), text)
    (job,) = q.claim(1).jobs
    assert (job.id, job.max_attempts, job.attempts) == (job_id, 5, 1)
