"""Writes made from the admin: the tenant's dedup settings and intents (each change recorded in the settings
history), and support staff's reviews of dedup decisions.

Every function takes the tenant and touches only that tenant's rows; the admin views check roles before
calling them, and these functions re-check that the objects they are handed belong to the tenant.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from conversations import services
from conversations.dedup.decisions import POLICY_FIELDS
from conversations.models import INTENT_OTHER, DedupEvent, DedupPolicy, Intent, ReviewVerdict, SettingsChange
from conversations.review.labels import duplicate_labels_of_review
from kbplatform.errors import ApplicationError, NotFoundError
from tenants.models import Tenant
from tenants.services import tenant_settings_changed

INTENT_FIELDS = ("behaviour", "examples")


def _user_label(user: Any) -> str:
    if user is None:
        return ""
    return user.get_username() or str(user.pk)


def _record(
    *, tenant: Tenant, user: Any, subject: str, field: str, old: Any, new: Any, actor: str = ""
) -> SettingsChange:
    return SettingsChange.objects.create(
        tenant=tenant,
        changed_by=user,
        changed_by_label=actor or _user_label(user),
        subject=subject,
        field=field,
        old_value=old,
        new_value=new,
    )


def dedup_policy_get_or_create(*, tenant: Tenant) -> DedupPolicy:
    """The tenant's policy, set up with the defaults (and the built-in intents) when the tenant has none."""
    return services.dedup_policy_get(tenant=tenant)


def intent_allowlist_choices(*, tenant: Tenant) -> list[str]:
    """Intent names that may go on the tenant's allowlist: `other` (no intent matched) and every intent."""
    names = list(Intent.objects.for_tenant(tenant).order_by("name").values_list("name", flat=True))
    return [INTENT_OTHER, *[name for name in names if name != INTENT_OTHER]]


@transaction.atomic
def dedup_policy_change(*, tenant: Tenant, user: Any, changes: dict[str, Any], actor: str = "") -> list[SettingsChange]:
    """Apply `changes` to the tenant's policy through `services.dedup_policy_update` (the one set of rules the
    API applies too) and record one history row per field whose value changed. `user` is the admin user, or
    None with `actor` naming who else made the change (e.g. "API key kb_1a2b3c4d").

    Raises ValidationError (field -> messages) when the service refuses a value; nothing is saved or recorded
    then, since the whole call is one transaction.
    """
    unknown = set(changes) - set(POLICY_FIELDS)
    if unknown:
        raise ApplicationError(f"Not a dedup setting: {', '.join(sorted(unknown))}.")
    if "allowlisted_intents" in changes:
        # One order for the same set, so re-saving an unchanged allowlist records nothing.
        changes = {**changes, "allowlisted_intents": sorted(set(changes["allowlisted_intents"]))}
    dedup_policy_get_or_create(tenant=tenant)
    before = DedupPolicy.objects.for_tenant(tenant).select_for_update().get()
    old_values = {field: getattr(before, field) for field in POLICY_FIELDS}
    try:
        policy = services.dedup_policy_update(tenant=tenant, **changes)
    except ApplicationError as error:
        if "fields" in error.extra:
            raise ValidationError(error.extra["fields"]) from error
        raise
    changed = [field for field in POLICY_FIELDS if getattr(policy, field) != old_values[field]]
    return [
        _record(
            tenant=tenant,
            user=user,
            actor=actor,
            subject="policy",
            field=field,
            old=old_values[field],
            new=getattr(policy, field),
        )
        for field in changed
    ]


# Bounds on what a tenant may define. Every turn compares its question with every example phrase, each phrase is
# embedded when it changes, and the settings page must stay under Django's 1,000 form fields (DATA_UPLOAD_MAX_
# NUMBER_FIELDS; about four per intent).
MAX_INTENTS_PER_TENANT = 100
MAX_EXAMPLES_PER_INTENT = 50
MAX_EXAMPLE_CHARS = 300


def _clean_examples(examples: Iterable[str]) -> list[str]:
    """Example phrases stripped, blank ones dropped, duplicates removed, order kept; refused (ValidationError)
    when there are too many or one is too long."""
    cleaned = list(dict.fromkeys(phrase.strip() for phrase in examples if phrase and phrase.strip()))
    if len(cleaned) > MAX_EXAMPLES_PER_INTENT:
        raise ValidationError(
            {"examples": f"Give at most {MAX_EXAMPLES_PER_INTENT} example phrases (there are {len(cleaned)})."}
        )
    too_long = [phrase for phrase in cleaned if len(phrase) > MAX_EXAMPLE_CHARS]
    if too_long:
        raise ValidationError(
            {
                "examples": f"An example phrase may be at most {MAX_EXAMPLE_CHARS} characters; "
                f'{len(too_long)} {"is" if len(too_long) == 1 else "are"} longer ("{too_long[0][:40]}...").'
            }
        )
    return cleaned


@transaction.atomic
def intent_save(
    *, tenant: Tenant, user: Any, name: str, behaviour: str, examples: Iterable[str], intent: Intent | None = None
) -> tuple[Intent, list[SettingsChange]]:
    """Create an intent (intent=None) or change an existing one's behaviour and examples; the name of an
    existing intent never changes, since the allowlist and past audit events refer to it by name.

    Changed examples clear the cached example vectors, so the next classification embeds the new phrases.
    """
    cleaned = _clean_examples(examples)
    if intent is None:
        if name == INTENT_OTHER:
            raise ValidationError({"name": f"'{INTENT_OTHER}' is reserved for questions that match no intent."})
        if Intent.objects.for_tenant(tenant).filter(name=name).exists():
            raise ValidationError({"name": f"An intent named '{name}' already exists."})
        if Intent.objects.for_tenant(tenant).count() >= MAX_INTENTS_PER_TENANT:
            raise ValidationError(
                {"name": f"A tenant may have at most {MAX_INTENTS_PER_TENANT} intents; delete one to add another."}
            )
        intent = Intent(tenant=tenant, name=name, behaviour=behaviour, examples=cleaned)
        intent.full_clean(exclude=["tenant"])
        if not cleaned:
            raise ValidationError({"examples": "Give at least one example phrase."})
        intent.save()
        tenant_settings_changed(tenant=tenant)
        change = _record(
            tenant=tenant,
            user=user,
            subject=f"intent:{name}",
            field="created",
            old=None,
            new={"behaviour": behaviour, "examples": cleaned},
        )
        return intent, [change]

    if intent.tenant_id != tenant.pk:
        raise NotFoundError("No such intent.")
    intent = Intent.objects.for_tenant(tenant).select_for_update().get(pk=intent.pk)
    if not cleaned:
        raise ValidationError({"examples": "Give at least one example phrase."})
    old_values = {"behaviour": intent.behaviour, "examples": list(intent.examples)}
    new_values = {"behaviour": behaviour, "examples": cleaned}
    changed = [field for field in INTENT_FIELDS if new_values[field] != old_values[field]]
    if not changed:
        return intent, []
    intent.behaviour = behaviour
    intent.examples = cleaned
    intent.full_clean(exclude=["tenant"])
    update_fields = [*changed, "updated_at"]
    if "examples" in changed:
        intent.example_vectors = None
        update_fields.append("example_vectors")
    intent.save(update_fields=update_fields)
    tenant_settings_changed(tenant=tenant)
    changes = [
        _record(
            tenant=tenant,
            user=user,
            subject=f"intent:{intent.name}",
            field=field,
            old=old_values[field],
            new=new_values[field],
        )
        for field in changed
    ]
    return intent, changes


@transaction.atomic
def intent_delete(*, tenant: Tenant, user: Any, intent: Intent) -> SettingsChange:
    """Delete a tenant-defined intent and take it off the allowlist (recorded as two changes when it was on
    it). Built-in intents carry the small-talk, repeat and elaborate behaviours and cannot be deleted."""
    if intent.tenant_id != tenant.pk:
        raise NotFoundError("No such intent.")
    if intent.is_builtin:
        raise ValidationError({"name": f"'{intent.name}' is built in and cannot be deleted."})
    policy = dedup_policy_get_or_create(tenant=tenant)
    if intent.name in policy.allowlisted_intents:
        remaining = [name for name in policy.allowlisted_intents if name != intent.name]
        dedup_policy_change(tenant=tenant, user=user, changes={"allowlisted_intents": remaining})
    snapshot = {"behaviour": intent.behaviour, "examples": list(intent.examples)}
    Intent.objects.for_tenant(tenant).filter(pk=intent.pk).delete()
    tenant_settings_changed(tenant=tenant)
    return _record(tenant=tenant, user=user, subject=f"intent:{intent.name}", field="deleted", old=snapshot, new=None)


@transaction.atomic
def dedup_events_review(
    *, tenant: Tenant, event_ids: Iterable[int], user: Any, verdict: str, note: str | None = None, actor: str = ""
) -> int:
    """Set the review verdict and note of the tenant's events among `event_ids`; returns how many changed.

    Only the review fields are written (a conditional update scoped to the tenant), so a review can never
    alter what was decided, nor reach another tenant's event. `note=None` leaves each event's note as it is (a bulk
    review without a note must not wipe the reasons written one by one); a string, even empty, replaces it.
    `unreviewed` clears the note, the reviewer and the time, as there is no verdict left for them to explain.
    In the same transaction, each event's support label is written, changed or removed as the verdict says
    (`services.labels.duplicate_labels_of_review`), given by `actor` or else the user's name.
    """
    if verdict not in ReviewVerdict.values:
        raise ApplicationError(f"Unknown verdict {verdict!r}; use one of {', '.join(ReviewVerdict.values)}.")
    event_ids = list(event_ids)
    reviewed = verdict != ReviewVerdict.UNREVIEWED
    fields: dict[str, Any] = {
        "review_verdict": verdict,
        "reviewed_by": user if reviewed else None,
        "reviewed_at": timezone.now() if reviewed else None,
    }
    if not reviewed:
        fields["review_note"] = ""
    elif note is not None:
        fields["review_note"] = note.strip()
    changed = DedupEvent.objects.for_tenant(tenant).filter(pk__in=event_ids).update(**fields)
    duplicate_labels_of_review(
        tenant=tenant,
        event_ids=event_ids,
        verdict=verdict,
        given_by=actor or _user_label(user),
        note=note if reviewed else None,
    )
    return changed
