"""The URLFrontier calls that go over a crawl's URLs, black box over gRPC, each also with a
restart of the service in its middle: CountURLs with its filter, ListURLs past a page of
1,000, PurgeURLs, and GetURLStatus of a URL completed."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest

from scrapeq.interfaces.frontier import urlfrontier_pb2 as pb
from support.frontier import Client, discovered, known

OK, FAIL = pb.AckMessage.OK, pb.AckMessage.FAIL


@pytest.fixture(params=["steady", "restarted"])
def bounce(request: pytest.FixtureRequest, frontier: Any) -> Any:
    def maybe() -> None:
        if request.param == "restarted":
            frontier.restart()

    return maybe


def count(fclient: Client, **params: Any) -> int:
    return int(fclient.stub.CountURLs(pb.CountUrlParams(**params)).value)


def listed(fclient: Client, **params: Any) -> list[str]:
    return [i.known.info.url for i in fclient.stub.ListURLs(pb.ListUrlParams(**params))]


def test_count_urls_filters_as_list_urls_does(fclient: Client, bounce: Any) -> None:
    fclient.put([discovered(f"http://c.example/Page{i}") for i in range(5)])
    fclient.put([discovered("http://c.example/other"), discovered("http://d.example/page9")])
    fclient.put([known("http://c.example/page-later", int(time.time()) + 3600)])
    fclient.get(key="c.example", delay_requestable=60)  # leased ones are counted too
    bounce()
    assert count(fclient) == 8
    assert count(fclient, filter="page") == 2  # case-sensitive by default
    assert count(fclient, filter="page", ignoreCase=True) == 7
    assert count(fclient, filter="page", ignoreCase=True, key="c.example") == 6
    assert count(fclient, filter="nothing") == 0
    for params in ({"filter": "page"}, {"filter": "PAGE", "ignoreCase": True}):
        assert len(listed(fclient, **params)) == count(fclient, **params)


def test_list_urls_pages_past_a_thousand(fclient: Client, bounce: Any) -> None:
    urls = [f"http://big.example/{i}" for i in range(1_300)]
    for start in range(0, len(urls), 500):
        fclient.put([discovered(u) for u in urls[start : start + 500]])
    fclient.put([known(f"http://big.example/later{i}", int(time.time()) + 3600) for i in range(3)])
    bounce()
    seen: list[str] = []
    for start in range(0, 1_400, 400):
        seen += listed(fclient, key="big.example", start=start, size=400)
    assert len(seen) == len(set(seen)) == 1_303 == count(fclient, key="big.example")
    assert seen[-3:] == [f"http://big.example/later{i}" for i in range(3)]  # delayed last
    assert listed(fclient, start=1_303) == []


def test_purge_urls_removes_a_queues_urls_leased_ones_too(fclient: Client, bounce: Any) -> None:
    fclient.put([discovered(f"http://p.example/{i}") for i in range(4)])
    fclient.put([discovered(f"http://keep.example/{i}") for i in range(2)])
    fclient.put([known("http://p.example/later", int(time.time()) + 3600)])
    (leased, *_) = fclient.get(key="p.example", delay_requestable=60)
    purge = fclient.stub.PurgeURLs
    assert purge(pb.PurgeUrlParams(key="p.example", days=1)).value == 0  # all stored today
    bounce()
    assert purge(pb.PurgeUrlParams(key="p.example")).value == 5
    assert count(fclient, key="p.example") == 0 and count(fclient) == 2
    assert fclient.stats().inProcess == 0
    # the lease of a URL purged is over: its update is refused, as an expired one is
    assert [a.status for a in fclient.put([known(leased.url, 0, meta=leased)])] == [FAIL]
    assert purge(pb.PurgeUrlParams()).value == 2  # the whole crawl
    assert count(fclient) == 0
    with pytest.raises(grpc.RpcError) as caught:
        purge(pb.PurgeUrlParams(crawlID="no such crawl"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_get_url_status_knows_a_completed_url(fclient: Client, bounce: Any) -> None:
    fclient.put([discovered("http://s.example/done"), discovered("http://s.example/again")])
    served = {u.url: u for u in fclient.get(key="s.example", delay_requestable=60)}
    assert len(served) == 2
    later = int(time.time()) + 3600
    done, again = served["http://s.example/done"], served["http://s.example/again"]
    acks = fclient.put([known(done.url, 0, meta=done), known(again.url, later, meta=again)])
    assert [a.status for a in acks] == [OK, OK]
    bounce()
    item = fclient.stub.GetURLStatus(pb.URLStatusRequest(url=done.url))
    assert (item.known.info.url, item.known.info.key) == (done.url, "s.example")
    assert item.known.refetchable_from_date == 0  # completed: never again
    item = fclient.stub.GetURLStatus(pb.URLStatusRequest(url=again.url, key="s.example"))
    assert item.known.refetchable_from_date == later  # known, with its next refetch date
    with pytest.raises(grpc.RpcError) as caught:
        fclient.stub.GetURLStatus(pb.URLStatusRequest(url="http://s.example/never"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_the_walk_covers_every_partition(redis_url: str, frontier_loop: Any) -> None:
    from scrapeq.engine.config.settings import Settings
    from support.frontier import FrontierProcess

    settings = Settings(redis_url=redis_url, partitions=3)
    service = FrontierProcess(frontier_loop, redis_url, settings, prefix="parts.")
    client = Client(service.target)
    try:
        client.put([discovered(f"http://p{i % 7}.example/{i}") for i in range(60)])
        client.put([known(f"http://p{i}.example/later", int(time.time()) + 3600) for i in range(7)])
        client.get(max_queues=7, max_urls_per_queue=1, delay_requestable=60)
        assert count(client) == 67 == count(client, filter=".example/")
        assert len(set(listed(client, size=100))) == 67
        assert count(client, filter="/later") == 7 == len(listed(client, filter="/later"))
        assert client.stub.PurgeURLs(pb.PurgeUrlParams(key="p3.example")).value == 10
        assert client.stub.PurgeURLs(pb.PurgeUrlParams()).value == 57
        assert count(client) == 0
    finally:
        client.close()
        service.close()
