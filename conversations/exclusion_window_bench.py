"""The exclusion-window load test behind `manage.py exclusion_window_bench`: what the search a turn runs costs, and
what it still returns, when the exclusion list is as long as each window size would make it.

A long `not in` list can push Milvus off its graph index (into brute force over the filtered rows) and can starve a
turn of results, so the window a deployment may use depends on its own scale and data. The test only reads: it
replays questions through `retrieval.selectors.chunk_search` (the grouped, tenant-filtered search of the turn path,
chunk rows joined), never through a turn, so no Turn, ConsumedItem or DedupEvent row is written.

The exclusion list of window `w` for a question is the one `decisions.excluded_ids` gives a conversation that spent
its last `w` turns on that question's topic (a drill-down): turn 1 showed the question's best `TOP_K` results, each
later turn the best ones the earlier turns had not shown, as exclusion makes a turn do. That is a conversation's
realistic worst case: its list is as long as the window allows, and every id on it is one the search would
otherwise return, so exclusion bites and the starvation of results shows. Unrelated earlier turns would give a list
as long but of ids the search would not have returned anyway, which costs Milvus the same filter and costs the
results nothing.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, TextIO

from conversations.dedup import decisions
from conversations.models import Granularity
from conversations.selectors import knowledge_base_recent_questions
from retrieval.embeddings import embed_query
from retrieval.models import KnowledgeBase
from retrieval.selectors import ChunkHit, chunk_search, chunk_texts_sample
from tenants.models import Tenant

WINDOW_MAX = 100  # the largest exclusion window a policy accepts
NO_EXCLUSION = 0  # the window of the baseline search, measured alongside every size
QUESTION_CHARS = 200  # a chunk text used as a question: its first words, about a question's length

# --- pure ---------------------------------------------------------------------------------------------------------


def windows_parse(text: str) -> list[int]:
    """The window sizes of a comma-separated list ("1,5,10"), ascending, each once. Raises ValueError saying what is
    wrong: a size that is not a whole number, or one outside 1..WINDOW_MAX (the policy's bounds)."""
    sizes = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            size = int(part)
        except ValueError:
            raise ValueError(f"{part!r} is not a whole number of turns") from None
        if not 1 <= size <= WINDOW_MAX:
            raise ValueError(
                f"{size} is outside 1..{WINDOW_MAX} (the policy's bounds; no exclusion is always measured)"
            )
        sizes.add(size)
    if not sizes:
        raise ValueError("no window size given")
    return sorted(sizes)


def question_of_chunk(text: str, *, max_chars: int = QUESTION_CHARS) -> str:
    """A chunk text cut to about a question's length, at a word boundary when there is one."""
    text = " ".join(text.split())
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars]
    return cut.rsplit(" ", 1)[0] if " " in cut else cut


class ShownItem(NamedTuple):
    chunk_id: int
    document_id: int
    content_hash: str


def window_exclusion(
    *, shown_turns: Sequence[Sequence[ShownItem]], window: int, granularity: str
) -> tuple[list[int], set[str]]:
    """The ids (of `granularity`) and the content hashes the turn after `shown_turns` leaves out with exclusion
    window `window`: what `decisions.excluded_ids` and the turn path's excluded texts give when those turns are the
    conversation's latest (the last one last). Window NO_EXCLUSION leaves out nothing."""
    if window == NO_EXCLUSION or not shown_turns:
        return [], set()
    consumed = [
        decisions.ConsumedRef(kind, item_id, number)
        for number, items in enumerate(shown_turns, start=1)
        for item in items
        for kind, item_id in ((Granularity.DOC, item.document_id), (Granularity.CHUNK, item.chunk_id))
    ]
    next_turn = len(shown_turns) + 1

    def ids_of(kind: str) -> list[int]:
        return decisions.excluded_ids(consumed=consumed, granularity=kind, next_turn_number=next_turn, window=window)

    chunk_ids = set(ids_of(Granularity.CHUNK))
    hashes = {item.content_hash for items in shown_turns for item in items if item.chunk_id in chunk_ids}
    return ids_of(granularity), hashes


def search_rounds(*, windows: Sequence[int], rounds: int, seed: int = 0) -> list[list[int]]:
    """`rounds` orders of the window sizes and NO_EXCLUSION, each shuffled: every size is searched once per round,
    at a place in it that changes, so a change of load during the run falls on every size alike."""
    shuffle = random.Random(seed)
    orders = []
    for _ in range(rounds):
        order = [NO_EXCLUSION, *windows]
        shuffle.shuffle(order)
        orders.append(order)
    return orders


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank `q` quantile (0..1) of `values`, which must not be empty."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclass(frozen=True)
class WindowFigures:
    window: int  # NO_EXCLUSION for the baseline
    excluded_mean: float  # ids on the exclusion list, on average over the questions
    excluded_max: int
    p50_ms: float
    p95_ms: float
    p50_ratio: float  # p50 over the baseline's p50
    results_mean: float  # results the search returned, on average
    relaxed_share: float  # searches that left fewer than the policy's minimum: the turn would search again, unexcluded


@dataclass
class _Samples:
    excluded: list[int]
    milliseconds: list[float]
    results: list[int]
    relaxed: int = 0


def figures_of(samples: dict[int, _Samples]) -> list[WindowFigures]:
    """One row per window size, the baseline first, from the samples of every size."""
    baseline = percentile(samples[NO_EXCLUSION].milliseconds, 0.5)
    rows = []
    for window in sorted(samples):
        sample = samples[window]
        p50 = percentile(sample.milliseconds, 0.5)
        rows.append(
            WindowFigures(
                window=window,
                excluded_mean=sum(sample.excluded) / len(sample.excluded),
                excluded_max=max(sample.excluded),
                p50_ms=p50,
                p95_ms=percentile(sample.milliseconds, 0.95),
                p50_ratio=p50 / baseline if baseline > 0 else float("nan"),
                results_mean=sum(sample.results) / len(sample.results),
                relaxed_share=sample.relaxed / len(sample.milliseconds),
            )
        )
    return rows


# --- reading and searching ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayQuestions:
    questions: list[str]
    stored: int  # how many are questions of the tenant's turns of the knowledge base (they come first)
    sampled: int  # how many are chunk texts of the knowledge base, cut to a question's length


def replay_questions(*, tenant: Tenant, knowledge_base: KnowledgeBase, count: int, seed: int = 0) -> ReplayQuestions:
    """`count` questions to replay: the knowledge base's latest distinct stored questions, newest first, topped up
    with sampled chunk texts when it has fewer (a knowledge base no one has asked much yet)."""
    stored = knowledge_base_recent_questions(tenant=tenant, knowledge_base_id=knowledge_base.pk, limit=count)
    sampled: list[str] = []
    if len(stored) < count:
        texts = chunk_texts_sample(tenant=tenant, knowledge_base=knowledge_base, count=count - len(stored), seed=seed)
        sampled = [question for question in (question_of_chunk(text) for text in texts) if question]
    return ReplayQuestions(questions=stored + sampled, stored=len(stored), sampled=len(sampled))


@dataclass(frozen=True)
class BenchSettings:
    windows: list[int]
    granularity: str  # Granularity: what the exclusion list names
    results_per_turn: int  # what a turn asks the search for (and shows)
    min_results: int  # below this the turn relaxes exclusion
    repeats: int  # searches of each size per question
    seed: int = 0


def _bar(*, total: int, desc: str, unit: str, stream: TextIO | None):  # noqa: ANN202
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=stream, disable=stream is None)


def exclusion_window_bench_run(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    questions: Sequence[str],
    query_model_identity: str,
    bench: BenchSettings,
    progress: TextIO | None = None,
) -> list[WindowFigures]:
    """Embed each question once, build each window's exclusion list by a drill-down (see the module), then time the
    search of every size, interleaved (`search_rounds`: per question, `bench.repeats` shuffled rounds); a progress
    bar on `progress` when given. Only the search is timed, as a turn runs it (`chunk_search`: Milvus and the join
    with the chunk rows); the lists are built before. Reads only. Raises what `chunk_search` raises:
    VectorStoreUnavailable, EmbeddingModelMismatchError."""
    with _bar(total=len(questions), desc="embedding", unit="question", stream=progress) as bar:
        vectors = []
        for question in questions:
            vectors.append(embed_query(question))
            bar.update()

    text_of = {id(vector): question for vector, question in zip(vectors, questions, strict=True)}

    def search(vector: Sequence[float], excluded: list[int], hashes: set[str]) -> list[ChunkHit]:
        return chunk_search(
            tenant=tenant,
            knowledge_base=knowledge_base,
            query_vector=vector,
            query_text=text_of[id(vector)],  # the knowledge base's retrieval mode may rank by its words too
            query_model_identity=query_model_identity,
            limit=bench.results_per_turn,
            exclude_document_ids=excluded if bench.granularity == Granularity.DOC else None,
            exclude_chunk_ids=excluded if bench.granularity == Granularity.CHUNK else None,
            exclude_content_hashes=hashes,
        )

    deepest = max(bench.windows)
    exclusions: list[dict[int, tuple[list[int], set[str]]]] = []  # per question: window -> (ids, hashes)
    with _bar(total=len(vectors) * deepest, desc="drill-downs", unit="search", stream=progress) as bar:
        for vector in vectors:
            shown: list[list[ShownItem]] = []
            while len(shown) < deepest:
                excluded, hashes = window_exclusion(shown_turns=shown, window=deepest, granularity=bench.granularity)
                hits = search(vector, excluded, hashes)
                shown.append([ShownItem(hit.chunk_id, hit.document_id, hit.content_hash) for hit in hits])
                bar.update()
                if not hits:  # nothing left to show: the later turns of the drill-down show nothing either
                    bar.update(deepest - len(shown))
                    shown += [[] for _ in range(deepest - len(shown))]
            exclusions.append(
                {
                    window: window_exclusion(shown_turns=shown[:window], window=window, granularity=bench.granularity)
                    for window in (NO_EXCLUSION, *bench.windows)
                }
            )

    samples = {window: _Samples([], [], []) for window in (NO_EXCLUSION, *bench.windows)}
    plan = [
        (vector, by_window, order)
        for number, (vector, by_window) in enumerate(zip(vectors, exclusions, strict=True))
        for order in search_rounds(windows=bench.windows, rounds=bench.repeats, seed=bench.seed + number)
    ]
    with _bar(total=len(plan) * len(samples), desc="searching", unit="search", stream=progress) as bar:
        for vector, by_window, order in plan:
            for window in order:
                excluded, hashes = by_window[window]
                started = time.perf_counter()
                hits = search(vector, excluded, hashes)
                elapsed = (time.perf_counter() - started) * 1000
                sample = samples[window]
                sample.excluded.append(len(excluded))
                sample.milliseconds.append(elapsed)
                sample.results.append(len(hits))
                sample.relaxed += bool(excluded) and decisions.exclusion_relaxes(
                    result_count=len(hits), min_results=bench.min_results, wanted=bench.results_per_turn
                )
                bar.update()
    return figures_of(samples)
