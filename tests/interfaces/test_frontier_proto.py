"""The URLFrontier proto and its generated modules: regenerated into a temporary folder, they
are the committed ones; the API's service, methods and field numbers are the published ones."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from scrapeq.interfaces.frontier import urlfrontier_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]

#: The published API 2.x (crawler-commons/url-frontier, API/src/main/protobuf/urlfrontier.proto).
METHODS = {
    "ListNodes": ("Empty", "StringList", False, False),
    "ListCrawls": ("Local", "StringList", False, False),
    "DeleteCrawl": ("DeleteCrawlMessage", "Long", False, False),
    "ListQueues": ("Pagination", "QueueList", False, False),
    "GetURLs": ("GetParams", "URLInfo", False, True),
    "PutURLs": ("URLItem", "AckMessage", True, True),
    "PutDiscovered": ("DiscoveredBatch", "BatchAck", True, True),
    "GetStats": ("QueueWithinCrawlParams", "Stats", False, False),
    "DeleteQueue": ("QueueWithinCrawlParams", "Long", False, False),
    "BlockQueueUntil": ("BlockQueueParams", "Empty", False, False),
    "SetActive": ("Active", "Empty", False, False),
    "GetActive": ("Local", "Boolean", False, False),
    "SetDelay": ("QueueDelayParams", "Empty", False, False),
    "SetLogLevel": ("LogLevelParams", "Empty", False, False),
    "SetCrawlLimit": ("CrawlLimitParams", "Empty", False, False),
    "GetURLStatus": ("URLStatusRequest", "URLItem", False, False),
    "ListURLs": ("ListUrlParams", "URLItem", False, True),
    "CountURLs": ("CountUrlParams", "Long", False, False),
    "PurgeURLs": ("PurgeUrlParams", "Long", False, False),
}

#: Field numbers of the messages a crawler sends and reads most.
FIELDS = {
    "URLInfo": {"url": 1, "key": 2, "metadata": 3, "crawlID": 4},
    "URLItem": {"discovered": 1, "known": 2, "ID": 3, "creation_date": 4},
    "KnownURLItem": {"info": 1, "refetchable_from_date": 2},
    "GetParams": {
        "max_urls_per_queue": 1,
        "max_queues": 2,
        "key": 3,
        "delay_requestable": 4,
        "anyCrawlID": 5,
        "crawlID": 6,
    },
    "AckMessage": {"ID": 1, "status": 2},
    "Stats": {"size": 1, "inProcess": 2, "counts": 3, "numberOfQueues": 4, "crawlID": 5},
    "Pagination": {"start": 1, "size": 2, "include_inactive": 3, "crawlID": 4, "local": 5},
    "BlockQueueParams": {"key": 1, "time": 2, "crawlID": 3, "local": 4},
    "DiscoveredBatch": {"ID": 1, "items": 2},
    "BatchAck": {"ID": 1, "statuses": 2},
}


def test_the_committed_modules_are_what_the_generator_writes() -> None:
    assert importlib.util.find_spec("grpc_tools") is not None, "install the dev extra"
    script = ROOT / "scripts" / "gen_frontier.py"
    done = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_the_service_is_the_published_one() -> None:
    service = pb.DESCRIPTOR.services_by_name["URLFrontier"]
    assert service.full_name == "urlfrontier.URLFrontier"
    found = {
        m.name: (
            m.input_type.name,
            m.output_type.name,
            m.client_streaming,
            m.server_streaming,
        )
        for m in service.methods
    }
    assert found == METHODS


def test_field_numbers_are_the_published_ones() -> None:
    for message, fields in FIELDS.items():
        descriptor = pb.DESCRIPTOR.message_types_by_name[message]
        assert {f.name: f.number for f in descriptor.fields} == fields, message
    status = pb.AckMessage.Status
    assert (status.Value("OK"), status.Value("SKIPPED"), status.Value("FAIL")) == (0, 1, 2)
