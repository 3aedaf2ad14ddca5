"""Keep `/api/` answers JSON even outside DRF views: unknown paths, bodies Django refuses, crashes."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse

logger = logging.getLogger("kbplatform.api")


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
