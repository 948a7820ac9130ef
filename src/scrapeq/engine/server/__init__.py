"""Reaching Redis: the redis-server launcher (``launcher``), the embedded private
server (``embedded``), ``redis_url`` to a client (``connection``), and the mapping of
Redis errors and cluster routing (``transport``).
"""
