"""Two tenants with one of everything, for the isolation sweeps.

Every text field of the other tenant's rows carries `SECRET`, so a sweep can say "nothing of theirs came back"
by looking for one string instead of knowing every response shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.apps import apps
from django.utils import timezone

from conversations.models import (
    ConsumedItem,
    Conversation,
    CuratedAnswer,
    CuratedPhrasing,
    DedupAction,
    DedupEvent,
    DedupScope,
    Feedback,
    FeedbackRating,
    Granularity,
    Turn,
)
from retrieval.models import Chunk, Document, KnowledgeBase
from tenants.models import ApiKey, Tenant
from tenants.scopes import SCOPE_ORDER, Scope
from tenants.scoping import TenantOwnedModel
from tenants.services import api_key_create

SECRET = "globex-secret"
# A stored question vector of the bundled model's size (384, float32, L2-normalised): what turns really hold.
_UNIT_VECTOR = b"\x00\x00\x80\x3f" + b"\x00" * (4 * 383)


@dataclass
class TenantWorld:
    tenant: Tenant
    objects: dict[str, object] = field(default_factory=dict)
    raw_keys: dict[str, str] = field(default_factory=dict)

    def id_of(self, name: str) -> int:
        return self.objects[name].pk


def world_build(*, tenant: Tenant, marker: str) -> TenantWorld:
    """One knowledge base (and a second one, for knowledge-base keys), a document with a chunk, a titled conversation
    with a turn, a consumed item, feedback on the turn and an audit event, and admin / standard /
    knowledge-base-limited keys, and one key holding each scope alone (`only_chat`, `only_ingest`, `only_admin`)."""
    world = TenantWorld(tenant=tenant)
    knowledge_base = KnowledgeBase.objects.create(tenant=tenant, name=f"{marker} kb", description=marker)
    second_kb = KnowledgeBase.objects.create(tenant=tenant, name=f"{marker} second kb", description=marker)
    document = Document.objects.create(
        tenant=tenant, knowledge_base=knowledge_base, title=f"{marker} title", source_text=f"{marker} text"
    )
    second_document = Document.objects.create(
        tenant=tenant, knowledge_base=second_kb, title=f"{marker} second title", source_text=f"{marker} text"
    )
    chunk = Chunk.objects.create(
        tenant=tenant,
        document=document,
        knowledge_base=knowledge_base,
        position=0,
        text=f"{marker} chunk",
        content_hash=f"{tenant.pk:064d}",
    )
    second_chunk = Chunk.objects.create(
        tenant=tenant,
        document=second_document,
        knowledge_base=second_kb,
        position=0,
        text=f"{marker} second chunk",
        content_hash=f"{tenant.pk + 1:064d}",
    )
    conversation = Conversation.objects.create(
        tenant=tenant,
        knowledge_base=knowledge_base,
        user_id=f"{marker}-user",
        title=f"{marker} conversation title",
        turn_count=1,
        expires_at=timezone.now() + timedelta(days=1),
    )
    second_conversation = Conversation.objects.create(
        tenant=tenant,
        knowledge_base=second_kb,
        user_id=f"{marker}-user",
        expires_at=timezone.now() + timedelta(days=1),
    )
    turn = Turn.objects.create(
        tenant=tenant,
        conversation=conversation,
        knowledge_base=knowledge_base,
        user_id=f"{marker}-user",
        number=1,
        question=f"{marker} question",
        question_vector=_UNIT_VECTOR,
        answer=f"{marker} answer",
        source_chunk_ids=[chunk.pk],
        decision=DedupAction.ANSWERED,
    )
    second_turn = Turn.objects.create(
        tenant=tenant,
        conversation=second_conversation,
        knowledge_base=second_kb,
        user_id=f"{marker}-user",
        number=1,
        question=f"{marker} second question",
        question_vector=_UNIT_VECTOR,
        answer=f"{marker} second answer",
        decision=DedupAction.ANSWERED,
    )
    consumed = ConsumedItem.objects.create(
        tenant=tenant, conversation=conversation, item_id=document.pk, kind=Granularity.DOC, turn_number=1
    )
    feedback = Feedback.objects.create(
        tenant=tenant, turn=turn, conversation=conversation, rating=FeedbackRating.DOWN, comment=f"{marker} comment"
    )
    event = DedupEvent.objects.create(
        tenant=tenant,
        conversation=conversation,
        conversation_ref=conversation.pk,
        turn=turn,
        turn_ref=turn.pk,
        action=DedupAction.ANSWERED,
        reason=f"{marker} reason",
        scope=DedupScope.SESSION,
        threshold=0.9,
        question_window=10,
        exclusion_window=5,
        granularity=Granularity.DOC,
    )
    curated = CuratedAnswer.objects.create(
        tenant=tenant, knowledge_base=knowledge_base, answer=f"{marker} curated answer", external_id=f"{marker}-faq"
    )
    CuratedPhrasing.objects.create(
        tenant=tenant, curated_answer=curated, question=f"{marker} curated question", vector=_UNIT_VECTOR
    )
    second_curated = CuratedAnswer.objects.create(
        tenant=tenant, knowledge_base=second_kb, answer=f"{marker} second curated answer"
    )
    admin_key, world.raw_keys["admin"] = api_key_create(tenant=tenant, name=f"{marker} admin", scopes=SCOPE_ORDER)
    standard_key, world.raw_keys["standard"] = api_key_create(
        tenant=tenant, name=f"{marker} standard", scopes=[Scope.CHAT, Scope.INGEST]
    )
    # One key per scope alone, for the scope sweep.
    for scope in SCOPE_ORDER:
        world.raw_keys[f"only_{scope}"] = api_key_create(tenant=tenant, name=f"{marker} {scope}", scopes=[scope])[1]
    kb_key, world.raw_keys["kb_admin"] = api_key_create(
        tenant=tenant, name=f"{marker} kb admin", scopes=SCOPE_ORDER, knowledge_base=knowledge_base
    )
    world.objects.update(
        knowledge_base=knowledge_base,
        second_knowledge_base=second_kb,
        document=document,
        second_document=second_document,
        chunk=chunk,
        second_chunk=second_chunk,
        conversation=conversation,
        second_conversation=second_conversation,
        turn=turn,
        second_turn=second_turn,
        consumed_item=consumed,
        feedback=feedback,
        dedup_event=event,
        curated_answer=curated,
        second_curated_answer=second_curated,
        api_key=standard_key,
        admin_key=admin_key,
        kb_key=kb_key,
    )
    return world


def tenant_snapshot(tenant: Tenant) -> dict[str, list[dict]]:
    """Every tenant-owned row of `tenant`, as values: equal before and after means nothing was touched."""
    snapshot = {}
    for model in apps.get_models():
        if issubclass(model, TenantOwnedModel):
            rows = model.objects.for_tenant(tenant).order_by("pk").values()
            snapshot[model._meta.label] = [{k: v for k, v in row.items() if k not in ("last_used_at",)} for row in rows]
    return snapshot


__all__ = ["SECRET", "ApiKey", "TenantWorld", "tenant_snapshot", "world_build"]
