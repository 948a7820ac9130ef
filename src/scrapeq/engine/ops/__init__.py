"""The operations (generators of calls) of one partition and their pieces: the core,
argument checks and reply shaping (``oputil``), settlement builders, typed results,
batch ``prepare``, read-only listings, status shaping, and the audit.
"""
