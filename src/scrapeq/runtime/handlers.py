"""How the worker calls the user's handler: within ``handler_timeout``, on threads of its own.

A handler is user code, and user code may never return: a parser in an endless loop, a read
with no timeout. :func:`handler_caller` bounds every call that can be bounded: an async
handler is cancelled at the timeout; a sync one runs on :class:`DaemonThreads` and is
abandoned to its thread (a thread cannot be killed), or never runs when no thread was free in
time. Either way the caller gets :class:`HandlerTimeout`. A handler called inline (on the event
loop) blocks the loop while it runs, so no timer could fire: it gets none.

What a handler raises is its own error, whatever it is: ``SystemExit`` (a ``sys.exit()`` in
a parser), ``KeyboardInterrupt``, ``GeneratorExit``, or a ``CancelledError`` the worker did
not ask for reach the caller as :class:`HandlerAborted`, an ``Exception``, which the worker
retries like any handler error. Raised as they are, they ended the worker (a task raising
``SystemExit`` stops the event loop) and left the job in flight until its lease expired.

Why not the loop's executor: ``concurrent.futures.ThreadPoolExecutor`` (behind
``asyncio.to_thread``) joins its threads when the interpreter exits, and ``asyncio.run`` waits
for the default executor's threads on its way out, so one stuck call kept the process alive
after SIGTERM. :class:`DaemonThreads` runs calls on at most ``size`` daemon threads, which
never hold the exit; a call cancelled before a thread picks it up never runs; its
:meth:`~DaemonThreads.shutdown` never waits.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import inspect
import os
import queue
import sys
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from scrapeq.engine.model.job import Job
from scrapeq.errors import ConfigError
from scrapeq.runtime.deadlines import Deadlines
from scrapeq.runtime.fetch import Response

__all__ = [
    "DaemonThreads",
    "Handler",
    "HandlerAborted",
    "HandlerTimeout",
    "handler_caller",
    "import_handler",
]

#: ``handler(job, response) -> result``: sync or async.
Handler = Callable[[Job, Response], Any]

T = TypeVar("T")

_Item = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...]]


class DaemonThreads:
    """Run calls on at most ``size`` daemon threads, started when work finds none idle.

    Args:
        size: most threads (>= 1). A stuck call keeps its thread: when all are stuck, new
            calls wait in the queue (their caller's timeout is what ends the wait).
        name: thread name prefix.
    """

    def __init__(self, size: int, name: str = "scrapeq-thread") -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self.size = size
        self._name = name
        self._work: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # one permit per thread waiting for work
        self._lock = threading.Lock()
        self._started = 0

    @property
    def started(self) -> int:
        """Threads started so far."""
        return self._started

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue ``fn(*args)``; its future is cancellable until a thread starts it."""
        future: Future[T] = Future()
        self._work.put((future, fn, args))
        if not self._idle.acquire(blocking=False):
            self._maybe_start()
        return future

    def shutdown(self) -> None:
        """Ask every thread to end once idle; returns at once (stuck ones end with the process)."""
        with self._lock:
            for _ in range(self._started):
                self._work.put(None)

    def _maybe_start(self) -> None:
        with self._lock:
            if self._started >= self.size:
                return
            self._started += 1
            name = f"{self._name}-{self._started}"
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            future, fn, args = item
            del item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args)
                except BaseException as exc:  # handed to the caller, like an executor does
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del future, fn, args  # no references kept while idle
            self._idle.release()


class HandlerTimeout(Exception):
    """The handler ran past ``handler_timeout``; the message says what became of the call.

    Internal to the worker, which retries the job with the error kind ``handler_timeout``.
    """


class HandlerAborted(Exception):
    """The handler raised a ``BaseException`` that is not an ``Exception``: ``SystemExit``,
    ``KeyboardInterrupt``, ``GeneratorExit``, or a ``CancelledError`` of its own (not the
    worker cancelling the attempt). The handler's error, retried like any other.

    Internal to the worker. Attributes: ``original``, what the handler raised (also the
    ``__cause__``).
    """

    def __init__(self, original: BaseException) -> None:
        super().__init__(f"{type(original).__name__}: {original}".rstrip(": "))
        self.original = original


def handler_caller(
    handler: Handler, *, in_thread: bool, plain: bool, deadlines: Deadlines, threads: DaemonThreads
) -> Callable[[Job, Response], Awaitable[Any]]:
    """How the worker calls ``handler``: awaited, on ``threads``, or inline.

    Args:
        handler: the user's handler.
        in_thread: run a sync handler on ``threads`` (else inline, on the event loop).
        plain: the built-in handler, whose result is never awaitable (and which raises
            nothing: it is called as it is).
        deadlines: one deadline of ``handler_timeout`` seconds per awaited or threaded call.
        threads: the worker's handler threads.

    Returns:
        ``call(job, response)``, awaited; raises :class:`HandlerTimeout` past the deadline,
        :class:`HandlerAborted` for what the handler raised that is not an ``Exception``.
    """
    if inspect.iscoroutinefunction(handler):

        async def awaited(job: Job, response: Response) -> Any:
            call = handler(job, response)
            fate = lambda: _overran(deadlines, "cancelled")  # noqa: E731
            return await _guarded(_within(deadlines, call, fate))

        return awaited

    async def inline(job: Job, response: Response) -> Any:
        result = handler(job, response)
        if inspect.isawaitable(result):
            return await result
        return result

    async def threaded(job: Job, response: Response) -> Any:
        future = threads.submit(contextvars.copy_context().run, _caught, handler, job, response)

        def fate() -> str:
            if future.cancel():  # still queued: it will never run
                busy = f"handler_timeout; all {threads.size} threads busy"
                return f"no handler thread free within {deadlines.seconds:g} s ({busy})"
            return _overran(deadlines, "its thread is abandoned")

        return await _guarded(_within(deadlines, _result_of(future), fate))

    if in_thread:
        return threaded
    return _plain(handler) if plain else _guarding(inline)


def _plain(handler: Handler) -> Callable[[Job, Response], Awaitable[Any]]:
    """The built-in handler, inline and unguarded: it is ours and on the hot path."""

    async def call(job: Job, response: Response) -> Any:
        return handler(job, response)

    return call


def _guarding(
    call: Callable[[Job, Response], Awaitable[Any]],
) -> Callable[[Job, Response], Awaitable[Any]]:
    async def guarded(job: Job, response: Response) -> Any:
        return await _guarded(call(job, response))

    return guarded


def _caught(handler: Handler, job: Job, response: Response) -> Any:
    """Call a sync handler on a thread; what it raises that is not an ``Exception`` becomes
    :class:`HandlerAborted` there. (A ``GeneratorExit`` handed to the loop as it is would be
    thrown into the awaiting task, which closes its coroutines instead of raising in them.)"""
    try:
        return handler(job, response)
    except Exception:
        raise
    except BaseException as exc:
        raise HandlerAborted(exc) from exc


async def _guarded(call: Awaitable[T]) -> T:
    """Await a handler's ``call``; what it raises that is not an ``Exception`` becomes
    :class:`HandlerAborted`, except a cancellation of the worker's own (the task is being
    cancelled: a stop, a lost lease, ``max_job_time``), which stays one."""
    try:
        return await call
    except Exception:
        raise
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        raise HandlerAborted(exc) from exc
    except BaseException as exc:
        raise HandlerAborted(exc) from exc


async def _result_of(future: Future[Any]) -> Any:
    """The result of a handler run in a thread (awaited too, when it is awaitable)."""
    result = await asyncio.wrap_future(future)
    if inspect.isawaitable(result):
        return await result
    return result


async def _within(deadlines: Deadlines, call: Awaitable[T], fate: Callable[[], str]) -> T:
    """Await a handler ``call`` within a handler deadline; past it, raise HandlerTimeout
    with ``fate()``, the message saying what became of the call."""
    deadline = deadlines.start()
    try:
        with deadline:
            return await call
    except TimeoutError:
        if not deadline.fired:  # the handler's own TimeoutError
            raise
        raise HandlerTimeout(fate()) from None


def _overran(deadlines: Deadlines, fate: str) -> str:
    return f"handler still running after {deadlines.seconds:g} s (handler_timeout): {fate}"


def import_handler(spec: str) -> Handler:
    """The handler named by ``package.module:function`` (as uvicorn and Celery name apps).

    The module is imported as ``import`` would, the current directory first on the path (so
    ``handlers:parse`` finds ``./handlers.py``); ``function`` may be dotted
    (``module:Class.method``). It must be callable with ``(job, response)`` or
    ``(job, response, ctx)``.

    Raises:
        ConfigError: named ``handler``: malformed, not importable, not found, not callable or
            not callable with those arguments; the message says which.
    """
    module_name, colon, attr = spec.partition(":")
    if not colon or not module_name or not attr:
        raise ConfigError("handler", f"expected package.module:function, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # the user's module may raise anything while importing
        hint = _hint(spec)
        raise ConfigError("handler", f"cannot import {module_name!r}: {exc!r}{hint}") from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigError("handler", f"{module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError("handler", f"{spec} is not callable")
    _check_signature(spec, target)
    return target  # type: ignore[no-any-return]


def _hint(spec: str) -> str:
    """How to write a handler named as a file (``shop.py:parse``, ``./shop.py:parse``)."""
    module_name, _, attr = spec.partition(":")
    if not module_name.endswith(".py"):
        return ""
    dotted = module_name[:-3].replace("\\", "/").lstrip("./").replace("/", ".")
    return f" (name the module, not its file: --handler {dotted}:{attr})"


def _check_signature(spec: str, handler: Any) -> None:
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return  # a builtin or C callable: trust it
    for args in (("job", "response"), ("job", "response", "ctx")):
        try:
            signature.bind(*args)
            return
        except TypeError:
            continue
    raise ConfigError(
        "handler", f"{spec} must take (job, response) or (job, response, ctx): {signature}"
    )
