"""Quality of the duplicate-question decision on Quora Question Pairs (../shared/data/qqp/pairs.jsonl).

For each threshold it prints precision, recall and hit rate of
  - plain cosine (the bundled all-MiniLM-L6-v2, as the turn pipeline embeds questions), and
  - the platform's decision, `conversations.decisions.duplicate_decide` (cosine at or above the threshold AND no
    conflict on numbers or negation AND the duplicate head's probability at or above its cut AND the follow-up
    guard), run pair by pair exactly as a turn runs it against one stored question,
on the HELD-OUT split (30% of the pairs by a hash of pair_id, conversations/labelled_pairs.py), which the duplicate
head never saw,
then the figures at the default threshold (conversations.models.DEFAULT_THRESHOLD) on the held-out split and,
labelled as such, on all pairs (70% of which are the head's training data, so those figures are optimistic).

QQP is in all-MiniLM-L6-v2's own training data (../shared/data/README.md): every figure here, cosine included,
is better than the same decision on questions the model never saw.

Usage: .venv/bin/python bench/dedup_quality.py [--pairs PATH] [--limit N]
"""

from __future__ import annotations

import argparse
import os
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

from conversations import decisions, question_pairs  # noqa: E402
from conversations.duplicate_model import pair_model_default  # noqa: E402
from conversations.labelled_pairs import (  # noqa: E402
    PAIRS,
    followup_guard_passes,
    pairs_embed,
    pairs_load,
    precision_recall_hit,
)
from conversations.models import DEFAULT_THRESHOLD  # noqa: E402

THRESHOLDS = [0.70, 0.74, 0.76, 0.78, 0.80, 0.84, 0.88, 0.90, 0.92, 0.94, 0.96]
TARGET_PRECISION, TARGET_RECALL = 0.90, 0.40


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=str(PAIRS))
    parser.add_argument("--limit", type=int, default=0, help="first N pairs only (0 = all)")
    args = parser.parse_args()

    pairs = pairs_load(Path(args.pairs), limit=args.limit)
    rows, labels, held_out = pairs.rows, pairs.labels, pairs.held_out
    model = pair_model_default()
    print(
        f"QQP pairs: {len(rows)} ({int(labels.sum())} duplicates); held out {int(held_out.sum())} "
        f"({int(labels[held_out].sum())} duplicates)"
    )
    print(
        f"duplicate head: {model.meta.get('feature_version')} trained {model.meta.get('trained')} on "
        f"{model.meta.get('train_pairs')} pairs (data sha256 {str(model.meta.get('data_sha256'))[:12]}), "
        f"cut {model.cut:.3f}"
    )
    if model.meta.get("data_sha256") != pairs.data_sha256:
        print("WARNING: the pairs file is not the one the head was trained on: the split may not be held out")

    started = time.perf_counter()
    first, second = pairs_embed(pairs)
    print(f"embeddings ready in {time.perf_counter() - started:.1f}s")
    cosine = (first * second).sum(axis=1)

    started = time.perf_counter()
    probability = np.array(
        [
            question_pairs.pair_probability(
                model=model,
                features=question_pairs.pair_features(
                    first=r["question1"], second=r["question2"], first_vector=first[i], second_vector=second[i]
                ),
            )
            for i, r in enumerate(rows)
        ]
    )
    head_us = (time.perf_counter() - started) * 1e6 / len(rows)
    no_conflict = np.array([not question_pairs.questions_conflict(r["question1"], r["question2"]) for r in rows])
    followup_ok = followup_guard_passes(rows=rows, second=second)
    print(f"duplicate head: {head_us:.0f} us per pair (features and probability)")

    def decide(threshold: float, *, use_head: bool = True) -> np.ndarray:
        """The real decision function, pair by pair (one stored question per pair)."""
        out = np.zeros(len(rows), dtype=bool)
        for i in np.where(cosine >= threshold - 1e-6)[0]:
            decision = decisions.duplicate_decide(
                question=rows[i]["question1"],
                question_vector=first[i],
                previous_vector=None,
                candidates=[decisions.StoredQuestion(1, rows[i]["question2"], second[i], 0, None)],
                threshold=threshold,
                use_head=use_head,
            )
            out[i] = decision.hit
        return out

    decided_at = {}
    for threshold in sorted({*THRESHOLDS, DEFAULT_THRESHOLD}):
        decided_at[threshold] = decide(threshold)
        # The vectorised form of the same rule, as a cross-check of the per-pair run.
        vectorised = (cosine >= threshold - 1e-6) & no_conflict & (probability >= model.cut) & followup_ok
        assert (decided_at[threshold] == vectorised).all()

    def table(subset: np.ndarray, title: str) -> None:
        print()
        print(title)
        print(f"{'threshold':>9} | {'cosine P':>8} {'R':>6} {'hit':>6} | {'decision P':>10} {'R':>6} {'hit':>6}")
        for threshold in THRESHOLDS:
            plain = precision_recall_hit(cosine[subset] >= threshold, labels[subset])
            decided = precision_recall_hit(decided_at[threshold][subset], labels[subset])
            mark = "  <- default" if abs(threshold - DEFAULT_THRESHOLD) < 1e-9 else ""
            print(
                f"{threshold:>9.2f} | {plain[0]:>8.3f} {plain[1]:>6.3f} {plain[2]:>6.3f} | "
                f"{decided[0]:>10.3f} {decided[1]:>6.3f} {decided[2]:>6.3f}{mark}"
            )

    everything = np.ones(len(rows), dtype=bool)
    table(held_out, f"HELD-OUT pairs ({int(held_out.sum())}; never used to train or tune the head)")
    table(everything, f"all pairs ({len(rows)}; 70% are the head's training data: optimistic)")

    print()
    results = {}
    for name, subset in (("held-out", held_out), ("all pairs (optimistic)", everything)):
        plain = precision_recall_hit(cosine[subset] >= DEFAULT_THRESHOLD, labels[subset])
        decided = precision_recall_hit(decided_at[DEFAULT_THRESHOLD][subset], labels[subset])
        results[name] = decided
        print(
            f"default threshold {DEFAULT_THRESHOLD:.2f}, {name}: cosine P={plain[0]:.3f} R={plain[1]:.3f} "
            f"hit={plain[2]:.3f}; decision P={decided[0]:.3f} R={decided[1]:.3f} hit={decided[2]:.3f}"
        )
    headless = decide(DEFAULT_THRESHOLD, use_head=False)
    for name, subset in (("held-out", held_out), ("all pairs (optimistic)", everything)):
        decided = precision_recall_hit(headless[subset], labels[subset])
        print(
            f"without the head (KB_DUPLICATE_HEAD=false: gate raised to {decisions.HEADLESS_THRESHOLD_FLOOR:.2f}), "
            f"{name}: P={decided[0]:.3f} R={decided[1]:.3f} hit={decided[2]:.3f}"
        )
    held = results["held-out"]
    target = held[0] >= TARGET_PRECISION and held[1] >= TARGET_RECALL
    print(
        f"target (P >= {TARGET_PRECISION:.2f} with R >= {TARGET_RECALL:.2f}) at the default, held-out: "
        f"{'met' if target else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
