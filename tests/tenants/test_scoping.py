import pytest

from retrieval.models import KnowledgeBase
from tenants.models import ApiKey
from tenants.scoping import TenantScopeError

pytestmark = pytest.mark.django_db


def test_unscoped_query_is_refused(tenant):
    KnowledgeBase.objects.create(tenant=tenant, name="kb")
    with pytest.raises(TenantScopeError):
        list(KnowledgeBase.objects.all())
    with pytest.raises(TenantScopeError):
        KnowledgeBase.objects.filter(name="kb").count()
    with pytest.raises(TenantScopeError):
        KnowledgeBase.objects.exists()
    with pytest.raises(TenantScopeError):
        KnowledgeBase.objects.filter(name="kb").update(name="other")
    with pytest.raises(TenantScopeError):
        KnowledgeBase.objects.all().delete()
    with pytest.raises(TenantScopeError):
        KnowledgeBase.objects.get(name="kb")
    with pytest.raises(TenantScopeError):
        list(KnowledgeBase.objects.iterator())


def test_for_tenant_sees_only_that_tenant(tenant, other_tenant):
    KnowledgeBase.objects.create(tenant=tenant, name="mine")
    KnowledgeBase.objects.create(tenant=other_tenant, name="theirs")
    assert [kb.name for kb in KnowledgeBase.objects.for_tenant(tenant)] == ["mine"]
    assert [kb.name for kb in KnowledgeBase.objects.filter(tenant_id=other_tenant.pk)] == ["theirs"]
    assert KnowledgeBase.objects.for_tenant(tenant).filter(name="theirs").count() == 0


def test_scope_survives_chaining_and_named_escape_hatch(tenant, other_tenant):
    KnowledgeBase.objects.create(tenant=tenant, name="a")
    KnowledgeBase.objects.create(tenant=other_tenant, name="b")
    assert KnowledgeBase.objects.for_tenant(tenant).order_by("name").exclude(name="x").count() == 1
    assert KnowledgeBase.objects.unscoped().count() == 2
    with pytest.raises(TenantScopeError):
        KnowledgeBase.objects.for_tenant(None)


def test_filter_with_none_tenant_does_not_count_as_scoped(tenant):
    with pytest.raises(TenantScopeError):
        list(ApiKey.objects.filter(tenant=None))


def test_related_manager_of_a_scoped_parent_is_scoped(tenant):
    from retrieval.models import Document

    kb = KnowledgeBase.objects.create(tenant=tenant, name="kb")
    Document.objects.create(tenant=tenant, knowledge_base=kb, title="d")
    assert [d.title for d in kb.documents.all()] == ["d"]


def test_cascade_delete_of_tenant_works_through_base_manager(tenant):
    KnowledgeBase.objects.create(tenant=tenant, name="kb")
    tenant.delete()
    assert KnowledgeBase.objects.unscoped().count() == 0
