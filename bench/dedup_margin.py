"""How far the bundled model's duplicate decision stands from issue 35's QQP bar (precision >= 0.85 with recall
>= 0.40) on samples of QQP other than the held-out split: bootstrap resamples of the held-out 30% (the split no choice
read), the decision at the default gate through the numbers and negation checks and the follow-up guard, by the
shipped head at its cut and, for a tree head, by its regression alone at the regression's own cut (the same run's
baseline). It prints each one's figures and the share of resamples under each bound.

Usage: .venv/bin/python bench/dedup_margin.py [--resamples 1000] [--seed 0] [--pairs PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402

from conversations.dedup import pair_features, question_pairs  # noqa: E402
from conversations.dedup.duplicate_model import pair_model_default  # noqa: E402
from conversations.models import DEFAULT_THRESHOLD  # noqa: E402
from conversations.training.labelled_pairs import (  # noqa: E402
    PAIRS,
    followup_guard_passes,
    pairs_embed,
    pairs_load_many,
)
from conversations.training.verifier_heads import log_odds, model_probabilities, sigmoid  # noqa: E402
from retrieval.embeddings import BUNDLED_MODEL_NAME  # noqa: E402

BAR_PRECISION, BAR_RECALL = 0.85, 0.40


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pairs", default=str(PAIRS))
    args = parser.parse_args()

    pairs = pairs_load_many([Path(args.pairs)])
    first, second = pairs_embed(pairs, model=BUNDLED_MODEL_NAME)
    held = pairs.held_out
    rows = [row for row, kept in zip(pairs.rows, held, strict=True) if kept]
    first, second, labels = first[held], second[held], pairs.labels[held]
    head = pair_model_default(BUNDLED_MODEL_NAME)
    features = pair_features.pair_features_of(
        [(r["question1"], r["question2"]) for r in rows],
        first=first,
        second=second,
        feature_version=head.feature_version,
    )
    cosine = (first * second).sum(axis=1)
    agree = np.array([not question_pairs.questions_conflict(r["question1"], r["question2"]) for r in rows])
    eligible = (cosine >= DEFAULT_THRESHOLD) & agree & followup_guard_passes(rows=rows, second=second)
    decisions = {
        f"shipped head ({head.meta.get('kind_of_head', 'linear')})": (model_probabilities(head, features), head.cut)
    }
    if head.trees is not None:
        decisions["its regression alone"] = (sigmoid(log_odds(head, features)), float(head.meta["regression"]["cut"]))
    print(
        f"held-out QQP pairs: {len(labels)} ({int(labels.sum())} duplicates); "
        f"{args.resamples} resamples, seed {args.seed}"
    )
    for name, (probability, cut) in decisions.items():
        served = eligible & (probability >= cut)
        rng = np.random.default_rng(args.seed)
        under_precision = under_recall = 0
        for _ in range(args.resamples):
            pick = rng.integers(0, len(labels), len(labels))
            hit, truth = served[pick], labels[pick] == 1
            true_hits = (hit & truth).sum()
            under_precision += true_hits / max(hit.sum(), 1) < BAR_PRECISION
            under_recall += true_hits / max(truth.sum(), 1) < BAR_RECALL
        true_hits = (served & (labels == 1)).sum()
        print(
            f"{name}: cut {cut:.3f}, P {true_hits / served.sum():.3f} R {true_hits / labels.sum():.3f}; resamples "
            f"under P {BAR_PRECISION}: {100 * under_precision / args.resamples:.1f}%, under R {BAR_RECALL}: "
            f"{100 * under_recall / args.resamples:.1f}%"
        )


if __name__ == "__main__":
    main()
