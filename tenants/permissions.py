from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rest_framework import status
from rest_framework.permissions import BasePermission

from kbplatform.errors import ApplicationError
from tenants.scopes import scope_missing, scope_need_text, scope_required, scopes_accepted, scopes_sorted

if TYPE_CHECKING:
    from rest_framework.request import Request
    from rest_framework.views import APIView


class HasTenantApiKey(BasePermission):
    """Any valid key of an active tenant. Missing key -> 401 (the authenticator names the header)."""

    message = "Authentication with an API key is required."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.auth is not None


class ScopeMissingError(ApplicationError):
    status_code = status.HTTP_403_FORBIDDEN


class HasRequiredScope(BasePermission):
    """The key holds the scope the view declares for the request's method (`TenantApi.required_scope`). A method
    the view declares nothing for is refused whatever the key holds: an endpoint is closed until it says what it
    needs. The refusal names the scope, so a client knows which key to use."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        needed = scope_required(getattr(view, "required_scope", None), request.method)
        if needed is None:
            raise ScopeMissingError(
                f"{request.method} on this endpoint declares no API key scope, so no key may call it.",
                extra={"required_scope": None},
            )
        held = request.auth.scopes
        missing = scope_missing(held=held, needed=needed)
        if missing is None:
            return True
        key_scopes = scopes_sorted(held)
        raise ScopeMissingError(
            f"This API key lacks the {scope_need_text(needed)} scope, which {request.method} on this endpoint needs "
            f"(the key holds: {', '.join(key_scopes)}). Use a key with the {missing} scope.",
            extra={
                "required_scope": str(missing),
                "accepted_scopes": [str(scope) for scope in scopes_accepted(needed)],
                "key_scopes": key_scopes,
            },
        )


class IsTenantWideKey(BasePermission):
    """The key is not limited to one knowledge base: for what reaches the whole tenant (key management, the
    tenant's dedup policy)."""

    message = "This API key is limited to one knowledge base; this needs a key of the whole tenant."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.auth is not None and request.auth.knowledge_base_id is None


class IsTenantWideKeyForMethods(IsTenantWideKey):
    """IsTenantWideKey for `methods` only; the view's other methods pass."""

    methods: ClassVar[frozenset[str]] = frozenset()

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.method not in self.methods or super().has_permission(request, view)
