"""The engine: the Redis data model and every state change on it.

Lua scripts (``lua/``) make each change atomically; :mod:`.scripts` loads them and defines
the operations as generators of calls; :mod:`.queue` drives those operations through a sync
or asyncio redis-py client. Nothing here fetches a page or knows about workers: the engine
imports only :mod:`scrapeq.errors` outside itself.
"""
