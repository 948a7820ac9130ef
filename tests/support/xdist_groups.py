"""``--dist loadgroup`` working again under pytest 9: one process runs an ``xdist_group``.

pytest-xdist (3.8) groups the tests marked ``@pytest.mark.xdist_group("name")`` by appending
``@name`` to each one's node id in the worker (``item._nodeid = ...``); pytest 9 keeps the id in
``item._id``, so that assignment no longer changes it and every group was split over the
processes like any test (a module fixture, such as the demo's 14 s run, ran once per process).
This hook, run after xdist's, gives the id its suffix where xdist's did not. Loaded by
``tests/conftest.py``.
"""

from __future__ import annotations

import pytest
from _pytest.nodeid import coerce_node_id


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        names = {
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        }
        suffix = "@" + "_".join(sorted(names))
        if names and not item.nodeid.endswith(suffix):
            item._id = coerce_node_id(item.nodeid + suffix)
