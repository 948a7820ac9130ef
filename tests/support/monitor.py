"""Every command a Redis server runs, those of Lua scripts included, read from ``MONITOR``:
for tests that count what a feature costs (or that it costs nothing), not time it.

Use :class:`Monitor` as ``m = Monitor(url)``, run the workload, then ``m.stop()``: the
commands between, each a list of its words (``["HSET", key, field, value]``).
"""

from __future__ import annotations

import threading

import redis

#: The command that ends a monitor's reading (sent by :meth:`Monitor.stop`).
MARK = "scrapeq-monitor-end"


class Monitor:
    """The commands Redis runs between its start and :meth:`stop`: each a list of its words."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, decode_responses=True)
        self.monitor = self.client.monitor()
        self.monitor.__enter__()  # MONITOR sent: every command from here is seen
        self.commands: list[list[str]] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            words = self.monitor.next_command()["command"].split(" ")
            if words[:2] == ["ECHO", MARK]:
                return
            self.commands.append(words)

    def stop(self) -> list[list[str]]:
        """Stop reading; the commands seen."""
        self.client.echo(MARK)
        self.thread.join(30)
        assert not self.thread.is_alive(), "the monitor never saw its end mark"
        self.monitor.__exit__()
        self.client.close()
        return self.commands


def named(commands: list[list[str]], *parts: str) -> list[list[str]]:
    """The commands with a word that contains one of ``parts``."""
    return [c for c in commands if any(p in w for w in c for p in parts)]
