"""--handler package.module:function: resolved like uvicorn's import strings, checked early."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from scrapeq.errors import ConfigError
from scrapeq.interfaces.cli import main
from scrapeq.runtime.handlers import import_handler

MODULE = """
def two(job, response):
    return {"n": 2}

def three(job, response, ctx):
    return None

class Parser:
    @staticmethod
    def page(job, response):
        return None

def one(job):
    return None

not_callable = 42
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "myhandlers.py").write_text(MODULE)
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    for name in ("myhandlers", "broken"):
        sys.modules.pop(name, None)


def test_handlers_resolve_relative_to_the_current_directory(project: Path) -> None:
    assert import_handler("myhandlers:two")(None, None) == {"n": 2}
    assert import_handler("myhandlers:three").__name__ == "three"
    assert import_handler("myhandlers:Parser.page").__name__ == "page"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("myhandlers", "expected package.module:function"),
        ("nosuchmodule:f", "cannot import 'nosuchmodule'"),
        ("broken:f", "boom at import"),
        ("myhandlers:missing", "has no attribute 'missing'"),
        ("myhandlers:not_callable", "is not callable"),
        ("myhandlers:one", "must take (job, response) or (job, response, ctx)"),
    ],
)
def test_bad_handlers_are_one_clear_error(project: Path, spec: str, says: str) -> None:
    with pytest.raises(ConfigError, match="handler") as caught:
        import_handler(spec)
    assert says in str(caught.value)


def test_worker_with_a_bad_handler_exits_2_before_claiming(
    project: Path, redis_url: str, capsys: Any
) -> None:
    from scrapeq.engine.queue import Queue

    q = Queue.from_url(redis_url)
    q.enqueue("https://shop-1.example.com/")
    code = main(["--redis", redis_url, "worker", "--burst", "--handler", "myhandlers:one"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert q.status()["counts"]["ready"] == 1, "nothing was claimed"
    q.close()


def test_worker_tuning_flags_reach_the_settings(redis_url: str, capsys: Any) -> None:
    """worker --request-timeout and friends: a bad value is one line, exit 2."""
    code = main(["--redis", redis_url, "worker", "--burst", "--request-timeout", "0"])
    err = capsys.readouterr().err
    assert code == 2 and "request_timeout" in err and "Traceback" not in err
    code = main(["--redis", redis_url, "worker", "--burst", "--lease", "5",
                 "--domain-concurrency", "4", "--domain-delay", "0.5"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
