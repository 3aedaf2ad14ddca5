"""Why a tenant's verifier learns little: offline, on the fixed QQP split (conversations/training/labelled_pairs.py),
the recall the decision reaches at precision 0.90 through the decision rule (the gate, conflicts, the follow-up guard of
a first turn; recall over every held-out duplicate), for

  - the rule's ceiling: the share of duplicates every check but the head lets through, at several gates;
  - the shipped head, held out and on its own training pairs (what its features can reach at all);
  - the same features unregularised, fitted on the whole train split (held out and in-sample);
  - the learning curve of the tenant head towards the shipped weights (`verifier_training.fit_towards`) on pair-v1
    and pair-v2 features, with N labels picked as bench/dedup_learning.py picks them (nearest the gate among the
    first 3,500 usable train pairs), at each penalty `verifier_training.PENALTIES` offers.

No services: the pairs' embeddings are cached under KB_VAR_DIR (`labelled_pairs.pairs_embed`). QQP is in
all-MiniLM-L6-v2's training data and its terms are non-commercial (../shared/data/README.md).

Usage: .venv/bin/python bench/dedup_learning_diagnosis.py [--gate 0.76] [--labels 300,1000,3000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gate", type=float, default=0.76)
    parser.add_argument("--labels", default="300,1000,3000")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")
    import django

    django.setup()
    import numpy as np
    from qqp_split import TARGET_PRECISION, pair_v2_features, qqp_split_load, shipped_head_log_odds

    from conversations.dedup.duplicate_model import pair_model_default, regression_of
    from conversations.training.duplicate_head_training import logistic_fit, standardise
    from conversations.training.verifier_heads import PENALTIES, fit_towards, prior_extend

    split = qqp_split_load(gate=args.gate)
    labels, held, train = split.labels, split.held, split.train
    cosine, checks = split.cosine, split.checks
    started = time.perf_counter()
    features = pair_v2_features(split)
    print(
        f"QQP: {len(labels)} pairs, train {int(train.sum())}, held out {int(held.sum())} "
        f"({int(labels[held].sum())} duplicates); pair-v2 features {features.shape} "
        f"in {time.perf_counter() - started:.0f}s"
    )

    recall_at_target = split.recall_at_target

    for gate in sorted({0.60, 0.70, args.gate}):
        through = (cosine >= gate) & checks
        print(
            f"ceiling at gate {gate:.2f}: {labels[held & through].sum() / labels[held].sum():.3f} of the held-out "
            "duplicates pass every check but the head"
        )
    # The tenant head starts from and is drawn towards the shipped head's regression (as `verifier_train` does); the
    # shipped head's own figure is the decision's score, its trees included.
    shipped = regression_of(pair_model_default())
    v1_count = shipped.weights.shape[0]
    v1 = (features[:, :v1_count] - shipped.mean) / shipped.scale
    shipped_z = shipped_head_log_odds(split)
    print(
        f"shipped head, R@P{TARGET_PRECISION:.2f}: held out {recall_at_target(shipped_z, held):.3f}, "
        f"on its own training pairs {recall_at_target(shipped_z, train):.3f}"
    )
    mean, scale = standardise(features[train][:, :v1_count])
    weights, bias = logistic_fit(
        (features[train][:, :v1_count] - mean) / scale, labels[train].astype(float), penalty=0.01
    )
    free_z = ((features[:, :v1_count] - mean) / scale) @ weights + bias
    print(
        f"the same {v1_count} features unregularised on the whole train split: held out "
        f"{recall_at_target(free_z, held):.3f}, in-sample {recall_at_target(free_z, train):.3f}"
    )

    usable = split.traffic(gate=args.gate)
    prior_v2 = prior_extend(shipped, features=features[train])
    v2 = (features - prior_v2.mean) / prior_v2.scale
    print(
        f"learning curve, R@P{TARGET_PRECISION:.2f} held out, tenant head towards the shipped weights (pair-v1 | v2):"
    )
    for count in (int(n) for n in args.labels.split(",")):
        picked = np.array(usable[:count])
        cells = []
        for penalty in PENALTIES:
            w1, b1 = fit_towards(v1[picked], labels[picked].astype(float), prior=shipped, penalty=penalty)
            w2, b2 = fit_towards(v2[picked], labels[picked].astype(float), prior=prior_v2, penalty=penalty)
            cells.append(
                f"penalty {penalty:g}: {recall_at_target(v1 @ w1 + b1, held):.3f} | "
                f"{recall_at_target(v2 @ w2 + b2, held):.3f}"
            )
        print(f"  N={count}: " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
