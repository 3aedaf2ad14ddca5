"""Fusion variants studied on the platform's own turn pipeline, without a Milvus search per variant.

`CandidateSearch` stands in for `retrieval.vectorstore.vectors_search` inside a benchmark process (the search
endpoint and conversation turns run in-process through Django's test client). For each query it fetches, once, a
long ungrouped list of each side's chunks (dense by vector, BM25 by text) from Milvus with the tenant's and knowledge
base's filter and no exclusions; each call then leaves out that call's excluded documents and chunks, groups what is
left by document (its best chunk: a document whose best chunk is excluded is still found by its next one, as Milvus
finds it), keeps each side's first `limit * HYBRID_CANDIDATES_PER_HIT` documents, as a hybrid request does, and fuses
them in Python by the variant under study. Everything else (the policy, the relax rule, the content
check, the answer) is the platform's. A variant is a spec string:

- `rrf:K`: reciprocal rank fusion, 1 / (K + rank) summed over the sides (Milvus's `RRFRanker(K)`); K defaults to the
  platform's (`retrieval.vectorstore.RRF_K`), here and in `wrrf`;
- `wrrf:W:K`: the same with the dense side's term weighted W and BM25's 1 - W;
- `weighted:W`: Milvus's `WeightedRanker(W, 1 - W)` with its score normalisation (cosine (1 + s) / 2, BM25
  2 atan(s) / pi), a side that did not find a chunk giving it 0;
- any of them with `+floor:F` (BM25 hits scoring below F are dropped) and `+prev` (a follow-up's BM25 query is the
  previous question and this one: `question_is_context_dependent`), or `semantic` / `full_text` alone.

Used by `bench/conversations.py --study` and `bench/retrieval_quality.py --study`. Its semantic and full-text rankings
equal the real ones (SciFact, same run); its fusion does not reproduce Milvus's closely enough to choose a setting by
(docs/ingestion.md): compare a variant with the same run's real modes before trusting it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

DEPTH = 400  # chunks fetched per side and query: enough for a hybrid sub-request's documents after any exclusion here


@dataclass(frozen=True)
class Variant:
    spec: str
    kind: str  # semantic, full_text, rrf, wrrf, weighted
    weight: float = 0.5
    k: int | None = None  # rank fusion's constant (rrf, wrrf); None where nothing is fused by rank
    floor: float = 0.0
    previous: bool = False


def variant_parse(spec: str) -> Variant:
    """A `Variant` of its spec string (see the module). Pure."""
    head, *flags = spec.split("+")
    parts = head.split(":")
    floor = 0.0
    previous = False
    for flag in flags:
        if flag.startswith("floor:"):
            floor = float(flag.split(":", 1)[1])
        elif flag == "prev":
            previous = True
        else:
            raise SystemExit(f"--study: unknown flag {flag!r} in {spec!r}")
    from retrieval.vectorstore import RRF_K

    kind = parts[0]
    common = {"spec": spec, "kind": kind, "floor": floor, "previous": previous}
    if kind in ("semantic", "full_text"):
        return Variant(**common)
    if kind == "rrf":
        return Variant(**common, k=int(parts[1]) if len(parts) > 1 else RRF_K)
    if kind == "wrrf":
        return Variant(**common, weight=float(parts[1]), k=int(parts[2]) if len(parts) > 2 else RRF_K)
    if kind == "weighted":
        return Variant(**common, weight=float(parts[1]))
    raise SystemExit(f"--study: unknown variant {spec!r}")


def fuse(*, variant: Variant, dense: list, sparse: list) -> list:
    """The hits of both sides (each best first, one per document) fused by `variant` by document, as Milvus fuses
    grouped sub-searches: a document both sides found sums both terms even when each side's best chunk of it differs
    (the dense side's chunk is the one shown). Best first. Pure."""
    scores: dict[int, float] = {}
    hit_of: dict[int, Any] = {}
    for side, hits in (("dense", dense), ("sparse", sparse)):
        for rank, hit in enumerate(hits, start=1):
            if variant.kind == "rrf":
                part = 1.0 / (variant.k + rank)
            elif variant.kind == "wrrf":
                share = variant.weight if side == "dense" else 1.0 - variant.weight
                part = share / (variant.k + rank)
            elif side == "dense":  # weighted, Milvus's normalisation
                part = variant.weight * (1.0 + hit.score) / 2.0
            else:
                part = (1.0 - variant.weight) * 2.0 * math.atan(hit.score) / math.pi
            scores[hit.document_id] = scores.get(hit.document_id, 0.0) + part
            hit_of.setdefault(hit.document_id, hit)
    return [hit_of[document_id] for document_id in sorted(scores, key=lambda document_id: -scores[document_id])]


class CandidateSearch:
    """`vectors_search`'s stand-in (see the module); `variant` and `previous_question` are set by the replay."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.cache: dict[tuple, list] = {}
        self.variant = variant_parse("rrf")
        self.previous_question = ""

    def side(self, kind: str, kwargs: dict, query_text: str) -> list:
        vector = kwargs.get("query_vector")
        key = (
            kind,
            kwargs["knowledge_base_id"],
            query_text if kind == "full_text" else tuple(round(float(x), 6) for x in vector),
        )
        if key not in self.cache:
            if kind == "full_text" and not query_text.strip():
                self.cache[key] = []
            else:
                self.cache[key] = self.real(
                    tenant_id=kwargs["tenant_id"],
                    knowledge_base_id=kwargs["knowledge_base_id"],
                    query_vector=vector,
                    limit=DEPTH,
                    dimension=kwargs["dimension"],
                    group_by_document=False,
                    mode=kind,
                    query_text=query_text,
                    analyzer=kwargs.get("analyzer", "english"),
                    full_text=kwargs.get("full_text", False),
                )
        return self.cache[key]

    def __call__(self, **kwargs: Any) -> list:
        from conversations.dedup.question_pairs import question_is_context_dependent

        if kwargs.get("metadata_filter") or not kwargs.get("group_by_document", True):
            return self.real(**kwargs)
        variant = self.variant
        excluded_documents = set(kwargs.get("exclude_document_ids") or ())
        excluded_chunks = set(kwargs.get("exclude_chunk_ids") or ())
        limit = kwargs["limit"]
        question = kwargs.get("query_text", "")
        text = question
        if variant.previous and self.previous_question and question_is_context_dependent(question):
            text = f"{self.previous_question} {question}"

        def kept(kind: str) -> list:
            hits = self.side(kind, kwargs, text if kind == "full_text" else question)
            grouped, documents = [], set()
            for hit in hits:
                if (
                    hit.document_id in excluded_documents
                    or hit.chunk_id in excluded_chunks
                    or hit.document_id in documents
                    or (kind == "full_text" and hit.score < variant.floor)
                ):
                    continue
                documents.add(hit.document_id)
                grouped.append(hit)
            return grouped

        if variant.kind == "semantic":
            return kept("semantic")[:limit]
        if variant.kind == "full_text":
            return kept("full_text")[:limit]
        from retrieval.vectorstore import HYBRID_CANDIDATES_PER_HIT

        depth = limit * HYBRID_CANDIDATES_PER_HIT
        return fuse(variant=variant, dense=kept("semantic")[:depth], sparse=kept("full_text")[:depth])[:limit]
