"""The API's deletion of a knowledge base, which reaches every app (`lifecycle.services`)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from lifecycle.services import knowledge_base_delete
from retrieval.apis import KnowledgeBaseDetailApi
from tenants.permissions import IsTenantWideKeyForMethods
from tenants.scopes import Scope


class IsTenantWideKeyForDeletion(IsTenantWideKeyForMethods):
    methods = frozenset({"DELETE"})
    message = "This API key is limited to one knowledge base and cannot delete it."


class KnowledgeBaseDetailDeleteApi(KnowledgeBaseDetailApi):
    """GET one knowledge base the key reaches; DELETE it with everything held for it (the admin scope and a key of the
    whole tenant: a key limited to one knowledge base is deleted with it and cannot delete it)."""

    required_scope = {**KnowledgeBaseDetailApi.required_scope, "DELETE": Scope.ADMIN}
    extra_permission_classes = [*KnowledgeBaseDetailApi.extra_permission_classes, IsTenantWideKeyForDeletion]

    @extend_schema(
        request=None,
        responses={204: None},
        summary="Delete a knowledge base: its documents, chunks, vectors, files and conversations (audit events stay)",
    )
    def delete(self, request: Request, knowledge_base_id: int) -> Response:
        knowledge_base = self.knowledge_base_or_404(knowledge_base_id)
        knowledge_base_delete(tenant=self.tenant, knowledge_base=knowledge_base)
        return Response(status=status.HTTP_204_NO_CONTENT)
