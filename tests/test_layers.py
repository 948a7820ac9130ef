"""The package's layers: imports point one way (interfaces and demo, runtime, engine).

Each module's imports are read with :mod:`ast` (top-level and inside functions alike), so a
lazy import that points up fails here too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "scrapeq"

#: layer -> the layers it may import (besides itself and the shared ``scrapeq.errors``).
ALLOWED = {
    "engine": set(),
    "runtime": {"engine"},
    "demo": {"engine", "runtime"},
    "interfaces": {"engine", "runtime", "demo"},
    "contrib": {"engine", "runtime"},
}


def _layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "scrapeq" and parts[1] in ALLOWED else None


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[str]:
    """The absolute names of the scrapeq modules ``path`` imports."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found += [target] + [f"{target}.{a.name}" for a in node.names]
    return [m for m in found if m == "scrapeq" or m.startswith("scrapeq.")]


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if _layer_of(_module_name(p)))


def _violations(layer: str, targets: list[str]) -> list[str]:
    bad = []
    for target in targets:
        other = _layer_of(target)
        if other is None:
            # the package root re-exports the public surface; below it only errors is shared
            if target in ("scrapeq", "scrapeq.__version__") and layer == "interfaces":
                continue
            if target == "scrapeq.errors" or target.startswith("scrapeq.errors."):
                continue
            bad.append(target)
        elif other != layer and other not in ALLOWED[layer]:
            bad.append(target)
    return sorted(set(bad))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_imports_point_down(path: Path) -> None:
    layer = _layer_of(_module_name(path))
    assert layer is not None
    bad = _violations(layer, _imports(path))
    assert not bad, f"{_module_name(path)} ({layer}) imports {bad}"


def test_every_module_is_in_a_layer() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "errors.py"]
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(
        ALLOWED
    )


def test_the_checker_refuses_an_upward_import() -> None:
    assert _violations("engine", ["scrapeq.runtime.worker", "scrapeq.errors"]) == [
        "scrapeq.runtime.worker"
    ]
    assert _violations("runtime", ["scrapeq.interfaces.cli.main"]) == [
        "scrapeq.interfaces.cli.main"
    ]
    assert _violations("runtime", ["scrapeq"]) == ["scrapeq"]  # the root imports everything
    assert _violations("interfaces", ["scrapeq.runtime.worker", "scrapeq.demo.scenario"]) == []
    # relative imports are resolved before the check (sinks imports ._base)
    assert "scrapeq.runtime.sinks._base" in _imports(PACKAGE / "runtime" / "sinks" / "__init__.py")
