"""Multi-turn replay of MTRAG over the REST API: does the platform stop repeating itself without losing recall?

Loads ../shared/data/mtrag/corpus.jsonl pre-chunked through the API (POST /api/v1/knowledge-bases/{id}/documents/
with {"chunks": [...]}: one chunk per passage, the passage's doc_id as the document, the passage_id as the chunk's
external id), indexed by a real Celery worker into a `milvus-lite server`. Then replays every conversation of
conversations.jsonl (POST /api/v1/conversations/ and .../messages/, in-process through Django's test client, on
Redis and the bench database) under several policies and prints per policy:

- repeated share: shown passages already shown in the last 5 turns of the conversation;
- repeated text: shown passages whose text was already shown, in the last 5 turns or higher in the same list (26
  texts of the corpus are held by 2 or more passages, which the share by passage id counts as new);
- recall@5: human-relevant passages of the turn that were shown;
- novel recall@5: relevant passages not shown in an earlier turn of the conversation, that were shown now;
- the same two by text ("by text"): a relevant passage counts as shown when a passage of the same text is;
- context tokens per turn (tokens of the passages handed to the answer generator; 0 for a served duplicate);
- false duplicate hits per 100 turns (MTRAG turns never repeat a question, so every served duplicate is false).

And, offline on the same questions, the follow-up guard's effect: duplicate hits inside each conversation with
and without it, for a range of thresholds.

With `--modes`, the policies (the default policy alone unless `--policies` names others) run once per retrieval mode
of the knowledge base, set through the API as a client would: `semantic`, `full_text`, `hybrid` (rank fusion) or
`hybrid:W` (weighted, W the vector side's share), all on the same corpus and Milvus in one run.

Usage: .venv/bin/python bench/conversations.py [--conversations N] [--modes semantic,full_text,hybrid,hybrid:0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from common import DATA, mode_label, modes_parse, platform, wait_indexed, worker  # noqa: E402

MTRAG = DATA / "mtrag"
REPEAT_WINDOW = 5


def policies() -> list[tuple[str, dict]]:
    """Plain retrieval, naive exclusion (every shown document left out for the whole conversation, never
    relaxed), at document and at chunk granularity, the default policy (the model's field defaults), and the
    default at document granularity."""
    from conversations.models import DedupPolicy

    default = {
        name: DedupPolicy._meta.get_field(name).get_default()
        for name in ("scope", "threshold", "exclusion_enabled", "exclusion_window", "granularity", "min_results")
    }
    default["shadow_mode"] = False
    return [
        ("plain retrieval", {**default, "scope": "off", "exclusion_enabled": False}),
        (
            "naive exclusion (doc)",
            {**default, "scope": "off", "granularity": "doc", "exclusion_window": 100, "min_results": 0},
        ),
        (
            "naive exclusion (chunk)",
            {**default, "scope": "off", "granularity": "chunk", "exclusion_window": 100, "min_results": 0},
        ),
        (f"default policy ({default['granularity']})", default),
        ("default, doc granularity", {**default, "granularity": "doc"}),
    ]


def load_corpus(client, tenant, knowledge_base_id: int) -> tuple[int, int]:  # noqa: ANN001
    """One document per MTRAG doc_id, one chunk per passage. Documents whose passages all fit the model
    (256 word pieces) go through the API pre-chunked; the ingestion refuses longer chunks (it will not truncate a
    client's chunk silently), so documents with a longer passage are written to the models directly, embedded as
    the model reads them (its first 256 word pieces). Returns (through the API, written directly)."""
    from retrieval.embeddings import max_sequence_tokens, token_counts

    by_doc: dict[str, list[dict]] = defaultdict(list)
    titles: dict[str, str] = {}
    for line in (MTRAG / "corpus.jsonl").open(encoding="utf-8"):
        row = json.loads(line)
        by_doc[row["doc_id"]].append({"text": row["text"], "external_id": row["passage_id"]})
        titles.setdefault(row["doc_id"], row.get("title") or row["doc_id"])
    limit = max_sequence_tokens() - 2  # [CLS] and [SEP]
    direct: dict[str, list[dict]] = {}
    through_api = 0
    for doc_id, chunks in by_doc.items():
        if max(token_counts([c["text"] for c in chunks])) > limit:
            direct[doc_id] = chunks
            continue
        response = client.post(
            f"/api/v1/knowledge-bases/{knowledge_base_id}/documents/",
            {"title": titles[doc_id][:500], "external_id": doc_id, "chunks": chunks},
            format="json",
        )
        if response.status_code != 202:
            raise SystemExit(f"document {doc_id}: HTTP {response.status_code} {response.content[:300]!r}")
        through_api += 1
    _write_directly(tenant=tenant, knowledge_base_id=knowledge_base_id, documents=direct, titles=titles)
    return through_api, len(direct)


def _write_directly(*, tenant, knowledge_base_id: int, documents: dict, titles: dict) -> None:  # noqa: ANN001
    import hashlib

    from retrieval.embeddings import embed_texts, token_counts
    from retrieval.models import Chunk, Document, DocumentStatus, KnowledgeBase, SourceKind
    from retrieval.services import chunk_vectors_upsert

    knowledge_base = KnowledgeBase.objects.for_tenant(tenant).get(pk=knowledge_base_id)
    rows = []
    for doc_id, chunks in documents.items():
        document = Document.objects.create(
            tenant=tenant,
            knowledge_base=knowledge_base,
            title=titles[doc_id][:500],
            external_id=doc_id,
            source_kind=SourceKind.CHUNKS,
            status=DocumentStatus.INDEXED,
            progress=1.0,
            chunk_count=len(chunks),
        )
        counts = token_counts([c["text"] for c in chunks])
        for position, (chunk, count) in enumerate(zip(chunks, counts, strict=True)):
            rows.append(
                Chunk(
                    tenant=tenant,
                    document=document,
                    knowledge_base=knowledge_base,
                    position=position,
                    text=chunk["text"],
                    token_count=count,
                    content_hash=hashlib.sha256(chunk["text"].encode()).hexdigest(),
                    external_id=chunk["external_id"],
                )
            )
    created = Chunk.objects.bulk_create(rows)
    vectors = embed_texts([c.text for c in created])
    chunk_vectors_upsert(chunks=created, vectors=vectors, dimension=knowledge_base.embedding_dimension)


def passage_texts() -> dict[str, str]:
    return {
        row["passage_id"]: row["text"]
        for row in (json.loads(line) for line in (MTRAG / "corpus.jsonl").open(encoding="utf-8"))
    }


def replay(client, knowledge_base_id: int, conversations: list[dict], texts: dict[str, str]) -> dict:  # noqa: ANN001
    from conversations.models import Turn

    turns = repeated = repeated_text = shown_total = false_hits = 0
    recall_sum = recall_n = novel_sum = novel_n = 0.0
    text_recall_sum = text_recall_n = text_novel_sum = text_novel_n = 0.0
    context_tokens = 0
    started = time.perf_counter()
    for conversation in conversations:
        response = client.post("/api/v1/conversations/", {"knowledge_base": knowledge_base_id}, format="json")
        conversation_id = response.json()["id"]
        history: list[set[str]] = []
        text_history: list[set[str]] = []
        for turn in conversation["turns"]:
            response = client.post(
                f"/api/v1/conversations/{conversation_id}/messages/", {"question": turn["question"]}, format="json"
            )
            if response.status_code != 200:
                raise SystemExit(f"turn failed: HTTP {response.status_code} {response.content[:300]!r}")
            body = response.json()
            shown = {source["external_id"] for source in body["sources"]}
            recent = set().union(*history[-REPEAT_WINDOW:]) if history else set()
            seen_before = set().union(*history) if history else set()
            repeated += len(shown & recent)
            recent_texts = set().union(*text_history[-REPEAT_WINDOW:]) if text_history else set()
            listed: set[str] = set()
            for source in body["sources"]:
                text = texts[source["external_id"]]
                repeated_text += text in recent_texts or text in listed
                listed.add(text)
            shown_total += len(shown)
            relevant = {c["passage_id"] for c in turn.get("contexts", []) if c.get("relevant")}
            if relevant:
                recall_sum += len(relevant & shown) / len(relevant)
                recall_n += 1
            novel = relevant - seen_before
            if novel:
                novel_sum += len(novel & shown) / len(novel)
                novel_n += 1
            # The same by text: a relevant passage counts as shown when a passage of its text is (MTRAG labels ids,
            # and a search shows one of two identical passages).
            relevant_texts = {texts[passage_id] for passage_id in relevant if passage_id in texts}
            if relevant_texts:
                text_recall_sum += len(relevant_texts & listed) / len(relevant_texts)
                text_recall_n += 1
            novel_texts = relevant_texts - (set().union(*text_history) if text_history else set())
            if novel_texts:
                text_novel_sum += len(novel_texts & listed) / len(novel_texts)
                text_novel_n += 1
            false_hits += body["dedup"]["action"] == "served_cached"
            context_tokens += Turn.objects.unscoped().get(pk=body["turn_id"]).context_tokens
            history.append(shown)
            text_history.append(listed)
            turns += 1
    seconds = time.perf_counter() - started
    return {
        "turns": turns,
        "repeated_share": repeated / shown_total if shown_total else 0.0,
        "repeated_text_share": repeated_text / shown_total if shown_total else 0.0,
        "recall@5": recall_sum / recall_n if recall_n else 0.0,
        "novel_recall@5": novel_sum / novel_n if novel_n else 0.0,
        "text_recall@5": text_recall_sum / text_recall_n if text_recall_n else 0.0,
        "text_novel_recall@5": text_novel_sum / text_novel_n if text_novel_n else 0.0,
        "context_tokens_per_turn": context_tokens / turns,
        "false_hits_per_100": 100 * false_hits / turns,
        "ms_per_turn": 1000 * seconds / turns,
    }


def followup_guard_study(conversations: list[dict]) -> list[tuple[float, int, int, int]]:
    """(threshold, turns, hits without the guard, hits with it) of the session-scope decision on every turn
    against the earlier turns of its own conversation (all would be false hits on MTRAG)."""
    from conversations import decisions
    from retrieval.embeddings import embed_texts

    questions = [[t["question"] for t in c["turns"]] for c in conversations]
    flat = embed_texts([q for qs in questions for q in qs])
    rows, offset = [], 0
    for qs in questions:
        rows.append(flat[offset : offset + len(qs)])
        offset += len(qs)
    results = []
    for threshold in (0.70, 0.76, 0.80, 0.85, 0.90, 0.92, 0.95):  # 0.76: the default gate
        counts = {True: 0, False: 0}
        for guard in (True, False):
            for qs, vectors in zip(questions, rows, strict=True):
                for index in range(1, len(qs)):
                    candidates = [
                        decisions.StoredQuestion(
                            turn_id=j,
                            question=qs[j],
                            vector=vectors[j],
                            conversation_id=0,
                            previous_vector=vectors[j - 1] if j else None,
                        )
                        for j in range(index)
                    ]
                    previous = vectors[index - 1]
                    if not guard:  # the same decision with the follow-up guard switched off
                        candidates = [
                            decisions.StoredQuestion(c.turn_id, c.question, c.vector, 0, previous) for c in candidates
                        ]
                    decision = decisions.duplicate_decide(
                        question=qs[index],
                        question_vector=vectors[index],
                        previous_vector=previous,
                        candidates=candidates,
                        threshold=threshold,
                    )
                    counts[guard] += decision.hit
        turns = sum(len(qs) for qs in questions)
        results.append((threshold, turns, counts[False], counts[True]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=0, help="first N conversations only (0 = all)")
    parser.add_argument("--policies", default="", help="comma-separated names of policies to run (default: all)")
    parser.add_argument(
        "--modes",
        default="",
        help="comma-separated retrieval modes to run the policies in (semantic, full_text, hybrid, hybrid:W); "
        "with it, only the default policy unless --policies names others (default: the knowledge base's mode)",
    )
    args = parser.parse_args()
    modes = modes_parse(args.modes)
    run = uuid.uuid4().hex[:8]
    os.environ["KB_CACHE_PREFIX"] = f"bench-conv-{run}"
    os.environ["KB_RATE_LIMIT"] = ""  # the corpus upload is thousands of requests a minute by design
    conversations = [json.loads(line) for line in (MTRAG / "conversations.jsonl").open(encoding="utf-8")]
    if args.conversations:
        conversations = conversations[: args.conversations]

    with platform(name=f"conv_{run}") as env, worker(env):
        from rest_framework.test import APIClient

        from conversations.services import dedup_policy_update
        from lifecycle.services import tenant_get_or_create
        from retrieval.models import KnowledgeBase
        from tenants.scopes import SCOPE_ORDER
        from tenants.services import api_key_create

        tenant, _ = tenant_get_or_create(slug=f"bench-conv-{run}", name="Conversation benchmark")
        _, raw_key = api_key_create(tenant=tenant, name="bench", scopes=SCOPE_ORDER)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")

        response = client.post(
            "/api/v1/knowledge-bases/", {"name": f"mtrag-{run}", "chunk_max_tokens": 256}, format="json"
        )
        knowledge_base_id = response.json()["id"]
        started = time.perf_counter()
        through_api, direct = load_corpus(client, tenant, knowledge_base_id)
        knowledge_base = KnowledgeBase.objects.for_tenant(tenant).get(pk=knowledge_base_id)
        counts = wait_indexed(
            tenant=tenant, knowledge_base=knowledge_base, expected=through_api + direct, label="mtrag"
        )
        print(
            f"MTRAG corpus: {through_api + direct} documents, {through_api} through the API pre-chunked, {direct} "
            f"with a passage over the model's 256 word pieces written to the models directly; indexed in "
            f"{time.perf_counter() - started:.0f}s ({counts.get('indexed', 0)} indexed, {counts.get('failed', 0)} "
            "failed)"
        )
        total_turns = sum(len(c["turns"]) for c in conversations)
        print(f"replaying {len(conversations)} conversations, {total_turns} turns, per policy")
        print()
        header = (
            f"{'policy':<28} {'repeated':>9} {'rep. text':>9} {'recall@5':>9} {'novel@5':>8} {'ctx tok/turn':>12} "
            f"{'false hits/100':>14} {'ms/turn':>8} {'by text: recall@5':>17} {'novel@5':>8}"
        )
        print(header)
        wanted = {name.strip() for name in args.policies.split(",") if name.strip()}
        chosen = [
            (name, fields)
            for name, fields in policies()
            if (name in wanted if wanted else not modes or name.startswith("default policy"))
        ]
        texts = passage_texts()
        for mode, weight in modes or [(None, None)]:
            if mode is not None:
                patched = client.patch(
                    f"/api/v1/knowledge-bases/{knowledge_base_id}/",
                    {"retrieval_mode": mode, "hybrid_dense_weight": weight},
                    format="json",
                )
                if patched.status_code != 200 or patched.json()["effective_retrieval_mode"] != mode:
                    raise SystemExit(f"mode {mode}: HTTP {patched.status_code} {patched.content[:300]!r}")
            for name, fields in chosen:
                label = name if mode is None else f"{name.split(' (')[0]} [{mode_label(mode, weight)}]"
                dedup_policy_update(tenant=tenant, **fields)
                figures = replay(client, knowledge_base_id, conversations, texts)
                print(
                    f"{label:<28} {figures['repeated_share']:>8.1%} {figures['repeated_text_share']:>8.1%} "
                    f"{figures['recall@5']:>9.3f} "
                    f"{figures['novel_recall@5']:>8.3f} {figures['context_tokens_per_turn']:>12.0f} "
                    f"{figures['false_hits_per_100']:>14.2f} {figures['ms_per_turn']:>8.0f} "
                    f"{figures['text_recall@5']:>17.3f} {figures['text_novel_recall@5']:>8.3f}"
                )

        print()
        print("follow-up guard, session scope, every turn against the earlier turns of its conversation:")
        print(f"{'threshold':>9} {'turns':>6} {'hits without guard':>19} {'with guard':>11}")
        for threshold, turns, without, with_guard in followup_guard_study(conversations):
            print(f"{threshold:>9.2f} {turns:>6} {without:>19} {with_guard:>11}")


if __name__ == "__main__":
    main()
