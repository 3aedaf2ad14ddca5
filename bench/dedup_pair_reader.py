"""A pair reader beside the bundled model's shipped head, offline, on QQP's fixed split: a cross-encoder made from the
bundled all-MiniLM-L6-v2's weights with low-rank adapters (LoRA: the model's own weights frozen, a rank-r update of
every linear layer of its six transformer layers, its pooler and a one-logit head trained), fitted on the train
split's inner folds 1-4; then the shipped head's log-odds (a head refitted on folds 1-4, so fold 0 is unseen by both)
and the reader's score combined by a two-weight logistic fit on fold 0, whose cut is chosen there too. Printed on the
held-out 30%, which neither saw, through the decision's gate and checks (cosine >= 0.76, no number or negation
conflict, the follow-up guard), beside the shipped decision in the same run: ROC AUC, recall at precision 0.85 / 0.87
/ 0.90 at the best cut (an oracle), and precision / recall at cuts chosen on fold 0.

The reader reads both orders of a pair (trained on both, scored as the mean of the two). It is trained by the
shipped training (`pair_reader_training.reader_fit`) and scored merged, as a turn reads it. This is the measurement
that chose the design; the shipped reader is fitted by `manage.py pair_reader_train` (its cut chosen on two
half-fitted readers, not on fold 0), and docs/conversations.md, "The pair reader beside the head", gives its figures.

Usage: nice .venv/bin/python bench/dedup_pair_reader.py [--rank 16] [--epochs 2] [--lr 3e-4] [--limit N]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")

TARGETS = (0.85, 0.87, 0.90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--limit", type=int, default=0, help="train on the first N pairs of folds 1-4 (a smoke run)")
    args = parser.parse_args()
    import django

    django.setup()
    import numpy as np
    import torch
    from sklearn.metrics import roc_auc_score

    from conversations.dedup import question_pairs
    from conversations.dedup.duplicate_model import pair_model_default, regression_probability
    from conversations.models import DEFAULT_THRESHOLD
    from conversations.training import duplicate_head_training as training
    from conversations.training.labelled_pairs import PAIRS, followup_guard_passes, pairs_embed, pairs_load_many
    from conversations.training.pair_reader_training import reader_fit
    from retrieval import cross_encoder
    from retrieval.embeddings import BUNDLED_MODEL_NAME, model_path

    torch.manual_seed(0)
    torch.set_num_threads(2)
    pairs = pairs_load_many([PAIRS])
    labels = pairs.labels
    first, second = pairs_embed(pairs, model=BUNDLED_MODEL_NAME)
    features = training._pair_features(pairs, first, second)
    cosine = (first * second).sum(axis=1)
    agree = np.array([not question_pairs.questions_conflict(r["question1"], r["question2"]) for r in pairs.rows])
    eligible = (cosine >= DEFAULT_THRESHOLD) & agree & followup_guard_passes(rows=pairs.rows, second=second)
    folds = training._inner_folds(pairs)
    fit_on = pairs.train & (folds != 0)
    choose_on = pairs.train & (folds == 0)
    held_out = pairs.held_out
    print(
        f"pairs: reader and head fitted on {fit_on.sum()}, combination and cuts chosen on {choose_on.sum()}, "
        f"judged on {held_out.sum()} held out"
    )

    shipped = pair_model_default(BUNDLED_MODEL_NAME)
    # The regression the reader is combined with (a tree head's trees stand aside beside a reader).
    shipped_probability = np.array([regression_probability(model=shipped, features=row) for row in features])
    mean, scale = training.standardise(features[fit_on])
    weights, bias = training.logistic_fit((features[fit_on] - mean) / scale, labels[fit_on], penalty=1000.0)
    head_probability = np.where(
        held_out, shipped_probability, training.probabilities(features, weights, bias, mean, scale)
    )

    root = model_path(BUNDLED_MODEL_NAME)
    train_rows = [pairs.rows[i] for i in np.flatnonzero(fit_on)]
    if args.limit:
        train_rows = train_rows[: args.limit]
    # The shipped training (`manage.py pair_reader_train`'s), then the adapters merged as a turn reads them.
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        adapters = Path(scratch) / "reader.npz"
        trained = reader_fit(
            rows=train_rows,
            root=root,
            out=adapters,
            rank=args.rank,
            epochs=args.epochs,
            lr=args.lr,
            seed=0,
            say=print,
        )
        model = cross_encoder.merged_model(root=root, adapters=adapters)
    print(f"reader: {trained:,} trained numbers")
    scorer = cross_encoder.PairScorer(run=cross_encoder.torch_run(model), tokenizer=cross_encoder.pair_tokenizer(root))

    scored = choose_on | held_out
    reader = np.zeros(len(labels))
    rows = [pairs.rows[i] for i in np.flatnonzero(scored)]
    reader[scored] = scorer.scores([(r["question1"], r["question2"]) for r in rows], batch_size=64)
    one = [(pairs.rows[0]["question1"], pairs.rows[0]["question2"])]
    timings = []
    for _ in range(30):
        tick = time.perf_counter()
        scorer.scores(one)
        timings.append((time.perf_counter() - tick) * 1000)
    print(
        f"training and scoring {time.perf_counter() - started:.0f} s; peak memory "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; one pair, both orders, on torch: "
        f"{np.median(timings):.1f} ms p50"
    )

    log_odds = np.log(np.clip(head_probability, 1e-7, 1 - 1e-7) / np.clip(1 - head_probability, 1e-7, 1))
    combined_inputs = np.column_stack([log_odds, reader])
    chosen = choose_on & eligible
    combined_mean, combined_scale = training.standardise(combined_inputs[chosen])
    combined_weights, combined_bias = training.logistic_fit(
        (combined_inputs[chosen] - combined_mean) / combined_scale, labels[chosen], penalty=1.0
    )
    combined = training.probabilities(combined_inputs, combined_weights, combined_bias, combined_mean, combined_scale)
    print(
        f"combination (standardised head log-odds, reader score): weights {np.round(combined_weights, 3).tolist()}, "
        f"bias {combined_bias:.3f}"
    )

    def figures(decided: np.ndarray, part: np.ndarray) -> str:
        served = decided & part
        precision = labels[served].mean() if served.any() else float("nan")
        return f"P {precision:.3f} R {labels[served].sum() / max(labels[part].sum(), 1):.3f}"

    print(f"\nheld out ({held_out.sum()} pairs, {labels[held_out].sum()} duplicates)")
    print(f"{'score':34s} {'AUC':>6s}  oracle R@P{'/'.join(map(str, TARGETS))}")
    for name, score in (
        ("cosine", cosine),
        ("shipped regression", shipped_probability),
        ("reader alone", reader),
        ("head + reader", combined),
    ):
        reached = [
            training.recall_at_precision(
                scores=score[held_out], labels=labels[held_out], eligible=eligible[held_out], target=t
            )[0]
            for t in TARGETS
        ]
        auc = roc_auc_score(labels[held_out], score[held_out])
        print(f"{name:34s} {auc:6.3f}  {' / '.join(f'{r:.3f}' for r in reached)}")
    shipped_decided = eligible & (shipped_probability >= shipped.cut)
    print(f"\nthe shipped decision (cut {shipped.cut:.3f}): held out {figures(shipped_decided, held_out)}")
    for target in TARGETS:
        recall, cut = training.recall_at_precision(
            scores=combined[choose_on], labels=labels[choose_on], eligible=eligible[choose_on], target=target
        )
        decided = eligible & (combined >= cut)
        print(
            f"head + reader, cut {cut:.3f} chosen on fold 0 for P >= {target}: fold 0 {figures(decided, choose_on)}, "
            f"held out {figures(decided, held_out)}"
        )
    for cut in (0.70, 0.72, 0.74, 0.76, 0.78, 0.80):
        decided = eligible & (combined >= cut)
        print(
            f"head + reader at cut {cut:.2f}: fold 0 {figures(decided, choose_on)}, "
            f"held out {figures(decided, held_out)}"
        )


if __name__ == "__main__":
    main()
