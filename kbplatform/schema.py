"""OpenAPI schema generation: unique component names and the error responses every endpoint can give.

- The house style nests `InputSerializer`/`OutputSerializer` in each view, so drf-spectacular's default names
  ("Input", "Output") collide across views and one view's schema silently replaces another's. Components are
  named after the view instead: `ApiKeyCreateApi.InputSerializer` -> `ApiKeyCreateInput(Request)`.
- A request body that refuses unknown fields (`kbplatform.serializers.StrictInputSerializer`) says so with
  `additionalProperties: false`, so clients and schemathesis know a misspelt field is a 400, not ignored.
- Every error is `{"message", "extra"}` (kbplatform.exception_handler); the hook documents the statuses each
  operation can answer with that shape, so clients and schemathesis see the whole contract, not only 2xx. An
  operation that answers in OpenAI's error shape instead (the OpenAI-compatible chat endpoint) says so with
  `x-error-shape: openai`, and its errors are documented with that shape.
"""

from __future__ import annotations

import inspect
from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import get_doc

from kbplatform.serializers import StrictInputSerializer

ERROR_COMPONENT = "Error"
ERROR_SCHEMA = {
    "type": "object",
    "description": "Every error of the API: a message for people, details for programs.",
    "properties": {
        "message": {"type": "string"},
        "extra": {"type": "object", "additionalProperties": True},
    },
    "required": ["message", "extra"],
}
OPENAI_ERROR_COMPONENT = "OpenAIError"
OPENAI_ERROR_SCHEMA = {
    "type": "object",
    "description": "An error of the OpenAI-compatible endpoints, in OpenAI's shape.",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": "string", "nullable": True},
                "code": {"type": "string", "nullable": True},
            },
            "required": ["message", "type", "param", "code"],
        }
    },
    "required": ["error"],
    "additionalProperties": True,
}
ERROR_SHAPE_EXTENSION = "x-error-shape"
_DESCRIPTIONS = {
    "400": "The request is not valid: `message` says why, `extra.fields` names the fields.",
    "401": "No API key, or a wrong, revoked or disabled one.",
    "403": "The key may not do this (e.g. needs an admin key).",
    "404": "No such object for this key (another tenant's objects are not found either).",
    "409": "The request conflicts with the current state.",
    "413": "The request body is too large.",
    "415": "Unsupported media type: send JSON (or multipart for files).",
    "429": "The tenant's rate limit is spent, or this address made too many failed authentications: retry after "
    "`Retry-After` seconds.",
    "503": "A dependency (database, vector store) is down: retry after `Retry-After` seconds.",
}
# What the shared refusals mean in OpenAI's shape, where the platform's say what `extra` holds.
_OPENAI_DESCRIPTIONS = {
    "400": "The request is not valid: `error.message` says why, `error.param` names the field, `error.code` is "
    "`unknown_parameter`, `missing_required_parameter`, `unsupported_parameter`, `unsupported_value` or "
    "`invalid_value`.",
    "401": "No API key (`error.code` `missing_api_key`), or a wrong, revoked or disabled one (`invalid_api_key`).",
    "403": "The key lacks the scope this needs (`error.code` `insufficient_scope`; the message names the scope).",
}
_RETRY_AFTER = {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait before retrying."}}


def _component_part(name: str) -> str:
    for suffix in ("Serializer", "Api"):
        if name.endswith(suffix) and name != suffix:
            name = name[: -len(suffix)]
    return name


class KbAutoSchema(AutoSchema):
    def get_serializer_name(self, serializer: Any, direction: str) -> str:
        cls = serializer if isinstance(serializer, type) else type(serializer)
        parts = cls.__qualname__.split(".")
        if len(parts) == 1 or "<locals>" in parts:
            return super().get_serializer_name(serializer, direction)
        return "".join(_component_part(part) for part in parts)

    def get_description(self) -> str:
        """The handler's docstring, else the view class's own: never one inherited from a base class
        (`TenantApi`'s note on permissions was every undocumented operation's description)."""
        handler = getattr(self.view, getattr(self.view, "action", None) or self.method.lower(), None)
        own = self.view.__class__.__dict__.get("__doc__")
        return get_doc(handler) or (inspect.cleandoc(own) if own else "")

    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict:
        result = super()._map_basic_serializer(serializer, direction)
        strict = isinstance(serializer, StrictInputSerializer) or (
            isinstance(serializer, type) and issubclass(serializer, StrictInputSerializer)
        )
        if strict and direction == "request":
            result["additionalProperties"] = False
        return result


def error_responses_add(result: dict, generator: Any, request: Any, public: bool) -> dict:
    """drf-spectacular postprocessing hook: add the shared error responses to every operation."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas[ERROR_COMPONENT] = ERROR_SCHEMA
    platform_reference = {"$ref": f"#/components/schemas/{ERROR_COMPONENT}"}
    openai_reference = {"$ref": f"#/components/schemas/{OPENAI_ERROR_COMPONENT}"}
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            reference = platform_reference
            responses = operation["responses"]
            if operation.get(ERROR_SHAPE_EXTENSION) == "openai":
                schemas[OPENAI_ERROR_COMPONENT] = OPENAI_ERROR_SCHEMA
                reference = openai_reference
                for code, description in _OPENAI_DESCRIPTIONS.items():
                    responses[code] = {"description": description}
            secured = any(requirement for requirement in operation.get("security", [{}]))
            if path == "/api/health/":
                # Health answers 503 with its own report when the database is down.
                responses.setdefault("503", {**responses.get("200", {}), "description": "The database is down."})
                continue
            if path == "/api/schema/":
                continue
            codes = ["400", "503"]
            if secured:
                codes += ["401", "403", "429"]
            if "{" in path or "requestBody" in operation:  # a body may name an object too
                codes.append("404")
            if "requestBody" in operation:
                codes += ["409", "413", "415"]
            elif method in ("post", "put", "patch", "delete"):
                codes.append("409")
            for code in codes:
                if code in responses and "content" in responses[code]:
                    continue
                # An error an operation declares itself (`OpenApiResponse(description=...)`: what its refusal means
                # there) keeps its description and gets the shared body.
                description = responses.get(code, {}).get("description") or _DESCRIPTIONS[code]
                response = {"description": description, "content": {"application/json": {"schema": reference}}}
                if code in ("429", "503"):
                    response["headers"] = _RETRY_AFTER
                responses[code] = response
            for code, response in responses.items():
                # An error only some operations give (410 expired, 502/504 upstream) declared without a body.
                if code[:1] in ("4", "5") and "content" not in response:
                    response["content"] = {"application/json": {"schema": reference}}
    return result
