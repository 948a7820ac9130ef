"""The Python snippets of the README and the guides (``docs/guide/*.md``), each keyed by its
first line (``# name``): the tests that run them as printed read them here. A snippet moved
from the README into a guide is still found, and still run."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: Every document whose snippets run in a test: the README, then the guides.
DOCUMENTS = (README, *sorted((ROOT / "docs" / "guide").glob("*.md")))
_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def blocks() -> list[tuple[Path, str]]:
    """Every ```python block of the documents, with the document it is in."""
    return [(doc, b) for doc in DOCUMENTS for b in _BLOCK.findall(doc.read_text(encoding="utf-8"))]


def snippets() -> dict[str, str]:
    """Every ```python block of the documents, by its first line."""
    return {block.split("\n", 1)[0]: block for _, block in blocks()}


def snippet(first: str) -> str:
    """The one snippet whose first line is ``first``."""
    return snippets()[first]
