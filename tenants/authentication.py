from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from tenants.models import ApiKey, Tenant
from tenants.selectors import api_key_get_by_raw
from tenants.services import api_key_mark_used
from tenants.throttling import auth_failure_check, unauthenticated_check

if TYPE_CHECKING:
    from rest_framework.request import Request

KEYWORD = "Api-Key"
BEARER_KEYWORD = "Bearer"


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

    # The header's schemes this authenticator reads, the first the one its messages name.
    keywords: ClassVar[tuple[str, ...]] = (KEYWORD,)

    def authenticate(self, request: Request) -> tuple[ApiClient, ApiKey] | None:
        """Every request without a valid key (none sent, or one refused) spends its address's budget of such requests
        (KB_UNAUTHENTICATED_RATE); each refusal also spends the address's budget of failed attempts
        (KB_AUTH_FAILURE_RATE). Once either is spent, the answer is 429 with Retry-After instead of 401. A valid key is
        never held back, and a request with one costs no extra round trip."""
        address = request.META.get("REMOTE_ADDR") or "unknown"
        try:
            authenticated = self._authenticate(request)
        except exceptions.AuthenticationFailed as exc:
            _hold_back(
                unauthenticated_check(address=address),
                f"Too many requests without a valid API key from this address: {exc.detail}",
                exc,
            )
            _hold_back(
                auth_failure_check(address=address),
                f"Too many failed authentications from this address: {exc.detail}",
                exc,
            )
            raise
        if authenticated is None:
            _hold_back(
                unauthenticated_check(address=address),
                "Too many requests without a valid API key from this address: send "
                f'"Authorization: {self.keywords[0]} <key>".',
                None,
            )
        return authenticated

    def _authenticate(self, request: Request) -> tuple[ApiClient, ApiKey] | None:
        header = authentication.get_authorization_header(request)
        if not header:
            return None
        try:
            keyword, _, raw_key = header.decode("latin-1").partition(" ")
        except UnicodeDecodeError as exc:
            raise exceptions.AuthenticationFailed("The Authorization header is not readable.") from exc
        if keyword not in self.keywords:
            raise exceptions.AuthenticationFailed(f'Use the header "Authorization: {self.keywords[0]} <key>".')
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
        return self.keywords[0]


class BearerApiKeyAuthentication(ApiKeyAuthentication):
    """The same API key as `Authorization: Bearer <key>`, which every OpenAI client library sends, or as
    `Authorization: Api-Key <key>`: for the OpenAI-compatible endpoints only, so the rest of the API keeps one header.
    The key is checked, counted and held back exactly as `ApiKeyAuthentication` does."""

    keywords: ClassVar[tuple[str, ...]] = (BEARER_KEYWORD, KEYWORD)


def _hold_back(decision: tuple[bool, float], detail: str, cause: Exception | None) -> None:
    allowed, wait = decision
    if not allowed:
        raise exceptions.Throttled(wait=max(1, math.ceil(wait)), detail=detail) from cause


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {"type": "apiKey", "in": "header", "name": "Authorization", "description": "Api-Key <key>"}


class BearerApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.authentication.BearerApiKeyAuthentication"
    name = "BearerApiKey"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "The API key as a bearer token (`Authorization: Bearer <key>`); `Api-Key <key>` works too.",
        }
