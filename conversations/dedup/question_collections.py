"""The deployment's Milvus collections as the operator sees them (`manage.py milvus_collections`): which is which, how
many entities each holds, and which question collections no unexpired conversation needs any more.

Tenant-scope dedup keeps one question collection per embedding model (`<MILVUS_COLLECTION>_questions_<model id>`).
After a model change the old model's collection is never searched again, but its questions are found again if the
operator switches back while their conversations live; once no unexpired turn carries that model id, nothing can
ever read it, and it may go. The chunk collections (MILVUS_COLLECTION, `<MILVUS_COLLECTION>_text` beside it in a
deployment from before full text, and each offered model's own, `<MILVUS_COLLECTION>_<model>`) and the question
collections of the offered models are never dropped, nor anything that is not named as this deployment's question
collections are.

Crosses tenants by design: it is the platform's own housekeeping, as the purge of expired conversations is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from conversations.models import Turn
from kbplatform.errors import ApplicationError, ConflictError
from retrieval import embeddings, question_index, vectorstore

CHUNKS = "chunks"
QUESTIONS = "questions"
OTHER = "other"


@dataclass(frozen=True)
class DeploymentCollection:
    """One collection named after MILVUS_COLLECTION. `kind` is CHUNKS, QUESTIONS or OTHER; `model` the embedding model
    id of a question collection ("" for the one from before models were recorded), else None; `in_use` whether the
    platform searches it now; `live_turns` / `live_conversations` the unexpired turns (and their conversations) whose
    question vector that model made."""

    name: str
    entities: int
    kind: str
    model: str | None
    in_use: bool
    live_conversations: int
    live_turns: int


def plural(count: int, word: str, words: str | None = None) -> str:
    return f"{count} {word if count == 1 else words or f'{word}s'}"


def live_turns_text(collection: DeploymentCollection) -> str:
    return (
        f"{plural(collection.live_turns, 'turn')} in {plural(collection.live_conversations, 'unexpired conversation')}"
    )


def collection_drop_refusal(collection: DeploymentCollection) -> str | None:
    """Why `collection` must not be dropped, or None when it may be: only a question collection of this deployment,
    of a model the deployment does not offer, that no unexpired turn's question vector came from."""
    if collection.kind == CHUNKS:
        return (
            "it is a chunk collection (MILVUS_COLLECTION, the full-text one beside it, <MILVUS_COLLECTION>_text, or an "
            "offered model's own): knowledge bases' vectors are there"
        )
    if collection.kind != QUESTIONS:
        return (
            f"it is not one of this deployment's question collections (only {settings.MILVUS_COLLECTION}_questions and "
            f"{settings.MILVUS_COLLECTION}_questions_<model id> ever are)"
        )
    if collection.in_use:
        return (
            "it holds the questions of an embedding model in use (one the deployment offers): tenant-scope dedup "
            "searches it"
        )
    if collection.live_turns:
        return (
            f"{live_turns_text(collection)} still carry model {collection.model or '(none recorded)'}: "
            "drop it once they have expired, or keep it if you may switch back to that model"
        )
    return None


def _live_turns_by_model(*, now: datetime) -> dict[str, tuple[int, int]]:
    """Embedding model id -> (unexpired conversations, their turns) whose question vector that model made."""
    rows = (
        Turn.objects.unscoped()
        .filter(conversation__expires_at__gt=now)
        .values("question_vector_model")
        .annotate(conversations=Count("conversation", distinct=True), turns=Count("pk"))
    )
    return {row["question_vector_model"]: (row["conversations"], row["turns"]) for row in rows}


def deployment_collections(*, now: datetime | None = None) -> list[DeploymentCollection]:
    """Every collection named after MILVUS_COLLECTION, with its role and, for question collections, the unexpired
    turns of its model. Raises VectorStoreUnavailable when Milvus does not answer."""
    now = now or timezone.now()
    # Every offered model's questions are in use: a knowledge base may be on any of them.
    offered_ids = {embeddings.model_id(model) for model in embeddings.offered_models()}
    names = vectorstore.deployment_collection_names()
    chunk_names = {*vectorstore.chunk_collection_names(), *vectorstore.model_chunk_collection_names()}
    live = _live_turns_by_model(now=now)
    collections = []
    for name in names:
        model = question_index.question_collection_model(name)
        if name in chunk_names:
            kind, in_use = CHUNKS, True
        elif model is not None:
            kind, in_use = QUESTIONS, model in offered_ids
        else:
            kind, in_use = OTHER, False
        conversations, turns = live.get(model, (0, 0)) if model is not None else (0, 0)
        collections.append(
            DeploymentCollection(
                name=name,
                entities=vectorstore.collection_entity_count(name=name),
                kind=kind,
                model=model,
                in_use=in_use,
                live_conversations=conversations,
                live_turns=turns,
            )
        )
    return collections


def question_collections_drop(
    *, names: Sequence[str] | None = None, dry_run: bool = False
) -> list[DeploymentCollection]:
    """Drop the named collections or, with no names, every one `collection_drop_refusal` lets go, each checked as it
    is at this moment. When a named one is refused, or is no collection of this deployment, nothing is dropped and
    ConflictError / ApplicationError says why. With `dry_run`, only the checks. Returns the collections dropped (or
    that would be). Raises VectorStoreUnavailable when Milvus does not answer."""
    collections = {collection.name: collection for collection in deployment_collections()}
    if names is None:
        chosen = [collection for collection in collections.values() if collection_drop_refusal(collection) is None]
    else:
        missing = [name for name in names if name not in collections]
        if missing:
            raise ApplicationError(
                f"{', '.join(missing)}: not one of this deployment's collections (those named after "
                f"MILVUS_COLLECTION={settings.MILVUS_COLLECTION!r}); nothing was dropped.",
                extra={"names": missing},
            )
        chosen = [collections[name] for name in dict.fromkeys(names)]
        refused = {collection.name: collection_drop_refusal(collection) for collection in chosen}
        refused = {name: reason for name, reason in refused.items() if reason}
        if refused:
            raise ConflictError(
                "Drop refused, nothing was dropped: "
                + "; ".join(f"{name}: {reason}" for name, reason in refused.items()),
                extra={"refused": refused},
            )
    if not dry_run:
        for collection in chosen:
            question_index.question_collection_drop(model=collection.model)
    return chosen
