"""The URLFrontier service (``scrapeq frontier serve``, the ``frontier`` extra).

``urlfrontier.proto`` is the published URLFrontier API 2.x (crawler-commons/url-frontier)
written for scrapeq; ``urlfrontier_pb2*.py`` are generated from it by
``scripts/gen_frontier.py`` and committed. ``crawls.py`` maps the API's names onto
queues, ``service.py`` holds the calls, ``server.py`` runs them (TLS, bearer token).
Importing this package needs grpcio and protobuf: ``pip install 'scrapeq[frontier]'``.
"""

from __future__ import annotations
