from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import connections, router
from django.db.models.expressions import Col

from tenants.keys import key_matches, key_prefix
from tenants.models import ApiKey, Membership, Role, Tenant

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser


def api_key_get_by_raw(*, raw_key: str) -> ApiKey | None:
    """The active key matching `raw_key`, with its tenant loaded, or None. Crosses tenants by design: the key names
    its tenant.

    Every API request runs this first, so it is one statement made once per process from the two models' own
    fields (`_api_key_lookup`), not a queryset compiled again per request. Its values pass through the converters
    the ORM applies (the database backend's and each field's: SQLite's datetimes, for one) and become instances as
    the ORM makes them (`from_db`), so the key and its tenant are what `select_related("tenant")` would give."""
    prefix = key_prefix(raw_key)
    if prefix is None:
        return None
    alias = router.db_for_read(ApiKey)
    lookup = _api_key_lookup(alias)
    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute(lookup.sql, [prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    values = list(row)
    for index, column, converters in lookup.converters:
        for converter in converters:
            values[index] = converter(values[index], column, connection)
    count = len(lookup.key_fields)
    api_key = ApiKey.from_db(alias, lookup.key_fields, values[:count])
    if not key_matches(raw_key, api_key.hashed_key):
        return None
    ApiKey.tenant.field.set_cached_value(api_key, Tenant.from_db(alias, lookup.tenant_fields, values[count:]))
    return api_key


@dataclass(frozen=True)
class _ApiKeyLookup:
    sql: str
    key_fields: list[str]
    tenant_fields: list[str]
    # (position in the row, the column's expression, its converters) for the columns that have any.
    converters: list[tuple[int, Col, list[Callable]]]


@functools.cache
def _api_key_lookup(alias: str) -> _ApiKeyLookup:
    """The statement reading a key by its prefix joined with its tenant on database `alias`, with the attribute
    names and the converters of its columns."""
    connection = connections[alias]
    quote = connection.ops.quote_name
    columns = [("k", field) for field in ApiKey._meta.concrete_fields]
    columns += [("t", field) for field in Tenant._meta.concrete_fields]
    converters = []
    for index, (table, field) in enumerate(columns):
        column = field.get_col(table)
        found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        if found:
            converters.append((index, column, found))
    tenant_key, prefix = ApiKey._meta.get_field("tenant").column, ApiKey._meta.get_field("prefix").column
    sql = (
        f"SELECT {', '.join(f'{table}.{quote(field.column)}' for table, field in columns)} "
        f"FROM {quote(ApiKey._meta.db_table)} k JOIN {quote(Tenant._meta.db_table)} t "
        f"ON t.{quote(Tenant._meta.pk.column)} = k.{quote(tenant_key)} WHERE k.{quote(prefix)} = %s"
    )
    return _ApiKeyLookup(
        sql=sql,
        key_fields=[field.attname for table, field in columns if table == "k"],
        tenant_fields=[field.attname for table, field in columns if table == "t"],
        converters=converters,
    )


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
