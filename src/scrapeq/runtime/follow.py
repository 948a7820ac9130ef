"""Follow-ups: the links a handler (or a crawl's link extractor) asks to enqueue.

A handler gets a :class:`HandlerContext` as its third argument, when it takes one, and calls
``ctx.follow(url)``; it may also return or yield :class:`Follow` items beside its result. With
revisits, it may say what its page's content is the same two ways (``ctx.content(...)``, or a
:class:`Content` item).
:class:`FollowPolicy` turns them into job specs: each link is resolved against the page's
final URL, validated, checked against the crawl's scope, URL patterns and depth, and given the
parent's depth plus one. The specs travel in the parent's settlement and are enqueued by the
same script call that settles the parent (``lua/settle-1.lua``): a crash never acks a parent
without its children, and the seen-set drops what a retried parent asks for again.

An invalid or out-of-scope link is counted and skipped: it never fails its parent.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapeq.engine.lua.scripts import EnqueueSpec
from scrapeq.engine.model.job import Job
from scrapeq.engine.model.request import Request
from scrapeq.engine.model.urls import UrlFilter, in_scope
from scrapeq.errors import ConfigError, InvalidURL, PayloadTooLarge
from scrapeq.runtime.links import resolve_link

if TYPE_CHECKING:
    from scrapeq.engine.queue import _QueueCore
    from scrapeq.runtime.fetch import Response

__all__ = [
    "BodyStore",
    "Content",
    "Follow",
    "FollowPolicy",
    "Handled",
    "HandlerContext",
    "LinkCounts",
    "adapt_handler",
    "split_result",
]


@dataclass(frozen=True, slots=True)
class Follow:
    """A link to enqueue as a follow-up of the job being handled.

    Attributes:
        url: absolute, or relative to the page's final URL; or a
            :class:`~scrapeq.engine.model.request.Request` (its URL resolved the same way) for a
            child that sends a method, headers, a body, cookies or meta.
        lane: the child's lane (default: the parent's).
        payload: the child's JSON payload.
        delay: seconds before the child is eligible.
        max_attempts: the child's attempt budget (default: the setting).
    """

    url: str | Request
    lane: str | None = None
    payload: Any = None
    delay: float = 0.0
    max_attempts: int | None = None


@dataclass(frozen=True, slots=True)
class Content:
    """What a handler says of its page's content, for revisits (``revisit = on``): returned
    or yielded beside its result (as :class:`Follow` is), or said with
    :meth:`HandlerContext.content`. The settle script decides from it whether the page
    changed since its last visit (``lua/includes/revisit.lua``), which its schedule learns
    from and its results line says (``changed``).

    Attributes:
        signature: what stands for the page's content, text or bytes (say the price and the
            stock, without the rotating ad or the timestamp): its 64-bit hash is compared
            with the one stored at the page's last visit instead of the body's, so the page
            changed only when this did. None: the body's hash.
        changed: ``False``: unchanged, whatever the signature; ``True``: changed; None (the
            default): decided by comparing the signatures.
    """

    signature: str | bytes | None = None
    changed: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.signature, str | bytes | None):
            raise TypeError(f"Content signature: text or bytes, not {type(self.signature)}")
        if not isinstance(self.changed, bool | None):
            raise TypeError(f"Content changed: True, False or None, not {self.changed!r}")


class HandlerContext:
    """What a handler taking three arguments gets beside the job and the response.

    Attributes:
        job: the job being handled.
        response: its response.
        follows: the follow-ups asked for so far.
        content_said: what :meth:`content` said of the page (None: nothing).
    """

    __slots__ = ("content_said", "follows", "job", "response")

    def __init__(self, job: Job, response: Response) -> None:
        self.job = job
        self.response = response
        self.follows: list[Follow] = []
        self.content_said: Content | None = None

    def content(self, *, signature: str | bytes | None = None, changed: bool | None = None) -> None:
        """Say what the page's content is, for revisits (see :class:`Content`): a
        ``signature`` standing for it (say ``ctx.content(signature=price)``), or
        ``changed=False`` for a page that did not change whatever its body. The last call
        stands; a :class:`Content` the handler returns stands over it."""
        self.content_said = Content(signature, changed)

    def follow(
        self,
        url: str | Request,
        *,
        lane: str | None = None,
        payload: Any = None,
        delay: float = 0.0,
        max_attempts: int | None = None,
    ) -> None:
        """Enqueue ``url`` when this job is settled done (see :class:`Follow`)."""
        self.follows.append(Follow(url, lane, payload, delay, max_attempts))


def split_result(value: Any) -> tuple[Any, list[Follow], Content | None]:
    """A handler's return value without its :class:`Follow` and :class:`Content` items,
    those Follow items, and the last Content.

    A single Follow (or Content) is that with no result; a list or tuple gives up its Follow
    and Content items, and what is left is the result (its only item when one is left, None
    when none).
    """
    if isinstance(value, Follow):
        return None, [value], None
    if isinstance(value, Content):
        return None, [], value
    if not isinstance(value, list | tuple):
        return value, [], None
    items = [v for v in value if isinstance(v, Follow | Content)]
    if not items:
        return value, [], None
    rest = [v for v in value if not isinstance(v, Follow | Content)]
    said = [v for v in items if isinstance(v, Content)]
    follows = [v for v in items if isinstance(v, Follow)]
    return (rest[0] if len(rest) == 1 else rest or None), follows, (said[-1] if said else None)


@dataclass
class LinkCounts:
    """What became of one job's follow-ups before the queue saw them (in its result line,
    written before the page is settled).

    Attributes:
        asked: the links the page gave (and the handler's follow-ups).
        offered: those sent to the queue with the page's settlement; the queue then makes a
            job of each new one, and counts what it did with them (``links_queued``,
            ``links_seen``, ``links_over_max_pages`` in ``Queue.figures``).
        skipped: the others, by reason (scope, depth, scheme...).
    """

    asked: int = 0
    offered: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        # "queued" is the name this count had: kept for readers of earlier lines
        return {"asked": self.asked, "offered": self.offered, "queued": self.offered,
                "skipped": dict(self.skipped)}  # fmt: skip


class FollowPolicy:
    """Scope, URL patterns and depth of a crawl; turns follow-ups into job specs.

    Args:
        queue: the queue whose ``prepare`` validates each link (its settings hold ``scope``,
            ``allow``, ``deny`` and ``max_depth``).
    """

    def __init__(self, queue: _QueueCore) -> None:
        s = queue.settings
        self._queue = queue
        self.scope = s.scope
        self.max_depth = s.max_depth
        self._filter = UrlFilter(allow=s.allow, deny=s.deny) if s.allow or s.deny else None

    def specs(
        self,
        job: Job,
        base_url: str,
        follows: Iterable[Follow],
        skipped: Mapping[str, int] | None = None,
    ) -> tuple[list[EnqueueSpec], LinkCounts | None]:
        """The specs to enqueue for ``job``'s follow-ups, and what became of each (None when
        there was nothing to follow; ``skipped``: links the page's extraction skipped)."""
        if not follows and not skipped:
            return [], None
        counts = LinkCounts(skipped=dict(skipped or {}))
        out: list[EnqueueSpec] = []
        depth = job.depth + 1
        for follow in follows:
            counts.asked += 1
            reason = self._refusal(job, base_url, follow, depth)
            if isinstance(reason, str):
                counts.skip(reason)
                continue
            out.append(reason)
        counts.offered = len(out)
        return out, counts

    def _refusal(self, job: Job, base: str, follow: Follow, depth: int) -> str | EnqueueSpec:
        """Why the follow-up is skipped, or its spec."""
        if self.max_depth is not None and depth > self.max_depth:
            return "too_deep"
        asked = follow.url
        url = resolve_link(base, asked.url if isinstance(asked, Request) else asked)
        if url is None:
            return "invalid"
        if not in_scope(url, job.url, self.scope):
            return "out_of_scope"
        if self._filter is not None and not self._filter.allows(url):
            return "filtered"
        target = dataclasses.replace(asked, url=url) if isinstance(asked, Request) else url
        try:
            spec = self._queue.prepare(
                target,
                lane=follow.lane or job.lane,
                payload=follow.payload,
                delay=follow.delay,
                max_attempts=follow.max_attempts,
                unique="seen",
            )
        except InvalidURL:
            return "invalid"
        except (ConfigError, PayloadTooLarge):
            return "bad_follow"
        return spec.child_of(job.id, depth, job.url)


@dataclass(frozen=True, slots=True)
class Handled:
    """What an adapted handler answers: its result, the job specs of its follow-ups, what
    became of them (None when it asked for none), where the body was stored (if it was), and
    what the handler said of the page's content (:class:`Content`; None: nothing).
    """

    result: Any
    follow: list[EnqueueSpec]
    links: LinkCounts | None = None
    body_path: str | None = None
    content: Content | None = None


#: ``finish(job, response, result, follows) -> Handled``: the worker's part after the
#: handler (follow-ups, the stored body), run where the handler runs.
Finish = Callable[[Job, "Response", Any, list[Follow]], Handled]


def takes_context(handler: Callable[..., Any]) -> bool:
    """Whether ``handler`` takes a third positional argument (the :class:`HandlerContext`)."""
    try:
        params = list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: called with two
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind is p.VAR_POSITIONAL for p in params)


def adapt_handler(handler: Callable[..., Any], finish: Finish) -> Callable[[Job, Response], Any]:
    """``handler`` as ``(job, response) -> Handled``: given a context when it takes one, its
    generator (sync or async) consumed, its Follow items split from its result and turned
    into job specs by ``finish``.

    A sync handler stays sync (so it runs on the worker's threads, generator and ``finish``
    included); an async one stays async.
    """
    with_context = takes_context(handler)

    def call(job: Job, response: Response) -> tuple[HandlerContext, Any]:
        ctx = HandlerContext(job, response)
        return ctx, handler(job, response, ctx) if with_context else handler(job, response)

    if inspect.isasyncgenfunction(handler):

        async def agen(job: Job, response: Response) -> Handled:
            ctx, items = call(job, response)
            return _handled(ctx, [item async for item in items], finish)

        return agen
    if inspect.iscoroutinefunction(handler):

        async def coro(job: Job, response: Response) -> Handled:
            ctx, awaitable = call(job, response)
            return _handled(ctx, await awaitable, finish)

        return coro

    def sync(job: Job, response: Response) -> Any:
        ctx, value = call(job, response)
        if inspect.isawaitable(value):  # a sync callable that returns a coroutine

            async def later() -> Handled:
                return _handled(ctx, await value, finish)

            return later()  # awaited by the caller (scrapeq.handlers), on the loop
        if inspect.isgenerator(value):
            value = list(value)
        return _handled(ctx, value, finish)

    return sync


def _handled(ctx: HandlerContext, value: Any, finish: Finish) -> Handled:
    result, follows, said = split_result(value)
    handled = finish(ctx.job, ctx.response, result, ctx.follows + follows)
    content = said or ctx.content_said
    return handled if content is None else dataclasses.replace(handled, content=content)


class BodyStore:
    """Response bodies kept content-addressed: ``DIR/ab/abcdef...`` (SHA-256 in hex).

    The same body is written once; a write goes to a temporary file renamed into place, so a
    reader never sees half a body.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = os.fspath(folder)

    def put(self, body: bytes) -> str:
        """Store ``body``; answers its path."""
        digest = hashlib.sha256(body).hexdigest()
        sub = os.path.join(self.folder, digest[:2])
        path = os.path.join(sub, digest)
        if os.path.exists(path):
            return path
        os.makedirs(sub, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=sub, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        return path
