"""The conversations admin: the per-tenant dedup settings page and the dashboard (see `conversations.admin.views`),
and read-only views of conversations, turns, consumed items, the end users' feedback and the settings history. The
audit log's review is `conversations.admin.audit`.

Scoping comes from `TenantScopedAdmin`: every list, filter choice, detail page, action and export reads
through `get_queryset`, which holds only the tenants where the user has a role in `view_roles`. Settings change only
through the settings page, which records the history.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.text import Truncator

from conversations.admin import playground as admin_playground
from conversations.admin import views as admin_views

# Importing the audit log's admin registers it (Django imports only this module of an app).
from conversations.admin.audit import SUPPORT_ROLES, shows_tenant
from conversations.admin.verifiers import verifiers_train_from_reviews
from conversations.curated.curated import (
    curated_answer_create,
    curated_answer_delete,
    curated_answer_update,
    curated_answers_enable,
)
from conversations.curated.curated_import import curated_input_check
from conversations.models import (
    ConsumedItem,
    Conversation,
    CuratedAnswer,
    DedupEvent,
    DedupPolicy,
    Feedback,
    Intent,
    SettingsChange,
    Turn,
)
from conversations.services import conversation_records_delete
from kbplatform.errors import ApplicationError
from tenants.admin_scoping import ServiceDeletionAdmin, TenantScopedAdmin
from tenants.models import Role, Tenant


class RecordedByTheSystemMixin:
    """Conversations, turns and what they showed are written by the conversation service only: the admin
    may read them and a tenant admin may delete (purge) them, never add or edit them. A deletion goes through
    `conversation_records_delete`, so no hot copy in Redis keeps serving a deleted answer."""

    deleted_kind = ""  # the keyword of conversation_records_delete that takes this model's ids

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def deletion_summary(self, obj: Any) -> tuple[str, dict[str, int]]:
        return f"{self.opts.verbose_name} {obj}", {}

    def delete_one(self, request: HttpRequest, obj: Any) -> str | None:
        conversation_records_delete(tenant=obj.tenant, **{self.deleted_kind: [obj.pk]})
        return None


@admin.register(Conversation)
class ConversationAdmin(RecordedByTheSystemMixin, ServiceDeletionAdmin):
    deleted_kind = "conversation_ids"

    def deletion_summary(self, obj: Conversation) -> tuple[str, dict[str, int]]:
        turns = obj.turns.count()
        summary = f"conversation {obj.pk}: its {turns} turns, what they showed, their feedback; its audit events stay"
        return summary, {"turns": turns}

    list_display = (
        "id",
        "tenant",
        "knowledge_base",
        "user_id",
        "title",
        "turn_count",
        "last_active_at",
        "expires_at",
    )
    # RelatedOnlyFieldListFilter offers only tenants present in the scoped rows, never the full tenant list.
    list_filter = (("tenant", admin.RelatedOnlyFieldListFilter),)
    search_fields = ("user_id", "title")
    # A hash the chat endpoint finds the conversation by (turn/transcripts.py): nothing a person reads.
    exclude = ("transcript_digest",)
    view_roles = SUPPORT_ROLES

    def get_urls(self) -> list:
        """The playground (`conversations.admin.playground`): its page and the JSON endpoints its chat calls."""
        wrap = self.admin_site.admin_view
        return [
            path(
                "playground/",
                wrap(partial(admin_playground.playground_view, model_admin=self)),
                name="conversations_conversation_playground",
            ),
            path(
                "playground/start/",
                wrap(admin_playground.playground_conversation_create_view),
                name="conversations_conversation_playground_start",
            ),
            path(
                "playground/<int:conversation_id>/turns/",
                wrap(admin_playground.playground_turn_view),
                name="conversations_conversation_playground_turn",
            ),
            path(
                "playground/search/",
                wrap(admin_playground.playground_search_view),
                name="conversations_conversation_playground_search",
            ),
            *super().get_urls(),
        ]


@admin.register(Turn)
class TurnAdmin(RecordedByTheSystemMixin, ServiceDeletionAdmin):
    deleted_kind = "turn_ids"
    list_display = ("id", "conversation", "number", "intent", "decision", "similarity", "created_at")
    list_filter = ("decision",)
    search_fields = ("question",)
    exclude = ("question_vector",)
    view_roles = SUPPORT_ROLES


@admin.register(ConsumedItem)
class ConsumedItemAdmin(RecordedByTheSystemMixin, ServiceDeletionAdmin):
    deleted_kind = "consumed_item_ids"
    list_display = ("conversation", "kind", "item_id", "turn_number")
    view_roles = SUPPORT_ROLES


@admin.register(Feedback)
class FeedbackAdmin(TenantScopedAdmin):
    """The end users' ratings of answers, read-only: written by the API only (`feedback_set`), which also marks a
    thumbs-down on a served stored answer as a suspected false hit in the audit log, where support reviews it."""

    list_display = ("updated_at", "rating", "comment_excerpt", "turn", "conversation", "audit_event")
    list_filter = ("rating",)
    search_fields = ("comment", "turn__question")
    search_help_text = "Search the comment and the question."
    list_select_related = ("turn", "conversation", "tenant")
    exclude = ("turn",)
    readonly_fields = ("rating", "comment", "conversation", "turn_shown", "created_at", "updated_at", "audit_event")
    view_roles = SUPPORT_ROLES

    def get_list_display(self, request: HttpRequest) -> tuple:
        return ("tenant", *self.list_display) if shows_tenant(request, roles=self.view_roles) else self.list_display

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        """Each row with its turn's audit event (one per turn), read in the list's own query."""
        events = DedupEvent.objects.unscoped().filter(tenant_id=OuterRef("tenant_id"), turn_id=OuterRef("turn_id"))
        return (
            super()
            .get_queryset(request)
            .annotate(
                audit_event_id=Subquery(events.values("pk")[:1]),
                audit_action=Subquery(events.values("action")[:1]),
                audit_suspected=Subquery(events.values("suspected_false_hit")[:1]),
            )
        )

    @admin.display(description="Comment")
    def comment_excerpt(self, feedback: Feedback) -> str:
        return Truncator(feedback.comment).chars(90)

    @admin.display(description="Turn")
    def turn_shown(self, feedback: Feedback) -> str:
        return f"{feedback.turn}: {Truncator(feedback.turn.question).chars(200)}"

    @admin.display(description="Audit event")
    def audit_event(self, feedback: Feedback) -> str:
        """A link to the turn's dedup decision in the audit log, where a suspected false hit is reviewed."""
        if feedback.audit_event_id is None:
            return "–"
        url = reverse("admin:conversations_dedupevent_change", args=[feedback.audit_event_id])
        label = f"{feedback.audit_action}, suspected false hit" if feedback.audit_suspected else feedback.audit_action
        return format_html('<a href="{}">{}</a>', url, label)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class SettingsPageMixin:
    """Policy and intents change only through the settings page, which validates and records every change;
    their model pages are read-only for everyone and point there."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="Settings")
    def settings_link(self, obj: Any) -> str:
        url = reverse("admin:conversations_deduppolicy_settings")
        return format_html('<a href="{}?tenant={}">Open the settings page</a>', url, obj.tenant_id)


@admin.register(DedupPolicy)
class DedupPolicyAdmin(SettingsPageMixin, TenantScopedAdmin):
    list_display = (
        "tenant",
        "scope",
        "threshold",
        "question_window",
        "exclusion_window",
        "granularity",
        "settings_link",
    )
    view_roles = (Role.ADMIN,)
    actions = ("train_from_reviews",)

    @admin.action(description="Train from reviews (a new duplicate verifier version)", permissions=["view"])
    def train_from_reviews(self, request: HttpRequest, queryset: QuerySet) -> None:
        verifiers_train_from_reviews(self, request, queryset)

    def get_urls(self) -> list:
        view = self.admin_site.admin_view(partial(admin_views.dedup_settings_view, model_admin=self))
        return [path("settings/", view, name="conversations_deduppolicy_settings"), *super().get_urls()]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        policy = self.get_object(request, unquote(object_id))
        if policy is None or not self.has_view_permission(request, policy):
            return super().change_view(request, object_id, form_url, extra_context)
        url = reverse("admin:conversations_deduppolicy_settings")
        return HttpResponseRedirect(f"{url}?tenant={policy.tenant_id}")


@admin.register(Intent)
class IntentAdmin(SettingsPageMixin, TenantScopedAdmin):
    list_display = ("name", "tenant", "behaviour", "is_builtin", "example_count", "settings_link")
    exclude = ("example_vectors", "example_vectors_model")
    view_roles = SUPPORT_ROLES

    @admin.display(description="Examples")
    def example_count(self, obj: Intent) -> int:
        return len(obj.examples)


@admin.register(SettingsChange)
class SettingsChangeAdmin(TenantScopedAdmin):
    """The settings history, read-only: support reviewing decisions sees when and how the policy changed."""

    list_display = ("changed_at", "changed_by_label", "subject", "field", "old_value", "new_value")
    list_filter = ("subject", "field")
    search_fields = ("changed_by_label", "subject", "field")
    view_roles = SUPPORT_ROLES

    def get_list_display(self, request: HttpRequest) -> tuple:
        return ("tenant", *self.list_display) if shows_tenant(request, roles=self.view_roles) else self.list_display

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class CuratedAnswerForm(forms.ModelForm):
    """The answer with its phrasings (one a line) and cited chunk ids, checked as the API checks them."""

    questions = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 5}), help_text="The questions it answers, in any words: one a line."
    )
    cited_chunks = forms.CharField(
        required=False, help_text="Ids of the chunks it cites, separated by commas (from the chunks' admin page)."
    )

    class Meta:
        model = CuratedAnswer
        fields = ("tenant", "knowledge_base", "answer", "enabled", "external_id")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["questions"].initial = "\n".join(p.question for p in self.instance.phrasings.all())
            self.fields["cited_chunks"].initial = ", ".join(str(i) for i in self.instance.source_chunk_ids)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        tenant, knowledge_base = data.get("tenant") or self.instance.tenant_id, data.get("knowledge_base")
        tenant_id = getattr(tenant, "pk", tenant)
        if knowledge_base is not None and tenant_id is not None and knowledge_base.tenant_id != tenant_id:
            raise forms.ValidationError("The knowledge base belongs to another tenant.")
        try:
            self.curated = curated_input_check(
                answer=data.get("answer"),
                questions=(data.get("questions") or "").splitlines(),
                enabled=data.get("enabled", True),
                external_id=data.get("external_id"),
                source_chunk_ids=data.get("cited_chunks"),
            )
        except ApplicationError as error:
            fields = {"source_chunk_ids": "cited_chunks"}
            for name, problems in error.extra.get("fields", {}).items():
                self.add_error(fields.get(name, name) if fields.get(name, name) in self.fields else None, problems)
        return data


@admin.register(CuratedAnswer)
class CuratedAnswerAdmin(ServiceDeletionAdmin):
    """A knowledge base's curated answers: added, edited, disabled and deleted through `services.curated`, which
    embeds the phrasings with the knowledge base's model; every change takes effect on the next turn."""

    form = CuratedAnswerForm
    list_display = ("short_answer", "knowledge_base", "enabled", "phrasing_count", "updated_at")
    list_filter = ("enabled",)
    search_fields = ("answer", "external_id", "phrasings__question")
    actions = ("enable_selected", "disable_selected")

    @admin.display(description="Answer")
    def short_answer(self, obj: CuratedAnswer) -> str:
        return Truncator(obj.answer).chars(80)

    @admin.display(description="Phrasings")
    def phrasing_count(self, obj: CuratedAnswer) -> int:
        return obj.phrasings.count()

    def save_model(self, request: HttpRequest, obj: CuratedAnswer, form: CuratedAnswerForm, change: bool) -> None:
        checked = form.curated
        try:
            if change:
                curated_answer_update(
                    tenant=obj.tenant,
                    curated_answer=obj,
                    answer=checked.answer,
                    questions=checked.questions,
                    enabled=checked.enabled,
                    source_chunk_ids=checked.source_chunk_ids,
                )
            else:
                obj.pk = curated_answer_create(tenant=obj.tenant, knowledge_base=obj.knowledge_base, curated=checked).pk
        except ApplicationError as error:
            self.message_user(request, f"Not saved: {error.message}", level=messages.ERROR)

    def save_related(self, request: HttpRequest, form: CuratedAnswerForm, formsets: Any, change: bool) -> None:
        """The phrasings were written by the service."""

    def delete_one(self, request: HttpRequest, obj: CuratedAnswer) -> str | None:
        curated_answer_delete(tenant=obj.tenant, curated_answer=obj)
        return None

    def deletion_summary(self, obj: CuratedAnswer) -> tuple[str, dict[str, int]]:
        count = obj.phrasings.count()
        return f"{obj}: with its {count} phrasings", {"curated phrasings": count}

    def _enable(self, request: HttpRequest, queryset: QuerySet, enabled: bool) -> None:
        changed = 0
        for tenant_id in {obj.tenant_id for obj in queryset}:
            ids = [
                obj.pk for obj in queryset if obj.tenant_id == tenant_id and self.has_change_permission(request, obj)
            ]
            changed += curated_answers_enable(tenant=Tenant(pk=tenant_id), curated_answer_ids=ids, enabled=enabled)
        self.message_user(request, f"{'Enabled' if enabled else 'Disabled'} {changed} curated answers.")

    @admin.action(description="Enable the selected curated answers")
    def enable_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._enable(request, queryset, True)

    @admin.action(description="Disable the selected curated answers")
    def disable_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._enable(request, queryset, False)
