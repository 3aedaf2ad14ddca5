"""Rebuilding Milvus from the database (`manage.py milvus_rebuild`, the recovery drill in docs/operations.md): the
chunk rows and the turns' question vectors are the truth, Milvus a copy that can be written again from them.

Nothing here writes to Milvus itself. A knowledge base's vectors are rewritten by its re-index
(`retrieval.services.reindex`: the embedding cache, so nothing already embedded is encoded again; upserts by chunk
id into the collections its `text_index` names; the lease, so a worker's re-index and this one never both run), run
here instead of queued; a tenant's questions by the question index's backfill (`Turn.question_vector`, never
re-embedded). Online: each knowledge base is searched again as soon as its first batch is written, and until then
its searches and turns answer 503 (`retrieval.selectors.vectors_lost_check`), writing nothing.

It crosses tenants by design, as the platform's other housekeeping does; it lives above conversations because it
rebuilds the collections of both apps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from conversations.services import question_index_backfill
from kbplatform.errors import ApplicationError, ConflictError
from retrieval import question_index, vectorstore
from retrieval.embeddings import embedding_dimension
from retrieval.embeddings import model_id as embedding_model_id
from retrieval.models import Chunk, DocumentStatus, KnowledgeBase, ReindexStatus
from retrieval.services import knowledge_base_reindex, knowledge_base_reindex_start
from tenants.models import Tenant


@dataclass(frozen=True)
class RebuildScope:
    """What a rebuild writes again: the tenants' (all, or one) knowledge bases (all, or one) and question
    collections."""

    tenants: list[Tenant]
    knowledge_bases: list[KnowledgeBase]
    questions: bool


def rebuild_scope_get(
    *, tenant_slug: str | None = None, knowledge_base_id: int | None = None, questions_only: bool = False
) -> RebuildScope:
    """Every tenant's knowledge bases and questions; or one tenant's (`tenant_slug`); or one knowledge base (its
    chunks only: questions are indexed per tenant); or, with `questions_only`, the questions alone. An unknown
    tenant or knowledge base is an ApplicationError."""
    tenants = Tenant.objects.order_by("pk")
    if tenant_slug:
        tenants = tenants.filter(slug=tenant_slug)
        if not tenants.exists():
            raise ApplicationError(f"No tenant with slug {tenant_slug!r}.")
    tenants = list(tenants)
    knowledge_bases: list[KnowledgeBase] = []
    if not questions_only:
        for tenant in tenants:
            queryset = KnowledgeBase.objects.for_tenant(tenant).order_by("pk")
            if knowledge_base_id is not None:
                queryset = queryset.filter(pk=knowledge_base_id)
            knowledge_bases += list(queryset)
        if knowledge_base_id is not None and not knowledge_bases:
            raise ApplicationError(f"No knowledge base {knowledge_base_id}.")
    return RebuildScope(
        tenants=tenants,
        knowledge_bases=knowledge_bases,
        questions=questions_only or knowledge_base_id is None,
    )


def knowledge_base_rebuild_size(*, knowledge_base: KnowledgeBase) -> int:
    """The chunks a rebuild of the knowledge base writes (those of its indexed documents, as its re-index does)."""
    return (
        Chunk.objects.for_tenant(knowledge_base.tenant)
        .filter(knowledge_base=knowledge_base, document__status=DocumentStatus.INDEXED)
        .count()
    )


def knowledge_base_vectors_rebuild(
    *, knowledge_base: KnowledgeBase, progress: Callable[[int, int], None] | None = None
) -> int:
    """Write the knowledge base's vectors again from its chunk rows, by running its re-index here; returns the chunks
    written. A re-index already marked running is taken over when no live run holds it (a queued task, or one handed
    back after an outage: the task then finds it done). One a worker is running now is left to it: a ConflictError
    says so. Milvus down: TransientIngestError, and running it again goes on from the vectors cached so far."""
    tenant = knowledge_base.tenant
    try:
        knowledge_base_reindex_start(tenant=tenant, knowledge_base=knowledge_base, queue=False)
    except ConflictError:
        pass  # marked running already: the claim below takes it unless a live run holds it
    written = knowledge_base_reindex(tenant_id=tenant.pk, knowledge_base_id=knowledge_base.pk, progress=progress)
    status = (
        KnowledgeBase.objects.for_tenant(tenant)
        .filter(pk=knowledge_base.pk)
        .values_list("reindex_status", flat=True)
        .first()
    )
    if status == ReindexStatus.RUNNING:
        raise ConflictError(
            f"Knowledge base {knowledge_base.pk} is being re-indexed by a worker, which writes its vectors itself; "
            "run the rebuild of it again once that has finished if its searches still answer 503."
        )
    return written


def questions_rebuild(*, tenant: Tenant, progress: Callable[[int], None] | None = None) -> int:
    """Index the tenant's questions again (those tenant-scope dedup may compare with: within its policy's TTL, of the
    model in use) from the turns' stored vectors; returns how many. Nothing for a tenant not in tenant scope: its
    duplicate check reads the database and Redis, not Milvus."""
    return question_index_backfill(tenant_id=tenant.pk, progress=progress)


def question_collection_needs_rekey() -> bool:
    """Whether the question collection of the embedding model in use exists but was made before each question stored
    the key of its metadata filter (`question_index.QUESTION_FILTER_FIELD`): its search then cannot narrow by filter,
    and the duplicate check keeps fewer candidates than it could (never another filter's)."""
    model = embedding_model_id()
    name = question_index.question_collection_name(model=model)
    if name not in question_index.question_collection_names():
        return False
    question_index.question_collection_ensure(model=model, dimension=embedding_dimension())
    return not question_index.question_collection_keyed(name)


def question_collection_rekey() -> str | None:
    """Drop that collection (`question_collection_needs_rekey`), so the backfill that follows writes it again with the
    key; returns its name, or None when it needs nothing. Until the backfill has run, tenant-scope turns find no
    stored question (each is answered afresh); nothing is lost, the turns hold the vectors. Only before a rebuild of
    every tenant's questions: the collection holds them all."""
    if not question_collection_needs_rekey():
        return None
    return question_index.question_collection_drop(model=embedding_model_id())


def rebuild_flush() -> list[str]:
    """Flush every collection of the deployment, so the rebuilt rows are searched through their index."""
    return vectorstore.collections_flush()
