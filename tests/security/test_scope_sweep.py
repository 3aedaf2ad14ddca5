"""API key scopes, walked over every URL pattern and method of the API (from the URLconf, as the isolation sweep
walks it), against the scope table below: what each endpoint needs is written here a second time, apart from the
views' own declarations, so a view that declares the wrong scope fails here, and a new endpoint fails until this
table names it.

For each route and method, with a key holding one scope alone (chat, ingest, admin) and a former standard key (chat
and ingest):
- a key lacking the scope is a 403 that names the missing scope, and nothing of either tenant changes;
- a key holding it gets past the check: another tenant's object in the URL is still a 404, a list is a 200 and a
  write to a collection with an empty body reaches validation (400), so nothing is created.
"""

from __future__ import annotations

import pytest

from tenants.scopes import ANY_SCOPE, SCOPE_ORDER, Scope
from tests.security.test_isolation_sweep import (
    ROUTES,
    URL_OBJECTS,
    _body,
    _client,
    _input_serializer,
    _methods,
    _references,
    _url,
    worlds,  # noqa: F401  (the fixture)
)
from tests.security.world import SECRET, tenant_snapshot

pytestmark = pytest.mark.django_db

CHAT, INGEST, ADMIN = Scope.CHAT, Scope.INGEST, Scope.ADMIN
READ = frozenset({CHAT, INGEST})  # either one: a chat client and an uploader both read the knowledge bases
KB = "api/v1/knowledge-bases/<int:knowledge_base_id>/"
DOCUMENT = "api/v1/documents/<int:document_id>/"
CONVERSATION = "api/v1/conversations/<int:conversation_id>/"
# (route, method) -> the scope it needs: docs/operations.md ("API key scopes") in a table a test can hold the API to.
REQUIRED = {
    ("api/v1/whoami/", "GET"): ANY_SCOPE,
    ("api/v1/api-keys/", "GET"): ADMIN,
    ("api/v1/api-keys/", "POST"): ADMIN,
    ("api/v1/api-keys/<int:api_key_id>/", "GET"): ADMIN,
    ("api/v1/api-keys/<int:api_key_id>/", "PATCH"): ADMIN,
    ("api/v1/api-keys/<int:api_key_id>/revoke/", "POST"): ADMIN,
    ("api/v1/knowledge-bases/", "GET"): READ,
    ("api/v1/knowledge-bases/", "POST"): ADMIN,
    (KB, "GET"): READ,
    (KB, "PATCH"): ADMIN,
    (KB, "DELETE"): ADMIN,
    (KB + "documents/", "GET"): INGEST,
    (KB + "documents/", "POST"): INGEST,
    (KB + "documents/bulk/", "POST"): INGEST,
    (KB + "search/", "POST"): CHAT,
    (KB + "reindex/", "POST"): ADMIN,
    (DOCUMENT, "GET"): INGEST,
    (DOCUMENT, "PATCH"): INGEST,
    (DOCUMENT, "DELETE"): INGEST,
    (DOCUMENT + "reindex/", "POST"): INGEST,
    (DOCUMENT + "chunks/", "GET"): INGEST,
    ("api/v1/chunks/<int:chunk_id>/", "GET"): INGEST,
    ("api/v1/chunks/<int:chunk_id>/", "PATCH"): INGEST,
    ("api/v1/conversations/", "GET"): CHAT,
    ("api/v1/conversations/", "POST"): CHAT,
    (CONVERSATION, "GET"): CHAT,
    (CONVERSATION, "PATCH"): CHAT,
    (CONVERSATION, "DELETE"): CHAT,
    (CONVERSATION + "messages/", "POST"): CHAT,
    (CONVERSATION + "turns/", "GET"): CHAT,
    ("api/v1/turns/<int:turn_id>/answer/", "PUT"): CHAT,
    ("api/v1/turns/<int:turn_id>/feedback/", "GET"): CHAT,
    ("api/v1/turns/<int:turn_id>/feedback/", "POST"): CHAT,
    ("api/v1/turns/<int:turn_id>/feedback/", "PUT"): CHAT,
    ("api/v1/feedback/", "GET"): CHAT,
    ("api/v1/dedup-policy/", "GET"): ADMIN,
    ("api/v1/dedup-policy/", "PUT"): ADMIN,
    ("api/v1/audit-events/", "GET"): CHAT,
    ("api/v1/audit-events/<int:event_id>/review/", "POST"): ADMIN,
    ("api/v1/chat/completions", "POST"): CHAT,
    ("api/v1/models", "GET"): CHAT,
    (KB + "curated-answers/", "GET"): INGEST,
    (KB + "curated-answers/", "POST"): INGEST,
    (KB + "curated-answers/import/", "POST"): INGEST,
    ("api/v1/curated-answers/<int:curated_answer_id>/", "GET"): INGEST,
    ("api/v1/curated-answers/<int:curated_answer_id>/", "PATCH"): INGEST,
    ("api/v1/curated-answers/<int:curated_answer_id>/", "DELETE"): INGEST,
}
# Routes that answer errors in OpenAI's shape (`{"error": {"message", "type", "param", "code"}}`): their 403 names the
# scope in its message and says `insufficient_scope` in its code; OpenAI's shape has no room for the platform's extra.
OPENAI_SHAPED = {"api/v1/chat/completions", "api/v1/models"}
# The keys swept: world key name -> the scopes it holds.
KEYS = {
    "only_chat": {CHAT},
    "only_ingest": {INGEST},
    "only_admin": {ADMIN},
    "standard": {CHAT, INGEST},
}
OPERATIONS = [(route, view, method.upper()) for route, view, _ in ROUTES for method in _methods(view)]


def _may(held: set[Scope], needed: str | frozenset) -> bool:
    return needed == ANY_SCOPE or ADMIN in held or bool(held & (needed if isinstance(needed, frozenset) else {needed}))


def test_the_scope_table_names_every_operation_of_the_api_and_nothing_else():
    found = {(route, method) for route, _, method in OPERATIONS}
    assert sorted(found - REQUIRED.keys()) == [], "teach REQUIRED the scope each new operation needs"
    assert sorted(REQUIRED.keys() - found) == [], "REQUIRED names operations the API no longer has"


def test_each_scope_reaches_something_the_others_do_not():
    for scope in SCOPE_ORDER:
        assert scope in REQUIRED.values()


@pytest.mark.parametrize("key", list(KEYS))
@pytest.mark.parametrize(("route", "view", "method"), OPERATIONS, ids=[f"{m} {r}" for r, _, m in OPERATIONS])
def test_every_operation_answers_each_scope_as_the_table_says(worlds, route, view, method, key):  # noqa: F811
    acme, globex = worlds
    needed = REQUIRED.get((route, method))
    assert needed is not None, f"{method} /{route} is not in REQUIRED"
    params = [p for p in URL_OBJECTS if f"<int:{p}>" in route]
    before = (tenant_snapshot(acme.tenant), tenant_snapshot(globex.tenant))
    client = _client(acme.raw_keys[key])
    url = _url(route, {p: globex.id_of(URL_OBJECTS[p]) for p in params})
    body = _body(_input_serializer(view, method.lower()), _references(acme)) if params else {}
    response = getattr(client, method.lower())(url, body, format="json")
    content = response.content.decode()
    assert SECRET not in content
    if _may(KEYS[key], needed):
        expected = 404 if params else (200 if method == "GET" else 400)
        assert response.status_code == expected, f"{method} {url} with {key}: {response.status_code} {content[:300]}"
    else:
        assert response.status_code == 403, f"{method} {url} with {key}: {response.status_code} {content[:300]}"
        error = response.json()
        accepted = [
            s for s in SCOPE_ORDER if s == ADMIN or s in (needed if isinstance(needed, frozenset) else {needed})
        ]
        named = " or ".join(f'"{s}"' for s in accepted if s != ADMIN) or f'"{ADMIN}"'
        if route in OPENAI_SHAPED:
            error = error["error"]
            assert f"{named} scope" in error["message"]
            assert (error["type"], error["code"]) == ("permission_error", "insufficient_scope")
            return
        assert f"{named} scope" in error["message"]
        assert error["extra"] == {
            "required_scope": accepted[0],
            "accepted_scopes": accepted,
            "key_scopes": [s for s in SCOPE_ORDER if s in KEYS[key]],
        }
    assert (tenant_snapshot(acme.tenant), tenant_snapshot(globex.tenant)) == before, f"{method} {url} changed rows"


@pytest.mark.parametrize("key", list(KEYS))
def test_options_needs_a_key_but_no_scope(worlds, key):  # noqa: F811
    acme, _ = worlds
    response = _client(acme.raw_keys[key]).options("/api/v1/api-keys/")
    assert response.status_code == 200 and "prefix" not in response.content.decode()


@pytest.mark.parametrize("key", list(KEYS))
def test_head_is_answered_as_get(worlds, key):  # noqa: F811
    acme, _ = worlds
    response = _client(acme.raw_keys[key]).head("/api/v1/dedup-policy/")
    assert response.status_code == (200 if _may(KEYS[key], ADMIN) else 403)


POLICY_FIELDS = {"scope", "threshold", "question_window", "exclusion_window", "granularity"}


def test_the_audit_log_shows_the_policy_fields_to_an_admin_key_only(worlds):  # noqa: F811
    acme, _ = worlds
    for key, shown in (("only_chat", False), ("standard", False), ("only_admin", True), ("admin", True)):
        response = _client(acme.raw_keys[key]).get("/api/v1/audit-events/")
        assert response.status_code == 200, (key, response.content[:300])
        [event] = response.json()["results"]
        assert event["id"] == acme.id_of("dedup_event") and event["action"] == "answered"
        if shown:
            assert POLICY_FIELDS <= event.keys(), key
            assert (event["threshold"], event["question_window"], event["exclusion_window"]) == (0.9, 10, 5)
            assert (event["scope"], event["granularity"]) == ("session", "doc")
        else:
            assert not POLICY_FIELDS & event.keys(), key
            # The threshold's value is in no field either (read as values: a timestamp's digits may hold "0.9").
            assert 0.9 not in event.values(), key
