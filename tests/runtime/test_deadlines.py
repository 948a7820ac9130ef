"""scrapeq.deadlines: one timer for many equal deadlines, with asyncio.timeout()'s semantics."""

from __future__ import annotations

import asyncio
import time

import pytest

from scrapeq.runtime.deadlines import Deadline, Deadlines


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_a_block_that_overruns_raises_timeout_error_at_the_deadline() -> None:
    async def main() -> float:
        dl = Deadlines(0.1)
        started = time.monotonic()
        with pytest.raises(TimeoutError), dl.start():
            await asyncio.sleep(5)
        dl.close()
        return time.monotonic() - started

    elapsed = run(main())
    assert isinstance(elapsed, float)
    assert 0.09 <= elapsed < 1.0


def test_a_block_that_ends_in_time_is_untouched_and_the_timer_stops() -> None:
    async def main() -> None:
        dl = Deadlines(0.2)
        with dl.start():
            await asyncio.sleep(0.01)
        assert len(dl) == 0
        assert dl._timer is None  # nothing open: no task left behind
        await asyncio.sleep(0.3)  # past the old deadline: no stray cancellation arrives
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0

    run(main())


def test_only_the_slow_blocks_of_many_time_out() -> None:
    async def one(dl: Deadlines, seconds: float) -> str:
        try:
            with dl.start():
                await asyncio.sleep(seconds)
        except TimeoutError:
            return "timeout"
        return "ok"

    async def main() -> list[object]:
        dl = Deadlines(0.15)
        slow = [one(dl, 2.0) for _ in range(5)]
        fast = [one(dl, 0.004 * i) for i in range(20)]  # all well under the deadline
        out = await asyncio.gather(*slow, *fast)
        assert len(dl) == 0
        dl.close()
        return list(out)

    out = run(main())
    assert isinstance(out, list)
    assert out[:5] == ["timeout"] * 5
    assert out[5:] == ["ok"] * 20


def test_an_outside_cancel_stays_a_cancellation() -> None:
    async def main() -> None:
        dl = Deadlines(5.0)

        async def body() -> None:
            with dl.start():
                await asyncio.sleep(5)

        task = asyncio.create_task(body())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(dl) == 0
        dl.close()

    run(main())


def test_both_cancellations_pending_the_outside_one_wins() -> None:
    async def main() -> None:
        dl = Deadlines(60.0)
        opened: list[Deadline] = []

        async def body() -> None:
            with dl.start() as deadline:
                opened.append(deadline)
                await asyncio.sleep(5)

        task = asyncio.create_task(body())
        await asyncio.sleep(0)  # body runs into its sleep
        (deadline,) = opened
        deadline.expire()  # what the timer does at the deadline, now
        task.cancel()  # and someone else cancels in the same turn
        with pytest.raises(asyncio.CancelledError):
            await task
        dl.close()

    run(main())


def test_the_deadline_alone_becomes_a_timeout_and_the_task_is_not_left_cancelling() -> None:
    async def main() -> None:
        dl = Deadlines(60.0)
        opened: list[Deadline] = []

        async def body() -> int:
            with pytest.raises(TimeoutError), dl.start() as deadline:
                opened.append(deadline)
                await asyncio.sleep(5)
            task = asyncio.current_task()
            assert task is not None
            await asyncio.sleep(0)  # still runs: no cancellation is pending any more
            return task.cancelling()

        task = asyncio.create_task(body())
        await asyncio.sleep(0)
        opened[0].expire()
        assert await task == 0
        dl.close()

    run(main())


def test_a_deadline_opened_right_after_the_timer_stopped_still_fires() -> None:
    async def main() -> None:
        dl = Deadlines(0.05)
        with dl.start():
            await asyncio.sleep(0)
        # the timer was just cancelled (nothing open); a new deadline must get a new timer
        with pytest.raises(TimeoutError), dl.start():
            await asyncio.sleep(2)
        dl.close()

    run(main())


def test_close_stops_the_timer_and_open_deadlines_no_longer_fire() -> None:
    async def main() -> None:
        dl = Deadlines(0.05)

        async def body() -> str:
            with dl.start():
                await asyncio.sleep(0.2)
            return "finished"

        task = asyncio.create_task(body())
        await asyncio.sleep(0.01)
        dl.close()
        assert await task == "finished"

    run(main())


def test_start_outside_a_task_is_refused() -> None:
    with pytest.raises(RuntimeError):
        Deadlines(1.0).start()
