"""Curated answers (`CuratedAnswer`, `CuratedPhrasing`): created, edited, disabled, deleted and imported in bulk. The
only writer of them.

Every write raises the tenant's settings version in its transaction (`tenants.services.tenant_settings_changed`),
which a process's copy of the set (`curated_set.curated_set_of`) is kept under: an edit, a disable or a delete takes
effect on the next turn in every process. Phrasings are embedded here, once, with the knowledge
base's own model, so a turn only compares vectors.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from django.db import IntegrityError, transaction
from django.db.models import F

from conversations.curated.curated_import import CuratedInput
from conversations.models import CuratedAnswer, CuratedPhrasing
from conversations.turn.curated_set import curated_sets_forget
from conversations.turn.state import vector_to_bytes
from kbplatform.errors import ApplicationError, ConflictError
from retrieval.embeddings import embed_texts, knowledge_base_model
from retrieval.embeddings import model_id as embedding_model_id
from retrieval.models import Chunk, KnowledgeBase
from tenants.models import Tenant
from tenants.services import tenant_settings_changed


def _citations_of(
    *, tenant: Tenant, knowledge_base: KnowledgeBase, chunk_ids: Collection[int]
) -> dict[int, dict[str, object]]:
    """chunk id -> what a citation keeps of it (its content hash now, its document), for the enabled chunks of this
    knowledge base among `chunk_ids`: a chunk of another knowledge base or tenant is not there."""
    if not chunk_ids:
        return {}
    rows = (
        Chunk.objects.for_tenant(tenant)
        .filter(knowledge_base=knowledge_base, pk__in=list(chunk_ids), enabled=True)
        .values_list("pk", "content_hash", "document_id")
    )
    return {pk: {"hash": content_hash, "document_id": document_id} for pk, content_hash, document_id in rows}


def _citation_error(missing: Sequence[int]) -> ApplicationError:
    return ApplicationError(
        f"Chunk {', '.join(str(i) for i in missing)} is not an enabled chunk of this knowledge base: cite chunks "
        "listed by GET /api/v1/documents/{id}/chunks/ of its documents.",
        extra={"fields": {"source_chunk_ids": [f"Not found: {', '.join(str(i) for i in missing)}."]}},
    )


def _citations_set(*, curated_answer: CuratedAnswer, chunk_ids: list[int], citations: dict[int, dict]) -> None:
    missing = [chunk_id for chunk_id in chunk_ids if chunk_id not in citations]
    if missing:
        raise _citation_error(missing)
    curated_answer.source_chunk_ids = list(chunk_ids)
    curated_answer.source_chunks = {str(chunk_id): citations[chunk_id] for chunk_id in chunk_ids}


def _phrasings_of(
    *, tenant: Tenant, knowledge_base: KnowledgeBase, pairs: Sequence[tuple[CuratedAnswer, list[str]]]
) -> list[CuratedPhrasing]:
    """The phrasing rows of every (answer, questions), embedded in one batch with the knowledge base's model."""
    model_name = knowledge_base_model(knowledge_base.embedding_model)
    texts = [question for _, questions in pairs for question in questions]
    vectors = embed_texts(texts, model=model_name) if texts else []
    model = embedding_model_id(model_name)
    rows, position = [], 0
    for curated_answer, questions in pairs:
        for question in questions:
            rows.append(
                CuratedPhrasing(
                    tenant=tenant,
                    curated_answer=curated_answer,
                    question=question,
                    vector=vector_to_bytes(vectors[position]),
                    vector_model=model,
                )
            )
            position += 1
    return rows


def _external_id_taken(external_id: str) -> ConflictError:
    return ConflictError(
        f"The knowledge base already has a curated answer with external_id {external_id!r}: edit that one.",
        extra={"fields": {"external_id": ["Already used in this knowledge base."]}},
    )


def curated_answer_create(*, tenant: Tenant, knowledge_base: KnowledgeBase, curated: CuratedInput) -> CuratedAnswer:
    """A curated answer with its phrasings, served from the next turn on when enabled. A cited chunk must be an
    enabled chunk of the same knowledge base (400); an external_id already used there is a 409."""
    created = curated_answers_import(tenant=tenant, knowledge_base=knowledge_base, rows=[curated])[0]
    if isinstance(created, ApplicationError):
        raise created
    return created


def curated_answer_update(
    *,
    tenant: Tenant,
    curated_answer: CuratedAnswer,
    answer: str | None = None,
    questions: list[str] | None = None,
    enabled: bool | None = None,
    source_chunk_ids: list[int] | None = None,
) -> CuratedAnswer:
    """Change what is given (None: unchanged); phrasings given replace them all (embedded again). Citations given
    are taken with their chunks' content as it is now. Takes effect on the next turn."""
    knowledge_base = curated_answer.knowledge_base
    if curated_answer.tenant_id != tenant.pk:
        raise ApplicationError("The curated answer belongs to another tenant.")
    if answer is not None:
        curated_answer.answer = answer
    if enabled is not None:
        curated_answer.enabled = enabled
    if source_chunk_ids is not None:
        citations = _citations_of(tenant=tenant, knowledge_base=knowledge_base, chunk_ids=source_chunk_ids)
        _citations_set(curated_answer=curated_answer, chunk_ids=source_chunk_ids, citations=citations)
    phrasings = (
        _phrasings_of(tenant=tenant, knowledge_base=knowledge_base, pairs=[(curated_answer, questions)])
        if questions is not None
        else None
    )
    with transaction.atomic():
        curated_answer.revision = F("revision") + 1
        curated_answer.save()
        if phrasings is not None:
            CuratedPhrasing.objects.for_tenant(tenant).filter(curated_answer=curated_answer).delete()
            CuratedPhrasing.objects.bulk_create(phrasings)
        tenant_settings_changed(tenant=tenant)
    curated_answer.refresh_from_db(fields=["revision", "updated_at"])
    curated_sets_forget(knowledge_base_id=knowledge_base.pk)
    return curated_answer


def curated_answer_delete(*, tenant: Tenant, curated_answer: CuratedAnswer) -> None:
    """Delete it with its phrasings; the audit events and turns that name it keep their reference number."""
    knowledge_base_id = curated_answer.knowledge_base_id
    with transaction.atomic():
        CuratedAnswer.objects.for_tenant(tenant).filter(pk=curated_answer.pk).delete()
        tenant_settings_changed(tenant=tenant)
    curated_sets_forget(knowledge_base_id=knowledge_base_id)


def curated_answers_enable(*, tenant: Tenant, curated_answer_ids: Collection[int], enabled: bool) -> int:
    """Enable or disable many at once (the admin's actions); returns how many changed."""
    with transaction.atomic():
        changed = (
            CuratedAnswer.objects.for_tenant(tenant)
            .filter(pk__in=list(curated_answer_ids))
            .exclude(enabled=enabled)
            .update(enabled=enabled, revision=F("revision") + 1)
        )
        tenant_settings_changed(tenant=tenant)
    curated_sets_forget(knowledge_base_id=None)
    return changed


def curated_answers_import(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    rows: Sequence[CuratedInput | ApplicationError],
) -> list[CuratedAnswer | ApplicationError]:
    """Store every good row, each as one curated answer, in one transaction, and answer per row in the rows' order: the
    curated answer made, or the row's error (its own, as read; a chunk it cites that this knowledge base has no
    enabled chunk of, 400; an external_id the knowledge base or an earlier row already holds, 409). A bad row costs
    only itself. Nothing is written when anything is raised."""
    if knowledge_base.tenant_id != tenant.pk:
        raise ApplicationError("The knowledge base belongs to another tenant.")
    good = [row for row in rows if isinstance(row, CuratedInput)]
    citations = _citations_of(
        tenant=tenant,
        knowledge_base=knowledge_base,
        chunk_ids={chunk_id for row in good for chunk_id in row.source_chunk_ids},
    )
    taken = set(
        CuratedAnswer.objects.for_tenant(tenant)
        .filter(knowledge_base=knowledge_base, external_id__in=[r.external_id for r in good if r.external_id])
        .values_list("external_id", flat=True)
    )
    results: list[CuratedAnswer | ApplicationError] = []
    pairs: list[tuple[CuratedAnswer, list[str]]] = []
    for row in rows:
        if isinstance(row, ApplicationError):
            results.append(row)
            continue
        if row.external_id is not None and row.external_id in taken:
            results.append(_external_id_taken(row.external_id))
            continue
        curated_answer = CuratedAnswer(
            tenant=tenant,
            knowledge_base=knowledge_base,
            answer=row.answer,
            enabled=row.enabled,
            external_id=row.external_id,
        )
        try:
            _citations_set(curated_answer=curated_answer, chunk_ids=row.source_chunk_ids, citations=citations)
        except ApplicationError as error:
            results.append(error)
            continue
        if row.external_id is not None:
            taken.add(row.external_id)
        pairs.append((curated_answer, row.questions))
        results.append(curated_answer)
    phrasings = _phrasings_of(tenant=tenant, knowledge_base=knowledge_base, pairs=pairs)
    try:
        with transaction.atomic():
            # One by one rather than bulk_create: SQLite gives no ids back from a bulk insert on every version, and the
            # phrasings need them; a few hundred rows take a few milliseconds.
            for curated_answer, _ in pairs:
                curated_answer.save()
            for phrasing in phrasings:
                phrasing.curated_answer_id = phrasing.curated_answer.pk
            CuratedPhrasing.objects.bulk_create(phrasings, batch_size=500)
            if pairs:
                tenant_settings_changed(tenant=tenant)
    except IntegrityError as exc:
        raise ConflictError(
            "Another request added a curated answer with one of these external ids meanwhile; send the rows again."
        ) from exc
    curated_sets_forget(knowledge_base_id=knowledge_base.pk)
    return results
