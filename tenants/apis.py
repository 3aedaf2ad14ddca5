"""Tenant endpoints: who am I, and API key management.

Key management needs the `admin` scope, and a key that reaches the whole tenant: a key limited to one knowledge base
could otherwise mint itself an unlimited key. The whole key is in the create response and nowhere else, ever; lists
and details show the prefix only. Another tenant's key id is a 404.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from kbplatform.errors import NotFoundError
from kbplatform.serializers import StrictInputSerializer
from retrieval.selectors import knowledge_base_get
from tenants.api import TenantApi
from tenants.models import ApiKey
from tenants.permissions import IsTenantWideKey
from tenants.scopes import ANY_SCOPE, Scope, scopes_sorted
from tenants.selectors import api_key_get, api_key_list
from tenants.services import api_key_create, api_key_revoke, api_key_scopes_set

_SCOPES_HELP = (
    "What the key may do: chat (conversations, messages, feedback, search, reading knowledge bases), ingest "
    "(documents and chunks; reading knowledge bases), admin (everything: keys, policy, knowledge bases, the audit "
    "log's policy fields)."
)


class ScopesField(serializers.ListField):
    child = serializers.ChoiceField(choices=Scope.choices)

    def to_representation(self, data: object) -> list[str]:
        return scopes_sorted(data)


class WhoAmIApi(TenantApi):
    """Any key may ask who it is, whatever its scopes."""

    required_scope = ANY_SCOPE

    class OutputSerializer(serializers.Serializer):
        tenant = serializers.CharField(help_text="The tenant's slug.")
        tenant_name = serializers.CharField()
        key_prefix = serializers.CharField()
        key_name = serializers.CharField()
        key_scopes = ScopesField(help_text=_SCOPES_HELP)
        knowledge_base = serializers.IntegerField(allow_null=True)

    @extend_schema(responses=OutputSerializer, summary="The tenant and key behind this request")
    def get(self, request: Request) -> Response:
        key = self.api_key
        data = {
            "tenant": self.tenant.slug,
            "tenant_name": self.tenant.name,
            "key_prefix": key.prefix,
            "key_name": key.name,
            "key_scopes": key.scopes,
            "knowledge_base": key.knowledge_base_id,
        }
        return Response(self.OutputSerializer(data).data)


class IsTenantWideKeyForKeys(IsTenantWideKey):
    message = "This API key is limited to one knowledge base and cannot manage API keys."


class ApiKeyOutputSerializer(serializers.ModelSerializer):
    is_active = serializers.BooleanField(read_only=True)
    scopes = ScopesField(read_only=True, help_text=_SCOPES_HELP)

    class Meta:
        model = ApiKey
        fields = (
            "id",
            "name",
            "prefix",
            "scopes",
            "knowledge_base",
            "is_active",
            "created_at",
            "last_used_at",
            "revoked_at",
        )


class _ApiKeyAdminApi(TenantApi):
    required_scope = Scope.ADMIN
    extra_permission_classes = [IsTenantWideKeyForKeys]

    def api_key_or_404(self, api_key_id: int) -> ApiKey:
        api_key = api_key_get(tenant=self.tenant, api_key_id=api_key_id)
        if api_key is None:
            raise NotFoundError("API key not found.")
        return api_key


class ApiKeyListApi(_ApiKeyAdminApi):
    @extend_schema(responses=ApiKeyOutputSerializer(many=True), summary="List the tenant's API keys (admin key)")
    def get(self, request: Request) -> Response:
        return Response(ApiKeyOutputSerializer(api_key_list(tenant=self.tenant), many=True).data)


class ApiKeyCreateApi(_ApiKeyAdminApi):
    class InputSerializer(StrictInputSerializer):
        name = serializers.CharField(max_length=100)
        scopes = serializers.ListField(
            child=serializers.ChoiceField(choices=Scope.choices),
            required=False,
            allow_empty=True,
            max_length=len(Scope.values),
            help_text=f'{_SCOPES_HELP} Combine them freely. None named (left out, or []) makes a key of ["chat"] '
            "alone, the least a key can do.",
        )
        knowledge_base = serializers.IntegerField(
            required=False, allow_null=True, min_value=1, help_text="Limit the key to this knowledge base."
        )

    class OutputSerializer(ApiKeyOutputSerializer):
        key = serializers.CharField(read_only=True, help_text="The whole key. Shown only in this response.")

        class Meta(ApiKeyOutputSerializer.Meta):
            fields = (*ApiKeyOutputSerializer.Meta.fields, "key")

    @extend_schema(request=InputSerializer, responses={201: OutputSerializer}, summary="Create an API key")
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        knowledge_base = None
        knowledge_base_id = serializer.validated_data.get("knowledge_base")
        if knowledge_base_id is not None:
            knowledge_base = knowledge_base_get(tenant=self.tenant, knowledge_base_id=knowledge_base_id)
            if knowledge_base is None:
                # The same answer for another tenant's knowledge base as for a missing one.
                raise serializers.ValidationError({"knowledge_base": ["No knowledge base with this id."]})
        api_key, raw_key = api_key_create(
            tenant=self.tenant,
            name=serializer.validated_data["name"],
            scopes=serializer.validated_data.get("scopes"),
            knowledge_base=knowledge_base,
        )
        api_key.key = raw_key
        return Response(self.OutputSerializer(api_key).data, status=status.HTTP_201_CREATED)


class ApiKeyCollectionApi(ApiKeyListApi, ApiKeyCreateApi):
    """The tenant's API keys (admin keys only): GET lists them, POST creates one and shows its secret once."""


class ApiKeyDetailApi(_ApiKeyAdminApi):
    """GET one of the tenant's keys; PATCH its scopes (from the key's next request on)."""

    class InputSerializer(StrictInputSerializer):
        scopes = serializers.ListField(
            child=serializers.ChoiceField(choices=Scope.choices),
            allow_empty=True,
            max_length=len(Scope.values),
            help_text=f"{_SCOPES_HELP} Exactly these, replacing what the key held; [] makes it chat alone. The "
            "tenant's last active key with admin keeps admin (409).",
        )

    @extend_schema(responses=ApiKeyOutputSerializer, summary="One API key (admin key)")
    def get(self, request: Request, api_key_id: int) -> Response:
        return Response(ApiKeyOutputSerializer(self.api_key_or_404(api_key_id)).data)

    @extend_schema(
        request=InputSerializer,
        responses=ApiKeyOutputSerializer,
        summary="Change an API key's scopes (admin key; a revoked key, or admin taken from the last admin key, is 409)",
    )
    def patch(self, request: Request, api_key_id: int) -> Response:
        api_key = self.api_key_or_404(api_key_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        api_key = api_key_scopes_set(
            tenant=self.tenant, api_key=api_key, scopes=serializer.validated_data["scopes"], keep_one_admin=True
        )
        return Response(ApiKeyOutputSerializer(api_key).data)


class ApiKeyRevokeApi(_ApiKeyAdminApi):
    @extend_schema(
        request=None,
        responses=ApiKeyOutputSerializer,
        summary="Revoke an API key (idempotent; the tenant's last active admin key cannot be revoked)",
    )
    def post(self, request: Request, api_key_id: int) -> Response:
        api_key = api_key_revoke(tenant=self.tenant, api_key=self.api_key_or_404(api_key_id), keep_one_admin=True)
        return Response(ApiKeyOutputSerializer(api_key).data)
