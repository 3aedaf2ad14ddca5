"""Plain, tenant-scoped registrations; the rich review UI is built separately."""

from __future__ import annotations

from django.contrib import admin

from conversations.models import ConsumedItem, Conversation, DedupEvent, DedupPolicy, Intent, Turn
from tenants.admin_scoping import TenantScopedAdmin


@admin.register(Conversation)
class ConversationAdmin(TenantScopedAdmin):
    list_display = ("id", "tenant", "knowledge_base", "user_id", "turn_count", "last_active_at", "expires_at")
    list_filter = ("tenant",)
    search_fields = ("user_id",)


@admin.register(Turn)
class TurnAdmin(TenantScopedAdmin):
    list_display = ("id", "conversation", "number", "intent", "decision", "similarity", "created_at")
    list_filter = ("decision", "intent")
    search_fields = ("question",)
    exclude = ("question_vector",)


@admin.register(ConsumedItem)
class ConsumedItemAdmin(TenantScopedAdmin):
    list_display = ("conversation", "kind", "item_id", "turn_number")


@admin.register(DedupPolicy)
class DedupPolicyAdmin(TenantScopedAdmin):
    list_display = ("tenant", "scope", "threshold", "question_window", "exclusion_window", "granularity")


@admin.register(Intent)
class IntentAdmin(TenantScopedAdmin):
    list_display = ("tenant", "name", "behaviour", "is_builtin")
    exclude = ("example_vectors",)


@admin.register(DedupEvent)
class DedupEventAdmin(TenantScopedAdmin):
    list_display = ("created_at", "tenant", "conversation_ref", "action", "similarity", "review_verdict")
    list_filter = ("action", "review_verdict")
