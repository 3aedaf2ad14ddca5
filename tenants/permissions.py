from __future__ import annotations

from typing import TYPE_CHECKING

from rest_framework.permissions import BasePermission

from tenants.models import ApiKeyRole

if TYPE_CHECKING:
    from rest_framework.request import Request
    from rest_framework.views import APIView


class HasTenantApiKey(BasePermission):
    """Any valid key of an active tenant. Missing key -> 401 (the authenticator names the header)."""

    message = "Authentication with an API key is required."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.auth is not None


class IsTenantAdminKey(HasTenantApiKey):
    message = "This endpoint needs an admin API key of the tenant."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return super().has_permission(request, view) and request.auth.role == ApiKeyRole.ADMIN


class IsTenantWideKey(BasePermission):
    """The key is not limited to one knowledge base: for what reaches the whole tenant (key management, the
    tenant's dedup policy)."""

    message = "This API key is limited to one knowledge base; this needs a key of the whole tenant."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.auth is not None and request.auth.knowledge_base_id is None
