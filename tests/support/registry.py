"""The domain registry as the tests read and damage it: the domains a queue's bucket hashes
hold, and a queue turned back into the layout written before it had buckets."""

from __future__ import annotations

import redis

from scrapeq.engine.queue import Queue


def registered(client: redis.Redis, q: Queue) -> dict[str, int]:
    out: dict[str, int] = {}
    for key in q.keys.registry_keys:
        out.update({d: int(n) for d, n in client.hgetall(key).items()})
    return out


def as_written_before(client: redis.Redis, q: Queue) -> dict[str, int]:
    """Turn the queue's registry into the layout of a queue written before it had buckets
    (and before schemas: no ``schema`` in its meta). Only a queue object made after this
    call opens it again (an object migrates once, when it first talks to the queue)."""
    before = registered(client, q)
    for d, enq in before.items():
        client.sadd(q.keys.domains, d)
        client.hset(q.keys.domain(d), "enq", enq)
    client.delete(*q.keys.registry_keys, q.keys.domain_count, q.keys.registry_index)
    client.hdel(q.keys.meta, "schema")
    return before
