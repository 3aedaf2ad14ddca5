"""Creating a knowledge base (deleting one reaches conversations: `lifecycle.services`)."""

from __future__ import annotations

import logging

from django.db import IntegrityError, transaction

from kbplatform.errors import ApplicationError, ConflictError
from retrieval import embeddings
from retrieval.models import KnowledgeBase
from retrieval.selectors import retrieval_mode_resolve
from tenants.models import Tenant

logger = logging.getLogger(__name__)

# --- knowledge bases --------------------------------------------------------------------------------------


def knowledge_base_create(
    *,
    tenant: Tenant,
    name: str,
    description: str = "",
    chunk_max_tokens: int | None = None,
    chunk_overlap_tokens: int | None = None,
    retrieval_mode: str | None = None,
    hybrid_dense_weight: float | None = None,
    text_analyzer: str | None = None,
    embedding_model: str | None = None,
) -> KnowledgeBase:
    """A new knowledge base: its chunks carry their text in Milvus from the first (`text_index` READY), so every
    retrieval mode is open to it; `text_analyzer` is changed from here on only by a re-index (its chunks' terms are made
    by it: `knowledge_base_reindex_start`).
    `embedding_model` is one the deployment offers (`embedding_model_checked`; None: its default); changing it later
    is a re-index (`knowledge_base_reindex_start`)."""
    model = embedding_model_checked(embedding_model)
    if KnowledgeBase.objects.for_tenant(tenant).filter(name=name).exists():
        raise ConflictError(f"A knowledge base named {name!r} already exists.", extra={"name": name})
    fields: dict = {
        "tenant": tenant,
        "name": name,
        "description": description,
        "embedding_model": model,
        "embedding_dimension": embeddings.embedding_dimension(model),
    }
    if chunk_max_tokens is not None:
        fields["chunk_max_tokens"] = chunk_max_tokens
    if chunk_overlap_tokens is not None:
        fields["chunk_overlap_tokens"] = chunk_overlap_tokens
    for name_, value in (
        ("retrieval_mode", retrieval_mode),
        ("hybrid_dense_weight", hybrid_dense_weight),
        ("text_analyzer", text_analyzer),
    ):
        if value is not None:
            fields[name_] = value
    knowledge_base = KnowledgeBase(**fields)
    knowledge_base.full_clean()
    try:
        with transaction.atomic():
            knowledge_base.save()
    except IntegrityError as exc:
        # A concurrent create of the same name lost the race; any other integrity error is not the person's doing
        # and must not be reported as a name taken.
        if not KnowledgeBase.objects.for_tenant(tenant).filter(name=name).exists():
            raise
        raise ConflictError(f"A knowledge base named {name!r} already exists.", extra={"name": name}) from exc
    return knowledge_base


_UNSET = object()


def embedding_model_checked(name: str | None) -> str:
    """The offered embedding model `name` names (None or "": the deployment's default), or a 400 that lists the
    offered ones."""
    if not name:
        return embeddings.default_model()
    if name not in embeddings.offered_models():
        offered = ", ".join(embeddings.offered_models())
        message = f"{name!r} is not an embedding model this deployment offers; choose one of: {offered}."
        extra = {"fields": {"embedding_model": [message]}, "offered": list(embeddings.offered_models())}
        raise ApplicationError(message, extra=extra)
    return name


def knowledge_base_retrieval_set(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    retrieval_mode: str | None = None,
    hybrid_dense_weight: float | None | object = _UNSET,
) -> KnowledgeBase:
    """Change how the knowledge base's searches and turns rank its chunks. A mode that needs the chunks' text, on a
    knowledge base whose text is not in Milvus yet, is refused (FullTextUnavailableError, 409) and nothing changes.
    `hybrid_dense_weight`: None for rank fusion, a number in [0, 1] for weighted scores; kept when not given."""
    if knowledge_base.tenant_id != tenant.pk:
        raise ValueError("knowledge base of another tenant")
    fields = []
    if retrieval_mode is not None:
        retrieval_mode_resolve(knowledge_base=knowledge_base, requested=retrieval_mode)
        knowledge_base.retrieval_mode = retrieval_mode
        fields.append("retrieval_mode")
    if hybrid_dense_weight is not _UNSET:
        knowledge_base.hybrid_dense_weight = hybrid_dense_weight
        fields.append("hybrid_dense_weight")
    if fields:
        knowledge_base.full_clean()
        knowledge_base.save(update_fields=[*fields, "updated_at"])
    return knowledge_base
