from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from kbplatform.errors import ApplicationError, ConflictError
from tenants.keys import key_generate, key_hash
from tenants.models import ApiKey, Membership, Role, Tenant
from tenants.scopes import Scope, UnknownScopeError, scopes_resolve

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AbstractUser

    from retrieval.models import KnowledgeBase

LAST_USED_RESOLUTION = timedelta(seconds=60)


def membership_set(*, tenant: Tenant, user: AbstractUser, role: str) -> Membership:
    if role not in Role.values:
        raise ApplicationError(f"Unknown role {role!r}; use one of {', '.join(Role.values)}.")
    membership, _ = Membership.objects.update_or_create(user=user, tenant=tenant, defaults={"role": role})
    if not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    return membership


def user_get_or_create_by_email(*, email: str) -> AbstractUser:
    """The staff user whose username is `email` (created without a usable password: set by reset or admin)."""
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(username=email, defaults={"email": email, "is_staff": True})
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


def tenant_admin_user_ensure(*, tenant: Tenant, email: str, password: str | None = None) -> AbstractUser:
    """Find or create the user for `email`, make them an admin of `tenant`; set `password` when given."""
    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(username=email, defaults={"email": email, "is_staff": True})
    if password is not None:
        user.set_password(password)
        user.save()
    membership_set(tenant=tenant, user=user, role=Role.ADMIN)
    return user


def api_key_create(
    *,
    tenant: Tenant,
    name: str,
    scopes: Iterable[str] | None = None,
    knowledge_base: KnowledgeBase | None = None,
    created_by: AbstractBaseUser | None = None,
) -> tuple[ApiKey, str]:
    """Create a key holding `scopes` (`chat` alone when none is named); the whole key is returned once here and
    never stored."""
    if knowledge_base is not None and knowledge_base.tenant_id != tenant.pk:
        raise ApplicationError("The knowledge base belongs to another tenant.")
    resolved = _scopes_valid(scopes)
    prefix, raw_key = key_generate()
    api_key = ApiKey(
        tenant=tenant,
        name=name,
        knowledge_base=knowledge_base,
        prefix=prefix,
        hashed_key=key_hash(raw_key),
        created_by=created_by,
    )
    api_key.scopes_assign(resolved)
    api_key.save()
    return api_key, raw_key


@transaction.atomic
def api_key_scopes_set(
    *, tenant: Tenant, api_key: ApiKey, scopes: Iterable[str] | None, keep_one_admin: bool = False
) -> ApiKey:
    """Give the key exactly `scopes` (`chat` alone when none is named), from its next request on. A revoked key is
    not changed (409). With `keep_one_admin`, refuse to take `admin` from the tenant's last active key holding it,
    as `api_key_revoke` refuses to revoke it, so the API cannot lock a tenant out of its own key management."""
    resolved = _scopes_valid(scopes)
    if api_key.revoked_at is not None:
        raise ConflictError("This API key is revoked: its scopes no longer change anything. Create a new key.")
    if keep_one_admin and api_key.scope_admin and Scope.ADMIN not in resolved:
        _last_admin_key_refuse(tenant=tenant, api_key=api_key, action="take the admin scope from it")
    api_key.scopes_assign(resolved)
    ApiKey.objects.for_tenant(tenant).filter(pk=api_key.pk).update(
        scope_chat=api_key.scope_chat, scope_ingest=api_key.scope_ingest, scope_admin=api_key.scope_admin
    )
    return api_key


def _scopes_valid(scopes: Iterable[str] | None) -> frozenset[Scope]:
    try:
        return scopes_resolve(scopes)
    except UnknownScopeError as exc:
        raise ApplicationError(str(exc), extra={"fields": {"scopes": [str(exc)]}}) from exc


def _last_admin_key_refuse(*, tenant: Tenant, api_key: ApiKey, action: str) -> None:
    """409 when `api_key` is the tenant's last active key with the admin scope. The tenant row lock (the caller
    holds a transaction) serialises two concurrent changes of the last two admin keys."""
    Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
    active_admins = ApiKey.objects.for_tenant(tenant).filter(scope_admin=True, revoked_at__isnull=True)
    if not active_admins.exclude(pk=api_key.pk).exists():
        raise ConflictError(
            f"This is the tenant's last active admin key: create another admin key before you {action}."
        )


@transaction.atomic
def api_key_revoke(*, tenant: Tenant, api_key: ApiKey, keep_one_admin: bool = False) -> ApiKey:
    """Revoke a key (idempotent). With `keep_one_admin`, refuse to revoke the tenant's last active key with the
    `admin` scope, so the API cannot lock a tenant out of its own key management; the tenant row lock serialises two
    concurrent revocations of the last two admin keys."""
    if keep_one_admin and api_key.scope_admin and api_key.revoked_at is None:
        _last_admin_key_refuse(tenant=tenant, api_key=api_key, action="revoke it")
    ApiKey.objects.for_tenant(tenant).filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    api_key.refresh_from_db()
    return api_key


def api_key_mark_used(*, api_key: ApiKey) -> None:
    """Record use at most once a minute per key, so authentication does not write on every request."""
    now = timezone.now()
    if api_key.last_used_at and now - api_key.last_used_at < LAST_USED_RESOLUTION:
        return
    ApiKey.objects.for_tenant(api_key.tenant_id).filter(pk=api_key.pk).update(last_used_at=now)
    api_key.last_used_at = now


def tenant_settings_changed(*, tenant: Tenant) -> None:
    """Record that the tenant's conversation settings changed (call inside the transaction that changes them):
    every process's cached copy is then out of date from the moment the change commits."""
    Tenant.objects.filter(pk=tenant.pk).update(settings_version=F("settings_version") + 1)
