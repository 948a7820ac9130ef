"""The interfaces people use: the ``scrapeq`` command (:mod:`.cli`), its tables
(:mod:`.render`) and the web dashboard (:mod:`.web`). They import the runtime and the
engine; nothing below imports them.
"""
