"""The queue's schema: its stored layout brought to this code's before the scripts run.

A queue's data carries a schema number (field ``schema`` of ``sq:{Q}:meta``, and of each
partition's ``sq:{Q:i}:meta``): how many of the numbered migrations of ``lua/migrate-1.lua``
it has had. A client opening a queue calls that script on each key space until it answers
no more work (a slice a call, so a huge queue never blocks Redis for long); the other
scripts then read and write the current layout only, with no reader of an older one. A fresh
queue is stamped at the current schema by its first enqueue; a queue at a newer schema than
this code knows is refused with one line (:class:`~scrapeq.errors.ScriptError`).
"""

from __future__ import annotations

from collections.abc import Sequence

from scrapeq.engine.lua import scripts
from scrapeq.engine.lua.scripts import Many, Op

__all__ = ["SchemaOpener"]


def _migrate_all(prefixes: Sequence[str], create: bool) -> Op[None]:
    """``lua/migrate-1.lua`` on every prefix (concurrently), again on those with more work."""
    left = list(prefixes)
    while left:
        calls = tuple(scripts.migrate(create=create).on(p) for p in left)
        answers: list[tuple[int, bool]] = yield Many(calls)
        left = [p for p, (_, more) in zip(left, answers, strict=True) if more]


class SchemaOpener:
    """What one queue object has migrated: its home key space, then its partitions'.

    Each is opened once: level 1 migrated (a key space with no key is left so), level 2
    also stamped (``create``: an enqueue is about to write it).
    """

    def __init__(self, home: str, parts: Sequence[str]) -> None:
        self.home = home
        self.parts = [p for p in parts if p != home]
        self._home = 0
        self._all = 0

    def reset(self) -> None:
        """The queue was cleared: open it again before its next use."""
        self._home = self._all = 0

    def op_home(self, create: bool = False) -> Op[None]:
        """Migrate the home's key space (before the partitions check reads its meta)."""
        level = 2 if create else 1
        if self._home < level:
            yield from _migrate_all([self.home], create)
            self._home = level

    def op_all(self, create: bool = False) -> Op[None]:
        """Migrate every key space of the queue: the home first, then the partitions."""
        level = 2 if create else 1
        yield from self.op_home(create)
        if self._all < level:
            yield from _migrate_all(self.parts, create)
            self._all = level
