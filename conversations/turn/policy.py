"""Tenant set-up of the conversations app, its dedup policy and intents, and the settings a turn reads."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F

from conversations.dedup import decisions
from conversations.dedup.builtins import BUILTIN_INTENTS, MULTILINGUAL_PHRASES
from conversations.dedup.tenant_verifiers import tenant_verifiers_load
from conversations.models import (
    Conversation,
    DedupPolicy,
    DedupScope,
    Intent,
    IntentBehaviour,
)
from conversations.turn.state import (
    vector_from_bytes,
    vector_to_bytes,
)
from kbplatform.errors import ApplicationError
from kbplatform.jobs import task_enqueue_on_commit
from retrieval.embeddings import embed_texts, embedding_dimension, is_multilingual
from retrieval.embeddings import model_id as embedding_model_id
from retrieval.embeddings import model_name as embedding_model_name
from tenants.models import Tenant
from tenants.services import tenant_settings_changed

logger = logging.getLogger(__name__)

# --- setup and policy -------------------------------------------------------------------------------------------


def tenant_conversations_setup(*, tenant: Tenant) -> DedupPolicy:
    """Give a tenant its default dedup policy and the built-in intents; safe to call again."""
    policy, created = DedupPolicy.objects.get_or_create(tenant=tenant)
    existing = set(Intent.objects.for_tenant(tenant).values_list("name", flat=True))
    missing = [
        Intent(tenant=tenant, name=name, behaviour=spec["behaviour"], examples=list(spec["examples"]), is_builtin=True)
        for name, spec in BUILTIN_INTENTS.items()
        if name not in existing
    ]
    Intent.objects.bulk_create(missing, ignore_conflicts=True)
    if created or missing:
        tenant_settings_changed(tenant=tenant)
    return policy


def dedup_policy_get(*, tenant: Tenant) -> DedupPolicy:
    policy = DedupPolicy.objects.for_tenant(tenant).first()
    return policy if policy is not None else tenant_conversations_setup(tenant=tenant)


POLICY_FIELDS = decisions.POLICY_FIELDS


def policy_view(policy: DedupPolicy) -> decisions.PolicyView:
    values = {name: getattr(policy, name) for name in POLICY_FIELDS}
    return decisions.PolicyView(**{**values, "allowlisted_intents": tuple(policy.allowlisted_intents or ())})


@transaction.atomic
def dedup_policy_update(*, tenant: Tenant, **changes: Any) -> DedupPolicy:
    """Change the tenant's policy; every field is validated (threshold in (0, 1], windows 1..100, TTL > 0, known
    intents only), and an invalid change leaves the policy as it was."""
    unknown = set(changes) - set(POLICY_FIELDS)
    if unknown:
        raise ApplicationError(f"Unknown policy fields: {', '.join(sorted(unknown))}.")
    policy = DedupPolicy.objects.for_tenant(tenant).select_for_update().first() or tenant_conversations_setup(
        tenant=tenant
    )
    scope_before, ttl_before = policy.scope, policy.ttl_seconds
    for name, value in changes.items():
        setattr(policy, name, value)
    errors: dict[str, list[str]] = {}
    if not 0 < float(policy.threshold) <= 1:
        errors["threshold"] = ["Must be greater than 0 and at most 1."]
    if "allowlisted_intents" in changes:
        allowed = list(policy.allowlisted_intents or [])
        known = set(Intent.objects.for_tenant(tenant).values_list("name", flat=True)) | {decisions.INTENT_OTHER}
        missing = sorted(set(allowed) - known)
        if missing:
            errors["allowlisted_intents"] = [f"Unknown intents: {', '.join(missing)}."]
    try:
        policy.full_clean(exclude=["tenant"])
    except ValidationError as exc:
        for name, messages in exc.message_dict.items():
            errors.setdefault(name, []).extend(messages)
    if errors:
        raise ApplicationError("The policy is not valid: check the fields listed in extra.", extra={"fields": errors})
    policy.save()
    tenant_settings_changed(tenant=tenant)
    if policy.ttl_seconds != ttl_before:
        # A conversation expires the policy's TTL after its last turn: a new TTL moves the expiry of the live ones
        # too, so a shorter one is neither served (its stored answers included) nor kept past it.
        Conversation.objects.for_tenant(tenant).update(
            expires_at=F("last_active_at") + timedelta(seconds=policy.ttl_seconds)
        )
    if policy.scope == DedupScope.TENANT and scope_before != DedupScope.TENANT:
        # Questions asked under another scope were never indexed for tenant-wide search: index those within the
        # TTL, so the new scope covers them too (a worker does it; the change itself does not wait for it).
        task_enqueue_on_commit("conversations.question_index_backfill", tenant.pk)
    return policy


# --- intents --------------------------------------------------------------------------------------------------------

_intent_vectors: dict[tuple[int, str, str], np.ndarray] = {}  # (intent id, its last change, model id) -> vectors
_phrase_vectors: dict[tuple[str, str], np.ndarray] = {}  # (intent name, model id) -> MULTILINGUAL_PHRASES' vectors


def _multilingual_phrase_vectors(intent: str, *, name: str | None, model: str) -> np.ndarray | None:
    """Vectors of the built-in intent `intent`'s phrasings in the multilingual model's other languages
    (`builtins.MULTILINGUAL_PHRASES`), when the model `name` is that model: embedded once per process and model;
    None for any other model or intent."""
    phrases = MULTILINGUAL_PHRASES.get(intent)
    if not phrases or not is_multilingual(name):
        return None
    vectors = _phrase_vectors.get((intent, model))
    if vectors is None:
        vectors = _phrase_vectors[(intent, model)] = embed_texts(list(phrases), model=name)
    return vectors


def intents_load(*, tenant: Tenant, model: str | None = None) -> list[decisions.IntentExamples]:
    """The tenant's intents with their example vectors: embedded once and stored on the row with the id of the
    model that made them, then kept per process keyed by the row's last change and the model, so a turn reads one
    small query and embeds nothing here. Vectors stored by another model (before a model change, or before the model
    was recorded) are embedded again: they cannot be compared with a question, whatever their size. `model` is the
    embedding model (by name) of the questions they are compared with (None: the default). On the multilingual model
    an intent named as a built-in one also holds that intent's phrasings in the model's other languages
    (`IntentExamples.phrases`, `_multilingual_phrase_vectors`), with the tenant's behaviour, as the Chinese rules give
    it (`decisions.intent_by_tenant_rules`)."""
    name = model
    model = embedding_model_id(name)
    rows = list(
        Intent.objects.for_tenant(tenant).only(
            "pk", "name", "behaviour", "examples", "example_vectors", "example_vectors_model", "updated_at"
        )
    )
    loaded: list[decisions.IntentExamples] = []
    for intent in rows:
        key = (intent.pk, intent.updated_at.isoformat(), model)
        vectors = _intent_vectors.get(key)
        if vectors is None:
            stored_floats = len(intent.example_vectors or b"") // 4
            if (
                stored_floats
                and decisions.vectors_comparable(stored_model=intent.example_vectors_model, current_model=model)
                and stored_floats == len(intent.examples) * embedding_dimension(name)
            ):
                vectors = vector_from_bytes(intent.example_vectors).reshape(len(intent.examples), -1)
            else:
                examples = [str(e) for e in intent.examples]
                vectors = embed_texts(examples, model=name) if examples else np.zeros((0, 1))
                Intent.objects.for_tenant(tenant).filter(pk=intent.pk).update(
                    example_vectors=vector_to_bytes(vectors) if len(vectors) else None,
                    example_vectors_model=model if len(vectors) else "",
                )
            _intent_vectors[key] = vectors
        loaded.append(
            decisions.IntentExamples(
                name=intent.name,
                behaviour=intent.behaviour,
                vectors=vectors,
                phrases=_multilingual_phrase_vectors(intent.name, name=name, model=model),
            )
        )
    return loaded


@dataclass(frozen=True)
class TurnSettings:
    """What a turn needs of the tenant's configuration: its policy, its intents with their example vectors, and the
    duplicate verifiers that decide (`services.verifiers.TenantVerifiers`: the shipped head when none is trained)."""

    policy: decisions.PolicyView
    intents: list[decisions.IntentExamples]
    verifiers: decisions.TenantVerifiers = field(default_factory=decisions.TenantVerifiers)


# (tenant id, model name) -> (tenant.settings_version, settings), per process. The version comes with the tenant row
# that every request loads with its API key, so a change committed by any process is seen by the next turn of every
# process.
_turn_settings: dict[tuple[int, str | None], tuple[tuple, TurnSettings]] = {}


def turn_settings_load(*, tenant: Tenant, model: str | None = None) -> TurnSettings:
    """The tenant's policy and intents: this process's copy when `tenant.settings_version` says it is current,
    else read from the database (and kept). Loading after the version was read, a copy is never older than the
    version it is kept under; at worst it is newer, and is then read again on the next change."""
    # The creation time is in the key too: a tenant id can come back (a test's rolled-back rows, a restored
    # database), its version count with it. So is the embedding model: the intents' vectors are that model's.
    version = (tenant.created_at, tenant.settings_version, embedding_model_id(model))
    cached = _turn_settings.get((tenant.pk, model))
    if cached is not None and cached[0] == version:
        return cached[1]
    # Activating, rolling back or shadowing a verifier bumps the settings version, so its models are loaded here too.
    loaded = TurnSettings(
        policy=policy_view(dedup_policy_get(tenant=tenant)),
        intents=intents_load(tenant=tenant, model=model),
        verifiers=tenant_verifiers_load(tenant=tenant, embedding_model=embedding_model_name(model)),
    )
    _turn_settings[(tenant.pk, model)] = (version, loaded)
    return loaded


@transaction.atomic
def intent_set(*, tenant: Tenant, name: str, examples: list[str], behaviour: str = IntentBehaviour.NORMAL) -> Intent:
    """Create or change a tenant intent; its example vectors are recomputed on next use."""
    intent, _ = Intent.objects.for_tenant(tenant).update_or_create(
        tenant=tenant,
        name=name,
        defaults={"examples": list(examples), "behaviour": behaviour, "example_vectors": None},
    )
    tenant_settings_changed(tenant=tenant)
    return intent
