from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from tenants.scopes import SCOPE_ORDER, Scope
from tenants.scoping import TenantOwnedModel

slug_validator = RegexValidator(r"^[a-z0-9][a-z0-9-]{0,62}$", "Use lowercase letters, digits and hyphens.")


class Tenant(models.Model):
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=63, unique=True, validators=[slug_validator])
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Moves on every change to the tenant's conversation settings (dedup policy, intents). The tenant row comes
    # with every API key lookup, so a turn knows without another query whether its process's copy is current.
    settings_version = models.PositiveBigIntegerField(default=0, editable=False)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    ADMIN = "admin", "Tenant admin"
    SUPPORT = "support", "Support"
    VIEWER = "viewer", "Viewer"


class Membership(models.Model):
    """A user's role in one tenant. Memberships are what the admin site scopes by."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique_user_tenant")]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role})"


# Each scope's column on ApiKey.
SCOPE_FIELDS = {Scope.CHAT: "scope_chat", Scope.INGEST: "scope_ingest", Scope.ADMIN: "scope_admin"}


class ApiKey(TenantOwnedModel):
    """An API key. Only a SHA-256 hash of the whole key is stored; `prefix` identifies it to people and to the
    lookup. Keys are 32 random bytes, so a fast hash is safe (no dictionary to guess from) and keeps
    authentication off the request's critical path.

    What the key may do is its scopes (`tenants.scopes`), one column each rather than a list in one JSON column:
    "the tenant's active admin keys" is then a plain filter on SQLite as on PostgreSQL (SQLite has no JSON
    containment lookup), the admin lists and filters them as it does any boolean, and the database itself refuses a
    key with none (`api_key_has_a_scope`). A new scope is a migration either way, as widening what keys do should be.
    A key made with none named holds `chat` alone."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    hashed_key = models.CharField(max_length=64, editable=False)
    scope_chat = models.BooleanField(
        "chat", default=True, help_text="Conversations, messages, feedback, search; reading knowledge bases."
    )
    scope_ingest = models.BooleanField(
        "ingest", default=False, help_text="Documents and chunks: add, list, edit, delete, re-index."
    )
    scope_admin = models.BooleanField(
        "admin",
        default=False,
        help_text="Everything: API keys, the dedup policy, creating and deleting knowledge bases, the audit log with "
        "the policy's settings and its review.",
    )
    knowledge_base = models.ForeignKey(
        "retrieval.KnowledgeBase",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="api_keys",
        help_text="When set, the key reaches only this knowledge base.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(scope_chat=True) | models.Q(scope_ingest=True) | models.Q(scope_admin=True),
                name="api_key_has_a_scope",
                violation_error_message="An API key needs at least one scope (chat, ingest or admin).",
            )
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"

    @property
    def scopes(self) -> frozenset[Scope]:
        return frozenset(scope for scope in SCOPE_ORDER if getattr(self, SCOPE_FIELDS[scope]))

    def scopes_assign(self, scopes: frozenset[Scope]) -> None:
        """Set the scope columns to exactly `scopes` (not saved)."""
        for scope, field_name in SCOPE_FIELDS.items():
            setattr(self, field_name, scope in scopes)

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
