"""Unique modes and the seen-set (issue 11): pending fingerprints held by every job once the
queue asked for uniqueness, the exact and Bloom seen-sets, recrawl periods, replay.

Runs against a real Redis; time is moved with ``Queue.testing_clock_offset_ms``, never slept.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapeq import Queue, Settings
from scrapeq.engine.config.settings import load_settings
from scrapeq.engine.lua.scripts import ScriptConfig, expand_includes, map_error
from scrapeq.engine.model.job import Job, expand_stored
from scrapeq.engine.model.seen import (
    BLOOM_CHUNK_BYTES,
    DEFAULT_SEEN_BUCKETS,
    SeenLayout,
    bloom_geometry,
    bloom_positions,
    exact_bucket,
)
from scrapeq.engine.model.urls import fingerprint, fingerprint64
from scrapeq.engine.queue import AsyncQueue
from scrapeq.errors import ConfigError
from scrapeq.interfaces.cli import main

QueueFactory = Callable[..., Queue]

SEC = 1000
DAY = 86_400.0


def url(shop: int, page: int = 1) -> str:
    return f"https://shop-{shop}.example.com/p/{page}"


#: A test's time 0 on the server's clock: a whole number of every slice length here (25 s, 100
#: s) plus 1 s, so a test's times fall in the same slices whatever the wall clock reads (a
#: time 1 ms before a slice's end moved into the next one by the calls in between).
ORIGIN_MS = 2_000_000_000_000 + SEC


def at(q: Queue, seconds: float) -> None:
    """Set ``q``'s clock to ``seconds`` after :data:`ORIGIN_MS` (the wall clock still runs on
    from there, a few milliseconds a call)."""
    real = int(q._drive(q._op_now_ms())) - q.testing_clock_offset_ms
    q.testing_clock_offset_ms = ORIGIN_MS + round(seconds * SEC) - real


def claim_one(q: Queue) -> Job:
    (job,) = q.claim().jobs
    return job


def bucket(fp: int) -> int:
    """The bucket of a fingerprint in a queue of the default seen_capacity."""
    return exact_bucket(fp, DEFAULT_SEEN_BUCKETS)


def statuses(results: list[Any]) -> list[str]:
    return [r.status for r in results]


# --- settings -------------------------------------------------------------------------------


def test_unique_setting_modes_from_env_toml_and_values(tmp_path: Path) -> None:
    assert Settings().unique == "off"
    assert load_settings(environ={"SCRAPEQ_UNIQUE": "seen"}).unique == "seen"
    assert load_settings(environ={"SCRAPEQ_UNIQUE": " Pending "}).unique == "pending"
    assert load_settings(environ={"SCRAPEQ_UNIQUE": "true"}).unique == "pending"
    assert load_settings(environ={"SCRAPEQ_UNIQUE": "no"}).unique == "off"
    toml = tmp_path / "scrapeq.toml"
    toml.write_text('unique = "seen"\nrecrawl_after = 86400\n', encoding="utf-8")
    s = load_settings(config_file=toml, environ={})
    assert (s.unique, s.recrawl_after) == ("seen", 86400.0)
    toml.write_text("unique = true\n", encoding="utf-8")
    assert load_settings(config_file=toml, environ={}).unique == "pending"
    assert Settings(unique=True).unique == "pending"
    assert Settings(unique=False).unique == "off"
    with pytest.raises(ConfigError, match=r"'unique'.*off, pending or seen"):
        Settings(unique="always")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'unique'"):
        load_settings(environ={"SCRAPEQ_UNIQUE": "maybe"})


def test_recrawl_and_filter_settings_are_checked(make_queue: QueueFactory) -> None:
    s = Settings()
    assert (s.recrawl_after, s.seen_filter, s.seen_capacity, s.seen_error_rate) == (
        None,
        "exact",
        10_000_000,
        0.001,
    )
    assert load_settings(environ={"SCRAPEQ_RECRAWL_AFTER": ""}).recrawl_after is None
    assert load_settings(environ={"SCRAPEQ_RECRAWL_AFTER": "none"}).recrawl_after is None
    assert load_settings(environ={"SCRAPEQ_RECRAWL_AFTER": "3600"}).recrawl_after == 3600.0
    with pytest.raises(ConfigError, match=r"'recrawl_after'.*> 0"):
        Settings(recrawl_after=0)
    with pytest.raises(ConfigError, match=r"'seen_filter'.*exact or bloom"):
        Settings(seen_filter="cuckoo")
    with pytest.raises(ConfigError, match="'seen_error_rate'"):
        Settings(seen_error_rate=0.0)
    with pytest.raises(ConfigError, match=r"'recrawl_after'.*cannot forget"):
        Settings(seen_filter="bloom", recrawl_after=60)
    with pytest.raises(ConfigError, match=r"'seen_capacity'.*512 MiB"):
        Settings(seen_filter="bloom", seen_capacity=1_000_000_000)
    with pytest.raises(ConfigError, match="'unique'"):
        make_queue().prepare(url(1), unique="sometimes")


# --- the client's side: fingerprints, buckets, Bloom geometry --------------------------------


def test_fingerprint64_is_the_fingerprint_as_a_signed_integer() -> None:
    for u in (url(1), url(2, 99), "HTTP://Shop-1.Example.com:443/p/1#x", "https://a.example/"):
        fp = fingerprint64(u)
        assert -(2**63) <= fp < 2**63
        assert fp == int.from_bytes(bytes.fromhex(fingerprint(u)), "big", signed=True)
    assert fingerprint64("https://shop-1.example.com:443/p/1#x") == fingerprint64(
        "https://SHOP-1.example.com/p/1"
    )


def test_bloom_geometry_and_positions() -> None:
    bits, hashes = bloom_geometry(10_000_000, 1e-3)
    assert bits == math.ceil(10_000_000 * math.log(1000) / math.log(2) ** 2)
    assert hashes == 10
    assert bits / 10_000_000 / 8 < 1.8  # bytes a URL at capacity: under the 2-byte bar
    positions = bloom_positions(fingerprint64(url(1)), bits, hashes)
    assert len(positions) == hashes == len(set(positions))
    assert all(0 <= p < bits for p in positions)
    assert positions == bloom_positions(fingerprint64(url(1)), bits, hashes)
    layout = SeenLayout.from_settings(Settings(seen_filter="bloom", seen_capacity=1000))
    assert layout.stamp == f"bloom/m={layout.bits}/k={layout.hashes}/chunk={layout.bits}"
    big = SeenLayout.from_settings(Settings(seen_filter="bloom"))  # 10 million URLs
    assert big.chunk_bits == BLOOM_CHUNK_BYTES * 8 and big.bits % big.chunk_bits == 0
    assert 0 <= big.bits - bloom_geometry(10_000_000, 1e-3)[0] < big.chunk_bits
    assert (big.bits / 8 + 16 * big.bits / big.chunk_bits) / 10_000_000 < 1.82
    exact = SeenLayout.from_settings(Settings(recrawl_after=100))
    assert (exact.slice_ms, exact.stamp) == (25_000, "exact/slice_ms=25000")


def test_exact_argument_passes_the_fingerprint_as_a_decimal_string() -> None:
    fp = -(2**63) + 12345  # far beyond what a double (or cjson's 14 digits) keeps
    arg = SeenLayout().arg(fp)
    assert arg == {"b": 12345, "f": str(fp)}  # its low 32 bits: the script picks the bucket
    assert SeenLayout().arg(-1)["b"] == 2**32 - 1
    assert bucket(fp) == 12345 & 0xFFFF
    assert exact_bucket(-1, DEFAULT_SEEN_BUCKETS) == DEFAULT_SEEN_BUCKETS - 1


# --- pending: every job holds its free fingerprint once the queue asked for uniqueness ----------


def test_pending_holds_against_jobs_enqueued_without_uniqueness(make_queue: QueueFactory) -> None:
    q = make_queue()
    q.enqueue(url(9), unique=True)  # the queue has had a unique enqueue
    plain = q.enqueue(url(1))
    assert plain.status == "added"

    dup = q.enqueue(url(1), unique=True)
    assert (dup.status, dup.id, dup.added) == ("duplicate", plain.id, False)
    also_plain = q.enqueue(url(1))  # a job without uniqueness is never skipped
    assert also_plain.status == "added" and also_plain.id != plain.id

    for job in q.claim(2).jobs:
        if job.id == plain.id:
            q.ack(job)
    again = q.enqueue(url(1), unique=True)  # the holder is done: its fingerprint is free
    assert again.status == "added"


def test_a_plain_job_releases_its_fingerprint_when_it_dies(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue()
    q.enqueue(url(9), unique="pending")
    plain = q.enqueue(url(1))
    assert redis_client.hget(q.keys.unique, fingerprint(url(1))) == plain.id
    job = next(j for j in q.claim(2).jobs if j.id == plain.id)
    assert q.fail(job, "http_404") == "dead"
    assert redis_client.hget(q.keys.unique, fingerprint(url(1))) is None
    assert q.enqueue(url(1), unique=True).status == "added"


def test_before_any_unique_enqueue_plain_jobs_hold_nothing(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    """The documented limit: a queue that never asked for uniqueness pays nothing for it, so
    jobs enqueued before its first unique enqueue hold no fingerprint."""
    q = make_queue()
    early = q.enqueue(url(1))
    assert redis_client.hlen(q.keys.unique) == 0
    assert "fp" not in expand_stored(
        json.loads(redis_client.get(q.keys.job(early.id)) or "{}"), early.id
    )
    assert redis_client.hget(q.keys.meta, "uq") is None
    assert q.enqueue(url(1), unique=True).status == "added"
    assert redis_client.hget(q.keys.meta, "uq") == "1"


def test_a_client_that_had_not_heard_of_the_flag_learns_it(make_queue: QueueFactory) -> None:
    plain_client, unique_client = make_queue(), make_queue()
    plain_client.enqueue(url(8))  # answers: the queue never had a unique enqueue
    unique_client.enqueue(url(9), unique=True)
    late = plain_client.enqueue(url(1))  # sent without its fingerprint: one call behind
    assert unique_client.enqueue(url(1), unique=True).status == "added"
    plain_client.enqueue(url(2))  # this one carries it
    assert unique_client.enqueue(url(2), unique=True).status == "duplicate"
    assert late.status == "added"


def test_unique_true_and_setting_default(make_queue: QueueFactory) -> None:
    q = make_queue(unique="pending")
    first = q.enqueue(url(1))
    assert q.enqueue(url(1)).status == "duplicate"
    assert q.enqueue(url(1), unique=False).status == "added"
    assert q.enqueue(url(1), unique=True).id == first.id


# --- seen: a URL once enqueued is never enqueued again ------------------------------------------


def test_seen_never_re_enqueues_after_done_dead_or_purged(make_queue: QueueFactory) -> None:
    q = make_queue(unique="seen")
    ids = [q.enqueue(url(i)).id for i in range(3)]
    assert q.enqueue(url(0)).status == "duplicate"  # pending: the holder's id is answered
    jobs = {j.id: j for j in q.claim(3).jobs}
    q.ack(jobs[ids[0]])
    q.fail(jobs[ids[1]], "http_404")
    q.fail(jobs[ids[2]], "http_410")
    assert q.purge(domain="shop-2.example.com") == 1

    again = q.enqueue_many([url(0), url(1), url(2), url(3)])
    assert statuses(again) == ["seen", "seen", "seen", "added"]
    assert [r.added for r in again] == [False, False, False, True]
    assert again[0].id == ""
    at(q, 10 * 365 * DAY)
    assert q.enqueue(url(0)).status == "seen", "forever means forever"
    counts = q.status()["counts"]
    assert counts["enqueued"] == 4


def test_seen_in_one_batch_and_across_modes(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue()
    first = q.enqueue_many([url(1), url(1), url(2)], unique="seen")
    assert statuses(first) == ["added", "duplicate", "added"]
    assert first[1].id == first[0].id
    # a URL pending from an enqueue without "seen" goes into the seen-set when asked with it
    plain = q.enqueue(url(3))
    assert q.enqueue(url(3), unique="seen").status == "duplicate"
    q.ack(next(j for j in q.claim(3).jobs if j.id == plain.id))
    assert q.enqueue(url(3), unique="seen").status == "seen"
    # enqueues without "seen" neither consult nor fill the seen-set
    assert q.enqueue(url(4), unique="pending").status == "added"
    assert q.enqueue(url(4)).status == "added"
    fp4 = fingerprint64(url(4))
    assert not redis_client.sismember(q.keys.seen(bucket(fp4)), str(fp4))


def test_exact_buckets_are_intsets_of_the_fingerprints(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(unique="seen")
    urls = [url(i % 50, i) for i in range(3000)]
    assert all(r.added for r in q.enqueue_many(urls))
    buckets: dict[int, set[str]] = {}
    for u in urls:
        fp = fingerprint64(u)
        buckets.setdefault(bucket(fp), set()).add(str(fp))
    for b, members in list(buckets.items())[:200]:
        key = q.keys.seen(b)
        assert redis_client.object("encoding", key) == "intset"
        assert redis_client.smembers(key) == members
    assert redis_client.hget(q.keys.meta, "seen") == "exact"
    assert statuses(q.enqueue_many(urls[:5])) == ["duplicate"] * 5


def test_a_client_with_another_layout_is_refused_before_writing(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    make_queue(unique="seen").enqueue(url(1))
    other = make_queue(unique="seen", recrawl_after=3600)
    with pytest.raises(ConfigError, match=r"built as exact.*exact/slice_ms=900000"):
        other.enqueue_many([url(5), url(6)])
    assert other.status()["counts"]["enqueued"] == 1
    assert other.enqueue(url(5), unique="pending").status == "added"  # no seen-set involved
    bloom = make_queue(unique="seen", seen_filter="bloom", seen_capacity=1000)
    with pytest.raises(ConfigError, match="'seen_filter'"):
        bloom.enqueue(url(7))


def test_seen_add_raises_when_its_caller_did_not_check_the_layout(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    """The contract another script (settle's follow-ups) relies on: seen_add itself refuses
    a layout the queue's seen-set was not built with."""
    make_queue(unique="seen").enqueue(url(1))
    settings = Settings(unique="seen", recrawl_after=60)
    probe = redis_client.register_script(
        expand_includes("--@include common\n--@include seen\nreturn seen_add(ARG.seen) and 1\n")
    )
    config = ScriptConfig.from_settings(settings).to_json()
    arg = json.dumps({"seen": SeenLayout.from_settings(settings).arg(fingerprint64(url(2)))})
    with pytest.raises(redis.ResponseError) as raised:
        probe(keys=[make_queue().keys.prefix], args=[0, config, arg])
    error = map_error(str(raised.value))
    assert isinstance(error, ConfigError)
    assert "built as exact and these settings make exact/slice_ms=15000:" in str(error)
    good = ScriptConfig.from_settings(Settings(unique="seen")).to_json()
    assert probe(keys=[make_queue().keys.prefix], args=[0, good, arg]) == 1
    assert probe(keys=[make_queue().keys.prefix], args=[0, good, arg]) is None  # seen: false


async def test_the_async_queue_refuses_seen_urls(
    make_async_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_async_queue(unique="seen")
    first = await q.enqueue(url(1))
    (job,) = (await q.claim()).jobs
    await q.ack(job)
    assert first.status == "added"
    assert (await q.enqueue(url(1))).status == "seen"


# --- recrawl_after: time-sliced seen-sets ---------------------------------------------------------


def test_recrawl_after_lets_a_url_in_again_after_the_period(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    period = 100.0  # slices of 25 s: a URL comes back after 100 to 125 s
    q = make_queue(unique="seen", recrawl_after=period)
    at(q, 0)
    assert q.enqueue(url(1)).status == "added"
    q.ack(claim_one(q))
    at(q, period - 0.001)
    assert q.enqueue(url(1)).status == "seen"  # refused: does not extend the window
    at(q, period * 1.25 + 0.001)
    back = q.enqueue(url(1))
    assert back.status == "added"
    q.ack(claim_one(q))
    at(q, period * 1.25 + 1)
    assert q.enqueue(url(1)).status == "seen"  # in the current slice again
    at(q, period * 2.5 + 0.002)
    assert q.enqueue(url(1)).status == "added"


def test_recrawl_granularity_is_a_quarter_period(make_queue: QueueFactory) -> None:
    period = 400.0  # slices of 100 s
    q = make_queue(unique="seen", recrawl_after=period)
    urls = {url(1, i): i * 5.0 for i in range(20)}  # enqueued over one slice's length
    for u, t in urls.items():
        at(q, t)
        assert q.enqueue(u).status == "added"
        q.ack(claim_one(q))  # done: only the seen-set can refuse it now
    came_back_after: dict[str, float] = {}
    for step in range(100):
        now = period * 0.95 + step * 2.5
        at(q, now)
        for u, t in urls.items():
            if u not in came_back_after and q.enqueue(u).added:
                came_back_after[u] = now - t
    assert len(came_back_after) == len(urls)
    assert all(period <= dt <= period * 1.25 + 2.5 for dt in came_back_after.values())
    # URLs of one slice all come back at its end: the wait varies by up to a slice
    assert max(came_back_after.values()) - min(came_back_after.values()) >= 50


def test_recrawl_slice_keys_expire(make_queue: QueueFactory, redis_client: redis.Redis) -> None:
    q = make_queue(unique="seen", recrawl_after=DAY)
    q.enqueue(url(1))
    (key,) = redis_client.keys(q.keys.prefix.replace("{", "[{]").replace("}", "[}]") + "seen:*")
    fp = fingerprint64(url(1))
    assert key.endswith(f":{bucket(fp)}") and redis_client.sismember(key, str(fp))
    assert redis_client.object("encoding", key) == "intset"
    ttl = redis_client.pttl(key)
    assert DAY * 1000 < ttl <= DAY * 1.25 * 1000


# --- bloom -----------------------------------------------------------------------------------


def test_bloom_mode_refuses_seen_urls(make_queue: QueueFactory, redis_client: redis.Redis) -> None:
    q = make_queue(unique="seen", seen_filter="bloom", seen_capacity=2000)
    layout = SeenLayout.from_settings(q.settings)
    bits, hashes = bloom_geometry(2000, 1e-3)
    assert (layout.bits, layout.hashes, layout.chunk_bits) == (math.ceil(bits / 8) * 8, hashes,
                                                               layout.bits)  # fmt: skip
    urls = [url(i % 20, i) for i in range(300)]
    assert all(r.status == "added" for r in q.enqueue_many(urls))
    for job in q.claim(40).jobs:
        q.ack(job)
    again = q.enqueue_many(urls)
    assert sum(r.status == "seen" for r in again) == 40
    assert sum(r.status == "duplicate" for r in again) == 260
    assert redis_client.hget(q.keys.meta, "seen") == layout.stamp
    assert redis_client.strlen(q.keys.seen_bloom(0)) == math.ceil(bits / 8)  # made whole at once
    set_bits = redis_client.bitcount(q.keys.seen_bloom(0))
    assert 300 * hashes * 0.9 < set_bits <= 300 * hashes
    assert not redis_client.exists(q.keys.seen_bloom(1))
    assert q.enqueue(url(99, 99)).status == "added"


def test_a_bloom_filter_of_several_chunks(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(unique="seen", seen_filter="bloom", seen_capacity=300_000)
    layout = SeenLayout.from_settings(q.settings)
    chunks = layout.bits // layout.chunk_bits
    assert chunks == 3 and layout.chunk_bits == BLOOM_CHUNK_BYTES * 8
    urls = [url(i % 20, i) for i in range(200)]
    assert all(r.added for r in q.enqueue_many(urls))
    sizes = [redis_client.strlen(q.keys.seen_bloom(c)) for c in range(chunks + 1)]
    assert sizes == [BLOOM_CHUNK_BYTES] * chunks + [0]  # all made at once, exactly
    set_bits = sum(redis_client.bitcount(q.keys.seen_bloom(c)) for c in range(chunks))
    assert 200 * layout.hashes * 0.95 < set_bits <= 200 * layout.hashes
    assert all(redis_client.bitcount(q.keys.seen_bloom(c)) > 0 for c in range(chunks))
    for job in q.claim(20).jobs:
        q.ack(job)
    assert sum(r.status == "seen" for r in q.enqueue_many(urls)) == 20


# --- replay ------------------------------------------------------------------------------------


def test_replay_is_not_blocked_by_the_seen_set(make_queue: QueueFactory) -> None:
    q = make_queue(unique="seen")
    job_id = q.enqueue(url(1)).id
    q.fail(claim_one(q), "http_503")
    assert q.enqueue(url(1)).status == "seen"
    assert q.replay(ids=[job_id]).moved == 1  # the same job again, not a new enqueue
    assert q.enqueue(url(1)).status == "duplicate"  # pending again: it holds its fingerprint
    job = claim_one(q)
    assert job.id == job_id
    q.ack(job)
    assert q.enqueue(url(1)).status == "seen"


def test_replay_keeps_the_pending_rule_and_plain_jobs_are_replayed(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue()
    unique_id = q.enqueue(url(1), unique=True).id
    plain_id = q.enqueue(url(2)).id  # holds its fingerprint without asking for uniqueness
    for job in q.claim(2).jobs:
        q.fail(job, "http_500")
    newer_1 = q.enqueue(url(1), unique=True).id
    newer_2 = q.enqueue(url(2), unique=True).id

    result = q.replay(all=True)
    assert result.duplicates == [unique_id]  # the rule of replay-1.lua holds
    assert result.moved == 1  # the plain dead letter is replayed; it does not take the fp
    assert redis_client.hget(q.keys.unique, fingerprint(url(2))) == newer_2
    assert redis_client.hget(q.keys.unique, fingerprint(url(1))) == newer_1
    assert {j.id for j in q.claim(10).jobs} == {newer_1, newer_2, plain_id}


# --- the CLI ------------------------------------------------------------------------------------


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], redis_url: str, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> Callable[..., tuple[int, str, str]]:  # fmt: skip
    import os

    for name in list(os.environ):
        if name.startswith("SCRAPEQ_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(["--redis", redis_url, *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_cli_enqueue_unique_seen_counts_and_json(cli: Callable[..., tuple[int, str, str]]) -> None:
    urls = [url(1, i) for i in range(3)]
    assert cli("enqueue", "--unique=seen", *urls)[:2] == (0, "added 3 jobs, skipped 0 duplicates\n")
    code, out, err = cli("enqueue", "--unique=seen", *urls[:2], url(2), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["added"], doc["skipped"], doc["invalid"], len(doc["ids"])) == (1, 2, 0, 1)
    code, out, _ = cli("enqueue", "--unique", "seen", url(2))
    assert (code, out) == (0, "added 0 jobs, skipped 1 duplicate\n")
    code, out, _ = cli("enqueue", url(2))
    assert (code, out) == (0, "added 1 job\n")


def test_cli_bare_unique_means_pending(cli: Callable[..., tuple[int, str, str]]) -> None:
    assert cli("enqueue", "--unique", url(1), url(2))[:2] == (
        0,
        "added 2 jobs, skipped 0 duplicates\n",
    )
    assert cli("enqueue", url(1), "--unique")[:2] == (0, "added 0 jobs, skipped 1 duplicate\n")
    assert cli("enqueue", "--unique", "--lane", "bulk", url(3))[1] == (
        "added 1 job, skipped 0 duplicates\n"
    )
    code, _, err = cli("enqueue", "--unique=sometimes", url(4))
    assert code == 2 and "--unique takes off, pending or seen" in err


def test_cli_unique_from_the_setting(cli: Callable[..., tuple[int, str, str]],
                                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("SCRAPEQ_UNIQUE", "seen")
    assert cli("enqueue", url(1))[1] == "added 1 job, skipped 0 duplicates\n"
    assert cli("enqueue", url(1))[1] == "added 0 jobs, skipped 1 duplicate\n"
    assert cli("enqueue", "--unique=off", url(1))[1] == "added 1 job\n"


def test_a_callers_own_fingerprint_takes_the_urls_place(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue()
    own = 0xFEDC_BA98_7654_3210  # unsigned, as Scrapy on scrapeq passes its fingerprints
    seen = q.prepare(url(1), unique="seen", fingerprint64=own)
    assert (seen.fingerprint, seen.seen) == ("fedcba9876543210", q._dedup.seen.arg(own))
    pending = q.prepare(url(1), unique="pending", fingerprint64=own)
    assert (pending.fingerprint, pending.seen) == ("fedcba9876543210", None)
    assert q.prepare(url(1), unique="off", fingerprint64=own).fingerprint is None
    signed = q.prepare(url(1), unique="seen", fingerprint64=-1)
    assert signed.fingerprint == "ffffffffffffffff"
    # the same URL under two fingerprints is two jobs; one fingerprint is one job
    other = q.prepare(url(2), unique="seen", fingerprint64=own)
    assert statuses(q.enqueue_many([seen, q.prepare(url(1), unique="seen"), other])) == [
        "added", "added", "duplicate"
    ]  # fmt: skip
    assert redis_client.sismember(q.keys.seen(bucket(own)), str(own))
    for bad in (True, 1.5, "1", 1 << 64, -(1 << 63) - 1):
        with pytest.raises(ConfigError, match="fingerprint64"):
            q.prepare(url(1), unique="seen", fingerprint64=bad)  # type: ignore[arg-type]
    assert q.enqueue(url(3), unique="seen", fingerprint64=own + 1).status == "added"
    with pytest.raises(ConfigError, match=r"fingerprint64.*one job's own"):
        q.enqueue_many([url(4), url(5)], unique="seen", fingerprint64=own + 2)
    assert q.enqueue(url(4), unique="seen").status == "added", "nothing was written"
