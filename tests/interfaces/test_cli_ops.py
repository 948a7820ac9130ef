"""The CLI's everyday operations: job show/cancel, queue list/clear, confirmations, checks."""

from __future__ import annotations

import io
import json
import re
from importlib.metadata import version
from typing import Any

import pytest
import redis

import scrapeq.interfaces.cli.queues
import scrapeq.interfaces.cli.workers
from scrapeq import Queue, Settings
from support.cli_helpers import run
from support.script_calls import script_calls

pytestmark = pytest.mark.usefixtures("clean_env")


class Terminal(io.StringIO):
    """Standard input that is a terminal, with the user's answers already typed."""

    def isatty(self) -> bool:
        return True


class Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


@pytest.fixture(autouse=True)
def no_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", Pipe(""))


def answer(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr("sys.stdin", Terminal(text))


def url(shop: int, page: int = 1) -> str:
    return f"https://shop-{shop}.example.com/p/{page}"


def dom(shop: int) -> str:
    return f"shop-{shop}.example.com"


@pytest.fixture
def q(redis_url: str) -> Any:
    queue = Queue.from_url(redis_url, settings=Settings(domain_concurrency=10))
    yield queue
    queue.close()


def one_line(err: str) -> str:
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


# --- job show ---------------------------------------------------------------------------------


def test_job_show_json_of_a_ready_job(capsys: Any, redis_url: str, q: Queue) -> None:
    ids = [q.enqueue(url(1, p), payload={"sku": p}).id for p in range(3)]
    code, out, err = run(capsys, "--redis", redis_url, "job", "show", ids[1], "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["id"] == ids[1] and doc["state"] == "ready"
    assert (doc["position"], doc["depth"]) == (2, 3)
    assert (doc["url"], doc["domain"], doc["lane"]) == (url(1, 1), dom(1), "normal")
    assert (doc["attempts"], doc["max_attempts"], doc["payload"]) == (0, 5, {"sku": 1})
    assert doc["created_at"].endswith("+00:00") and isinstance(doc["created_at_ms"], int)
    assert doc["eligible_at_ms"] == doc["created_at_ms"]
    assert doc["lease"] is None and doc["errors"] == [] and doc["queue"] == "default"


def test_job_show_table_humanises_times(capsys: Any, redis_url: str, q: Queue) -> None:
    delayed = q.enqueue(url(1), delay=66, lane="bulk").id
    code, out, _ = run(capsys, "--redis", redis_url, "job", "show", delayed)
    assert code == 0
    assert "delayed" in out and "bulk" in out and url(1) in out
    assert re.search(r"in (65|66) s", out), out
    assert re.search(r"created .*\d s ago|\d+\.\d s ago|just now", out), out


def test_job_show_inflight_dead_and_done(capsys: Any, redis_url: str) -> None:
    q = Queue.from_url(redis_url, settings=Settings(keep_done=60))
    a, b = q.enqueue(url(1)).id, q.enqueue(url(2)).id
    jobs = {j.id: j for j in q.claim(2).jobs}
    code, out, _ = run(capsys, "--redis", redis_url, "job", "show", a, "--json")
    lease = json.loads(out)["lease"]
    assert code == 0 and json.loads(out)["state"] == "inflight"
    assert lease["token"] == jobs[a].token and lease["worker"] is None
    assert lease["deadline_at"].endswith("+00:00") and isinstance(lease["deadline_at_ms"], int)
    code, out, _ = run(capsys, "--redis", redis_url, "job", "show", a)
    assert "inflight" in out and f"token {jobs[a].token}" in out and "worker not recorded" in out
    q.fail(jobs[b], "http_404", "gone")
    code, out, _ = run(capsys, "--redis", redis_url, "job", "show", b, "--json")
    doc = json.loads(out)
    assert doc["state"] == "dead" and doc["dead_reason"] == "http_404"
    assert doc["errors"][-1]["kind"] == "http_404" and doc["errors"][-1]["message"] == "gone"
    assert doc["errors"][-1]["at"].endswith("+00:00")
    code, out, _ = run(capsys, "--redis", redis_url, "job", "show", b)
    assert "dead" in out and "http_404" in out and "gone" in out
    q.ack(jobs[a])
    code, out, _ = run(capsys, "--redis", redis_url, "job", "show", a, "--json")
    doc = json.loads(out)
    assert doc["state"] == "done" and doc["done_at"] and doc["kept_until"]
    code, out, _ = run(capsys, "--redis", redis_url, "job", "show", a)
    assert "done" in out
    q.close()


def test_job_show_of_an_unknown_id_exits_2(capsys: Any, redis_url: str, q: Queue) -> None:
    q.enqueue(url(1))
    code, out, err = run(capsys, "--redis", redis_url, "job", "show", "zz9")
    assert code == 2 and out == ""
    assert one_line(err).startswith("scrapeq: error: no job zz9 in queue 'default'")


# --- job cancel -------------------------------------------------------------------------------


def test_job_cancel_ids(capsys: Any, redis_url: str, q: Queue) -> None:
    ids = [q.enqueue(url(1, p)).id for p in range(3)]
    code, out, err = run(capsys, "--redis", redis_url, "job", "cancel", ids[0], ids[1])
    assert (code, out.strip(), err) == (0, "cancelled 2 jobs", "")
    code, out, err = run(capsys, "--redis", redis_url, "status", "--json")
    assert json.loads(out)["counts"]["cancelled"] == 2 and json.loads(out)["counts"]["ready"] == 1


def test_job_cancel_refusals_and_unknown_ids(capsys: Any, redis_url: str, q: Queue) -> None:
    ready, busy, dead = (q.enqueue(url(i)).id for i in range(3))
    jobs = {j.id: j for j in q.claim(3).jobs}
    jobs.pop(ready)
    q.fail(jobs[dead], "http_404")
    code, out, err = run(capsys, "--redis", redis_url, "job", "cancel", busy, dead, "zz9")
    assert code == 2 and out.strip() == "cancelled 0 jobs"
    assert err.splitlines() == [
        f"job {busy} is in flight; --force to cancel it",
        f"{dead} is a dead letter: use dead purge",
        "no job zz9 in queue 'default'",
    ]
    q.enqueue(url(5))
    code, out, err = run(capsys, "--redis", redis_url, "job", "cancel", busy, "zz9", "--force")
    assert code == 0 and out.strip() == "cancelled 1 job"
    assert err.splitlines() == ["no job zz9 in queue 'default'"]
    assert q.settle_many([q.done(jobs[busy])]) == ["stale"]


def test_job_cancel_domain(capsys: Any, redis_url: str, q: Queue) -> None:
    q.enqueue_many([url(1, p) for p in range(4)] + [url(2)])
    q.enqueue(url(1, 9), delay=600)
    q.claim(1)
    code, out, err = run(capsys, "--redis", redis_url, "job", "cancel", "--domain", dom(1))
    assert code == 0, err
    assert out.strip() == (
        f"cancelled 4 jobs of {dom(1)}; 1 in flight left to finish (cancel it by id with --force)"
    )
    code, out, err = run(capsys, "--redis", redis_url, "job", "cancel", "--domain", dom(2))
    assert (code, out.strip()) == (0, f"cancelled 1 job of {dom(2)}")
    code, out, err = run(capsys, "--redis", redis_url, "job", "cancel", "--domain", dom(7))
    assert code == 2 and one_line(err) == f"scrapeq: error: unknown domain '{dom(7)}'"


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["job", "cancel"], "give job ids or --domain"),
        (["job", "cancel", "a1", "--domain", "x.example.com"], "not both"),
        (["job", "cancel", "--domain", "x.example.com", "--force"], "--force"),
    ],
)
def test_job_cancel_usage_errors(capsys: Any, redis_url: str, argv: list[str], needle: str) -> None:
    code, out, err = run(capsys, "--redis", redis_url, *argv)
    assert code == 2 and out == ""
    assert needle in one_line(err)


# --- queue list and clear ------------------------------------------------------------------------


def test_queue_list(capsys: Any, redis_url: str) -> None:
    for name, n in (("shops", 3), ("news", 1)):
        other = Queue.from_url(redis_url, settings=Settings(queue=name))
        other.enqueue_many([url(i) for i in range(n)])
        other.close()
    code, out, err = run(capsys, "--redis", redis_url, "queue", "list", "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert [d["queue"] for d in doc] == ["news", "shops"]
    assert doc[1]["counts"]["ready"] == 3 and doc[1]["counts"]["enqueued"] == 3
    assert set(doc[0]["counts"]) == {
        "enqueued", "ready", "delayed", "inflight", "done", "dead", "cancelled",
    }  # fmt: skip
    code, out, _ = run(capsys, "--redis", redis_url, "queue", "list")
    assert code == 0 and "shops" in out and "news" in out


def test_queue_list_says_when_its_scan_was_capped(
    capsys: Any, redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    redis_client.mset({f"other:{i}": 1 for i in range(5_000)})
    monkeypatch.setattr(scrapeq.interfaces.cli.queues, "_LIST_SCAN_CALLS", 2)
    code, out, err = run(capsys, "--redis", redis_url, "queue", "list", "--json")
    assert code == 0 and json.loads(out) == []
    assert "only the first" in one_line(err) and "more queues may exist" in err


def test_queue_clear_deletes_every_key_of_that_queue_only(
    capsys: Any, redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    shops = Queue.from_url(redis_url, settings=Settings(queue="shops"))
    shops.enqueue_many([url(i % 30, i) for i in range(2_000)])
    shops.enqueue(url(1), delay=60)
    news = Queue.from_url(redis_url, settings=Settings(queue="news"))
    news.enqueue(url(1))
    redis_client.set("unrelated", "1")
    before = len(redis_client.keys("sq:{shops}:*"))
    redis_client.config_resetstat()
    code, out, err = run(capsys, "--redis", redis_url, "queue", "clear", "shops", "--yes")
    assert code == 0, err
    assert out.strip() == f"cleared queue 'shops': {before} keys deleted"
    assert redis_client.keys("sq:{shops}:*") == []
    assert redis_client.exists("unrelated") and news.status()["counts"]["ready"] == 1
    stats = redis_client.info("commandstats")
    assert script_calls(stats) >= before // 500  # bounded slices
    assert "cmdstat_del" not in stats  # UNLINK: big values are freed in the background
    shops.close()
    news.close()


def test_queue_clear_without_yes_needs_a_terminal(
    capsys: Any, redis_url: str, q: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    q.enqueue(url(1))
    code, out, err = run(capsys, "--redis", redis_url, "queue", "clear", "default")
    assert code == 2 and out == ""
    assert one_line(err) == "scrapeq: error: refusing to clear queue 'default' without --yes"
    answer(monkeypatch, "n\n")
    code, out, err = run(capsys, "--redis", redis_url, "queue", "clear", "default")
    assert code == 1 and q.exists()
    answer(monkeypatch, "y\n")
    code, out, err = run(capsys, "--redis", redis_url, "queue", "clear", "default")
    assert code == 0 and "cleared queue 'default'" in out and not q.exists()


def test_queue_clear_of_a_bad_or_empty_name(capsys: Any, redis_url: str) -> None:
    code, _, err = run(capsys, "--redis", redis_url, "queue", "clear", "a{b}", "--yes")
    assert code == 2 and "invalid queue name" in one_line(err)
    code, out, err = run(capsys, "--redis", redis_url, "queue", "clear", "nothing", "--yes")
    assert code == 0 and out.strip() == "queue 'nothing' has no keys: nothing to clear"


# --- dead letters: purge confirmation, list footer ----------------------------------------------


def _dead(q: Queue, n: int) -> list[str]:
    q.enqueue_many([url(1 + i % 3, i) for i in range(n)])
    jobs = q.claim(100).jobs
    q.settle_many([q.failing(j, "http_404") for j in jobs])
    return [j.id for j in jobs]


def test_dead_purge_without_a_filter_asks_or_needs_all_yes(
    capsys: Any, redis_url: str, q: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    _dead(q, 6)
    code, out, err = run(capsys, "--redis", redis_url, "dead", "purge")
    assert code == 2 and out == ""
    assert one_line(err) == (
        "scrapeq: error: refusing to purge every dead letter of queue 'default' without --all --yes"
    )
    code, out, err = run(capsys, "--redis", redis_url, "dead", "purge", "--all")
    assert code == 2 and "--all --yes" in err
    answer(monkeypatch, "n\n")
    code, out, err = run(capsys, "--redis", redis_url, "dead", "purge")
    assert code == 1 and q.status()["counts"]["dead"] == 6
    answer(monkeypatch, "y\n")
    code, out, err = run(capsys, "--redis", redis_url, "dead", "purge", "--domain", dom(1))
    assert (code, out.strip()) == (0, "purged 2 dead letters")  # a filter: no question
    code, out, err = run(capsys, "--redis", redis_url, "dead", "purge")
    assert (code, out.strip()) == (0, "purged 4 dead letters")
    assert "Purge all 4 dead letters of queue 'default'? [y/N]" in err
    _dead(q, 2)
    monkeypatch.setattr("sys.stdin", Pipe(""))
    code, out, err = run(capsys, "--redis", redis_url, "dead", "purge", "--all", "--yes")
    assert (code, out.strip()) == (0, "purged 2 dead letters")
    code, out, err = run(capsys, "--redis", redis_url, "dead", "purge", "--older-than", "0")
    assert (code, out.strip()) == (0, "purged 0 dead letters")
    code, _, err = run(capsys, "--redis", redis_url, "dead", "purge", "--all", "--domain", "x")
    assert code == 2 and "--all" in one_line(err)


def test_dead_list_footer_says_how_many_of_how_many(capsys: Any, redis_url: str, q: Queue) -> None:
    _dead(q, 5)
    code, out, _ = run(capsys, "--redis", redis_url, "dead", "list", "--limit", "2")
    assert code == 0 and "2 of 5" in out
    code, out, _ = run(capsys, "--redis", redis_url, "dead", "list", "--domain", dom(1))
    assert code == 0 and "2 of 2" in out
    code, out, _ = run(capsys, "--redis", redis_url, "dead", "list", "--limit", "2", "--json")
    assert len(json.loads(out)) == 2  # --json stays the list


# --- small checks -----------------------------------------------------------------------------


def test_worker_burst_on_an_empty_queue_says_so(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[Any] = []
    monkeypatch.setattr(
        scrapeq.interfaces.cli.workers, "run_worker_process", lambda *a: started.append(a) or 0
    )
    code, out, err = run(capsys, "--redis", redis_url, "--queue", "x", "worker", "--burst")
    assert (code, out) == (0, "")
    assert err.strip() == "scrapeq: queue 'x' is empty: nothing to do"
    assert started == []
    Queue.from_url(redis_url, settings=Settings(queue="x")).enqueue(url(1), delay=60)
    code, out, err = run(capsys, "--redis", redis_url, "--queue", "x", "worker", "--burst")
    assert code == 0 and err == "" and len(started) == 1


def test_version(capsys: Any) -> None:
    code, out, err = run(capsys, "--version")
    assert (code, out.strip(), err) == (0, f"scrapeq {version('scrapeq')}", "")


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["enqueue"], "give URLs or --file"),
        (["enqueue", "--lane", "bulk"], "give URLs or --file"),
        (["enqueue", url(1), "--payload", "[1, 2]"], "must be a JSON object, got an array"),
        (["enqueue", url(1), "--payload", '"sku"'], "must be a JSON object, got a string"),
        (["enqueue", url(1), "--payload", "null"], "--payload must be a JSON object, got null"),
        (["enqueue", url(1), "--payload", "{bad"], "--payload is not valid JSON"),
    ],
)
def test_enqueue_input_errors(capsys: Any, redis_url: str, argv: list[str], needle: str) -> None:
    code, out, err = run(capsys, "--redis", redis_url, *argv)
    assert code == 2 and out == ""
    assert needle in one_line(err)
    assert redis.Redis.from_url(redis_url).keys("sq:*") == []


def test_enqueue_payload_object(capsys: Any, redis_url: str, q: Queue) -> None:
    code, out, _ = run(capsys, "--redis", redis_url, "enqueue", url(1), "--payload", '{"a": 1}',
                       "--json")  # fmt: skip
    assert code == 0
    (job_id,) = json.loads(out)["ids"]
    info = q.job_info(job_id)
    assert info is not None and info.job.payload == {"a": 1}
