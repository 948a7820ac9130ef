"""A URLFrontier client that is not ours: Node.js with ``@grpc/grpc-js`` and
``@grpc/proto-loader`` (npm, pinned by ``tests/node/package-lock.json``; ``.ci/run`` runs
``npm ci`` there) loads ``urlfrontier.proto`` and puts 10,000 URLs, drains them with leases,
acks each with its lease, and checks the stats (``tests/node/frontier_client.js``). Without
node it is skipped on a workstation and fails under CI (CI=true)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import scrapeq.interfaces.frontier as frontier_pkg

NODE_DIR = Path(__file__).resolve().parent.parent / "node"
PROTO = Path(frontier_pkg.__file__).parent / "urlfrontier.proto"


def need_node() -> str:
    """The node executable with the client's modules installed; skip (workstation) or fail
    (CI) without them."""
    node = shutil.which("node")
    why = None
    if node is None:
        why = "no node on PATH (apt-get install nodejs npm)"
    elif not (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir():
        why = f"no node_modules in {NODE_DIR} (npm ci there; .ci/run does)"
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)
    assert node is not None
    return node


def test_a_node_client_puts_drains_and_acks_10000_urls(frontier: Any) -> None:
    node = need_node()
    done = subprocess.run(
        [node, str(NODE_DIR / "frontier_client.js"), frontier.target, str(PROTO), "10000", "200"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["put"] == seen["acked"] == seen["done"] == 10_000
    assert seen["queues"] == 200


def test_a_node_client_failing_check_fails_the_test(frontier: Any) -> None:
    """The client's checks can fail: against a crawl that is not empty its size is wrong."""
    node = need_node()
    from support.frontier import Client, discovered

    client = Client(frontier.target)
    try:
        client.put([discovered("http://extra.node.test/x", crawl="NODE")])
    finally:
        client.close()
    done = subprocess.run(
        [node, str(NODE_DIR / "frontier_client.js"), frontier.target, str(PROTO), "10", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "check failed: size 11 after the put" in done.stderr
