"""The admin sign-in form, with a budget of failed attempts per client address and per account.

Django's admin signs in with a plain form and no limit, so a password can be guessed at the speed of the server.
Here every failed attempt spends one unit of two budgets (KB_ADMIN_LOGIN_FAILURE_RATE, burst
KB_ADMIN_LOGIN_FAILURE_BURST): the client address's, against one machine guessing many accounts, and the account's,
against many machines guessing one. While either is spent, the form refuses before it checks the password, so
even a right guess does not get in until the budget refills. Correct sign-ins spend nothing. Every failure and
every refusal is a `refusal` line on the `kbplatform.refusals` logger, like the API's.

A stranger who knows an admin's user name could spend the account budget, and behind a proxy anyone could spend
the address budget (`REMOTE_ADDR` is then the proxy's, as for the API's limit; docs/operations.md), to keep admins
out. So a browser that has signed in to an account gets a device cookie (signed, HttpOnly,
`KB_ADMIN_DEVICE_COOKIE_DAYS`), and its attempts for that account answer to a budget of their own instead of the
address's and the account's: the admin's usual browser still signs in while others have spent those, and the
cookie is no way round the limit, since its own failures spend its own budget. This is OWASP's "device cookies"
defence.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.core import signing
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse

from kbplatform.refusals import ADMIN_PREFIX, refusal_log
from tenants.throttling import admin_account_key, admin_login_failed, admin_login_wait

DEVICE_COOKIE = "kb_admin_device"
DEVICE_SALT = "kbplatform.admin-login.device"
DEVICE_MAX_ACCOUNTS = 20  # accounts one browser is remembered for; the oldest is dropped past it


def _device_payload(request: HttpRequest | None) -> dict | None:
    """The browser's device cookie when it is ours, intact and not older than KB_ADMIN_DEVICE_COOKIE_DAYS."""
    days = settings.ADMIN_DEVICE_COOKIE_DAYS
    raw = request.COOKIES.get(DEVICE_COOKIE) if request is not None and days > 0 else None
    if not raw:
        return None
    try:
        payload = signing.loads(raw, salt=DEVICE_SALT, max_age=days * 86400)
    except signing.BadSignature:  # tampered, expired, or signed with another secret
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("d"), str) or not isinstance(payload.get("a"), list):
        return None
    return payload


def known_device(request: HttpRequest | None, username: str) -> str | None:
    """The device id of this browser if it has signed in to `username` before, else None."""
    payload = _device_payload(request)
    return payload["d"] if payload and admin_account_key(username) in payload["a"] else None


def device_cookie_value(request: HttpRequest | None, username: str) -> str:
    """The device cookie after a correct sign-in to `username`: the same device id (a new one for a new browser),
    this account added, and a new signing date."""
    payload = _device_payload(request) or {"d": secrets.token_hex(16), "a": []}
    account = admin_account_key(username)
    accounts = [a for a in payload["a"] if a != account][-(DEVICE_MAX_ACCOUNTS - 1) :] + [account]
    return signing.dumps({"d": payload["d"], "a": accounts}, salt=DEVICE_SALT, compress=True)


class AdminDeviceCookieMiddleware:
    """Hands the browser its device cookie after a correct admin sign-in (the form cannot reach the response)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        value = getattr(request, "_kb_admin_device_cookie", None)
        if value:
            response.set_cookie(
                DEVICE_COOKIE,
                value,
                max_age=settings.ADMIN_DEVICE_COOKIE_DAYS * 86400,
                path=ADMIN_PREFIX,
                secure=settings.SESSION_COOKIE_SECURE,
                httponly=True,
                samesite="Lax",
            )
        return response


class ThrottledAdminAuthenticationForm(AdminAuthenticationForm):
    error_messages = {
        **AdminAuthenticationForm.error_messages,
        "throttled": "Too many failed sign-ins from this address or for this account. Try again in %(seconds)s s.",
    }

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username") or ""
        address = self.request.META.get("REMOTE_ADDR", "") if self.request is not None else ""
        device = known_device(self.request, username)
        wait = admin_login_wait(address=address, username=username, device=device)
        if wait > 0:
            seconds = max(1, math.ceil(wait))
            refusal_log(
                request=self.request,
                status_code=429,
                message=f"admin sign-in refused: failed-attempt budget spent, retry in {seconds} s",
                account=self._account(username),
            )
            raise ValidationError(self.error_messages["throttled"], code="throttled", params={"seconds": seconds})
        try:
            cleaned = super().clean()
        except ValidationError:
            admin_login_failed(address=address, username=username, device=device)
            refusal_log(
                request=self.request, status_code=401, message="admin sign-in failed", account=self._account(username)
            )
            raise
        if self.request is not None and settings.ADMIN_DEVICE_COOKIE_DAYS > 0:
            self.request._kb_admin_device_cookie = device_cookie_value(self.request, username)
        return cleaned

    @staticmethod
    def _account(username: str) -> str | None:
        """The account name for the log when it names a real account; never what was typed otherwise (people
        type their password into the user name field)."""
        user_model = get_user_model()
        exists = user_model._default_manager.filter(**{user_model.USERNAME_FIELD: username}).exists()
        return username if username and exists else None
