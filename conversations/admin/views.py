"""Admin pages beyond the model lists: the per-tenant dedup settings page (tenant admins only) and the dedup
dashboard (tenant admins and support). Both resolve the tenant from the request's memberships: a tenant the
user has no role in is a 404, a tenant where their role is too low a 403, so no page reveals another tenant.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.forms import formset_factory
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from conversations.admin.services import (
    dedup_events_review,
    dedup_policy_change,
    dedup_policy_get_or_create,
    intent_allowlist_choices,
    intent_delete,
    intent_save,
)
from conversations.dedup.decisions import POLICY_FIELDS, cosine_gate, cosine_gate_floor
from conversations.models import INTENT_OTHER, DedupPolicy, Intent, IntentBehaviour, ReviewVerdict, SettingsChange
from conversations.review.dashboard import (
    MAX_PERIOD_DAYS,
    duration_display,
    histogram_first_shown,
    percent_display,
    threshold_display,
)
from conversations.review.dashboard_selectors import dashboard_get, settings_changes_in_period
from conversations.review.labels import stored_question_of
from conversations.review.review_queue import review_queue_of_day
from retrieval.embeddings import model_name as embedding_model_name
from tenants.admin_scoping import request_tenant_roles
from tenants.models import Role, Tenant

SETTINGS_ROLES = (Role.ADMIN,)
DASHBOARD_ROLES = (Role.ADMIN, Role.SUPPORT)
HISTORY_ON_PAGE = 25
SETTINGS_GROUPS = (
    (
        "Question dedup",
        (
            "scope",
            "threshold",
            "question_window",
            "allowlisted_intents",
            "shadow_mode",
            "rewrite_followups",
            "precision_target",
        ),
    ),
    (
        "Retrieval exclusion and conversation state",
        ("exclusion_enabled", "exclusion_window", "granularity", "min_results", "ttl_seconds"),
    ),
)


def admin_tenant_resolve(request: HttpRequest, *, roles: tuple[str, ...]) -> Tenant:
    """The tenant named by `?tenant=<id>`, else the user's first tenant (by slug) where they hold one of
    `roles`. A tenant the user has no membership in is a 404 (its existence is not revealed); one where their
    role is not in `roles` is a 403. Superusers may open any tenant."""
    memberships = request_tenant_roles(request)
    raw = request.GET.get("tenant") or request.POST.get("tenant")
    if raw:
        try:
            tenant_id = int(raw)
        except ValueError:
            raise Http404("No such tenant.") from None
        if request.user.is_superuser:
            tenant = Tenant.objects.filter(pk=tenant_id).first()
        elif tenant_id not in memberships:
            tenant = None
        elif memberships[tenant_id] not in roles:
            raise PermissionDenied("Your role in this tenant does not allow this page.")
        else:
            tenant = Tenant.objects.filter(pk=tenant_id, is_active=True).first()
        if tenant is None:
            raise Http404("No such tenant.")
        return tenant
    if request.user.is_superuser:
        tenant = Tenant.objects.order_by("slug").first()
    else:
        allowed = [tenant_id for tenant_id, role in memberships.items() if role in roles]
        tenant = Tenant.objects.filter(pk__in=allowed).order_by("slug").first()
    if tenant is None:
        raise PermissionDenied("This page is for tenant admins.")
    return tenant


def tenants_for(request: HttpRequest, *, roles: tuple[str, ...]) -> list[Tenant]:
    """The tenants the tenant picker offers: those where the user holds one of `roles`."""
    if request.user.is_superuser:
        return list(Tenant.objects.order_by("slug"))
    allowed = [tenant_id for tenant_id, role in request_tenant_roles(request).items() if role in roles]
    return list(Tenant.objects.filter(pk__in=allowed, is_active=True).order_by("slug"))


# --- settings page -----------------------------------------------------------------------------------------
class DedupSettingsForm(forms.ModelForm):
    allowlisted_intents = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple,
        required=False,
        label="Intent allowlist",
        help_text="Question dedup applies only to questions of these intents; other intents always get a fresh answer.",
    )

    class Meta:
        model = DedupPolicy
        fields = POLICY_FIELDS
        labels = {
            "scope": "Dedup scope",
            "threshold": "Similarity threshold",
            "question_window": "Question window (turns)",
            "exclusion_enabled": "Exclude passages already shown",
            "exclusion_window": "Exclusion window (turns)",
            "granularity": "Exclusion granularity",
            "min_results": "Minimum results",
            "ttl_seconds": "Conversation state TTL (seconds)",
            "shadow_mode": "Shadow mode",
            "rewrite_followups": "Rewrite follow-ups (LLM)",
        }
        help_texts = {
            "scope": "Which earlier questions a new question is compared with.",
            "question_window": "How many recent questions in scope are compared (1 to 100).",
            "exclusion_window": "Passages shown in this many recent turns are not shown again (1 to 100).",
            "min_results": "When exclusion leaves fewer results than this, it is relaxed for the turn (0 to 100).",
            "ttl_seconds": "How long a quiet conversation keeps its hot state.",
            "shadow_mode": "Decide and log duplicates, but always answer afresh: measure before switching on.",
            "rewrite_followups": 'With an LLM configured, a follow-up ("and for admins?") is rewritten into a '
            "standalone question before the duplicate check and the search; the rewrite is kept on the turn and its "
            "audit event.",
        }

    def __init__(self, *args: Any, intent_labels: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["allowlisted_intents"].choices = list(intent_labels.items())
        self.fields["threshold"].widget.attrs.update({"step": "0.01", "min": "0.01", "max": "1"})

    def clean_threshold(self) -> float:
        threshold = self.cleaned_data["threshold"]
        if not 0 < threshold <= 1:
            raise ValidationError("The threshold is a cosine similarity: give a value above 0 and at most 1.")
        return threshold


class IntentForm(forms.Form):
    """One row of the intents table: an existing intent (id set, name fixed) or a new one."""

    id = forms.IntegerField(required=False, widget=forms.HiddenInput)
    name = forms.SlugField(max_length=64, required=False, help_text="Lowercase letters, digits, - and _.")
    behaviour = forms.ChoiceField(choices=IntentBehaviour.choices, initial=IntentBehaviour.NORMAL, required=False)
    examples = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        required=False,
        help_text="One example phrase per line.",
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        cleaned["behaviour"] = cleaned.get("behaviour") or IntentBehaviour.NORMAL
        if cleaned.get("id") is None and not cleaned.get("name") and not cleaned.get("examples", "").strip():
            cleaned["blank"] = True  # the empty row for a new intent, left empty
            return cleaned
        deleting = cleaned.get("DELETE")
        if cleaned.get("id") is None and not deleting and not cleaned.get("name"):
            self.add_error("name", "Name the new intent.")
        if not deleting and not [line for line in cleaned.get("examples", "").splitlines() if line.strip()]:
            self.add_error("examples", "Give at least one example phrase.")
        return cleaned


class BaseIntentFormSet(forms.BaseFormSet):
    def clean(self) -> None:
        """Each intent is edited on one row. The page never repeats an id, but a hand-made form that did would
        apply two edits to one intent in turn: delete it, then change the deleted row (a server error), or
        change it, then delete it (the change silently lost)."""
        ids = [form.cleaned_data["id"] for form in self.forms if form.cleaned_data.get("id") is not None]
        if len(ids) != len(set(ids)):
            raise ValidationError("An intent appears on more than one row; reload the page and edit it once.")


IntentFormSet = formset_factory(IntentForm, formset=BaseIntentFormSet, extra=1, can_delete=True)


def _intent_initial(intents: list[Intent]) -> list[dict[str, Any]]:
    return [
        {"id": intent.pk, "name": intent.name, "behaviour": intent.behaviour, "examples": "\n".join(intent.examples)}
        for intent in intents
    ]


def _apply_settings(
    *, tenant: Tenant, user: Any, form: DedupSettingsForm, formset: Any, intents: dict[int, Intent]
) -> int | None:
    """Save the policy and the intents in one transaction; the number of recorded changes, or None when a
    service refused a value (its message is put on the form, and nothing is saved)."""
    recorded = 0
    failed = False
    with transaction.atomic():
        try:
            recorded += len(
                dedup_policy_change(
                    tenant=tenant, user=user, changes={field: form.cleaned_data[field] for field in POLICY_FIELDS}
                )
            )
        except ValidationError as error:
            form.add_error(None, error)
            failed = True
        for intent_form in formset.forms:
            data = intent_form.cleaned_data
            if not data or data.get("blank"):
                continue
            intent = intents.get(data["id"]) if data.get("id") is not None else None
            if data.get("id") is not None and intent is None:
                intent_form.add_error(None, "This intent no longer exists; reload the page.")
                failed = True
                continue
            try:
                if data.get("DELETE"):
                    if intent is not None:
                        intent_delete(tenant=tenant, user=user, intent=intent)
                        recorded += 1
                    continue
                _, changes = intent_save(
                    tenant=tenant,
                    user=user,
                    intent=intent,
                    name=intent.name if intent else data["name"],
                    behaviour=data["behaviour"],
                    examples=data["examples"].splitlines(),
                )
                recorded += len(changes)
            except ValidationError as error:
                intent_form.add_error(None, error.messages)
                failed = True
        if failed:
            transaction.set_rollback(True)
    return None if failed else recorded


def dedup_settings_view(request: HttpRequest, model_admin: admin.ModelAdmin) -> HttpResponse:
    """The tenant's dedup settings and intents on one page, with the most recent settings history."""
    tenant = admin_tenant_resolve(request, roles=SETTINGS_ROLES)
    policy = dedup_policy_get_or_create(tenant=tenant)
    intents = list(Intent.objects.for_tenant(tenant).order_by("name"))
    by_id = {intent.pk: intent for intent in intents}
    behaviours = {intent.name: intent.get_behaviour_display() for intent in intents}
    intent_labels = {
        name: f"{name} ({behaviours[name]})" if name in behaviours else f"{name} (no intent matched)"
        for name in intent_allowlist_choices(tenant=tenant)
    }

    if request.method == "POST":
        form = DedupSettingsForm(request.POST, instance=policy, intent_labels=intent_labels)
        formset = IntentFormSet(request.POST, initial=_intent_initial(intents), prefix="intents")
        if form.is_valid() and formset.is_valid():
            recorded = _apply_settings(tenant=tenant, user=request.user, form=form, formset=formset, intents=by_id)
            if recorded is not None:
                if recorded:
                    messages.success(request, f"Settings saved: {recorded} change(s) recorded in the history.")
                else:
                    messages.info(request, "Nothing changed.")
                return HttpResponseRedirect(f"{request.path}?tenant={tenant.pk}")
        messages.error(request, "Please correct the errors below; nothing was saved.")
    else:
        form = DedupSettingsForm(instance=policy, intent_labels=intent_labels)
        formset = IntentFormSet(initial=_intent_initial(intents), prefix="intents")

    history = list(SettingsChange.objects.for_tenant(tenant).select_related("changed_by")[:HISTORY_ON_PAGE])
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"Dedup settings of {tenant.name}",
        "subtitle": None,
        "tenant": tenant,
        "tenants": tenants_for(request, roles=SETTINGS_ROLES),
        "policy": policy,
        "form": form,
        "groups": [(title, [form[name] for name in names]) for title, names in SETTINGS_GROUPS],
        "formset": formset,
        "builtin_ids": {intent.pk for intent in intents if intent.is_builtin},
        "history": history,
        "history_url": reverse("admin:conversations_settingschange_changelist"),
        "dashboard_url": reverse("admin:conversations_dedupevent_dashboard"),
        "opts": model_admin.model._meta,
        "intent_other": INTENT_OTHER,
    }
    return TemplateResponse(request, "admin/conversations/dedup_settings.html", context)


# --- dashboard ---------------------------------------------------------------------------------------------
class DashboardPeriodForm(forms.Form):
    start = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}))

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        start, end = cleaned.get("start"), cleaned.get("end")
        if start and end:
            if end < start:
                self.add_error("end", "The end date must not be before the start date.")
            elif (end - start).days + 1 > MAX_PERIOD_DAYS:
                self.add_error("end", f"Choose a period of at most {MAX_PERIOD_DAYS} days.")
            elif end == date.max:
                # The period runs to the start of the day after `end`, which the calendar does not have.
                self.add_error("end", f"Choose an end date before {date.max.isoformat()}.")
        return cleaned


def default_period(today: date | None = None) -> tuple[date, date]:
    today = today or timezone.localdate()
    return today - timedelta(days=29), today


def _chart_data(dashboard: Any) -> dict[str, Any]:
    days = dashboard.days
    return {
        "days": {
            "labels": [day.day.isoformat() for day in days],
            "turns": [day.totals.turns for day in days],
            "hits": [day.totals.hits for day in days],
            "hit_rate": [
                round(day.totals.hit_rate * 100, 1) if day.totals.hit_rate is not None else None for day in days
            ],
            "tokens_saved": [day.totals.tokens_saved for day in days],
            "seconds_saved": [round(day.totals.ms_saved / 1000, 2) for day in days],
            "passages_avoided": [day.totals.passages_avoided for day in days],
            "relaxed": [day.totals.relaxed for day in days],
            "reviewed_hits": [day.totals.reviewed_hits for day in days],
            "false_hits": [day.totals.false_hits for day in days],
            "false_hit_rate": [
                round(day.totals.false_hit_rate * 100, 1) if day.totals.false_hit_rate is not None else None
                for day in days
            ],
        },
        "histogram": {
            # The chart starts at this bin (`histogram_first_shown`): the threshold's line always falls on it.
            "first": histogram_first_shown(dashboard.histogram, threshold=dashboard.threshold),
            "labels": [f"{b.low:.3f}" for b in dashboard.histogram],
            "lows": [b.low for b in dashboard.histogram],
            "width": dashboard.histogram[0].high - dashboard.histogram[0].low if dashboard.histogram else 0,
            "hits": [b.hits for b in dashboard.histogram],
            "misses": [b.misses for b in dashboard.histogram],
            "threshold": dashboard.threshold,
            "threshold_label": threshold_display(dashboard.threshold),
        },
    }


def dedup_dashboard_view(request: HttpRequest, model_admin: admin.ModelAdmin) -> HttpResponse:
    """Figures of one tenant over a chosen period: savings, rates, per-day charts, the similarity histogram
    with the current threshold, and the threshold what-if table from reviewed decisions."""
    tenant = admin_tenant_resolve(request, roles=DASHBOARD_ROLES)
    start, end = default_period()
    period_form = DashboardPeriodForm(
        request.GET if "start" in request.GET else None, initial={"start": start, "end": end}
    )
    if period_form.is_bound and period_form.is_valid():
        start, end = period_form.cleaned_data["start"], period_form.cleaned_data["end"]
    policy = dedup_policy_get_or_create(tenant=tenant)
    dashboard = None
    if not period_form.is_bound or period_form.is_valid():
        # The gate the decisions apply, which is not the policy's threshold when they run without the duplicate head,
        # and the lowest they can apply then (the what-if table lists no threshold below it). Read for the default
        # model: every offered model has a head of its own applied at the policy's threshold, so the gate is the same
        # for the tenant's knowledge bases of either model (each event records the gate it was decided at).
        head = {"use_head": settings.DUPLICATE_HEAD, "embedding_model": embedding_model_name()}
        dashboard = dashboard_get(
            tenant=tenant,
            start=start,
            end=end,
            threshold=cosine_gate(threshold=policy.threshold, **head),
            lowest_threshold=cosine_gate_floor(**head),
        )
    roles = request_tenant_roles(request)
    displays = {}
    if dashboard is not None:
        totals = dashboard.totals
        displays = {
            "hit_rate_display": percent_display(totals.hit_rate),
            "false_hit_rate_display": percent_display(totals.false_hit_rate),
            "tokens_saved_display": f"{totals.tokens_saved:,}",
            "time_saved_display": duration_display(totals.ms_saved),
            "threshold_display": threshold_display(dashboard.threshold),
            "policy_threshold_display": threshold_display(policy.threshold),
            "lowest_threshold_display": (
                threshold_display(dashboard.lowest_threshold) if dashboard.lowest_threshold is not None else None
            ),
            "what_if_rows": [
                {
                    "threshold_display": threshold_display(row.threshold),
                    "hits": row.hits,
                    "false_hits": row.false_hits,
                    "precision_display": percent_display(row.precision),
                    "missed_repeats": row.missed_repeats,
                    "is_current": row.is_current,
                    # One cell per verifier in shadow: what it would have served of the reviewed decisions it saw.
                    "models": [
                        {
                            "hits": model.rows[index].hits,
                            "precision_display": percent_display(model.rows[index].precision),
                        }
                        for model in dashboard.what_if_models
                    ],
                }
                for index, row in enumerate(dashboard.what_if)
            ],
            "what_if_models": [{"label": model.label, "sample": model.sample} for model in dashboard.what_if_models],
        }
    context = {
        **displays,
        **model_admin.admin_site.each_context(request),
        "title": f"Dedup dashboard of {tenant.name}",
        "subtitle": None,
        "tenant": tenant,
        "tenants": tenants_for(request, roles=DASHBOARD_ROLES),
        "period_form": period_form,
        "start": start,
        "end": end,
        "dashboard": dashboard,
        "chart_data": _chart_data(dashboard) if dashboard else None,
        "period_changes": settings_changes_in_period(tenant=tenant, start=start, end=end) if dashboard else [],
        "policy": policy,
        "can_change_settings": request.user.is_superuser or roles.get(tenant.pk) in SETTINGS_ROLES,
        "settings_url": reverse("admin:conversations_deduppolicy_settings"),
        "playground_url": reverse("admin:conversations_conversation_playground"),
        # The events the figures are computed from: this tenant's, in this period (the audit log's own filters).
        "events_url": reverse("admin:conversations_dedupevent_changelist")
        + "?"
        + urlencode({"tenant__id__exact": tenant.pk, "created_from": start.isoformat(), "created_to": end.isoformat()}),
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/conversations/dedup_dashboard.html", context)


REVIEW_REASONS = {
    "flagged": "flagged by a user (thumbs-down)",
    "disagreement": "duplicate head and cosine disagree",
    "near_gate": "near the gate",
    "random": "drawn at random (judges new verifiers on ordinary traffic)",
}


def review_queue_view(request: HttpRequest, model_admin: admin.ModelAdmin) -> HttpResponse:
    """Today's review queue of one tenant (support and tenant admins): the picks drawn once for the day
    (`services.review_queue.review_queue_of_day`), each with verdict buttons that review the event as the audit log
    does (`dedup_events_review`, which writes its label). A verdict is taken only for an event of this day's queue."""
    tenant = admin_tenant_resolve(request, roles=DASHBOARD_ROLES)
    today = timezone.localdate()
    picks = review_queue_of_day(tenant=tenant, day=today)
    if request.method == "POST":
        verdict = request.POST.get("verdict", "")
        note = request.POST.get("note", "")
        picked = {pick.dedup_event_id for pick in picks}
        try:
            event_id = int(request.POST.get("event", ""))
        except ValueError:
            event_id = None
        if event_id not in picked or verdict not in (ReviewVerdict.CORRECT, ReviewVerdict.INCORRECT):
            messages.error(request, "Choose a verdict for a decision of today's queue.")
        elif "\x00" in note:
            messages.error(request, "The note may not contain NUL characters. Nothing was changed.")
        else:
            dedup_events_review(tenant=tenant, event_ids=[event_id], user=request.user, verdict=verdict, note=note)
            messages.success(request, f"Decision {event_id} marked {ReviewVerdict(verdict).label.lower()}.")
        return HttpResponseRedirect(f"{request.path}?{urlencode({'tenant': tenant.pk})}")
    rows = [
        {
            "pick": pick,
            "event": pick.dedup_event,
            "reason": REVIEW_REASONS.get(pick.reason, pick.reason),
            "question": pick.dedup_event.turn.question if pick.dedup_event.turn else "(purged)",
            "stored_question": stored_question_of(pick.dedup_event) or "(purged)",
        }
        for pick in picks
    ]
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Review queue",
        "tenant": tenant,
        "tenants": tenants_for(request, roles=DASHBOARD_ROLES),
        "day": today,
        "rows": rows,
        "reviewed": sum(row["event"].review_verdict != ReviewVerdict.UNREVIEWED for row in rows),
        "quota": settings.REVIEW_QUEUE_DAILY_QUOTA,
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/conversations/review_queue.html", context)
