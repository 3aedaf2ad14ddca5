"""Retrieval quality on SciFact through the search endpoint: recall@5, recall@10 and MRR@10 of the 143 claims
against their relevant abstracts, with the whole corpus ingested through the worker (default chunking).

    .venv/bin/python bench/retrieval_quality.py

Baseline, same process, same vectors: exact (brute-force) cosine search over every stored chunk's vector,
best chunk per document. The ratio shows what the platform's path (HNSW in Milvus, tenant filter, grouping by
document, joining chunk rows) costs against a perfect nearest-neighbour search of the same embeddings.
Run bench/ingest.py first and this run re-uses its embedding cache (no re-encoding); otherwise it encodes the
corpus itself.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid

import numpy as np
from common import SCIFACT, platform, scifact_ingest, worker

KS = (5, 10)


def recall_at(ranked: list[str], relevant: set[str], k: int) -> float:
    return len(set(ranked[:k]) & relevant) / len(relevant)


def reciprocal_rank(ranked: list[str], relevant: set[str], k: int = 10) -> float:
    for rank, doc_id in enumerate(ranked[:k], start=1):
        if doc_id in relevant:
            return 1.0 / rank
    return 0.0


def summarise(rankings: dict[str, list[str]], queries: list[dict]) -> dict[str, float]:
    figures = {f"recall@{k}": 0.0 for k in KS} | {"mrr@10": 0.0}
    for query in queries:
        relevant = set(query["relevant_doc_ids"])
        ranked = rankings[query["query_id"]]
        for k in KS:
            figures[f"recall@{k}"] += recall_at(ranked, relevant, k)
        figures["mrr@10"] += reciprocal_rank(ranked, relevant)
    return {name: value / len(queries) for name, value in figures.items()}


def main() -> None:
    run = uuid.uuid4().hex[:8]
    queries = [json.loads(line) for line in (SCIFACT / "queries.jsonl").open(encoding="utf-8") if line.strip()]
    with platform(name=f"quality_{run}") as env, worker(env):
        from rest_framework.test import APIClient

        from lifecycle.services import tenant_get_or_create
        from retrieval import embeddings
        from retrieval.models import Chunk, Document, EmbeddingCacheEntry
        from retrieval.services import knowledge_base_create
        from tenants.services import api_key_create

        tenant, _ = tenant_get_or_create(slug="bench", name="Benchmarks")
        knowledge_base = knowledge_base_create(tenant=tenant, name=f"scifact-quality-{run}")
        documents, seconds, counts = scifact_ingest(tenant=tenant, knowledge_base=knowledge_base)
        print(
            f"corpus: {documents} documents ingested in {seconds:.0f}s ({counts['indexed']} indexed, "
            f"{counts['failed']} failed)"
        )

        _, raw_key = api_key_create(tenant=tenant, name=f"quality-{run}")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
        url = f"/api/v1/knowledge-bases/{knowledge_base.pk}/search/"
        client.post(url, {"query": "warm up", "limit": 10}, format="json")

        platform_rankings: dict[str, list[str]] = {}
        latencies = []
        for query in queries:
            started = time.perf_counter()
            response = client.post(url, {"query": query["text"], "limit": max(KS)}, format="json")
            latencies.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, response.content
            platform_rankings[query["query_id"]] = [hit["document_external_id"] for hit in response.json()["results"]]

        # Baseline: exact cosine over the very same chunk vectors (from the embedding cache).
        chunks = list(
            Chunk.objects.for_tenant(tenant)
            .filter(knowledge_base=knowledge_base)
            .values_list("document_id", "content_hash", "model_input_hash")
        )
        vectors_by_hash = {
            text_hash: np.frombuffer(bytes(vector), dtype=np.float32)
            for text_hash, vector in EmbeddingCacheEntry.objects.for_tenant(tenant)
            .filter(model_name=embeddings.model_identity())
            .values_list("text_hash", "vector")
        }
        # Cached by what the model read: the broken form's hash for a chunk with a long run, else the text's.
        matrix = np.vstack([vectors_by_hash[input_hash or text_hash] for _, text_hash, input_hash in chunks])
        external_of = dict(
            Document.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base).values_list("pk", "external_id")
        )
        chunk_docs = np.array([external_of[document_id] for document_id, _, _ in chunks])
        exact_rankings = {}
        for query in queries:
            scores = matrix @ embeddings.embed_query(query["text"])
            ranked: list[str] = []
            for index in np.argsort(-scores):
                if chunk_docs[index] not in ranked:
                    ranked.append(str(chunk_docs[index]))
                if len(ranked) == max(KS):
                    break
            exact_rankings[query["query_id"]] = ranked

    platform_figures, exact_figures = summarise(platform_rankings, queries), summarise(exact_rankings, queries)
    print(f"queries: {len(queries)}; chunks searched: {len(chunks)}")
    print(f"{'metric':<10} {'platform':>9} {'exact':>9} {'ratio':>7}")
    for name in platform_figures:
        ratio = platform_figures[name] / exact_figures[name] if exact_figures[name] else float("nan")
        print(f"{name:<10} {platform_figures[name]:9.4f} {exact_figures[name]:9.4f} {ratio:7.3f}")
    latencies.sort()
    print(
        f"search endpoint latency: median {statistics.median(latencies):.1f} ms, "
        f"p95 {latencies[int(0.95 * (len(latencies) - 1))]:.1f} ms (embedding the query included)"
    )


if __name__ == "__main__":
    main()
