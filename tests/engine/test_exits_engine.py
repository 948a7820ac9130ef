"""Exits as failure domains (issue 23), the scripts against a real Redis.

A queue with an exit pool: each claimed job carries the exit it goes through; a ban benches
the (exit, domain) pair, not the domain; a dead exit rests and is probed back; a domain moves
up a tier when no exit of its tier is usable for it and back down after a quiet period; every
exit down claims nothing (our fault). Time moves with ``testing_clock_offset_ms``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from scrapeq import Job, Queue, Settings
from scrapeq.engine.model.exits import ExitPool
from scrapeq.errors import NotFound

pytestmark = pytest.mark.backends

DC = [f"http://127.0.0.1:{port} tier=datacenter" for port in (9001, 9002, 9003)]
RES = ["http://user:secret@127.0.0.1:9101 tier=residential"]


@pytest.fixture
def make(redis_url: str) -> Iterator[Callable[..., Queue]]:
    made: list[Queue] = []

    def build(proxy: list[str] | None = None, **overrides: Any) -> Queue:
        settings = Settings(
            queue="exits", proxy=tuple(proxy if proxy is not None else DC + RES),
            domain_concurrency=8, **overrides,
        )  # fmt: skip
        q = Queue.from_url(redis_url, settings=settings)
        made.append(q)
        return q

    yield build
    for q in made:
        q.close()


def pool(q: Queue) -> ExitPool:
    return ExitPool.from_settings(q.settings)


def ids(q: Queue, tier: str) -> list[str]:
    return [e.id for e in pool(q).exits if e.tier == tier]


def settle(q: Queue, job: Job, result: str, *, outcome: str = "done") -> str:
    if outcome == "done":
        s = q.done(job)
    elif result == "ban":
        s = q.releasing(job, delay=0, kind="banned")
    elif result == "down":
        s = q.releasing(job, delay=0, kind="released:proxy_error")
    else:
        s = q.retrying(job, kind=result, delay=0, domain_failed=True)
    return q.settle_many([dataclasses.replace(s, exit_result=result, bytes_in=1000)])[0]


def claim(q: Queue, n: int = 1) -> list[Job]:
    return q.claim(n).jobs


def dexit(r: redis.Redis, q: Queue, d: str) -> dict[str, str]:
    return r.hgetall(q.keys.domain_exits(d))  # type: ignore[return-value]


def exit_hash(r: redis.Redis, q: Queue, exit_id: str) -> dict[str, str]:
    return r.hgetall(q.keys.exit(exit_id))  # type: ignore[return-value]


def test_without_a_pool_jobs_carry_no_exit(make: Callable[..., Queue]) -> None:
    q = make(proxy=[])
    q.enqueue("https://a.example/1")
    (job,) = claim(q)
    assert job.exit is None


def test_claims_spread_a_domains_jobs_over_its_tiers_exits_least_recently_used_first(
    make: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    q = make()
    q.enqueue_many([f"https://a.example/{i}" for i in range(6)])
    jobs = claim(q, 6)
    chosen = [j.exit for j in jobs]
    dc = ids(q, "datacenter")
    assert set(chosen) == set(dc), "the cheapest tier only, every exit of it"
    assert sorted(chosen.count(e) for e in dc) == [2, 2, 2]
    assert dexit(redis_client, q, "a.example").get("tier", "0") == "0"


def test_a_ban_benches_the_pair_not_the_domain_and_the_job_goes_through_another_exit(
    make: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    q = make()
    q.enqueue("https://a.example/1")
    (job,) = claim(q)
    banned = job.exit
    assert settle(q, job, "ban", outcome="release") == "released"
    info = q.domains_info(["a.example"])[0]
    assert info["state"] == "closed", "a ban is not the domain's failure"
    bench = dexit(redis_client, q, "a.example")[f"b:{banned}"]
    _until, strikes = (int(x) for x in bench.split(":"))
    assert strikes == 1
    (again,) = claim(q)
    assert again.id == job.id and again.exit != banned
    assert again.exit in ids(q, "datacenter")
    # the same exit still serves another domain
    q.enqueue_many([f"https://b.example/{i}" for i in range(3)])
    assert banned in {j.exit for j in claim(q, 3)}


def test_a_repeated_ban_doubles_the_rest_and_an_answer_clears_the_strikes(
    make: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    q = make(proxy=DC[:1] + RES, proxy_ban_cooldown=100, proxy_ban_cooldown_max=1000)
    (dc,) = ids(q, "datacenter")
    rests = []
    for i in range(5):
        q.enqueue(f"https://a.example/{i}")
        (job,) = claim(q)
        assert job.exit == dc, "after its rest the cheaper tier is tried again"
        now_before = q.testing_clock_offset_ms
        settle(q, job, "ban", outcome="release")
        until, strikes = (int(x) for x in dexit(redis_client, q, "a.example")[f"b:{dc}"].split(":"))
        assert strikes == i + 1
        rests.append(until)
        # the job goes through the residential exit meanwhile
        (moved,) = claim(q)
        assert moved.exit == ids(q, "residential")[0]
        settle(q, moved, "ok")
        q.testing_clock_offset_ms = now_before + 2_000_000  # past the rest and the quiet period
    gaps = [b - a for a, b in itertools.pairwise(rests)]
    assert all(g > 0 for g in gaps)
    # rests 100, 200, 400, 800, 1000 s (capped): read back from the fields
    q.enqueue("https://a.example/x")
    (job,) = claim(q)
    assert job.exit == dc
    settle(q, job, "ok")
    assert f"b:{dc}" not in dexit(redis_client, q, "a.example"), "an answer clears the strikes"


def test_rests_double_exactly(make: Callable[..., Queue], redis_client: redis.Redis) -> None:
    q = make(proxy=DC[:1] + RES, proxy_ban_cooldown=100, proxy_ban_cooldown_max=1000)
    (dc,) = ids(q, "datacenter")
    key = q.keys.domain_exits("a.example")
    seen = []
    for i in range(5):
        redis_client.hset(key, mapping={"tier": 0, "tier_at": 0})  # back at the cheap tier
        redis_client.hset(key, f"b:{dc}", f"0:{i}")  # rest over, i bans so far
        q.enqueue(f"https://a.example/{i}")
        (job,) = claim(q)
        assert job.exit == dc
        t0 = int(redis_client.time()[0] * 1000) + q.testing_clock_offset_ms
        settle(q, job, "ban", outcome="release")
        until = int(redis_client.hget(key, f"b:{dc}").split(":")[0])  # type: ignore[union-attr]
        seen.append(round((until - t0) / 1000, -1))
        for j in claim(q, 5):
            settle(q, j, "ok")
    assert seen == [100, 200, 400, 800, 1000]


def test_every_exit_of_a_tier_benched_moves_the_domain_up_then_back_after_the_quiet_period(
    make: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    q = make(proxy_tier_quiet=600, proxy_ban_cooldown=300)
    q.enqueue_many([f"https://a.example/{i}" for i in range(3)])
    for job in claim(q, 3):
        settle(q, job, "ban", outcome="release")
    assert q.domains_info(["a.example"])[0]["state"] == "closed"
    jobs = claim(q, 3)
    assert {j.exit for j in jobs} == set(ids(q, "residential"))
    assert dexit(redis_client, q, "a.example")["tier"] == "1"
    kinds = [e["kind"] for e in q.events(50)]
    assert "tier_up" in kinds
    for j in jobs:
        settle(q, j, "ok")
    # another domain never left the cheap tier
    q.enqueue("https://b.example/1")
    (b,) = claim(q)
    assert b.exit in ids(q, "datacenter")
    settle(q, b, "ok")
    # quiet period over and the benches rested: back to the cheaper tier
    q.testing_clock_offset_ms += 700_000
    q.enqueue("https://a.example/again")
    (job,) = claim(q)
    assert job.exit in ids(q, "datacenter")
    assert dexit(redis_client, q, "a.example")["tier"] == "0"
    assert "tier_down" in [e["kind"] for e in q.events(50)]


def test_no_usable_exit_at_all_charges_the_domain_and_it_waits(
    make: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    q = make(proxy=DC[:2], breaker_failures=2)
    q.enqueue_many([f"https://a.example/{i}" for i in range(4)])
    first = claim(q, 2)
    assert len({j.exit for j in first}) == 2
    settle(q, first[0], "ban", outcome="release")
    info = q.domains_info(["a.example"])[0]
    assert info["state"] == "closed" and info.get("fails", 0) in (0, None)
    settle(q, first[1], "ban", outcome="release")  # the last usable exit: it is the site
    fields = redis_client.hgetall(q.keys.domain("a.example"))
    assert fields.get("fails") == "1" or "1" in fields.get("win", "")
    assert claim(q, 4) == [], "no exit can carry a request for it: it waits"
    q.enqueue("https://b.example/1")
    assert [j.domain for j in claim(q, 4)] == ["b.example"], "other domains go on"


def test_a_dead_exit_rests_after_three_failures_then_one_probe_closes_it(
    make: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    q = make(proxy=DC[:2], proxy_cooldown=60)
    dead, _alive = ids(q, "datacenter")
    q.enqueue_many([f"https://d{i}.example/" for i in range(12)])
    spent = 0
    for _ in range(12):
        jobs = claim(q, 1)
        if not jobs:
            break
        job = jobs[0]
        if job.exit == dead:
            spent += 1
            settle(q, job, "down", outcome="release")
        else:
            settle(q, job, "ok")
    assert spent == 3, "three proxy failures in a row rest it"
    assert exit_hash(redis_client, q, dead)["state"] == "open"
    assert redis_client.hexists(q.keys.exits_down, dead)
    for d in range(12):
        assert q.domains_info([f"d{d}.example"])[0]["state"] == "closed", "no domain charged"
    # after the cooldown (60 s +-20%) one probe goes through it
    q.testing_clock_offset_ms += 80_000
    q.enqueue_many([f"https://p{i}.example/" for i in range(4)])
    jobs = claim(q, 4)
    probes = [j for j in jobs if j.exit == dead]
    assert len(probes) == 1, [j.exit for j in jobs]
    assert exit_hash(redis_client, q, dead)["state"] == "half_open"
    settle(q, probes[0], "ok")
    assert exit_hash(redis_client, q, dead)["state"] == "closed"
    assert not redis_client.hexists(q.keys.exits_down, dead)
    assert {"exit_down", "exit_up"} <= {e["kind"] for e in q.events(100)}


def test_timeouts_of_one_slow_site_do_not_condemn_its_exit(
    make: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    # the site's own breaker would park it first: widened so the exit's rule is what is seen
    q = make(proxy=DC[:1], breaker_failures=50, breaker_window=50, breaker_min_calls=50)
    (e,) = ids(q, "datacenter")
    q.enqueue_many([f"https://slow.example/{i}" for i in range(10)])
    for _ in range(10):
        (job,) = claim(q)
        settle(q, job, "timeout", outcome="retry")
        q.testing_clock_offset_ms += 100_000  # past the retry's backoff
    assert exit_hash(redis_client, q, e).get("state", "closed") == "closed"


def test_timeouts_of_two_sites_through_one_exit_rest_it(
    make: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    q = make(proxy=DC[:2])
    bad = ids(q, "datacenter")[0]
    q.enqueue_many([f"https://s{i}.example/" for i in range(20)])
    for _ in range(20):
        jobs = claim(q)
        if not jobs:
            break
        (job,) = jobs
        settle(q, job, "timeout" if job.exit == bad else "ok",
               outcome="retry" if job.exit == bad else "done")  # fmt: skip
    assert exit_hash(redis_client, q, bad)["state"] == "open"


def test_every_exit_down_claims_nothing_and_charges_no_domain(
    make: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    q = make(proxy=DC[:1])
    q.enqueue_many([f"https://d{i}.example/" for i in range(5)])
    for _ in range(3):
        (job,) = claim(q)
        settle(q, job, "down", outcome="release")
    result = q.claim(5)
    assert result.jobs == []
    assert result.next_due is not None and 40 <= result.next_due <= 80, result.next_due
    alarms = {a["kind"]: a for a in q.status()["alarms"]}
    assert "exits_down" in alarms and "no site's" in alarms["exits_down"]["message"]
    assert "global_pause" not in alarms
    assert all(i["state"] == "closed" for i in q.domains_info([f"d{i}.example" for i in range(5)]))


def test_counts_per_exit_and_per_tier(
    make: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    q = make(proxy=DC[:1] + RES)
    q.enqueue_many([f"https://a.example/{i}" for i in range(2)])
    job = claim(q)[0]
    settle(q, job, "ban", outcome="release")
    for job in claim(q, 2):
        settle(q, job, "ok")
    dc, res = ids(q, "datacenter")[0], ids(q, "residential")[0]
    assert exit_hash(redis_client, q, dc)["req"] == "1"
    assert exit_hash(redis_client, q, dc)["bans"] == "1"
    assert exit_hash(redis_client, q, res)["req"] == "2"
    assert exit_hash(redis_client, q, res)["bytes"] == "2000"
    f = dexit(redis_client, q, "a.example")
    assert (f["r:0"], f["r:1"], f["y:1"]) == ("1", "2", "2000")


def test_a_settle_without_a_request_gives_a_probe_back(
    make: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    q = make(proxy=DC[:1], proxy_cooldown=60)
    (e,) = ids(q, "datacenter")
    q.enqueue_many([f"https://d{i}.example/" for i in range(5)])
    for _ in range(3):
        settle(q, claim(q)[0], "down", outcome="release")
    q.testing_clock_offset_ms += 80_000
    (probe,) = claim(q, 5)
    assert probe.exit == e
    q.settle_many([q.releasing(probe, shutdown=True)])  # the worker stopped: no request
    (again,) = claim(q, 5)
    assert again.exit == e, "the probe slot was given back"


def test_a_bad_exit_result_is_refused_before_any_write(make: Callable[..., Queue]) -> None:
    q = make()
    q.enqueue("https://a.example/1")
    (job,) = claim(q)
    with pytest.raises(Exception, match="exit"):
        q.settle_many([dataclasses.replace(q.done(job), exit_result="maybe")])
    assert q.settle_many([q.done(job)]) == ["done"]


def test_pool_entries_parse_and_secrets_never_show() -> None:
    tiers = ("free", "datacenter", "residential")
    p = ExitPool.from_settings(Settings(proxy=(*DC, *RES, "direct tier=free"), proxy_tiers=tiers))
    assert p.tiers == ("free", "datacenter", "residential")
    assert [t for _, t in p.wire()] == [1, 1, 1, 2, 0]
    assert "secret" not in repr(p.describe())
    assert "secret" not in repr(Settings(proxy=tuple(RES)))
    # two proxies differing by their password only are two exits
    a = ExitPool.from_settings(Settings(proxy=("http://u:a@h:1",))).exits[0].id
    b = ExitPool.from_settings(Settings(proxy=("http://u:b@h:1",))).exits[0].id
    assert a != b


def test_counts_of_one_settle_batch_add_up(
    make: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    """A batch's counters are added up per field and written once (EX.flush_counts): the
    totals are those of the attempts, one by one."""
    q = make(proxy=RES)
    q.enqueue_many([f"https://a.example/{i}" for i in range(6)])
    jobs = claim(q, 6)
    assert len(jobs) == 6
    items = [dataclasses.replace(q.done(j), exit_result="ok", bytes_in=100 + i)
             for i, j in enumerate(jobs)]  # fmt: skip
    items[0] = dataclasses.replace(items[0], latency_ms=40)
    items[1] = dataclasses.replace(items[1], latency_ms=60)
    q.settle_many(items)
    res = ids(q, "residential")[0]
    h = exit_hash(redis_client, q, res)
    assert (h["req"], h["ok"], h["bytes"], h["lat"]) == ("6", "6", str(600 + 15), "100")
    f = dexit(redis_client, q, "a.example")
    assert (f["r:0"], f["y:0"]) == ("6", str(600 + 15))


def test_the_pool_is_read_once_per_queue(make: Callable[..., Queue], tmp_path: Any) -> None:
    """The listings show the exits the scripts hand out: a proxy_file edited after the queue
    opened changes neither (a new process reads the new file)."""
    path = tmp_path / "pool.txt"
    path.write_text("\n".join(DC[:2]) + "\n")
    q = make(proxy=[], proxy_file=str(path))
    before = [e["id"] for e in q.exits_info()]
    path.write_text(RES[0] + "\n")
    assert [e["id"] for e in q.exits_info()] == before
    q.enqueue("https://a.example/1")
    (job,) = claim(q)
    assert job.exit in before


@pytest.mark.parametrize(("result", "outcome"), [("down", "release"), ("timeout", "retry")])
def test_a_failed_probe_of_a_down_exit_spends_nothing_of_its_job(
    make: Callable[..., Queue], redis_client: redis.Redis, result: str, outcome: str
) -> None:
    """Issue 38 item 8: with every exit down, each half-open probe carries a domain's head
    job; the probe failing is the exit's failure alone: the job goes back as it was (no
    attempt, no release, no history), so an outage of the provider dead-letters nothing."""
    q = make(proxy=DC[:1], proxy_cooldown=1, proxy_cooldown_max=1, max_releases=3,
             max_attempts=2)  # fmt: skip
    (e,) = ids(q, "datacenter")
    q.enqueue_many([f"https://d{i}.example/" for i in range(3)])
    for _ in range(3):  # three failures in a row: the exit rests
        settle(q, claim(q)[0], "down", outcome="release")
    assert exit_hash(redis_client, q, e)["state"] == "open"
    statuses = []
    for _ in range(6):  # six probes, each failing: more than either budget
        q.testing_clock_offset_ms += 5_000
        (probe,) = claim(q, 5)
        assert probe.exit == e and exit_hash(redis_client, q, e)["state"] == "half_open"
        statuses.append(settle(q, probe, result, outcome=outcome))
        assert exit_hash(redis_client, q, e)["state"] == "open"
        info = q.job_info(probe.id)
        assert info is not None and info.state == "ready", info
        assert info.job.attempts == probe.attempts - 1, info.job
        assert info.job.releases == probe.releases, info.job
        assert len(info.job.errors) == len(probe.errors), "nothing recorded"
    assert all(s.startswith("released") for s in statuses), statuses
    assert q.stats().get("dead_total", 0) == 0
    for d in range(3):
        assert q.domains_info([f"d{d}.example"])[0]["state"] == "closed", "no domain charged"


def test_ending_an_exits_rest_by_hand_sends_a_probe_at_the_next_claim(
    make: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    """Issue 38 item 16: ``scrapeq proxies probe`` ends a resting exit's cooldown at once."""
    q = make(proxy=DC[:2], proxy_cooldown=600, proxy_cooldown_max=600)
    dead, alive = ids(q, "datacenter")
    q.enqueue_many([f"https://d{i}.example/" for i in range(12)])
    while exit_hash(redis_client, q, dead).get("state") != "open":
        (job,) = claim(q)
        settle(q, job, "down" if job.exit == dead else "ok",
               outcome="release" if job.exit == dead else "done")  # fmt: skip
    assert all(j.exit == alive for j in claim(q, 4)), "it rests for 10 minutes"
    assert q.exits_probe([dead, alive]) == {dead: True, alive: False}
    jobs = claim(q, 4)
    assert [j.exit for j in jobs].count(dead) == 1, "one probe goes through it at once"
    assert exit_hash(redis_client, q, dead)["state"] == "half_open"
    assert "exit_probe" in {e["kind"] for e in q.events(100)}
    with pytest.raises(NotFound, match="no exit '0123456789ab'"):
        q.exits_probe(["0123456789ab"])
