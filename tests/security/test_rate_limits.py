"""Per-tenant rate limits: GCRA maths (pure), enforcement through Redis with Retry-After, one budget per
tenant shared by its keys, and the in-process fallback when Redis does not answer."""

import pytest
from django.test import override_settings

from tenants import throttling
from tenants.throttling import Rate, gcra_decide, rate_parse
from tests.conftest import _client_for
from tests.services import free_port

SECOND = 1_000_000


def test_rate_parse():
    assert rate_parse("600/min") == Rate(requests=600, period_seconds=60, burst=600)
    assert rate_parse(" 5 / s ", burst=2) == Rate(requests=5, period_seconds=1, burst=2)
    assert rate_parse("10/hour").period_seconds == 3600
    assert rate_parse("10/s", burst=200).burst == 10
    assert rate_parse("") is None
    for bad in ("600", "0/min", "ten/min", "5/fortnight", "-1/s"):
        with pytest.raises(ValueError, match="use <count>"):
            rate_parse(bad)


def test_gcra_allows_the_burst_then_one_request_per_interval():
    rate = Rate(requests=10, period_seconds=1, burst=3)  # one every 100 ms, three at once
    now, tat = 5 * SECOND, None
    for _ in range(3):
        allowed, tat, wait = gcra_decide(now_us=now, tat_us=tat, rate=rate)
        assert allowed and wait == 0
    allowed, tat_after, wait = gcra_decide(now_us=now, tat_us=tat, rate=rate)
    assert not allowed and wait == 100_000 and tat_after == tat  # a refusal spends nothing
    assert gcra_decide(now_us=now + wait - 1, tat_us=tat, rate=rate)[0] is False
    assert gcra_decide(now_us=now + wait, tat_us=tat, rate=rate)[0] is True
    # A long pause refills the burst but never beyond it.
    later = now + 60 * SECOND
    results = []
    for _ in range(4):
        allowed, tat, _ = gcra_decide(now_us=later, tat_us=tat, rate=rate)
        results.append(allowed)
    assert results == [True, True, True, False]


@pytest.fixture
def tight_limit(redis_available):
    throttling._redis_down_until = 0.0
    with override_settings(RATE_LIMIT_DEFAULT="3/min", RATE_LIMIT_BURST=3, RATE_LIMIT_TENANTS={}):
        yield


def test_fourth_request_in_a_minute_is_429_with_retry_after(tight_limit, api_client, other_api_client):
    statuses = [api_client.get("/api/v1/whoami/").status_code for _ in range(3)]
    assert statuses == [200, 200, 200]
    refused = api_client.get("/api/v1/whoami/")
    assert refused.status_code == 429
    retry_after = int(refused["Retry-After"])
    assert 15 <= retry_after <= 21  # one request every 20 s
    assert refused.json()["extra"]["retry_after_seconds"] == retry_after
    assert "throttled" in refused.json()["message"].lower()
    # Another tenant has its own budget.
    assert other_api_client.get("/api/v1/whoami/").status_code == 200


def test_keys_of_one_tenant_share_its_budget(tight_limit, api_client, tenant):
    second_key = _client_for(tenant)
    assert [api_client.get("/api/v1/whoami/").status_code for _ in range(2)] == [200, 200]
    assert second_key.get("/api/v1/whoami/").status_code == 200
    assert second_key.get("/api/v1/whoami/").status_code == 429


def test_per_tenant_override(tight_limit, api_client, tenant, other_api_client, other_tenant):
    with override_settings(RATE_LIMIT_TENANTS={tenant.slug: "100/min"}, RATE_LIMIT_BURST=10):
        assert {api_client.get("/api/v1/whoami/").status_code for _ in range(6)} == {200}
        assert [other_api_client.get("/api/v1/whoami/").status_code for _ in range(4)] == [200, 200, 200, 429]


def test_requests_without_a_tenant_are_not_counted(tight_limit, db, client):
    assert {client.get("/api/schema/").status_code for _ in range(5)} == {200}


def test_redis_down_falls_back_to_in_process_limits_without_errors(db, api_client):
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    throttling._redis_down_until = 0.0
    try:
        with override_settings(REDIS_URL=dead_redis, RATE_LIMIT_DEFAULT="3/min", RATE_LIMIT_BURST=3):
            statuses = [api_client.get("/api/v1/whoami/").status_code for _ in range(4)]
            assert statuses == [200, 200, 200, 429]
            assert throttling._redis_down_until > 0  # the breaker is open: Redis is not asked on every request
    finally:
        throttling._redis_down_until = 0.0


def test_limit_off_when_empty(api_client):
    with override_settings(RATE_LIMIT_DEFAULT="", RATE_LIMIT_BURST=1):
        assert {api_client.get("/api/v1/whoami/").status_code for _ in range(5)} == {200}


# --- failed authentications, per client address ------------------------------------------------------------------
def test_failed_authentications_past_the_budget_are_429_and_a_valid_key_still_works(redis_available, api_client):
    import uuid

    from rest_framework.test import APIClient

    throttling._redis_down_until = 0.0
    attacker = f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.7"  # an address no other test uses
    bad = APIClient(REMOTE_ADDR=attacker)
    bad.credentials(HTTP_AUTHORIZATION="Api-Key kb_nothing_wrongwrongwrong")
    with override_settings(AUTH_FAILURE_RATE="6/min", AUTH_FAILURE_BURST=3):
        statuses = [bad.get("/api/v1/whoami/").status_code for _ in range(4)]
        assert statuses == [401, 401, 401, 429]
        refused = bad.get("/api/v1/whoami/")
        assert refused.status_code == 429 and 5 <= int(refused["Retry-After"]) <= 11  # one attempt every 10 s
        assert "failed authentications" in refused.json()["message"] and "not valid" in refused.json()["message"]
        # Another address has its own budget, and a valid key from the refused address is not held back.
        other = APIClient(REMOTE_ADDR=f"{attacker}1")
        other.credentials(HTTP_AUTHORIZATION="Api-Key kb_nothing_wrongwrongwrong")
        assert other.get("/api/v1/whoami/").status_code == 401
        api_client.defaults["REMOTE_ADDR"] = attacker
        assert api_client.get("/api/v1/whoami/").status_code == 200


def test_an_auth_failure_rate_that_does_not_parse_stops_the_start(settings):
    from django.core.exceptions import ImproperlyConfigured

    from tenants.apps import rate_limits_validate

    settings.AUTH_FAILURE_RATE = "many"
    with pytest.raises(ImproperlyConfigured, match="KB_AUTH_FAILURE_RATE"):
        rate_limits_validate()


# --- requests without a key, per client address -----------------------------------------------------------------
def test_requests_without_a_key_past_the_address_budget_are_429_and_a_valid_key_still_works(
    redis_available, api_client
):
    """A client sending no key at all spends no auth-failure budget (nothing failed), but it may not hammer the API
    either: requests without a valid key answer to a budget of their own per client address."""
    import uuid

    from rest_framework.test import APIClient

    throttling._redis_down_until = 0.0
    address = f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.9"  # an address no other test uses
    keyless = APIClient(REMOTE_ADDR=address)
    with override_settings(UNAUTHENTICATED_RATE="6/min", UNAUTHENTICATED_BURST=3):
        statuses = [keyless.get("/api/v1/whoami/").status_code for _ in range(4)]
        assert statuses == [401, 401, 401, 429]
        refused = keyless.get("/api/v1/conversations/")
        assert refused.status_code == 429 and 5 <= int(refused["Retry-After"]) <= 11  # one request every 10 s
        assert "without a valid API key" in refused.json()["message"]
        assert refused.json()["extra"]["retry_after_seconds"] == int(refused["Retry-After"])
        # A wrong key from the same address is held back too: it has no valid key either.
        wrong = APIClient(REMOTE_ADDR=address)
        wrong.credentials(HTTP_AUTHORIZATION="Api-Key kb_nothing_wrongwrongwrong")
        assert wrong.get("/api/v1/whoami/").status_code == 429
        # Another address has its own budget, and a valid key from the refused address is not held back.
        assert APIClient(REMOTE_ADDR=f"{address}1").get("/api/v1/whoami/").status_code == 401
        api_client.defaults["REMOTE_ADDR"] = address
        assert api_client.get("/api/v1/whoami/").status_code == 200
        # Health and the schema take no key and are not API key requests: not counted.
        assert {keyless.get("/api/schema/").status_code for _ in range(3)} == {200}


def test_an_unauthenticated_rate_that_does_not_parse_stops_the_start(settings):
    from django.core.exceptions import ImproperlyConfigured

    from tenants.apps import rate_limits_validate

    settings.UNAUTHENTICATED_RATE = "lots"
    with pytest.raises(ImproperlyConfigured, match="KB_UNAUTHENTICATED_RATE"):
        rate_limits_validate()
