"""API key scopes: the pure decisions, the fail-closed base view and its system check, the model's and services'
validation, the admin's list and form, create_tenant, and the migration from roles."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse
from rest_framework.response import Response
from rest_framework.test import APIClient, APIRequestFactory

from kbplatform.errors import ApplicationError
from tenants.api import TenantApi
from tenants.checks import api_scopes_declared, scope_declaration_problems
from tenants.models import ApiKey, Role
from tenants.scopes import (
    ANY_SCOPE,
    Scope,
    UnknownScopeError,
    scope_missing,
    scope_need_text,
    scope_required,
    scopes_accepted,
    scopes_resolve,
)
from tenants.services import api_key_create, api_key_revoke, api_key_scopes_set
from tests.factories import MembershipFactory, UserFactory
from tests.migrations import migrations_crossed

CHAT, INGEST, ADMIN = Scope.CHAT, Scope.INGEST, Scope.ADMIN


# --- the pure decisions -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("named", "scopes"),
    [
        (None, {CHAT}),
        ([], {CHAT}),
        (["ingest"], {INGEST}),
        (["admin", "chat", "admin"], {ADMIN, CHAT}),
        ((CHAT, INGEST, ADMIN), {CHAT, INGEST, ADMIN}),
    ],
)
def test_the_scopes_named_or_chat_alone(named, scopes):
    assert scopes_resolve(named) == scopes


@pytest.mark.parametrize("named", [["owner"], ["chat", "Chat"], ["", "chat"], ["any"]])
def test_an_unknown_scope_is_refused_not_dropped(named):
    with pytest.raises(UnknownScopeError):
        scopes_resolve(named)


@pytest.mark.parametrize(
    ("declaration", "method", "needed"),
    [
        (CHAT, "POST", CHAT),
        (CHAT, "DELETE", CHAT),
        ({"GET": CHAT, "POST": ADMIN}, "GET", CHAT),
        ({"GET": CHAT, "POST": ADMIN}, "post", ADMIN),
        ({"GET": CHAT, "POST": ADMIN}, "HEAD", CHAT),
        ({"GET": CHAT, "POST": ADMIN}, "DELETE", None),
        ({"POST": ADMIN}, "HEAD", None),
        (None, "GET", None),
        (None, "OPTIONS", ANY_SCOPE),
        ({"GET": CHAT}, "OPTIONS", ANY_SCOPE),
        (ANY_SCOPE, "GET", ANY_SCOPE),
    ],
)
def test_what_a_method_needs(declaration, method, needed):
    assert scope_required(declaration, method) == needed


@pytest.mark.parametrize(
    ("held", "needed", "missing"),
    [
        ({CHAT}, CHAT, None),
        ({CHAT}, INGEST, INGEST),
        ({CHAT}, ADMIN, ADMIN),
        ({INGEST}, CHAT, CHAT),
        ({CHAT, INGEST}, ADMIN, ADMIN),
        ({ADMIN}, CHAT, None),
        ({ADMIN}, INGEST, None),
        ({ADMIN}, ADMIN, None),
        ({INGEST}, ANY_SCOPE, None),
        (set(), CHAT, CHAT),
        ({CHAT}, frozenset({CHAT, INGEST}), None),
        ({INGEST}, frozenset({CHAT, INGEST}), None),
        ({ADMIN}, frozenset({CHAT, INGEST}), None),
        (set(), frozenset({INGEST, CHAT}), CHAT),  # the least of the set is the one to give the key
        ({CHAT}, frozenset({INGEST, ADMIN}), INGEST),
    ],
)
def test_what_a_key_lacks(held, needed, missing):
    assert scope_missing(held=held, needed=needed) == missing


@pytest.mark.parametrize(
    ("needed", "accepted", "text"),
    [
        (CHAT, [CHAT, ADMIN], '"chat"'),
        (ADMIN, [ADMIN], '"admin"'),
        (frozenset({INGEST, CHAT}), [CHAT, INGEST, ADMIN], '"chat" or "ingest"'),
        (ANY_SCOPE, [], '"admin"'),
    ],
)
def test_the_scopes_that_are_enough_and_how_a_refusal_names_them(needed, accepted, text):
    assert scopes_accepted(needed) == accepted
    if needed != ANY_SCOPE:
        assert scope_need_text(needed) == text


# --- the base view fails closed -----------------------------------------------------------------------------------


class _Undeclared(TenantApi):
    def get(self, request: object) -> Response:
        return Response({"reached": True})


class _PartlyDeclared(TenantApi):
    required_scope = {"GET": CHAT}

    def get(self, request: object) -> Response:
        return Response({"reached": True})

    def delete(self, request: object) -> Response:
        return Response({"reached": True})


@pytest.mark.django_db
@pytest.mark.parametrize(("view", "method"), [(_Undeclared, "get"), (_PartlyDeclared, "delete")])
def test_a_method_without_a_declared_scope_is_refused_to_every_key(tenant, view, method):
    _, raw_key = api_key_create(tenant=tenant, name="all", scopes=[CHAT, INGEST, ADMIN])
    request = getattr(APIRequestFactory(), method)("/x/", HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
    response = view.as_view()(request)
    assert response.status_code == 403
    assert "declares no API key scope" in response.data["message"]
    assert "reached" not in response.data


def test_the_system_check_names_each_undeclared_method():
    assert scope_declaration_problems("api/v1/x/", _Undeclared) == [
        "GET /api/v1/x/ (_Undeclared) declares no required_scope."
    ]
    assert scope_declaration_problems("api/v1/x/", _PartlyDeclared) == [
        "DELETE /api/v1/x/ (_PartlyDeclared) declares no required_scope."
    ]
    assert "not a TenantApi view" in scope_declaration_problems("api/v1/x/", None)[0]


@pytest.mark.parametrize("declared", [frozenset({CHAT, "reader"}), frozenset(), "reader"])
def test_the_system_check_names_an_unknown_scope_alone_or_in_a_set(declared):
    view = type("_Declared", (_PartlyDeclared,), {"required_scope": {"GET": declared, "DELETE": CHAT}})
    assert scope_declaration_problems("api/v1/x/", view) == [
        f"GET /api/v1/x/ (_Declared) declares an unknown scope {declared!r}."
    ]


def test_every_view_of_the_api_declares_its_scopes():
    assert api_scopes_declared() == []


def test_a_subclass_cannot_replace_the_permission_checks():
    with pytest.raises(TypeError, match="overrides get_permissions"):

        class _Loose(TenantApi):
            required_scope = CHAT

            def get_permissions(self) -> list:
                return []


# --- the model and the services -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_key_made_without_scopes_is_chat_alone_at_every_level(tenant):
    api_key, _ = api_key_create(tenant=tenant, name="default")
    assert api_key.scopes == {CHAT}
    assert ApiKey(tenant=tenant, name="bare").scopes == {CHAT}


@pytest.mark.django_db
def test_the_database_refuses_a_key_with_no_scope(tenant):
    api_key, _ = api_key_create(tenant=tenant, name="k")
    with pytest.raises(IntegrityError), transaction.atomic():
        ApiKey.objects.for_tenant(tenant).filter(pk=api_key.pk).update(scope_chat=False)


@pytest.mark.django_db
def test_services_refuse_unknown_scopes_and_set_exactly_those_named(tenant):
    with pytest.raises(ApplicationError, match="Unknown scope 'root'"):
        api_key_create(tenant=tenant, name="k", scopes=["chat", "root"])
    assert not ApiKey.objects.for_tenant(tenant).exists()
    api_key, _ = api_key_create(tenant=tenant, name="k", scopes=["chat", "ingest"])
    api_key_scopes_set(tenant=tenant, api_key=api_key, scopes=["admin"])
    assert ApiKey.objects.for_tenant(tenant).get(pk=api_key.pk).scopes == {ADMIN}
    api_key_scopes_set(tenant=tenant, api_key=api_key, scopes=[])
    assert ApiKey.objects.for_tenant(tenant).get(pk=api_key.pk).scopes == {CHAT}


@pytest.mark.django_db
def test_a_scope_change_applies_from_the_keys_next_request(tenant):
    api_key, raw_key = api_key_create(tenant=tenant, name="k", scopes=["admin"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
    assert client.get("/api/v1/dedup-policy/").status_code == 200
    api_key_scopes_set(tenant=tenant, api_key=api_key, scopes=["chat"])
    response = client.get("/api/v1/dedup-policy/")
    assert response.status_code == 403 and response.json()["extra"]["required_scope"] == "admin"


@pytest.mark.django_db
def test_only_a_key_with_the_admin_scope_counts_as_the_last_admin_key(tenant):
    admin_key, _ = api_key_create(tenant=tenant, name="admin", scopes=["admin"])
    api_key_create(tenant=tenant, name="chat and ingest", scopes=["chat", "ingest"])
    with pytest.raises(ApplicationError, match="last active admin key"):
        api_key_revoke(tenant=tenant, api_key=admin_key, keep_one_admin=True)
    api_key_create(tenant=tenant, name="another admin", scopes=["chat", "admin"])
    assert api_key_revoke(tenant=tenant, api_key=admin_key, keep_one_admin=True).revoked_at is not None


# --- the admin ----------------------------------------------------------------------------------------------------


@pytest.fixture
def tenant_admin_client(client, tenant):
    user = UserFactory()
    MembershipFactory(user=user, tenant=tenant, role=Role.ADMIN)
    client.force_login(user)
    return client


def _key_form(tenant, **scopes: bool) -> dict:
    return {
        "tenant": tenant.pk,
        "name": "from the admin",
        "knowledge_base": "",
        **{k: v for k, v in scopes.items() if v},
    }


@pytest.mark.django_db
def test_the_admin_lists_each_keys_scopes_and_filters_by_them(tenant_admin_client, tenant):
    api_key_create(tenant=tenant, name="reader", scopes=["chat"])
    api_key_create(tenant=tenant, name="loader", scopes=["ingest", "chat"])
    changelist = reverse("admin:tenants_apikey_changelist")
    page = tenant_admin_client.get(changelist).content.decode()
    assert "chat, ingest" in page and "scopes" in page
    filtered = tenant_admin_client.get(changelist, {"scope_ingest__exact": "1"})
    assert [key.name for key in filtered.context["cl"].result_list] == ["loader"]


@pytest.mark.django_db
def test_the_admin_creates_a_key_with_the_scopes_ticked(tenant_admin_client, tenant):
    response = tenant_admin_client.post(
        reverse("admin:tenants_apikey_add"), _key_form(tenant, scope_ingest=True, scope_admin=True)
    )
    assert response.status_code == 302
    assert ApiKey.objects.for_tenant(tenant).get(name="from the admin").scopes == {INGEST, ADMIN}


@pytest.mark.django_db
def test_the_admin_gives_chat_alone_when_no_scope_is_ticked(tenant_admin_client, tenant):
    response = tenant_admin_client.post(reverse("admin:tenants_apikey_add"), _key_form(tenant))
    assert response.status_code == 302
    api_key = ApiKey.objects.for_tenant(tenant).get(name="from the admin")
    assert api_key.scopes == {CHAT}
    response = tenant_admin_client.post(reverse("admin:tenants_apikey_change", args=[api_key.pk]), _key_form(tenant))
    assert response.status_code == 302
    assert ApiKey.objects.for_tenant(tenant).get(pk=api_key.pk).scopes == {CHAT}


@pytest.mark.django_db
def test_the_admin_edits_a_keys_scopes(tenant_admin_client, tenant):
    api_key, raw_key = api_key_create(tenant=tenant, name="from the admin", scopes=["chat"])
    page = tenant_admin_client.get(reverse("admin:tenants_apikey_change", args=[api_key.pk])).content.decode()
    assert 'name="scope_chat"' in page and 'name="scope_ingest"' in page and 'name="scope_admin"' in page
    response = tenant_admin_client.post(
        reverse("admin:tenants_apikey_change", args=[api_key.pk]), _key_form(tenant, scope_ingest=True)
    )
    assert response.status_code == 302
    assert ApiKey.objects.for_tenant(tenant).get(pk=api_key.pk).scopes == {INGEST}
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
    assert client.get("/api/v1/conversations/").status_code == 403


# --- create_tenant ------------------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "scopes"),
    [
        ((), {CHAT, INGEST, ADMIN}),
        (("--key-scope", "chat"), {CHAT}),
        (("--key-scope", "ingest", "--key-scope", "chat"), {CHAT, INGEST}),
    ],
)
def test_create_tenant_prints_a_key_of_every_scope_unless_told(args, scopes):
    out = StringIO()
    call_command("create_tenant", "initech", *args, stdout=out)
    raw_key = out.getvalue().strip().splitlines()[-1]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
    assert set(client.get("/api/v1/whoami/").json()["key_scopes"]) == scopes


# --- the migration from roles -------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_keys_keep_what_their_role_let_them_do(tenant):
    before = [("tenants", "0002_tenant_settings_version")]
    after = [("tenants", "0003_api_key_scopes")]
    with migrations_crossed(before, after) as apps:
        old_key = apps.get_model("tenants", "ApiKey")
        for number, role in enumerate(("admin", "standard", "admin", "standard")):
            old_key.objects.create(tenant_id=tenant.pk, name=role, role=role, prefix=f"pre{number:05d}", hashed_key="x")
    migrated = {key.prefix: key.scopes for key in ApiKey.objects.for_tenant(tenant)}
    assert migrated == {
        "pre00000": {CHAT, INGEST, ADMIN},
        "pre00001": {CHAT, INGEST},
        "pre00002": {CHAT, INGEST, ADMIN},
        "pre00003": {CHAT, INGEST},
    }


@pytest.mark.django_db(transaction=True)
def test_the_migration_back_gives_admin_keys_their_role_again(tenant):
    api_key_create(tenant=tenant, name="admin", scopes=["chat", "admin"])
    api_key_create(tenant=tenant, name="ingest", scopes=["ingest"])
    back = [("tenants", "0002_tenant_settings_version")]
    executor = MigrationExecutor(connection)
    try:
        executor.migrate(back)
        old_key = executor.loader.project_state(back).apps.get_model("tenants", "ApiKey")
        assert dict(old_key.objects.filter(tenant_id=tenant.pk).values_list("name", "role")) == {
            "admin": "admin",
            "ingest": "standard",
        }
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db
def test_check_api_key_says_valid_only_for_a_key_holding_every_scope_named(tenant):
    """What `make run` asks of the saved demo key before reusing it: the README's session needs every scope."""
    _, chat_key = api_key_create(tenant=tenant, name="chat", scopes=["chat"])
    _, admin_key = api_key_create(tenant=tenant, name="admin", scopes=["admin"])

    def check(raw_key: str, *scopes: str) -> str:
        out = StringIO()
        call_command("check_api_key", raw_key, *[arg for scope in scopes for arg in ("--scope", scope)], stdout=out)
        return out.getvalue().strip()

    assert check(chat_key) == "valid" and check(chat_key, "chat") == "valid"
    assert check(chat_key, "chat", "ingest") == "invalid"
    assert check(admin_key, "chat", "ingest", "admin") == "valid"
    assert check("kb_nothing1_secret", "chat") == "invalid"
