from __future__ import annotations

from rest_framework.permissions import BasePermission

from tenants.models import ApiKeyRole


class HasTenantApiKey(BasePermission):
    """Any valid key of an active tenant. Missing key -> 401 (the authenticator names the header)."""

    message = "Authentication with an API key is required."

    def has_permission(self, request, view) -> bool:  # noqa: ANN001
        return request.auth is not None


class IsTenantAdminKey(HasTenantApiKey):
    message = "This endpoint needs an admin API key of the tenant."

    def has_permission(self, request, view) -> bool:  # noqa: ANN001
        return super().has_permission(request, view) and request.auth.role == ApiKeyRole.ADMIN


class IsTenantWideKey(BasePermission):
    """The key is not limited to one knowledge base: for what reaches the whole tenant (key management, the
    tenant's dedup policy)."""

    message = "This API key is limited to one knowledge base; this needs a key of the whole tenant."

    def has_permission(self, request, view) -> bool:  # noqa: ANN001
        return request.auth is not None and request.auth.knowledge_base_id is None
