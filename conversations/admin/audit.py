"""The audit log's admin: support staff and tenant admins review every dedup decision (filters, verdicts, CSV export),
scoped by `TenantScopedAdmin` to the tenants where the user holds a role. Audit facts are never editable; the only
write is a review verdict (`dedup_events_review`). Registered when `conversations.admin` is imported."""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta
from functools import partial
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import unquote
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.text import Truncator

from conversations.admin import views as admin_views
from conversations.admin.services import dedup_events_review
from conversations.models import (
    DedupAction,
    DedupEvent,
    ReviewVerdict,
    Turn,
)
from conversations.review.dashboard import duration_display
from tenants.admin_scoping import TenantScopedAdmin, request_tenant_ids, request_tenant_roles
from tenants.models import Role

SUPPORT_ROLES = (Role.ADMIN, Role.SUPPORT)


def shows_tenant(request: HttpRequest, *, roles: tuple[str, ...]) -> bool:
    """Whether a list (and its export) names each row's tenant: when the user may see rows of more than one tenant
    (a superuser, or a role in `roles` in several), else rows of different tenants could not be told apart."""
    return request.user.is_superuser or len(request_tenant_ids(request, roles)) > 1


class InputFilter(admin.ListFilter):
    """A sidebar filter made of typed inputs (dates, numbers) rather than links. Bad input is refused with
    the admin's "incorrect lookup" page, never a server error."""

    template = "admin/conversations/input_filter.html"
    inputs: tuple[tuple[str, str, str], ...] = ()  # (query parameter, label, input type)

    def __init__(self, request: HttpRequest, params: dict, model: Any, model_admin: Any) -> None:
        super().__init__(request, params, model, model_admin)
        for name, _label, _kind in self.inputs:
            if name in params:
                value = params.pop(name)
                value = value[-1] if isinstance(value, list) else value
                if value.strip():
                    self.used_parameters[name] = value.strip()

    def has_output(self) -> bool:
        return True

    def expected_parameters(self) -> list[str]:
        return [name for name, _label, _kind in self.inputs]

    def choices(self, changelist: Any) -> Iterator[dict[str, Any]]:
        mine = set(self.expected_parameters())
        yield {
            "inputs": [
                {"name": name, "label": label, "type": kind, "value": self.used_parameters.get(name, "")}
                for name, label, kind in self.inputs
            ],
            "hidden": [(key, value) for key, value in self.request.GET.items() if key not in mine and key != "p"],
            "active": bool(self.used_parameters),
            "clear_url": changelist.get_query_string(remove=list(mine)),
        }

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        try:
            return self.apply(queryset)
        except (TypeError, ValueError, OverflowError) as error:
            # OverflowError: a date whose period cannot be expressed (the day after 9999-12-31).
            raise IncorrectLookupParameters(error) from error

    def apply(self, queryset: QuerySet) -> QuerySet:
        raise NotImplementedError


class CreatedRangeFilter(InputFilter):
    title = "date"
    inputs = (("created_from", "From", "date"), ("created_to", "To", "date"))

    def apply(self, queryset: QuerySet) -> QuerySet:
        tz = timezone.get_current_timezone()
        if "created_from" in self.used_parameters:
            start = date.fromisoformat(self.used_parameters["created_from"])
            queryset = queryset.filter(created_at__gte=datetime.combine(start, time.min, tzinfo=tz))
        if "created_to" in self.used_parameters:
            end = date.fromisoformat(self.used_parameters["created_to"]) + timedelta(days=1)
            queryset = queryset.filter(created_at__lt=datetime.combine(end, time.min, tzinfo=tz))
        return queryset


class SimilarityRangeFilter(InputFilter):
    title = "nearest-match similarity"
    inputs = (("similarity_min", "At least", "number"), ("similarity_max", "At most", "number"))

    def apply(self, queryset: QuerySet) -> QuerySet:
        if "similarity_min" in self.used_parameters:
            queryset = queryset.filter(similarity__gte=self._bound("similarity_min"))
        if "similarity_max" in self.used_parameters:
            queryset = queryset.filter(similarity__lte=self._bound("similarity_max"))
        return queryset

    def _bound(self, name: str) -> float:
        """A finite number: float() also reads "nan" and "inf", and PostgreSQL orders NaN above every number, so
        "at most nan" would pass every event as if it were a bound."""
        bound = float(self.used_parameters[name])
        if not math.isfinite(bound):
            raise ValueError(f"{name} must be a number, not {bound}.")
        return bound


class ConversationFilter(InputFilter):
    title = "conversation"
    inputs = (("conversation", "Conversation id", "number"),)

    def apply(self, queryset: QuerySet) -> QuerySet:
        if "conversation" in self.used_parameters:
            queryset = queryset.filter(conversation_ref=int(self.used_parameters["conversation"]))
        return queryset


class IntentFilter(admin.SimpleListFilter):
    """Intents that occur in the events the user may see (never another tenant's intent names)."""

    title = "intent"
    parameter_name = "intent"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = model_admin.get_queryset(request).order_by("intent").values_list("intent", flat=True).distinct()
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(intent=self.value()) if self.value() else queryset


class ReviewFilter(admin.SimpleListFilter):
    title = "review"
    parameter_name = "reviewed"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("no", "Not reviewed"),
            ("yes", "Reviewed"),
            (ReviewVerdict.CORRECT, "Reviewed: correct"),
            (ReviewVerdict.INCORRECT, "Reviewed: incorrect"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if value == "no":
            return queryset.filter(review_verdict=ReviewVerdict.UNREVIEWED)
        if value == "yes":
            return queryset.exclude(review_verdict=ReviewVerdict.UNREVIEWED)
        if value in (ReviewVerdict.CORRECT, ReviewVerdict.INCORRECT):
            return queryset.filter(review_verdict=value)
        return queryset


class ReviewActionForm(ActionForm):
    note = forms.CharField(
        required=False,
        label="Review note:",
        widget=forms.TextInput(attrs={"size": 40, "placeholder": "why (optional; empty keeps the notes)"}),
    )


class DedupEventForm(forms.ModelForm):
    class Meta:
        model = DedupEvent
        fields = ("review_verdict", "review_note")
        widgets = {
            "review_verdict": forms.RadioSelect,
            "review_note": forms.Textarea(attrs={"rows": 3, "cols": 60}),
        }
        help_texts = {
            "review_verdict": "For a served stored answer, incorrect means a false hit; for a fresh answer that "
            "had a near match, incorrect means a missed repeat.",
        }


ACTION_SHORT = {
    DedupAction.ANSWERED: "answered",
    DedupAction.SERVED_CACHED: "served stored",
    DedupAction.BYPASSED: "bypassed",
    DedupAction.SMALLTALK: "small talk",
}
REVIEW_SHORT = {
    ReviewVerdict.UNREVIEWED: "–",
    ReviewVerdict.CORRECT: "correct",
    ReviewVerdict.INCORRECT: "incorrect",
}

EXPORT_COLUMNS = (
    "id",
    "created_at",
    "conversation_ref",
    "turn_ref",
    "question",
    "matched_turn_ref",
    "matched_question",
    "action",
    "intent",
    "reason",
    "similarity",
    "pair_probability",
    "match_passes_checks",
    "threshold",
    "scope",
    "shadow",
    "relaxed",
    "excluded_count",
    "tokens_saved",
    "ms_saved",
    "review_verdict",
    "review_note",
    "reviewed_by",
    "reviewed_at",
    "suspected_false_hit",
    "suspected_false_hit_at",
    "embedding_model",
)


PLAIN_NUMBER = re.compile(r"-?\d+(\.\d+)?")


def csv_safe(value: Any) -> Any:
    """Text a spreadsheet would run as a formula (=, +, -, @ first) is quoted, so an exported question
    cannot execute in the reviewer's spreadsheet. A plain number such as a negative similarity is no formula
    and stays a number."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r") and not PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value


class _Echo:
    def write(self, value: str) -> str:
        return value


@admin.register(DedupEvent)
class DedupEventAdmin(TenantScopedAdmin):
    # Support reviews decisions: both roles may change an event, but only its review fields (the form holds
    # nothing else, and saving goes through `dedup_events_review`, which writes only those).
    view_roles = SUPPORT_ROLES
    edit_roles = SUPPORT_ROLES
    form = DedupEventForm
    action_form = ReviewActionForm
    actions = ("mark_correct", "mark_incorrect", "mark_unreviewed")
    list_display = (
        "created",
        "question_excerpt",
        "action_shown",
        "similarity_shown",
        "intent",
        "conversation_shown",
        "flags",
        "review_shown",
    )
    list_display_links = ("created", "question_excerpt")
    list_filter = (
        "action",
        IntentFilter,
        ReviewFilter,
        CreatedRangeFilter,
        SimilarityRangeFilter,
        ConversationFilter,
        "suspected_false_hit",
        "shadow",
        "relaxed",
        "embedding_model",
    )
    search_fields = ("turn__question",)
    search_help_text = "Search the question text."
    list_select_related = ("turn", "tenant")
    list_per_page = 50
    readonly_fields = (
        "created_at",
        "action",
        "intent",
        "reason",
        "similarity",
        "pair_probability",
        "match_passes_checks",
        "embedding_model",
        "threshold",
        "scope",
        "shadow",
        "question_window",
        "exclusion_window",
        "granularity",
        "excluded_count",
        "relaxed",
        "tokens_saved",
        "time_saved",
        "conversation_ref",
        "turn_ref",
        "matched_turn_ref",
        "reviewed_by",
        "reviewed_at",
        "suspected_false_hit",
        "suspected_false_hit_at",
    )
    fieldsets = (
        ("Review", {"fields": ("review_verdict", "review_note", "reviewed_by", "reviewed_at")}),
        ("End user's feedback", {"fields": ("suspected_false_hit", "suspected_false_hit_at")}),
        (
            "Decision",
            {
                "fields": (
                    "created_at",
                    "action",
                    "intent",
                    "reason",
                    "similarity",
                    "pair_probability",
                    "match_passes_checks",
                    "embedding_model",
                    "threshold",
                    "scope",
                    "shadow",
                )
            },
        ),
        (
            "Retrieval",
            {"fields": ("question_window", "exclusion_window", "granularity", "excluded_count", "relaxed")},
        ),
        ("Savings", {"fields": ("tokens_saved", "time_saved")}),
        ("References", {"fields": ("conversation_ref", "turn_ref", "matched_turn_ref")}),
    )

    # --- list ----------------------------------------------------------------------------------------------
    def get_list_display(self, request: HttpRequest) -> tuple:
        return ("tenant", *self.list_display) if shows_tenant(request, roles=self.view_roles) else self.list_display

    @admin.display(description="When", ordering="created_at")
    def created(self, event: DedupEvent) -> str:
        return timezone.localtime(event.created_at).strftime("%Y-%m-%d %H:%M")

    @admin.display(description="Conv.", ordering="conversation_ref")
    def conversation_shown(self, event: DedupEvent) -> int:
        return event.conversation_ref

    @admin.display(description="Decision", ordering="action")
    def action_shown(self, event: DedupEvent) -> str:
        return ACTION_SHORT.get(event.action, event.action)

    @admin.display(description="Review", ordering="review_verdict")
    def review_shown(self, event: DedupEvent) -> str:
        return REVIEW_SHORT.get(event.review_verdict, event.review_verdict)

    @admin.display(description="Question")
    def question_excerpt(self, event: DedupEvent) -> str:
        if event.turn is None:
            return "(purged)"
        return Truncator(event.turn.question).chars(90)

    @admin.display(description="Similarity", ordering="similarity")
    def similarity_shown(self, event: DedupEvent) -> str:
        return "–" if event.similarity is None else f"{event.similarity:.3f}"

    @admin.display(description="Flags")
    def flags(self, event: DedupEvent) -> str:
        shown = []
        if event.suspected_false_hit:
            shown.append("suspected false hit")
        if event.shadow:
            shown.append("shadow")
        if event.relaxed:
            shown.append("relaxed")
        if event.excluded_count:
            shown.append(f"{event.excluded_count} excluded")
        return ", ".join(shown)

    @admin.display(description="Time saved")
    def time_saved(self, event: DedupEvent) -> str:
        return duration_display(event.ms_saved)

    # --- permissions: the audit log is appended by the system only ----------------------------------------
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    # --- review --------------------------------------------------------------------------------------------
    def response_action(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        """A note the form refuses (a NUL character) is named, instead of Django's message "No action selected"."""
        form = self.action_form(request.POST, auto_id=None)
        form.fields["action"].choices = self.get_action_choices(request)
        if not form.is_valid() and "note" in form.errors:
            problems = " ".join(form.errors["note"])
            self.message_user(request, f"Review note: {problems} Nothing was changed.", level=messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())
        return super().response_action(request, queryset)

    def _review(self, request: HttpRequest, queryset: QuerySet, verdict: str) -> None:
        """Review the selected events, tenant by tenant, only where the user's role allows reviewing."""
        roles = request_tenant_roles(request)
        # The note box is optional and starts empty: left empty, it keeps the notes the events already have.
        note = request.POST.get("note", "").strip() or None
        reviewed = 0
        by_tenant: dict[Any, list[int]] = {}
        for event in queryset.select_related("tenant"):
            if request.user.is_superuser or roles.get(event.tenant_id) in self.edit_roles:
                by_tenant.setdefault(event.tenant, []).append(event.pk)
        for tenant, event_ids in by_tenant.items():
            reviewed += dedup_events_review(
                tenant=tenant, event_ids=event_ids, user=request.user, verdict=verdict, note=note
            )
        self.message_user(request, f"{reviewed} event(s) marked {ReviewVerdict(verdict).label.lower()}.")

    @admin.action(description="Mark as correct decisions", permissions=["change"])
    def mark_correct(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._review(request, queryset, ReviewVerdict.CORRECT)

    @admin.action(description="Mark as incorrect (false hit / missed repeat)", permissions=["change"])
    def mark_incorrect(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._review(request, queryset, ReviewVerdict.INCORRECT)

    @admin.action(description="Clear the review", permissions=["change"])
    def mark_unreviewed(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._review(request, queryset, ReviewVerdict.UNREVIEWED)

    def save_model(self, request: HttpRequest, obj: DedupEvent, form: forms.ModelForm, change: bool) -> None:
        dedup_events_review(
            tenant=obj.tenant,
            event_ids=[obj.pk],
            user=request.user,
            verdict=form.cleaned_data["review_verdict"],
            note=form.cleaned_data.get("review_note", ""),
        )
        obj.refresh_from_db()

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        return super().changelist_view(request, {"title": "Dedup decisions (audit log)", **(extra_context or {})})

    # --- detail: the new question beside the one it matched ------------------------------------------------
    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        event = self.get_object(request, unquote(object_id))
        extra_context = {"title": "Review a dedup decision", **(extra_context or {})}
        if event is not None and self.has_view_permission(request, event):
            ids = [pk for pk in (event.turn_id, event.matched_turn_id) if pk is not None]
            turns = {turn.pk: turn for turn in Turn.objects.for_tenant(event.tenant_id).filter(pk__in=ids)}
            extra_context["comparison"] = {
                "turn": turns.get(event.turn_id),
                "matched": turns.get(event.matched_turn_id),
                "served": event.action == DedupAction.SERVED_CACHED,
            }
        return super().change_view(request, object_id, form_url, extra_context)

    # --- extra pages: dashboard and CSV export --------------------------------------------------------------
    def get_urls(self) -> list:
        dashboard = self.admin_site.admin_view(partial(admin_views.dedup_dashboard_view, model_admin=self))
        export = self.admin_site.admin_view(self.export_view)
        queue = self.admin_site.admin_view(partial(admin_views.review_queue_view, model_admin=self))
        return [
            path("review-queue/", queue, name="conversations_dedupevent_review_queue"),
            path("dashboard/", dashboard, name="conversations_dedupevent_dashboard"),
            path("export/", export, name="conversations_dedupevent_export"),
            *super().get_urls(),
        ]

    def export_view(self, request: HttpRequest) -> HttpResponse:
        """The changelist's current filtered and searched list, every row (not just one page), as CSV."""
        if not self.has_view_permission(request):
            return HttpResponse("You may not export the audit log.", status=403, content_type="text/plain")
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters:
            messages.error(request, "The filters are not valid; fix them and export again.")
            return HttpResponseRedirect(reverse("admin:conversations_dedupevent_changelist"))
        queryset = changelist.get_queryset(request).select_related("turn", "matched_turn", "reviewed_by", "tenant")
        with_tenant = shows_tenant(request, roles=self.view_roles)
        writer = csv.writer(_Echo())

        def rows() -> Iterator[str]:
            yield writer.writerow((["tenant"] if with_tenant else []) + list(EXPORT_COLUMNS))
            for event in queryset.iterator(chunk_size=1000):
                values = [
                    event.pk,
                    event.created_at.isoformat(),
                    event.conversation_ref,
                    event.turn_ref,
                    event.turn.question if event.turn else "",
                    event.matched_turn_ref,
                    event.matched_turn.question if event.matched_turn else "",
                    event.action,
                    event.intent,
                    event.reason,
                    "" if event.similarity is None else f"{event.similarity:.4f}",
                    "" if event.pair_probability is None else f"{event.pair_probability:.4f}",
                    "" if event.match_passes_checks is None else event.match_passes_checks,
                    event.threshold,
                    event.scope,
                    event.shadow,
                    event.relaxed,
                    event.excluded_count,
                    event.tokens_saved,
                    f"{event.ms_saved:.1f}",
                    event.review_verdict,
                    event.review_note,
                    event.reviewed_by.get_username() if event.reviewed_by else "",
                    event.reviewed_at.isoformat() if event.reviewed_at else "",
                    event.suspected_false_hit,
                    event.suspected_false_hit_at.isoformat() if event.suspected_false_hit_at else "",
                    event.embedding_model,
                ]
                yield writer.writerow(
                    [csv_safe(value) for value in ([event.tenant.slug] if with_tenant else []) + values]
                )

        stamp = timezone.localtime().strftime("%Y%m%d-%H%M")
        response = StreamingHttpResponse(rows(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="dedup-events-{stamp}.csv"'
        return response
