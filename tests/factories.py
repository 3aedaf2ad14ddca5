"""factory_boy factories. `ADMIN_FACTORIES` maps every tenant-owned model registered in the admin to a
factory taking `tenant=`: the admin isolation test fails for a registered model that is missing here."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

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


ADMIN_FACTORIES = {
    ApiKey: ApiKeyFactory,
    KnowledgeBase: KnowledgeBaseFactory,
    Document: DocumentFactory,
    Chunk: ChunkFactory,
    Membership: lambda tenant: MembershipFactory(tenant=tenant),
}
