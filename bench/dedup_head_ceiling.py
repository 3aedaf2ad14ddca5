"""How far the shipped head of a model can reach on a Chinese pair set no shipped head was fitted on, gate by gate:
offline, no services. Per cosine gate, at precision 0.85 and 0.90:

  - ceiling: the share of duplicates the rules let through at that gate (the conflict checks, the follow-up guard of a
    first turn, the cosine gate), which no head can exceed;
  - cosine: the most recall any cut of plain cosine reaches;
  - shipped head, oracle cut: the most recall any cut of the shipped head's probability reaches, the cut chosen on the
    set itself (an upper bound: a shipped decision cannot choose its cut on traffic it never saw), and beside it the
    head at its own cut, as it ships;
  - fitted on the set: a logistic head of the same features fitted on the set by 5-fold cross-validation (what a
    tenant's own labels could teach it), out-of-fold.
It also counts the pairs each conflict check refuses, duplicates and not. The pairs' embeddings are cached under
KB_VAR_DIR (`labelled_pairs.pairs_embed`).

Usage: .venv/bin/python bench/dedup_head_ceiling.py [--set bq] [--model use-multilingual-v3]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
GATES = (0.76, 0.72, 0.68, 0.64, 0.60, 0.56, 0.50, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="bq", help="a file of ../shared/data/zh/ without .jsonl")
    parser.add_argument("--model", default="use-multilingual-v3")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")
    import django

    django.setup()
    import numpy as np

    from conversations.dedup import pair_features, question_pairs
    from conversations.dedup.duplicate_model import pair_model_default, pair_probability
    from conversations.training.duplicate_head_training import out_of_fold, recall_at_precision
    from conversations.training.labelled_pairs import INNER_FOLDS, followup_guard_passes, pairs_embed, pairs_load

    path = ROOT.parent / "shared" / "data" / "zh" / f"{args.set}.jsonl"
    pairs = pairs_load(path, file_label=f"zh/{args.set}.jsonl")
    labels = pairs.labels
    first, second = pairs_embed(pairs, model=args.model)
    head = pair_model_default(args.model)
    features = pair_features.pair_features_of(
        pairs.texts, first=first, second=second, feature_version=head.feature_version
    )
    probability = np.array([pair_probability(model=head, features=row) for row in features])
    cosine = np.einsum("ij,ij->i", first, second)
    conflicts = [question_pairs.questions_conflict(r["question1"], r["question2"]) for r in pairs.rows]
    guard = followup_guard_passes(rows=pairs.rows, second=second)
    passes = np.array([not conflict for conflict in conflicts]) & guard
    counts = collections.Counter(
        (conflict or ("follow-up guard" if not guard[i] else "")) for i, conflict in enumerate(conflicts)
    )
    print(
        f"{args.set}: {len(labels)} pairs, {int(labels.sum())} duplicates; {args.model}'s head {head.feature_version}, "
        f"cut {head.cut:.3f}"
    )
    for reason in sorted(r for r in counts if r):
        refused = np.array(
            [(c or ("follow-up guard" if not guard[i] else "")) == reason for i, c in enumerate(conflicts)]
        )
        print(
            f"  refused by {reason}: {int((refused & (labels == 1)).sum())} duplicates "
            f"({(refused & (labels == 1)).sum() / labels.sum():.3f} of them), "
            f"{int((refused & (labels == 0)).sum())} others"
        )
    fitted = out_of_fold(features, labels, np.arange(len(labels)) % INNER_FOLDS, penalty=30.0)
    for target in (0.85, 0.90):
        print(f"precision {target:.2f}: recall at each gate")
        print(
            f"  {'gate':>5} {'ceiling':>8} {'cosine':>7} {'head oracle':>12} "
            f"{'head as shipped P / R':>22} {'fitted':>7}"
        )
        for gate in GATES:
            eligible = passes & (cosine >= gate)
            best = {
                name: recall_at_precision(scores=scores, labels=labels, eligible=eligible, target=target)[0]
                for name, scores in (("cosine", cosine), ("head", probability), ("fitted", fitted))
            }
            shipped = eligible & (probability >= head.cut)
            precision = float((labels[shipped] == 1).mean()) if shipped.any() else float("nan")
            recall = float((shipped & (labels == 1)).sum() / labels.sum())
            ceiling = float((eligible & (labels == 1)).sum() / labels.sum())
            print(
                f"  {gate:>5.2f} {ceiling:>8.3f} {best['cosine']:>7.3f} {best['head']:>12.3f} "
                f"{precision:>11.3f} / {recall:.3f} {best['fitted']:>7.3f}"
            )


if __name__ == "__main__":
    main()
