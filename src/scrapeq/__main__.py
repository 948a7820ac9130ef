"""``python -m scrapeq``: the command line, as the ``scrapeq`` script."""

from scrapeq.interfaces.cli import run

run()
