from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from kbplatform.health import health_report


class HealthApi(APIView):
    """Public: reports which part is down, never data. 200 when usable (ok or degraded), 503 when down."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        summary="Reachability of database, Redis, Milvus and workers; the embedding model in use",
        responses=inline_serializer(
            "Health",
            {"status": serializers.ChoiceField(["ok", "degraded", "down"]), "components": serializers.DictField()},
        ),
    )
    def get(self, request: Request) -> Response:
        report = health_report()
        return Response(report, status=503 if report["status"] == "down" else 200)
