"""Base class of every tenant API endpoint: the tenant is set once, from the API key."""

from __future__ import annotations

from typing import ClassVar

from rest_framework.permissions import BasePermission
from rest_framework.views import APIView

from tenants.models import ApiKey, Tenant
from tenants.permissions import HasTenantApiKey


class TenantApi(APIView):
    """Subclasses add permissions in `extra_permission_classes`; they can never drop the tenant key check."""

    extra_permission_classes: ClassVar[list[type[BasePermission]]] = []

    def get_permissions(self) -> list[BasePermission]:
        return [HasTenantApiKey(), *(permission() for permission in self.extra_permission_classes)]

    @property
    def tenant(self) -> Tenant:
        return self.request.auth.tenant

    @property
    def api_key(self) -> ApiKey:
        return self.request.auth
