"""Errors services raise for anything a client or an outside dependency causes.

`kbplatform.exception_handler` turns them into the API's one error shape, `{"message": str, "extra": {...}}`.
"""

from __future__ import annotations

from typing import Any

from rest_framework import status


class ApplicationError(Exception):
    """An error with a message meant for the API client."""

    status_code = status.HTTP_400_BAD_REQUEST

    def __init__(self, message: str, *, extra: dict[str, Any] | None = None, status_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.extra = extra or {}
        if status_code is not None:
            self.status_code = status_code


class NotFoundError(ApplicationError):
    status_code = status.HTTP_404_NOT_FOUND


class ConflictError(ApplicationError):
    status_code = status.HTTP_409_CONFLICT


class ServiceUnavailableError(ApplicationError):
    """A dependency (Milvus, the database, the LLM) is down: the client may retry later."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE


class UpstreamError(ApplicationError):
    status_code = status.HTTP_502_BAD_GATEWAY


class UpstreamTimeoutError(ApplicationError):
    status_code = status.HTTP_504_GATEWAY_TIMEOUT
