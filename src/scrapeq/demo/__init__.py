"""The demo (``scrapeq demo``): a fleet of loopback sites, healthy and faulty
(:mod:`.fleet`), a scenario that crawls them (:mod:`.scenario`) and its report
(:mod:`.report`). It uses the public runtime and engine like any user's program.
"""
