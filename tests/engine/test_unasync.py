"""The blocking facade is generated: ``sync_queue.py`` is what ``scripts/unasync.py`` writes
from ``async_queue.py`` (``make lint`` runs the same check)."""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from scrapeq import AsyncQueue, Queue

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
SCRIPT = ROOT / "scripts" / "unasync.py"


@pytest.fixture(scope="module")
def unasync() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_sync_queue_is_what_the_script_writes() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_check_fails_on_an_edited_sync_queue_and_writing_mends_it(
    unasync: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "sync_queue.py"
    edited = (ROOT / "src/scrapeq/engine/facades/sync_queue.py").read_text(encoding="utf-8")
    original = edited
    edited = edited.replace("def claim(self, n: int = 1", "def claim(self, n: int = 2", 1)
    assert edited != original, "the edit found nothing to change"
    target.write_text(edited, encoding="utf-8")

    assert unasync.main(["--check", "--target", str(target)]) == 1
    assert "n: int = 2" in target.read_text(encoding="utf-8")  # check mode writes nothing
    assert "differs from what scripts/unasync.py writes" in capsys.readouterr().err

    assert unasync.main(["--target", str(target)]) == 0
    assert unasync.main(["--check", "--target", str(target)]) == 0
    assert "def claim(self, n: int = 1," in target.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("async def f():\n    await g()\n", "def f():\n    g()\n"),
        (
            "async def f():\n    async with a as b:\n        async for c in b:\n            pass\n",
            "def f():\n    with a as b:\n        for c in b:\n            pass\n",
        ),
        ("x = redis.asyncio.cluster.RedisCluster\n", "x = redis.cluster.RedisCluster\n"),
        ("import redis.asyncio\n", "import redis\n"),
        ("q: AsyncQueue = async_client(u)  # AsyncQueue\n", "q: Queue = sync_client(u)  # Queue\n"),
        (
            '"""An :class:`AsyncQueue` over ``redis.asyncio``."""\n',
            '"""An :class:`Queue` over ``redis``."""\n',
        ),
        ("s = 'await asyncio'\n", "s = 'await asyncio'\n"),  # words in a string are not code
        ("AsyncQueueish = 1\n", "AsyncQueueish = 1\n"),  # whole names only
    ],
)
def test_the_rewrite_rules(unasync: ModuleType, source: str, expected: str) -> None:
    assert unasync.Unasync().rewrite(source) == expected


def test_a_difference_no_rule_covers_is_refused(unasync: ModuleType) -> None:
    code = unasync.Unasync().rewrite("async def f():\n    await asyncio.sleep(1)\n")
    assert unasync.leftovers(code) == ["line 2: asyncio"]
    with pytest.raises(SystemExit, match=r"engine/facades/shared\.py"):
        unasync.generate("import asyncio\n")


def test_a_rule_no_token_needs_is_reported(unasync: ModuleType) -> None:
    rewriter = unasync.Unasync()
    rewriter.rewrite("q = AsyncQueue(c)\n")
    unused = rewriter.unused()
    assert r"\bAsyncQueue\b" not in unused
    assert r"\bredis\.asyncio\b" in unused


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, callable)
        if not name.startswith("_")
    }


def test_the_facades_have_the_same_methods_and_parameters() -> None:
    sync, asyn = _public(Queue), _public(AsyncQueue)
    assert sync.keys() == asyn.keys()
    for name, signature in sync.items():
        assert list(signature.parameters.values()) == list(asyn[name].parameters.values()), name
        assert not inspect.iscoroutinefunction(getattr(Queue, name)), name
    awaited = {name for name in AsyncQueue.__dict__ if name in asyn and name != "from_url"}
    assert {"enqueue", "claim", "close", "settle_many"} <= awaited
    for name in awaited:
        assert inspect.iscoroutinefunction(getattr(AsyncQueue, name)), name
