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


def redis_connection() -> redis.Redis | None:
    """A client on the shared pool, or None when the platform runs without Redis."""
    if not settings.REDIS_URL:
        return None
    return redis.Redis(connection_pool=_pool(settings.REDIS_URL))


def redis_ping() -> bool:
    connection = redis_connection()
    if connection is None:
        return False
    try:
        return bool(connection.ping())
    except RedisUnavailable:
        return False
