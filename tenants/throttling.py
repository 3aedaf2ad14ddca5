"""Per-tenant rate limits, counted in Redis so every web process shares one budget per tenant.

The limit belongs to the tenant, not to a key: minting more keys does not buy more requests. The algorithm is
GCRA (the generic cell rate algorithm): one Redis key per tenant holding the "theoretical arrival time", updated
atomically by a Lua script on Redis's own clock, so web processes with skewed clocks agree, and `Retry-After` is
exact rather than "the rest of the window".

When Redis is unreachable the limiter falls back to the same algorithm in process memory instead of failing
open. Why: an outage of Redis is exactly when the database takes the hot-cache load, so a runaway client should
still be slowed down; each web process then enforces the tenant's limit on its own (the effective limit is
multiplied by the number of processes: looser, never stricter, and never an error for the client). After a
Redis failure the limiter stays on the fallback for `RATE_LIMIT_REDIS_RETRY_SECONDS`, so a dead Redis does not
add a connect timeout to every request.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from rest_framework.throttling import BaseThrottle

from kbplatform.redis_client import RedisUnavailable, redis_connection

if TYPE_CHECKING:
    from rest_framework.request import Request
    from rest_framework.views import APIView

    from tenants.models import Tenant

logger = logging.getLogger(__name__)

_PERIODS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}
_RATE_RE = re.compile(r"^\s*(\d+)\s*/\s*([a-z]+)\s*$")


@dataclass(frozen=True)
class Rate:
    """`requests` per `period_seconds` on average, up to `burst` at once."""

    requests: int
    period_seconds: float
    burst: int

    @property
    def interval_us(self) -> int:
        """Microseconds one request costs."""
        return max(1, round(self.period_seconds * 1_000_000 / self.requests))

    @property
    def tolerance_us(self) -> int:
        """How far ahead of now the budget may be spent: room for `burst` requests at once."""
        return self.interval_us * (self.burst - 1)


def rate_parse(text: str, *, burst: int | None = None) -> Rate | None:
    """`"600/min"` -> Rate; an empty string means no limit (None). The burst is capped at the count of one
    period. Raises ValueError on anything else rather than silently running without a limit."""
    if not text or not text.strip():
        return None
    match = _RATE_RE.match(text.lower())
    if not match or match.group(2) not in _PERIODS or int(match.group(1)) < 1:
        raise ValueError(f"rate limit {text!r}: use <count>/<s|min|hour>, e.g. 600/min")
    requests = int(match.group(1))
    return Rate(
        requests=requests, period_seconds=_PERIODS[match.group(2)], burst=max(1, min(burst or requests, requests))
    )


def gcra_decide(*, now_us: int, tat_us: int | None, rate: Rate) -> tuple[bool, int, int]:
    """One GCRA step, pure: (allowed, new theoretical arrival time, microseconds to wait when refused)."""
    tat = now_us if tat_us is None or tat_us < now_us else tat_us
    new_tat = tat + rate.interval_us
    allow_at = new_tat - rate.tolerance_us - rate.interval_us
    if now_us < allow_at:
        return False, tat, allow_at - now_us
    return True, new_tat, 0


# The same step as gcra_decide, run atomically inside Redis on Redis's clock. Returns {allowed, wait_us}. With
# ARGV[3] = 0 it only asks (would one more be allowed?) and spends nothing.
_GCRA_LUA = """
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local consume = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local tat = tonumber(redis.call('GET', KEYS[1]))
if tat == nil or tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - tolerance - interval
if now < allow_at then return {0, allow_at - now} end
if consume == 0 then return {1, 0} end
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1000)
return {1, 0}
"""


class _LocalLimiter:
    """The in-process fallback: GCRA over a dict, one per web process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tat: dict[str, int] = {}

    def decide(self, key: str, rate: Rate, *, consume: bool = True) -> tuple[bool, int]:
        now_us = time.monotonic_ns() // 1000
        with self._lock:
            allowed, new_tat, wait_us = gcra_decide(now_us=now_us, tat_us=self._tat.get(key), rate=rate)
            if not consume:
                return allowed, wait_us
            self._tat[key] = new_tat
            if len(self._tat) > 10_000:  # forget tenants idle for longer than their budget refills
                self._tat = {k: v for k, v in self._tat.items() if v > now_us}
        return allowed, wait_us


_local = _LocalLimiter()
_redis_down_until = 0.0
_script = None


def _redis_decide(key: str, rate: Rate, *, consume: bool = True) -> tuple[bool, int] | None:
    """The decision from Redis, or None when Redis is off or unreachable (the caller falls back)."""
    global _redis_down_until, _script
    if time.monotonic() < _redis_down_until:
        return None
    connection = redis_connection()
    if connection is None:
        return None
    try:
        if _script is None:
            _script = connection.register_script(_GCRA_LUA)
        allowed, wait_us = _script(
            keys=[key], args=[rate.interval_us, rate.tolerance_us, int(consume)], client=connection
        )
    except RedisUnavailable as exc:
        _redis_down_until = time.monotonic() + settings.RATE_LIMIT_REDIS_RETRY_SECONDS
        logger.warning("rate limiter: Redis unreachable (%s); limiting in process for now", exc)
        return None
    return bool(allowed), int(wait_us)


def tenant_rate(*, tenant_slug: str) -> Rate | None:
    """The tenant's configured rate (its own entry in RATE_LIMIT_TENANTS, else the default)."""
    text = settings.RATE_LIMIT_TENANTS.get(tenant_slug, settings.RATE_LIMIT_DEFAULT)
    return rate_parse(text, burst=settings.RATE_LIMIT_BURST)


def tenant_limit_check(*, tenant: Tenant, rate: Rate) -> tuple[bool, float]:
    """(allowed, seconds to wait) for one more request of `tenant`; never raises."""
    # The creation time makes the key unique to this tenant row even where ids are reused (SQLite after a
    # delete or a rolled-back test), so a new tenant never inherits an old one's spent budget.
    created = int(tenant.created_at.timestamp() * 1_000_000) if tenant.created_at else 0
    return _limit_decide(f"ratelimit:{tenant.pk}:{created}", rate)


def _limit_decide(name: str, rate: Rate, *, consume: bool = True) -> tuple[bool, float]:
    """(allowed, seconds to wait) for one more request against the budget `name` (under the deployment's key
    prefix): Redis when it answers, this process's limiter otherwise. With consume=False it only asks."""
    key = f"{settings.CACHES['default'].get('KEY_PREFIX', 'kb')}:{name}"
    decision = _redis_decide(key, rate, consume=consume)
    if decision is None:
        decision = _local.decide(key, rate, consume=consume)
    allowed, wait_us = decision
    return allowed, wait_us / 1_000_000


class TenantRateThrottle(BaseThrottle):
    """DRF throttle for every API view: requests with a tenant's API key count against that tenant's limit;
    requests without one (health, schema, refused logins) are not counted here."""

    def allow_request(self, request: Request, view: APIView) -> bool:
        self._wait = 0.0
        api_key = getattr(request, "auth", None)
        tenant = getattr(api_key, "tenant", None)
        if tenant is None:
            return True
        rate = tenant_rate(tenant_slug=tenant.slug)
        if rate is None:
            return True
        allowed, self._wait = tenant_limit_check(tenant=tenant, rate=rate)
        return allowed

    def wait(self) -> float | None:
        # Whole seconds, at least 1: DRF writes Retry-After as an integer and "0" would invite a retry storm.
        return float(max(1, math.ceil(self._wait))) if self._wait else None


def auth_failure_check(*, address: str) -> tuple[bool, float]:
    """Count one failed API authentication from `address`: (allowed, seconds to wait once the address's budget,
    KB_AUTH_FAILURE_RATE, is spent). Never raises; no limit when the setting is empty."""
    rate = rate_parse(settings.AUTH_FAILURE_RATE, burst=settings.AUTH_FAILURE_BURST)
    if rate is None:
        return True, 0.0
    return _limit_decide(f"authfail:{address}", rate)


def unauthenticated_check(*, address: str) -> tuple[bool, float]:
    """Count one API request from `address` that came without a valid key (none, or one refused): (allowed, seconds
    to wait once the address's budget, KB_UNAUTHENTICATED_RATE, is spent). Never raises; no limit when the setting
    is empty."""
    rate = rate_parse(settings.UNAUTHENTICATED_RATE, burst=settings.UNAUTHENTICATED_BURST)
    if rate is None:
        return True, 0.0
    return _limit_decide(f"nokey:{address}", rate)


# --- admin sign-in ---------------------------------------------------------------------------------------------------
def admin_account_key(username: str) -> str:
    """The account's name in budget keys and device cookies: a hash, so neither Redis nor a cookie holds it."""
    return hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]


def _admin_login_budgets(*, address: str, username: str, device: str | None) -> tuple[Rate | None, list[str]]:
    """The budgets an attempt answers to: the address's and the account's, or only the device's when the browser
    has signed in to this account before (`tenants.admin_login`): strangers, from elsewhere or from behind the same
    proxy, cannot spend it."""
    rate = rate_parse(settings.ADMIN_LOGIN_FAILURE_RATE, burst=settings.ADMIN_LOGIN_FAILURE_BURST)
    if device:
        return rate, [f"adminfail:device:{device}"]
    return rate, [f"adminfail:address:{address}", f"adminfail:account:{admin_account_key(username)}"]


def admin_login_wait(*, address: str, username: str, device: str | None = None) -> float:
    """Seconds before another admin sign-in may be tried from `address` for `username` (from a known `device`, if
    any); 0 when it may be now. Asks only: an attempt spends the budgets when it fails (`admin_login_failed`), so
    correct sign-ins never do."""
    rate, budgets = _admin_login_budgets(address=address, username=username, device=device)
    if rate is None:
        return 0.0
    return max(_limit_decide(name, rate, consume=False)[1] for name in budgets)


def admin_login_failed(*, address: str, username: str, device: str | None = None) -> None:
    """Spend one failed attempt from both budgets: the client address's (one machine guessing many accounts)
    and the account's (many machines guessing one account); from a known device, from the device's only."""
    rate, budgets = _admin_login_budgets(address=address, username=username, device=device)
    if rate is not None:
        for name in budgets:
            _limit_decide(name, rate)
