"""Base class of every tenant API endpoint: the tenant is set once, from the API key, and what each method needs of
the key's scopes is declared on the view and checked by one permission."""

from __future__ import annotations

from typing import Any, ClassVar

from rest_framework.permissions import BasePermission
from rest_framework.views import APIView

from tenants.models import ApiKey, Tenant
from tenants.permissions import HasRequiredScope, HasTenantApiKey
from tenants.scopes import ScopeDeclaration


class TenantApi(APIView):
    """Every subclass declares `required_scope`: one `Scope` (or `ANY_SCOPE`) for all its methods, or a mapping from
    each HTTP method it answers ("GET", "POST"...) to one. A method it declares nothing for is a 403 for every key
    (and `tenants.checks` fails `manage.py check` and the tests); `admin` holds every scope.

    Subclasses add permissions in `extra_permission_classes`; they can never drop the key check or the scope check:
    a subclass that overrides `get_permissions` or `check_permissions` is refused when its module is imported."""

    required_scope: ClassVar[ScopeDeclaration] = None
    extra_permission_classes: ClassVar[list[type[BasePermission]]] = []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        replaced = [name for name in ("get_permissions", "check_permissions") if name in cls.__dict__]
        if replaced:
            raise TypeError(
                f"{cls.__qualname__} overrides {', '.join(replaced)}: declare required_scope and add permissions in "
                "extra_permission_classes instead, so the key and scope checks always run."
            )

    def get_permissions(self) -> list[BasePermission]:
        return [HasTenantApiKey(), HasRequiredScope(), *(permission() for permission in self.extra_permission_classes)]

    @property
    def tenant(self) -> Tenant:
        return self.request.auth.tenant

    @property
    def api_key(self) -> ApiKey:
        return self.request.auth
