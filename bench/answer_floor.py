"""When the extractive answer says the knowledge base holds nothing (`ExtractiveAnswerGenerator.answerable`), through
`POST /api/v1/conversations/{id}/messages/`: how often it says so to questions the knowledge base covers (a cost) and
to questions it does not (what it is for), on an English knowledge base (the bundled model) and a Chinese one (the
multilingual model, analyser chinese), in one run.

    .venv/bin/python bench/answer_floor.py [--limit N] [--faq-pairs 800] [--without-floor] [--list-quoted]

- English knowledge bases: the MTRAG passages (`mtrag/corpus.jsonl`, one document per passage), once on each offered
  model (the bundled one, and use-multilingual-v3, which reads English too). Covered: every turn
  of the MTRAG conversations whose reference answer is not a refusal, asked in its own conversation's order (the
  exclusion window and its relax rule at work, as in production). Not covered: the SciFact claims (biomedical
  research, which MTRAG's Wikipedia, finance, government and IBM Cloud passages hardly touch), each the first turn
  of a conversation of its own; beside them, QQP's first questions (general questions, some of which the Wikipedia
  passages do cover: a mixed row) and LCQMC's (Chinese, which the bundled model reads as unknown pieces).
- Chinese knowledge base: an FAQ of bq's duplicate pairs (second questions as the documents, as bench/faq_retrieval.py
  makes it). Covered: their first questions. Not covered: OPPO's (a voice assistant's chat and commands) and LCQMC's
  (general questions) first questions; beside them, QQP's English ones (another language: quoted when the model
  read them).

Prints per row the questions asked, the share answered "nothing" (`NOTHING_FOUND`, or `NOTHING_NEW` when the
exclusion window left passages out, in any reply language; no source shown), and, for the covered rows, the share of
turns the relax rule searched again without the window (`relaxed`), and beside them what a floor on the vector side's
similarity would read: the 10th, 50th and 90th percentile of each question's best cosine to a document of the
knowledge base (brute force over the documents' texts whole, with the knowledge base's model). The covered questions
answered nothing are listed on stderr. Every question row is a seeded sample where --limit cuts it. The database is
SQLite under var/bench unless DATABASE_URL is set.

The turns run with the shipped similarity floors (`answering.ANSWER_SIMILARITY_FLOORS`). `--without-floor` runs them
with a floor of -1 on every model (no passage is under it, and every turn still reads its passages' cosines, which a
turn with no floor does not ask a hybrid search for) and prints, per model, what each floor on the nearest shown
passage's cosine would add, on two halves of every row, and the floor the choosing rule picks from half 0 of the MTRAG
covered turns alone (`floor_choice`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import uuid
import zlib

import numpy as np
from common import (
    DATA,
    answered_nothing_replies,
    conversation_start,
    documents_through_api,
    knowledge_base_through_api,
    load_average,
    platform,
    tenant_api_client,
    turn_ask,
)
from common import worker as worker_running
from dedup_languages import askable
from embedding_multilingual import PAIR_SETS, SEED, faq_split, pairs_read, pairs_sampled
from floor_choice import COVERED_COST, FLOORS, Turn, floor_chosen, share_answered_nothing

REFUSALS = ("don't have the answer", "do not have")
MODELS = ("all-MiniLM-L6-v2", "use-multilingual-v3")
# A floor under every cosine: the turn reads its passages' cosines and answers as with no floor.
NO_FLOOR = -1.0


def _rows(path) -> list[dict]:  # noqa: ANN001
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _sample(items: list, limit: int, name: str) -> list:
    if not limit or len(items) <= limit:
        return items
    return random.Random(zlib.crc32(f"{SEED}-{name}".encode())).sample(items, limit)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=300, help="questions per row not covered (0 = all)")
    parser.add_argument("--faq-pairs", type=int, default=800, help="bq duplicate pairs of the Chinese FAQ")
    parser.add_argument(
        "--without-floor",
        action="store_true",
        help="answer with no similarity floor (the shipped and the deployment's emptied in this process) and print "
        "what each floor would do, and the one the choosing rule picks",
    )
    parser.add_argument(
        "--list-quoted", action="store_true", help="list on stderr the questions not covered that were quoted anyway"
    )
    args = parser.parse_args()
    run = uuid.uuid4().hex[:8]
    os.environ["KB_CACHE_PREFIX"] = f"bench-floor-{run}"
    os.environ["KB_RATE_LIMIT"] = ""

    conversations = []
    for row in _rows(DATA / "mtrag" / "conversations.jsonl"):
        turns = [(turn["question"], not any(r in turn["answer"].lower() for r in REFUSALS)) for turn in row["turns"]]
        conversations.append(turns)
    passages = _rows(DATA / "mtrag" / "corpus.jsonl")
    claims = [row["text"] for row in _rows(DATA / "scifact" / "queries.jsonl")]

    def first_questions(name: str) -> list[str]:
        return _sample(sorted({pair.first for pair in pairs_read(PAIR_SETS[name])}), args.limit, name)

    duplicates = [pair for pair in pairs_read(PAIR_SETS["bq"]) if pair.duplicate]
    rng = np.random.default_rng([SEED, zlib.crc32(b"bq")])
    faq_queries, faq_documents, _ = faq_split(pairs_sampled(duplicates, args.faq_pairs or None, rng))

    with platform(name=f"floor_{run}") as env, worker_running(env):
        from django.conf import settings
        from django.db import connection

        from conversations.turn import answering

        if args.without_floor:
            # Neither the shipped floors nor a deployment's (ANSWER_SIMILARITY_FLOORS in the environment): a floor of
            # -1, the lowest cosine, which no passage is under. A turn with no floor at all would not ask for its
            # passages' cosines (a hybrid search's hits have none then), and the report needs them on every turn.
            answering.ANSWER_SIMILARITY_FLOORS.clear()
            settings.ANSWER_SIMILARITY_FLOORS = {model: NO_FLOOR for model in MODELS}
        floors = {
            model: answering.answer_similarity_floor(model)
            for model in MODELS
            if answering.answer_similarity_floor(model) not in (None, NO_FLOOR)
        }
        print(f"similarity floors: {floors or 'none'}")

        nothing_replies = answered_nothing_replies()

        tenant, client = tenant_api_client(slug=f"bench-floor-{run}", name="Answer floor")
        print(f"database: {connection.vendor}; seed {SEED}; {load_average()} at the start")

        def conversation(knowledge_base) -> int:  # noqa: ANN001
            return conversation_start(client, knowledge_base.pk)

        left_out: list[str] = []

        def ask(conversation_id: int, question: str) -> dict | None:
            """The turn's body; None for a question the API would refuse (`dedup_languages.askable`: a stray control
            character), which is counted and left out. Any refusal of another question ends the run."""
            if not askable(question):
                left_out.append(question)
                return None
            return {**turn_ask(client, conversation_id, question), "question": question}

        from retrieval.embeddings import embed_texts

        rows: list[tuple[str, str, int, float, float | None, tuple[float, float, float]]] = []
        # Per knowledge base's model, per row: (label, covered, [(question, answered nothing, nearest shown passage's
        # cosine)]).
        nearness: dict[str, list[tuple[str, bool, list[tuple[str, bool, float | None]]]]] = {}

        def unit(vectors: np.ndarray) -> np.ndarray:
            return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

        def best_cosines(questions: list[str], documents: np.ndarray, model: str) -> tuple[float, float, float]:
            """p10, p50 and p90 of each question's best cosine to a document of the knowledge base, by brute force over
            the documents' texts whole: what a floor on the vector side's similarity would read."""
            best = (unit(embed_texts(questions, model=model)) @ documents.T).max(axis=1)
            return tuple(float(value) for value in np.percentile(best, [10, 50, 90]))

        def row(
            knowledge_base: str, label: str, bodies: list[dict | None], covered: bool, vectors: tuple[np.ndarray, str]
        ) -> None:
            searched = [body for body in bodies if body is not None and body["dedup"]["action"] == "answered"]
            answered_nothing = [body for body in searched if body["answer"] in nothing_replies and not body["sources"]]
            nothing = len(answered_nothing)
            if covered:
                for body in answered_nothing:
                    print(f"    nothing: {body['question'][:100]!r}", file=sys.stderr)
            elif args.list_quoted:
                for body in searched:
                    if body not in answered_nothing:
                        quoted = body["answer"].replace("\n", " ")[:80]
                        print(f"    quoted: {body['question'][:60]!r} -> {quoted!r}", file=sys.stderr)
            relaxed = sum(1 for body in searched if body["dedup"]["relaxed"]) / len(searched) if covered else None
            cosines = best_cosines([body["question"] for body in searched], *vectors)
            rows.append((knowledge_base, label, len(searched), nothing / len(searched), relaxed, cosines))
            nearness.setdefault(vectors[1], []).append(
                (
                    label,
                    covered,
                    [
                        (
                            body["question"],
                            body in answered_nothing,
                            nearest(body),
                        )
                        for body in searched
                    ],
                )
            )
            print(f"  {label}: {len(searched)} searched, {nothing} nothing; {load_average()}", file=sys.stderr)

        def nearest(body: dict) -> float | None:
            """The cosine of the question to the nearest passage the turn showed (None when it showed none)."""
            known = [source["similarity"] for source in body["sources"] if source["similarity"] is not None]
            return max(known, default=None)

        def singles(knowledge_base, questions: list[str]) -> list[dict | None]:  # noqa: ANN001
            return [ask(conversation(knowledge_base), question) for question in questions]

        def english(model: str, name: str, *, chinese_row: bool) -> None:
            """The MTRAG passages in a knowledge base of `model`, asked the covered turns and the rows not covered."""
            knowledge_base = knowledge_base_through_api(tenant=tenant, client=client, name=name, embedding_model=model)
            documents_through_api(
                tenant=tenant,
                client=client,
                knowledge_base=knowledge_base,
                documents=[
                    {"title": p.get("title") or p["doc_id"], "external_id": p["passage_id"], "text": p["text"]}
                    for p in passages
                ],
                label=name,
            )
            print(f"English knowledge base: {len(passages)} MTRAG passages ({model})")
            vectors = (unit(embed_texts([passage["text"] for passage in passages], model=model)), model)
            covered: list[dict | None] = []
            for turns in conversations:
                conversation_id = conversation(knowledge_base)
                covered += [ask(conversation_id, question) for question, answerable in turns if answerable]
            label = f"English (MTRAG, {model[:8]})"
            row(label, "MTRAG turns with an answer (covered)", covered, True, vectors)
            row(label, "SciFact claims (not covered)", singles(knowledge_base, claims), False, vectors)
            row(label, "QQP questions (mixed)", singles(knowledge_base, first_questions("qqp")), False, vectors)
            if chinese_row:
                lcqmc = first_questions("lcqmc")
                row(label, "LCQMC questions (Chinese, unread)", singles(knowledge_base, lcqmc), False, vectors)

        claims = _sample(claims, args.limit, "scifact")
        english("all-MiniLM-L6-v2", "mtrag", chinese_row=True)
        english("use-multilingual-v3", "mtrag-use", chinese_row=False)
        lcqmc = first_questions("lcqmc")

        chinese = knowledge_base_through_api(
            tenant=tenant, client=client, name="bq-faq", embedding_model="use-multilingual-v3", text_analyzer="chinese"
        )
        documents_through_api(
            tenant=tenant,
            client=client,
            knowledge_base=chinese,
            documents=[
                {"title": f"bq-{index}", "external_id": str(index), "text": text}
                for index, text in enumerate(faq_documents)
            ],
            label="bq-faq",
        )
        print(f"Chinese knowledge base: {len(faq_documents)} bq FAQ entries ({chinese.embedding_model})")
        faq = (unit(embed_texts(faq_documents, model=chinese.embedding_model)), chinese.embedding_model)
        row("Chinese (bq FAQ)", "bq first questions (covered)", singles(chinese, faq_queries), True, faq)
        row("Chinese (bq FAQ)", "OPPO questions (not covered)", singles(chinese, first_questions("oppo")), False, faq)
        row("Chinese (bq FAQ)", "LCQMC questions (not covered)", singles(chinese, lcqmc), False, faq)
        row("Chinese (bq FAQ)", "QQP questions (English, read)", singles(chinese, first_questions("qqp")), False, faq)

        print()
        print(
            f"{'knowledge base':18} {'questions':36} {'asked':>6} {'nothing':>8} {'relaxed':>8}  "
            "best cosine p10 / p50 / p90"
        )
        for knowledge_base, label, count, nothing, relaxed, (p10, p50, p90) in rows:
            shown = f"{relaxed:>8.3f}" if relaxed is not None else f"{'':>8}"
            print(
                f"{knowledge_base:18} {label:36} {count:>6} {nothing:>8.3f} {shown}  {p10:.3f} / {p50:.3f} / {p90:.3f}"
            )
        print(f"questions the API would refuse as invalid (left out): {len(left_out)}")
        if args.without_floor:
            print()
            _floor_report(nearness)
        print(f"{load_average()} at the end")
        return 0


def _floor_report(nearness: dict[str, list[tuple[str, bool, list[Turn]]]]) -> None:
    """Per model, what a floor on the nearest shown passage's cosine would add to answering nothing, on each half of
    every row, and the floor `floor_choice.floor_chosen` picks from half 0 of the MTRAG covered turns alone."""
    for model, model_rows in nearness.items():
        print(f"{model}: share answered nothing at each floor (half 0 / half 1); the floor is chosen on MTRAG half 0")
        fit = next((items for label, covered, items in model_rows if covered and label.startswith("MTRAG")), None)
        chosen = floor_chosen(fit) if fit is not None else None
        print(f"  {'questions':38} {'no floor':>13}" + "".join(f"{floor:>13.3f}" for floor in FLOORS))
        for label, _, items in model_rows:
            cells = [
                "/".join(f"{share_answered_nothing(items, floor=floor, half=half):.3f}" for half in (0, 1))
                for floor in (None, *FLOORS)
            ]
            print(f"  {label[:38]:38} " + "".join(f"{cell:>13}" for cell in cells))
        print(f"  chosen on MTRAG half 0 (cost <= {COVERED_COST}): {chosen}")


if __name__ == "__main__":
    sys.exit(main())
