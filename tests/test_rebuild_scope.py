"""What `manage.py milvus_rebuild` writes again for each of its options (lifecycle.rebuild.rebuild_scope_get)."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from kbplatform.errors import ApplicationError
from lifecycle.rebuild import rebuild_scope_get
from retrieval.services import knowledge_base_create


@pytest.mark.django_db
def test_rebuild_scope_of_each_option(tenant, other_tenant):
    ours = knowledge_base_create(tenant=tenant, name="ours")
    theirs = knowledge_base_create(tenant=other_tenant, name="theirs")

    everything = rebuild_scope_get()
    assert [kb.pk for kb in everything.knowledge_bases] == [ours.pk, theirs.pk]
    assert everything.tenants == [tenant, other_tenant] and everything.questions

    one_tenant = rebuild_scope_get(tenant_slug=tenant.slug)
    assert [kb.pk for kb in one_tenant.knowledge_bases] == [ours.pk]
    assert one_tenant.tenants == [tenant] and one_tenant.questions

    one_knowledge_base = rebuild_scope_get(knowledge_base_id=theirs.pk)
    assert [kb.pk for kb in one_knowledge_base.knowledge_bases] == [theirs.pk]
    assert not one_knowledge_base.questions  # questions are indexed per tenant, not per knowledge base

    questions = rebuild_scope_get(questions_only=True)
    assert questions.knowledge_bases == [] and questions.questions


@pytest.mark.django_db
def test_rebuild_refuses_what_is_not_there(tenant, other_tenant):
    theirs = knowledge_base_create(tenant=other_tenant, name="theirs")
    with pytest.raises(ApplicationError, match="No tenant"):
        rebuild_scope_get(tenant_slug="nobody")
    # Another tenant's knowledge base is not one of this tenant's.
    with pytest.raises(ApplicationError, match=f"No knowledge base {theirs.pk}"):
        rebuild_scope_get(tenant_slug=tenant.slug, knowledge_base_id=theirs.pk)
    with pytest.raises(CommandError, match="No tenant"):
        call_command("milvus_rebuild", tenant="nobody")
