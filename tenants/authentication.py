from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from tenants.models import ApiKey, Tenant
from tenants.selectors import api_key_get_by_raw
from tenants.services import api_key_mark_used
from tenants.throttling import auth_failure_check

if TYPE_CHECKING:
    from rest_framework.request import Request

KEYWORD = "Api-Key"


@dataclass(frozen=True)
class ApiClient:
    """The authenticated caller of the API: always a key of one tenant, never a person."""

    api_key: ApiKey

    @property
    def tenant(self) -> Tenant:
        return self.api_key.tenant

    is_authenticated = True
    is_anonymous = False


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """`Authorization: Api-Key <key>`. Wrong, revoked or malformed keys are 401 with a message saying which."""

    def authenticate(self, request: Request) -> tuple[ApiClient, ApiKey] | None:
        try:
            return self._authenticate(request)
        except exceptions.AuthenticationFailed as exc:
            # Each refusal spends the caller's address's budget of failed attempts (KB_AUTH_FAILURE_RATE); once it
            # is spent, refusals are 429 with Retry-After. Only failures count: a valid key is never held back, and
            # a successful request costs no extra round trip.
            allowed, wait = auth_failure_check(address=request.META.get("REMOTE_ADDR") or "unknown")
            if not allowed:
                seconds = max(1, math.ceil(wait))
                raise exceptions.Throttled(
                    wait=seconds,
                    detail=f"Too many failed authentications from this address: {exc.detail}",
                ) from exc
            raise

    def _authenticate(self, request: Request) -> tuple[ApiClient, ApiKey] | None:
        header = authentication.get_authorization_header(request)
        if not header:
            return None
        try:
            keyword, _, raw_key = header.decode("latin-1").partition(" ")
        except UnicodeDecodeError as exc:
            raise exceptions.AuthenticationFailed("The Authorization header is not readable.") from exc
        if keyword != KEYWORD:
            raise exceptions.AuthenticationFailed(f'Use the header "Authorization: {KEYWORD} <key>".')
        raw_key = raw_key.strip()
        if not raw_key:
            raise exceptions.AuthenticationFailed("The API key is empty.")
        api_key = api_key_get_by_raw(raw_key=raw_key)
        if api_key is None:
            raise exceptions.AuthenticationFailed("The API key is not valid.")
        if api_key.revoked_at is not None:
            raise exceptions.AuthenticationFailed("The API key has been revoked.")
        if not api_key.tenant.is_active:
            raise exceptions.AuthenticationFailed("The tenant of this API key is disabled.")
        api_key_mark_used(api_key=api_key)
        return ApiClient(api_key=api_key), api_key

    def authenticate_header(self, request: Request) -> str:
        return KEYWORD


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {"type": "apiKey", "in": "header", "name": "Authorization", "description": "Api-Key <key>"}
