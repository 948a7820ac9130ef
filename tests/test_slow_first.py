"""The slowest modules first (tests/support/slow_first.py) and the durations file behind it."""

from __future__ import annotations

from pathlib import Path

from support import slow_first

ROOT = Path(__file__).resolve().parent.parent


def test_modules_go_by_their_longest_test_and_keep_their_tests_together_in_order() -> None:
    ids = ["a.py::t1", "a.py::t2", "b.py::t1", "c.py::t1", "c.py::t2", "d.py::t1"]
    seconds = {"a.py::t2": 3.0, "c.py::t1": 2.0, "c.py::t2": 9.0}
    order = [ids[i] for i in slow_first.module_order(ids, seconds)]
    # c (9 s) before a (3 s); b and d, unrecorded, after them in their own order
    assert order == ["c.py::t1", "c.py::t2", "a.py::t1", "a.py::t2", "b.py::t1", "d.py::t1"]


def test_with_nothing_recorded_the_order_is_unchanged() -> None:
    ids = ["b.py::t", "a.py::t", "b.py::u"]
    assert [ids[i] for i in slow_first.module_order(ids, {})] == ["b.py::t", "b.py::u", "a.py::t"]


def test_the_file_is_read_with_its_comments_skipped(tmp_path: Path) -> None:
    path = tmp_path / "d.txt"
    path.write_text("# header\n\n12.50 tests/x.py::test_a[single]\n1.00 tests/y.py::t\n")
    assert slow_first.load(path) == {"tests/x.py::test_a[single]": 12.5, "tests/y.py::t": 1.0}
    assert slow_first.load(tmp_path / "missing.txt") == {}


def test_the_recorded_modules_exist() -> None:
    """A renamed module would silently lose its place: the file names only real ones."""
    recorded = slow_first.load()
    assert recorded, "tests/durations.txt names no test"
    missing = {n.split("::")[0] for n in recorded if not (ROOT / n.split("::")[0]).exists()}
    assert not missing, f"regenerate tests/durations.txt (scripts/test_durations.py): {missing}"


def test_the_script_sums_a_tests_phases_and_drops_the_group_suffix() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("td", ROOT / "scripts" / "test_durations.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (
        "15.22s setup    tests/e2e/test_demo.py::test_fetch@demo\n"
        "1.00s call     tests/e2e/test_demo.py::test_fetch@demo\n"
        "  2.50s call     tests/a.py::test_b[single]\n"
        "not a line\n"
    )
    assert module.parse(text) == {"tests/e2e/test_demo.py::test_fetch": 16.22,
                                  "tests/a.py::test_b[single]": 2.5}  # fmt: skip
