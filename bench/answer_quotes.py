"""Which sentences the extractive answer quotes (`answering.sentences_chosen`), through
`POST /api/v1/conversations/{id}/messages/`, in Chinese and in English, the rule as shipped and the rule before it
(a sentence's share of the question's words first, the passage's rank only a tie-break) in one run on the same
knowledge bases.

    .venv/bin/python bench/answer_quotes.py [--modes hybrid] [--languages zh,en] [--batches first,check] [--no-mtrag]

- The demo help centre (`kbplatform/demo/help_centre_{zh,en}`, the four pages `make run` loads) on the knowledge base
  `make run` makes for each language (Chinese: use-multilingual-v3, analyser chinese; English: the bundled model),
  asked the questions written blind by customers' habits: `first`, `bench/data/help_centre_questions_{zh,en}.jsonl`
  (48 covered, 32 not), and `check`, `..._check.jsonl` (60 and 40), written after the first had been read. On those
  each page answers, each the first turn of a conversation of its own: `nothing` (answered "nothing found": a cost,
  the page holds the answer), `page first` (the first shown passage is the page that answers it: the search) and
  `quoted` (the answer's first sentence is from that page: what the customer reads first); `second`: a page's
  questions asked two at a time in one conversation, the second's share answered nothing and quoted from its page
  (the exclusion window has left out the page the first turn was shown). On those the pages do not answer: the
  share answered nothing. Beside them, the vector side alone by brute force (each question's nearest page by cosine).
- MTRAG (English, the bundled model): the 2,021 passages, one document each, and every turn of the 47 conversations
  in order whose reference answer is not a refusal. Per turn the search answered: `first relevant` (the answer's
  first sentence is from a passage the turn's annotators voted relevant), `any relevant` (one of its sentences is),
  and `reference words` (the mean share of the reference answer's content words that the answer holds).

`--modes` makes one knowledge base pair per retrieval mode (`hybrid` is rank fusion, the default of a new knowledge
base; `hybrid:W` weighted scores, W the vector side's share; `semantic`). The database is SQLite under var/bench
unless DATABASE_URL is set.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import uuid
from pathlib import Path

from common import (
    DATA,
    ROOT,
    answered_nothing_replies,
    conversation_start,
    documents_through_api,
    knowledge_base_through_api,
    load_average,
    mode_label,
    modes_parse,
    platform,
    tenant_api_client,
    turn_ask,
)
from common import worker as worker_running

QUESTIONS = ROOT / "bench" / "data"
PAGES = ROOT / "kbplatform" / "demo"
LANGUAGES = {
    "zh": ("help_centre_zh", "use-multilingual-v3", "chinese"),
    "en": ("help_centre_en", "all-MiniLM-L6-v2", "english"),
}
REFUSALS = ("don't have the answer", "do not have")
BATCHES = {"first": "", "check": "_check"}
_CITATION = re.compile(r"\[(\d+)\]")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _questions(language: str, batch: str) -> list[dict]:
    return _rows(QUESTIONS / f"help_centre_questions_{language}{BATCHES[batch]}.jsonl")


def _page(external_id: str | None) -> str:
    return Path(external_id or "").stem


def sentences_before(question, passages, count):  # noqa: ANN001, ANN201
    """The rule before `answering.sentences_chosen`, as it was: a sentence's share of the question's content words
    first, the better-ranked passage and the earlier sentence only breaking ties (0.01 a rank, 0.001 a position)."""
    from conversations.dedup.question_pairs import content_words
    from conversations.turn.answering import _quotable

    question_words = content_words(question)
    scored = []
    for rank, position, sentence in _quotable(passages):
        overlap = len(question_words & content_words(sentence)) / (len(question_words) or 1)
        scored.append((overlap - 0.01 * rank - 0.001 * position, rank, sentence))
    scored.sort(key=lambda item: -item[0])
    return [(rank, sentence) for _, rank, sentence in scored[:count]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="hybrid", help="retrieval modes, one knowledge base pair each")
    parser.add_argument("--languages", default="zh,en", help="help-centre languages, comma-separated, of zh, en")
    parser.add_argument("--batches", default="first,check", help="question batches, comma-separated, of first, check")
    parser.add_argument("--no-mtrag", action="store_true", help="leave out the MTRAG rows")
    args = parser.parse_args()
    modes = modes_parse(args.modes)
    chosen = [language for language in args.languages.split(",") if language]
    batches = [batch for batch in args.batches.split(",") if batch]
    if not modes or any(language not in LANGUAGES for language in chosen) or set(batches) - set(BATCHES):
        raise SystemExit(f"--modes names none, or --languages is not of {sorted(LANGUAGES)}, or --batches of {BATCHES}")
    run = uuid.uuid4().hex[:8]
    os.environ["KB_RATE_LIMIT"] = ""  # every question is asked at once, as no customer asks them
    with platform(name=f"answer_quotes_{run}") as env, worker_running(env):
        import numpy as np

        from conversations.dedup.question_pairs import content_words
        from conversations.turn import answering
        from retrieval.embeddings import embed_texts

        nothing_replies = answered_nothing_replies()
        tenant, client = tenant_api_client(slug=f"bench-quotes-{run}", name="Extractive answer quotes")
        print(f"{load_average()} at the start")

        def indexed(name: str, model: str, analyzer: str, mode: str, weight: float | None, documents: list[dict]):  # noqa: ANN202
            knowledge_base = knowledge_base_through_api(
                tenant=tenant,
                client=client,
                name=name,
                embedding_model=model,
                text_analyzer=analyzer,
                retrieval_mode=mode,
                hybrid_dense_weight=weight,
            )
            documents_through_api(
                tenant=tenant, client=client, knowledge_base=knowledge_base, documents=documents, label=name
            )
            return knowledge_base

        help_centres = {}
        for mode, weight in modes:
            for language in chosen:
                folder, model, analyzer = LANGUAGES[language]
                pages = [
                    {"title": path.stem, "external_id": path.name, "text": path.read_text(encoding="utf-8")}
                    for path in sorted((PAGES / folder).glob("*.md"))
                ]
                label = mode_label(mode, weight)
                help_centres[(label, language)] = indexed(f"{folder} {label}", model, analyzer, mode, weight, pages)
        mtrag_base = None
        if not args.no_mtrag:
            passages = _rows(DATA / "mtrag" / "corpus.jsonl")
            documents = [
                {"title": p.get("title") or p["doc_id"], "external_id": p["passage_id"], "text": p["text"]}
                for p in passages
            ]
            mtrag_base = indexed("mtrag", "all-MiniLM-L6-v2", "english", "hybrid", None, documents)
            conversations = [
                [
                    (turn["question"], turn["answer"], {c["passage_id"] for c in turn["contexts"] if c["relevant"]})
                    for turn in row["turns"]
                    if not any(refusal in turn["answer"].lower() for refusal in REFUSALS)
                ]
                for row in _rows(DATA / "mtrag" / "conversations.jsonl")
            ]

        def conversation(knowledge_base) -> int:  # noqa: ANN001
            return conversation_start(client, knowledge_base.pk)

        def ask(conversation_id: int, question: str) -> dict:
            return turn_ask(client, conversation_id, question)

        def quoted_sources(body: dict) -> list[str]:
            """The external ids of the passages the answer quotes, in its order."""
            sources = body["sources"]
            return [
                sources[int(number) - 1]["document_external_id"]
                for number in _CITATION.findall(body["answer"])
                if 1 <= int(number) <= len(sources)
            ]

        def reading(body: dict, page: str | None) -> tuple[bool, bool, bool]:
            """(answered nothing, first shown passage is `page`, first quoted sentence is from `page`)."""
            sources = body["sources"]
            nothing = body["answer"] in nothing_replies and not sources
            first = bool(sources) and _page(sources[0]["document_external_id"]) == page
            quotes = quoted_sources(body)
            return nothing, first, bool(quotes) and _page(quotes[0]) == page

        def share(flags: list[bool]) -> str:
            return f"{sum(flags)}/{len(flags)} ({sum(flags) / len(flags):.0%})" if flags else "-"

        lines = [
            f"{'rule':8} {'batch':6} {'lang':4} {'mode':12} {'nothing':>12} {'page first':>12} {'quoted':>12} | "
            f"second: {'nothing':>10} {'quoted':>10} | not covered: nothing"
        ]
        for batch in batches:
            for language in chosen:
                folder, model, _ = LANGUAGES[language]
                covered = [q for q in _questions(language, batch) if q["covered"]]
                paths = sorted((PAGES / folder).glob("*.md"))
                texts = embed_texts([path.read_text(encoding="utf-8") for path in paths], model=model)
                asked = embed_texts([q["question"] for q in covered], model=model)
                nearest = np.argmax(asked @ texts.T / np.linalg.norm(texts, axis=1), axis=1)
                right = [paths[index].stem == q["document"] for index, q in zip(nearest, covered, strict=True)]
                lines.append(f"{'':8} {batch:6} {language:4} {'vector only':12} {'':>12} {share(right):>12}")
        mtrag_lines = [f"{'rule':8} MTRAG turns searched  first relevant  any relevant  reference words (mean)"]

        shipped = answering.sentences_chosen
        for rule, sentences in (("before", sentences_before), ("shipped", shipped)):
            answering.sentences_chosen = sentences
            for batch in batches:
                for (label, language), knowledge_base in help_centres.items():
                    questions = _questions(language, batch)
                    covered = [q for q in questions if q["covered"]]
                    first = [reading(ask(conversation(knowledge_base), q["question"]), q["document"]) for q in covered]
                    for q, (nothing, _, quoted) in zip(covered, first, strict=True):
                        if nothing or not quoted:
                            why = "nothing" if nothing else "other page"
                            print(f"  {rule} {label} {why}: {q['id']} {q['question']}", file=sys.stderr)
                    seconds = []
                    for page in sorted({q["document"] for q in covered}):
                        of_page = [q for q in covered if q["document"] == page]
                        for one, two in zip(of_page[::2], of_page[1::2], strict=False):
                            conversation_id = conversation(knowledge_base)
                            ask(conversation_id, one["question"])
                            body = ask(conversation_id, two["question"])
                            if body["dedup"]["action"] == "answered":
                                seconds.append(reading(body, page))
                    apart = []
                    for q in questions:
                        if not q["covered"]:
                            nothing = reading(ask(conversation(knowledge_base), q["question"]), None)[0]
                            apart.append(nothing)
                            if not nothing:
                                print(f"  {rule} {label} quoted: {q['id']} {q['question']}", file=sys.stderr)
                    lines.append(
                        f"{rule:8} {batch:6} {language:4} {label:12} {share([f[0] for f in first]):>12} "
                        f"{share([f[1] for f in first]):>12} {share([f[2] for f in first]):>12} | second: "
                        f"{share([s[0] for s in seconds]):>10} {share([s[2] for s in seconds]):>10} | not covered: "
                        f"{share(apart)}"
                    )
                    print(lines[-1], file=sys.stderr)
            if mtrag_base is not None:
                first_relevant, any_relevant, recalls = [], [], []
                for turns in conversations:
                    conversation_id = conversation(mtrag_base)
                    for question, reference, relevant in turns:
                        body = ask(conversation_id, question)
                        if body["dedup"]["action"] != "answered" or not body["sources"]:
                            continue
                        quotes = quoted_sources(body)
                        first_relevant.append(bool(quotes) and quotes[0] in relevant)
                        any_relevant.append(any(quote in relevant for quote in quotes))
                        wanted = content_words(reference)
                        recalls.append(len(wanted & content_words(body["answer"])) / len(wanted) if wanted else 0.0)
                mtrag_lines.append(
                    f"{rule:8} {len(recalls):>20}  {share(first_relevant):>14}  {share(any_relevant):>12}  "
                    f"{sum(recalls) / len(recalls):.3f}"
                )
                print(mtrag_lines[-1], file=sys.stderr)
        answering.sentences_chosen = shipped
        print("\n".join(lines))
        if mtrag_base is not None:
            print("\n".join(mtrag_lines))
        print(f"{load_average()} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
