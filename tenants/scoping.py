"""Tenant scoping that fails closed.

Every tenant-owned model's default manager returns querysets that refuse to run until they are scoped to a
tenant. The only ways to scope are named and easy to grep in review:

- `Model.objects.for_tenant(tenant)`, or `.filter(tenant=...)` / `.filter(tenant_id=...)` / `tenant__in`;
- a filter on a parent object that is itself tenant-owned (what related managers such as
  `document.chunks.all()` do): the parent was loaded within a tenant, so its children are too;
- `Model.objects.unscoped()`: the named escape hatch for superusers, migrations, and cross-tenant jobs.

Django's own machinery (cascading deletes, FK validation) uses `_base_manager`, a plain manager.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db import models


class TenantScopeError(RuntimeError):
    """A query on a tenant-owned model was about to run without naming a tenant."""


_TENANT_KEYS = ("tenant", "tenant_id", "tenant__in", "tenant_id__in", "tenant__pk", "tenant__slug")


class TenantScopedQuerySet(models.QuerySet):
    _tenant_scoped = False

    def _clone(self) -> TenantScopedQuerySet:  # type: ignore[override]
        clone = super()._clone()
        clone._tenant_scoped = self._tenant_scoped
        return clone

    def _mark_scoped(self) -> TenantScopedQuerySet:
        self._tenant_scoped = True
        return self

    def for_tenant(self, tenant: Any) -> TenantScopedQuerySet:
        if tenant is None:
            raise TenantScopeError(f"{self.model.__name__}.for_tenant() needs a tenant, got None")
        return self.filter(tenant=tenant)

    def unscoped(self) -> TenantScopedQuerySet:
        return self._chain()._mark_scoped()

    def filter(self, *args: Any, **kwargs: Any) -> TenantScopedQuerySet:
        clone = super().filter(*args, **kwargs)
        if any(kwargs.get(key) is not None for key in _TENANT_KEYS if key in kwargs):
            clone._tenant_scoped = True
        elif any(isinstance(value, TenantOwnedModel) for value in kwargs.values()):
            clone._tenant_scoped = True
        return clone

    def _check_scope(self) -> None:
        if not self._tenant_scoped:
            raise TenantScopeError(
                f"Unscoped query on tenant-owned model {self.model.__name__}: "
                "use .for_tenant(tenant), or .unscoped() where crossing tenants is intended."
            )

    def _fetch_all(self) -> None:
        if self._result_cache is None:
            self._check_scope()
        super()._fetch_all()

    def iterator(self, *args: Any, **kwargs: Any) -> Iterator[Any]:  # type: ignore[override]
        self._check_scope()
        return super().iterator(*args, **kwargs)

    def count(self) -> int:
        if self._result_cache is None:
            self._check_scope()
        return super().count()

    def exists(self) -> bool:
        if self._result_cache is None:
            self._check_scope()
        return super().exists()

    def aggregate(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self._check_scope()
        return super().aggregate(*args, **kwargs)

    def update(self, **kwargs: Any) -> int:
        self._check_scope()
        return super().update(**kwargs)

    def delete(self) -> tuple[int, dict[str, int]]:  # type: ignore[override]
        self._check_scope()
        return super().delete()


class TenantManager(models.Manager.from_queryset(TenantScopedQuerySet)):  # type: ignore[misc]
    pass


class TenantOwnedModel(models.Model):
    """Abstract base of every row that belongs to one tenant."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")

    objects = TenantManager()

    class Meta:
        abstract = True
