"""The admin of tenants' trained duplicate verifiers: the versions with their figures and training progress, and the
one-click actions that decide which version decides (activate, shadow, roll back), each for the embedding model of
the selected versions only (a tenant has a verifier per model its knowledge bases use). "Train from reviews" is an
action of the dedup policies' list (`conversations.admin`). Every action goes through
`conversations.training.verifiers` and only for tenants where the user is an admin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from conversations.models import DuplicateModelStatus, DuplicateModelVersion
from conversations.review.learning_curve import curve_svg
from conversations.selectors import learning_curves
from conversations.training.verifier_training import CUT_CONFIDENCE
from conversations.training.verifiers import (
    duplicate_model_activate,
    duplicate_model_rollback,
    duplicate_model_shadow,
    duplicate_model_shadow_stop,
    duplicate_model_train_start,
    verifier_embedding_models,
)
from kbplatform.errors import ApplicationError
from tenants.admin_scoping import TenantScopedAdmin, request_tenant_roles
from tenants.models import Role, Tenant

VERIFIER_ROLES = (Role.ADMIN,)


def _each_allowed(request: HttpRequest, tenants: list[Tenant]) -> list[Tenant]:
    roles = request_tenant_roles(request)
    return [t for t in tenants if request.user.is_superuser or roles.get(t.pk) in VERIFIER_ROLES]


def _run(model_admin: admin.ModelAdmin, request: HttpRequest, done: Callable[[], str]) -> None:
    """Run one service call, telling the user what it did or why it could not (never a server error)."""
    try:
        model_admin.message_user(request, done())
    except ApplicationError as exc:
        model_admin.message_user(request, exc.message, level=messages.ERROR)


def verifiers_train_from_reviews(model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    """Queue a training of each selected tenant's verifier from its reviewed decisions: one per embedding model its
    knowledge bases use, each from the labels of that model's conversations."""
    tenants = _each_allowed(request, list({row.tenant for row in queryset.select_related("tenant")}))
    for tenant in tenants:
        for model in verifier_embedding_models(tenant=tenant):

            def started(tenant: Tenant = tenant, model: str = model) -> str:
                row = duplicate_model_train_start(tenant=tenant, embedding_model=model, user=request.user)
                return (
                    f"{tenant.slug}: verifier v{row.version} of {model} queued; its progress is on the verifier "
                    "versions page."
                )

            _run(model_admin, request, started)


@admin.register(DuplicateModelVersion)
class DuplicateModelVersionAdmin(TenantScopedAdmin):
    view_roles = (Role.ADMIN, Role.SUPPORT)
    edit_roles = VERIFIER_ROLES
    list_display = (
        "tenant",
        "version",
        "embedding_model",
        "status",
        "progress_shown",
        "label_count",
        "held_out_shown",
        "cut_shown",
        "decision_note",
        "started_by_label",
        "created_at",
    )
    list_filter = ("status", "embedding_model")
    actions = ("activate", "run_in_shadow", "stop_shadow", "roll_back")
    readonly_fields = tuple(f.name for f in DuplicateModelVersion._meta.fields)
    change_list_template = "admin/conversations/duplicatemodelversion/change_list.html"
    # Learning curves drawn above the list: one per tenant whose versions the user may see, at most this many.
    CURVES_SHOWN = 6

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> TemplateResponse:
        """The versions, with each visible tenant's learning curve above them: its reviews so far, every version's
        held-out figures and which one decides."""
        tenant_ids = list(
            self.get_queryset(request)
            .order_by("tenant")
            .values_list("tenant", flat=True)
            .distinct()[: self.CURVES_SHOWN]
        )
        curves = learning_curves(tenants=list(Tenant.objects.filter(pk__in=tenant_ids).order_by("slug")))
        shown = [{"curve": curve, "svg": curve_svg(curve)} for curve in curves]
        return super().changelist_view(request, extra_context={**(extra_context or {}), "learning_curves": shown})

    @admin.display(description="Progress")
    def progress_shown(self, obj: DuplicateModelVersion) -> str:
        if obj.status in (DuplicateModelStatus.QUEUED, DuplicateModelStatus.TRAINING):
            return f"{obj.progress:.0%} {obj.stage}"
        return obj.stage

    @admin.display(description="Held out: new vs active (P / R)")
    def held_out_shown(self, obj: DuplicateModelVersion) -> str:
        """Precision and recall of the new model and of the decision in use, each at the cut it serves with, on the
        held-out labels of the judge that decided (the queue's picks, weighted, when they judged)."""
        figures = obj.figures or {}

        def pr(f: dict) -> str:
            precision = "-" if f.get("precision") is None else f"{f['precision']:.2f}"
            return f"{precision} / {f['recall']:.2f}"

        weighted = (figures.get("judges") or {}).get("random_picks_weighted")
        if figures.get("judge") == "random_picks_weighted" and weighted:
            active = weighted.get("active_at_its_cut")
            against = pr(active) if active else f"R {weighted['active_recall_at_target']:.2f}"
            return f"{pr(weighted['new'])} vs {against} (queue picks, weighted)"
        new, old = figures.get("held_out"), figures.get("active_held_out")
        if not new or not old:
            return ""
        return f"{pr(new)} vs {pr(old)}"

    @admin.display(description="Cut, chosen on")
    def cut_shown(self, obj: DuplicateModelVersion) -> str:
        figures = obj.figures or {}
        if figures.get("cut") is None:
            return ""
        # Versions trained before the random picks could choose it had theirs chosen on every training label.
        on = figures.get("cut_chosen_on", "training_labels")
        population = "queue picks, weighted" if on == "random_picks_weighted" else "labels, unweighted"
        counted = f"{figures['cut_chosen_on_labels']} training " if "cut_chosen_on_labels" in figures else "training "
        # The precision those labels show above the cut: at the target or over it, the judge asks the held-out labels
        # only not to contradict it (`verifier_judging._meets_target`).
        bound = figures.get("cut_precision_lower_bound")
        shown_bound = "" if bound is None else f"; precision there, {CUT_CONFIDENCE:.0%} lower bound {bound:.3f}"
        return f"{figures['cut']:.3f} ({counted}{population}{shown_bound})"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # versions are made by training only

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # audit events name them

    @staticmethod
    def _allowed_rows(request: HttpRequest, queryset: QuerySet) -> list[DuplicateModelVersion]:
        """The selected versions of tenants the user may act for."""
        rows = list(queryset.select_related("tenant"))
        allowed = {t.pk for t in _each_allowed(request, [row.tenant for row in rows])}
        return [row for row in rows if row.tenant_id in allowed]

    def _one_per_tenant(
        self, request: HttpRequest, queryset: QuerySet, act: Callable[[DuplicateModelVersion], str]
    ) -> None:
        for row in self._allowed_rows(request, queryset):
            _run(self, request, lambda row=row: act(row))

    def _each_tenant_model(self, request: HttpRequest, queryset: QuerySet) -> list[tuple[Tenant, str]]:
        """The (tenant, embedding model) pairs of the selected versions, of tenants the user may act for."""
        pairs = {(row.tenant_id, row.embedding_model): row.tenant for row in self._allowed_rows(request, queryset)}
        return [(tenant, model) for (_, model), tenant in sorted(pairs.items())]

    @admin.action(description="Activate (decides its model's turns of this tenant)", permissions=["change"])
    def activate(self, request: HttpRequest, queryset: QuerySet) -> None:
        def act(row: DuplicateModelVersion) -> str:
            duplicate_model_activate(tenant=row.tenant, version_id=row.pk)
            return f"{row.tenant.slug}: v{row.version} is active for {row.embedding_model}."

        self._one_per_tenant(request, queryset, act)

    @admin.action(description="Run in shadow (decides beside the active one, never applied)", permissions=["change"])
    def run_in_shadow(self, request: HttpRequest, queryset: QuerySet) -> None:
        def act(row: DuplicateModelVersion) -> str:
            duplicate_model_shadow(tenant=row.tenant, version_id=row.pk)
            return f"{row.tenant.slug}: v{row.version} runs in shadow for {row.embedding_model}."

        self._one_per_tenant(request, queryset, act)

    @admin.action(description="Stop the shadow of these tenants' models", permissions=["change"])
    def stop_shadow(self, request: HttpRequest, queryset: QuerySet) -> None:
        for tenant, model in self._each_tenant_model(request, queryset):

            def stopped(tenant: Tenant = tenant, model: str = model) -> str:
                duplicate_model_shadow_stop(tenant=tenant, embedding_model=model)
                return f"{tenant.slug}: no shadow runs for {model}."

            _run(self, request, stopped)

    @admin.action(
        description="Roll back these tenants' models (the version active before, or the shipped head)",
        permissions=["change"],
    )
    def roll_back(self, request: HttpRequest, queryset: QuerySet) -> None:
        for tenant, model in self._each_tenant_model(request, queryset):

            def rolled(tenant: Tenant = tenant, model: str = model) -> str:
                previous = duplicate_model_rollback(tenant=tenant, embedding_model=model)
                now = f"v{previous.version}" if previous is not None else "the shipped head"
                return f"{tenant.slug}: {model} rolled back; {now} decides."

            _run(self, request, rolled)
