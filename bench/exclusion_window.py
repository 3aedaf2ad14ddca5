"""`manage.py exclusion_window_bench` on a knowledge base of a few thousand real chunks, as docs/operations.md
("Sizing the exclusion window") reports it.

The knowledge base holds the MTRAG passages (2,021, several per document) and the SciFact abstracts (5,183, one per
document), embedded for real and written to the models directly (this measures searches, not ingestion), in a
`milvus-lite server` of its own, flushed before the run so searches use the HNSW index as they do once indexing has
flushed. The tenant's stored turns are the MTRAG conversations' questions, so the command replays real questions.
The database is SQLite under var/bench unless DATABASE_URL is set.

Usage: .venv/bin/python bench/exclusion_window.py [--windows 1,5,10,20,50] [--queries 40] [--repeats 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import uuid
from datetime import timedelta
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from common import DATA, planner_statistics_refresh, platform  # noqa: E402


def _passages() -> list[tuple[str, str, str]]:
    """(document key, title, text) of every MTRAG passage and SciFact abstract."""
    rows = []
    with (DATA / "mtrag" / "corpus.jsonl").open() as handle:
        for line in handle:
            row = json.loads(line)
            rows.append((f"mtrag:{row['doc_id']}", row.get("title") or row["doc_id"], row["text"]))
    with (DATA / "scifact" / "corpus.jsonl").open() as handle:
        for line in handle:
            row = json.loads(line)
            title = (row.get("title") or "").strip()
            rows.append((f"scifact:{row['_id']}", title or row["_id"], f"{title}\n\n{row['text']}".strip()))
    return rows


def _knowledge_base_load(tenant, name: str):  # noqa: ANN001, ANN202
    from retrieval.embeddings import embed_texts, token_counts
    from retrieval.models import Chunk, Document, DocumentStatus, KnowledgeBase, SourceKind
    from retrieval.services import chunk_vectors_upsert

    knowledge_base = KnowledgeBase.objects.create(tenant=tenant, name=name)
    passages = _passages()
    documents: dict[str, Document] = {}
    for key, title, _ in passages:
        if key not in documents:
            documents[key] = Document(
                tenant=tenant,
                knowledge_base=knowledge_base,
                title=title[:255],
                external_id=key,
                source_kind=SourceKind.CHUNKS,
                status=DocumentStatus.INDEXED,
            )
    Document.objects.bulk_create(documents.values(), batch_size=500)
    documents = {d.external_id: d for d in Document.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base)}
    texts = [text for _, _, text in passages]
    positions: dict[str, int] = {}
    chunks = []
    for (key, _, text), count in zip(passages, token_counts(texts), strict=True):
        position = positions.get(key, 0)
        positions[key] = position + 1
        chunks.append(
            Chunk(
                tenant=tenant,
                document=documents[key],
                knowledge_base=knowledge_base,
                position=position,
                text=text,
                token_count=count,
                content_hash=hashlib.sha256(text.encode()).hexdigest(),
                external_id=f"{key}#{position}",
            )
        )
    Chunk.objects.bulk_create(chunks, batch_size=500)
    chunks = list(Chunk.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base).order_by("pk"))
    print(f"embedding {len(chunks)} chunks of {len(documents)} documents", file=sys.stderr)
    vectors = embed_texts([chunk.text for chunk in chunks])
    for start in range(0, len(chunks), 1000):
        chunk_vectors_upsert(
            chunks=chunks[start : start + 1000],
            vectors=vectors[start : start + 1000],
            dimension=knowledge_base.embedding_dimension,
        )
    return knowledge_base


def _questions_store(tenant, knowledge_base) -> int:  # noqa: ANN001
    """The MTRAG conversations' questions as the tenant's turns, one conversation each, in their order."""
    from django.utils import timezone

    from conversations.models import Conversation, DedupAction, Turn

    stored = 0
    with (DATA / "mtrag" / "conversations.jsonl").open() as handle:
        for line in handle:
            row = json.loads(line)
            conversation = Conversation.objects.create(
                tenant=tenant,
                knowledge_base=knowledge_base,
                user_id=f"mtrag-{row['conversation_id']}",
                expires_at=timezone.now() + timedelta(days=1),
            )
            Turn.objects.bulk_create(
                Turn(
                    tenant=tenant,
                    conversation=conversation,
                    knowledge_base=knowledge_base,
                    number=number,
                    question=turn["question"],
                    question_vector=b"",
                    decision=DedupAction.ANSWERED,
                )
                for number, turn in enumerate(row["turns"], start=1)
            )
            stored += len(row["turns"])
    return stored


def _flush() -> None:
    from django.conf import settings

    from retrieval import milvus, vectorstore

    flush = getattr(vectorstore, "vectors_flush", None)
    if flush is not None:
        flush()
    else:  # a branch from before the vectorstore could flush: the client's own call, for this bench only
        milvus.connect().flush(settings.MILVUS_COLLECTION)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", default="1,5,10,20,50")
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--granularity", choices=("chunk", "doc"))
    args = parser.parse_args()
    with platform(name="exwin"):
        from django.core.management import call_command

        from lifecycle.services import tenant_get_or_create

        tenant = tenant_get_or_create(slug=f"exwin-{uuid.uuid4().hex[:8]}", name="Exclusion window bench")[0]
        knowledge_base = _knowledge_base_load(tenant, "mtrag+scifact")
        print(f"stored {_questions_store(tenant, knowledge_base)} questions as turns", file=sys.stderr)
        _flush()
        planner_statistics_refresh()
        command = ["--tenant", tenant.slug, "--kb", str(knowledge_base.pk), "--windows", args.windows]
        command += ["--queries", str(args.queries), "--repeats", str(args.repeats)]
        if args.granularity:
            command += ["--granularity", args.granularity]
        call_command("exclusion_window_bench", *command)


if __name__ == "__main__":
    main()
