"""The queue's data model, pure (no I/O): jobs and requests, lanes, the Redis keys,
de-duplication and the seen-set, target URLs and redaction, the exit pool.
"""
