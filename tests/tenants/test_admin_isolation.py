"""Every model in the admin: a tenant admin of A sees and reaches none of tenant B's rows; support and viewer
roles cannot change what they may only read; a superuser sees all."""

import pytest
from django.contrib import admin
from django.urls import reverse

from tenants.models import Membership, Role, Tenant
from tenants.scoping import TenantOwnedModel
from tests.factories import ADMIN_FACTORIES, MembershipFactory, TenantFactory, UserFactory

pytestmark = pytest.mark.django_db

SCOPED_MODELS = [
    model for model in admin.site._registry if issubclass(model, TenantOwnedModel) or model in (Membership,)
]


def _url(model, action: str, *args) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{action}", args=args)


@pytest.fixture
def two_tenants():
    return TenantFactory(slug="tenant-a"), TenantFactory(slug="tenant-b")


def _login(client, tenant, role):
    user = UserFactory()
    MembershipFactory(user=user, tenant=tenant, role=role)
    client.force_login(user)
    return user


def test_every_scoped_admin_model_has_a_factory():
    missing = [model.__name__ for model in SCOPED_MODELS if model not in ADMIN_FACTORIES]
    assert not missing, f"add factories for {missing} to tests/factories.ADMIN_FACTORIES"


@pytest.mark.parametrize("model", SCOPED_MODELS, ids=lambda m: m.__name__)
def test_tenant_admin_cannot_see_or_reach_other_tenants_rows(client, two_tenants, model):
    tenant_a, tenant_b = two_tenants
    _login(client, tenant_a, Role.ADMIN)
    mine = ADMIN_FACTORIES[model](tenant=tenant_a)
    theirs = ADMIN_FACTORIES[model](tenant=tenant_b)

    changelist = client.get(_url(model, "changelist"))
    assert changelist.status_code == 200
    shown = {obj.pk for obj in changelist.context["cl"].result_list}
    assert mine.pk in shown and theirs.pk not in shown

    for action in ("change", "delete", "history"):
        response = client.get(_url(model, action, theirs.pk))
        assert response.status_code in (302, 403, 404), f"{action} of another tenant's {model.__name__}"
        if response.status_code == 302:
            assert response.url == reverse("admin:index")
    response = client.post(_url(model, "delete", theirs.pk), {"post": "yes"})
    assert response.status_code in (302, 403, 404)
    assert model._base_manager.filter(pk=theirs.pk).exists(), "another tenant's row was deleted"


@pytest.mark.parametrize("model", SCOPED_MODELS, ids=lambda m: m.__name__)
def test_bulk_delete_action_cannot_touch_other_tenants_rows(client, two_tenants, model):
    tenant_a, tenant_b = two_tenants
    _login(client, tenant_a, Role.ADMIN)
    theirs = ADMIN_FACTORIES[model](tenant=tenant_b)
    client.post(
        _url(model, "changelist"), {"action": "delete_selected", "_selected_action": [theirs.pk], "post": "yes"}
    )
    assert model._base_manager.filter(pk=theirs.pk).exists()


def test_tenant_admin_sees_only_own_tenant(client, two_tenants):
    tenant_a, tenant_b = two_tenants
    _login(client, tenant_a, Role.ADMIN)
    response = client.get(_url(Tenant, "changelist"))
    assert [t.pk for t in response.context["cl"].result_list] == [tenant_a.pk]
    assert client.get(_url(Tenant, "change", tenant_b.pk)).status_code == 302


@pytest.mark.parametrize("role", [Role.SUPPORT, Role.VIEWER])
def test_read_only_roles_cannot_change(client, two_tenants, role):
    from retrieval.models import KnowledgeBase

    tenant_a, _ = two_tenants
    _login(client, tenant_a, role)
    kb = ADMIN_FACTORIES[KnowledgeBase](tenant=tenant_a)
    assert client.get(_url(KnowledgeBase, "change", kb.pk)).status_code == 200  # view-only page
    response = client.post(_url(KnowledgeBase, "change", kb.pk), {"name": "renamed"})
    assert response.status_code == 403
    kb.refresh_from_db()
    assert kb.name != "renamed"
    assert client.get(_url(KnowledgeBase, "add")).status_code == 403


def test_support_cannot_manage_api_keys(client, two_tenants):
    from tenants.models import ApiKey

    tenant_a, _ = two_tenants
    _login(client, tenant_a, Role.SUPPORT)
    assert client.get(_url(ApiKey, "changelist")).status_code == 403


def test_superuser_sees_every_tenant(client, two_tenants, django_user_model):
    from retrieval.models import KnowledgeBase

    tenant_a, tenant_b = two_tenants
    ADMIN_FACTORIES[KnowledgeBase](tenant=tenant_a)
    ADMIN_FACTORIES[KnowledgeBase](tenant=tenant_b)
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456789"))
    response = client.get(_url(KnowledgeBase, "changelist"))
    assert {kb.tenant_id for kb in response.context["cl"].result_list} == {tenant_a.pk, tenant_b.pk}


def test_user_without_membership_cannot_enter_the_admin(client, db):
    client.force_login(UserFactory())
    assert client.get(_url(Tenant, "changelist")).status_code == 403


def test_tenant_admin_adds_members_by_email_without_seeing_other_users(client, two_tenants):
    tenant_a, tenant_b = two_tenants
    stranger = UserFactory(username="stranger@b.test")
    MembershipFactory(user=stranger, tenant=tenant_b, role=Role.ADMIN)
    _login(client, tenant_a, Role.ADMIN)
    page = client.get(_url(Membership, "add"))
    assert page.status_code == 200
    assert b"stranger@b.test" not in page.content
    response = client.post(_url(Membership, "add"), {"email": "new@a.test", "tenant": tenant_a.pk, "role": "support"})
    assert response.status_code == 302
    membership = Membership.objects.get(user__username="new@a.test")
    assert (membership.tenant_id, membership.role) == (tenant_a.pk, Role.SUPPORT)
    response = client.post(_url(Membership, "add"), {"email": "x@a.test", "tenant": tenant_b.pk, "role": "admin"})
    assert response.status_code == 200  # form error: tenant B is not a choice
    assert not Membership.objects.filter(user__username="x@a.test").exists()
