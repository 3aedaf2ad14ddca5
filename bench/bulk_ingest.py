"""Bulk upload against one request per document: the SciFact corpus sent through the REST API both ways, in one run,
to the same Celery worker, Redis (broker and rate limiter) and `milvus-lite server`.

    .venv/bin/python bench/bulk_ingest.py [--limit N] [--batch N]

Bulk: `POST /api/v1/knowledge-bases/{id}/documents/bulk/` with `--batch` documents a request (KB_BULK_DOCUMENTS_MAX
by default). Per document: `POST /api/v1/knowledge-bases/{id}/documents/` once per document, under the tenant's rate
limit (KB_RATE_LIMIT, 1,200/min by default, burst KB_RATE_LIMIT_BURST): a 429 is counted and the request sent again
after its Retry-After, as a well-behaved client would. Each path has a tenant of its own (its own budget and embedding
cache, so neither is served the other's vectors) and is timed from its first request until every document is indexed
or failed. Requests go through Django's whole stack (middleware, authentication, throttle, views) in this process, by
DRF's test client: no HTTP server, so the figures leave out the network and a WSGI server's parsing.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

from common import SCIFACT, _beir_text, beir_corpus, platform, wait_indexed, worker


def _client(tenant):  # noqa: ANN001, ANN202
    from rest_framework.test import APIClient

    from tenants.scopes import Scope
    from tenants.services import api_key_create

    _, raw_key = api_key_create(tenant=tenant, name=f"bench-{uuid.uuid4().hex[:6]}", scopes=[Scope.INGEST])
    client = APIClient(HTTP_HOST="localhost")
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
    return client


def _send(client, url: str, payload: dict) -> tuple[object, int]:  # noqa: ANN001
    """POST until it is not a 429, sleeping each Retry-After; (response, 429s met)."""
    refused = 0
    while True:
        response = client.post(url, payload, format="json")
        if response.status_code != 429:
            return response, refused
        refused += 1
        time.sleep(float(response.headers.get("Retry-After", "1")))


def _path_run(*, name: str, documents: list[dict], batch: int | None, run: str) -> dict:
    from lifecycle.services import tenant_get_or_create
    from retrieval.services import knowledge_base_create

    tenant, _ = tenant_get_or_create(slug=f"bench-{name}-{run}", name=f"Bench {name}")
    knowledge_base = knowledge_base_create(tenant=tenant, name=f"scifact-{name}")
    client = _client(tenant)
    requests = refused = refused_items = 0
    started = time.perf_counter()
    if batch:
        url = f"/api/v1/knowledge-bases/{knowledge_base.pk}/documents/bulk/"
        for start in range(0, len(documents), batch):
            response, met = _send(client, url, {"documents": documents[start : start + batch]})
            assert response.status_code == 202, response.content[:500]
            requests, refused = requests + 1 + met, refused + met
            refused_items += response.json()["failed"]
    else:
        url = f"/api/v1/knowledge-bases/{knowledge_base.pk}/documents/"
        for document in documents:
            response, met = _send(client, url, document)
            requests, refused = requests + 1 + met, refused + met
            refused_items += response.status_code != 202
    sent = time.perf_counter() - started
    counts = wait_indexed(tenant=tenant, knowledge_base=knowledge_base, expected=len(documents), label=name)
    return {
        "name": name,
        "requests": requests,
        "refused": refused,
        "refused_items": refused_items,
        "sent_seconds": sent,
        "total_seconds": time.perf_counter() - started,
        "counts": counts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N corpus documents")
    parser.add_argument("--batch", type=int, default=None, help="documents per bulk request (KB_BULK_DOCUMENTS_MAX)")
    args = parser.parse_args()
    run = uuid.uuid4().hex[:8]
    rows = beir_corpus(SCIFACT / "corpus.jsonl", args.limit)
    documents = [
        {"title": row.get("title") or row["_id"], "external_id": str(row["_id"]), "text": _beir_text(row)}
        for row in rows
    ]
    with platform(name=f"bulk_{run}") as env:
        from django.conf import settings

        from lifecycle.services import tenant_get_or_create
        from retrieval.services import document_create, knowledge_base_create

        batch = args.batch or settings.BULK_DOCUMENTS_MAX
        with worker(env):
            warm_tenant, _ = tenant_get_or_create(slug=f"bench-warm-{run}", name="Bench warm-up")
            warm_kb = knowledge_base_create(tenant=warm_tenant, name="warm")
            document_create(tenant=warm_tenant, knowledge_base=warm_kb, text="warm up")
            wait_indexed(tenant=warm_tenant, knowledge_base=warm_kb, expected=1, label="warm-up")
            results = [
                _path_run(name="bulk", documents=documents, batch=batch, run=run),
                _path_run(name="single", documents=documents, batch=None, run=run),
            ]
        print(
            f"documents {len(documents)}; rate limit {settings.RATE_LIMIT_DEFAULT or 'none'} "
            f"(burst {settings.RATE_LIMIT_BURST}); bulk: {batch} documents a request and a task; single: one "
            "request and one task a document"
        )
    print(f"{'path':<8} {'requests':>9} {'429s':>6} {'refused':>8} {'upload s':>9} {'indexed s':>10} {'docs/s':>8}")
    for result in results:
        counts = result["counts"]
        print(
            f"{result['name']:<8} {result['requests']:>9} {result['refused']:>6} {result['refused_items']:>8} "
            f"{result['sent_seconds']:>9.1f} {result['total_seconds']:>10.1f} "
            f"{len(documents) / result['total_seconds']:>8.1f}   "
            f"({counts['indexed']} indexed, {counts['failed']} failed)"
        )
    bulk, single = results
    print(f"single/bulk wall time   {single['total_seconds'] / bulk['total_seconds']:.2f}x")
    print(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
