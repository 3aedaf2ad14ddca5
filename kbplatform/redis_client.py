"""The one place that opens Redis connections (hot conversation state, health, rate limits).

Redis is a cache here: every caller must treat `RedisUnavailable` as "go to the database", never as an error
for the client.
"""

from __future__ import annotations

from functools import lru_cache

import redis
from django.conf import settings

RedisUnavailable = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


@lru_cache(maxsize=1)
def _pool(url: str) -> redis.ConnectionPool:
    return redis.ConnectionPool.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5, health_check_interval=10)


@lru_cache(maxsize=1)
def _client(url: str) -> redis.Redis:
    # One client per process and URL: a client is safe to share between threads (each command takes a connection
    # from the pool, which a forked child resets), and making one builds its reply parsers anew (a turn asked for
    # two or three).
    return redis.Redis(connection_pool=_pool(url))


def redis_connection() -> redis.Redis | None:
    """The client on the shared pool, or None when the platform runs without Redis."""
    if not settings.REDIS_URL:
        return None
    return _client(settings.REDIS_URL)


def redis_ping() -> bool:
    connection = redis_connection()
    if connection is None:
        return False
    try:
        return bool(connection.ping())
    except RedisUnavailable:
        return False
