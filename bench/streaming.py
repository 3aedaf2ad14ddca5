"""Time to the first streamed event of a turn, beside the same turn answered as JSON, in one run.

Through the REST API (in process, as bench/turn_latency.py), on its corpus set-up (MTRAG passages, flushed and
indexed), with a local fake OpenAI-compatible answer service that waits `--llm-delay` seconds before it streams its
answer (tests/conversations/fake_llm.py). For each question, in alternating order:
- miss, JSON: a new question, the whole JSON response (search + the LLM's answer);
- miss, first event: the same kind of turn streamed, until its first event (`decision`) arrives;
- miss, first delta: ... until the first piece of the LLM's answer arrives (so after the LLM's delay);
- hit, JSON and hit, first event: the question asked again (the stored answer is served), as JSON and streamed.
Targets: a hit's first event within 5 ms of the JSON hit (paired median); a miss's first event before the answer is
generated (in every streamed miss, the first event arrives before the first piece of the answer).

Timing on a shared machine is noisy: read the medians, and the paired medians which a change of load moves less.

Usage: .venv/bin/python bench/streaming.py [--size 5000] [--samples 30] [--llm-delay 0.2]
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

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from common import DATA, platform  # noqa: E402
from turn_latency import index_ready, load_chunks, summary  # noqa: E402

MTRAG = DATA / "mtrag"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=5000)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--base-passages", type=int, default=600, help="MTRAG passages embedded for real")
    parser.add_argument("--llm-delay", type=float, default=0.2, help="seconds the fake LLM waits before answering")
    args = parser.parse_args()
    run = uuid.uuid4().hex[:8]
    os.environ["KB_CACHE_PREFIX"] = f"bench-stream-{run}"
    os.environ["KB_RATE_LIMIT"] = ""

    with platform(name=f"stream_{run}"):
        from django.db import connection
        from django.test import override_settings
        from rest_framework.test import APIClient

        from conversations.dedup.question_pairs import question_is_context_dependent
        from lifecycle.services import tenant_get_or_create
        from retrieval.embeddings import embed_texts
        from retrieval.models import KnowledgeBase
        from tenants.scopes import SCOPE_ORDER
        from tenants.services import api_key_create
        from tests.conversations.fake_llm import FakeLLM, Reply

        corpus = [json.loads(line) for line in (MTRAG / "corpus.jsonl").open(encoding="utf-8")]
        texts = [row["text"] for row in corpus][: args.base_passages]
        vectors = embed_texts(texts)
        questions = []
        for line in (MTRAG / "conversations.jsonl").open(encoding="utf-8"):
            questions.extend(turn["question"] for turn in json.loads(line)["turns"])
        # Standalone questions only: a follow-up asked twice is, by design, not a duplicate (follow-up guard).
        questions = list(dict.fromkeys(q for q in questions if not question_is_context_dependent(q)))

        tenant, _ = tenant_get_or_create(slug=f"bench-stream-{run}", name="Streaming benchmark")
        _, raw_key = api_key_create(tenant=tenant, name="bench", scopes=SCOPE_ORDER)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
        knowledge_base = KnowledgeBase.objects.create(tenant=tenant, name=f"stream-{run}")
        load_chunks(tenant=tenant, knowledge_base=knowledge_base, size=args.size, texts=texts, vectors=vectors)
        index_ready(tenant=tenant, knowledge_base=knowledge_base, vector=vectors[0])

        llm = FakeLLM(
            respond=lambda body: Reply(
                pieces=["The passages say ", "what was asked ", "[1]."], delay=args.llm_delay, piece_delay=0.01
            )
        )

        def new_conversation() -> int:
            response = client.post("/api/v1/conversations/", {"knowledge_base": knowledge_base.pk}, format="json")
            return response.json()["id"]

        def json_turn(conversation_id: int, question: str) -> tuple[float, dict]:
            started = time.perf_counter()
            response = client.post(
                f"/api/v1/conversations/{conversation_id}/messages/", {"question": question}, format="json"
            )
            elapsed = (time.perf_counter() - started) * 1000
            if response.status_code != 200:
                raise SystemExit(f"HTTP {response.status_code}: {response.content[:300]!r}")
            return elapsed, response.json()

        def streamed_turn(conversation_id: int, question: str) -> tuple[float, float | None, list[str]]:
            """(ms to the first event, ms to the first delta or None, the event names)."""
            started = time.perf_counter()
            response = client.post(
                f"/api/v1/conversations/{conversation_id}/messages/",
                {"question": question},
                format="json",
                HTTP_ACCEPT="text/event-stream",
            )
            first, first_delta, names = None, None, []
            for chunk in response.streaming_content:
                now = (time.perf_counter() - started) * 1000
                first = now if first is None else first
                name = chunk.split(b"\n", 1)[0].removeprefix(b"event: ").decode()
                if name == "delta" and first_delta is None:
                    first_delta = now
                names.append(name)
            return first, first_delta, names

        figures: dict[str, list[float]] = {
            k: [] for k in ("miss, JSON", "miss, first event", "miss, first delta", "hit, JSON", "hit, first event")
        }
        with override_settings(LLM_BASE_URL=llm.url, LLM_MODEL="fake", LLM_TIMEOUT=10):
            for question in questions[:3]:  # warm up: model, collection, intents, connections
                conversation_id = new_conversation()
                json_turn(conversation_id, question)
                streamed_turn(conversation_id, question)
            for index, question in enumerate(questions[3 : 3 + args.samples]):
                # Two conversations, one per way of asking; which goes first alternates.
                ways = ("json", "stream") if index % 2 == 0 else ("stream", "json")
                conversations = {}
                for way in ways:
                    conversations[way] = new_conversation()
                    if way == "json":
                        elapsed, body = json_turn(conversations[way], question)
                        assert body["dedup"]["action"] in ("answered", "bypassed"), body["dedup"]
                        figures["miss, JSON"].append(elapsed)
                    else:
                        first, first_delta, names = streamed_turn(conversations[way], question)
                        assert names[:2] == ["decision", "sources"] and names[-1] == "done", names
                        figures["miss, first event"].append(first)
                        figures["miss, first delta"].append(first_delta)
                time.sleep(0.05)
                for way in ways:
                    if way == "json":
                        elapsed, body = json_turn(conversations["json"], question)
                        assert body["dedup"]["action"] == "served_cached", body["dedup"]
                        figures["hit, JSON"].append(elapsed)
                    else:
                        first, _, names = streamed_turn(conversations["stream"], question)
                        assert names == ["decision", "sources", "done"], names
                        figures["hit, first event"].append(first)
        llm.close()

        print(f"database: {connection.vendor}; {args.size} chunks; fake LLM delay {args.llm_delay * 1000:.0f} ms")
        print(f"{'case':<20} {'p50 ms':>8} {'p95 ms':>8}   vs target")
        for case, values in figures.items():
            p50, p95 = summary(values)
            note = ""
            if case == "hit, first event":
                paired = statistics.median(s - j for s, j in zip(values, figures["hit, JSON"], strict=True))
                note = f"paired median {paired:+.1f} ms vs the JSON hit (target <= +5.0)"
            elif case == "miss, first event":
                # Paired per streamed turn, so machine load (which moves both) does not decide it.
                gaps = [delta - first for first, delta in zip(values, figures["miss, first delta"], strict=True)]
                ahead = sum(gap > 0 for gap in gaps)
                verdict = "met" if ahead == len(gaps) else "NOT met"
                note = (
                    f"before the answer's first delta in {ahead} of {len(gaps)} turns ({verdict}), paired median gap "
                    f"{statistics.median(gaps):+.1f} ms (the LLM waits {args.llm_delay * 1000:.0f} ms to answer)"
                )
            elif case == "miss, first delta":
                first50 = statistics.median(figures["miss, first event"])
                note = f"{p50 - first50:+.1f} ms after the first event's p50"
            print(f"{case:<20} {p50:>8.1f} {p95:>8.1f}   {note}")


if __name__ == "__main__":
    main()
