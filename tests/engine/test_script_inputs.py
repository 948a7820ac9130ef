"""Every script checks all of its inputs before its first write (issue 21, item 3).

Redis never rolls a script back: a command that fails half-way through a script (``SET ...
PX`` with a time past what Redis takes, ``ZADD`` with a NaN score, an argument of the wrong
type) leaves the writes before it in place. So each script refuses a bad input with a clear
error reply (``SQ_BAD_ARG`` for its own arguments, ``SQ_BAD_CONFIG`` for the configuration)
*before* it writes anything, and a refusal changes nothing.

``CASES`` holds, for every script of ``scripts.SCRIPTS``, a valid call (built by the script's
Python wrapper) and bad ones: a script missing from it fails
``test_every_script_has_its_cases``. Each bad call runs against a real redis-server holding a
queue with jobs in every place (ready, delayed, in flight, dead, done and kept, placeless),
and the whole keyspace is dumped before and after: it must be the same.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapeq import Queue, Settings
from scrapeq.engine.config.settings import SETTING_NAMES
from scrapeq.engine.lua import owed as owed_calls
from scrapeq.engine.lua import scripts
from scrapeq.engine.lua.browsers import browser_down
from scrapeq.engine.lua.scripts import Settlement
from scrapeq.engine.queue import MAX_CLAIM
from scrapeq.errors import ConfigError, ScriptError
from support.cli_helpers import run, scrub_env

D = "a.example"
NAN = float("nan")
#: A value :func:`with_nan` writes as JSON's NaN (cjson reads it; json.dumps would too, but
#: a dict holding float("nan") reads less plainly in a table of cases).
NAN_MARK = "<NaN>"


def with_nan(value: Any) -> str:
    """``value`` as JSON text, each ``NAN_MARK`` string written as ``NaN``."""
    return json.dumps(value).replace(f'"{NAN_MARK}"', "NaN")


@dataclass
class World:
    """A queue with jobs in every place, and the ids and tokens the cases name."""

    q: Queue
    ready: list[str]
    delayed: str
    inflight: list[tuple[str, int]]
    dead: str
    done: str
    placeless: str

    @property
    def prefix(self) -> str:
        return self.q.keys.prefix

    def lease(self, i: int = 0, **fields: Any) -> dict[str, Any]:
        """In-flight job ``i``'s id and token as a settle or heartbeat item, with ``fields``."""
        job_id, token = self.inflight[i]
        return {"id": job_id, "token": token, **fields}

    def spec(self, path: str = "/new", **changes: Any) -> dict[str, Any]:
        """A valid enqueue spec as the client sends it, with ``changes``."""
        return {**self.q.prepare(f"http://{D}{path}").as_arg(), **changes}


@pytest.fixture
def world(redis_url: str) -> Iterator[World]:
    q = Queue.from_url(
        redis_url, settings=Settings(queue="inputs", keep_done=3600, domain_concurrency=10)
    )
    ids = [q.enqueue(f"http://{D}/{i}").id for i in range(7)]
    delayed = q.enqueue(f"http://{D}/later", delay=600).id
    q.enqueue("http://b.example/1")
    claimed = q.claim(4).jobs
    q.settle_many([q.done(claimed[0]), q.failing(claimed[1], "http_404")])
    inflight = [(j.id, j.token) for j in claimed[2:]]
    q.log_leader("w1", lease=60.0, cursor_ttl=600.0)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    ready = [i for i in ids if client.zscore(q.keys.prefix + f"dq:{D}", i) is not None]
    placeless = ready.pop()  # a job no structure names: what `audit --repair` files again
    client.zrem(q.keys.prefix + f"dq:{D}", placeless)
    client.close()
    assert q.get_job(claimed[0].id) is not None, "kept by keep_done"
    assert [i for i, _ in inflight] and len(ready) >= 2
    yield World(q, ready, delayed, inflight, claimed[1].id, claimed[0].id, placeless)
    q.close()


def dump(url: str) -> dict[bytes, tuple[bytes | None, bool]]:
    """Every key of the server: its serialized value and whether it has a TTL."""
    client = redis.Redis.from_url(url)
    try:
        return {key: (client.dump(key), client.pttl(key) >= 0) for key in client.scan_iter()}
    finally:
        client.close()


def ttls(url: str) -> dict[bytes, int]:
    client = redis.Redis.from_url(url)
    try:
        return {key: client.pttl(key) for key in client.scan_iter()}
    finally:
        client.close()


def call_raw(
    url: str, w: World, name: str, args: Any, config: str | None = None, clock: Any = 0
) -> Any:
    """Run script ``name`` as the queue does (KEYS[1] the prefix, ARGV = clock offset,
    configuration JSON, arguments JSON); ``args`` text is sent as it is."""
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        script = client.register_script(scripts.load_source(name))
        text = args if isinstance(args, str) else json.dumps(args)
        cfg = config if config is not None else w.q._config_json
        return script(keys=[w.prefix], args=[clock, cfg, text])
    finally:
        client.close()


Args = Callable[[World], Any]


@dataclass(frozen=True)
class Cases:
    """A script's valid call (its wrapper's JSON arguments) and its bad ones: (what is
    wrong, arguments as a dict or raw JSON text)."""

    valid: Args
    bad: tuple[tuple[str, Args], ...]


def wrapped(make: Callable[[World], scripts.Call[Any]]) -> Args:
    return lambda w: make(w).args


CASES: dict[str, Cases] = {
    "audit": Cases(
        wrapped(lambda w: scripts.audit([{"k": "job_without_place", "id": w.placeless}], True)),
        (
            # today: the first item is repaired, then k_dq(nil) fails: the repair stays
            (
                "an item without the fields its check needs",
                lambda w: {
                    "repair": True,
                    "seed": 1,
                    "items": [
                        {"k": "job_without_place", "id": w.placeless},
                        {"k": "id_without_job", "place": "dq"},
                    ],
                },
            ),
            ("an unknown check", lambda w: {"repair": True, "items": [{"k": "rm -rf"}]}),
            (
                "a count past what Lua writes exactly",
                lambda w: {
                    "repair": True,
                    "items": [{"k": "lane_ready_count", "lane": "normal", "exp": 1e20, "obs": 0}],
                },
            ),
            ("repair not a boolean", lambda w: {"repair": "yes", "items": []}),
        ),
    ),
    "browser_down": Cases(
        wrapped(lambda w: browser_down("h:1:a", 30_000, failures=3, reason="exited with 1")),
        (
            ("a worker that is not a string", lambda w: {"worker": 7, "wait_ms": 1000}),
            # a wait past 100 years: an until no client can show
            ("a wait past 100 years", lambda w: {"worker": "h:1:a", "wait_ms": 1e20}),
            ("failures not an integer", lambda w: {"worker": "h", "wait_ms": 1, "failures": 0.5}),
            (
                "a reason that is not a string",
                lambda w: {"worker": "h", "wait_ms": 1, "reason": {}},
            ),
        ),
    ),
    "breaker": Cases(
        wrapped(lambda w: scripts.breaker(D, "trip", 5000)),
        (
            # today: open until NOW + 1e20 (a time no client can show)
            (
                "a cooldown past 100 years",
                lambda w: {"domain": D, "action": "trip", "cool_ms": 1e20},
            ),
            # today: anything but 'reset' trips the breaker
            ("an unknown action", lambda w: {"domain": D, "action": "explode", "seed": 1}),
            ("a domain that is not a string", lambda w: {"domain": 5, "action": "reset"}),
        ),
    ),
    "cancel": Cases(
        wrapped(lambda w: scripts.cancel_ids([w.ready[0]])),
        (
            # today: the ready jobs are cancelled, then ZRANGEBYSCORE fails on the cursor
            (
                "a scan cursor that is no score",
                lambda w: {"mode": "domain", "domain": D, "after": "soon", "skip": 0, "limit": 500},
            ),
            ("an id that is not a string", lambda w: {"mode": "ids", "ids": [w.ready[0], 7]}),
            ("a negative limit", lambda w: {"mode": "domain", "domain": D, "limit": -1}),
            ("an unknown mode", lambda w: {"mode": "everything", "ids": [w.ready[0]]}),
        ),
    ),
    "claim": Cases(
        wrapped(lambda w: scripts.claim(1)),
        (
            # today: claims every ready job and moves the token counter past 10^20
            ("n past what Lua writes exactly", lambda w: {"n": 1e20, "seed": 1}),
            ("n = 0", lambda w: {"n": 0, "seed": 1}),
            ("a seed that is not a number", lambda w: {"n": 1, "seed": "x"}),
            ("urgent not a boolean", lambda w: {"n": 1, "seed": 1, "urgent": "yes"}),
            ("a domain that is not a string", lambda w: {"n": 1, "seed": 1, "domain": 7}),
        ),
    ),
    "clear": Cases(
        wrapped(lambda w: scripts.clear("0", 10)),
        (
            ("a negative count", lambda w: {"cursor": "0", "count": -5}),
            ("a cursor that is not a number", lambda w: {"cursor": "zero", "count": 10}),
            ("markers not a boolean", lambda w: {"markers": "yes"}),
        ),
    ),
    "renew": Cases(
        wrapped(lambda w: scripts.renew("0", 10)),
        (
            ("a negative count", lambda w: {"cursor": "0", "count": -5}),
            ("a cursor that is not a number", lambda w: {"cursor": "zero", "count": 10}),
        ),
    ),
    "domain_info": Cases(
        wrapped(lambda w: scripts.domain_info([D])),
        (
            ("domains not a list", lambda w: {"domains": D}),
            ("a domain that is not a string", lambda w: {"domains": [D, {}]}),
        ),
    ),
    "domain_set": Cases(
        wrapped(lambda w: scripts.domain_set(D, 100, 3)),
        (
            # today: the delay is written, then comparing "lots" < 0 fails
            (
                "a concurrency that is no number",
                lambda w: {"domain": D, "delay_ms": 5, "conc": "lots"},
            ),
            # today: stored as 1e+20, answered as -9223372036854775808
            ("a concurrency past what Lua writes exactly", lambda w: {"domain": D, "conc": 1e20}),
            ("a delay past 100 years", lambda w: {"domain": D, "delay_ms": 1e20}),
            ("a concurrency of 0", lambda w: {"domain": D, "conc": 0}),
            ("a max_pages below -1", lambda w: {"domain": D, "max_pages": -2}),
            ("a wait past what Lua writes exactly", lambda w: {"domain": D, "until_ms": 1e20}),
            ("a wait that is no number", lambda w: {"domain": D, "until_ms": "soon"}),
            ("a crawl limit of 0", lambda w: {"domain": D, "climit": 0}),
            ("a crawl limit that is no number", lambda w: {"domain": D, "climit": "ten"}),
        ),
    ),
    "domains": Cases(
        wrapped(lambda w: scripts.domain_names(0, 1024)),
        (
            ("a bucket that is not a number", lambda w: {"from": "x", "to": 5}),
            ("a bucket past the registry", lambda w: {"from": 0, "to": 5000}),
        ),
    ),
    "enqueue": Cases(
        wrapped(lambda w: scripts.enqueue([w.q.prepare(f"http://{D}/ok")])),
        (
            # today: the first job is added, then ZADD refuses the NaN score
            (
                "a NaN delay after a good job",
                lambda w: with_nan({"jobs": [w.spec("/x"), w.spec("/y", delay=NAN_MARK)]}),
            ),
            (
                "a delay past 100 years",
                lambda w: {"jobs": [w.spec("/x"), w.spec("/y", delay=1e20)]},
            ),
            ("a negative expiry", lambda w: {"jobs": [w.spec("/x", expires=-5)]}),
            ("a URL that is not a string", lambda w: {"jobs": [w.spec("/x"), w.spec(url=5)]}),
            ("max_attempts 0", lambda w: {"jobs": [w.spec("/x", max_attempts=0)]}),
            ("a lane offset that is not finite", lambda w: {"jobs": [w.spec("/x", off=1e300)]}),
            ("an unknown unique mode", lambda w: {"jobs": [w.spec("/x", unique="always")]}),
            ("jobs not a list", lambda w: {"jobs": "x"}),
            ("a request that is not text", lambda w: {"jobs": [w.spec("/x", request={"m": 1})]}),
            ("a known URL's time below 0", lambda w: {"jobs": [w.spec("/x"), w.spec(at=-1)]}),
            ("a known URL without unique = 'seen'", lambda w: {"jobs": [w.spec("/x", at=0)]}),
            ("a capped flag that is no boolean", lambda w: {"jobs": [w.spec("/x", capped=1)]}),
            ("succeeds without at", lambda w: {"jobs": [w.spec("/x", succeeds="a1")]}),
        ),
    ),
    "downloaded": Cases(
        wrapped(lambda w: scripts.downloaded(w.inflight[:1])),
        (
            (
                "an id that is not a string after a good item",
                lambda w: {"items": [w.lease(), {"id": {}, "token": 1}]},
            ),
            (
                "a token that is not a number after a good item",
                lambda w: {"items": [w.lease(), w.lease(1, token="1")]},
            ),
            ("items that are not a list", lambda w: {"items": "x"}),
            (
                "a latency below 0 after a good item",
                lambda w: {"items": [w.lease(latency=5), w.lease(1, latency=-1)]},
            ),
            (
                "a failed flag that is no boolean",
                lambda w: {"items": [w.lease(latency=5), w.lease(1, failed=1)]},
            ),
            (
                "an overload flag that is no boolean",
                lambda w: {"items": [w.lease(latency=5), w.lease(1, overload="yes")]},
            ),
        ),
    ),
    "heartbeat": Cases(
        wrapped(lambda w: scripts.heartbeat(w.inflight[:1])),
        (
            # today: the first lease is renewed, then ZSCORE refuses the table
            (
                "an id that is not a string after a good item",
                lambda w: {"items": [w.lease(), {"id": {}}]},
            ),
            # today: the lease is renewed for 10^300 ms
            (
                "a lease past 100 years",
                lambda w: {
                    "items": [w.lease()],
                    "lease_ms": 1e300,
                },
            ),
            (
                "a handler mark that is not a boolean after a good item",
                lambda w: {"items": [w.lease(h=True), w.lease(h="yes")]},
            ),
        ),
    ),
    "host_group": Cases(
        wrapped(lambda w: scripts.host_group("h.example", "ip:192.0.2.1")),
        (
            ("a key that is not a string", lambda w: {"host": "h.example", "key": 7}),
            ("an empty host", lambda w: {"host": "", "key": "ip:192.0.2.1"}),
        ),
    ),
    "job_info": Cases(
        wrapped(lambda w: scripts.job_info(w.ready[0])),
        (("an id that is not a string", lambda w: {"id": 5}),),
    ),
    "log_leader": Cases(
        wrapped(lambda w: scripts.log_leader("w1", 60_000, 600_000, cursor="1-0")),
        (
            # today: the lease is renewed, then SET ... PX refuses the cursor's TTL
            (
                "a cursor TTL past what SET PX takes",
                lambda w: {"id": "w1", "ttl_ms": 120_000, "cursor_ttl_ms": 1e20, "cursor": "1-0"},
            ),
            ("a lease of 0 ms", lambda w: {"id": "w2", "ttl_ms": 0, "cursor_ttl_ms": 1000}),
            (
                "an id that is not a string",
                lambda w: {"id": 3, "ttl_ms": 1000, "cursor_ttl_ms": 1000},
            ),
        ),
    ),
    "migrate": Cases(
        wrapped(lambda w: scripts.migrate(create=True)),
        (
            ("create not a boolean", lambda w: {"create": "yes", "budget": 10}),
            ("no budget", lambda w: {"create": False}),
            ("a budget of 0", lambda w: {"create": False, "budget": 0}),
            ("a budget past 10,000", lambda w: {"create": False, "budget": 1e20}),
        ),
    ),
    "once": Cases(
        wrapped(lambda w: scripts.once("flag", "me")),
        (
            # today: the flag is set to "table: 0x..."
            ("a holder that is not a string", lambda w: {"name": "flag", "holder": {}}),
            ("a bad flag name", lambda w: {"name": "no spaces", "holder": "me"}),
        ),
    ),
    "owed_ack": Cases(
        wrapped(lambda w: owed_calls.owed_ack([w.done])),
        (
            ("ids not a list", lambda w: {"ids": w.done}),
            ("an id that is not a string after a good one", lambda w: {"ids": [w.done, 5]}),
            ("more than 1,000 ids", lambda w: {"ids": [w.done] * 1001}),
        ),
    ),
    "owed_take": Cases(
        wrapped(lambda w: owed_calls.owed_take(10)),
        (
            ("no n", lambda w: {}),
            ("n of 0", lambda w: {"n": 0}),
            ("n past 1,000", lambda w: {"n": 1e20}),
            ("a fractional n", lambda w: {"n": 2.5}),
        ),
    ),
    "page_info": Cases(
        wrapped(lambda w: scripts.page_info(["http://a.test/p"])),
        (
            ("urls not a list", lambda w: {"urls": "http://a.test/p"}),
            ("a URL that is not a string", lambda w: {"urls": ["http://a.test/p", 5]}),
            ("more than 100 URLs", lambda w: {"urls": ["http://a.test/p"] * 101}),
        ),
    ),
    "seen_has": Cases(
        wrapped(lambda w: scripts.seen_has([{"b": 7, "f": "7"}])),
        (
            ("seen not a list", lambda w: {"seen": "7"}),
            ("a fingerprint not in decimal", lambda w: {"seen": [{"b": 7, "f": "x7"}]}),
            ("a bucket out of range", lambda w: {"seen": [{"b": -1, "f": "7"}]}),
            ("more than 100 URLs", lambda w: {"seen": [{"b": 7, "f": "7"}] * 101}),
        ),
    ),
    "partitions": Cases(
        wrapped(lambda w: scripts.partitions(1)),
        (
            ("parts not a number", lambda w: {"parts": "many"}),
            ("parts past 1,024", lambda w: {"parts": 5000}),
        ),
    ),
    "purge": Cases(
        wrapped(lambda w: scripts.purge(older_ms=60_000)),
        (
            # today: a negative age purges every dead letter
            ("a negative age", lambda w: {"older_ms": -5000, "limit": 100}),
            ("a limit past what Lua writes exactly", lambda w: {"limit": 1e20}),
        ),
    ),
    "reap": Cases(
        wrapped(lambda w: scripts.reap()),
        (
            # today: LIMIT 0 -1 reaps without bound
            ("a negative budget", lambda w: {"seed": 1, "budget": -1}),
            ("a fractional budget", lambda w: {"seed": 1, "budget": 0.5}),
        ),
    ),
    "replay": Cases(
        wrapped(lambda w: scripts.replay("ids", ids=[w.dead])),
        (
            # today: the first dead letter is replayed, then ZSCORE refuses the table
            (
                "an id that is not a string after a good one",
                lambda w: {"mode": "ids", "ids": [w.dead, {}], "limit": 100, "offset": 0},
            ),
            # today: any mode but ids and domain replays everything
            ("an unknown mode", lambda w: {"mode": "sideways", "limit": 100, "offset": 0}),
            ("mode domain without a domain", lambda w: {"mode": "domain", "domain": None}),
            ("a negative offset", lambda w: {"mode": "all", "limit": 100, "offset": -3}),
        ),
    ),
    "settle": Cases(
        wrapped(lambda w: scripts.settle([Settlement(*w.inflight[0], "done")])),
        (
            # today: the first job is done, the second leaves in flight, then ZADD refuses NaN
            (
                "a NaN delay after a good item",
                lambda w: with_nan(
                    {
                        "seed": 1,
                        "items": [
                            w.lease(outcome="done"),
                            w.lease(1, outcome="retry", delay=NAN_MARK),
                        ],
                    }
                ),
            ),
            (
                "a bad outcome after a good item",
                lambda w: {"items": [w.lease(outcome="done"), w.lease(1, outcome="bogus")]},
            ),
            (
                "a Retry-After past 100 years",
                lambda w: {"items": [w.lease(outcome="throttle", retry_after=1e20)]},
            ),
            (
                "a final URL with a bad seen-set argument after a good item",
                lambda w: {
                    "items": [
                        w.lease(outcome="done"),
                        w.lease(1, outcome="done", final_seen={"b": 1, "f": "12x"}),
                    ]
                },
            ),
            (
                "a results record over 4 MiB after a good item",
                lambda w: {
                    "items": [
                        w.lease(outcome="done", line="{}"),
                        w.lease(1, outcome="done", line="x" * (4 * 1024 * 1024 + 1)),
                    ]
                },
            ),
            (
                "a results record on two lines",
                lambda w: {"items": [w.lease(outcome="fail", reason="r", line='{"a":\n1}')]},
            ),
            (
                "a follow-up with a bad spec",
                lambda w: {
                    "items": [
                        w.lease(
                            outcome="done",
                            follow=[w.spec("/f", parent=w.inflight[0][0], depth=1, delay=-5)],
                        )
                    ]
                },
            ),
        ),
    ),
    "exit_probe": Cases(
        wrapped(lambda w: scripts.exit_probe(["0123456789ab", "direct"])),
        (
            ("ids not a list", lambda w: {"ids": "0123456789ab"}),
            ("no id", lambda w: {"ids": []}),
            ("an id that is no exit id", lambda w: {"ids": ["0123456789ab", "x:1"]}),
        ),
    ),
    "status": Cases(
        wrapped(lambda w: scripts.status(["normal"], top=5)),
        (
            ("lanes not a list", lambda w: {"lanes": "normal"}),
            ("top past what Lua writes exactly", lambda w: {"lanes": [], "top": 1e20}),
        ),
    ),
}


def test_every_script_has_its_cases() -> None:
    assert set(CASES) == set(scripts.SCRIPTS)
    assert all(c.bad for c in CASES.values())


BAD_CALLS = [
    pytest.param(name, args, id=f"{name}: {what}")
    for name, cases in sorted(CASES.items())
    for what, args in cases.bad
]


def _refusal(call: Callable[[], Any]) -> str:
    """The error reply of ``call`` ("" when it answered)."""
    try:
        call()
    except redis.ResponseError as exc:
        return str(exc)
    return ""


def _assert_refused(code: str, text: str) -> None:
    assert text.startswith(code), f"not a clear {code} refusal: {text!r}"
    assert "\n" not in text


@pytest.mark.parametrize(("name", "args"), BAD_CALLS)
def test_a_bad_argument_is_refused_and_changes_nothing(
    world: World, redis_url: str, name: str, args: Args
) -> None:
    before, lived = dump(redis_url), ttls(redis_url)
    text = _refusal(lambda: call_raw(redis_url, world, name, args(world)))
    assert dump(redis_url) == before, f"changed; answered {text!r}"
    after = ttls(redis_url)
    assert all(after[k] <= lived[k] for k in after), "no TTL was renewed"
    _assert_refused("SQ_BAD_ARG", text)


#: Configurations (ARGV[2]) every script must refuse before it writes: a field changed.
BAD_CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("keep_done past what SET PX takes", {"keep_done_ms": 1e20}),
    ("a NaN lease", {"lease_ms": NAN}),
    ("a negative backoff cap", {"backoff_cap_ms": -1}),
    ("a breaker rate over 1", {"rate": 2}),
    ("an unknown politeness", {"politeness": "ip6"}),
    ("a concurrency that is not an integer", {"conc": 2.5}),
    ("a missing field", {"lease_ms": None}),
]


@pytest.mark.parametrize("name", sorted(scripts.SCRIPTS))
@pytest.mark.parametrize(("what", "change"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_a_bad_configuration_is_refused_by_every_script_and_changes_nothing(
    world: World, redis_url: str, name: str, what: str, change: dict[str, Any]
) -> None:
    config = json.loads(world.q._config_json)
    config.update(change)
    config = {k: v for k, v in config.items() if v is not None}
    valid = CASES[name].valid(world)
    before = dump(redis_url)
    text = _refusal(lambda: call_raw(redis_url, world, name, valid, json.dumps(config)))
    assert dump(redis_url) == before, f"changed; answered {text!r}"
    _assert_refused("SQ_BAD_CONFIG", text)


@pytest.mark.parametrize(
    ("what", "clock", "args"),
    [
        ("a clock offset that is no number", "soon", None),
        ("a clock offset that is not finite", "inf", None),
        ("arguments that are not JSON", 0, "{not json"),
        ("arguments that are not an object", 0, "[1, 2]"),
    ],
)
@pytest.mark.parametrize("name", ["claim", "settle", "status"])
def test_a_bad_call_envelope_is_refused(
    world: World, redis_url: str, name: str, what: str, clock: Any, args: str | None
) -> None:
    text = args if args is not None else CASES[name].valid(world)
    before = dump(redis_url)
    answer = _refusal(lambda: call_raw(redis_url, world, name, text, clock=clock))
    assert dump(redis_url) == before, f"changed; answered {answer!r}"
    _assert_refused("SQ_BAD_ARG", answer)


@pytest.mark.parametrize("name", sorted(scripts.SCRIPTS))
def test_the_wrappers_valid_calls_pass_the_checks(world: World, redis_url: str, name: str) -> None:
    call_raw(redis_url, world, name, CASES[name].valid(world))


#: The settings ScriptConfig makes durations (ms) and counts of.
DURATION_SETTINGS = [
    "backoff_base",
    "backoff_cap",
    "lease",
    "domain_delay",
    "breaker_cooldown",
    "breaker_cooldown_max",
    "global_trip_window",
    "keep_done",
    "recrawl_after",
    "domain_ttl",
]
COUNT_SETTINGS = [
    "max_attempts",
    "breaker_failures",
    "breaker_window",
    "breaker_min_calls",
    "breaker_max_trips",
    "global_trip_min",
    "max_throttles",
    "max_releases",
    "max_pages",
    "domain_concurrency",
    "domain_concurrency_min",
    "domain_concurrency_max",
]


def test_settings_at_their_bounds_make_a_configuration_the_scripts_take(
    world: World, redis_url: str
) -> None:
    from scrapeq.engine.config.limits import MAX_DURATION_S, MAX_SCRIPT_INT

    durations = dict.fromkeys(DURATION_SETTINGS, MAX_DURATION_S)
    counts = dict.fromkeys(COUNT_SETTINGS, MAX_SCRIPT_INT)
    settings = Settings(queue="inputs", **durations, **counts)  # type: ignore[arg-type]
    config = scripts.ScriptConfig.from_settings(settings).to_json()
    for name in ("status", "claim", "reap"):
        call_raw(redis_url, world, name, CASES[name].valid(world), config)


def test_the_lua_bounds_are_the_python_ones() -> None:
    from scrapeq.engine.config import limits
    from scrapeq.engine.model import lanes

    source = scripts.load_source("status").replace("  --@once", "")  # (engine/lua/library.py)
    assert f"local MAX_MS = {limits.MAX_DURATION_MS}\n" in source
    assert f"local MAX_INT = {limits.MAX_SCRIPT_INT}\n" in source
    assert f"local MAX_OFFSET_MS = {round(lanes.MAX_OFFSET * 1000)}\n" in source
    assert f"local MAX_CLAIM = {MAX_CLAIM} " in scripts.load_source("claim")
    parts = dataclasses.fields(Settings)[SETTING_NAMES.index("partitions")].metadata["spec"]
    assert f"local MAX_PARTS = {int(parts.le)} " in scripts.load_source("partitions")


def test_a_refusal_maps_to_the_librarys_errors(world: World) -> None:
    with pytest.raises(ScriptError, match=r"^settle refused its arguments: items\[0\]\.outcome: "):
        world.q.settle_many([Settlement(*world.inflight[0], "bogus")])
    error = scripts.map_error("SQ_BAD_CONFIG keep_done_ms: expected ...", "settle")
    assert isinstance(error, ConfigError)
    assert error.name == "keep_done_ms"


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        (
            "settle",
            lambda w: {
                "items": [
                    {"id": "a1", "token": 1, "outcome": "done"},
                    {
                        "id": "a2",
                        "token": 1,
                        "outcome": "done",
                        "follow": [w.spec(), w.spec(lane=3)],
                    },
                ]
            },
            "SQ_BAD_ARG items[1].follow[1].lane: expected a non-empty string, got 3",
        ),
        (
            "enqueue",
            lambda w: {"jobs": [w.spec(seen={"b": 1, "f": "12x"})]},
            'SQ_BAD_ARG jobs[0].seen.f: expected a decimal fingerprint, got "12x"',
        ),
        (
            "enqueue",
            lambda w: {"jobs": [w.spec(payload="p\n" + "x" * 60)]},
            None,  # a payload is any text: not refused
        ),
        (
            "once",
            lambda w: {"name": "a\x1b]0;owned\x07", "holder": "me"},
            "SQ_BAD_ARG name: expected a flag name (letters, digits, '_-.:'), got \"a?]0;owned?\"",
        ),
    ],
)
def test_a_refusal_names_the_value_by_its_path_on_one_line(
    world: World, redis_url: str, name: str, args: Args, expected: str | None
) -> None:
    text = _refusal(lambda: call_raw(redis_url, world, name, args(world)))
    assert text == (expected or "")


def test_a_bad_outcome_in_a_batch_settles_none_of_it(world: World) -> None:
    (good_id, good_token), (bad_id, bad_token) = world.inflight
    before = world.q.counts()
    with pytest.raises(ScriptError, match="bogus"):
        world.q.settle_many(
            [Settlement(good_id, good_token, "done"), Settlement(bad_id, bad_token, "bogus")]
        )
    assert world.q.counts() == before
    assert world.q.settle_many([Settlement(good_id, good_token, "done")]) == ["done"]


# --- end to end: the two reproduced commands ---------------------------------------------------


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<title>ok</title>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_keep_done_past_what_redis_takes_is_a_bad_setting_for_the_worker(
    redis_url: str, site: str, tmp_path: Path
) -> None:
    q = Queue.from_url(redis_url, settings=Settings(allow_private=True))
    q.enqueue(site)
    q.close()
    before = dump(redis_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEQ_")}
    env.update(SCRAPEQ_KEEP_DONE="1e20", SCRAPEQ_ALLOW_PRIVATE="true")
    proc = subprocess.run(
        [sys.executable, "-m", "scrapeq", "--redis", redis_url, "worker", "--burst"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "keep_done" in lines[0] and "Traceback" not in proc.stderr
    assert dump(redis_url) == before, "the job is still ready, untouched"


def test_recrawl_after_past_what_redis_takes_is_a_bad_setting_for_enqueue(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scrub_env(monkeypatch, tmp_path)
    seeded = Queue.from_url(redis_url)
    seeded.enqueue("http://b.example/seed")
    seeded.close()
    before = dump(redis_url)
    monkeypatch.setenv("SCRAPEQ_RECRAWL_AFTER", "1e16")
    code, out, err = run(
        capsys, "--redis", redis_url, "enqueue", "--unique=seen", "http://a.example/x"
    )
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1 and "recrawl_after" in err
    assert dump(redis_url) == before


def test_a_repair_after_another_never_fails_on_a_damaged_done_at(
    world: World, redis_url: str
) -> None:
    # Stored data is not an input, but a repair must not fail half-way on it either: the
    # TTL given back is at most what keep_done takes (today: PEXPIRE 1e+300 fails after the
    # first item was filed again).
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    key = world.q.keys.job(world.done)
    stored = json.loads(client.get(key) or "")
    stored["done_at"] = 1e300
    client.set(key, json.dumps(stored))
    items = [{"k": "job_without_place", "id": i} for i in (world.placeless, world.done)]
    answer = world.q._step(scripts.audit(items, True))
    assert [a[:2] for a in answer] == [(True, True), (True, True)]
    assert 0 < client.pttl(key) <= 3_155_760_000_000
    client.close()


def test_a_refused_value_that_quotes_another_code_maps_by_the_first() -> None:
    error = scripts.map_error(
        'SQ_BAD_ARG domain: expected ..., got "SQ_UNKNOWN_DOMAIN x"', "breaker"
    )
    assert isinstance(error, ScriptError)
    assert str(error).startswith("breaker refused its arguments: domain: ")


@pytest.mark.parametrize("name", sorted(scripts.SCRIPTS))
def test_each_script_checks_its_arguments_before_its_own_first_redis_call(name: str) -> None:
    # The convention (docs/DESIGN.md): right after the includes, before any read or write.
    lua = resources.files("scrapeq.engine").joinpath("lua", scripts.SCRIPTS[name])
    text = lua.read_text().split("]]", 1)[1]
    checks = text.find("arg_refusal(")
    assert checks >= 0, f"{name} does not check its arguments"
    first_call = text.find("redis.call(")
    assert first_call == -1 or checks < first_call
