"""The public path the docs name (``from scrapeq.engine.settings import ...``); the code
lives in :mod:`scrapeq.engine.config.settings`."""

from __future__ import annotations

from scrapeq.engine.config.settings import Settings as Settings
from scrapeq.engine.config.settings import load_settings as load_settings

__all__ = ["Settings", "load_settings"]
