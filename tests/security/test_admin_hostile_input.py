"""Hostile input to the admin, swept over every tenant-scoped admin rather than listed by hand: whatever a query
string, a filter or a bulk action's selection holds, the answer is a page, a message or the admin's "incorrect
lookup" page, never a server error, and nothing of another tenant changes."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.admin.views.main import ERROR_FLAG
from django.contrib.messages import get_messages
from django.urls import reverse

from conversations.models import DedupEvent, ReviewVerdict
from retrieval.models import Document, KnowledgeBase
from tenants.admin_scoping import TenantScopedAdmin
from tenants.models import ApiKey, Membership, Role
from tenants.scopes import SCOPE_ORDER
from tenants.scoping import TenantOwnedModel
from tenants.services import api_key_create
from tests.factories import ADMIN_FACTORIES, MembershipFactory, TenantFactory, UserFactory

pytestmark = pytest.mark.django_db

SCOPED_ADMINS = [
    (model, model_admin)
    for model, model_admin in admin.site._registry.items()
    if isinstance(model_admin, TenantScopedAdmin)
]


def _changelist(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


@pytest.fixture
def tenant_admin(client):
    tenant = TenantFactory(slug="hostile-a")
    user = UserFactory()
    MembershipFactory(user=user, tenant=tenant, role=Role.ADMIN)
    client.force_login(user)
    return tenant


def _filter_parameters(client, model) -> list[str]:
    """The query parameters the changelist's sidebar filters read."""
    response = client.get(_changelist(model))
    assert response.status_code == 200
    return [name for spec in response.context["cl"].filter_specs for name in spec.expected_parameters()]


@pytest.mark.parametrize(("model", "model_admin"), SCOPED_ADMINS, ids=[model.__name__ for model, _ in SCOPED_ADMINS])
def test_nul_in_any_filter_or_search_is_refused_without_a_server_error(client, tenant_admin, model, model_admin):
    """PostgreSQL refuses a NUL byte in a text parameter, so a filter that passed it on answered with a 500."""
    if model in ADMIN_FACTORIES:
        ADMIN_FACTORIES[model](tenant=tenant_admin)
    for parameter in ["q", *_filter_parameters(client, model)]:
        response = client.get(_changelist(model), {parameter: "a\x00b"})
        assert response.status_code in (200, 302), f"{model.__name__} ?{parameter}=NUL: {response.status_code}"
        if response.status_code == 302:
            assert response.url.endswith(f"?{ERROR_FLAG}=1"), response.url


def _autocomplete_sources() -> list[tuple[str, str, str]]:
    """(app_label, model_name, field_name) of every foreign key whose target has a searchable admin."""
    sources = []
    for model in admin.site._registry:
        for field in model._meta.get_fields():
            target = getattr(field, "related_model", None)
            if field.many_to_one and field.concrete and target in admin.site._registry:
                if admin.site._registry[target].search_fields:
                    sources.append((model._meta.app_label, model._meta.model_name, field.name))
    return sources


@pytest.mark.parametrize(("app_label", "model_name", "field_name"), _autocomplete_sources())
def test_nul_in_an_autocomplete_search_finds_nothing_without_a_server_error(
    client, tenant_admin, app_label, model_name, field_name
):
    response = client.get(
        reverse("admin:autocomplete"),
        {"app_label": app_label, "model_name": model_name, "field_name": field_name, "term": "a\x00b"},
    )
    assert response.status_code in (200, 403), response.status_code
    if response.status_code == 200:
        assert response.json()["results"] == []


@pytest.mark.parametrize(("model", "model_admin"), SCOPED_ADMINS, ids=[model.__name__ for model, _ in SCOPED_ADMINS])
def test_a_bulk_action_on_ids_that_are_not_ids_changes_nothing_without_a_server_error(
    client, tenant_admin, model, model_admin
):
    """Django filtered the list by the posted `_selected_action` values as they came, and a value that is no
    primary key ("abc", "1.5", "") raised in the middle of the request."""
    own = ADMIN_FACTORIES[model](tenant=tenant_admin) if model in ADMIN_FACTORIES else None
    action_form = client.get(_changelist(model)).context["action_form"]
    if action_form is None:
        # A list without bulk actions (for this user): a posted action is ignored, never a server error.
        response = client.post(
            _changelist(model), {"action": "delete_selected", "_selected_action": ["abc"], "index": 0, "post": "yes"}
        )
        assert response.status_code in (200, 302, 403), f"{model.__name__}: {response.status_code}"
        if own is not None:
            assert model._base_manager.filter(pk=own.pk).exists()
        return
    actions = [name for name, _label in action_form.fields["action"].choices if name]
    for action in actions:
        for selection in (["abc"], ["1.5"], [""], ["\x00"], [str(own.pk) if own else "1", "abc"]):
            response = client.post(
                _changelist(model), {"action": action, "_selected_action": selection, "index": 0, "post": "yes"}
            )
            assert response.status_code == 302, f"{model.__name__} {action} {selection!r}: {response.status_code}"
            shown = [str(message) for message in get_messages(response.wsgi_request)]
            assert any("not valid" in message for message in shown), shown
    if own is not None:
        assert model._base_manager.filter(pk=own.pk).exists()


def test_a_selection_with_one_bad_id_reviews_none_of_the_events(client, tenant_admin):
    event = ADMIN_FACTORIES[DedupEvent](tenant=tenant_admin)
    response = client.post(
        _changelist(DedupEvent),
        {"action": "mark_incorrect", "_selected_action": [event.pk, "abc"], "note": "n", "index": 0},
    )
    assert response.status_code == 302
    event.refresh_from_db()
    assert event.review_verdict == ReviewVerdict.UNREVIEWED


def test_a_member_email_longer_than_an_account_name_is_a_form_error(client, tenant_admin):
    """The email becomes the account's user name (150 characters); a longer one was refused by PostgreSQL."""
    email = "a" * 150 + "@example.com"
    response = client.post(
        reverse("admin:tenants_membership_add"), {"email": email, "tenant": tenant_admin.pk, "role": Role.SUPPORT}
    )
    assert response.status_code == 200
    assert "at most 150 characters" in response.content.decode()
    assert not Membership.objects.filter(tenant=tenant_admin).exclude(role=Role.ADMIN).exists()


# --- rows of one tenant never point at, or move to, another tenant ------------------------------------------------
TENANT_OWNED_ADMINS = [model for model, _ in SCOPED_ADMINS if issubclass(model, TenantOwnedModel)]


@pytest.fixture
def two_tenant_admin(client):
    """A person who administers two tenants: every form offers both tenants' rows."""
    acme, globex = TenantFactory(slug="two-acme"), TenantFactory(slug="two-globex")
    user = UserFactory()
    MembershipFactory(user=user, tenant=acme, role=Role.ADMIN)
    MembershipFactory(user=user, tenant=globex, role=Role.ADMIN)
    client.force_login(user)
    return acme, globex


@pytest.mark.parametrize("model", TENANT_OWNED_ADMINS, ids=lambda model: model.__name__)
def test_no_change_form_offers_to_move_a_row_to_another_tenant(client, django_user_model, model):
    """A row's children, vectors and keys stay with its tenant: a knowledge base or key moved by its change
    form would leave them behind, or hand one tenant's key to another."""
    tenant = TenantFactory(slug="moving-acme")
    row = ADMIN_FACTORIES[model](tenant=tenant)
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456789"))
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[row.pk])
    response = client.get(url)
    if response.status_code == 302:  # a page that sends elsewhere (the dedup policy: its settings page)
        return
    assert response.status_code == 200
    assert "tenant" not in response.context["adminform"].form.fields, f"{model.__name__}'s tenant is editable"


def test_a_knowledge_base_posted_with_another_tenant_stays_with_its_own(client, two_tenant_admin):
    acme, globex = two_tenant_admin
    knowledge_base = KnowledgeBase.objects.create(tenant=acme, name="handbook")
    Document.objects.create(tenant=acme, knowledge_base=knowledge_base, title="t", source_text="x")
    response = client.post(
        reverse("admin:retrieval_knowledgebase_change", args=[knowledge_base.pk]),
        {
            "tenant": globex.pk,
            "name": "handbook",
            "chunk_max_tokens": 200,
            "chunk_overlap_tokens": 0,
            "retrieval_mode": knowledge_base.retrieval_mode,
        },
    )
    assert response.status_code == 302
    knowledge_base.refresh_from_db()
    assert knowledge_base.tenant_id == acme.pk


def test_an_api_key_posted_with_another_tenant_stays_with_its_own(client, two_tenant_admin):
    acme, globex = two_tenant_admin
    api_key, _raw = api_key_create(tenant=acme, name="ci", scopes=SCOPE_ORDER)
    response = client.post(
        reverse("admin:tenants_apikey_change", args=[api_key.pk]),
        {
            "tenant": globex.pk,
            "name": "ci",
            "scope_chat": True,
            "scope_ingest": True,
            "scope_admin": True,
            "knowledge_base": "",
        },
    )
    assert response.status_code == 302
    api_key.refresh_from_db()
    assert api_key.tenant_id == acme.pk


def test_a_new_api_key_cannot_be_limited_to_another_tenants_knowledge_base(client, two_tenant_admin):
    """The form offers both tenants' knowledge bases; the service refused the mix with an error the admin did
    not catch (a 500)."""
    acme, globex = two_tenant_admin
    theirs = KnowledgeBase.objects.create(tenant=globex, name="theirs")
    response = client.post(
        reverse("admin:tenants_apikey_add"),
        {"tenant": acme.pk, "name": "mixed", "scope_chat": True, "scope_ingest": True, "knowledge_base": theirs.pk},
    )
    assert response.status_code == 200
    assert "belongs to another tenant" in response.content.decode()
    assert not ApiKey.objects.for_tenant(acme).filter(name="mixed").exists()


def test_a_stored_api_key_cannot_be_limited_to_another_tenants_knowledge_base(client, two_tenant_admin):
    acme, globex = two_tenant_admin
    theirs = KnowledgeBase.objects.create(tenant=globex, name="theirs")
    api_key, _raw = api_key_create(tenant=acme, name="ci")
    response = client.post(
        reverse("admin:tenants_apikey_change", args=[api_key.pk]),
        {"name": "ci", "scope_chat": True, "scope_ingest": True, "knowledge_base": theirs.pk},
    )
    assert response.status_code == 200
    assert "belongs to another tenant" in response.content.decode()
    api_key.refresh_from_db()
    assert api_key.knowledge_base_id is None
