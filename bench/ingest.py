"""Ingestion throughput: the SciFact corpus end to end through the platform (API-side bulk create, Redis
broker, Celery worker: parse, chunk, embed, Milvus upsert, status updates) against the raw encoder on the very
same chunks, in the same run.

    .venv/bin/python bench/ingest.py [--limit N]

Prints chunks per second for both and the ratio; the target is a ratio of at least 0.85. The embedding cache is
emptied first, so the platform encodes every chunk (a warm cache would flatter it).
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

import common
from common import platform, process_tree_cpu_seconds, scifact_ingest, wait_indexed, worker

TARGET_RATIO = 0.85


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N corpus documents")
    args = parser.parse_args()
    run = uuid.uuid4().hex[:8]
    with platform(name=f"ingest_{run}") as env, worker(env) as worker_process:
        from django.conf import settings

        from lifecycle.services import tenant_get_or_create
        from retrieval import embeddings
        from retrieval.models import Chunk, EmbeddingCacheEntry
        from retrieval.services import document_create, knowledge_base_create

        tenant, _ = tenant_get_or_create(slug="bench", name="Benchmarks")
        # Warm the worker (model load) outside the timed part, as the raw encoder is warmed below.
        warm_kb = knowledge_base_create(tenant=tenant, name=f"warm-{run}")
        document_create(tenant=tenant, knowledge_base=warm_kb, text=f"warm up {run}")
        wait_indexed(tenant=tenant, knowledge_base=warm_kb, expected=1, label="warm-up")
        EmbeddingCacheEntry.objects.for_tenant(tenant).filter(model_name=embeddings.model_identity()).delete()

        knowledge_base = knowledge_base_create(tenant=tenant, name=f"scifact-{run}")
        platform_pids = (worker_process.process.pid, common.milvus_process_id)
        cpu_before = sum(process_tree_cpu_seconds(pid) for pid in platform_pids) + time.process_time()
        documents, platform_seconds, counts = scifact_ingest(
            tenant=tenant, knowledge_base=knowledge_base, limit=args.limit
        )
        platform_cpu = sum(process_tree_cpu_seconds(pid) for pid in platform_pids) + time.process_time() - cpu_before
        texts = list(
            Chunk.objects.for_tenant(tenant)
            .filter(knowledge_base=knowledge_base)
            .order_by("pk")
            .values_list("text", flat=True)
        )
        chunks = len(texts)

        embeddings.embed_texts(texts[:64])  # model load and first-call warm-up, untimed
        started, cpu_started = time.perf_counter(), time.process_time()
        embeddings.embed_texts(texts)
        raw_seconds, raw_cpu = time.perf_counter() - started, time.process_time() - cpu_started

    platform_rate, raw_rate = chunks / platform_seconds, chunks / raw_seconds
    ratio = platform_rate / raw_rate
    print(f"documents                 {documents} ({counts['indexed']} indexed, {counts['failed']} failed)")
    print(
        f"chunks                    {chunks} (chunk_max_tokens {knowledge_base.chunk_max_tokens}, "
        f"overlap {knowledge_base.chunk_overlap_tokens})"
    )
    print(
        f"batches                   {settings.INGEST_DOCUMENTS_PER_TASK} documents per task, "
        f"{settings.INGEST_EMBED_BATCH} chunks per encode/upsert, encoder batch {settings.EMBEDDING_BATCH_SIZE}"
    )
    print(f"platform end to end       {platform_seconds:8.1f} s  {platform_rate:8.1f} chunks/s")
    print(f"raw encoder, same chunks  {raw_seconds:8.1f} s  {raw_rate:8.1f} chunks/s")
    verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
    print(f"ratio platform/raw        {ratio:8.3f}  (target >= {TARGET_RATIO}: {verdict})")
    # CPU time does not depend on other load on the machine: the platform's includes the worker, Milvus and
    # this process (bulk creation, polling); the raw encoder's is this process's encode call.
    cpu_ratio = (chunks / platform_cpu) / (chunks / raw_cpu)
    print(
        f"CPU: platform {platform_cpu:.1f} s ({chunks / platform_cpu:.1f} chunks per CPU-s), raw encoder "
        f"{raw_cpu:.1f} s ({chunks / raw_cpu:.1f} chunks per CPU-s), ratio {cpu_ratio:.3f}"
    )
    print(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
