"""The OpenAPI schema that schemathesis and clients read: generated without a warning (no two views' nested
serializers sharing a component name, which silently overwrites one with the other), valid OpenAPI, and every
authenticated operation documents the error shape for the refusals it can give."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command


@pytest.fixture(scope="module")
def schema(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("schema") / "schema.json"
    call_command("spectacular", "--fail-on-warn", "--validate", "--format", "openapi-json", "--file", str(path))
    return json.loads(path.read_text())


def test_component_names_are_unique_per_view(schema):
    names = set(schema["components"]["schemas"])
    assert not names & {"Input", "InputRequest", "Output"}, "nested serializers must be named after their view"


# Operations that answer in OpenAI's error shape, so that OpenAI clients read their errors; every other one answers
# in the platform's.
OPENAI_SHAPED = {("post", "/api/v1/chat/completions"), ("get", "/api/v1/models")}


def test_every_secured_operation_documents_its_refusals(schema):
    checked = 0
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if not any(operation.get("security", [{}])):
                continue
            openai_shaped = operation.get("x-error-shape") == "openai"
            assert openai_shaped == ((method, path) in OPENAI_SHAPED), f"{method.upper()} {path}"
            error = {"$ref": f"#/components/schemas/{'OpenAIError' if openai_shaped else 'Error'}"}
            for code in ("400", "401", "403", "429", "503"):
                body = operation["responses"][code]["content"]["application/json"]["schema"]
                assert body == error, f"{method.upper()} {path} {code}"
            assert "Retry-After" in operation["responses"]["429"]["headers"]
            if "{" in path:
                assert "404" in operation["responses"], f"{method.upper()} {path}"
            checked += 1
    assert checked >= 10


@pytest.mark.parametrize(
    "path", ["/api/v1/knowledge-bases/{knowledge_base_id}/search/", "/api/v1/conversations/{conversation_id}/messages/"]
)
def test_a_search_documents_its_refusal_of_another_models_vectors(schema, path):
    """A client must be able to tell the 409 of a knowledge base awaiting its re-index (retry later) from any other
    conflict by reading the schema, not only the docs."""
    refusal = schema["paths"][path]["post"]["responses"]["409"]
    assert refusal["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    assert "embedding_model_mismatch" in refusal["description"]


def test_a_question_documents_every_status_it_can_answer_with(schema):
    """An expired conversation is a 410 and a failing answer service a 502 or 504: a client generated from the schema
    must know them, and schemathesis must accept them."""
    responses = schema["paths"]["/api/v1/conversations/{conversation_id}/messages/"]["post"]["responses"]
    for code in ("410", "502", "504"):
        assert responses[code]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}


def test_a_question_documents_its_event_stream(schema):
    """A client generated from the schema must know that the turn can answer as Server-Sent Events, and which events
    come in which order."""
    operation = schema["paths"]["/api/v1/conversations/{conversation_id}/messages/"]["post"]
    content = operation["responses"]["200"]["content"]
    assert set(content) == {"application/json", "text/event-stream"}
    assert content["application/json"]["schema"] == {"$ref": "#/components/schemas/ConversationMessageOutput"}
    event = schema["components"]["schemas"][content["text/event-stream"]["schema"]["$ref"].rsplit("/", 1)[1]]
    assert set(event["required"]) == {"event", "data"}
    description = operation["responses"]["200"]["description"]
    for event in ("`decision`", "`sources`", "`delta`", "`done`", "`error`"):
        assert event in description
    body = schema["components"]["schemas"]["ConversationMessageInputRequest"]["properties"]
    assert body["stream"]["type"] == "boolean"


@pytest.mark.parametrize(
    "component",
    [
        "ConversationCreateInputRequest",
        "ConversationMessageInputRequest",
        "TurnAnswerInputRequest",
        "PatchedConversationDetailInputRequest",
        "TurnFeedbackInputRequest",
        "DedupPolicyPolicyRequest",
        "KnowledgeBaseSearchInputRequest",
        "ApiKeyCreateInputRequest",
        "AuditEventReviewInputRequest",
        "KnowledgeBaseListCreateInputRequest",
        "DocumentCreateInputRequest",
        "DocumentBulkCreateInputRequest",
        "PatchedDocumentDetailInputRequest",
        "PatchedChunkDetailInputRequest",
    ],
)
def test_request_bodies_that_refuse_unknown_fields_say_so(schema, component):
    assert schema["components"]["schemas"][component]["additionalProperties"] is False


def test_no_operation_is_described_by_a_base_class_note_for_developers(schema):
    """Operations without a docstring of their own were described, in /api/docs/ and every generated client, by
    TenantApi's note on how subclasses add permissions."""
    described_by_base = [
        f"{method.upper()} {path}"
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if "extra_permission_classes" in operation.get("description", "")
    ]
    assert described_by_base == []
    conversations = schema["paths"]["/api/v1/conversations/{conversation_id}/messages/"]["post"]
    assert conversations["summary"] == "Ask a question in a conversation"
    search = schema["paths"]["/api/v1/knowledge-bases/{knowledge_base_id}/search/"]["post"]
    assert search["description"].startswith("A stateless retrieval test")


def test_every_operation_names_the_api_key_scope_it_needs(schema):
    """From the views' declarations (tests/security/test_scope_sweep.py holds the API to them)."""
    scopes = {
        f"{method.upper()} {path}": operation.get("x-required-scope")
        for path, operations in schema["paths"].items()
        if path.startswith("/api/v1/")
        for method, operation in operations.items()
    }
    assert set(scopes.values()) == {"any", "chat", "ingest", "admin"}
    assert scopes["DELETE /api/v1/documents/{document_id}/"] == "ingest"
    assert scopes["GET /api/v1/whoami/"] == "any"
    delete = schema["paths"]["/api/v1/knowledge-bases/{knowledge_base_id}/"]["delete"]
    assert delete["description"].endswith("Needs an API key with the `admin` scope.")
    assert '"admin" scope' in delete["responses"]["403"]["description"]
    search = schema["paths"]["/api/v1/knowledge-bases/{knowledge_base_id}/search/"]["post"]
    assert "`chat` scope (or `admin`" in search["description"]


def test_the_document_list_describes_its_filters_page_and_status_counts(schema):
    """A client generated from the schema must be able to ask for several statuses (the parameter repeated, OpenAPI's
    default for a query array), and read every status's count without guessing which keys appear."""
    documents = schema["paths"]["/api/v1/knowledge-bases/{knowledge_base_id}/documents/"]
    listing = documents["get"]
    parameters = {parameter["name"]: parameter for parameter in listing["parameters"]}
    assert set(parameters) == {
        "knowledge_base_id",
        "status",
        "external_id",
        "created_from",
        "created_to",
        "limit",
        "offset",
    }
    statuses = ["queued", "parsing", "chunking", "embedding", "indexing", "indexed", "failed"]
    status = parameters["status"]
    assert status["schema"]["type"] == "array" and status["schema"]["items"]["enum"] == statuses
    assert status.get("style", "form") == "form" and status.get("explode", True) is True
    assert parameters["limit"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 500, "default": 100}
    assert parameters["offset"]["schema"]["maximum"] == 2**63 - 1

    page = schema["components"]["schemas"][
        listing["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    ]
    assert sorted(page["required"]) == ["count", "results", "status_counts"]
    detail = schema["paths"]["/api/v1/documents/{document_id}/"]["get"]["responses"]["200"]
    assert page["properties"]["results"]["items"] == detail["content"]["application/json"]["schema"]
    counts_ref = page["properties"]["status_counts"]["allOf"][0]["$ref"]
    counts = schema["components"]["schemas"][counts_ref.rsplit("/", 1)[1]]
    assert list(counts["properties"]) == statuses and sorted(counts["required"]) == sorted(statuses)
    # Listing moved the upload into a view of both methods; the upload's request type kept its name.
    upload = documents["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert upload == {"$ref": "#/components/schemas/DocumentCreateInputRequest"}


@pytest.mark.parametrize(
    ("path", "filters", "item"),
    [
        ("/api/v1/conversations/", {"user_id", "knowledge_base", "limit", "offset"}, "Conversation"),
        ("/api/v1/conversations/{conversation_id}/turns/", {"conversation_id", "limit", "offset"}, "Turn"),
        ("/api/v1/feedback/", {"rating", "conversation", "limit", "offset"}, "Feedback"),
    ],
)
def test_the_conversation_and_feedback_lists_describe_their_filters_and_page(schema, path, filters, item):
    listing = schema["paths"][path]["get"]
    assert {parameter["name"] for parameter in listing["parameters"]} == filters
    assert listing["operationId"].endswith("_list")
    page_ref = listing["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    page = schema["components"]["schemas"][page_ref.rsplit("/", 1)[1]]
    assert sorted(page["required"]) == ["count", "results"]
    assert page["properties"]["results"]["items"] == {"$ref": f"#/components/schemas/{item}"}


def test_conversation_rename_delete_and_feedback_document_what_they_answer(schema):
    detail = schema["paths"]["/api/v1/conversations/{conversation_id}/"]
    assert {"get", "patch", "delete"} <= set(detail)
    assert "204" in detail["delete"]["responses"]
    assert {"title", "title_is_default"} <= set(schema["components"]["schemas"]["Conversation"]["properties"])
    assert {"turns", "turns_total"} <= set(schema["components"]["schemas"]["ConversationDetailOutput"]["properties"])
    feedback = schema["paths"]["/api/v1/turns/{turn_id}/feedback/"]
    for method in ("post", "put"):
        assert {"200", "201", "409"} <= set(feedback[method]["responses"]), method
    rating = schema["components"]["schemas"]["TurnFeedbackInputRequest"]["properties"]["rating"]["$ref"]
    assert schema["components"]["schemas"][rating.rsplit("/", 1)[1]]["enum"] == ["up", "down"]
    audit = schema["paths"]["/api/v1/audit-events/"]["get"]
    assert "suspected_false_hit" in {parameter["name"] for parameter in audit["parameters"]}


def test_the_document_and_chunk_endpoints_of_bulk_metadata_and_chunk_edits_are_described(schema):
    bulk = schema["paths"]["/api/v1/knowledge-bases/{knowledge_base_id}/documents/bulk/"]["post"]
    assert set(bulk["requestBody"]["content"]) == {"application/json", "multipart/form-data"}
    assert {"202", "404", "413"} <= set(bulk["responses"])
    assert set(schema["paths"]["/api/v1/chunks/{chunk_id}/"]) == {"get", "patch"}
    assert "get" in schema["paths"]["/api/v1/documents/{document_id}/chunks/"]
    assert "patch" in schema["paths"]["/api/v1/documents/{document_id}/"]
    search = schema["components"]["schemas"]["KnowledgeBaseSearchInputRequest"]["properties"]
    assert search["metadata_filter"]["type"] == "object"
    document = schema["components"]["schemas"]["DocumentOutput"]["properties"]
    assert {"metadata", "split_oversize_chunks"} <= set(document)


def test_the_openai_compatible_endpoint_documents_openais_shapes(schema):
    """A client generated from the schema (and schemathesis) must see OpenAI's error shape on every refusal of the
    chat endpoint, its bearer authentication, its stream and the platform's extra field."""
    operation = schema["paths"]["/api/v1/chat/completions"]["post"]
    openai_error = {"$ref": "#/components/schemas/OpenAIError"}
    for code, response in operation["responses"].items():
        if code[0] in "45":
            assert response["content"]["application/json"]["schema"] == openai_error, code
            assert "extra." not in response["description"], code
    error = schema["components"]["schemas"]["OpenAIError"]["properties"]["error"]
    assert set(error["required"]) == {"message", "type", "param", "code"}
    assert operation["security"] == [{"BearerApiKey": []}] and operation["x-required-scope"] == "chat"
    assert schema["components"]["securitySchemes"]["BearerApiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schema["components"]["securitySchemes"]["BearerApiKey"]["description"],
    }
    assert set(operation["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    completion = schema["components"]["schemas"]["ChatCompletionCreateOutput"]
    assert {"id", "object", "created", "model", "choices", "usage", "kbplatform"} <= set(completion["required"])
    request = schema["components"]["schemas"]["ChatCompletionCreateInputRequest"]
    assert request["additionalProperties"] is False and {"model", "messages"} <= set(request["required"])
    assert {"conversation_id", "force_refresh", "stream", "user"} <= set(request["properties"])
