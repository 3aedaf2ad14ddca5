from __future__ import annotations

import pytest
from django.test import override_settings

from conversations.services import dedup_policy_update
from retrieval.models import Document, DocumentStatus, KnowledgeBase
from retrieval.services import document_create, documents_index, knowledge_base_create
from tests.faults.processes import RedisServer
from tests.services import wait_for

# Eight short documents on distinct topics: enough that a turn's exclusions never empty the search.
HANDBOOK = {
    "password": "To reset your password, open Settings, choose Security and click Reset password. "
    "A reset link is emailed to you and stays valid for 30 minutes.",
    "pricing": "The Team plan costs 12 dollars per user per month, billed yearly. "
    "The Enterprise plan is priced per contract and includes single sign-on.",
    "admins": "Administrators can invite users, change roles and see the audit log. "
    "Only administrators may delete a workspace.",
    "api-keys": "API keys are created under Settings, Developer. Each key can be limited to one project "
    "and revoked at any time; revoked keys stop working immediately.",
    "sso": "Single sign-on supports SAML 2.0 and OpenID Connect. Enable it in the admin console under Authentication.",
    "export": "Reports can be exported as PDF or CSV from the Reports page. "
    "Scheduled exports are emailed every Monday morning.",
    "retention": "Deleted files are kept in the trash for 30 days before they are removed permanently. "
    "Administrators can restore files from the trash.",
    "mobile": "The mobile app runs on iOS and Android and works offline. "
    "Changes made offline are synchronised when the device reconnects.",
}


def handbook_index(tenant, name: str = "handbook") -> KnowledgeBase:
    """A knowledge base indexed through the real pipeline (parse, chunk, embed, Milvus)."""
    knowledge_base = knowledge_base_create(tenant=tenant, name=name)
    ids = [
        document_create(tenant=tenant, knowledge_base=knowledge_base, title=key, external_id=key, text=text).pk
        for key, text in HANDBOOK.items()
    ]
    documents_index(tenant_id=tenant.pk, document_ids=ids)
    # Under a transactional test a running worker may have claimed some of them first: wait for its runs.
    wait_for(
        lambda: (
            set(Document.objects.for_tenant(tenant).filter(pk__in=ids).values_list("status", flat=True))
            == {DocumentStatus.INDEXED}
        ),
        timeout=90,
        what="the handbook to be indexed",
    )
    # Never relax exclusions: every shown document must stay excluded, so a lost consumed item would show.
    dedup_policy_update(tenant=tenant, min_results=0)
    return knowledge_base


@pytest.fixture
def own_redis(settings):
    """This test's own Redis, as cache, hot state and rate-limit store (the broker stays on the shared one)."""
    from tenants import throttling

    server = RedisServer()
    server.start()
    caches = {"default": {**settings.CACHES["default"], "LOCATION": server.url}}
    throttling._redis_down_until = 0.0
    with override_settings(REDIS_URL=server.url, CACHES=caches):
        yield server
    throttling._redis_down_until = 0.0
    server.close()
