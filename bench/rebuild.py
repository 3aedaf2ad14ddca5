"""The recovery drill's figure (docs/operations.md): how long `manage.py milvus_rebuild` takes to write a knowledge
base's vectors again after Milvus lost its data, per 10,000 chunks.

    .venv/bin/python bench/rebuild.py [--limit N] [--chunk-tokens 128] [--queries 30]

SciFact is ingested through the platform (a Celery worker: parse, chunk, embed, upsert; this fills the embedding
cache, as production ingestion does), its top 10 recorded for the first `--queries` claims; then the Milvus server is
stopped, its data directory deleted and the server started again, empty. The rebuild runs in this process as the
command would, timed (wall and CPU); the top 10 is compared after it. `--chunk-tokens` makes the chunks smaller than
the default, so the corpus gives about 10,000 of them. Wall time depends on what else the machine runs: the load
average is printed with it.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import time
import uuid

import common
from common import SCIFACT, beir_corpus, platform, process_tree_cpu_seconds, scifact_ingest, worker


def _top_ten(*, tenant, knowledge_base, queries: list[str], mode: str | None = None) -> list[list[int]]:  # noqa: ANN001
    from retrieval import embeddings
    from retrieval.selectors import chunk_search

    identity = embeddings.model_identity()
    return [
        [
            hit.chunk_id
            for hit in chunk_search(
                tenant=tenant,
                knowledge_base=knowledge_base,
                query_vector=embeddings.embed_query(query),
                query_model_identity=identity,
                query_text=query,
                limit=10,
                retrieval_mode=mode,
            )
        ]
        for query in queries
    ]


def _exact_top_ten(*, tenant, knowledge_base, queries: list[str]) -> list[list[int]]:  # noqa: ANN001
    """The exact ranking (every chunk's cosine, best chunk per document, ties by chunk id) from the embedding cache's
    vectors: which of two different Milvus answers is the approximate index's miss."""

    from retrieval import embedding_cache, embeddings
    from retrieval.models import Chunk

    rows = list(
        Chunk.objects.for_tenant(tenant)
        .filter(knowledge_base=knowledge_base)
        .order_by("pk")
        .values_list("pk", "document_id", "text")
    )
    vectors, _ = embedding_cache.embeddings_cached(
        tenant_id=tenant.pk, texts=[text for _, _, text in rows], model_identity=embeddings.model_identity()
    )
    ranked = []
    for query in queries:
        scores = vectors @ embeddings.embed_query(query)
        best: dict[int, tuple[float, int]] = {}
        for (pk, document_id, _), score in zip(rows, scores, strict=True):
            if document_id not in best or score > best[document_id][0]:
                best[document_id] = (float(score), pk)
        ranked.append([pk for _, pk in sorted(best.values(), key=lambda item: (-item[0], item[1]))[:10]])
    return ranked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N corpus documents")
    parser.add_argument("--chunk-tokens", type=int, default=128, help="chunk_max_tokens of the knowledge base")
    parser.add_argument("--queries", type=int, default=30, help="SciFact claims whose top 10 is compared")
    args = parser.parse_args()
    run = uuid.uuid4().hex[:8]
    with platform(name=f"rebuild_{run}") as env:
        from django.core.management import call_command

        from lifecycle.services import tenant_get_or_create
        from retrieval import milvus, vectorstore
        from retrieval.models import Chunk
        from retrieval.services import knowledge_base_create
        from retrieval.vectorstore import VectorStoreUnavailable

        tenant, _ = tenant_get_or_create(slug="bench", name="Benchmarks")
        knowledge_base = knowledge_base_create(
            tenant=tenant, name=f"scifact-{run}", chunk_max_tokens=args.chunk_tokens, chunk_overlap_tokens=16
        )
        with worker(env):
            documents, ingest_seconds, counts = scifact_ingest(
                tenant=tenant, knowledge_base=knowledge_base, limit=args.limit
            )
        chunks = Chunk.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base).count()
        vectorstore.vectors_flush()
        queries = [row["text"] for row in beir_corpus(SCIFACT / "queries.jsonl", args.queries)]
        before = _top_ten(tenant=tenant, knowledge_base=knowledge_base, queries=queries)
        before_semantic = _top_ten(tenant=tenant, knowledge_base=knowledge_base, queries=queries, mode="semantic")

        server = common.milvus_server
        server.stop()
        shutil.rmtree(server.data_dir / "data")
        server.start()
        milvus.reset()
        refused = 0
        for _ in range(2):  # the first call meets the missing collection, the second the empty one made again
            try:
                _top_ten(tenant=tenant, knowledge_base=knowledge_base, queries=queries[:1])
            except VectorStoreUnavailable:
                refused += 1

        cpu_before = process_tree_cpu_seconds(server.process.pid) + time.process_time()
        started = time.perf_counter()
        out = io.StringIO()
        call_command("milvus_rebuild", knowledge_base=knowledge_base.pk, stdout=out, stderr=io.StringIO())
        seconds = time.perf_counter() - started
        cpu = process_tree_cpu_seconds(server.process.pid) + time.process_time() - cpu_before
        after = _top_ten(tenant=tenant, knowledge_base=knowledge_base, queries=queries)
        after_semantic = _top_ten(tenant=tenant, knowledge_base=knowledge_base, queries=queries, mode="semantic")

        exact = _exact_top_ten(tenant=tenant, knowledge_base=knowledge_base, queries=queries)

    same = sum(1 for a, b in zip(before, after, strict=True) if a == b)
    same_semantic = sum(1 for a, b in zip(before_semantic, after_semantic, strict=True) if a == b)
    exact_before = sum(1 for a, b in zip(before_semantic, exact, strict=True) if a == b)
    exact_after = sum(1 for a, b in zip(after_semantic, exact, strict=True) if a == b)
    overlap = sum(len(set(a) & set(b)) for a, b in zip(before, after, strict=True)) / (10 * len(queries))
    print(f"documents                 {documents} ({counts['indexed']} indexed, {counts['failed']} failed)")
    print(f"chunks                    {chunks} (chunk_max_tokens {args.chunk_tokens}, overlap 16)")
    print(f"ingest (fills the cache)  {ingest_seconds:8.1f} s  {chunks / ingest_seconds:8.1f} chunks/s")
    print(f"searches refused (503)    {refused} of 2 while the collection was missing/empty")
    print(f"rebuild                   {seconds:8.1f} s  {chunks / seconds:8.1f} chunks/s")
    print(f"rebuild per 10,000 chunks {seconds * 10_000 / chunks:8.1f} s")
    print(f"rebuild CPU               {cpu:8.1f} s (this process and Milvus), {chunks / cpu:.1f} chunks per CPU-s")
    print(
        f"top 10 identical          {same} of {len(queries)} queries in the knowledge base's mode "
        f"({knowledge_base.retrieval_mode}; same chunk ids, same order)"
    )
    print(f"top 10 overlap            {overlap:.1%} of the chunk ids before are in the top 10 after")
    print(f"top 10 identical          {same_semantic} of {len(queries)} queries in semantic mode")
    print(
        f"semantic against exact    before: {exact_before} of {len(queries)} identical to numpy's exact ranking, "
        f"after: {exact_after} (a difference is the HNSW index's approximation)"
    )
    print(f"command said              {out.getvalue().strip().splitlines()[-1]}")
    print(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
