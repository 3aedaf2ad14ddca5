"""Quality of the duplicate-question decision on Quora Question Pairs (../shared/data/qqp/pairs.jsonl).

For each threshold it prints precision, recall and hit rate of
  - plain cosine (the bundled all-MiniLM-L6-v2, as the turn pipeline embeds questions), and
  - the platform's decision, `conversations.decisions.duplicate_decide` (cosine at or above the threshold AND
    the agreement checks on numbers, negation and salient words AND the follow-up guard), run pair by pair
    exactly as a turn runs it against one stored question,
then the figures at the default threshold (conversations.models.DEFAULT_THRESHOLD).

Usage: .venv/bin/python bench/dedup_quality.py [--pairs PATH] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402

from conversations import decisions  # noqa: E402
from conversations.models import DEFAULT_THRESHOLD  # noqa: E402
from retrieval.embeddings import embed_texts  # noqa: E402

THRESHOLDS = [0.75, 0.80, 0.82, 0.84, 0.86, 0.88, 0.90, 0.92, 0.94, 0.96]


def scores(predicted: np.ndarray, labels: np.ndarray) -> tuple[float, float, float]:
    true_positive = int((predicted & (labels == 1)).sum())
    hits = int(predicted.sum())
    precision = true_positive / hits if hits else float("nan")
    recall = true_positive / int((labels == 1).sum())
    return precision, recall, hits / len(labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=str(ROOT.parent / "shared" / "data" / "qqp" / "pairs.jsonl"))
    parser.add_argument("--limit", type=int, default=0, help="first N pairs only (0 = all)")
    args = parser.parse_args()

    rows = [json.loads(line) for line in open(args.pairs, encoding="utf-8")]
    if args.limit:
        rows = rows[: args.limit]
    labels = np.array([int(r["is_duplicate"]) for r in rows])
    print(f"QQP pairs: {len(rows)} ({int(labels.sum())} duplicates, {len(rows) - int(labels.sum())} not)")

    started = time.perf_counter()
    first = embed_texts([r["question1"] for r in rows])
    second = embed_texts([r["question2"] for r in rows])
    print(f"embedded {2 * len(rows)} questions in {time.perf_counter() - started:.1f}s")
    cosine = (first * second).sum(axis=1)

    # The decision's checks beyond cosine, per pair, evaluated once (they do not depend on the threshold).
    started = time.perf_counter()
    agreement = np.array([decisions.questions_agree(r["question1"], r["question2"]).agrees for r in rows])
    followup_ok = np.array(
        [
            decisions.followup_context_matches(
                question=r["question1"],
                previous_vector=None,
                candidate=decisions.StoredQuestion(0, r["question2"], second[i], 0, None),
                threshold=1.0,
            )
            for i, r in enumerate(rows)
        ]
    )
    checks_ms = (time.perf_counter() - started) * 1000 / len(rows)

    def decide(threshold: float) -> np.ndarray:
        """The real decision function, pair by pair (one stored question per pair)."""
        out = np.zeros(len(rows), dtype=bool)
        for i in np.where(cosine >= threshold - 1e-6)[0]:
            decision = decisions.duplicate_decide(
                question=rows[i]["question1"],
                question_vector=first[i],
                previous_vector=None,
                candidates=[decisions.StoredQuestion(1, rows[i]["question2"], second[i], 0, None)],
                threshold=threshold,
            )
            out[i] = decision.hit
        return out

    print(f"agreement checks: {checks_ms * 1000:.0f} us per pair")
    print()
    print(f"{'threshold':>9} | {'cosine P':>8} {'R':>6} {'hit':>6} | {'decision P':>10} {'R':>6} {'hit':>6}")
    table = []
    for threshold in THRESHOLDS:
        plain = scores(cosine >= threshold, labels)
        decided_mask = decide(threshold)
        # The vectorised form of the same rule, as a cross-check of the per-pair run.
        assert (decided_mask == ((cosine >= threshold - 1e-6) & agreement & followup_ok)).all()
        decided = scores(decided_mask, labels)
        table.append((threshold, plain, decided))
        print(
            f"{threshold:>9.2f} | {plain[0]:>8.3f} {plain[1]:>6.3f} {plain[2]:>6.3f} | "
            f"{decided[0]:>10.3f} {decided[1]:>6.3f} {decided[2]:>6.3f}"
        )

    print()
    best_plain = max((t for t in table if t[1][1] >= 0.40), key=lambda t: t[1][0])
    best_decided = max((t for t in table if t[2][1] >= 0.40), key=lambda t: t[2][0])
    print(
        f"best precision at recall >= 0.40: cosine {best_plain[1][0]:.3f} (threshold {best_plain[0]:.2f}), "
        f"decision {best_decided[2][0]:.3f} (threshold {best_decided[0]:.2f})"
    )
    default_plain = scores(cosine >= DEFAULT_THRESHOLD, labels)
    default_decided = scores(decide(DEFAULT_THRESHOLD), labels)
    print(
        f"default threshold {DEFAULT_THRESHOLD:.2f}: cosine P={default_plain[0]:.3f} R={default_plain[1]:.3f} "
        f"hit={default_plain[2]:.3f}; decision P={default_decided[0]:.3f} R={default_decided[1]:.3f} "
        f"hit={default_decided[2]:.3f}"
    )
    target = default_decided[0] >= 0.90 and default_decided[1] >= 0.40
    print(f"target (P >= 0.90 with R >= 0.40) at the default: {'met' if target else 'NOT met'}")


if __name__ == "__main__":
    main()
