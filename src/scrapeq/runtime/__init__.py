"""The runtime: what runs jobs against the engine.

The worker (:mod:`.worker`) claims jobs, fetches them (:mod:`.fetch`, with :mod:`.deadlines`
and :mod:`.classify`), runs the user's handler (:mod:`.handlers`, :mod:`.follow`,
:mod:`.links`), writes results to a sink (:mod:`.sinks`) and settles each job. The supervisor
runs several worker processes; the reporter and logs tell what happens. Imports point down to
:mod:`scrapeq.engine`, never up to the interfaces.
"""
