"""API key management over the API: keys with the admin scope of the whole tenant only, raw key shown once, foreign
ids are 404, knowledge-base keys reach only their knowledge base; scopes as named, `chat` alone when none is."""

import pytest
from rest_framework.test import APIClient

from tenants.keys import key_hash
from tenants.models import ApiKey
from tests.factories import KnowledgeBaseFactory

pytestmark = pytest.mark.django_db

URL = "/api/v1/api-keys/"


def _client(raw_key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
    return client


def test_create_shows_the_key_once_and_it_works(api_client, tenant):
    response = api_client.post(URL, {"name": "mobile app"}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["scopes"] == ["chat"] and body["is_active"] and body["knowledge_base"] is None
    raw_key = body["key"]
    assert raw_key.startswith(f"kb_{body['prefix']}_")
    stored = ApiKey.objects.for_tenant(tenant).get(pk=body["id"])
    assert stored.hashed_key == key_hash(raw_key)

    assert _client(raw_key).get("/api/v1/whoami/").json()["key_prefix"] == body["prefix"]
    listed = api_client.get(URL).json()
    detail = api_client.get(f"{URL}{body['id']}/").json()
    for shown in (*listed, detail):
        assert "key" not in shown and raw_key not in str(shown)
    assert body["id"] in {row["id"] for row in listed}


def test_revoke_stops_the_key_and_is_idempotent(api_client):
    created = api_client.post(URL, {"name": "old"}, format="json").json()
    first = api_client.post(f"{URL}{created['id']}/revoke/")
    assert first.status_code == 200 and first.json()["is_active"] is False
    again = api_client.post(f"{URL}{created['id']}/revoke/")
    assert again.status_code == 200 and again.json()["revoked_at"] == first.json()["revoked_at"]
    response = _client(created["key"]).get("/api/v1/whoami/")
    assert response.status_code == 401 and "revoked" in response.json()["message"]


def test_last_active_admin_key_cannot_be_revoked(api_client, tenant):
    response = api_client.post(f"{URL}{api_client.api_key.pk}/revoke/")
    assert response.status_code == 409
    assert "last active admin key" in response.json()["message"]
    assert ApiKey.objects.for_tenant(tenant).get(pk=api_client.api_key.pk).revoked_at is None

    # A key without the admin scope does not count as the admin key kept.
    api_client.post(URL, {"name": "spare chat", "scopes": ["chat", "ingest"]}, format="json")
    assert api_client.post(f"{URL}{api_client.api_key.pk}/revoke/").status_code == 409
    spare = api_client.post(URL, {"name": "spare admin", "scopes": ["admin"]}, format="json").json()
    assert api_client.post(f"{URL}{api_client.api_key.pk}/revoke/").status_code == 200
    assert _client(spare["key"]).get(URL).status_code == 200


def test_a_key_without_the_admin_scope_cannot_manage_keys(standard_api_client, api_client):
    for method, url in (("get", URL), ("post", URL), ("get", f"{URL}{api_client.api_key.pk}/")):
        response = getattr(standard_api_client, method)(url, {"name": "x"} if method == "post" else None)
        assert response.status_code == 403, (method, url)
        assert '"admin" scope' in response.json()["message"]
        assert response.json()["extra"] == {
            "required_scope": "admin",
            "accepted_scopes": ["admin"],
            "key_scopes": ["chat", "ingest"],
        }
    response = standard_api_client.post(f"{URL}{api_client.api_key.pk}/revoke/")
    assert response.status_code == 403
    assert api_client.get("/api/v1/whoami/").status_code == 200


def test_admin_key_limited_to_a_knowledge_base_cannot_mint_wider_keys(api_client, tenant):
    knowledge_base = KnowledgeBaseFactory(tenant=tenant)
    limited = api_client.post(
        URL, {"name": "kb admin", "scopes": ["admin"], "knowledge_base": knowledge_base.pk}, format="json"
    ).json()
    assert limited["knowledge_base"] == knowledge_base.pk
    response = _client(limited["key"]).post(URL, {"name": "escalate", "scopes": ["admin"]}, format="json")
    assert response.status_code == 403
    assert "limited to one knowledge base" in response.json()["message"]
    assert not ApiKey.objects.for_tenant(tenant).filter(name="escalate").exists()


def test_other_tenants_keys_are_404_and_untouched(api_client, other_api_client, other_tenant):
    theirs = other_api_client.api_key
    for method, url in (("get", f"{URL}{theirs.pk}/"), ("post", f"{URL}{theirs.pk}/revoke/")):
        response = getattr(api_client, method)(url)
        assert response.status_code == 404, (method, url)
        assert response.json()["message"] == "API key not found."
    assert theirs.pk not in {row["id"] for row in api_client.get(URL).json()}
    assert ApiKey.objects.for_tenant(other_tenant).get(pk=theirs.pk).revoked_at is None


def test_key_for_another_tenants_knowledge_base_is_refused(api_client, tenant, other_tenant):
    foreign = KnowledgeBaseFactory(tenant=other_tenant)
    missing_id = foreign.pk + 1000
    for knowledge_base_id in (foreign.pk, missing_id):
        response = api_client.post(URL, {"name": "sneaky", "knowledge_base": knowledge_base_id}, format="json")
        assert response.status_code == 400
        assert response.json()["extra"]["fields"]["knowledge_base"] == ["No knowledge base with this id."]
    assert not ApiKey.objects.for_tenant(tenant).filter(name="sneaky").exists()


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": ""},
        {"name": "x" * 101},
        {"name": "k", "scopes": ["owner"]},
        {"name": "k", "scopes": "admin"},
        {"name": "k", "scopes": ["chat", None]},
        {"name": "k", "role": "admin"},
        {"name": "k", "knowledge_base": "a"},
    ],
)
def test_bad_create_bodies_are_400_and_store_nothing(api_client, tenant, body):
    before = ApiKey.objects.for_tenant(tenant).count()
    response = api_client.post(URL, body, format="json")
    assert response.status_code == 400
    assert response.json()["extra"]["fields"]
    assert ApiKey.objects.for_tenant(tenant).count() == before


@pytest.mark.parametrize(
    ("scopes", "held"),
    [
        (None, ["chat"]),
        ([], ["chat"]),
        (["ingest"], ["ingest"]),
        (["admin", "chat"], ["chat", "admin"]),
        (["chat", "chat", "ingest"], ["chat", "ingest"]),
        (["chat", "ingest", "admin"], ["chat", "ingest", "admin"]),
    ],
)
def test_a_key_is_created_with_the_scopes_named_and_chat_alone_when_none_is(api_client, tenant, scopes, held):
    body = {"name": "k"} if scopes is None else {"name": "k", "scopes": scopes}
    response = api_client.post(URL, body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["scopes"] == held
    assert sorted(ApiKey.objects.for_tenant(tenant).get(pk=response.json()["id"]).scopes) == sorted(held)
    assert _client(response.json()["key"]).get("/api/v1/whoami/").json()["key_scopes"] == held


def test_patch_sets_exactly_the_scopes_named_from_the_keys_next_request(api_client, tenant):
    created = api_client.post(URL, {"name": "uploader", "scopes": ["chat"]}, format="json").json()
    uploader = _client(created["key"])
    assert uploader.get("/api/v1/conversations/").status_code == 200

    response = api_client.patch(f"{URL}{created['id']}/", {"scopes": ["ingest"]}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["scopes"] == ["ingest"]
    assert ApiKey.objects.for_tenant(tenant).get(pk=created["id"]).scopes == {"ingest"}
    assert uploader.get("/api/v1/conversations/").status_code == 403
    assert uploader.get("/api/v1/whoami/").json()["key_scopes"] == ["ingest"]

    emptied = api_client.patch(f"{URL}{created['id']}/", {"scopes": []}, format="json")
    assert emptied.status_code == 200 and emptied.json()["scopes"] == ["chat"]  # none named: chat alone


@pytest.mark.parametrize(
    ("body", "field"),
    [({}, "scopes"), ({"scopes": ["reader"]}, "scopes"), ({"scopes": ["chat"], "name": "x"}, "name")],
)
def test_bad_patch_bodies_are_400_and_change_nothing(api_client, tenant, body, field):
    created = api_client.post(URL, {"name": "k", "scopes": ["chat", "ingest"]}, format="json").json()
    response = api_client.patch(f"{URL}{created['id']}/", body, format="json")
    assert response.status_code == 400, response.json()
    assert field in str(response.json())
    assert ApiKey.objects.for_tenant(tenant).get(pk=created["id"]).scopes == {"chat", "ingest"}


def test_patch_keeps_admin_on_the_last_admin_key_and_leaves_revoked_keys_alone(api_client, tenant):
    own = f"{URL}{api_client.api_key.pk}/"
    response = api_client.patch(own, {"scopes": ["chat", "ingest"]}, format="json")
    assert response.status_code == 409 and "last active admin key" in response.json()["message"]
    assert ApiKey.objects.for_tenant(tenant).get(pk=api_client.api_key.pk).scope_admin

    spare = api_client.post(URL, {"name": "spare admin", "scopes": ["admin"]}, format="json").json()
    assert api_client.patch(own, {"scopes": ["chat"]}, format="json").status_code == 200
    assert _client(spare["key"]).get(URL).status_code == 200
    assert api_client.get(URL).status_code == 403  # from its next request on, this key is chat alone

    revoked = _client(spare["key"]).post(URL, {"name": "gone", "scopes": ["chat"]}, format="json").json()
    _client(spare["key"]).post(f"{URL}{revoked['id']}/revoke/")
    response = _client(spare["key"]).patch(f"{URL}{revoked['id']}/", {"scopes": ["admin"]}, format="json")
    assert response.status_code == 409 and "revoked" in response.json()["message"]
    assert not ApiKey.objects.for_tenant(tenant).get(pk=revoked["id"]).scope_admin


def test_patch_of_another_tenants_key_is_404_and_changes_nothing(api_client, other_api_client, other_tenant):
    theirs = other_api_client.api_key
    response = api_client.patch(f"{URL}{theirs.pk}/", {"scopes": ["chat"]}, format="json")
    assert response.status_code == 404
    assert ApiKey.objects.for_tenant(other_tenant).get(pk=theirs.pk).scope_admin


def test_patch_needs_an_admin_key_of_the_whole_tenant(standard_api_client, api_client, tenant):
    target = f"{URL}{standard_api_client.api_key.pk}/"
    response = standard_api_client.patch(target, {"scopes": ["admin"]}, format="json")
    assert response.status_code == 403 and '"admin" scope' in response.json()["message"]
    knowledge_base = KnowledgeBaseFactory(tenant=tenant)
    limited = api_client.post(
        URL, {"name": "kb admin", "scopes": ["admin"], "knowledge_base": knowledge_base.pk}, format="json"
    )
    response = _client(limited.json()["key"]).patch(target, {"scopes": ["admin"]}, format="json")
    assert response.status_code == 403
    assert ApiKey.objects.for_tenant(tenant).get(pk=standard_api_client.api_key.pk).scopes == {"chat", "ingest"}
