"""Keep `/api/` answers JSON even outside DRF views (unknown paths, bodies Django refuses, crashes), refuse requests
Django cannot even build, and log the admin's refused pages as the API's refusals are logged."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.common import CommonMiddleware
from django.utils.http import parse_header_parameters

from kbplatform.parsers import charset_is_bytes_codec
from kbplatform.refusals import ADMIN_PREFIX, refusal_log
from kbplatform.views import api_not_found

logger = logging.getLogger("kbplatform.api")


def bytes_codec_refusal(content_type: str) -> bytes | None:
    """The 415 body for a Content-Type whose charset is a bytes-to-bytes codec (`rot13`, `base64`...), else None.
    Django decodes the query string with the declared charset while it builds the request, outside every
    middleware and view, so such a request with a query string raised LookupError out of the server's handler: a
    bare 500, whatever the path. The WSGI and ASGI wrappers below answer it before Django sees it."""
    _, params = parse_header_parameters(content_type)
    charset = params.get("charset", "")
    if not charset_is_bytes_codec(charset):
        return None
    message = f'The charset "{charset}" is not a text encoding; send the request in UTF-8.'
    return json.dumps({"message": message, "extra": {}}).encode()


class BytesCodecCharsetRefusal:
    """WSGI wrapper: `bytes_codec_refusal` as a 415 before Django."""

    def __init__(self, application: Callable[..., Iterable[bytes]]):
        self.application = application

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        body = bytes_codec_refusal(environ.get("CONTENT_TYPE", ""))
        if body is None:
            return self.application(environ, start_response)
        start_response(
            "415 Unsupported Media Type", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        return [body]


class AsgiBytesCodecCharsetRefusal:
    """ASGI wrapper: `bytes_codec_refusal` as a 415 before Django."""

    def __init__(self, application: Callable[..., Any]):
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] == "http":
            content_type = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"content-type"), "")
            body = bytes_codec_refusal(content_type)
            if body is not None:
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 415, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.application(scope, receive, send)


class ApiCommonMiddleware(CommonMiddleware):
    """Django's CommonMiddleware, except that a write (POST, PUT, PATCH, DELETE) to an `/api/` path lacking its
    trailing slash is not redirected to it: APPEND_SLASH answered an empty 301, which clients follow as a GET (a 405
    that says nothing of the slash, the body lost), and with DEBUG on raised RuntimeError (a 500). It is a 404 whose
    message gives the path to use (`kbplatform.views.api_not_found`). Reads are still redirected: a GET loses
    nothing by following."""

    def should_redirect_with_slash(self, request: HttpRequest) -> bool:
        if request.path.startswith("/api/") and request.method not in ("GET", "HEAD"):
            return False
        return super().should_redirect_with_slash(request)


class ApiJsonErrorsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            request.path.startswith("/api/")
            and response.status_code == 404
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            return api_not_found(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not request.path.startswith("/api/"):
            return None
        if isinstance(exception, RequestDataTooBig):
            return JsonResponse({"message": "The request body is too large.", "extra": {}}, status=413)
        logger.exception("unhandled error on %s %s", request.method, request.path)
        return JsonResponse({"message": "Internal error; it has been logged.", "extra": {}}, status=500)


class AdminRefusalsMiddleware:
    """One `refusal` line for every admin page answered 403 (a role or tenant the user lacks, a failed CSRF check),
    naming the signed-in account: someone probing pages they may not see shows up where API refusals do."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code == 403 and request.path.startswith(ADMIN_PREFIX):
            reason = getattr(request, "_kb_refusal_reason", "") or "admin page refused"
            refusal_log(request=request, status_code=403, message=reason)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> None:
        if isinstance(exception, PermissionDenied) and request.path.startswith(ADMIN_PREFIX):
            request._kb_refusal_reason = f"admin page refused: {exception}" if str(exception) else ""
