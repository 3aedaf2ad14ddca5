"""The API's one error shape: `{"message": str, "extra": {...}}`.

Turns `ApplicationError` and every DRF/Django exception a request can trigger into that shape, with a status
that says whose fault it was. Nothing a client can send ends in an unshaped 500.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation, TooManyFieldsSent, TooManyFilesSent
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import InterfaceError, OperationalError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler

from kbplatform.errors import ApplicationError
from kbplatform.refusals import REFUSAL_STATUSES, refusal_log

logger = logging.getLogger("kbplatform.api")

_DEFAULT_MESSAGES = {
    400: "The request is not valid.",
    401: "Authentication failed.",
    403: "You are not allowed to do this.",
    404: "Not found.",
    405: "Method not allowed.",
    406: "Not acceptable.",
    413: "The request body is too large.",
    415: "Unsupported media type.",
    429: "Too many requests.",
}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = _error_response(exc, context)
    if response is not None and response.status_code in REFUSAL_STATUSES:
        refusal_log(request=context.get("request"), status_code=response.status_code, message=response.data["message"])
    return response


def _suspicious_message(exc: SuspiciousOperation) -> str:
    if isinstance(exc, TooManyFieldsSent):
        return (
            f"The request has more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields "
            "(query parameters and form fields)."
        )
    if isinstance(exc, TooManyFilesSent):
        return f"The request has more than {settings.DATA_UPLOAD_MAX_NUMBER_FILES} files; send one file per document."
    return "The request is not valid."


def _error_response(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        headers = {"Retry-After": "5"} if exc.status_code == 503 else None
        return Response({"message": exc.message, "extra": exc.extra}, status=exc.status_code, headers=headers)
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(as_serializer_error(exc))
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):
        return Response(
            {"message": "The request body is too large.", "extra": {}}, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
        )
    elif isinstance(exc, SuspiciousOperation):
        # What Django answers 400 outside DRF (and logs as a security event); reading the query string or body of a
        # request with more fields or files than Django reads raises these inside the view.
        logging.getLogger(f"django.security.{exc.__class__.__name__}").error(str(exc))
        return Response({"message": _suspicious_message(exc), "extra": {}}, status=status.HTTP_400_BAD_REQUEST)
    elif isinstance(exc, UnicodeDecodeError):
        return Response({"message": "The request body is not valid UTF-8.", "extra": {}}, status=400)
    elif isinstance(exc, (OperationalError, InterfaceError)):
        # The database dropped the connection or is unreachable: the request's transaction did not commit, so
        # nothing was half-written; the client may retry. Django discards the broken connection at request end.
        logger.warning("database unavailable during %s: %s", getattr(context.get("request"), "path", "?"), exc)
        return Response(
            {"message": "The database is unavailable; nothing was saved. Retry shortly.", "extra": {}},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": "5"},
        )

    response = exception_handler(exc, context)
    if response is None:
        return None

    if isinstance(exc, exceptions.NotAuthenticated):
        response.data = {"message": 'Missing API key: send the header "Authorization: Api-Key <key>".', "extra": {}}
        return response
    if isinstance(exc, exceptions.ValidationError):
        message = "Validation error: check the fields listed in extra."
        response.data = {"message": message, "extra": {"fields": response.data}}
        return response

    detail = response.data.get("detail") if isinstance(response.data, dict) else None
    message = str(detail) if detail else _DEFAULT_MESSAGES.get(response.status_code, "Request failed.")
    extra: dict[str, Any] = {}
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        extra["retry_after_seconds"] = int(exc.wait + 0.999)
    response.data = {"message": message, "extra": extra}
    return response
