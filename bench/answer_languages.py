"""When the extractive answer says the knowledge base holds nothing, in the languages of the help-centre pairs written
here (bench/data/README.md), through `POST /api/v1/conversations/{id}/messages/`: how often it says so to a question
whose page the knowledge base holds (a cost), and to one whose page it does not (what it is for), in one run.

    .venv/bin/python bench/answer_languages.py [--sets faq_ja,faq_ko,faq_th,...] [--models use-multilingual-v3,...]

For each set, its pages (the pairs' second questions, an entry's title) are split in two by a seeded draw: the
knowledge base holds one half; the questions (first questions) of that half are covered, the other half's are not,
and ask about the same kind of thing in the same words and domain as the covered ones (the hardest questions to
answer nothing to: a help centre's missing page). A knowledge base is made through the API on each of --models with
the set's analyser (`english`, or the language's own for the Latin-script sets) and its pages uploaded through the
bulk API and the worker; each question is the first turn of a conversation of its own (no earlier turn, no
exclusion). A reply is "nothing" when it is `NOTHING_FOUND` (in any reply language) with no source shown. A set with
a check batch of the same language (`faq_th` and `faq_th_check`, ...) is also asked that batch's questions, and the
batch the first one's: they are about other services (airlines, clinics, utilities, ... against a shop's, a bank's and
a mobile operator's help centre), the "other domain" column.

Prints per set and model: covered asked and answered nothing, not covered asked and answered nothing (the higher the
better), other domain likewise, and on stderr the covered questions answered nothing. The database is SQLite under
var/bench unless DATABASE_URL is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
import zlib

import numpy as np
from common import (
    answered_nothing_replies,
    conversation_start,
    documents_through_api,
    knowledge_base_through_api,
    load_average,
    platform,
    tenant_api_client,
    turn_ask,
    worker,
)
from faq_retrieval import SETS

SEED = 20261207
MODELS = ("use-multilingual-v3", "all-MiniLM-L6-v2")
ANALYZER_OF = {
    "faq_es": "spanish",
    "faq_fr": "french",
    "faq_de": "german",
    "faq_pt": "portuguese",
    "faq_it": "italian",
    "faq_nl": "dutch",
    "faq_tr": "turkish",
    "faq_pl": "polish",
    "faq_id": "indonesian",
    "faq_sv": "swedish",
    "faq_da": "danish",
    "faq_no": "norwegian",
    "faq_fi": "finnish",
    "faq_hu": "hungarian",
    "faq_ro": "romanian",
    "faq_cs": "czech",
    "faq_ca": "catalan",
    "faq_sr": "serbian",
}
WRITTEN = [name for name in SETS if name.startswith("faq_")]


def _lines(name: str) -> list[str]:
    return [line for line in SETS[name].read_text(encoding="utf-8").splitlines() if line.strip()]


def halves(name: str) -> tuple[list[dict], list[dict]]:
    """The set's pairs whose page the knowledge base holds, and the rest: a seeded draw per set, half each."""
    rows = [json.loads(line) for line in _lines(name)]
    rng = np.random.default_rng([SEED, zlib.crc32(name.encode())])
    held = set(rng.permutation(len(rows))[: len(rows) // 2].tolist())
    return [r for i, r in enumerate(rows) if i in held], [r for i, r in enumerate(rows) if i not in held]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=",".join(WRITTEN), help=f"comma-separated, of {', '.join(WRITTEN)}")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    args = parser.parse_args()
    sets = [name.strip() for name in args.sets.split(",") if name.strip()]
    if unknown := set(sets) - set(WRITTEN):
        parser.error(f"unknown sets: {', '.join(sorted(unknown))}")
    models = [model.strip() for model in args.models.split(",") if model.strip()]
    if unknown := set(models) - set(MODELS):
        parser.error(f"unknown models: {', '.join(sorted(unknown))}")
    run = uuid.uuid4().hex[:8]
    os.environ["KB_CACHE_PREFIX"] = f"bench-answer-languages-{run}"
    os.environ["KB_RATE_LIMIT"] = ""

    with platform(name=f"answer_languages_{run}") as env, worker(env):
        from django.db import connection

        nothing_replies = answered_nothing_replies()
        tenant, client = tenant_api_client(slug=f"bench-answer-languages-{run}", name="Answers in languages")
        print(f"database: {connection.vendor}; seed {SEED}; {load_average()} at the start")
        rows = []
        for name in sets:
            covered, missing = halves(name)
            analyzer = ANALYZER_OF.get(name, "english")
            for model in models:
                knowledge_base = knowledge_base_through_api(
                    tenant=tenant,
                    client=client,
                    name=f"answers-{name}-{model}",
                    embedding_model=model,
                    text_analyzer=analyzer,
                )
                documents_through_api(
                    tenant=tenant,
                    client=client,
                    knowledge_base=knowledge_base,
                    documents=[
                        {"title": f"{name}-{index}", "external_id": str(index), "text": row["question2"]}
                        for index, row in enumerate(covered)
                    ],
                    label=knowledge_base.name,
                )

                def nothing(question: str, knowledge_base=knowledge_base) -> bool:  # noqa: ANN001
                    body = turn_ask(client, conversation_start(client, knowledge_base.pk), question)
                    return body["answer"] in nothing_replies and not body["sources"]

                covered_nothing = [row["question1"] for row in covered if nothing(row["question1"])]
                missing_nothing = [row["question1"] for row in missing if nothing(row["question1"])]
                other = f"{name}_check" if f"{name}_check" in SETS else name.removesuffix("_check")
                other = other if other != name else ""
                other_questions = [json.loads(line)["question1"] for line in _lines(other)] if other else []
                other_nothing = [question for question in other_questions if nothing(question)]
                for question in covered_nothing:
                    print(f"  {name} {model} covered, answered nothing: {question!r}", file=sys.stderr)
                rows.append(
                    (
                        name,
                        model,
                        analyzer,
                        len(covered),
                        len(covered_nothing),
                        len(missing),
                        len(missing_nothing),
                        len(other_questions),
                        len(other_nothing),
                    )
                )
                print(f"  {name} {model}: done; {load_average()}", file=sys.stderr)

        header = f"{'covered: nothing':>18} {'not covered: nothing':>22} {'other domain: nothing':>22}"
        print(f"\n{'set':14} {'knowledge base':20} {'analyser':10} {header}")
        for name, model, analyzer, asked, answered, missed, refused, others, other_refused in rows:
            other_cell = f"{other_refused:>3} of {others:<3} ({other_refused / others:.2f})" if others else ""
            print(
                f"{name:14} {model:20} {analyzer:10} {answered:>3} of {asked:<3} ({answered / asked:.2f})"
                f"   {refused:>3} of {missed:<3} ({refused / missed:.2f})   {other_cell}"
            )
        covered_total = sum(row[3] for row in rows)
        print(
            f"all: covered answered nothing {sum(row[4] for row in rows)} of {covered_total}; not covered answered "
            f"nothing {sum(row[6] for row in rows)} of {sum(row[5] for row in rows)}; {load_average()} at the end"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
