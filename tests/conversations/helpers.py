"""Index a small knowledge base directly (rows + embed_texts + vectors_upsert), as the ingestion pipeline would."""

from __future__ import annotations

import hashlib

from retrieval import milvus, question_index, vectorstore
from retrieval.embeddings import embed_texts, embedding_dimension, model_id, token_counts
from retrieval.models import DEFAULT_EMBEDDING_MODEL, Chunk, Document, DocumentStatus, KnowledgeBase, SourceKind
from retrieval.services import chunk_vectors_upsert
from tenants.models import Tenant

HANDBOOK = {
    "password": [
        "To reset your password, open Settings, choose Security and click Reset password. "
        "A reset link is emailed to you and stays valid for 30 minutes."
    ],
    "pricing": [
        "The Team plan costs 12 dollars per user per month, billed yearly. "
        "The Enterprise plan is priced per contract and includes single sign-on."
    ],
    "admins": [
        "Administrators can invite users, change roles and see the audit log. "
        "Only administrators may delete a workspace."
    ],
    "api-keys": [
        "API keys are created under Settings, Developer. Each key can be limited to one project "
        "and revoked at any time; revoked keys stop working immediately."
    ],
    "sso": [
        "Single sign-on supports SAML 2.0 and OpenID Connect. Enable it in the admin console under Authentication."
    ],
    "export": [
        "Reports can be exported as PDF or CSV from the Reports page. "
        "Scheduled exports are emailed every Monday morning."
    ],
    "retention": [
        "Deleted files are kept in the trash for 30 days before they are removed permanently. "
        "Administrators can restore files from the trash."
    ],
    "mobile": [
        "The mobile app runs on iOS and Android and works offline. "
        "Changes made offline are synchronised when the device reconnects."
    ],
}


# A tiny Chinese help centre: what a knowledge base of Chinese questions answers from (tests, benchmarks).
HELP_CENTRE_ZH = {
    "password": ["重置密码：打开设置，选择安全，点击重置密码。重置链接会发送到您的邮箱，三十分钟内有效。"],
    "refund": ["申请退款：在订单页面点击申请退款，填写原因后提交。退款审核通过后三到五个工作日到账。"],
    "invoice": ["发票在订单完成后七天内开具，电子发票会发送到您的邮箱。"],
    "delivery": ["订单付款后四十八小时内发货，偏远地区可能需要更长时间。"],
}


def chunk_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def indexed_kb(
    tenant: Tenant,
    documents: dict[str, list[str]] | None = None,
    name: str = "handbook",
    metadata: dict[str, dict] | None = None,
    **fields: object,
) -> KnowledgeBase:
    """A knowledge base holding `documents` (external id -> chunk texts), indexed; `metadata`: external id -> that
    document's metadata; `fields` are its own settings."""
    documents = documents if documents is not None else HANDBOOK
    model = str(fields.get("embedding_model") or DEFAULT_EMBEDDING_MODEL)
    fields.setdefault("embedding_dimension", embedding_dimension(model))
    knowledge_base = KnowledgeBase.objects.create(tenant=tenant, name=name, **fields)
    chunks = []
    for external_id, texts in documents.items():
        document = Document.objects.create(
            tenant=tenant,
            knowledge_base=knowledge_base,
            title=external_id,
            external_id=external_id,
            source_kind=SourceKind.CHUNKS,
            status=DocumentStatus.INDEXED,
            chunk_count=len(texts),
            metadata=(metadata or {}).get(external_id, {}),
        )
        counts = token_counts(texts, model)
        for position, (text, count) in enumerate(zip(texts, counts, strict=True)):
            chunks.append(
                Chunk.objects.create(
                    tenant=tenant,
                    document=document,
                    knowledge_base=knowledge_base,
                    position=position,
                    text=text,
                    token_count=count,
                    content_hash=chunk_hash(text),
                    external_id=f"{external_id}#{position}",
                )
            )
    # SQLite hands out the ids of rolled-back rows again: clear what an earlier test left under this tenant and
    # knowledge base id in the session's collection.
    vectorstore.vectors_delete(
        tenant_id=tenant.pk, knowledge_base_id=knowledge_base.pk, dimension=knowledge_base.embedding_dimension
    )
    vectors = embed_texts([c.text for c in chunks], model=model)
    chunk_vectors_upsert(chunks=chunks, vectors=vectors, dimension=knowledge_base.embedding_dimension)
    return knowledge_base


def indexed_question_turn_ids(tenant: Tenant, kb: KnowledgeBase) -> set[int]:
    """The turn ids whose question vectors the tenant-scope question index holds for `kb` (model in use)."""
    client = milvus.connect()
    rows = client.query(
        collection_name=question_index.question_collection_ensure(
            model=model_id(kb.embedding_model), dimension=kb.embedding_dimension
        ),
        filter=question_index.question_filter_build(tenant_id=tenant.pk, knowledge_base_id=kb.pk),
        output_fields=["turn_id"],
    )
    return {row["turn_id"] for row in rows}
