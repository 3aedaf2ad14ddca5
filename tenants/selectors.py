from __future__ import annotations

from typing import TYPE_CHECKING

from kbplatform.row_reads import row_get_unscoped
from tenants.keys import key_matches, key_prefix
from tenants.models import ApiKey, Membership, Role, Tenant

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser


def api_key_get_by_raw(*, raw_key: str) -> ApiKey | None:
    """The active key matching `raw_key`, with its tenant loaded, or None. Crosses tenants by design: the key names
    its tenant. Every API request runs this first: one statement written once per process (`row_get`), the key and
    its tenant what `select_related("tenant")` would give."""
    prefix = key_prefix(raw_key)
    if prefix is None:
        return None
    api_key = row_get_unscoped(model=ApiKey, related=("tenant",), equal={"prefix": prefix})
    if api_key is None or not key_matches(raw_key, api_key.hashed_key):
        return None
    return api_key


def user_tenant_roles(*, user: AbstractBaseUser | AnonymousUser | None) -> dict[int, str]:
    """tenant id -> role for a user's memberships in active tenants."""
    if user is None or not user.is_authenticated:
        return {}
    rows = Membership.objects.filter(user=user, tenant__is_active=True).values_list("tenant_id", "role")
    return dict(rows)


def user_tenants_with_role(
    *, user: AbstractBaseUser | AnonymousUser | None, roles: tuple[str, ...] = tuple(Role.values)
) -> list[int]:
    return [tenant_id for tenant_id, role in user_tenant_roles(user=user).items() if role in roles]


def tenant_get_by_slug(*, slug: str) -> Tenant | None:
    return Tenant.objects.filter(slug=slug).first()


def api_key_list(*, tenant: Tenant) -> list[ApiKey]:
    """Every key of the tenant, newest first, revoked ones included (they show when a key stopped working)."""
    return list(ApiKey.objects.for_tenant(tenant).order_by("-created_at", "-pk"))


def api_key_get(*, tenant: Tenant, api_key_id: int) -> ApiKey | None:
    """The tenant's key with this id, or None: another tenant's key is indistinguishable from a missing one."""
    return ApiKey.objects.for_tenant(tenant).filter(pk=api_key_id).first()
