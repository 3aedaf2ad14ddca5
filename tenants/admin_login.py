"""The admin sign-in form, with a budget of failed attempts per client address and per account.

Django's admin signs in with a plain form and no limit, so a password can be guessed at the speed of the server.
Here every failed attempt spends one unit of two budgets (KB_ADMIN_LOGIN_FAILURE_RATE, burst
KB_ADMIN_LOGIN_FAILURE_BURST): the client address's, against one machine guessing many accounts, and the account's,
against many machines guessing one. While either is spent, the form refuses before it checks the password, so
even a right guess does not get in until the budget refills. Correct sign-ins spend nothing. Every failure and
every refusal is a `refusal` line on the `kbplatform.refusals` logger, like the API's.

The account budget can be spent by a stranger to keep an admin out for as long as the budget takes to refill
(about two minutes per attempt at 30/hour): the price of stopping a distributed guess. `REMOTE_ADDR` is the
proxy's address behind a proxy, as for the API's limit (docs/operations.md).
"""

from __future__ import annotations

import math

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from kbplatform.refusals import refusal_log
from tenants.throttling import admin_login_failed, admin_login_wait


class ThrottledAdminAuthenticationForm(AdminAuthenticationForm):
    error_messages = {
        **AdminAuthenticationForm.error_messages,
        "throttled": "Too many failed sign-ins from this address or for this account. Try again in %(seconds)s s.",
    }

    def clean(self):  # noqa: ANN201
        username = self.cleaned_data.get("username") or ""
        address = self.request.META.get("REMOTE_ADDR", "") if self.request is not None else ""
        wait = admin_login_wait(address=address, username=username)
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
            return super().clean()
        except ValidationError:
            admin_login_failed(address=address, username=username)
            refusal_log(
                request=self.request, status_code=401, message="admin sign-in failed", account=self._account(username)
            )
            raise

    @staticmethod
    def _account(username: str) -> str | None:
        """The account name for the log when it names a real account; never what was typed otherwise (people
        type their password into the user name field)."""
        user_model = get_user_model()
        exists = user_model._default_manager.filter(**{user_model.USERNAME_FIELD: username}).exists()
        return username if username and exists else None
