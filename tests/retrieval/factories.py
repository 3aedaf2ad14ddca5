from __future__ import annotations

from rest_framework.test import APIClient

from retrieval.models import KnowledgeBase
from retrieval.services import knowledge_base_create
from tenants.models import Tenant
from tenants.scopes import SCOPE_ORDER
from tenants.services import api_key_create


def kb_make(tenant: Tenant, name: str = "docs", **fields) -> KnowledgeBase:  # noqa: ANN003
    return knowledge_base_create(tenant=tenant, name=name, **fields)


def kb_limited_client(tenant: Tenant, knowledge_base: KnowledgeBase) -> APIClient:
    """A client with an admin key that reaches only `knowledge_base` (admin, so only the KB limit can refuse)."""
    _, raw_key = api_key_create(tenant=tenant, name="kb-limited", scopes=SCOPE_ORDER, knowledge_base=knowledge_base)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
    return client
