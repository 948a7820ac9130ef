"""``python -m scrapeq``: the command line, as the ``scrapeq`` script."""

import sys

from scrapeq.interfaces.cli import main

sys.exit(main())
