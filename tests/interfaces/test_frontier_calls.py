"""The URLFrontier calls beyond PutURLs and GetURLs, black box over gRPC, each also with a
restart of the service in its middle: delay, crawl limit, block, PutDiscovered, SetActive."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest

from scrapeq.interfaces.frontier import urlfrontier_pb2 as pb
from support.frontier import Client, discovered, known

OK, SKIPPED = pb.AckMessage.OK, pb.AckMessage.SKIPPED


@pytest.fixture(params=["steady", "restarted"])
def bounce(request: pytest.FixtureRequest, frontier: Any) -> Any:
    def maybe() -> None:
        if request.param == "restarted":
            frontier.restart()

    return maybe


def wait_for(fclient: Client, key: str, seconds: float) -> list[pb.URLInfo]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = fclient.get(key=key, delay_requestable=30)
        if got:
            return got
        time.sleep(0.05)
    return []


def test_set_delay_spaces_a_queues_urls(fclient: Client, bounce: Any) -> None:
    fclient.stub.SetDelay(pb.QueueDelayParams(key="d.example", delay_requestable=2))
    fclient.put([discovered(f"http://d.example/{i}") for i in range(2)])
    bounce()
    first = fclient.get(key="d.example", delay_requestable=30)
    assert len(first) == 1  # one a slot
    started = time.monotonic()
    second = wait_for(fclient, "d.example", 5)
    assert len(second) == 1 and second[0].url != first[0].url
    assert time.monotonic() - started > 1.5


def test_set_delay_for_every_queue_is_refused_with_a_reason(fclient: Client) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        fclient.stub.SetDelay(pb.QueueDelayParams(delay_requestable=2))
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "domain_delay" in (caught.value.details() or "")


def test_crawl_limit_counts_completed_urls_not_queued_ones(fclient: Client, bounce: Any) -> None:
    def take() -> list[pb.URLInfo]:
        return fclient.get(key="l.example", delay_requestable=60)

    def complete(served: list[pb.URLInfo]) -> None:
        acks = fclient.put([known(s.url, 0, meta=s) for s in served])
        assert [a.status for a in acks] == [OK] * len(served)

    fclient.stub.SetCrawlLimit(pb.CrawlLimitParams(key="l.example", limit=3))
    bounce()
    acks = fclient.put([discovered(f"http://l.example/{i}") for i in range(7)])
    assert [a.status for a in acks] == [OK] * 7
    assert fclient.stats("l.example").size == 7  # every URL queued: the limit is on fetches
    first = take()
    assert len(first) == 2  # the domain's concurrency
    complete(first)
    bounce()
    last = take()
    assert len(last) == 1  # 2 completed + 1 in flight: the limit
    assert take() == []
    complete(last)
    assert take() == []  # 3 completed
    assert fclient.stats("l.example").size == 4  # the rest stay queued
    fclient.stub.SetCrawlLimit(pb.CrawlLimitParams(key="l.example", limit=4))
    assert len(take()) == 1
    fclient.stub.SetCrawlLimit(pb.CrawlLimitParams(key="l.example", limit=0))  # no limit
    assert len(take()) == 1  # the concurrency again (one in flight)


def test_block_queue_until_holds_a_queue_then_unblocks(fclient: Client, bounce: Any) -> None:
    fclient.put([discovered("http://b.example/1"), discovered("http://c.example/1")])
    until = int(time.time()) + 3600
    fclient.stub.BlockQueueUntil(pb.BlockQueueParams(key="b.example", time=until))
    bounce()
    assert fclient.get(key="b.example", delay_requestable=30) == []
    assert [u.url for u in fclient.get(delay_requestable=30)] == ["http://c.example/1"]
    fclient.stub.BlockQueueUntil(pb.BlockQueueParams(key="b.example", time=0))
    assert [u.url for u in wait_for(fclient, "b.example", 3)] == ["http://b.example/1"]


def test_block_queue_until_ends_by_itself(fclient: Client) -> None:
    fclient.put([discovered("http://e.example/1")])
    fclient.stub.BlockQueueUntil(pb.BlockQueueParams(key="e.example", time=int(time.time()) + 2))
    assert fclient.get(key="e.example", delay_requestable=30) == []
    assert [u.url for u in wait_for(fclient, "e.example", 4)] == ["http://e.example/1"]


def test_put_discovered_acks_each_batch_url_by_url(fclient: Client, bounce: Any) -> None:
    batches = [
        pb.DiscoveredBatch(
            ID="page-1",
            items=[
                pb.URLInfo(url="http://p.example/a"),
                pb.URLInfo(url="mailto:x@p.example"),
                pb.URLInfo(url="http://p.example/a"),
            ],
        ),
        pb.DiscoveredBatch(ID="page-2", items=[pb.URLInfo(url="http://p.example/b")]),
    ]
    acks = list(fclient.stub.PutDiscovered(iter(batches), timeout=30))
    assert [(a.ID, list(a.statuses)) for a in acks] == [
        ("page-1", [OK, SKIPPED, OK]),
        ("page-2", [OK]),
    ]
    bounce()
    assert fclient.stats("p.example").size == 2


def test_set_active_false_serves_nothing_and_still_takes_urls(fclient: Client) -> None:
    fclient.stub.SetActive(pb.Active(state=False))
    assert fclient.stub.GetActive(pb.Local()).state is False
    assert [a.status for a in fclient.put([discovered("http://a.example/1")])] == [OK]
    assert fclient.get(delay_requestable=30) == []
    fclient.stub.SetActive(pb.Active(state=True))
    assert len(fclient.get(delay_requestable=30)) == 1


def test_a_long_stream_is_acked_in_order_under_a_small_bound(
    frontier_loop: Any, redis_url: str
) -> None:
    from scrapeq.engine.config.settings import Settings
    from support.frontier import FrontierProcess

    service = FrontierProcess(frontier_loop, redis_url, Settings(), max_unacked=4)
    client = Client(service.target)
    try:
        items = [discovered(f"http://s{i % 7}.example/{i}") for i in range(600)]
        acks = client.put(items)
        assert [a.ID for a in acks] == [f"http://s{i % 7}.example/{i}" for i in range(600)]
        assert {a.status for a in acks} == {OK}
        assert client.stats().size == 600
    finally:
        client.close()
        service.close()


def test_list_nodes_crawls_and_count(fclient: Client, frontier: Any) -> None:
    assert list(fclient.stub.ListNodes(pb.Empty()).values) == [f"127.0.0.1:{frontier.port}"]
    fclient.put([discovered("http://n.example/1"), discovered("http://m.example/1", crawl="X")])
    assert fclient.stub.CountURLs(pb.CountUrlParams()).value == 1
    assert fclient.stub.CountURLs(pb.CountUrlParams(crawlID="X", key="m.example")).value == 1
    assert fclient.stub.CountURLs(pb.CountUrlParams(crawlID="X", filter="m.ex")).value == 1
    assert fclient.stub.CountURLs(pb.CountUrlParams(filter="m.ex")).value == 0


def test_get_url_status_says_when_a_url_is_due(fclient: Client, bounce: Any) -> None:
    later = int(time.time()) + 3600

    fclient.put([known("http://g.example/later", later), discovered("http://g.example/now")])
    bounce()
    item = fclient.stub.GetURLStatus(pb.URLStatusRequest(url="http://g.example/later"))
    assert item.known.info.url == "http://g.example/later"
    assert abs(item.known.refetchable_from_date - later) <= 1
    (served,) = fclient.get(key="g.example", delay_requestable=60)
    item = fclient.stub.GetURLStatus(pb.URLStatusRequest(url=served.url, key="g.example"))
    assert abs(item.known.refetchable_from_date - (time.time() + 60)) <= 3  # its lease's end
    with pytest.raises(grpc.RpcError) as caught:
        fclient.stub.GetURLStatus(pb.URLStatusRequest(url="http://g.example/unknown"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_list_urls_pages_through_queued_and_leased_urls(fclient: Client, bounce: Any) -> None:
    fclient.put([discovered(f"http://q.example/{i}") for i in range(5)])
    fclient.put([discovered("http://other.example/Z")])
    fclient.get(key="q.example", delay_requestable=60)  # some leased: still listed
    bounce()

    def listed(**params: Any) -> list[str]:
        return [i.known.info.url for i in fclient.stub.ListURLs(pb.ListUrlParams(**params))]

    assert sorted(listed(key="q.example")) == [f"http://q.example/{i}" for i in range(5)]
    assert len(listed()) == 6
    assert len(listed(key="q.example", start=2, size=2)) == 2
    assert listed(filter="/z", ignoreCase=True) == ["http://other.example/Z"]
    assert listed(filter="/z") == []
