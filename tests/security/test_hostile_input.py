"""Hostile input: every malformed or oversized request is a clear 4xx and stores nothing; file names cannot
climb out of the media directory; markup typed by a customer app is escaped wherever the admin shows it."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings
from django.contrib import admin
from django.test import override_settings
from django.urls import reverse

from conversations.models import Conversation, Turn
from kbplatform.parsers import MAX_JSON_DEPTH
from lifecycle.services import tenant_get_or_create
from retrieval.models import Document
from tenants.models import ApiKey, Role
from tenants.scoping import TenantOwnedModel
from tests.factories import KnowledgeBaseFactory, MembershipFactory, UserFactory
from tests.security.admin_pages import admin_pages_without_ids
from tests.security.helpers import assert_refused
from tests.security.world import tenant_snapshot, world_build

pytestmark = pytest.mark.django_db

KEYS_URL = "/api/v1/api-keys/"


def _post_raw(client, url: str, body: bytes, content_type: str = "application/json"):
    return client.generic("POST", url, body, content_type=content_type)


# --- bodies -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"[" * 100_000 + b"]" * 100_000, f"deeper than {MAX_JSON_DEPTH}"),
        (b'{"name": ' + b'{"a": ' * (MAX_JSON_DEPTH + 1) + b"1" + b"}" * (MAX_JSON_DEPTH + 2), "deeper than"),
        (b'{"name": "\xff\xfe"}', "not valid UTF-8"),
        (b'{"name": "caf\xe9"}', "not valid UTF-8"),
        (b'{"name": "a\\u0000b"}', "NUL"),
        (b'{"name": "k", "extra": {"\\u0000": 1}}', "NUL"),
        (b'{"name": "\\ud800"}', "surrogate"),
        (b'{"name": NaN}', "not valid JSON"),
        (b'{"name": "k",', "not valid JSON"),
        (b"\xef\xbb\xbf\x00\x00", "not valid"),
    ],
    ids=["deep-array", "deep-object", "invalid-utf8", "latin1", "nul", "nul-key", "surrogate", "nan", "cut", "junk"],
)
def test_malformed_json_is_400_and_stores_nothing(api_client, tenant, body, words):
    before = tenant_snapshot(tenant)
    assert_refused(_post_raw(api_client, KEYS_URL, body), 400, words)
    assert tenant_snapshot(tenant) == before


def test_deep_but_allowed_nesting_still_reaches_validation(api_client):
    """The parser lets the body through; the serializer is what refuses the field it does not take."""
    nested = b'{"name": "ok", "unknown": ' + b"[" * (MAX_JSON_DEPTH - 2) + b"]" * (MAX_JSON_DEPTH - 2) + b"}"
    response = _post_raw(api_client, KEYS_URL, nested)
    assert response.status_code == 400
    assert list(response.json()["extra"]["fields"]) == ["unknown"]


@pytest.mark.parametrize("body", [b"name=\xff\xfe", b"name=%ff%fe", b"name=ok&role=%c3"])
def test_form_bodies_with_invalid_utf8_are_400(api_client, tenant, body):
    before = tenant_snapshot(tenant)
    assert_refused(_post_raw(api_client, KEYS_URL, body, "application/x-www-form-urlencoded"), 400, "UTF-8")
    assert tenant_snapshot(tenant) == before


def test_valid_form_body_still_works(api_client):
    response = _post_raw(api_client, KEYS_URL, b"name=caf%C3%A9", "application/x-www-form-urlencoded")
    assert response.status_code == 201 and response.json()["name"] == "café"


@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
def test_oversize_bodies_are_413_and_store_nothing(api_client, tenant, content_type):
    padding = "x" * 5000
    body = f'{{"name": "big", "padding": "{padding}"}}' if "json" in content_type else f"name=big&pad={padding}"
    before = tenant_snapshot(tenant)
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=2048):
        assert_refused(_post_raw(api_client, KEYS_URL, body.encode(), content_type), 413, "too large")
        # Just under the limit is fine.
        assert _post_raw(api_client, KEYS_URL, b'{"name": "small"}').status_code == 201
    after = tenant_snapshot(tenant)
    assert not any(key["name"] == "big" for key in after["tenants.ApiKey"])
    assert len(after["tenants.ApiKey"]) == len(before["tenants.ApiKey"]) + 1


def test_oversize_json_without_content_length_is_still_413(api_client):
    """A body sent without a (truthful) Content-Length is capped while it is read."""
    from io import BytesIO

    from kbplatform.parsers import body_read_limited

    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=100), pytest.raises(Exception, match="larger than 100"):
        body_read_limited(BytesIO(b"x" * 1000), {"request": None})


def test_unsupported_content_type_is_415(api_client):
    assert_refused(_post_raw(api_client, KEYS_URL, b"<name/>", "application/xml"), 415, "media type")


# --- questions ------------------------------------------------------------------------------------------


@pytest.fixture
def conversation(api_client, tenant):
    knowledge_base = KnowledgeBaseFactory(tenant=tenant)
    response = api_client.post("/api/v1/conversations/", {"knowledge_base": knowledge_base.pk}, format="json")
    assert response.status_code == 201, response.content
    return Conversation.objects.for_tenant(tenant).get(pk=response.json()["id"])


@pytest.mark.parametrize(
    "question",
    [b"q" * 1_000_000, b"q " * 50_000, b"", b"   ", b"\\u0000hello", b"\\ud800", b"\xff"],
    ids=["1MB", "100kB-words", "empty", "blank", "nul", "surrogate", "invalid-utf8"],
)
def test_huge_or_empty_questions_are_400_and_store_no_turn(api_client, tenant, conversation, question):
    url = f"/api/v1/conversations/{conversation.pk}/messages/"
    response = _post_raw(api_client, url, b'{"question": "' + question + b'"}')
    assert response.status_code == 400, response.content[:300]
    assert response.json()["message"]
    assert not Turn.objects.for_tenant(tenant).filter(conversation=conversation).exists()
    conversation.refresh_from_db()
    assert conversation.turn_count == 0


# --- file names -------------------------------------------------------------------------------------------


def _multipart(filename: bytes, content: bytes, boundary: str = "kbboundary") -> bytes:
    return (
        f"--{boundary}\r\n".encode()
        + b'Content-Disposition: form-data; name="file"; filename="'
        + filename
        + b'"\r\nContent-Type: text/plain\r\n\r\n'
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )


@pytest.mark.parametrize(
    "filename",
    [b"../../../../../tmp/{marker}.txt", b"..\\..\\..\\tmp\\{marker}.txt", b"/etc/{marker}.txt", b"sub/../../{marker}"],
)
def test_path_traversal_in_file_names_stays_in_media_root(api_client, tenant, filename):
    marker = f"kb-traversal-{uuid.uuid4().hex[:8]}"
    knowledge_base = KnowledgeBaseFactory(tenant=tenant)
    body = _multipart(filename.replace(b"{marker}", marker.encode()), b"Plain harmless text for the index.")
    response = api_client.generic(
        "POST",
        f"/api/v1/knowledge-bases/{knowledge_base.pk}/documents/",
        body,
        content_type="multipart/form-data; boundary=kbboundary",
    )
    assert response.status_code in (201, 202, 400), response.content[:300]
    assert response.status_code != 500
    for document in Document.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base):
        assert "/" not in document.source_filename and "\\" not in document.source_filename
        assert ".." not in Path(document.source_filename).parts
        if document.source_file:
            stored = Path(document.source_file.path).resolve()
            assert stored.is_relative_to(Path(settings.MEDIA_ROOT).resolve()), stored
    assert not list(Path("/tmp").glob(f"{marker}*")) and not list(Path("/etc").glob(f"{marker}*"))


def _multipart_field(name: bytes, value: bytes, filename: bytes | None = None) -> bytes:
    disposition = b'form-data; name="' + name + b'"' + (b'; filename="' + filename + b'"' if filename else b"")
    return (
        b"--kbboundary\r\nContent-Disposition: "
        + disposition
        + b"\r\nContent-Type: text/plain\r\n\r\n"
        + value
        + b"\r\n--kbboundary--\r\n"
    )


@pytest.mark.parametrize(
    "body",
    [
        _multipart_field(b"text", b"caf\xe9 in latin-1"),
        _multipart_field(b"t\xffxt", b"hello"),
        _multipart_field(b"file", b"hello", filename=b"\xff\xfe.txt"),
    ],
    ids=["value", "field-name", "file-name"],
)
def test_multipart_with_invalid_utf8_is_400_and_stores_nothing(api_client, tenant, body):
    knowledge_base = KnowledgeBaseFactory(tenant=tenant)
    before = tenant_snapshot(tenant)
    response = api_client.generic(
        "POST",
        f"/api/v1/knowledge-bases/{knowledge_base.pk}/documents/",
        body,
        content_type="multipart/form-data; boundary=kbboundary",
    )
    assert response.status_code == 400, response.content[:300]
    assert response.json()["message"]
    assert tenant_snapshot(tenant) == before


def test_multipart_with_real_unicode_is_accepted(api_client, tenant):
    knowledge_base = KnowledgeBaseFactory(tenant=tenant)
    response = api_client.generic(
        "POST",
        f"/api/v1/knowledge-bases/{knowledge_base.pk}/documents/",
        _multipart_field(b"file", "Grüße aus Köln".encode(), filename="résumé.txt".encode()),
        content_type="multipart/form-data; boundary=kbboundary",
    )
    assert response.status_code == 202, response.content[:300]
    assert response.json()["source_filename"] == "résumé.txt"


# --- markup in the admin -------------------------------------------------------------------------------------

SCRIPT = '<script>alert("kb-xss")</script>'


def test_markup_from_customers_is_escaped_everywhere_in_the_admin(client):
    tenant = tenant_get_or_create(slug="xss-tenant", name=SCRIPT)[0]
    world_build(tenant=tenant, marker=SCRIPT)
    user = UserFactory()
    MembershipFactory(user=user, tenant=tenant, role=Role.ADMIN)
    client.force_login(user)

    checked = 0
    for page in admin_pages_without_ids(skip=r"logout|add|password"):
        response = client.get(page)
        assert response.status_code < 500, page
        if response.get("Content-Type", "").startswith("text/html"):
            assert SCRIPT not in response.content.decode(errors="replace"), f"unescaped markup on {page}"
            checked += 1
    for model in admin.site._registry:
        if not issubclass(model, TenantOwnedModel):
            continue
        info = (model._meta.app_label, model._meta.model_name)
        for obj in model.objects.for_tenant(tenant):
            for view in ("change", "history", "delete"):
                url = reverse(f"admin:{info[0]}_{info[1]}_{view}", args=[obj.pk])
                response = client.get(url)
                assert response.status_code < 500, url
                content = response.content.decode(errors="replace")
                assert SCRIPT not in content, f"unescaped markup on {url}"
                checked += 1
    assert checked > 10
    assert apps.get_model("tenants", "ApiKey") is ApiKey
