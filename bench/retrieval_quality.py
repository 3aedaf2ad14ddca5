"""Retrieval quality on SciFact through the search endpoint: recall@5, recall@10 and MRR@10 of the 143 claims
against their relevant abstracts, with the whole corpus ingested through the worker (default chunking), in every
retrieval mode in one run: semantic, full_text, hybrid by rank fusion (RRF) and hybrid weighted at each of
`--dense-weights` (the vector side's share).

    .venv/bin/python bench/retrieval_quality.py [--dense-weights 0.3 0.5 0.7] [--corpus-limit N]
        [--rrf-k 30 100] [--candidates-per-hit 8] [--study rrf:60,wrrf:0.8]

`--rrf-k` adds a rank-fusion row per k of Milvus's `RRFRanker` (the shipped one is `vectorstore.RRF_K`), and
`--candidates-per-hit` one per candidate pool of each side (`vectorstore.HYBRID_CANDIDATES_PER_HIT`), both set in this
process, where the search endpoint runs.

`--study` ranks fusion variants of bench/fusion_study.py through the same endpoint on candidates fetched once per
query. `--corpus-limit N` ingests the first N abstracts and every abstract a claim names: quicker, and easier than the
whole corpus, so only modes of the same run compare.

Baseline, same process, same vectors: exact (brute-force) cosine search over every stored chunk's vector,
best chunk per document. The ratio shows what the platform's path (HNSW in Milvus, tenant filter, grouping by
document, joining chunk rows) costs against a perfect nearest-neighbour search of the same embeddings.
Run bench/ingest.py first and this run re-uses its embedding cache (no re-encoding); otherwise it encodes the
corpus itself.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid

import numpy as np
from common import SCIFACT, platform, scifact_ingest, worker

KS = (5, 10)
DENSE_WEIGHTS = (0.3, 0.5, 0.7)


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dense-weights", type=float, nargs="*", default=list(DENSE_WEIGHTS))
    parser.add_argument(
        "--corpus-limit",
        type=int,
        default=None,
        help="ingest only the first N abstracts and every abstract a claim names (a smaller, easier corpus: compare "
        "modes of the same run only)",
    )
    parser.add_argument("--rrf-k", type=int, nargs="*", default=[], help="more rank-fusion rows, one per k")
    parser.add_argument(
        "--candidates-per-hit", type=int, nargs="*", default=[], help="more rank-fusion rows, one per candidate pool"
    )
    parser.add_argument(
        "--study",
        default="",
        help="comma-separated fusion variants (bench/fusion_study.py) ranked on cached candidates, after the modes",
    )
    args = parser.parse_args()
    run = uuid.uuid4().hex[:8]
    queries = [json.loads(line) for line in (SCIFACT / "queries.jsonl").open(encoding="utf-8") if line.strip()]
    with platform(name=f"quality_{run}") as env, worker(env):
        from rest_framework.test import APIClient

        from lifecycle.services import tenant_get_or_create
        from retrieval import embeddings
        from retrieval.models import Chunk, Document, EmbeddingCacheEntry
        from retrieval.services import knowledge_base_create
        from tenants.scopes import SCOPE_ORDER
        from tenants.services import api_key_create

        tenant, _ = tenant_get_or_create(slug="bench", name="Benchmarks")
        knowledge_base = knowledge_base_create(tenant=tenant, name=f"scifact-quality-{run}")
        relevant = frozenset(str(doc_id) for query in queries for doc_id in query["relevant_doc_ids"])
        documents, seconds, counts = scifact_ingest(
            tenant=tenant, knowledge_base=knowledge_base, limit=args.corpus_limit, always=relevant
        )
        print(
            f"corpus: {documents} documents ingested in {seconds:.0f}s ({counts['indexed']} indexed, "
            f"{counts['failed']} failed)"
        )

        # An admin key: each variant sets the knowledge base's `hybrid_dense_weight` through the API (PATCH).
        _, raw_key = api_key_create(tenant=tenant, name=f"quality-{run}", scopes=SCOPE_ORDER)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
        url = f"/api/v1/knowledge-bases/{knowledge_base.pk}/search/"
        client.post(url, {"query": "warm up", "limit": 10}, format="json")

        from retrieval import vectorstore

        # (label, retrieval_mode, hybrid_dense_weight, RRF k, candidates per hit): the weight is the knowledge base's
        # setting, set through the API; k and the pool are this process's, where the endpoint runs.
        k, pool = vectorstore.RRF_K, vectorstore.HYBRID_CANDIDATES_PER_HIT
        variants = [
            ("semantic", "semantic", None, k, pool),
            ("full_text", "full_text", None, k, pool),
            ("hybrid rrf", "hybrid", None, k, pool),
        ]
        variants += [(f"hybrid rrf k={other}", "hybrid", None, other, pool) for other in args.rrf_k]
        variants += [(f"hybrid rrf pool={other}", "hybrid", None, k, other) for other in args.candidates_per_hit]
        variants += [(f"hybrid w={weight:g}", "hybrid", weight, k, pool) for weight in args.dense_weights]
        mode_rankings: dict[str, dict[str, list[str]]] = {}
        mode_latencies: dict[str, list[float]] = {}
        for label, mode, weight, rrf_k, candidates in variants:
            vectorstore.RRF_K, vectorstore.HYBRID_CANDIDATES_PER_HIT = rrf_k, candidates
            patched = client.patch(
                f"/api/v1/knowledge-bases/{knowledge_base.pk}/", {"hybrid_dense_weight": weight}, format="json"
            )
            assert patched.status_code == 200, patched.content
            rankings, latencies = {}, []
            for query in queries:
                started = time.perf_counter()
                response = client.post(
                    url, {"query": query["text"], "limit": max(KS), "retrieval_mode": mode}, format="json"
                )
                latencies.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, response.content
                assert response.json()["retrieval_mode"] == mode
                rankings[query["query_id"]] = [hit["document_external_id"] for hit in response.json()["results"]]
            mode_rankings[label], mode_latencies[label] = rankings, latencies
        vectorstore.RRF_K, vectorstore.HYBRID_CANDIDATES_PER_HIT = k, pool

        if args.study:
            # The same queries through the same endpoint, each side's candidates fetched once, fused in Python.
            from fusion_study import CandidateSearch, variant_parse

            search = CandidateSearch(vectorstore.vectors_search)
            vectorstore.vectors_search = search
            try:
                for spec in (item.strip() for item in args.study.split(",") if item.strip()):
                    search.variant = variant_parse(spec)
                    rankings, latencies = {}, []
                    for query in queries:
                        started = time.perf_counter()
                        response = client.post(
                            url, {"query": query["text"], "limit": max(KS), "retrieval_mode": "hybrid"}, format="json"
                        )
                        latencies.append((time.perf_counter() - started) * 1000)
                        assert response.status_code == 200, response.content
                        rankings[query["query_id"]] = [
                            hit["document_external_id"] for hit in response.json()["results"]
                        ]
                    mode_rankings[f"study {spec}"], mode_latencies[f"study {spec}"] = rankings, latencies
            finally:
                vectorstore.vectors_search = search.real

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

    exact_figures = summarise(exact_rankings, queries)
    print(f"queries: {len(queries)}; chunks searched: {len(chunks)}")
    print(f"{'mode':<24} {'recall@5':>9} {'recall@10':>9} {'mrr@10':>9} {'r@10/exact':>10} {'median ms':>9}")
    for label, rankings in mode_rankings.items():
        figures = summarise(rankings, queries)
        ratio = figures["recall@10"] / exact_figures["recall@10"] if exact_figures["recall@10"] else float("nan")
        print(
            f"{label:<24} {figures['recall@5']:9.4f} {figures['recall@10']:9.4f} {figures['mrr@10']:9.4f} "
            f"{ratio:10.3f} {statistics.median(mode_latencies[label]):9.1f}"
        )
    print(
        f"{'exact cosine':<24} {exact_figures['recall@5']:9.4f} {exact_figures['recall@10']:9.4f} "
        f"{exact_figures['mrr@10']:9.4f} (brute force over the same vectors, best chunk per document)"
    )
    print("median ms: the search endpoint, embedding the query included")


if __name__ == "__main__":
    main()
