"""Tenant isolation, walked over every URL pattern of the API rather than listed by hand: a new endpoint is
swept the day it lands, and one whose URL names an object this sweep does not know fails until it is taught.

With tenant A's most powerful key, on every route and every method the view answers:
- an object id of tenant B in the URL is a 404, and B's rows are unchanged afterwards;
- B's object ids in the body of a write are refused, and A gets no row pointing at B's;
- every list (with and without filters naming B's ids or B itself) shows nothing of B's.
The same holds for a key limited to one knowledge base against its own tenant's other knowledge base.
"""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework import serializers
from rest_framework.test import APIClient

from lifecycle.services import tenant_get_or_create
from tenants.models import Role
from tenants.scoping import TenantOwnedModel
from tests.factories import MembershipFactory, UserFactory
from tests.security.admin_pages import admin_pages_without_ids
from tests.security.world import SECRET, tenant_snapshot, world_build

pytestmark = pytest.mark.django_db

METHODS = ("get", "post", "put", "patch", "delete")
# URL parameter -> the object of the world it names.
URL_OBJECTS = {
    "api_key_id": "api_key",
    "knowledge_base_id": "knowledge_base",
    "document_id": "document",
    "conversation_id": "conversation",
    "turn_id": "turn",
    "chunk_id": "chunk",
    "event_id": "dedup_event",
    "dedup_event_id": "dedup_event",
    "curated_answer_id": "curated_answer",
}
# The same, for a key limited to the first knowledge base: objects of the tenant's second knowledge base.
URL_OBJECTS_OTHER_KB = {
    "knowledge_base_id": "second_knowledge_base",
    "document_id": "second_document",
    "chunk_id": "second_chunk",
    "conversation_id": "second_conversation",
    "turn_id": "second_turn",
    "curated_answer_id": "second_curated_answer",
}
# Body fields that reference an object, and the object they name.
BODY_REFERENCES = {
    "knowledge_base": "knowledge_base",
    "knowledge_base_id": "knowledge_base",
    "document": "document",
    "document_id": "document",
    "conversation": "conversation",
    "conversation_id": "conversation",
    "turn": "turn",
    "turn_id": "turn",
    "matched_turn": "turn",
}
# Query parameters a list might filter by, and the object of B they are tried with.
LIST_FILTERS = {**BODY_REFERENCES, "user_id": None, "tenant": None, "tenant_id": None}


def api_routes() -> list[tuple[str, type, list[str]]]:
    """(route, view class, URL parameter names) for every pattern under /api/v1/."""
    found = []

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                route = prefix + str(pattern.pattern)
                view = getattr(pattern.callback, "cls", None) or getattr(pattern.callback, "view_class", None)
                if route.startswith("api/v1/") and view is not None:
                    found.append((route, view, re.findall(r"<(?:\w+:)?(\w+)>", route)))

    walk(get_resolver().url_patterns, "")
    return found


ROUTES = api_routes()
OBJECT_ROUTES = [r for r in ROUTES if r[2]]
LIST_ROUTES = [r for r in ROUTES if not r[2] and hasattr(r[1], "get")]


def _methods(view: type) -> list[str]:
    return [m for m in METHODS if hasattr(view, m)]


def _url(route: str, values: dict[str, int]) -> str:
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(values[m.group(1)]), route)


def _input_serializer(view: type, method: str) -> type | None:
    """The serializer a view validates bodies with (HackSoft style: a nested InputSerializer)."""
    return getattr(view, "InputSerializer", None) if method in ("post", "put", "patch") else None


def _sample(field: serializers.Field, reference_id: int | None):
    """A valid value for a required field; `reference_id` for fields that name an object."""
    if isinstance(field, serializers.BooleanField):
        return False
    if isinstance(field, serializers.ChoiceField):
        return next(iter(field.choices))
    if isinstance(field, serializers.IntegerField):
        return reference_id if reference_id is not None else max(1, field.min_value or 1)
    if isinstance(field, serializers.FloatField):
        return field.min_value if field.min_value is not None else 0.5
    if isinstance(field, serializers.ListField):
        return []
    if isinstance(field, serializers.DictField):
        return {}
    if isinstance(field, serializers.Serializer):
        return _body(type(field), {})
    return "hello"


def _body(serializer_class: type | None, references: dict[str, int]) -> dict:
    if serializer_class is None:
        return {}
    body = {}
    for name, field in serializer_class().fields.items():
        if field.read_only:
            continue
        if name in references:
            body[name] = references[name]
        elif field.required:
            body[name] = _sample(field, None)
        elif name == "text":  # a document needs one source of text
            body[name] = "hello"
    return body


@pytest.fixture
def worlds(db):
    acme = tenant_get_or_create(slug="sweep-acme", name="Acme")[0]
    globex = tenant_get_or_create(slug="sweep-globex", name="Globex")[0]
    return world_build(tenant=acme, marker="acme-visible"), world_build(tenant=globex, marker=SECRET)


def _client(raw_key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
    return client


def test_the_sweep_sees_the_api():
    names = {route for route, _, _ in ROUTES}
    assert "api/v1/api-keys/<int:api_key_id>/" in names and "api/v1/whoami/" in names
    assert {
        "api/v1/conversations/<int:conversation_id>/turns/",
        "api/v1/turns/<int:turn_id>/feedback/",
        "api/v1/feedback/",
    } <= names
    assert len(OBJECT_ROUTES) >= 3


@pytest.mark.parametrize("route", [r[0] for r in OBJECT_ROUTES])
def test_every_url_parameter_is_known_to_the_sweep(route):
    params = next(p for r, _, p in OBJECT_ROUTES if r == route)
    unknown = [p for p in params if p not in URL_OBJECTS]
    assert not unknown, f"teach URL_OBJECTS which object {unknown} names in {route}"


def _references(world, keys: dict[str, str] | None = None) -> dict[str, int]:
    mapping = keys or BODY_REFERENCES
    return {name: world.id_of(obj) for name, obj in mapping.items()}


@pytest.mark.parametrize(("route", "view", "params"), OBJECT_ROUTES, ids=[r[0] for r in OBJECT_ROUTES])
def test_other_tenants_object_ids_are_404_for_every_method(worlds, route, view, params):
    acme, globex = worlds
    if any(p not in URL_OBJECTS for p in params):
        pytest.fail(f"unknown URL parameter in {route}")
    before = tenant_snapshot(globex.tenant)
    client = _client(acme.raw_keys["admin"])
    url = _url(route, {p: globex.id_of(URL_OBJECTS[p]) for p in params})
    own_references = _references(acme)
    for method in _methods(view):
        body = _body(_input_serializer(view, method), own_references)
        response = getattr(client, method)(url, body, format="json")
        assert response.status_code == 404, f"{method.upper()} {url}: {response.status_code} {response.content[:300]}"
        assert SECRET not in response.content.decode()
    assert tenant_snapshot(globex.tenant) == before, f"{route} changed another tenant's rows"


STREAM_ROUTES = [
    r for r in OBJECT_ROUTES if "stream" in getattr(getattr(r[1], "InputSerializer", None), "_declared_fields", {})
]


def test_the_sweep_sees_the_streaming_routes():
    assert "api/v1/conversations/<int:conversation_id>/messages/" in {route for route, _, _ in STREAM_ROUTES}


@pytest.mark.parametrize(("route", "view", "params"), STREAM_ROUTES, ids=[r[0] for r in STREAM_ROUTES])
def test_other_tenants_object_ids_are_a_json_404_when_streaming_is_asked_for(worlds, route, view, params):
    """A route that can answer as Server-Sent Events refuses another tenant's object before its first event: the same
    JSON 404, nothing of theirs in it, nothing of theirs changed."""
    acme, globex = worlds
    before = tenant_snapshot(globex.tenant)
    client = _client(acme.raw_keys["admin"])
    url = _url(route, {p: globex.id_of(URL_OBJECTS[p]) for p in params})
    body = {**_body(_input_serializer(view, "post"), _references(acme)), "stream": True}
    response = client.post(url, body, format="json", HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 404 and not response.streaming, f"POST {url}: {response.status_code}"
    assert response["Content-Type"] == "application/json" and SECRET not in response.content.decode()
    assert tenant_snapshot(globex.tenant) == before


KB_ROUTES = [r for r in OBJECT_ROUTES if any(p in URL_OBJECTS_OTHER_KB for p in r[2])]


@pytest.mark.parametrize(("route", "view", "params"), KB_ROUTES, ids=[r[0] for r in KB_ROUTES])
def test_knowledge_base_key_cannot_reach_its_tenants_other_knowledge_base(worlds, route, view, params):
    acme, _ = worlds
    before = tenant_snapshot(acme.tenant)
    client = _client(acme.raw_keys["kb_admin"])
    url = _url(route, {p: acme.id_of(URL_OBJECTS_OTHER_KB.get(p, URL_OBJECTS[p])) for p in params})
    for method in _methods(view):
        body = _body(_input_serializer(view, method), _references(acme))
        response = getattr(client, method)(url, body, format="json")
        assert response.status_code in (403, 404), f"{method.upper()} {url}: {response.status_code}"
        assert "second" not in response.content.decode()
    after = tenant_snapshot(acme.tenant)
    for label in before:
        if label != "tenants.ApiKey":
            assert after[label] == before[label], f"{route} changed {label} of another knowledge base"


WRITE_ROUTES = [
    (route, view, method)
    for route, view, params in ROUTES
    for method in _methods(view)
    if _input_serializer(view, method) is not None
    and set(_input_serializer(view, method)().fields) & set(BODY_REFERENCES)
]


@pytest.mark.parametrize(("route", "view", "method"), WRITE_ROUTES, ids=[f"{m} {r}" for r, _, m in WRITE_ROUTES])
def test_other_tenants_ids_in_a_body_are_refused(worlds, route, view, method):
    acme, globex = worlds
    before = tenant_snapshot(globex.tenant)
    client = _client(acme.raw_keys["admin"])
    params = re.findall(r"<(?:\w+:)?(\w+)>", route)
    url = _url(route, {p: acme.id_of(URL_OBJECTS[p]) for p in params})
    body = _body(_input_serializer(view, method), _references(globex))
    response = getattr(client, method)(url, body, format="json")
    assert 400 <= response.status_code < 500, f"{method.upper()} {url} {body}: {response.status_code}"
    assert SECRET not in response.content.decode()
    assert tenant_snapshot(globex.tenant) == before
    _assert_no_row_points_across(acme, globex)


def _assert_no_row_points_across(acme, globex) -> None:
    """No row of A has a foreign key to a row of B."""
    from django.apps import apps

    for model in apps.get_models():
        if not issubclass(model, TenantOwnedModel):
            continue
        for field in model._meta.concrete_fields:
            related = getattr(field, "related_model", None)
            if related is None or not issubclass(related, TenantOwnedModel):
                continue
            theirs = set(related.objects.for_tenant(globex.tenant).values_list("pk", flat=True))
            mine = set(model.objects.for_tenant(acme.tenant).values_list(field.attname, flat=True))
            assert not (mine & theirs), f"{model.__name__}.{field.name} of tenant A points at tenant B's rows"


@pytest.mark.parametrize(("route", "view", "params"), LIST_ROUTES, ids=[r[0] for r in LIST_ROUTES])
def test_lists_and_their_filters_show_nothing_of_other_tenants(worlds, route, view, params):
    acme, globex = worlds
    url = _url(route, {})
    for key in ("admin", "standard", "kb_admin"):
        client = _client(acme.raw_keys[key])
        queries = [{}]
        for name, obj in LIST_FILTERS.items():
            if obj is not None:
                queries.append({name: globex.id_of(obj)})
        queries += [{"tenant": globex.tenant.slug}, {"tenant_id": globex.tenant.pk}, {"user_id": f"{SECRET}-user"}]
        for query in queries:
            response = client.get(url, query)
            assert response.status_code < 500, f"GET {url} {query}: {response.status_code}"
            assert SECRET not in response.content.decode(), f"GET {url} {query} with the {key} key leaked"


# --- the admin: pages without ids (dashboards, exports, settings) and changelist filters -------------------------


def _content(response) -> str:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode(errors="replace")
    return response.content.decode(errors="replace")


@pytest.mark.parametrize("role", [Role.ADMIN, Role.SUPPORT, Role.VIEWER])
def test_admin_pages_and_exports_show_nothing_of_other_tenants(client, worlds, role):
    acme, globex = worlds
    user = UserFactory()
    MembershipFactory(user=user, tenant=acme.tenant, role=role)
    client.force_login(user)
    filters = [
        {},
        {"q": "secret"},  # matches their rows, and the echoed query is not the marker itself
        {"tenant": globex.tenant.pk},
        {"tenant__id__exact": globex.tenant.pk},
        {"tenant_id": globex.tenant.pk},
        {"knowledge_base__id__exact": globex.id_of("knowledge_base")},
        {"conversation__id__exact": globex.id_of("conversation")},
        {"format": "csv"},
        {"tenant": globex.tenant.slug, "format": "csv"},
    ]
    pages = admin_pages_without_ids()
    assert "/admin/" in pages
    for page in pages:
        for query in filters:
            response = client.get(page, query)
            assert response.status_code < 500, f"{page} {query}: {response.status_code}"
            assert SECRET not in _content(response), f"{page} {query} shows another tenant's data to a {role}"
