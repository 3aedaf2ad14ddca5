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
- false duplicate hits per 100 turns (MTRAG turns never repeat a question, so every served duplicate is false);
- novel recall@5 of follow-up turns (`question_is_context_dependent`, after a conversation's first turn) and of the
  others (standalone), where the modes part.

And, offline on the same questions, the follow-up guard's effect: duplicate hits inside each conversation with
and without it, for a range of thresholds.

With `--modes`, the policies (the default policy alone unless `--policies` names others) run once per retrieval mode
of the knowledge base, set through the API as a client would: `semantic`, `full_text`, `hybrid` (rank fusion) or
`hybrid:W` (weighted, W the vector side's share), all on the same corpus and Milvus in one run.

With `--split`, each row is also given on the tuning half (even-numbered conversations) and the test half (odd ones):
a fusion setting is chosen on the first and reported on the second; and, when `semantic` is among the modes, each
other mode's difference from it in novel recall@5, all turns and each half, with a paired bootstrap 95% interval
(`bench/paired_bootstrap.py`) resampled by turn and by conversation: one turn's full recall is about 0.007 of a half.
`--rrf-k 20,60` runs rank fusion once per k; `--candidates-per-hit 4,8` once per candidate pool of each side of a
hybrid request (`vectorstore.HYBRID_CANDIDATES_PER_HIT`: hits each side hands the fusion per hit asked for; Milvus Lite
never hands fewer than 3 when grouping); `--legs` adds to each `--turns-out` record the passages the dense and the
BM25 side found for the turn's first search, with its exclusions (two more searches a turn), for
`bench/mtrag_turn_diff.py`; `--study` replays fusion variants of bench/fusion_study.py (weighted rank fusion, a BM25
floor, the previous question in a follow-up's BM25 query) on candidates fetched once per query, before the modes;
`--turns-out` writes every turn's record (question, shown passages, recall figures) for a per-conversation breakdown.
`--followup asked,semantic:1` runs hybrid once per follow-up search variant (`conversations.turn.search_query`: every
turn fused, or a follow-up, and a later question of at most N content words, searched by vector alone); without it, the
shipped settings.

Usage: .venv/bin/python bench/conversations.py [--conversations N] [--modes semantic,full_text,hybrid,hybrid:0.5]
       [--split] [--rrf-k 20,60] [--candidates-per-hit 4,8] [--study rrf:60,wrrf:0.8,rrf:60+prev]
       [--turns-out turns.jsonl [--legs]] [--followup asked,semantic:1,semantic:3]
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


class LegRecorder:
    """`retrieval.vectorstore.vectors_search` wrapped for a diagnosis (`--legs`): the first grouped search of each turn
    runs as the platform sent it, and again by each side alone (dense by vector, BM25 by text) with the same filter
    and exclusions and the depth of a hybrid sub-request, so a turn record can say where each relevant passage stood
    on either side before fusion. `take` hands over (and forgets) what the last turn's first search found."""

    def __init__(self, real) -> None:  # noqa: ANN001
        self.real = real
        self.turn_legs: dict | None = None

    def __call__(self, **kwargs: object) -> list:
        from retrieval.vectorstore import FULL_TEXT, HYBRID_CANDIDATES_PER_HIT, SEMANTIC

        hits = self.real(**kwargs)
        if self.turn_legs is None and kwargs.get("group_by_document", True) and kwargs.get("full_text"):
            depth = int(kwargs["limit"]) * HYBRID_CANDIDATES_PER_HIT
            legs: dict = {"mode": kwargs.get("mode"), "fused": [hit.chunk_id for hit in hits]}
            for side, mode in (("dense", SEMANTIC), ("bm25", FULL_TEXT)):
                text = str(kwargs.get("query_text") or "")
                legs[side] = (
                    [hit.chunk_id for hit in self.real(**{**kwargs, "mode": mode, "limit": depth})]
                    if mode == SEMANTIC or text.strip()
                    else []
                )
            self.turn_legs = legs
        return hits

    def take(self) -> dict | None:
        """The last turn's legs with passage ids (the chunks' external ids) for chunk ids, or None."""
        from retrieval.models import Chunk

        legs, self.turn_legs = self.turn_legs, None
        if legs is None:
            return None
        wanted = {chunk_id for side in ("fused", "dense", "bm25") for chunk_id in legs[side]}
        external = dict(Chunk.objects.unscoped().filter(pk__in=wanted).values_list("pk", "external_id"))
        return {
            "mode": legs["mode"],
            **{side: [external.get(chunk_id, "") for chunk_id in legs[side]] for side in ("fused", "dense", "bm25")},
        }


def replay(  # noqa: ANN201
    client,  # noqa: ANN001
    knowledge_base_id: int,
    conversations: list[dict],
    texts: dict[str, str],
    before_turn=None,  # noqa: ANN001
    legs: LegRecorder | None = None,
):
    """One record per turn of every conversation (`figures_of` sums them): what was shown, what of it repeated, and the
    turn's recall figures (None where the turn has no relevant, or no novel relevant, passage). `before_turn(previous
    question or "")` is called before each turn is posted (the fusion study's hook); with `legs` installed as the
    vector store's search, each record also holds what its first search's sides found (`LegRecorder`)."""
    from conversations.dedup.question_pairs import question_is_context_dependent
    from conversations.models import Turn

    records = []
    for index, conversation in enumerate(conversations):
        response = client.post("/api/v1/conversations/", {"knowledge_base": knowledge_base_id}, format="json")
        conversation_id = response.json()["id"]
        history: list[set[str]] = []
        text_history: list[set[str]] = []
        for position, turn in enumerate(conversation["turns"]):
            if before_turn is not None:
                before_turn(conversation["turns"][position - 1]["question"] if position else "")
            if legs is not None:
                legs.take()
            started = time.perf_counter()
            response = client.post(
                f"/api/v1/conversations/{conversation_id}/messages/", {"question": turn["question"]}, format="json"
            )
            elapsed = time.perf_counter() - started
            if response.status_code != 200:
                raise SystemExit(f"turn failed: HTTP {response.status_code} {response.content[:300]!r}")
            body = response.json()
            shown = {source["external_id"] for source in body["sources"]}
            recent = set().union(*history[-REPEAT_WINDOW:]) if history else set()
            seen_before = set().union(*history) if history else set()
            recent_texts = set().union(*text_history[-REPEAT_WINDOW:]) if text_history else set()
            listed: set[str] = set()
            repeated_text = 0
            for source in body["sources"]:
                text = texts[source["external_id"]]
                repeated_text += text in recent_texts or text in listed
                listed.add(text)
            relevant = {c["passage_id"] for c in turn.get("contexts", []) if c.get("relevant")}
            novel = relevant - seen_before
            # The same by text: a relevant passage counts as shown when a passage of its text is (MTRAG labels ids,
            # and a search shows one of two identical passages).
            relevant_texts = {texts[passage_id] for passage_id in relevant if passage_id in texts}
            novel_texts = relevant_texts - (set().union(*text_history) if text_history else set())
            records.append(
                {
                    "conversation": index,
                    "turn": position,
                    "question": turn["question"],
                    "followup": bool(position) and question_is_context_dependent(turn["question"]),
                    "shown": [source["external_id"] for source in body["sources"]],
                    "novel": sorted(novel),
                    "repeated": len(shown & recent),
                    "repeated_text": repeated_text,
                    "shown_count": len(shown),
                    "recall": len(relevant & shown) / len(relevant) if relevant else None,
                    "novel_recall": len(novel & shown) / len(novel) if novel else None,
                    "text_recall": len(relevant_texts & listed) / len(relevant_texts) if relevant_texts else None,
                    "text_novel_recall": len(novel_texts & listed) / len(novel_texts) if novel_texts else None,
                    "false_hit": body["dedup"]["action"] == "served_cached",
                    "context_tokens": Turn.objects.unscoped().get(pk=body["turn_id"]).context_tokens,
                    "seconds": elapsed,
                    **({"legs": legs.take()} if legs is not None else {}),
                }
            )
            history.append(shown)
            text_history.append(listed)
    return records


def figures_of(records: list[dict]) -> dict:
    """The printed figures of a set of turn records (`replay`): shares over shown passages, recalls averaged over the
    turns that have one, per-turn means otherwise. Pure."""

    def mean_of(field: str, followup: bool | None = None) -> float:
        values = [
            record[field]
            for record in records
            if record[field] is not None and (followup is None or record["followup"] == followup)
        ]
        return sum(values) / len(values) if values else 0.0

    turns = len(records)
    shown_total = sum(record["shown_count"] for record in records)
    return {
        "turns": turns,
        "repeated_share": sum(r["repeated"] for r in records) / shown_total if shown_total else 0.0,
        "repeated_text_share": sum(r["repeated_text"] for r in records) / shown_total if shown_total else 0.0,
        "recall@5": mean_of("recall"),
        "novel_recall@5": mean_of("novel_recall"),
        "followup_novel_recall@5": mean_of("novel_recall", followup=True),
        "standalone_novel_recall@5": mean_of("novel_recall", followup=False),
        "text_recall@5": mean_of("text_recall"),
        "text_novel_recall@5": mean_of("text_novel_recall"),
        "context_tokens_per_turn": sum(r["context_tokens"] for r in records) / turns if turns else 0.0,
        "false_hits_per_100": 100 * sum(r["false_hit"] for r in records) / turns if turns else 0.0,
        "ms_per_turn": 1000 * sum(r["seconds"] for r in records) / turns if turns else 0.0,
    }


def split_of(record: dict) -> str:
    """The half of MTRAG a turn belongs to, by its conversation: even-numbered conversations tune a setting, odd ones
    test it, so a setting chosen on one half is reported on turns it was not chosen on. Pure."""
    return "tune" if record["conversation"] % 2 == 0 else "test"


def records_dump(path: str, label: str, records: list[dict]) -> None:
    """Append a replay's turn records to `path` (one JSON line each, with the row's label) as soon as it ends."""
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.writelines(json.dumps({"label": label, **record}) + "\n" for record in records)


def figures_line(label: str, figures: dict) -> str:
    return (
        f"{label:<28} {figures['repeated_share']:>8.1%} {figures['repeated_text_share']:>8.1%} "
        f"{figures['recall@5']:>9.3f} {figures['novel_recall@5']:>8.3f} {figures['context_tokens_per_turn']:>12.0f} "
        f"{figures['false_hits_per_100']:>14.2f} {figures['ms_per_turn']:>8.0f} "
        f"{figures['text_recall@5']:>17.3f} {figures['text_novel_recall@5']:>8.3f} "
        f"{figures['followup_novel_recall@5']:>18.3f} {figures['standalone_novel_recall@5']:>10.3f}"
    )


def against_semantic_lines(label: str, records: list[dict], semantic: list[dict]) -> list[str]:
    """The lines that say how far a replay's novel recall@5 is from semantic's over the same turns (`semantic`, the
    same policy's records in a semantic knowledge base, same run): the difference over all turns and each half, with
    paired bootstrap 95% intervals by turn and by conversation (`paired_bootstrap`)."""
    from paired_bootstrap import paired_bootstrap, records_paired

    lines = []
    for half in ("all", "tune", "test"):
        mine = [r for r in records if half == "all" or split_of(r) == half]
        theirs = [r for r in semantic if half == "all" or split_of(r) == half]
        base, other, conversation_of = records_paired(theirs, mine)
        by_turn = paired_bootstrap(base=base, other=other)
        by_conversation = paired_bootstrap(base=base, other=other, unit_of=conversation_of)
        lines.append(
            f"{label + ' ' + half:<40} {by_turn.difference:>+8.3f} "
            f"[{by_turn.low:+.3f}, {by_turn.high:+.3f}] ({by_turn.units} turns) "
            f"[{by_conversation.low:+.3f}, {by_conversation.high:+.3f}] ({by_conversation.units} conversations)"
        )
    return lines


def study_run(client, tenant, knowledge_base_id: int, conversations, texts, args) -> None:  # noqa: ANN001
    """The default policy replayed once per `--study` variant on the hybrid knowledge base, its search answered by
    `fusion_study.CandidateSearch` (each side's candidates fetched from Milvus once per query, fused in Python), and
    each question embedded once for all variants (the same model, the same vector)."""
    from fusion_study import CandidateSearch, variant_parse

    from conversations.services import dedup_policy_update
    from retrieval import vectorstore

    default = next(fields for name, fields in policies() if name.startswith("default policy"))
    dedup_policy_update(tenant=tenant, **default)
    patched = client.patch(
        f"/api/v1/knowledge-bases/{knowledge_base_id}/",
        {"retrieval_mode": "hybrid", "hybrid_dense_weight": None},
        format="json",
    )
    assert patched.status_code == 200, patched.content
    from conversations.turn import turns

    search = CandidateSearch(vectorstore.vectors_search)
    vectorstore.vectors_search = search
    embed_query = turns.embed_query
    vectors: dict[str, object] = {}

    def embed_once(text: str):  # noqa: ANN202
        if text not in vectors:
            vectors[text] = embed_query(text)
        return vectors[text].copy()

    turns.embed_query = embed_once
    try:
        for spec in (item.strip() for item in args.study.split(",")):
            if not spec:
                continue
            search.variant = variant_parse(spec)

            def before_turn(previous: str) -> None:
                search.previous_question = previous

            records = replay(client, knowledge_base_id, conversations, texts, before_turn=before_turn)
            label = f"study {spec}"
            records_dump(args.turns_out, label, records)
            halves = [("", records)]
            if args.split:
                halves += [(f" {half}", [r for r in records if split_of(r) == half]) for half in ("tune", "test")]
            for suffix, part in halves:
                print(figures_line(label + suffix, figures_of(part)), flush=True)
    finally:
        vectorstore.vectors_search = search.real
        turns.embed_query = embed_query


def followup_parse(spec: str) -> tuple[str, bool, int]:
    """(spec, follow-ups searched semantic, content words at most) of a `--followup` variant: `asked` (every turn in
    the knowledge base's mode) or `semantic:N` (`search_query.search_mode_choose` with N). Pure."""
    spec = spec.strip()
    if spec == "asked":
        return spec, False, 0
    kind, _, count = spec.partition(":")
    if kind != "semantic" or not count.isdigit():
        raise SystemExit(f"--followup: {spec!r} is not asked or semantic:N")
    return spec, True, int(count)


def followup_guard_study(conversations: list[dict]) -> list[tuple[float, int, int, int]]:
    """(threshold, turns, hits without the guard, hits with it) of the session-scope decision on every turn
    against the earlier turns of its own conversation (all would be false hits on MTRAG)."""
    from conversations.dedup import decisions
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
    parser.add_argument(
        "--split",
        action="store_true",
        help="also print each policy's figures on the tuning half (even-numbered conversations) and the test half",
    )
    parser.add_argument(
        "--study",
        default="",
        help="comma-separated fusion variants (bench/fusion_study.py) replayed with the default policy on cached "
        "candidate lists, after the modes",
    )
    parser.add_argument("--turns-out", default="", help="write one JSON line per replayed turn to this file")
    parser.add_argument(
        "--followup",
        default="",
        help="comma-separated follow-up search variants to run hybrid with: asked (every turn fused), semantic:N "
        "(a follow-up, or a later question of at most N content words, by vector alone); default: the shipped "
        "search_query settings",
    )
    parser.add_argument("--rrf-k", default="", help="k of rank fusion to run `hybrid` with, comma-separated")
    parser.add_argument(
        "--candidates-per-hit",
        default="",
        help="hits each side of a hybrid request hands the fusion per hit asked for, comma-separated: `hybrid` runs "
        "once per value (default: vectorstore.HYBRID_CANDIDATES_PER_HIT)",
    )
    parser.add_argument(
        "--legs",
        action="store_true",
        help="with --turns-out: record what each side found for each turn's first search (two more searches a turn)",
    )
    args = parser.parse_args()
    modes = modes_parse(args.modes)
    rrf_ks = [int(k) for k in args.rrf_k.split(",") if k.strip()]  # none: the shipped vectorstore.RRF_K
    pools = [int(n) for n in args.candidates_per_hit.split(",") if n.strip()]
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
            f"{'false hits/100':>14} {'ms/turn':>8} {'by text: recall@5':>17} {'novel@5':>8} "
            f"{'follow-ups novel@5':>18} {'standalone':>10}"
        )
        print(header)
        wanted = {name.strip() for name in args.policies.split(",") if name.strip()}
        chosen = [
            (name, fields)
            for name, fields in policies()
            if (name in wanted if wanted else not modes or name.startswith("default policy"))
        ]
        texts = passage_texts()
        if args.turns_out:
            Path(args.turns_out).write_text("", encoding="utf-8")
        if args.study:  # first: the cheap sweep, then the modes through Milvus's own fusion
            study_run(client, tenant, knowledge_base_id, conversations, texts, args)
        from retrieval import vectorstore

        shipped_k, shipped_pool = vectorstore.RRF_K, vectorstore.HYBRID_CANDIDATES_PER_HIT
        runs = []  # (mode, weight, RRF k, pool): hybrid once per --candidates-per-hit, rank fusion per --rrf-k
        for mode, weight in modes or [(None, None)]:
            ks = (rrf_ks or [shipped_k]) if mode == "hybrid" and weight is None else [shipped_k]
            mode_pools = (pools or [shipped_pool]) if mode == "hybrid" else [shipped_pool]
            runs += [(mode, weight, k, pool) for k in ks for pool in mode_pools]
        from conversations.turn import search_query

        recorder = None
        if args.legs:
            recorder = LegRecorder(vectorstore.vectors_search)
            vectorstore.vectors_search = recorder
        followups = [followup_parse(spec) for spec in args.followup.split(",") if spec.strip()] or [None]
        shipped = (search_query.FOLLOWUPS_SEARCH_SEMANTIC, search_query.FOLLOWUP_SEARCH_MAX_CONTENT_WORDS)
        semantic_records: dict[str, list[dict]] = {}  # policy -> its semantic replay, what other modes are held to
        compared: list[tuple[str, str, list[dict]]] = []  # (label, policy, records) of the other modes' replays
        for (mode, weight, rrf_k, pool), followup in [(run, followup) for run in runs for followup in followups]:
            if followup is not None and mode != "hybrid" and followup is not followups[0]:
                continue  # the variants route hybrid searches only: in another mode they search alike
            # The search runs in this process (Django's test client): the fusion's k, the candidate pool and the
            # follow-up variant are set for the run here.
            vectorstore.RRF_K = rrf_k
            vectorstore.HYBRID_CANDIDATES_PER_HIT = pool
            spec, semantic_followups, max_content_words = followup or ("", *shipped)
            search_query.FOLLOWUPS_SEARCH_SEMANTIC = semantic_followups
            search_query.FOLLOWUP_SEARCH_MAX_CONTENT_WORDS = max_content_words
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
                if mode == "hybrid" and weight is None and len(rrf_ks) > 1:
                    label = label.replace("rrf", f"rrf k={rrf_k}")
                if mode == "hybrid" and len(pools) > 1:
                    label = f"{label} pool={pool}"
                if spec and mode == "hybrid":
                    label = f"{label} {spec}"
                dedup_policy_update(tenant=tenant, **fields)
                records = replay(client, knowledge_base_id, conversations, texts, legs=recorder)
                records_dump(args.turns_out, label, records)
                if mode == "semantic":
                    semantic_records.setdefault(name, records)
                elif mode is not None:
                    compared.append((label, name, records))
                halves = [("", records)]
                if args.split:
                    halves += [(f" {half}", [r for r in records if split_of(r) == half]) for half in ("tune", "test")]
                for suffix, part in halves:
                    print(figures_line(label + suffix, figures_of(part)), flush=True)

        search_query.FOLLOWUPS_SEARCH_SEMANTIC, search_query.FOLLOWUP_SEARCH_MAX_CONTENT_WORDS = shipped
        vectorstore.RRF_K, vectorstore.HYBRID_CANDIDATES_PER_HIT = shipped_k, shipped_pool
        if recorder is not None:
            vectorstore.vectors_search = recorder.real
        if args.split and semantic_records and compared:
            print()
            print(
                "novel recall@5 minus semantic's over the same turns (same policy, same run), paired bootstrap 95% "
                "intervals (10,000 resamples) by turn and by conversation:"
            )
            for label, name, records in compared:
                if name in semantic_records:
                    for line in against_semantic_lines(label, records, semantic_records[name]):
                        print(line, flush=True)

        print()
        print("follow-up guard, session scope, every turn against the earlier turns of its conversation:")
        print(f"{'threshold':>9} {'turns':>6} {'hits without guard':>19} {'with guard':>11}")
        for threshold, turns, without, with_guard in followup_guard_study(conversations):
            print(f"{threshold:>9.2f} {turns:>6} {without:>19} {with_guard:>11}")


if __name__ == "__main__":
    main()
