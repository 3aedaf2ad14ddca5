"""English requests to repeat or re-explain, as users type them, through the turn's own intent call: named right, and
ordinary questions not taken for them.

The mission's bypasses are "show me that again" and "explain differently". A request the turn does not recognise is
searched as a question ("Can you explain that differently?" finds whatever shares its words) and may even be served a
stored answer; a question the turn takes for such a request is answered with the previous topic's passages instead of
its own. Both are measured here, on phrasings written by this project's team (`bench/data/intents_en.jsonl`, the
development batch; `bench/data/intents_en_check.jsonl`, the check batch, committed before any rule was made from the
other; `bench/data/README.md`): per batch, the requests named their intent (`repeat`, `elaborate`), and the questions
about something ("Can you explain the refund policy?", "Why was I charged again?") left `other`. Then every English
user question of the shared sets (QQP and PAWS-QQP sampled, MTRAG's user turns): how many name a built-in intent, and
which.

Each question goes through the turn's calls: the tenant's intents as a turn loads them (`policy.turn_settings_load`),
the question embedded by the knowledge base's model (`embed_texts`, as `embed_query` does it), and its intent as the
turn decides it (`judge.question_intent`), for the bundled model (an English knowledge base) and the multilingual one.
The build before a change is measured by running this same file on it.

Usage: .venv/bin/python bench/intents_english.py [--sample 5000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The shared sets of English user questions (`intents_languages.shared_questions` also reads the Chinese ones).
ENGLISH_SETS = ("qqp", "paws_qqp", "mtrag")
BATCHES = {
    "development": ROOT / "bench" / "data" / "intents_en.jsonl",
    "check": ROOT / "bench" / "data" / "intents_en_check.jsonl",
    "check 2": ROOT / "bench" / "data" / "intents_en_check_2.jsonl",
    "check 3": ROOT / "bench" / "data" / "intents_en_check_3.jsonl",
    "check 4": ROOT / "bench" / "data" / "intents_en_check_4.jsonl",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=5000, help="QQP and PAWS-QQP questions each")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "bench"))
    from common import load_average, platform
    from intents_languages import shared_questions

    with platform(name="intents_en"):
        from conversations.turn.judge import question_intent
        from conversations.turn.policy import TurnSettings, turn_settings_load
        from lifecycle.services import tenant_get_or_create
        from retrieval.embeddings import USE_MODEL_NAME, embed_texts, primary_model

        tenant, _ = tenant_get_or_create(slug="bench-intents-en", name="bench intents en")
        print(f"load {load_average()}")
        for model in (primary_model(), USE_MODEL_NAME):
            settings = turn_settings_load(tenant=tenant, model=model)

            def intents_of(questions: list[str], model: str = model, settings: TurnSettings = settings) -> list[str]:
                vectors = embed_texts(questions, model=model)
                return [
                    question_intent(
                        question=q, question_vector=v, turn_settings=settings, readable=None, embedding=model
                    )[0]
                    for q, v in zip(questions, vectors, strict=True)
                ]

            print(f"\nmodel {model}")
            for batch, path in BATCHES.items():
                rows = [json.loads(line) for line in path.open()]
                got = intents_of([r["text"] for r in rows])
                figures = []
                for intent in ("greeting", "thanks", "repeat", "elaborate"):
                    if not any(r["intent"] == intent for r in rows):
                        continue
                    wanted = [g for g, r in zip(got, rows, strict=True) if r["intent"] == intent]
                    figures.append(f"{intent} {sum(g == intent for g in wanted)} of {len(wanted)}")
                others = [g for g, r in zip(got, rows, strict=True) if r["intent"] == "other"]
                figures.append(f"questions taken for an intent {sum(g != 'other' for g in others)} of {len(others)}")
                print(f"  {batch:12s} " + "; ".join(figures))
                for g, r in zip(got, rows, strict=True):
                    if g != r["intent"]:
                        print(f"      {r['text']!r}: {g} (wanted {r['intent']})")
            started = time.perf_counter()
            for name, questions in shared_questions(args.sample).items():
                if name not in ENGLISH_SETS:
                    continue
                got = intents_of(questions)
                named = [(q, g) for q, g in zip(questions, got, strict=True) if g != "other"]
                print(f"  {name:12s} {len(questions):6d} questions, {len(named)} named a built-in intent")
                for q, g in named[:15]:
                    print(f"      {q!r}: {g}")
                if len(named) > 15:
                    print(f"      ... {len(named) - 15} more")
            print(f"  (shared sets in {time.perf_counter() - started:.0f}s; load {load_average()})")


if __name__ == "__main__":
    main()
