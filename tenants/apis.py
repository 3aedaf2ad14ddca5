from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from tenants.api import TenantApi


class WhoAmIApi(TenantApi):
    class OutputSerializer(serializers.Serializer):
        tenant = serializers.CharField(help_text="The tenant's slug.")
        tenant_name = serializers.CharField()
        key_prefix = serializers.CharField()
        key_name = serializers.CharField()
        key_role = serializers.CharField()
        knowledge_base = serializers.IntegerField(allow_null=True)

    @extend_schema(responses=OutputSerializer, summary="The tenant and key behind this request")
    def get(self, request):  # noqa: ANN001, ANN201
        key = self.api_key
        data = {
            "tenant": self.tenant.slug,
            "tenant_name": self.tenant.name,
            "key_prefix": key.prefix,
            "key_name": key.name,
            "key_role": key.role,
            "knowledge_base": key.knowledge_base_id,
        }
        return Response(self.OutputSerializer(data).data)
