"""Domain listings have one vocabulary (``interfaces/views.py``) used by the CLI's tables and
the dashboard alike; the dashboard is a package of focused modules (issue 22)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from scrapeq.interfaces import render, views
from scrapeq.interfaces import web as dashboard

INTERFACES = Path(__file__).resolve().parents[2] / "src" / "scrapeq" / "interfaces"


def _info(domain: str, state: str = "closed", **figures: Any) -> dict[str, Any]:
    info = dict.fromkeys(("ready", "delayed", "inflight", "done", "dead", "trips"), 0)
    info.update(domain=domain, state=state, consecutive_failures=0, delay_ms=0, open_until=None)
    info.update(window_failures=0, window_calls=0)
    return {**info, **figures}


def test_the_cli_and_the_dashboard_take_their_sort_keys_from_views() -> None:
    assert render.DOMAIN_SORTS is views.CLI_SORTS
    assert dashboard.DOMAIN_SORTS is views.API_SORTS
    for key in (*views.CLI_SORTS, *views.API_SORTS):
        assert views.sort_field(key) in {*views.SORT_FIELDS.values()}
    assert views.sort_field("name") == views.sort_field("domain") == "domain"
    with pytest.raises(ValueError, match="unknown sort key"):
        views.sort_field("evil")


def test_the_state_rank_has_one_home() -> None:
    for module in ("render.py", *(p.name for p in (INTERFACES / "web").glob("*.py"))):
        path = INTERFACES / module if module == "render.py" else INTERFACES / "web" / module
        text = path.read_text()
        assert '"half_open": 2' not in text and "_STATE_RANK" not in text, path
    assert list(views.STATE_RANK) == ["retired", "open", "half_open", "closed"]


def test_listing_and_table_orders() -> None:
    infos = [
        _info("b.example", ready=3),
        _info("a.example", ready=3, dead=1),
        _info("c.example", "open", ready=1, open_until=5_000),
        _info("d.example", "retired"),
    ]
    cli = render.pick_domains(list(infos), sort="state")
    assert [d["domain"] for d in cli] == ["d.example", "c.example", "a.example", "b.example"]
    cli = render.pick_domains(list(infos), sort="ready")
    assert [d["domain"] for d in cli] == ["a.example", "b.example", "c.example", "d.example"]
    cli = render.pick_domains(list(infos), sort="open_until")
    assert cli[0]["domain"] == "c.example"
    with pytest.raises(ValueError):
        render.pick_domains(list(infos), sort="failure_rate")  # the dashboard's column only
    rows = [views.domain_row(i, now_ms=0) for i in infos]
    views.order_for_table(rows, "state", descending=False)
    assert [r["domain"] for r in rows] == ["d.example", "c.example", "a.example", "b.example"]
    views.order_for_table(rows, "ready", descending=True)
    assert [r["domain"] for r in rows] == ["b.example", "a.example", "c.example", "d.example"]
    views.order_for_table(rows, "open_until", descending=False)
    assert rows[0]["domain"] == "c.example" and rows[0]["open_for"] == 5.0


def _longest_function(path: Path) -> int:
    tree = ast.parse(path.read_text())
    sizes = [
        (node.end_lineno or node.lineno) - node.lineno + 1
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    return max(sizes, default=0)


def test_the_dashboard_is_a_package_of_small_modules() -> None:
    assert not (INTERFACES / "web.py").exists()
    modules = sorted((INTERFACES / "web").glob("*.py"))
    assert {p.stem for p in modules} >= {"metrics", "security", "api", "app"}
    for path in [*modules, INTERFACES / "views.py", INTERFACES / "render.py"]:
        assert len(path.read_text().splitlines()) <= 600, path
        assert _longest_function(path) <= 60, path
    assert "<!doctype html>" not in "".join(p.read_text().lower() for p in modules)
    assert (dashboard.STATIC / "login.html").is_file()
