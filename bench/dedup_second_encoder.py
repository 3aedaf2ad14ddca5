"""Does a second embedding model's view of the pair help the bundled model's duplicate head on English? Offline, QQP's
fixed split (`labelled_pairs`: 8,124 train pairs, 3,641 held out): the shipped head's features (pair-v1 on
all-MiniLM-L6-v2) alone, with the multilingual model's cosine, and with its cosine, u*v and |u-v|; the same logistic
fit at penalties 300 / 1,000 / 3,000; recall at precision 0.85 / 0.87 / 0.90 through the decision's gate and checks,
out of fold on the train split (5 folds) and held out, and the held-out ROC AUC.

Usage: .venv/bin/python bench/dedup_second_encoder.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")

TARGETS = (0.85, 0.87, 0.90)


def main() -> None:
    import django

    django.setup()
    import numpy as np
    from sklearn.metrics import roc_auc_score

    from conversations.dedup import question_pairs
    from conversations.models import DEFAULT_THRESHOLD
    from conversations.training import duplicate_head_training as training
    from conversations.training.labelled_pairs import PAIRS, followup_guard_passes, pairs_embed, pairs_load_many
    from retrieval.embeddings import USE_MODEL_NAME

    pairs = pairs_load_many([PAIRS])
    labels, train, held_out = pairs.labels, pairs.train, pairs.held_out
    first, second = pairs_embed(pairs, model="all-MiniLM-L6-v2")
    other_first, other_second = pairs_embed(pairs, model=USE_MODEL_NAME)
    features = training._pair_features(pairs, first, second)
    cosine = (first * second).sum(axis=1)
    other_cosine = (other_first * other_second).sum(axis=1)
    agree = np.array([not question_pairs.questions_conflict(r["question1"], r["question2"]) for r in pairs.rows])
    eligible = (cosine >= DEFAULT_THRESHOLD) & agree & followup_guard_passes(rows=pairs.rows, second=second)
    folds = training._inner_folds(pairs)[train]
    print(
        f"held-out ROC AUC of the cosine: all-MiniLM-L6-v2 {roc_auc_score(labels[held_out], cosine[held_out]):.3f}, "
        f"{USE_MODEL_NAME} {roc_auc_score(labels[held_out], other_cosine[held_out]):.3f}"
    )
    variants = {
        "pair-v1 (shipped)": features,
        "+ its cosine": np.column_stack([features, other_cosine]),
        "+ cosine, u*v, |u-v|": np.column_stack(
            [features, other_cosine, other_first * other_second, np.abs(other_first - other_second)]
        ),
    }
    print(f"{'features':24s} {'penalty':>7s}  out of fold R@{'/'.join(map(str, TARGETS))}  held out R@  held-out AUC")
    for name, matrix in variants.items():
        for penalty in (300.0, 1000.0, 3000.0):
            oof = training.out_of_fold(matrix[train], labels[train], folds, penalty=penalty)
            mean, scale = training.standardise(matrix[train])
            weights, bias = training.logistic_fit((matrix[train] - mean) / scale, labels[train], penalty=penalty)
            probability = training.probabilities(matrix, weights, bias, mean, scale)

            def recalls(scores: np.ndarray, part: np.ndarray) -> str:
                reached = [
                    training.recall_at_precision(scores=scores, labels=labels[part], eligible=eligible[part], target=t)
                    for t in TARGETS
                ]
                return " ".join(f"{recall:.3f}" for recall, _ in reached)

            auc = roc_auc_score(labels[held_out], probability[held_out])
            print(
                f"{name:24s} {penalty:7g}  {recalls(oof, train):>22s}  {recalls(probability[held_out], held_out)}  "
                f"{auc:.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
