"""The engine: the Redis data model and every state change on it, in named groups.

- :mod:`.lua`: the Python<->Lua boundary: the Lua scripts, which make each change atomically,
  and the code that loads them and defines each call (``lua.scripts``);
- :mod:`.model`: the data model, pure: jobs, requests, lanes, keys, URLs, the exit pool;
- :mod:`.config`: the settings, their specs and docs, the stored bounds;
- :mod:`.ops`: the operations, generators of calls, of one partition;
- :mod:`.partitioned`: routing the operations over a queue's partitions;
- :mod:`.facades`: ``AsyncQueue`` and the generated ``Queue``, which drive the operations
  through an asyncio or a blocking redis-py client;
- :mod:`.server`: the redis-server launchers and the connection to Redis.

:mod:`.queue` is the stable import point of the queue. Nothing here fetches a page or knows
about workers: the engine imports only :mod:`scrapeq.errors` outside itself.
"""
