"""Tenant-scoped Django admin: a tenant admin sees and edits only their tenant's rows; support and viewer
roles see what `view_roles` allows, read-only unless listed in `edit_roles`; a superuser sees everything.

Permissions come from memberships, not from Django's per-model permission table, so granting a role is the
only thing an operator does to give someone access.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from tenants.models import Role, Tenant
from tenants.scoping import TenantOwnedModel
from tenants.selectors import user_tenant_roles

if TYPE_CHECKING:
    from django.contrib.admin.views.main import ChangeList


def request_tenant_roles(request: HttpRequest) -> dict[int, str]:
    """tenant id -> role of the request's user, cached on the request."""
    if not hasattr(request, "_kb_tenant_roles"):
        request._kb_tenant_roles = user_tenant_roles(user=request.user)
    return request._kb_tenant_roles


def request_tenant_ids(request: HttpRequest, roles: tuple[str, ...]) -> list[int]:
    return [tenant_id for tenant_id, role in request_tenant_roles(request).items() if role in roles]


class TenantScopedAdmin(admin.ModelAdmin):
    view_roles: ClassVar[tuple[str, ...]] = (Role.ADMIN, Role.SUPPORT, Role.VIEWER)
    edit_roles: ClassVar[tuple[str, ...]] = (Role.ADMIN,)
    tenant_field = "tenant"

    # --- rows ---------------------------------------------------------------------------------------------
    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request) if not self._is_tenant_owned() else self.model.objects.unscoped()
        ordering = self.get_ordering(request)
        if ordering:
            queryset = queryset.order_by(*ordering)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(**{f"{self.tenant_field}__in": request_tenant_ids(request, self.view_roles)})

    def _is_tenant_owned(self) -> bool:
        return issubclass(self.model, TenantOwnedModel)

    def _obj_tenant_id(self, obj: models.Model) -> int | None:
        if isinstance(obj, Tenant):
            return obj.pk
        value = obj
        for part in self.tenant_field.split("__"):
            value = getattr(value, part, None)
        return getattr(value, "pk", None)

    def _role_for(self, request: HttpRequest, obj: models.Model | None) -> set[str]:
        roles = request_tenant_roles(request)
        if obj is None:
            return set(roles.values())
        tenant_id = self._obj_tenant_id(obj)
        return {roles[tenant_id]} if tenant_id in roles else set()

    # --- query strings: PostgreSQL refuses a NUL character in any text it is sent --------------------------------
    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        """A filter, ordering or page value holding a NUL is the admin's "incorrect lookup" page: passed on, it
        made PostgreSQL refuse the list's query and the page a server error. This covers every list, its bulk
        actions and exports built on it."""
        if any("\x00" in value for _name, values in request.GET.lists() for value in values):
            raise IncorrectLookupParameters("A query string value holds a NUL character.")
        return super().get_changelist_instance(request)

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str) -> tuple[QuerySet, bool]:
        """No stored text holds a NUL, so a search term with one matches nothing (the autocomplete asks here
        without the changelist's own check)."""
        if "\x00" in search_term:
            return queryset.none(), False
        return super().get_search_results(request, queryset, search_term)

    def response_action(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        """A bulk action runs only when every selected value is a primary key. Django filters by them as they
        come, so "abc" in `_selected_action` was a server error; now it is a message and nothing changes."""
        try:
            for value in request.POST.getlist(ACTION_CHECKBOX_NAME):
                self.opts.pk.to_python(value)
        except ValidationError:
            self.message_user(
                request, "The selection is not valid; nothing was changed. Select the rows again.", messages.ERROR
            )
            return None
        return super().response_action(request, queryset)

    # --- permissions --------------------------------------------------------------------------------------
    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser or bool(self._role_for(request, None) & set(self.view_roles))

    def has_view_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return request.user.is_superuser or bool(self._role_for(request, obj) & set(self.view_roles))

    def has_change_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return request.user.is_superuser or bool(self._role_for(request, obj) & set(self.edit_roles))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser or bool(self._role_for(request, None) & set(self.edit_roles))

    def has_delete_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return request.user.is_superuser or bool(self._role_for(request, obj) & set(self.edit_roles))

    # --- forms: the tenant is never chosen from another tenant's list ---------------------------------------
    def get_readonly_fields(self, request: HttpRequest, obj: models.Model | None = None) -> tuple[str, ...]:
        """A stored row's tenant is fixed: moved by its change form, a knowledge base would leave its documents,
        chunks and vectors with the old tenant, and an API key would open the new tenant's data."""
        readonly = tuple(super().get_readonly_fields(request, obj))
        if obj is not None and self._is_tenant_owned() and "tenant" not in readonly:
            readonly += ("tenant",)
        return readonly

    def formfield_for_foreignkey(
        self, db_field: models.ForeignKey, request: HttpRequest, **kwargs: Any
    ) -> forms.ModelChoiceField | None:
        related = db_field.related_model
        if related is Tenant and not request.user.is_superuser:
            kwargs["queryset"] = Tenant.objects.filter(pk__in=request_tenant_ids(request, self.edit_roles))
        elif issubclass(related, TenantOwnedModel):
            queryset = related.objects.unscoped()
            if not request.user.is_superuser:
                queryset = queryset.filter(tenant__in=request_tenant_ids(request, self.edit_roles))
            kwargs["queryset"] = queryset
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class ServiceDeletionAdmin(TenantScopedAdmin):
    """Deletion through a service that can refuse (Milvus down, a re-index running), with honest messages: the
    history records, and the page reports, only what was deleted. Subclasses implement `delete_one`, which deletes
    one row with everything held for it and returns an error message instead when it could not."""

    def delete_one(self, request: HttpRequest, obj: models.Model) -> str | None:
        raise NotImplementedError

    def deletion_summary(self, obj: models.Model) -> tuple[str, dict[str, int]]:
        """One line saying what goes with `obj`, and those rows counted by kind."""
        raise NotImplementedError

    def get_deleted_objects(
        self, objs: Iterable[models.Model], request: HttpRequest
    ) -> tuple[list[str], dict[str, int], set[str], list[str]]:
        """What goes with each row, counted by kind, instead of Django's list of every related row (thousands of
        chunks). Deleting needs only the right to delete the row itself: the service takes the rest with it, which
        Django's own check would refuse (no one may delete a chunk by hand)."""
        summary, totals = [], Counter()
        for obj in objs:
            text, counts = self.deletion_summary(obj)
            summary.append(text)
            totals[str(self.opts.verbose_name_plural)] += 1
            totals.update(counts)
        return summary, dict(totals), set(), []

    def log_deletions(self, request: HttpRequest, queryset: Iterable[models.Model]) -> None:
        """Written by `_delete` once a row is really gone, not before as Django does."""

    def _delete(self, request: HttpRequest, obj: models.Model) -> bool:
        error = self.delete_one(request, obj)
        if error:
            self.message_user(request, f"{obj}: {error}", level=messages.ERROR)
            request._kb_not_deleted = True
            return False
        super().log_deletions(request, [obj])
        return True

    def delete_model(self, request: HttpRequest, obj: models.Model) -> None:
        self._delete(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for obj in queryset:
            self._delete(request, obj)

    def response_delete(self, request: HttpRequest, obj_display: str, obj_id: int | str) -> HttpResponse:
        if getattr(request, "_kb_not_deleted", False):  # the error is already on the page; no "deleted" beside it
            return self.response_post_save_change(request, None)
        return super().response_delete(request, obj_display, obj_id)

    def get_actions(self, request: HttpRequest) -> dict:
        actions = super().get_actions(request)
        if "delete_selected" in actions:
            _, name, description = actions["delete_selected"]
            actions["delete_selected"] = (type(self)._delete_selected, name, description)
        return actions

    def _delete_selected(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        """Django's confirmation page, then deletion row by row with a count of what was really deleted."""
        if not request.POST.get("post"):
            return delete_selected(self, request, queryset)
        allowed = [obj for obj in queryset if self.has_delete_permission(request, obj)]
        deleted = sum(self._delete(request, obj) for obj in allowed)
        noun = self.opts.verbose_name if deleted == 1 else self.opts.verbose_name_plural
        self.message_user(request, f"Deleted {deleted} {noun}.", level=messages.SUCCESS if deleted else messages.INFO)
        return None
