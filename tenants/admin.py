from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.http import HttpRequest

from tenants.admin_scoping import TenantScopedAdmin
from tenants.models import SCOPE_FIELDS, ApiKey, Membership, Role
from tenants.scopes import DEFAULT_SCOPES, scopes_sorted
from tenants.services import api_key_create, api_key_revoke, membership_set, user_get_or_create_by_email


class MembershipByEmailForm(forms.ModelForm):
    """Tenant admins add people by email: a list of every user of the platform would leak other tenants'
    people, so the user is never chosen from a list."""

    # The email becomes the account's user name, so it may be no longer than one.
    email = forms.EmailField(
        max_length=get_user_model()._meta.get_field(get_user_model().USERNAME_FIELD).max_length,
        help_text="The person's email; an account is created if there is none.",
    )

    class Meta:
        model = Membership
        fields = ("tenant", "role")


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin):
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role",)
    view_roles = (Role.ADMIN,)

    def get_form(
        self, request: HttpRequest, obj: Membership | None = None, change: bool = False, **kwargs: Any
    ) -> type[forms.ModelForm]:
        if not request.user.is_superuser and obj is None:
            kwargs["form"] = MembershipByEmailForm
            kwargs["fields"] = ("email", "tenant", "role")
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fieldsets(self, request: HttpRequest, obj: Membership | None = None) -> list:
        if not request.user.is_superuser and obj is None:
            return [(None, {"fields": ("email", "tenant", "role")})]
        return super().get_fieldsets(request, obj)

    def get_readonly_fields(self, request: HttpRequest, obj: Membership | None = None) -> tuple[str, ...]:
        return ("user", "tenant") if obj is not None and not request.user.is_superuser else ()

    def save_model(self, request: HttpRequest, obj: Membership, form: forms.ModelForm, change: bool) -> None:
        if "email" in form.cleaned_data:
            user = user_get_or_create_by_email(email=form.cleaned_data["email"])
            saved = membership_set(tenant=obj.tenant, user=user, role=obj.role)
            obj.pk, obj.user, obj.created_at = saved.pk, user, saved.created_at
            return
        super().save_model(request, obj, form, change)


class ApiKeyForm(forms.ModelForm):
    """A key limited to a knowledge base must belong to that knowledge base's tenant (the rule
    `api_key_create` enforces): the form offers the knowledge bases of every tenant the user administers. A key with
    no scope ticked gets `chat` alone, as one created through the API with none named does."""

    def clean(self) -> dict:
        cleaned = super().clean()
        if not any(cleaned.get(field_name) for field_name in SCOPE_FIELDS.values()):
            for scope in DEFAULT_SCOPES:
                cleaned[SCOPE_FIELDS[scope]] = True
        knowledge_base = cleaned.get("knowledge_base")
        tenant_id = cleaned["tenant"].pk if cleaned.get("tenant") else self.instance.tenant_id
        if knowledge_base is not None and tenant_id is not None and knowledge_base.tenant_id != tenant_id:
            self.add_error("knowledge_base", "This knowledge base belongs to another tenant than the key.")
        return cleaned


@admin.register(ApiKey)
class ApiKeyAdmin(TenantScopedAdmin):
    form = ApiKeyForm
    list_display = (
        "prefix",
        "name",
        "tenant",
        "scopes_display",
        "knowledge_base",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = tuple(SCOPE_FIELDS.values())
    search_fields = ("prefix", "name")
    fields = (
        "tenant",
        "name",
        tuple(SCOPE_FIELDS.values()),
        "knowledge_base",
        "prefix",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    view_roles = (Role.ADMIN,)
    actions = ("revoke_keys",)

    @admin.display(description="scopes")
    def scopes_display(self, obj: ApiKey) -> str:
        return ", ".join(scopes_sorted(obj.scopes))

    def save_model(self, request: HttpRequest, obj: ApiKey, form: forms.ModelForm, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        api_key, raw_key = api_key_create(
            tenant=obj.tenant,
            name=obj.name,
            scopes=obj.scopes,
            knowledge_base=obj.knowledge_base,
            created_by=request.user,
        )
        obj.pk = api_key.pk
        obj.prefix = api_key.prefix
        obj.hashed_key = api_key.hashed_key
        obj.created_at = api_key.created_at
        self.message_user(
            request,
            f"New API key (shown only now, copy it): {raw_key}",
            level=messages.WARNING,
        )

    @admin.action(description="Revoke selected keys")
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        count = 0
        for api_key in queryset:
            if self.has_change_permission(request, api_key):
                api_key_revoke(tenant=api_key.tenant, api_key=api_key)
                count += 1
        self.message_user(request, f"Revoked {count} key(s).")
