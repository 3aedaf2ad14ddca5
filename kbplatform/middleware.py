"""Keep `/api/` answers JSON even outside DRF views (unknown paths, bodies Django refuses, crashes), refuse requests
Django cannot even build, and log the admin's refused pages as the API's refusals are logged."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.http import parse_header_parameters

from kbplatform.parsers import charset_is_bytes_codec
from kbplatform.refusals import ADMIN_PREFIX, refusal_log

logger = logging.getLogger("kbplatform.api")


class BytesCodecCharsetRefusal:
    """WSGI wrapper: a request whose Content-Type charset is a bytes-to-bytes codec (`rot13`, `base64`...) is a 415
    before Django sees it. Django decodes the query string with the declared charset while it builds the request,
    outside every middleware and view, so such a request with a query string raised LookupError out of the WSGI
    handler: a bare 500 from the server, whatever the path."""

    def __init__(self, application: Callable[..., Iterable[bytes]]):
        self.application = application

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        _, params = parse_header_parameters(environ.get("CONTENT_TYPE", ""))
        charset = params.get("charset", "")
        if not charset_is_bytes_codec(charset):
            return self.application(environ, start_response)
        message = f'The charset "{charset}" is not a text encoding; send the request in UTF-8.'
        body = json.dumps({"message": message, "extra": {}}).encode()
        start_response(
            "415 Unsupported Media Type", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        return [body]


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
            return JsonResponse({"message": "Not found.", "extra": {"path": request.path}}, status=404)
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
