"""Reachability of every part the platform needs, for `/api/health/` and `make run`'s banner."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from django.conf import settings
from django.db import connection

from kbplatform.redis_client import redis_ping


def _database() -> tuple[str, str]:
    """ok once the database answers; on PostgreSQL the answer also says when the server does not keep the planner's
    statistics fresh (autovacuum off), which slows turns as data grows but stops nothing, so it stays ok."""
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            cursor.execute("SELECT 1")
            cursor.fetchone()
            return "ok", connection.vendor
        from kbplatform.db.postgresql.base import planner_statistics_problem

        problem = planner_statistics_problem(cursor)
    if not problem:
        return "ok", connection.vendor
    return "ok", f'{connection.vendor}; {problem} (docs/operations.md, "Planner statistics")'


def _redis() -> tuple[str, str]:
    if not settings.REDIS_URL:
        return "disabled", "no REDIS_URL: in-process cache, eager tasks"
    return ("ok", "ping") if redis_ping() else ("down", "no answer from REDIS_URL")


VECTORS_LOST = "vectors_lost"
# How long one process reuses its answer to "does Milvus hold the vectors the database says are indexed": the
# question costs a query of the database and a count in Milvus per knowledge base sampled, and a load balancer asks
# for health every few seconds.
CONTENTS_CHECK_SECONDS = 60.0
CONTENTS_SAMPLE = 3  # knowledge bases counted: a lost Milvus has lost all of them
_contents_checked: tuple[float, tuple[str, str]] | None = None  # (monotonic time, the answer) of the last check


def milvus_contents_state(*, uri: str, vector_counts: Sequence[int]) -> tuple[str, str]:
    """Milvus's status once it answers, from the vectors it holds of knowledge bases whose chunks the database holds
    indexed: `vectors_lost` when one holds none (its data was lost: every search of it answers 503 until
    `manage.py milvus_rebuild`), else ok. Pure."""
    empty = sum(1 for count in vector_counts if count == 0)
    if empty:
        return (
            VECTORS_LOST,
            f"{uri} answers but holds no vector of {empty} of {len(vector_counts)} knowledge base(s) whose chunks "
            "the database holds indexed (its data was lost?): run `manage.py milvus_rebuild` (docs/operations.md, "
            "Recovery drill)",
        )
    return "ok", uri


def _milvus() -> tuple[str, str]:
    from retrieval.vectorstore import vectorstore_ping

    if not vectorstore_ping():
        return "down", f"no answer from {settings.MILVUS_URI}"
    return _milvus_contents()


def _milvus_contents() -> tuple[str, str]:
    """`milvus_contents_state` of this moment for up to CONTENTS_SAMPLE knowledge bases, reused for
    CONTENTS_CHECK_SECONDS. A failed count raises (the check reports it) and is not kept, so the next check counts
    again."""
    global _contents_checked
    from retrieval.selectors import knowledge_base_vectors_count, knowledge_bases_indexed_sample

    now = time.monotonic()
    if _contents_checked is not None and now - _contents_checked[0] < CONTENTS_CHECK_SECONDS:
        return _contents_checked[1]
    counts = [
        knowledge_base_vectors_count(knowledge_base=knowledge_base)
        for knowledge_base in knowledge_bases_indexed_sample(count=CONTENTS_SAMPLE)
    ]
    state = milvus_contents_state(uri=settings.MILVUS_URI, vector_counts=counts)
    _contents_checked = (now, state)
    return state


def _worker() -> tuple[str, str]:
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return "ok", "eager: tasks run in the web process"
    if settings.REDIS_URL and not redis_ping():
        return "down", "broker unreachable"
    from kbplatform.celery import app

    replies = app.control.ping(timeout=settings.HEALTH_WORKER_TIMEOUT) or []
    return ("ok", f"{len(replies)} worker(s)") if replies else ("down", "no worker answered")


def _embedding_model() -> tuple[str, str]:
    """The models this deployment offers (the default marked), which of them this process holds (each is loaded on
    first use), what runs the primary one (EMBEDDING_BACKEND), and how many knowledge bases hold another model's
    vectors than the one they are searched with (their searches are refused until re-indexed). Those are the
    operator's to-do, not an outage: reported as `reindex_needed`, which leaves the overall status alone. A count
    across tenants, never which ones. An ONNX file not made yet is said, not made here: the first query makes it."""
    from retrieval import embeddings
    from retrieval.models import KnowledgeBase
    from retrieval.selectors import knowledge_bases_awaiting_reindex_onto_their_models

    loaded = set(embeddings.models_loaded())
    described = []
    for model in embeddings.offered_models():
        text = embeddings.model_identity(model)
        if model == embeddings.default_model():
            text += " (default)"
        if model == embeddings.primary_model():
            text += f" on {embeddings.backend()}"
            if embeddings.backend() == "onnx" and model not in loaded and not embeddings.onnx_file().is_file():
                text += ", its ONNX file made on first use"
        text += ", loaded" if model in loaded else ", not loaded yet"
        described.append(text)
    identity = "; ".join(described)
    every = KnowledgeBase.objects.unscoped()
    awaiting = knowledge_bases_awaiting_reindex_onto_their_models(knowledge_bases=every).count()
    if not awaiting:
        return "ok", identity
    return (
        "reindex_needed",
        f"{identity}; {awaiting} knowledge base(s) hold another model's vectors (all, or some after a model change "
        "that stopped part way): re-index them",
    )


CHECKS: dict[str, Callable[[], tuple[str, str]]] = {
    "database": _database,
    "redis": _redis,
    "milvus": _milvus,
    "worker": _worker,
    "embedding_model": _embedding_model,
}


def health_report() -> dict:
    """{"status": ok|degraded|down, "components": {name: {"status", "detail", "ms"}}}.

    `down` when the database is down (nothing works); `degraded` when any other part is down (turns may still
    be answered from the database, uploads wait in the queue), or when Milvus answers but lost its vectors
    (`vectors_lost`: searches of indexed knowledge bases answer 503 until rebuilt). `embedding_model` is `down`
    only when the model's files cannot be read; knowledge bases awaiting a re-index make it `reindex_needed`, which
    degrades nothing.
    """
    components = {}
    for name, check in CHECKS.items():
        started = time.perf_counter()
        try:
            state, detail = check()
        except Exception as exc:  # noqa: BLE001 - a health check reports every failure instead of raising
            state, detail = "down", f"{type(exc).__name__}: {exc}"[:300]
        components[name] = {"status": state, "detail": detail, "ms": round((time.perf_counter() - started) * 1000, 1)}
    if components["database"]["status"] != "ok":
        overall = "down"
    elif any(c["status"] in ("down", VECTORS_LOST) for c in components.values()):
        overall = "degraded"
    else:
        overall = "ok"
    return {"status": overall, "components": components}
