"""Paired A/B of this build's hit-path changes against the code they replaced, in one process, for a machine whose
speed drifts between runs: per question and arm, a fresh conversation, a miss, 50 ms, the embedding alone and the hit
in alternating order, then an asynchronous hit; the arms swap the changes in and out between questions.

    DATABASE_URL=postgres://... .venv/bin/python bench/turn_path_ab.py [--questions N] [--chunks N]
        [--change all|prepared-reads]

Arm `old`: a turn's reads through the queryset machinery, compiled on every turn (the conversation with its knowledge
base by `select_related`, the cited chunks' rows and a search's hits' rows by `values_list`), a Redis client made for
each use, and the transaction's batch bound by psycopg (which splits a query that long again on every call). Arm
`new`: what ships: each read a statement written once per process (`kbplatform.row_reads`), one Redis client per
process, the batch's SQL split once per process (`turn_write._batch_query`), the reads prepared on the connection
(`kbplatform.db.postgresql`'s `prepared_cursor`). `--change prepared-reads` swaps only the last: the reads bound on
the client and planned on every request (DATABASE_PREPARE_THRESHOLD off) against what ships. Prints each arm's median
hit and asynchronous hit over the embedding alone, the miss, and the paired median differences.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import turn_latency as tl
from common import platform


def arms(change: str) -> dict:
    import redis
    from django.conf import settings
    from django.db import connection

    from conversations.turn import conversations, sources, state
    from conversations.turn import turn_write as tw
    from kbplatform import redis_client
    from retrieval import selectors

    row_get, values_by_keys = conversations.row_get, sources.values_by_keys
    shared_client, batch_send = state.redis_connection, tw._statements_send

    def client_each_time() -> redis.Redis:
        return redis.Redis(connection_pool=redis_client._pool(settings.REDIS_URL))

    def bound_by_psycopg(*, connection, statements):  # noqa: ANN001, ANN202
        with connection.cursor() as cursor:
            cursor.execute("; ".join(sql for sql, _ in statements), [v for _, values in statements for v in values])

    def queryset_row_get(*, model, related=(), equal):  # noqa: ANN001, ANN202
        return model.objects.unscoped().filter(**equal).select_related(*related).first()

    def queryset_values(*, model, columns, keys, equal, true=()):  # noqa: ANN001, ANN202
        if not keys:
            return []
        return list(
            model.objects.unscoped()
            .filter(pk__in=list(keys), **equal, **dict.fromkeys(true, True))
            .values_list(*columns)
        )

    options = connection.settings_dict["OPTIONS"]
    threshold = options.get("prepare_threshold")
    if threshold is None:
        raise SystemExit("DATABASE_PREPARE_THRESHOLD is off: the new arm would prepare nothing")

    def reads_prepared(prepared: bool) -> None:
        options["prepare_threshold"] = threshold if prepared else None

    if change == "prepared-reads":
        return {"old": lambda: reads_prepared(False), "new": lambda: reads_prepared(True)}

    def old() -> None:
        reads_prepared(False)
        conversations.row_get, sources.values_by_keys, selectors.values_by_keys = (
            queryset_row_get,
            queryset_values,
            queryset_values,
        )
        state.redis_connection, tw._statements_send = client_each_time, bound_by_psycopg

    def new() -> None:
        reads_prepared(True)
        conversations.row_get = row_get
        sources.values_by_keys, selectors.values_by_keys = values_by_keys, values_by_keys
        state.redis_connection, tw._statements_send = shared_client, batch_send

    return {"old": old, "new": new}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=120)
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--change", choices=("all", "prepared-reads"), default="all", help="what the arms swap")
    args = parser.parse_args()
    run = uuid.uuid4().hex[:8]
    os.environ["KB_CACHE_PREFIX"] = f"bench-ab-{run}"
    os.environ["KB_RATE_LIMIT"] = ""
    with platform(name=f"ab_{run}"):
        from django.test import override_settings
        from rest_framework.test import APIClient

        from conversations.dedup.question_pairs import question_is_context_dependent
        from lifecycle.services import tenant_get_or_create
        from retrieval.embeddings import embed_query, embed_texts
        from retrieval.models import KnowledgeBase
        from tenants.scopes import SCOPE_ORDER
        from tenants.services import api_key_create

        corpus = [json.loads(line) for line in (tl.MTRAG / "corpus.jsonl").open(encoding="utf-8")]
        texts = [row["text"] for row in corpus][:300]
        vectors = embed_texts(texts)
        questions = []
        for line in (tl.MTRAG / "conversations.jsonl").open(encoding="utf-8"):
            questions.extend(turn["question"] for turn in json.loads(line)["turns"])
        questions = list(dict.fromkeys(q for q in questions if not question_is_context_dependent(q)))
        tenant, _ = tenant_get_or_create(slug=f"bench-ab-{run}", name="Turn path A/B")
        _, raw_key = api_key_create(tenant=tenant, name="bench", scopes=SCOPE_ORDER)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
        knowledge_base = KnowledgeBase.objects.create(tenant=tenant, name=f"ab-{run}")
        tl.load_chunks(tenant=tenant, knowledge_base=knowledge_base, size=args.chunks, texts=texts, vectors=vectors)
        tl.index_ready(tenant=tenant, knowledge_base=knowledge_base, vector=vectors[0])
        swaps = arms(args.change)

        def post(conversation_id: int, question: str) -> tuple[float, dict]:
            started = time.perf_counter()
            response = client.post(
                f"/api/v1/conversations/{conversation_id}/messages/", {"question": question}, format="json"
            )
            elapsed = (time.perf_counter() - started) * 1000
            if response.status_code != 200:
                raise SystemExit(f"HTTP {response.status_code}: {response.content[:300]!r}")
            return elapsed, response.json()

        def new_conversation() -> int:
            body = {"knowledge_base": knowledge_base.pk}
            return client.post("/api/v1/conversations/", body, format="json").json()["id"]

        for question in questions[:5]:
            post(new_conversation(), question)
        results = {arm: {"hit": [], "async": [], "miss": []} for arm in swaps}
        for number, question in enumerate(questions[: args.questions]):
            order = list(swaps) if number % 2 == 0 else list(swaps)[::-1]
            for arm in order:
                swaps[arm]()
                conversation_id = new_conversation()
                miss, _ = post(conversation_id, question)
                results[arm]["miss"].append(miss)
                time.sleep(0.05)
                pair = {}
                for step in ("embed", "hit") if number % 2 == 0 else ("hit", "embed"):
                    if step == "embed":
                        started = time.perf_counter()
                        embed_query(question)
                        pair["embed"] = (time.perf_counter() - started) * 1000
                    else:
                        pair["hit"], body = post(conversation_id, question)
                        assert body["dedup"]["action"] == "served_cached", body["dedup"]
                with override_settings(ASYNC_COMMIT_CACHED_TURNS=True):
                    asynchronous, body = post(conversation_id, question)
                results[arm]["hit"].append(pair["hit"] - pair["embed"])
                results[arm]["async"].append(asynchronous - pair["embed"])
        names = list(swaps)
        for arm in names:
            figures = results[arm]
            print(
                f"{arm:5} hit over the embedding {statistics.median(figures['hit']):6.2f} ms, async hit "
                f"{statistics.median(figures['async']):6.2f}, miss {statistics.median(figures['miss']):6.2f}"
            )
        for case in ("hit", "async", "miss"):
            differences = [b - a for a, b in zip(results[names[0]][case], results[names[1]][case], strict=True)]
            print(f"paired new - old, {case}: median {statistics.median(differences):+.2f} ms over {len(differences)}")
        print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
