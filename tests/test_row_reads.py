"""`kbplatform.row_reads`: a read written once per process gives what the equivalent queryset gives."""

import pytest
from django.core.exceptions import FieldDoesNotExist
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.models import Conversation, Turn
from conversations.services import conversation_for
from kbplatform.errors import NotFoundError
from kbplatform.row_reads import row_get, row_get_unscoped, values_by_keys
from retrieval.models import Chunk, KnowledgeBase
from tenants.models import ApiKey, Tenant
from tenants.selectors import api_key_get_by_raw
from tenants.services import api_key_create
from tests.factories import ChunkFactory, ConversationFactory

pytestmark = pytest.mark.django_db


def _fields_equal(found, expected) -> None:
    for field in type(expected)._meta.concrete_fields:
        assert getattr(found, field.attname) == getattr(expected, field.attname), field.name


def test_a_conversation_and_its_knowledge_base_are_what_select_related_gives_in_one_query(tenant):
    conversation = ConversationFactory(
        tenant=tenant, metadata_filter={"lang": ["en", "fr"], "year": {"gte": 2020}}, title="Résumé ✓"
    )
    expected = Conversation.objects.for_tenant(tenant).select_related("knowledge_base").get(pk=conversation.pk)
    with CaptureQueriesContext(connection) as captured:
        found = row_get(
            model=Conversation, related=("knowledge_base",), tenant_id=tenant.pk, equal={"pk": conversation.pk}
        )
        knowledge_base = found.knowledge_base  # cached with the row, not read again
    assert len(captured.captured_queries) == 1
    _fields_equal(found, expected)
    _fields_equal(knowledge_base, expected.knowledge_base)
    assert found.metadata_filter == {"lang": ["en", "fr"], "year": {"gte": 2020}}  # JSON converted as the ORM does
    assert found.expires_at.tzinfo is not None and found.expires_at == expected.expires_at
    assert not found._state.adding and found._state.db == expected._state.db
    found.title = "renamed"
    found.save(update_fields=["title"])  # an instance the ORM can write back
    assert Conversation.objects.for_tenant(tenant).get(pk=conversation.pk).title == "renamed"


def test_another_tenants_row_or_an_id_no_row_can_hold_is_none(tenant, other_tenant):
    conversation = ConversationFactory(tenant=tenant)
    assert row_get(model=Conversation, tenant_id=other_tenant.pk, equal={"pk": conversation.pk}) is None
    with CaptureQueriesContext(connection) as captured:
        assert row_get(model=Conversation, tenant_id=tenant.pk, equal={"pk": 2**63}) is None
        assert row_get(model=Conversation, tenant_id=tenant.pk, equal={"pk": -(2**63) - 1}) is None
    assert not captured.captured_queries  # as the ORM's lookups: no query for a value out of the column's range
    # A primary key given as text is the integer, as a queryset's filter takes it.
    assert row_get(model=Conversation, tenant_id=tenant.pk, equal={"pk": str(conversation.pk)}).pk == conversation.pk


def test_conversation_for_is_a_404_for_another_tenant_and_an_id_out_of_range(tenant, other_tenant):
    conversation = ConversationFactory(tenant=tenant)
    assert conversation_for(tenant=tenant, conversation_id=conversation.pk).pk == conversation.pk
    for owner, conversation_id in ((other_tenant, conversation.pk), (tenant, 2**63), (tenant, 10**30)):
        with pytest.raises(NotFoundError):
            conversation_for(tenant=owner, conversation_id=conversation_id)


def test_only_a_non_null_foreign_key_is_joined():
    with pytest.raises(ValueError, match="non-null foreign key"):
        row_get(model=KnowledgeBase, tenant_id=1, related=("name",), equal={"pk": 1})
    with pytest.raises(ValueError, match="non-null foreign key"):
        # an inner join would drop rows without one
        row_get(model=Turn, tenant_id=1, related=("matched_turn",), equal={"pk": 1})


def test_values_by_keys_are_what_values_list_gives_in_one_query(tenant, other_tenant):
    chunks = [ChunkFactory(tenant=tenant, text=f"chunk {n} ✓", external_id=f"c{n}" if n else None) for n in range(4)]
    Chunk.objects.for_tenant(tenant).filter(pk=chunks[3].pk).update(enabled=False)
    foreign = ChunkFactory(tenant=other_tenant)
    keys = [chunk.pk for chunk in chunks] + [foreign.pk, 2**40]
    columns = ("pk", "document_id", "external_id", "document__external_id", "document__title", "created_at", "text")
    expected = set(Chunk.objects.for_tenant(tenant).filter(pk__in=keys, enabled=True).values_list(*columns))
    with CaptureQueriesContext(connection) as captured:
        found = values_by_keys(model=Chunk, columns=columns, keys=keys, tenant_id=tenant.pk, true=("enabled",))
    assert len(captured.captured_queries) == 1
    assert set(found) == expected and len(found) == 3  # the disabled chunk and the other tenant's are not read
    assert all(row[5].tzinfo is not None for row in found)  # datetimes converted as the ORM converts them
    with CaptureQueriesContext(connection) as captured:
        assert values_by_keys(model=Chunk, columns=columns, keys=[], tenant_id=tenant.pk) == []
    assert not captured.captured_queries
    with pytest.raises(ValueError, match="non-null foreign key"):
        values_by_keys(model=Turn, columns=("matched_turn__question",), keys=[1], tenant_id=tenant.pk)


def test_every_read_names_the_tenant_first_in_its_where_clause(tenant):
    """The tenant is a required argument, not a condition a caller may leave out: the statement filters by it first."""
    with CaptureQueriesContext(connection) as captured:
        row_get(model=Conversation, tenant_id=tenant.pk, equal={"pk": 1})
        values_by_keys(model=Chunk, columns=("pk",), keys=[1], tenant_id=tenant.pk)
    for query in captured.captured_queries:
        where = query["sql"].split(" WHERE ", 1)[1]
        assert where.startswith('t0."tenant_id" = ') or where.startswith("t0.`tenant_id` = "), query["sql"]
    with pytest.raises(TypeError):
        row_get(model=Conversation, equal={"pk": 1})  # no tenant: refused before any SQL
    with pytest.raises(TypeError):
        values_by_keys(model=Chunk, columns=("pk",), keys=[1])
    with pytest.raises(ValueError, match="tenant_id="):
        row_get(model=Conversation, tenant_id=tenant.pk, equal={"pk": 1, "tenant": tenant.pk})
    with pytest.raises(FieldDoesNotExist):
        row_get(model=Tenant, tenant_id=tenant.pk, equal={"pk": tenant.pk})  # a model with no tenant cannot be scoped


def test_the_api_key_read_that_finds_the_tenant_is_the_named_unscoped_one(tenant, other_tenant):
    api_key, raw_key = api_key_create(tenant=tenant, name="k")
    found = api_key_get_by_raw(raw_key=raw_key)
    assert found.pk == api_key.pk and found.tenant == tenant
    assert row_get_unscoped(model=ApiKey, equal={"prefix": api_key.prefix}).tenant_id == tenant.pk
