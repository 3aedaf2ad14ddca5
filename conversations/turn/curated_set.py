"""The curated answers a turn compares its question with: one knowledge base's enabled answers and their phrasings, as
`decisions.StoredQuestion`s for `duplicate_decide` and `StoredAnswer`s to serve.

A process keeps each knowledge base's set under the tenant's `settings_version`, which every curated write raises in
its transaction (`services.curated`) and which comes with the tenant row every request loads with its API key: an
edit, a disable or a delete is seen by the next turn of every process, and a turn on an unchanged set costs no query
at all (the stored-answer hit's path reads no more than it did). A few hundred phrasings are compared in numpy; no
vector index is needed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from conversations.dedup import decisions
from conversations.models import CuratedAnswer, CuratedPhrasing
from conversations.turn.state import StoredAnswer, vector_from_bytes, vector_to_bytes
from retrieval.embeddings import embed_texts, text_readable, token_counts
from retrieval.embeddings import model_id as embedding_model_id
from tenants.models import Tenant


@dataclass(frozen=True)
class CuratedSet:
    """A knowledge base's enabled curated answers for one embedding model. A candidate's `turn_id` is its phrasing's
    id (`answer_of_phrasing` names its answer); each phrasing stands as a first question, asked in no context, so the
    follow-up guard never lets a context-dependent question ("and for admins?") in the middle of a conversation take
    one."""

    candidates: list[decisions.StoredQuestion] = field(default_factory=list)
    answer_of_phrasing: dict[int, int] = field(default_factory=dict)
    answers: dict[int, StoredAnswer] = field(default_factory=dict)

    def answer_of(self, phrasing_id: int) -> StoredAnswer:
        return self.answers[self.answer_of_phrasing[phrasing_id]]


EMPTY = CuratedSet()
_sets: dict[tuple[int, int, str], tuple[tuple, CuratedSet]] = {}
_lock = threading.Lock()


def curated_sets_forget(*, knowledge_base_id: int | None) -> None:
    """Drop this process's copy of a knowledge base's set (None: of every one). Only a shortcut for the process that
    wrote: every other process sees the write by the revision check."""
    with _lock:
        for key in [key for key in _sets if knowledge_base_id is None or key[1] == knowledge_base_id]:
            del _sets[key]


def curated_set_of(*, tenant: Tenant, knowledge_base_id: int, embedding: str) -> CuratedSet:
    """The enabled curated answers of the tenant's knowledge base, their phrasings embedded by `embedding` (the
    knowledge base's model, by name). Phrasings embedded by another model (the knowledge base changed its model) are
    embedded again here, once, and stored: a vector of another model is never compared."""
    model = embedding_model_id(embedding)
    key = (tenant.pk, knowledge_base_id, model)
    # The creation time too: a tenant id can come back (a test's rolled-back rows, a restored database), its version
    # count with it.
    version = (tenant.created_at, tenant.settings_version)
    held = _sets.get(key)
    if held is not None and held[0] == version:
        return held[1]
    curated = _curated_set_load(tenant=tenant, knowledge_base_id=knowledge_base_id, embedding=embedding, model=model)
    with _lock:
        _sets[key] = (version, curated)
    return curated


def _curated_set_load(*, tenant: Tenant, knowledge_base_id: int, embedding: str, model: str) -> CuratedSet:
    answers = list(
        CuratedAnswer.objects.for_tenant(tenant)
        .filter(knowledge_base_id=knowledge_base_id, enabled=True)
        .values_list("pk", "answer", "source_chunk_ids", "source_chunks")
    )
    if not answers:
        return EMPTY
    tokens = token_counts([answer for _, answer, _, _ in answers], embedding)
    stored = {
        pk: StoredAnswer(
            turn_id=None,
            answer=answer,
            answer_tokens=count,
            context_tokens=0,
            elapsed_ms=0.0,
            source_chunk_ids=[int(i) for i in chunk_ids],
            source_chunks=dict(chunks),
            curated_answer_id=pk,
        )
        for (pk, answer, chunk_ids, chunks), count in zip(answers, tokens, strict=True)
    }
    phrasings = list(
        CuratedPhrasing.objects.for_tenant(tenant)
        .filter(curated_answer_id__in=list(stored))
        .values_list("pk", "curated_answer_id", "question", "vector", "vector_model")
    )
    stale = [row for row in phrasings if row[4] != model]
    if stale:
        phrasings = _phrasings_embedded_again(tenant=tenant, phrasings=phrasings, embedding=embedding, model=model)
    candidates = [
        decisions.StoredQuestion(
            turn_id=pk,
            question=question,
            vector=vector_from_bytes(vector),
            conversation_id=0,
            previous_vector=None,
            vector_model=vector_model,
            readable=text_readable(question, embedding),
        )
        for pk, _, question, vector, vector_model in phrasings
    ]
    return CuratedSet(
        candidates=candidates,
        answer_of_phrasing={pk: answer_id for pk, answer_id, *_ in phrasings},
        answers=stored,
    )


def _phrasings_embedded_again(*, tenant: Tenant, phrasings: list[tuple], embedding: str, model: str) -> list[tuple]:
    """`phrasings` (pk, answer id, question, vector, vector model) with those another model embedded (before the
    knowledge base changed its model) embedded again by `embedding`, stored back within the tenant."""
    stale = [row for row in phrasings if row[4] != model]
    vectors = embed_texts([row[2] for row in stale], model=embedding)
    updated = {row[0]: np.asarray(vector, dtype="<f4") for row, vector in zip(stale, vectors, strict=True)}
    rows = [
        CuratedPhrasing(pk=pk, tenant=tenant, vector=vector_to_bytes(vector), vector_model=model)
        for pk, vector in updated.items()
    ]
    CuratedPhrasing.objects.for_tenant(tenant).bulk_update(rows, ["vector", "vector_model"], batch_size=500)
    return [
        (pk, answer_id, question, vector_to_bytes(updated[pk]), model) if pk in updated else row
        for row in phrasings
        for pk, answer_id, question, vector, _ in [row]
    ]
