"""Ending a process at once: its logs and output flushed, the interpreter's finalization
skipped (:func:`exit_now`).

Once a command is done, its files are closed, its jobs settled or left to their leases and
its connections closed. What is left is the interpreter freeing every module: 0.13-0.23 s of
CPU for a worker, which a loaded machine stretches to well over a second (a worker beside 8
CPU-bound processes in sessions of their own exited 0.8-1.0 s after its last wait; one in a
clean-clone CI run, 1.5 s), past the exit bound a stopping worker promises
(``shutdown_grace`` + ``EXIT_MARGIN``). The ``scrapeq`` command and a supervisor's children
end this way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

__all__ = ["exit_now"]


def exit_now(code: int) -> NoReturn:
    """Flush the logs, stdout and stderr, then end the process with ``code`` at once."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
