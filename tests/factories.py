"""factory_boy factories. `ADMIN_FACTORIES` maps every tenant-owned model registered in the admin to a
factory taking `tenant=`: the admin isolation test fails for a registered model that is missing here."""

from __future__ import annotations

from datetime import timedelta

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from conversations.models import (
    ConsumedItem,
    Conversation,
    CuratedAnswer,
    DedupAction,
    DedupEvent,
    DedupPolicy,
    DuplicateModelStatus,
    DuplicateModelVersion,
    Feedback,
    FeedbackRating,
    Granularity,
    Intent,
    SettingsChange,
    Turn,
)
from retrieval.models import Chunk, Document, KnowledgeBase
from tenants.keys import key_generate, key_hash
from tenants.models import ApiKey, Membership, Role, Tenant


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.title())


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}@example.com")
    email = factory.LazyAttribute(lambda o: o.username)
    is_staff = True
    password = factory.django.Password("pass-word-123")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    tenant = factory.SubFactory(TenantFactory)
    role = Role.ADMIN


class ApiKeyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ApiKey

    name = factory.Sequence(lambda n: f"key {n}")
    prefix = factory.LazyFunction(lambda: key_generate()[0])
    hashed_key = factory.LazyFunction(lambda: key_hash(key_generate()[1]))


class KnowledgeBaseFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = KnowledgeBase

    name = factory.Sequence(lambda n: f"kb {n}")


class DocumentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Document

    knowledge_base = factory.LazyAttribute(lambda o: KnowledgeBaseFactory(tenant=o.tenant))
    title = factory.Sequence(lambda n: f"doc {n}")
    source_text = "Some text."


class ChunkFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Chunk

    document = factory.LazyAttribute(lambda o: DocumentFactory(tenant=o.tenant))
    knowledge_base = factory.LazyAttribute(lambda o: o.document.knowledge_base)
    position = factory.Sequence(lambda n: n)
    text = "A chunk of text."
    content_hash = factory.Sequence(lambda n: f"{n:064d}")


class ConversationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Conversation

    knowledge_base = factory.LazyAttribute(lambda o: KnowledgeBaseFactory(tenant=o.tenant))
    user_id = factory.Sequence(lambda n: f"end-user-{n}")
    expires_at = factory.LazyFunction(lambda: timezone.now() + timedelta(days=1))


class TurnFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Turn

    conversation = factory.LazyAttribute(lambda o: ConversationFactory(tenant=o.tenant))
    knowledge_base = factory.LazyAttribute(lambda o: o.conversation.knowledge_base)
    number = factory.Sequence(lambda n: n + 1)
    question = factory.Sequence(lambda n: f"How do I reset password number {n}?")
    question_vector = b"\x00" * 16
    answer = "Open the settings and choose Reset."
    decision = DedupAction.ANSWERED


class ConsumedItemFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ConsumedItem

    conversation = factory.LazyAttribute(lambda o: ConversationFactory(tenant=o.tenant))
    item_id = factory.Sequence(lambda n: n + 1)
    kind = Granularity.DOC
    turn_number = 1


class DedupPolicyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DedupPolicy
        django_get_or_create = ("tenant",)


class IntentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Intent

    name = factory.Sequence(lambda n: f"intent-{n}")
    examples = factory.LazyFunction(lambda: ["how much does it cost", "what is the price"])


class DedupEventFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DedupEvent

    turn = factory.LazyAttribute(lambda o: TurnFactory(tenant=o.tenant))
    conversation = factory.LazyAttribute(lambda o: o.turn.conversation if o.turn else None)
    conversation_ref = factory.LazyAttribute(lambda o: o.conversation.pk if o.conversation else 0)
    turn_ref = factory.LazyAttribute(lambda o: o.turn.pk if o.turn else None)
    action = DedupAction.ANSWERED
    similarity = 0.5
    scope = "session"
    threshold = 0.9
    question_window = 10
    exclusion_window = 5
    granularity = Granularity.DOC


class FeedbackFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Feedback

    turn = factory.LazyAttribute(lambda o: TurnFactory(tenant=o.tenant))
    conversation = factory.LazyAttribute(lambda o: o.turn.conversation)
    rating = FeedbackRating.DOWN
    comment = "Not what I asked."


class SettingsChangeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = SettingsChange

    changed_by_label = "admin@example.com"
    subject = "policy"
    field = "threshold"
    old_value = 0.9
    new_value = 0.85


class DuplicateModelVersionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DuplicateModelVersion

    version = factory.Sequence(lambda n: n + 1)
    embedding_model = "all-MiniLM-L6-v2"
    status = DuplicateModelStatus.CANDIDATE
    label_count = 300


class CuratedAnswerFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CuratedAnswer

    knowledge_base = factory.LazyAttribute(lambda o: KnowledgeBaseFactory(tenant=o.tenant))
    answer = "Open Settings, then Security, then Reset password."
    external_id = factory.Sequence(lambda n: f"faq-{n}")


ADMIN_FACTORIES = {
    ApiKey: ApiKeyFactory,
    KnowledgeBase: KnowledgeBaseFactory,
    Document: DocumentFactory,
    Chunk: ChunkFactory,
    Membership: lambda tenant: MembershipFactory(tenant=tenant),
    Conversation: ConversationFactory,
    Turn: TurnFactory,
    ConsumedItem: ConsumedItemFactory,
    DedupPolicy: DedupPolicyFactory,
    Intent: IntentFactory,
    DedupEvent: DedupEventFactory,
    Feedback: FeedbackFactory,
    SettingsChange: SettingsChangeFactory,
    DuplicateModelVersion: DuplicateModelVersionFactory,
    CuratedAnswer: CuratedAnswerFactory,
}
