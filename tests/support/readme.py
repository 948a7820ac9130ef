"""The README's Python snippets, each keyed by its first line (``# name``): the tests that run
them as printed read them here."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def snippets() -> dict[str, str]:
    """Every ```python block of the README, by its first line."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    return {block.split("\n", 1)[0]: block for block in blocks}


def snippet(first: str) -> str:
    """The one snippet whose first line is ``first``."""
    return snippets()[first]
