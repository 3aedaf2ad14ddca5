"""Admin sign-in: failed attempts spend a budget per client address and per account; once either is spent the form
refuses before checking the password; every failure and refusal is logged. Admin 403 pages are logged too."""

from __future__ import annotations

import json
import uuid

import pytest
from django.test import Client, override_settings
from django.urls import reverse

from tenants import throttling
from tenants.admin_login import DEVICE_COOKIE
from tenants.models import Role
from tests.admin_ui.conftest import PASSWORD, user_with_role

pytestmark = pytest.mark.django_db

LOGIN_URL = reverse("admin:login")
BUDGET = {"ADMIN_LOGIN_FAILURE_RATE": "6/min", "ADMIN_LOGIN_FAILURE_BURST": 3}  # 3 at once, then one per 10 s


@pytest.fixture(autouse=True)
def _redis_limiter(redis_available):
    throttling._redis_down_until = 0.0


def _address() -> str:
    """An address no other test (or earlier run: the budgets live in Redis) has used."""
    return f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"


def _sign_in(username: str, password: str, address: str):
    client = Client(REMOTE_ADDR=address)
    response = client.post(LOGIN_URL, {"username": username, "password": password, "next": "/admin/"})
    return client, response


def _signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


@pytest.fixture
def staff(tenant):
    return user_with_role(tenant, Role.ADMIN, f"admin-{uuid.uuid4().hex[:8]}@example.com")


def test_past_the_address_budget_even_the_right_password_is_refused(refusals, staff, tenant):
    address = _address()
    with override_settings(**BUDGET):
        for _ in range(3):
            client, response = _sign_in(staff.username, "wrong", address)
            assert response.status_code == 200 and not _signed_in(client)
            assert "correct username and password" in response.content.decode()
        client, response = _sign_in(staff.username, PASSWORD, address)
        assert not _signed_in(client)
        page = response.content.decode()
        assert "Too many failed sign-ins" in page and "Try again in" in page

        # Another address, and another account, are not held back by it.
        other = user_with_role(tenant, Role.ADMIN, f"other-{uuid.uuid4().hex[:6]}")
        client, response = _sign_in(other.username, PASSWORD, address)
        assert not _signed_in(client)  # same address: still refused
        client, response = _sign_in(other.username, PASSWORD, _address())
        assert response.status_code == 302 and _signed_in(client)

    lines = refusals()
    assert [line["status"] for line in lines] == [401, 401, 401, 429, 429]
    assert all(line["account"] == staff.username for line in lines[:4])
    assert all(line["path"] == LOGIN_URL for line in lines)
    assert PASSWORD not in json.dumps(lines) and "wrong" not in json.dumps([line["account"] for line in lines])


def test_many_addresses_guessing_one_account_spend_the_accounts_budget(staff):
    with override_settings(**BUDGET):
        for _ in range(3):
            client, _ = _sign_in(staff.username, "wrong", _address())
            assert not _signed_in(client)
        client, response = _sign_in(staff.username, PASSWORD, _address())
        assert not _signed_in(client) and "Too many failed sign-ins" in response.content.decode()


def test_correct_sign_ins_spend_nothing(staff):
    address = _address()
    with override_settings(**BUDGET):
        for _ in range(5):
            client, response = _sign_in(staff.username, PASSWORD, address)
            assert response.status_code == 302 and _signed_in(client)


def test_a_typed_name_that_is_no_account_is_never_logged(refusals):
    with override_settings(**BUDGET):
        _sign_in("my-secret-password", "x", _address())
    [line] = refusals()
    assert line["status"] == 401 and line["account"] is None and "my-secret-password" not in json.dumps(line)


def test_a_refused_admin_page_is_logged_with_the_account(refusals, client, tenant):
    support = user_with_role(tenant, Role.SUPPORT, f"support-{uuid.uuid4().hex[:6]}@example.com")
    client.force_login(support)
    response = client.get(reverse("admin:conversations_deduppolicy_settings"))
    assert response.status_code == 403
    [line] = refusals()
    assert line["status"] == 403 and line["account"] == support.username
    assert line["reason"] == "admin page refused: This page is for tenant admins."


def test_peeking_at_a_budget_spends_nothing():
    rate = throttling.rate_parse("6/min", burst=2)
    name = f"test-peek:{uuid.uuid4().hex}"
    assert all(throttling._limit_decide(name, rate, consume=False)[0] for _ in range(10))
    assert throttling._limit_decide(name, rate)[0] and throttling._limit_decide(name, rate)[0]
    allowed, wait = throttling._limit_decide(name, rate, consume=False)
    assert not allowed and 5 < wait <= 10


def test_an_admin_login_rate_that_does_not_parse_stops_the_start(settings):
    from django.core.exceptions import ImproperlyConfigured

    from tenants.apps import rate_limits_validate

    settings.ADMIN_LOGIN_FAILURE_RATE = "lots"
    with pytest.raises(ImproperlyConfigured, match="KB_ADMIN_LOGIN_FAILURE_RATE"):
        rate_limits_validate()


def test_the_in_process_fallback_also_asks_without_spending():
    """Redis down: the per-process limiter answers the same questions the same way."""
    limiter = throttling._LocalLimiter()
    rate = throttling.rate_parse("6/min", burst=2)
    assert all(limiter.decide("k", rate, consume=False)[0] for _ in range(10))
    assert limiter.decide("k", rate)[0] and limiter.decide("k", rate)[0]
    allowed, wait_us = limiter.decide("k", rate, consume=False)
    assert not allowed and 5_000_000 < wait_us <= 10_000_000


def test_strangers_spending_the_accounts_budget_do_not_keep_out_the_admins_own_browser(refusals, staff):
    """The admin's browser signed in before, so it holds a device cookie: while strangers from many addresses spend
    the account's budget, a fresh browser is refused and the admin's own browser still signs in."""
    with override_settings(**BUDGET):
        browser, response = _sign_in(staff.username, PASSWORD, _address())
        assert response.status_code == 302 and _signed_in(browser)
        cookie = response.cookies[DEVICE_COOKIE]
        assert cookie["httponly"] and cookie["path"] == "/admin/" and cookie["samesite"] == "Lax"
        assert staff.username not in cookie.value  # the account is named by a hash only
        browser.post(reverse("admin:logout"))  # signs out; the device cookie stays, as in a browser
        assert not _signed_in(browser)

        for _ in range(3):
            client, _ = _sign_in(staff.username, "wrong", _address())
            assert not _signed_in(client)
        fresh, response = _sign_in(staff.username, PASSWORD, _address())
        assert not _signed_in(fresh) and "Too many failed sign-ins" in response.content.decode()

        browser.defaults["REMOTE_ADDR"] = _address()
        response = browser.post(LOGIN_URL, {"username": staff.username, "password": PASSWORD, "next": "/admin/"})
        assert response.status_code == 302 and _signed_in(browser)


def test_behind_one_proxy_address_strangers_do_not_keep_out_the_admins_own_browser(staff):
    """Everyone comes from the proxy's address: strangers spend the address's budget (and the account's), a fresh
    browser is refused, the admin's own browser is not."""
    proxy = _address()
    with override_settings(**BUDGET):
        browser, response = _sign_in(staff.username, PASSWORD, proxy)
        assert _signed_in(browser)
        browser.post(reverse("admin:logout"))
        for _ in range(3):
            _sign_in(f"nobody-{uuid.uuid4().hex[:6]}", "wrong", proxy)
        fresh, response = _sign_in(staff.username, PASSWORD, proxy)
        assert not _signed_in(fresh) and "Too many failed sign-ins" in response.content.decode()
        response = browser.post(LOGIN_URL, {"username": staff.username, "password": PASSWORD, "next": "/admin/"})
        assert response.status_code == 302 and _signed_in(browser)


def test_a_device_cookie_is_no_way_round_the_limit(staff):
    """Wrong passwords from a known browser spend that browser's own budget: it is refused like anyone else."""
    with override_settings(**BUDGET):
        browser, response = _sign_in(staff.username, PASSWORD, _address())
        assert _signed_in(browser)
        browser.post(reverse("admin:logout"))  # signs out; the device cookie stays, as in a browser
        assert not _signed_in(browser)
        for _ in range(3):
            browser.defaults["REMOTE_ADDR"] = _address()
            browser.post(LOGIN_URL, {"username": staff.username, "password": "wrong", "next": "/admin/"})
            assert not _signed_in(browser)
        browser.defaults["REMOTE_ADDR"] = _address()
        response = browser.post(LOGIN_URL, {"username": staff.username, "password": PASSWORD, "next": "/admin/"})
        assert not _signed_in(browser) and "Too many failed sign-ins" in response.content.decode()
        # The account's budget was not spent by it: another browser still signs in.
        client, response = _sign_in(staff.username, PASSWORD, _address())
        assert response.status_code == 302 and _signed_in(client)


def test_a_device_cookie_counts_only_for_its_accounts_and_only_intact(staff, tenant):
    from django.core import signing

    from tenants.admin_login import DEVICE_SALT, device_cookie_value, known_device

    other = user_with_role(tenant, Role.ADMIN, f"other-{uuid.uuid4().hex[:6]}")
    with override_settings(**BUDGET):
        browser, response = _sign_in(staff.username, PASSWORD, _address())
        value = response.cookies[DEVICE_COOKIE].value
    request = type("Request", (), {"COOKIES": {DEVICE_COOKIE: value}})()
    device = known_device(request, staff.username)
    assert device and known_device(request, f"  {staff.username.upper()} ") == device  # as the budgets name it
    assert known_device(request, other.username) is None
    tampered = type("Request", (), {"COOKIES": {DEVICE_COOKIE: value[:-2] + "xx"}})()
    assert known_device(tampered, staff.username) is None
    forged = signing.dumps({"d": "mine", "a": ["0" * 32]}, salt="another salt")
    assert known_device(type("Request", (), {"COOKIES": {DEVICE_COOKIE: forged}})(), staff.username) is None
    # A second account on the same browser keeps the device id and both accounts.
    both = type("Request", (), {"COOKIES": {DEVICE_COOKIE: device_cookie_value(request, other.username)}})()
    assert known_device(both, staff.username) == known_device(both, other.username) == device
    assert signing.loads(both.COOKIES[DEVICE_COOKIE], salt=DEVICE_SALT)["d"] == device
    with override_settings(ADMIN_DEVICE_COOKIE_DAYS=0):
        assert known_device(request, staff.username) is None
        _, response = _sign_in(staff.username, PASSWORD, _address())
        assert DEVICE_COOKIE not in response.cookies
