"""``domains`` and ``breakers`` filtered, sorted and cut; every ``--json`` output's times in one
format (ISO 8601 UTC text with an ``_ms`` integer twin); ``breakers --json`` window counts."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from scrapeq import Queue, Settings
from scrapeq.interfaces.cli import main

pytestmark = pytest.mark.usefixtures("clean_env")

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00$")


def run_json(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> Any:
    code = main(["--redis", url, *argv])
    out, err = capsys.readouterr()
    assert code in (0, 1), err  # audit exits 1 when something is off
    return json.loads(out)


def dom(shop: int) -> str:
    return f"shop-{shop}.example.com"


@pytest.fixture
def fleet(redis_url: str) -> Queue:
    """Five domains: 1 closed with 3 ready; 2 closed, one success between two failures in its
    window; 3 retired; 4 closed with a job in flight; 5 open (tripped by hand)."""
    retiring = Queue.from_url(redis_url, settings=Settings(breaker_max_trips=1))
    retiring.enqueue_many([f"https://{dom(3)}/{i}" for i in range(2)])
    for _ in range(6):  # trips at once (breaker_max_trips=1): retired
        got = retiring.claim(1).jobs
        if not got or retiring.retry(got[0], kind="timeout", delay=0) != "retried":
            break
    retiring.close()
    q = Queue.from_url(redis_url, settings=Settings(domain_concurrency=10))
    q.enqueue_many([f"https://{dom(1)}/{i}" for i in range(3)])
    q.enqueue_many([f"https://{dom(2)}/{i}" for i in range(4)])
    q.enqueue(f"https://{dom(4)}/x")
    q.enqueue(f"https://{dom(5)}/x")
    jobs = q.claim(100).jobs
    two = [j for j in jobs if j.domain == dom(2)]
    q.retry(two[0], kind="timeout", delay=0)
    q.ack(two[1])
    q.retry(two[2], kind="timeout", delay=0)
    for job in jobs:
        if job.domain != dom(4) and job not in two[:3]:
            q.release(job)
    q.breaker_trip(dom(5), cooldown=600)
    return q


def states(rows: list[dict[str, Any]]) -> dict[str, str]:
    return {r["domain"]: r["state"] for r in rows}


def test_breakers_json_gives_window_counts(
    capsys: pytest.CaptureFixture[str], redis_url: str, fleet: Queue
) -> None:
    rows = run_json(capsys, redis_url, "breakers", "--json")
    two = next(r for r in rows if r["domain"] == dom(2))
    assert "window" not in two
    assert (two["window_failures"], two["window_calls"], two["window_size"]) == (2, 3, 20)
    assert (two["state"], two["open_until"], two["open_until_ms"]) == ("closed", None, None)
    five = next(r for r in rows if r["domain"] == dom(5))
    assert five["state"] == "open" and ISO.match(five["open_until"])
    at = round(datetime.fromisoformat(five["open_until"]).timestamp() * 1000)
    assert five["open_until_ms"] == at


def test_state_filter_sort_and_limit(
    capsys: pytest.CaptureFixture[str], redis_url: str, fleet: Queue
) -> None:
    every = states(run_json(capsys, redis_url, "domains", "--json"))
    assert every[dom(5)] == "open" and every[dom(3)] == "retired", every
    rows = run_json(capsys, redis_url, "domains", "--json", "--state", "open")
    assert [r["domain"] for r in rows] == [dom(5)]
    rows = run_json(
        capsys, redis_url, "breakers", "--json", "--state", "open", "--state", "retired"
    )
    assert sorted(r["domain"] for r in rows) == [dom(3), dom(5)]
    rows = run_json(capsys, redis_url, "domains", "--json", "--sort", "ready")
    ready = [r["ready"] for r in rows]
    assert ready == sorted(ready, reverse=True) and rows[0]["domain"] == dom(1)
    rows = run_json(capsys, redis_url, "domains", "--json", "--sort", "ready", "--limit", "1")
    assert len(rows) == 1 and rows[0]["ready"] == max(ready)
    rows = run_json(capsys, redis_url, "breakers", "--json", "--sort", "failures")
    fails = [r["consecutive_failures"] for r in rows]
    assert fails == sorted(fails, reverse=True)
    rows = run_json(capsys, redis_url, "breakers", "--json", "--sort", "open_until")
    assert rows[0]["domain"] == dom(5)  # the only open one: soonest first, closed last
    rows = run_json(capsys, redis_url, "breakers", "--json", "--sort", "name")
    assert [r["domain"] for r in rows] == sorted(r["domain"] for r in rows)
    rows = run_json(capsys, redis_url, "breakers", "--json")  # default: worth a look first
    assert [r["state"] for r in rows][:2] == ["retired", "open"]


def test_tables_say_how_many_of_how_many(
    capsys: pytest.CaptureFixture[str], redis_url: str, fleet: Queue
) -> None:
    code = main(["--redis", redis_url, "domains", "--limit", "2", "--sort", "name"])
    out, _ = capsys.readouterr()
    assert code == 0 and "domains (2 of 5)" in out and dom(1) in out and dom(4) not in out
    code = main(["--redis", redis_url, "breakers", "--state", "open"])
    out, _ = capsys.readouterr()
    assert code == 0 and "breakers (1 of 5)" in out
    assert re.search(r"in (10|9) min", out), out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["domains", "--state", "ajar"], "--state takes closed, open, half_open, retired"),
        (["breakers", "--sort", "colour"], "--sort takes name, state, ready"),
        (["breakers", "--limit", "0"], "--limit"),
    ],
)
def test_bad_listing_options_are_usage_errors(
    capsys: pytest.CaptureFixture[str], redis_url: str, argv: list[str], needle: str
) -> None:
    code = main(["--redis", redis_url, *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and needle in err, err


def check_times(value: Any, where: str = "$") -> int:
    """Every time in ``value`` follows the JSON convention; answers how many were seen.

    A key whose value is ISO text has an ``_ms`` twin with the same instant; an ``_ms`` key
    has its plain twin (ISO text or a number of seconds) before it; no other number looks
    like a time (ms since the epoch).
    """
    seen = 0
    if isinstance(value, list):
        return sum(check_times(v, f"{where}[{i}]") for i, v in enumerate(value))
    if not isinstance(value, dict):
        return 0
    keys = list(value)
    for key, item in value.items():
        here = f"{where}.{key}"
        if isinstance(item, str) and ISO.match(item):
            twin = value.get(f"{key}_ms")
            assert isinstance(twin, int), f"{here}: ISO text without an integer {key}_ms"
            assert twin == round(datetime.fromisoformat(item).timestamp() * 1000), here
            seen += 1
        elif key.endswith("_ms"):
            base = key.removesuffix("_ms")
            assert base in value, f"{here}: an _ms field without {base}"
            assert keys.index(base) < keys.index(key), f"{here}: {base} comes first"
            assert item is None or isinstance(item, int), here
            if value[base] is None:
                assert item is None, here
            elif isinstance(value[base], int | float):
                assert item == round(value[base] * 1000), here
        elif isinstance(item, int | float) and not isinstance(item, bool):
            assert item < 10**11, f"{here}: {item} looks like ms since the epoch: name it _ms"
        seen += check_times(item, here)
    return seen


def test_every_json_output_has_one_time_format(
    capsys: pytest.CaptureFixture[str], redis_url: str, fleet: Queue, tmp_path: Path
) -> None:
    fleet.enqueue("https://shop-5.example.com/later", delay=60, expires=3600)
    dead = run_json(capsys, redis_url, "dead", "list", "--json")
    ready = fleet.enqueue("https://shop-6.example.com/x").id
    outputs = {
        "status": run_json(capsys, redis_url, "status", "--json"),
        "dead list": dead,
        "breakers": run_json(capsys, redis_url, "breakers", "--json"),
        "domains": run_json(capsys, redis_url, "domains", "--json"),
        "job show dead": run_json(capsys, redis_url, "job", "show", dead[0]["id"], "--json"),
        "job show ready": run_json(capsys, redis_url, "job", "show", ready, "--json"),
        "queue list": run_json(capsys, redis_url, "queue", "list", "--json"),
        "audit": run_json(capsys, redis_url, "audit", "--json"),
        "server status": run_json(
            capsys, redis_url, "--data-dir", str(tmp_path), "server", "status", "--json"
        ),
        "enqueue": run_json(capsys, redis_url, "enqueue", "https://shop-7.example.com/", "--json"),
    }
    seen = {name: check_times(doc, name) for name, doc in outputs.items()}
    assert seen["dead list"] >= 3 * len(dead)  # created, died, the last error
    assert seen["breakers"] >= 1 and seen["status"] >= 1 and seen["job show dead"] >= 4
    assert dead[0]["errors"][-1]["at"] == dead[0]["last_error"]["at"]
