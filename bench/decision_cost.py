"""What deciding a candidate costs a turn beside embedding its question: `decisions.duplicate_decide`, the function a
turn calls, on labelled pairs whose cosine passes the gate (the candidates a turn reads: the conflict rules, the
duplicate head's text features and its probability, the follow-up guard), against the same run's embedding of one
question by the same model (the work a turn cannot skip).

Pairs: QQP's held-out split (the bundled English model and its head) and LCQMC (the multilingual model and its head),
../shared/data. Each pair is decided as a turn decides it: question2 new, question1 its one stored question. Two
passes over the same pairs: the first reads every text for the first time (a new question against a candidate not
read recently: the case that costs most), the second reads texts the rules have kept (`question_pairs._TEXTS_KEPT`: a
candidate stored questions come back to, and the same question checked against a turn's other candidates).

Prints per set the pairs decided, the p50 and mean microseconds of a decision in each pass, the p50 of one question's
embedding and the ratio of the first pass's p50 to it.

Usage: .venv/bin/python bench/decision_cost.py [--pairs N] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")
import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402
from common import load_average  # noqa: E402

from conversations.dedup import decisions  # noqa: E402
from conversations.models import DEFAULT_THRESHOLD  # noqa: E402
from conversations.training.labelled_pairs import pairs_load  # noqa: E402
from retrieval import embeddings  # noqa: E402

DATA = ROOT.parent / "shared" / "data"


def _rows(name: str) -> list[dict]:
    if name == "qqp":
        pairs = pairs_load(DATA / "qqp" / "pairs.jsonl")
        return [row for row, held in zip(pairs.rows, pairs.held_out, strict=True) if held]
    path = DATA / "zh" / "lcqmc.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _microseconds(call) -> float:  # noqa: ANN001
    started = time.perf_counter_ns()
    call()
    return (time.perf_counter_ns() - started) / 1000


def measure(*, name: str, model: str, limit: int, rounds: int) -> None:
    rows = _rows(name)[: limit * 3]
    first = embeddings.embed_texts([r["question1"] for r in rows], model=model)
    second = embeddings.embed_texts([r["question2"] for r in rows], model=model)
    gated = [i for i in range(len(rows)) if float(first[i] @ second[i]) >= DEFAULT_THRESHOLD][:limit]

    def decide(i: int) -> None:
        decisions.duplicate_decide(
            question=rows[i]["question2"],
            question_vector=second[i],
            previous_vector=None,
            candidates=[decisions.StoredQuestion(1, rows[i]["question1"], first[i], 0, None)],
            threshold=DEFAULT_THRESHOLD,
            embedding_model=model,
        )

    decide(gated[0])  # the head loaded, as a serving process holds it
    questions = [rows[i]["question2"] for i in gated]
    embed = [_microseconds(lambda q=q: embeddings.embed_query(q, model=model)) for q in questions[:200] * rounds]
    first_pass = [_microseconds(lambda i=i: decide(i)) for i in gated]
    kept = [_microseconds(lambda i=i: decide(i)) for i in gated * rounds]
    embed_p50 = statistics.median(embed)
    print(
        f"{name} ({model}): {len(gated)} pairs over the gate {DEFAULT_THRESHOLD}; decision p50 / mean us: "
        f"texts read anew {statistics.median(first_pass):.0f} / {np.mean(first_pass):.0f}, "
        f"texts kept {statistics.median(kept):.0f} / {np.mean(kept):.0f}; "
        f"one question's embedding p50 {embed_p50:.0f} us; first pass p50 / embedding p50 "
        f"{statistics.median(first_pass) / embed_p50:.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=1000, help="pairs over the gate per set")
    parser.add_argument("--rounds", type=int, default=2, help="passes over the kept texts and the embeddings")
    args = parser.parse_args()
    print(f"load average {load_average()}")
    measure(name="qqp", model=embeddings.model_resolve(None), limit=args.pairs, rounds=args.rounds)
    measure(name="lcqmc", model=embeddings.USE_MODEL_NAME, limit=args.pairs, rounds=args.rounds)
    print(f"load average {load_average()}")


if __name__ == "__main__":
    main()
