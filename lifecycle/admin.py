"""The admin's deletions of tenants and knowledge bases, which reach every app (`lifecycle.services`)."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from kbplatform.errors import ApplicationError
from lifecycle.services import knowledge_base_delete, tenant_delete
from retrieval.admin import KnowledgeBaseAdminBase
from retrieval.models import Chunk, Document, KnowledgeBase
from tenants.admin_scoping import ServiceDeletionAdmin, request_tenant_ids
from tenants.models import Tenant


@admin.register(Tenant)
class TenantAdmin(ServiceDeletionAdmin):
    list_display = ("slug", "name", "is_active", "created_at")
    search_fields = ("slug", "name")
    tenant_field = "pk"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tenant]:
        queryset = Tenant.objects.all()
        if request.user.is_superuser:
            return queryset
        return queryset.filter(pk__in=request_tenant_ids(request, self.view_roles))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Tenant | None = None) -> bool:
        return request.user.is_superuser

    def deletion_summary(self, obj: Tenant) -> tuple[str, dict[str, int]]:
        counts = {
            "knowledge bases": KnowledgeBase.objects.for_tenant(obj).count(),
            "documents": Document.objects.for_tenant(obj).count(),
            "chunks": Chunk.objects.for_tenant(obj).count(),
        }
        text = (
            f"{obj}: {counts['knowledge bases']} knowledge bases with {counts['documents']} documents and "
            f"{counts['chunks']} chunks, their vectors, files and conversations, and the tenant's keys, members, "
            "settings and audit log"
        )
        return text, counts

    def delete_one(self, request: HttpRequest, obj: Tenant) -> str | None:
        try:
            tenant_delete(tenant=obj)
        except ApplicationError as exc:
            return exc.message
        return None

    def get_readonly_fields(self, request: HttpRequest, obj: Tenant | None = None) -> tuple[str, ...]:
        return () if request.user.is_superuser else ("slug", "is_active")


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(KnowledgeBaseAdminBase):
    def deletion_summary(self, obj: KnowledgeBase) -> tuple[str, dict[str, int]]:
        counts = {
            "documents": obj.documents.count(),
            "chunks": obj.chunks.count(),
            "conversations": obj.conversations.count(),
        }
        text = (
            f"{obj} ({obj.tenant}): {counts['documents']} documents, {counts['chunks']} chunks and their vectors and "
            f"files, {counts['conversations']} conversations; their audit events stay"
        )
        return text, counts

    def delete_one(self, request: HttpRequest, obj: KnowledgeBase) -> str | None:
        try:
            knowledge_base_delete(tenant=obj.tenant, knowledge_base=obj)
        except ApplicationError as exc:
            return exc.message
        return None
