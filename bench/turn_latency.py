"""Latency of one conversation turn through the REST API, against the raw cost of the same work, in one run.

For each corpus size (default 5,000 and 100,000 chunks) it prints p50 and p95 of:
- raw: the question's embedding + one grouped Milvus search on the flushed, indexed collection, in the retrieval mode
  the turns search in (retrieval.embeddings.embed_query + retrieval.vectorstore.vectors_search: in hybrid, the dense
  and the BM25 search fused), i.e. what the hardware must do for any turn that retrieves;
- raw, turn depth: the same with the search the turn sends for its page (`retrieval.selectors.chunk_search`): in a
  fused mode 10 hits (the page's 5 and 5 spare for dropped passages), each side bringing 4 candidates a hit; raw
  asks 5, each side bringing 20. The miss is given against both;
- embed: the question's embedding alone;
- miss: POST /api/v1/conversations/{id}/messages/ with a question not seen before (fresh retrieval + answer);
- miss, exclusion at window 5 vs the same turns with exclusion off (5 earlier turns in the conversation), the two
  side by side for each chain of questions;
- hit: the same question asked again (the stored answer is served), and the same with
  KB_ASYNC_COMMIT_CACHED_TURNS=true (the hit's commit does not wait for PostgreSQL's disk flush);
- frame: GET /api/v1/whoami/, an authenticated request that does nothing (the API key's row, DRF, middleware, the
  client): what a turn pays around its own work. The miss line also gives what is left beyond raw at the turn's depth
  and the frame: the turn's transaction, answer, hits' rows and serialisation; the line under it, the p50 of each
  stage of the miss as the turn calls it (MISS_STAGES: the API key's row, the conversation's, the Milvus search, the
  hits' rows, the answer, the transaction and, of it, its statements' round trip).
- search, hit vectors / no vectors: the turn's search alone (`vectorstore.vectors_search`, its mode and depth), asking
  Milvus for the hits' vectors and taking their cosines to the question as the turn does (what the extractive answer's
  similarity floor reads) and not, in alternating order per question, with the paired median of the difference.
Questions the turn answers nothing (the knowledge base holds nothing on them: such an answer is never served again,
so there is no hit to time) are left out of every case and counted on stderr; the next questions take their place.
Raw, miss, embed and hit are measured side by side per question; the hit line also prints the paired median of
(hit - embed), which a change of load during the run moves less than the difference of two medians.
The database is SQLite under var/bench unless DATABASE_URL is set (PostgreSQL is what production runs).
The knowledge base searches in `--mode` (default: what a new knowledge base gets, hybrid by rank fusion); the first
line of the table says which mode every figure of the run is for.
Targets: miss within 1.3x raw, hit within embed + 10 ms (paired), exclusion within 1.2x of no exclusion.

The chunks are written to the models directly (this measures turns, not ingestion): the first 600 MTRAG passages
embedded for real, then, to reach the larger sizes, copies of them with their vectors moved by small random noise
(renormalised), so Milvus searches a dense, realistic neighbourhood rather than uniform noise. The collection is
then flushed, as an indexing run does, and searched until its index is built.

With `--against REF` the same benchmark of build REF (a git revision, e.g. the main branch before a change) runs
first, on the same data and machine, and a last table sets each case's p50 beside that build's. With `--rounds N` as
well, the two builds run N times each, alternating (earlier, this, this, earlier, ...) each in a process of its own, so
a drift of the machine during the run moves both; the table gives per case the median over rounds of each build's p50,
their ratio, and the same ratio taken against each run's own raw (raw is the same embedding and Milvus search in both
builds: that ratio reads a change of the turn's code apart from a change of the machine between two runs).

With `--modes semantic,full_text,hybrid,hybrid:0.5` (`hybrid:W`: weighted, W the vector side's share) it measures,
instead of the cases above, per retrieval mode and side by side for each question (the modes' order rotated from one
question to the next, so none always goes first): search, the question's embedding and one grouped search of the
knowledge base in that mode (what raw is for semantic), and miss, a turn of a new question on the knowledge base set to
that mode; each mode's p50 is also given as a ratio to semantic's of the same run (semantic is always measured).

`--against` runs the earlier build with its own defaults (so without `--mode`): a build from before `--mode` measured
its raw with a semantic search whatever its turns searched with, so its raw line is left out of the comparison when
the modes differ.

Usage: .venv/bin/python bench/turn_latency.py [--sizes 5000,100000] [--samples 60] [--against REF [--rounds N]]
       [--mode semantic|full_text|hybrid|hybrid:W] [--modes semantic,full_text,hybrid]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from common import (  # noqa: E402
    DATA,
    mode_label,
    modes_parse,
    planner_statistics_refresh,
    platform,
    run_build,
    server_like_client,
)

MTRAG = DATA / "mtrag"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def summary(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), percentile(values, 0.95)


def load_chunks(*, tenant, knowledge_base, size: int, texts: list[str], vectors) -> None:  # noqa: ANN001
    import numpy as np

    from retrieval.models import Chunk, Document, DocumentStatus, SourceKind
    from retrieval.services import chunk_vectors_upsert

    rng = np.random.default_rng(7)
    batch = 5000
    for start in range(0, size, batch):
        count = min(batch, size - start)
        documents = Document.objects.bulk_create(
            [
                Document(
                    tenant=tenant,
                    knowledge_base=knowledge_base,
                    title=f"doc {start + i}",
                    external_id=f"d{start + i}",
                    source_kind=SourceKind.CHUNKS,
                    status=DocumentStatus.INDEXED,
                    chunk_count=1,
                )
                for i in range(count)
            ]
        )
        rows = []
        for i, document in enumerate(documents):
            text = texts[(start + i) % len(texts)]
            rows.append(
                Chunk(
                    tenant=tenant,
                    document=document,
                    knowledge_base=knowledge_base,
                    position=0,
                    text=text,
                    token_count=len(text.split()),
                    content_hash=hashlib.sha256(f"{start + i}:{text}".encode()).hexdigest(),
                    external_id=f"c{start + i}",
                )
            )
        chunks = Chunk.objects.bulk_create(rows)
        base = np.stack([vectors[(start + i) % len(vectors)] for i in range(count)])
        if start + count > len(vectors):  # copies beyond the real passages: nearby, not identical
            noisy = base + rng.normal(0, 0.04, size=base.shape).astype(np.float32)
            base = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
        chunk_vectors_upsert(chunks=chunks, vectors=base, dimension=knowledge_base.embedding_dimension)
    planner_statistics_refresh()


def raw_search(
    *,
    tenant,  # noqa: ANN001
    knowledge_base,  # noqa: ANN001
    vector,  # noqa: ANN001
    mode: str = "semantic",
    query_text: str = "",
    dense_weight: float | None = None,
    limit: int = 5,
    hit_similarity: bool | None = None,
) -> None:
    """The one grouped, tenant-filtered search of `limit` every retrieving turn makes: raw's search (in `mode`), asking
    for the hits' cosines as the turn does when its answer reads a similarity floor (or as `hit_similarity` says)."""
    from conversations.turn.answering import answer_similarity_floor
    from retrieval import vectorstore

    vectorstore.vectors_search(
        tenant_id=tenant.pk,
        knowledge_base_id=knowledge_base.pk,
        query_vector=vector,
        limit=limit,
        dimension=knowledge_base.embedding_dimension,
        mode=mode,
        query_text=query_text,
        analyzer=knowledge_base.text_analyzer,
        full_text=True,
        dense_weight=dense_weight,
        hit_similarity=(
            answer_similarity_floor(knowledge_base.embedding_model) is not None
            if hit_similarity is None
            else hit_similarity
        ),
    )


def hit_vectors_pair(search: Callable[[bool], object], *, order: int) -> tuple[float, float]:
    """`search(hit_similarity)`, the turn's search, timed twice in `order`: asking Milvus for the hits' vectors and
    their cosines to the question (what the extractive answer's similarity floor reads) and not, as it did before.
    Nothing else differs. (ms with vectors, ms without)."""

    def timed(hit_similarity: bool) -> float:
        started = time.perf_counter()
        search(hit_similarity)
        elapsed = (time.perf_counter() - started) * 1000
        time.sleep(0.05)
        return elapsed

    if order == 0:
        with_vectors = timed(True)
        return with_vectors, timed(False)
    bare = timed(False)
    return timed(True), bare


def index_ready(*, tenant, knowledge_base, vector, timeout: float = 300) -> float:  # noqa: ANN001
    """Flush the chunk collection (as an indexing run does) and search until the index Milvus builds afterwards
    serves: the median of 10 searches stops falling. Returns the seconds it took."""
    from retrieval import vectorstore

    started = time.perf_counter()
    vectorstore.vectors_flush()

    def median_search_ms() -> float:
        timings = []
        for _ in range(10):
            begun = time.perf_counter()
            raw_search(tenant=tenant, knowledge_base=knowledge_base, vector=vector)
            timings.append((time.perf_counter() - begun) * 1000)
        return statistics.median(timings)

    previous = median_search_ms()
    while time.perf_counter() - started < timeout:
        time.sleep(2)
        current = median_search_ms()
        if current > previous * 0.8:
            break
        previous = current
    return time.perf_counter() - started


# A miss's stages, timed where the turn calls them (module attributes wrapped for the run, about a microsecond a
# call), so the miss's overhead over raw can be read against its parts in the same run: label, module, attribute.
MISS_STAGES = (
    ("API key", "tenants.authentication", "api_key_get_by_raw"),
    ("conversation", "conversations.turn.turns", "conversation_for"),
    ("search", "retrieval.vectorstore", "vectors_search"),
    ("hits' rows", "retrieval.selectors", "_hits_shown"),
    ("answer", "conversations.turn.answering", "answer_collect"),
    ("transaction", "conversations.turn.turns", "turn_persist"),
    ("its statements", "conversations.turn.turn_write", "_statements_send"),
)


class StageTimers:
    """Sums the time each of MISS_STAGES takes while `recording`, one total per stage per recorded request. Made
    once per process (`installed`): the wrappers stay, each size of the run starts new totals."""

    _installed: StageTimers | None = None

    @classmethod
    def installed(cls) -> StageTimers:
        if cls._installed is None:
            cls._installed = cls()
        cls._installed.totals = {label: [] for label, _, _ in MISS_STAGES}
        return cls._installed

    def __init__(self) -> None:
        import importlib

        self.recording = False
        self.current: dict[str, float] = {}
        self.totals: dict[str, list[float]] = {label: [] for label, _, _ in MISS_STAGES}
        for label, module_name, attribute in MISS_STAGES:
            module = importlib.import_module(module_name)
            setattr(module, attribute, self._timed(label, getattr(module, attribute)))

    def _timed(self, label: str, function):  # noqa: ANN001, ANN202
        def timed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            if not self.recording:
                return function(*args, **kwargs)
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.current[label] = self.current.get(label, 0.0) + (time.perf_counter() - started) * 1000

        return timed

    def start(self) -> None:
        self.recording, self.current = True, {}

    def stop(self) -> None:
        self.recording = False
        for label in self.totals:
            self.totals[label].append(self.current.get(label, 0.0))


def measure(client, tenant, knowledge_base, questions: list[str], samples: int) -> dict:  # noqa: ANN001
    """raw, embed, miss, hit, async hit and the exclusion cases (ms), on `knowledge_base` in its retrieval mode."""
    from django.test import override_settings

    from conversations.services import dedup_policy_update
    from conversations.turn.turns import TOP_K
    from retrieval.embeddings import embed_query
    from retrieval.selectors import first_search_limit

    # What `chunk_search` asks Milvus for a turn's page of TOP_K in the knowledge base's mode.
    turn_limit = first_search_limit(mode=knowledge_base.retrieval_mode, limit=TOP_K)

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
        return client.post("/api/v1/conversations/", {"knowledge_base": knowledge_base.pk}, format="json").json()["id"]

    # Warm up: model, Milvus collection, intents, database caches.
    for question in questions[:5]:
        post(new_conversation(), question)
    stages = StageTimers.installed()

    def turn_search(question: str, vector, limit: int, hit_similarity: bool | None = None) -> None:  # noqa: ANN001
        """The search a turn makes for `question` on the knowledge base, in its mode."""
        raw_search(
            tenant=tenant,
            knowledge_base=knowledge_base,
            vector=vector,
            mode=knowledge_base.retrieval_mode,
            query_text=question,
            dense_weight=knowledge_base.hybrid_dense_weight,
            limit=limit,
            hit_similarity=hit_similarity,
        )

    # Raw, miss, embedding alone and hit are measured side by side for each question, so a change in the
    # machine's load during the run moves all four alike.
    raw, raw_deep, embed, miss, hit, async_hit, frame = [], [], [], [], [], [], []
    searched_vectors, searched_bare = [], []
    answered_nothing, answered = 0, []
    for question in questions:
        if len(miss) == samples:
            break
        raws: dict[str, float] = {}
        for case, limit in (("raw", TOP_K), ("deep", turn_limit))[:: 1 if len(raw) % 2 == 0 else -1]:
            started = time.perf_counter()
            turn_search(question, embed_query(question), limit)
            raws[case] = (time.perf_counter() - started) * 1000
            # The same pause as before the hit below: no measured step starts on the heels of another search.
            time.sleep(0.05)
        search = functools.partial(turn_search, question, embed_query(question), turn_limit)
        with_vectors, bare = hit_vectors_pair(search, order=len(raw) % 2)

        conversation_id = new_conversation()
        stages.start()
        elapsed, body = post(conversation_id, question)
        stages.stop()
        assert body["dedup"]["action"] in ("answered", "bypassed", "smalltalk"), body["dedup"]
        if not body["sources"]:
            # Answered that the knowledge base holds nothing on it: such an answer is never served again, so the
            # question has no hit; it is left out of every case, so that each case is measured on the same questions.
            answered_nothing += 1
            continue
        answered.append(question)
        raw.append(raws["raw"])
        raw_deep.append(raws["deep"])
        searched_vectors.append(with_vectors)
        searched_bare.append(bare)
        miss.append(elapsed)

        # Milvus may still be busy with the miss's search for a moment (it runs in another process): let it settle,
        # then take the embedding alone and the hit in alternating order, so neither always goes first.
        time.sleep(0.05)
        for step in ("embed", "hit") if len(hit) % 2 == 0 else ("hit", "embed"):
            if step == "embed":
                started = time.perf_counter()
                embed_query(question)
                embed.append((time.perf_counter() - started) * 1000)
            else:
                elapsed, body = post(conversation_id, question)
                assert body["dedup"]["action"] == "served_cached", body["dedup"]
                hit.append(elapsed)
        with override_settings(ASYNC_COMMIT_CACHED_TURNS=True):
            elapsed, body = post(conversation_id, question)
        assert body["dedup"]["action"] == "served_cached", body["dedup"]
        async_hit.append(elapsed)
        # The frame every request pays around its work: the API key's row, DRF, middleware and the client.
        time.sleep(0.05)
        started = time.perf_counter()
        response = client.get("/api/v1/whoami/")
        frame.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.content[:300]

    # Exclusion at window 5: the sixth turn of a conversation, with exclusion on and off side by side for each chain
    # of questions (in alternating order, so neither always goes first), after the same pause as the miss.
    exclusion: dict[str, list[float]] = {"exclusion": [], "no exclusion": []}
    for offset in range(0, samples):
        # Of the questions answered from passages: one answered nothing consumes nothing, leaving nothing to exclude.
        chain = [answered[(offset + k) % len(answered)] for k in range(6)]
        arms = (("exclusion", True), ("no exclusion", False))
        for label, enabled in arms if offset % 2 == 0 else arms[::-1]:
            dedup_policy_update(tenant=tenant, exclusion_enabled=enabled, exclusion_window=5, scope="off")
            conversation_id = new_conversation()
            for question in chain[:5]:
                post(conversation_id, question)
            time.sleep(0.05)
            elapsed, body = post(conversation_id, chain[5])
            if enabled:
                assert body["dedup"]["excluded_count"] > 0
            exclusion[label].append(elapsed)
    dedup_policy_update(tenant=tenant, exclusion_enabled=True, scope="session")
    return {
        "raw": raw,
        "raw, turn depth": raw_deep,
        "embed": embed,
        "miss": miss,
        "hit": hit,
        "hit, async": async_hit,
        "frame": frame,
        **exclusion,
        "search, hit vectors": searched_vectors,
        "search, no vectors": searched_bare,
        "stages": stages.totals,
        "answered nothing": answered_nothing,
    }


def measure_modes(
    client,  # noqa: ANN001
    tenant,  # noqa: ANN001
    knowledge_base,  # noqa: ANN001
    questions: list[str],
    samples: int,
    modes: list[tuple[str, float | None]],
) -> dict[str, dict[str, list[float]]]:
    """Per mode label: `search` (embedding + one search in the mode) and `miss` (a new question's turn on the
    knowledge base set to the mode), in ms, measured side by side for each question."""
    from retrieval.embeddings import embed_query
    from retrieval.models import KnowledgeBase

    def mode_set(mode: str, weight: float | None) -> None:
        KnowledgeBase.objects.for_tenant(tenant).filter(pk=knowledge_base.pk).update(
            retrieval_mode=mode, hybrid_dense_weight=weight
        )

    def turn(question: str) -> float:
        conversation_id = client.post(
            "/api/v1/conversations/", {"knowledge_base": knowledge_base.pk}, format="json"
        ).json()["id"]
        started = time.perf_counter()
        response = client.post(
            f"/api/v1/conversations/{conversation_id}/messages/", {"question": question}, format="json"
        )
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            raise SystemExit(f"HTTP {response.status_code}: {response.content[:300]!r}")
        assert response.json()["dedup"]["action"] in ("answered", "bypassed", "smalltalk"), response.json()["dedup"]
        return elapsed

    # Warm up every mode: its field's index is built after the flush, and the first searches of it pay for loading.
    for mode, weight in modes:
        mode_set(mode, weight)
        for question in questions[:5]:
            raw_search(
                tenant=tenant,
                knowledge_base=knowledge_base,
                vector=embed_query(question),
                mode=mode,
                query_text=question,
                dense_weight=weight,
            )
            turn(question)
    figures = {mode_label(mode, weight): {"search": [], "miss": []} for mode, weight in modes}
    for index, question in enumerate(questions[:samples]):
        for mode, weight in modes[index % len(modes) :] + modes[: index % len(modes)]:
            label = mode_label(mode, weight)
            started = time.perf_counter()
            raw_search(
                tenant=tenant,
                knowledge_base=knowledge_base,
                vector=embed_query(question),
                mode=mode,
                query_text=question,
                dense_weight=weight,
            )
            figures[label]["search"].append((time.perf_counter() - started) * 1000)
            time.sleep(0.05)  # as in `measure`: let milvus-lite's after-search work settle before the turn's search
            mode_set(mode, weight)
            figures[label]["miss"].append(turn(question))
            time.sleep(0.05)
    mode_set("semantic", None)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="5000,100000")
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--base-passages", type=int, default=600, help="MTRAG passages embedded for real")
    parser.add_argument("--against", metavar="REF", help="also run this benchmark of git revision REF, first")
    parser.add_argument(
        "--rounds", type=int, default=1, help="with --against: run each build this many times, alternating (see above)"
    )
    parser.add_argument("--modes", default="", help="search and miss per retrieval mode, against semantic (see above)")
    parser.add_argument(
        "--mode", default="", help="the knowledge base's retrieval mode, for turns and raw alike (default: a new one's)"
    )
    args = parser.parse_args()
    modes = modes_parse(args.modes)
    chosen = modes_parse(args.mode)
    if len(chosen) > 1 or (chosen and modes):
        raise SystemExit("--mode takes one mode, and not with --modes")
    if chosen and args.against:
        # REF runs with its own defaults: its turns search as a new knowledge base does there.
        raise SystemExit("--against compares in the mode a new knowledge base gets: run it without --mode")
    if modes and ("semantic", None) not in modes:
        modes.insert(0, ("semantic", None))
    if modes and args.against:
        raise SystemExit("--modes compares the modes of this build: run it without --against")
    if args.rounds > 1:
        if not args.against:
            raise SystemExit("--rounds alternates this build with --against REF: name REF")
        interleaved(args)
        return
    earlier = None
    if args.against:
        own = ["--sizes", args.sizes, "--samples", str(args.samples), "--base-passages", str(args.base_passages)]
        earlier_printed = run_build(args.against, "turn_latency.py", own)
        earlier = table_parse(earlier_printed)
        earlier_mode = mode_line_parse(earlier_printed)
    run = uuid.uuid4().hex[:8]
    os.environ["KB_CACHE_PREFIX"] = f"bench-lat-{run}"
    os.environ["KB_RATE_LIMIT"] = ""
    sizes = [int(s) for s in args.sizes.split(",")]

    with platform(name=f"lat_{run}"):
        from django.conf import settings

        from lifecycle.services import tenant_get_or_create
        from retrieval.embeddings import embed_texts
        from retrieval.models import KnowledgeBase
        from tenants.scopes import SCOPE_ORDER
        from tenants.services import api_key_create

        corpus = [json.loads(line) for line in (MTRAG / "corpus.jsonl").open(encoding="utf-8")]
        texts = [row["text"] for row in corpus][: args.base_passages]
        started = time.perf_counter()
        vectors = embed_texts(texts)
        print(f"embedded {len(texts)} MTRAG passages in {time.perf_counter() - started:.0f}s")
        questions = []
        for line in (MTRAG / "conversations.jsonl").open(encoding="utf-8"):
            questions.extend(turn["question"] for turn in json.loads(line)["turns"])
        # Standalone questions only: asking a follow-up twice is, by design, not a duplicate (follow-up guard).
        from conversations.dedup.question_pairs import question_is_context_dependent

        questions = list(dict.fromkeys(q for q in questions if not question_is_context_dependent(q)))

        tenant, _ = tenant_get_or_create(slug=f"bench-lat-{run}", name="Latency benchmark")
        _, raw_key = api_key_create(tenant=tenant, name="bench", scopes=SCOPE_ORDER)
        client = server_like_client()
        client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")

        from django.db import connection

        print(f"database: {connection.vendor}; cache hits commit asynchronously: {settings.ASYNC_COMMIT_CACHED_TURNS}")
        print()
        if modes:
            print(
                f"{'chunks':>7} {'mode':<14} {'search p50':>10} {'p95':>8} {'miss p50':>9} {'p95':>8}   "
                "p50 vs semantic (search, miss)"
            )
        else:
            print(f"{'chunks':>7} {'case':<16} {'p50 ms':>8} {'p95 ms':>8}   vs target")
        ours: dict[tuple[int, str], float] = {}
        mode_of_run = None
        for size in sizes:
            knowledge_base = KnowledgeBase.objects.create(tenant=tenant, name=f"lat-{size}-{run}")
            if chosen:
                knowledge_base.retrieval_mode, knowledge_base.hybrid_dense_weight = chosen[0]
                knowledge_base.save(update_fields=["retrieval_mode", "hybrid_dense_weight"])
            if not modes and mode_of_run is None:
                mode_of_run = mode_label(knowledge_base.retrieval_mode, knowledge_base.hybrid_dense_weight)
                print(f"{MODE_LINE}{mode_of_run}")
            started = time.perf_counter()
            load_chunks(tenant=tenant, knowledge_base=knowledge_base, size=size, texts=texts, vectors=vectors)
            print(f"{size:>7} loaded in {time.perf_counter() - started:.0f}s", file=sys.stderr)
            waited = index_ready(tenant=tenant, knowledge_base=knowledge_base, vector=vectors[0])
            print(f"{size:>7} flushed and indexed in {waited:.0f}s", file=sys.stderr)
            if modes:
                by_mode = measure_modes(client, tenant, knowledge_base, questions, args.samples, modes)
                semantic_search, _ = summary(by_mode["semantic"]["search"])
                semantic_miss, _ = summary(by_mode["semantic"]["miss"])
                for label, cases in by_mode.items():
                    search50, search95 = summary(cases["search"])
                    miss50, miss95 = summary(cases["miss"])
                    print(
                        f"{size:>7} {label:<14} {search50:>10.1f} {search95:>8.1f} {miss50:>9.1f} {miss95:>8.1f}   "
                        f"{search50 / semantic_search:.2f}x, {miss50 / semantic_miss:.2f}x"
                    )
                continue
            figures = measure(client, tenant, knowledge_base, questions, args.samples)
            print(
                f"{size:>7} {figures['answered nothing']} questions left out: answered nothing (never served again, so "
                "no hit to time)",
                file=sys.stderr,
            )
            raw50, raw95 = summary(figures["raw"])
            deep50, _ = summary(figures["raw, turn depth"])
            embed50, _ = summary(figures["embed"])
            off50, _ = summary(figures["no exclusion"])
            frame50, _ = summary(figures["frame"])
            cases = (
                "raw",
                "raw, turn depth",
                "search, no vectors",
                "search, hit vectors",
                "embed",
                "frame",
                "miss",
                "hit",
                "hit, async",
                "no exclusion",
                "exclusion",
            )
            for case in cases:
                p50, p95 = summary(figures[case])
                note = ""
                if case == "frame":
                    note = "GET /api/v1/whoami/: the API key, DRF, middleware and the client around a turn's work"
                elif case == "miss":
                    note = (
                        f"{p50 / raw50:.2f}x raw p50 (target <= 1.30); {p50 / deep50:.2f}x raw at the turn's depth; "
                        f"beyond that raw and the frame {p50 - deep50 - frame50:+.1f} ms"
                    )
                elif case == "hit":
                    paired = statistics.median(h - e for h, e in zip(figures["hit"], figures["embed"], strict=True))
                    note = f"{p50 - embed50:+.1f} ms vs embed p50; paired median {paired:+.1f} ms (target <= +10.0)"
                elif case == "hit, async":
                    note = f"{p50 - embed50:+.1f} ms vs embed p50 (KB_ASYNC_COMMIT_CACHED_TURNS=true: no flush wait)"
                elif case == "exclusion":
                    note = f"{p50 / off50:.2f}x no exclusion p50 (target <= 1.20)"
                elif case == "search, no vectors":
                    note = "the turn's search alone, asking no vector of its hits (the build before)"
                elif case == "search, hit vectors":
                    bare = figures["search, no vectors"]
                    paired = statistics.median(v - b for v, b in zip(figures[case], bare, strict=True))
                    note = (
                        f"{p50 / summary(bare)[0]:.2f}x without; paired median {paired:+.2f} ms "
                        "(the hits' vectors, for the answer's similarity floor)"
                    )
                print(f"{size:>7} {case:<16} {p50:>8.1f} {p95:>8.1f}   {note}")
                ours[(size, case)] = p50
                if case == "miss":
                    parts = ", ".join(f"{label} {statistics.median(t):.1f}" for label, t in figures["stages"].items())
                    print(f"{'':>7} {'':<16} {'':>8} {'':>8}   the miss's stages, p50 ms: {parts}")
        if earlier is not None:
            print()
            print(f"p50 against {args.against} (run first, same data and machine)")
            same_raw = earlier_mode == mode_of_run
            if not same_raw:
                print(
                    f"({args.against}'s raw is embedding + a {earlier_mode} search, this run's a {mode_of_run} one: "
                    "raw is left out; its turns search as a new knowledge base does there)"
                )
            print(f"{'chunks':>7} {'case':<16} {'this':>8} {args.against[:10]:>10}   ratio")
            for (size, case), p50 in ours.items():
                if case == "raw" and not same_raw:
                    continue
                if (size, case) in earlier:
                    before = earlier[(size, case)]
                    print(f"{size:>7} {case:<16} {p50:>8.1f} {before:>10.1f}   {p50 / before:.2f}x")


def interleaved(args: argparse.Namespace) -> None:
    """Run this build and build `args.against` `args.rounds` times each, alternating, each in a process of its own,
    and print per case the medians over rounds of each build's p50, their ratio, and the ratio of each case to its own
    run's raw (the same work in both builds), paired by round."""
    import subprocess

    own = ["--sizes", args.sizes, "--samples", str(args.samples), "--base-passages", str(args.base_passages)]
    runs: dict[str, list[dict[tuple[int, str], float]]] = {"this": [], "earlier": []}
    modes: set[str] = set()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for round_number in range(args.rounds):
        order = ("earlier", "this") if round_number % 2 == 0 else ("this", "earlier")
        for which in order:
            if which == "earlier":
                printed = run_build(args.against, "turn_latency.py", own)
            else:
                print(f"[this build] running bench/turn_latency.py {' '.join(own)}", file=sys.stderr, flush=True)
                printed = subprocess.run(
                    [sys.executable, __file__, *own], cwd=BENCH.parent, stdout=subprocess.PIPE, text=True, check=True
                ).stdout
            runs[which].append(table_parse(printed))
            modes.add(mode_line_parse(printed))
            print(f"round {round_number + 1}, {which}: done", file=sys.stderr, flush=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if len(modes) > 1:
        print(f"the builds' raw searched in different modes ({', '.join(sorted(modes))}): the ratio vs raw is moot")
    print(f"p50 medians over {args.rounds} alternating rounds of each build against {args.against}")
    header = f"{'chunks':>7} {'case':<16} {'this':>8} {args.against[:10]:>10}"
    print(f"{header}   ratio   ratio vs own raw (paired by round)")
    for key in runs["this"][0]:
        if not all(key in table for table in runs["this"] + runs["earlier"]):
            continue
        size, case = key
        this = statistics.median(table[key] for table in runs["this"])
        before = statistics.median(table[key] for table in runs["earlier"])
        relative = statistics.median(
            (mine[key] / mine[(size, "raw")]) / (theirs[key] / theirs[(size, "raw")])
            for mine, theirs in zip(runs["this"], runs["earlier"], strict=True)
        )
        print(f"{size:>7} {case:<16} {this:>8.1f} {before:>10.1f}   {this / before:.2f}x   {relative:.2f}x")


MODE_LINE = "retrieval mode of the turns and of raw: "


def mode_line_parse(printed: str) -> str:
    """The mode a run's raw searched in: its MODE_LINE, or semantic for a build from before the line (whose raw
    searched the vectors only, whatever its turns did)."""
    for line in printed.splitlines():
        if line.startswith(MODE_LINE):
            return line[len(MODE_LINE) :].strip()
    return "semantic"


def table_parse(printed: str) -> dict[tuple[int, str], float]:
    """p50 by (chunks, case) from the table this benchmark prints (any build of it)."""
    found = {}
    for line in printed.splitlines():
        match = re.match(r"^\s*(\d+) (\S.*?)\s+(\d+\.\d)\s+(\d+\.\d)(?:\s|$)", line)
        if match:
            found[(int(match.group(1)), match.group(2).strip())] = float(match.group(3))
    return found


if __name__ == "__main__":
    main()
