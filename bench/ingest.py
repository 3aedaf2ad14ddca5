"""Ingestion throughput: the SciFact corpus end to end through the platform (API-side bulk create, Redis
broker, Celery worker: parse, chunk, embed, Milvus upsert, status updates) against the raw encoder on the very
same chunks, in the same run; for each embedding backend asked for, in one run.

    .venv/bin/python bench/ingest.py [--limit N] [--backends torch,onnx] [--against REF]

For each backend (default: EMBEDDING_BACKEND's) a worker is started with that EMBEDDING_BACKEND and ingests the corpus
into a knowledge base of its own; the raw encoder then runs the same backend in this process on the same chunks.
Prints chunks per second for both and their ratio (target: at least 0.85), and, with torch among the backends, each
backend's platform rate against torch's (the onnx backend's target: at least 1.3). The embedding cache is emptied
before each backend's run, so the platform encodes every chunk (a warm cache would flatter it; torch and onnx share
one model identity, so one backend's run would otherwise serve the next). With `--against REF` the same benchmark of
build REF (a git revision: the build before a change) runs first, and each backend's rate is also given against it.
"""

from __future__ import annotations

import argparse
import os
import re
import time
import uuid

import common
from common import platform, process_tree_cpu_seconds, run_build, scifact_ingest, wait_indexed, worker

TARGET_RATIO = 0.85
TARGET_OVER_TORCH = 1.3


def _backend_run(*, env: dict, backend: str, run: str, limit: int | None) -> dict:
    """Ingest the corpus with a worker on `backend`, then encode its chunks with the raw encoder on `backend`."""
    from django.conf import settings

    from lifecycle.services import tenant_get_or_create
    from retrieval import embeddings
    from retrieval.models import Chunk, EmbeddingCacheEntry
    from retrieval.services import document_create, knowledge_base_create

    tenant, _ = tenant_get_or_create(slug="bench", name="Benchmarks")
    with worker({**env, "EMBEDDING_BACKEND": backend}) as worker_process:
        # Warm the worker (model load) outside the timed part, as the raw encoder is warmed below.
        warm_kb = knowledge_base_create(tenant=tenant, name=f"warm-{backend}-{run}")
        document_create(tenant=tenant, knowledge_base=warm_kb, text=f"warm up {backend} {run}")
        wait_indexed(tenant=tenant, knowledge_base=warm_kb, expected=1, label=f"{backend} warm-up")
        EmbeddingCacheEntry.objects.for_tenant(tenant).filter(model_name=embeddings.model_identity()).delete()

        knowledge_base = knowledge_base_create(tenant=tenant, name=f"scifact-{backend}-{run}")
        platform_pids = (worker_process.process.pid, common.milvus_process_id)
        cpu_before = sum(process_tree_cpu_seconds(pid) for pid in platform_pids) + time.process_time()
        documents, platform_seconds, counts = scifact_ingest(tenant=tenant, knowledge_base=knowledge_base, limit=limit)
        platform_cpu = sum(process_tree_cpu_seconds(pid) for pid in platform_pids) + time.process_time() - cpu_before
    texts = list(
        Chunk.objects.for_tenant(tenant)
        .filter(knowledge_base=knowledge_base)
        .order_by("pk")
        .values_list("text", flat=True)
    )
    settings.EMBEDDING_BACKEND = backend
    embeddings._models.clear()
    embeddings.embed_texts(texts[:64])  # model load and first-call warm-up, untimed
    started, cpu_started = time.perf_counter(), time.process_time()
    embeddings.embed_texts(texts)
    raw_seconds, raw_cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return {
        "backend": backend,
        "documents": documents,
        "counts": counts,
        "knowledge_base": knowledge_base,
        "chunks": len(texts),
        "platform_seconds": platform_seconds,
        "platform_cpu": platform_cpu,
        "raw_seconds": raw_seconds,
        "raw_cpu": raw_cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N corpus documents")
    parser.add_argument("--backends", default="", help="comma-separated EMBEDDING_BACKENDs (default: the configured)")
    parser.add_argument("--against", metavar="REF", help="also run this benchmark of git revision REF, first")
    args = parser.parse_args()
    earlier_rate = None
    if args.against:
        printed = run_build(args.against, "ingest.py", [f"--limit={args.limit}"] if args.limit else [])
        found = re.search(r"^platform end to end\s+[\d.]+ s\s+([\d.]+) chunks/s", printed, re.M)
        if not found:
            raise SystemExit(f"no platform rate in the output of {args.against}:\n{printed[-2000:]}")
        earlier_rate = float(found.group(1))
        print(f"--- {args.against} (run first): platform {earlier_rate:.1f} chunks/s")
    run = uuid.uuid4().hex[:8]
    with platform(name=f"ingest_{run}") as env:
        from django.conf import settings

        backends = [name.strip() for name in args.backends.split(",") if name.strip()] or [settings.EMBEDDING_BACKEND]
        unknown = sorted(set(backends) - set(settings.EMBEDDING_BACKENDS))
        if unknown:
            parser.error(f"--backends: {', '.join(unknown)} not among {', '.join(settings.EMBEDDING_BACKENDS)}")
        results = [_backend_run(env=env, backend=backend, run=run, limit=args.limit) for backend in backends]

    print(
        f"batches                   {settings.INGEST_DOCUMENTS_PER_TASK} documents per task, "
        f"{settings.INGEST_EMBED_BATCH} chunks per encode/upsert, encoder batch {settings.EMBEDDING_BATCH_SIZE}"
    )
    torch_rate = next((r["chunks"] / r["platform_seconds"] for r in results if r["backend"] == "torch"), None)
    for result in results:
        _report(result, torch_rate=torch_rate)
        if earlier_rate:
            rate = result["chunks"] / result["platform_seconds"]
            print(f"ratio platform/{args.against[:10]:<10} {rate / earlier_rate:8.3f}  (target >= {TARGET_OVER_TORCH})")
    print(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


def _report(result: dict, *, torch_rate: float | None) -> None:
    chunks, knowledge_base, counts = result["chunks"], result["knowledge_base"], result["counts"]
    platform_seconds, raw_seconds = result["platform_seconds"], result["raw_seconds"]
    platform_cpu, raw_cpu = result["platform_cpu"], result["raw_cpu"]
    platform_rate, raw_rate = chunks / platform_seconds, chunks / raw_seconds
    ratio = platform_rate / raw_rate
    print(f"--- EMBEDDING_BACKEND={result['backend']}")
    print(f"documents                 {result['documents']} ({counts['indexed']} indexed, {counts['failed']} failed)")
    print(
        f"chunks                    {chunks} (chunk_max_tokens {knowledge_base.chunk_max_tokens}, "
        f"overlap {knowledge_base.chunk_overlap_tokens})"
    )
    print(f"platform end to end       {platform_seconds:8.1f} s  {platform_rate:8.1f} chunks/s")
    print(f"raw encoder, same chunks  {raw_seconds:8.1f} s  {raw_rate:8.1f} chunks/s")
    verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
    print(f"ratio platform/raw        {ratio:8.3f}  (target >= {TARGET_RATIO}: {verdict})")
    if torch_rate is not None and result["backend"] != "torch":
        over = platform_rate / torch_rate
        verdict = "met" if over >= TARGET_OVER_TORCH else "NOT met"
        print(f"ratio platform/torch's    {over:8.3f}  (target >= {TARGET_OVER_TORCH}: {verdict})")
    # CPU time does not depend on other load on the machine: the platform's includes the worker, Milvus and
    # this process (bulk creation, polling); the raw encoder's is this process's encode call.
    cpu_ratio = (chunks / platform_cpu) / (chunks / raw_cpu)
    print(
        f"CPU: platform {platform_cpu:.1f} s ({chunks / platform_cpu:.1f} chunks per CPU-s), raw encoder "
        f"{raw_cpu:.1f} s ({chunks / raw_cpu:.1f} chunks per CPU-s), ratio {cpu_ratio:.3f}"
    )


if __name__ == "__main__":
    main()
