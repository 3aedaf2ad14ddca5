"""Learning from review offline: the tenant's verifier trained as `manage.py duplicate_model_train` trains it
(`verifier_training.verifier_train`), on labels the review queue's own rule picks (`review_queue_rules.review_picks`,
day by day at a daily quota with its random share and each random pick's inclusion probability), from decisions the
shipped head made on one set's traffic; then measured on the set's held-out split through the decision rule (the
gate, the conflict checks, the follow-up guard of a first turn, the head's cut). No services, no API: it runs many
draws of the queue (`--draws`) in minutes, so a change to the learning is judged by its spread over draws and not by
one run of bench/dedup_learning.py (an hour each), which stays the figure through the API.

For each draw and variant it prints what training chose (head, gate, cut), what training expected above its cut (the
out-of-fold precision on the training labels, point and lower bound), what the judge saw on the held-out labels, and
what the version does on the held-out split: precision and recall at its cut, and the recall at precision 0.90 (the
best cut, the figure bench/dedup_learning.py reports). Variants change one choice of the training:
  - product: as it ships;
  - linear / trees: that head only, at any gate;
  - gate-threshold: the policy's threshold only, either head;
  - linear-any-gate: the regression competes at every gate too, not at the lowest only (the rule before);
  - gate-by-bound: the head and gate whose out-of-fold probabilities reach the most recall at the cut the lower bound
    chooses (what will be served), not at the best cut of the point estimate;
  - cut-C (cut-0.75): the cut at a one-sided C lower bound of precision instead of `verifier_training.CUT_CONFIDENCE`;
  - penalty-at-threshold: the regression's penalties chosen at the policy's threshold alone, then the head and gate
    (as training chose before they were chosen together);
  - band: every choice by the mean out-of-fold recall at five precisions around the target (target -0.04 to +0.04)
    instead of at the target alone.
`--shifts` adds offsets to the label ids: each moves the 70/30 split and the folds and nothing else, so the spread a
split alone causes shows beside the spread of the queue's draws.
`--measure` reads version files a run of bench/dedup_learning.py trained (under KB_VAR_DIR) and prints what each
does on the whole held-out split, where that run sends only part of it.

The set's pairs are embedded once and cached under KB_VAR_DIR (`labelled_pairs.pairs_embed`).

Usage: nice .venv/bin/python bench/dedup_learning_offline.py [--set bq|paws|qqp] [--labels 3000] [--draws 3]
       [--shifts 0,1000] [--measure VERSION_FILE,...]
       [--variants product,linear,trees,gate-threshold,linear-any-gate,gate-by-bound,cut-0.75,penalty-at-threshold,band]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
DATA = ROOT.parent / "shared" / "data"
SETS = {
    "bq": (DATA / "zh" / "bq.jsonl", "zh/bq.jsonl", "use-multilingual-v3"),
    "paws": (DATA / "paws_qqp" / "pairs.jsonl", "paws_qqp/pairs.jsonl", None),
    "qqp": (DATA / "qqp" / "pairs.jsonl", "", None),  # split by pair id alone, as the bundled model's head was
}
TARGET = 0.90
THRESHOLD = 0.76
DAILY_QUOTA = 100
RANDOM_SHARE = 0.25
TRAFFIC = 3500


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="bq", choices=sorted(SETS))
    parser.add_argument("--labels", default="3000")
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--variants", default="product,linear,trees,gate-threshold,gate-by-bound")
    parser.add_argument(
        "--shifts", default="0", help="label-id offsets: each moves the 70/30 split and the folds, nothing else"
    )
    parser.add_argument(
        "--measure",
        default="",
        help="version files (comma-separated): measure each on the held-out split, as trained by the API run, and stop",
    )
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")
    import django

    django.setup()
    import numpy as np
    from dedup_learning import pairs_usable

    from conversations.dedup import pair_features, question_pairs
    from conversations.dedup.duplicate_model import pair_model_default, pair_model_from_dict, pair_probability
    from conversations.review.review_queue_rules import (
        PickReason,
        ReviewCandidate,
        review_picks,
    )
    from conversations.training import verifier_heads, verifier_training
    from conversations.training.duplicate_head_training import recall_at_precision
    from conversations.training.labelled_pairs import (
        LabelledQuestionPair,
        followup_guard_passes,
        pairs_embed,
        pairs_load,
    )

    path, file_label, model_name = SETS[args.set]
    pairs = pairs_load(path, file_label=file_label)
    first, second = pairs_embed(pairs, model=model_name)
    head = pair_model_default(model_name)

    kept = {id(row) for row in pairs_usable(pairs.rows)}  # what the API takes, as bench/dedup_learning.py sends
    usable = np.array([id(row) in kept for row in pairs.rows])
    traffic = np.where(usable & pairs.train)[0][:TRAFFIC]
    test = np.where(usable & pairs.held_out)[0]
    cosine = np.clip(np.einsum("ij,ij->i", first, second), -1.0, 1.0)
    conflict = np.array([bool(question_pairs.questions_conflict(r["question1"], r["question2"])) for r in pairs.rows])
    checks = ~conflict & followup_guard_passes(rows=pairs.rows, second=second)
    labels = pairs.labels

    texts = pairs.texts

    def probabilities(model, index: np.ndarray) -> np.ndarray:  # noqa: ANN001
        features = pair_features.pair_features_of(
            [texts[i] for i in index], first=first[index], second=second[index], feature_version=model.feature_version
        )
        return np.array([pair_probability(model=model, features=row) for row in features])

    shipped = probabilities(head, np.arange(len(labels)))
    test_labels = labels[test]

    def test_figures(model) -> dict:  # noqa: ANN001
        gate = THRESHOLD if model.gate is None else min(THRESHOLD, model.gate)
        scores = shipped[test] if model is head else probabilities(model, test)
        eligible = (cosine[test] >= gate) & checks[test]
        served = eligible & (scores >= model.cut)
        true = int((served & (test_labels == 1)).sum())
        best, _ = recall_at_precision(scores=scores, labels=test_labels, eligible=eligible, target=TARGET)
        return {
            "P": true / served.sum() if served.any() else float("nan"),
            "R": true / test_labels.sum(),
            "R@.90": best,
        }

    base = test_figures(head)
    print(
        f"{args.set}: {len(traffic)} traffic pairs ({int(labels[traffic].sum())} duplicates), {len(test)} held-out "
        f"({int(test_labels.sum())} duplicates); shipped head at {THRESHOLD}: P {base['P']:.3f} R {base['R']:.3f} "
        f"R@.90 {base['R@.90']:.3f}"
    )

    for file in filter(None, args.measure.split(",")):
        version = test_figures(pair_model_from_dict(json.loads(Path(file).read_text())))
        print(f"  {file}: P {version['P']:.3f} R {version['R']:.3f} R@.90 {version['R@.90']:.3f}")
    if args.measure:
        return

    def queue_labels(n: int, draw: int, shift: int = 0) -> tuple[list[LabelledQuestionPair], np.ndarray]:
        """N labels as the queue picks them, day by day, with each random pick's inclusion probability at the end,
        and the pairs' row numbers in label order."""
        candidates = [
            ReviewCandidate(
                event_id=int(i),
                similarity=float(cosine[i]),
                gate=THRESHOLD,
                probability=None if conflict[i] else float(shipped[i]),
                cut=head.cut,
                flagged=False,
            )
            for i in traffic
        ]
        picked, order, draws, day = {}, [], [], 0
        while len(order) < n:
            left = [c for c in candidates if c.event_id not in picked]
            if not left:
                break
            picks = review_picks(
                candidates=left,
                quota=min(DAILY_QUOTA, n - len(order)),
                random_share=RANDOM_SHARE,
                rng=random.Random(f"offline:{draw}:{day}"),
            )
            day += 1
            randoms = [p for p in picks if p.reason == PickReason.RANDOM]
            if randoms:
                draws.append(randoms[0].probability)
            for pick in picks:
                picked[pick.event_id] = pick
                order.append(pick.event_id)
        missed = float(np.prod([1.0 - p for p in draws])) if draws else 1.0
        return [
            LabelledQuestionPair(
                question=pairs.rows[i]["question1"],
                stored_question=pairs.rows[i]["question2"],
                is_duplicate=bool(labels[i]),
                source="review",
                label_id=number + 1 + shift,
                pick_reason=str(picked[i].reason),
                pick_probability=(1.0 - missed) if picked[i].reason == PickReason.RANDOM else 1.0,
            )
            for number, i in enumerate(order)
        ], np.array(order)

    original_choose = verifier_training._form_and_gate_choose

    original_confidence = verifier_training.CUT_CONFIDENCE

    original_selection = verifier_heads.selection_recall

    def band_selection(*, scores, labels, eligible, target):  # noqa: ANN001, ANN202
        return float(
            np.mean(
                [
                    original_selection(scores=scores, labels=labels, eligible=eligible, target=target + step)
                    for step in (-0.04, -0.02, 0.0, 0.02, 0.04)
                ]
            )
        )

    def variant_apply(name: str) -> None:
        verifier_training._form_and_gate_choose = original_choose
        verifier_training.CUT_CONFIDENCE = original_confidence
        verifier_heads.selection_recall = original_selection
        if name == "product":
            return
        if name.startswith("cut-"):
            verifier_training.CUT_CONFIDENCE = float(name.removeprefix("cut-"))
            return
        if name == "band":
            verifier_heads.selection_recall = band_selection
            return

        def choose(*, candidates, gates, data, precision_target):  # noqa: ANN001, ANN202
            if name == "linear-any-gate":
                table, best = {}, None
                for gate in gates:  # one gate at a time, each the lowest: every head competes there
                    chosen, _, at_gate = original_choose(
                        candidates=candidates, gates=[gate], data=data, precision_target=precision_target
                    )
                    table.update(at_gate)
                    recall = at_gate[f"{chosen.kind}@{gate:.2f}"]
                    is_linear = chosen.kind == "linear"
                    key = (round(recall, 3), is_linear, gate, chosen.penalty or 0.0, chosen.added_penalty or 0.0)
                    if best is None or key > best[0]:
                        best = (key, chosen, gate)
                return best[1], best[2], table
            if name == "penalty-at-threshold":
                linear = [c for c in candidates if c.kind == "linear"]
                threshold_eligible = data.eligible(max(gates))[data.train]
                scored = [
                    (
                        round(
                            original_selection(
                                scores=c.oof[data.train],
                                labels=data.labels[data.train],
                                eligible=threshold_eligible,
                                target=precision_target,
                            ),
                            3,
                        ),
                        c.penalty,
                        c.added_penalty,
                        number,
                    )
                    for number, c in enumerate(linear)
                ]
                kept = linear[max(scored)[3]]
                candidates = [kept, *(c for c in candidates if c.kind != "linear")]
            elif name == "linear":
                candidates = [c for c in candidates if c.kind == "linear"]
            elif name == "trees":
                candidates = [c for c in candidates if c.kind != "linear"]
            elif name == "gate-threshold":
                gates = [max(gates)]
            if name != "gate-by-bound":
                return original_choose(candidates=candidates, gates=gates, data=data, precision_target=precision_target)
            table, best = {}, None
            for candidate in candidates:
                for gate in gates:
                    eligible = data.eligible(gate)
                    cut, chosen_on, population = verifier_training._cut_for(
                        candidate, eligible=eligible, data=data, target=precision_target
                    )
                    served = population & eligible & (candidate.oof >= cut)
                    weighted = chosen_on == verifier_training.CutChosenOn.RANDOM_PICKS_WEIGHTED
                    weights = data.traffic_weights if weighted else np.ones(len(data.labels))
                    value = float(
                        (weights * served * data.labels).sum() / max((weights * population * data.labels).sum(), 1e-9)
                    )
                    table[f"{candidate.kind}@{gate:.2f}"] = round(value, 4)
                    key = (round(value, 3), candidate.kind == "linear", gate)
                    if best is None or key > best[0]:
                        best = (key, candidate, gate)
            return best[1], best[2], table

        verifier_training._form_and_gate_choose = choose

    summary: dict[tuple[str, int], list[dict]] = {}
    for n in [int(v) for v in args.labels.split(",")]:
        for draw, shift in [(d, int(k)) for d in range(args.draws) for k in args.shifts.split(",")]:
            labelled, order = queue_labels(n, draw, shift)
            row_first, row_second = first[order], second[order]
            randoms = sum(1 for p in labelled if p.pick_reason == str(PickReason.RANDOM))
            print(f"\nN={n} draw {draw} shift {shift}: {len(labelled)} labels, {randoms} random picks")
            for name in args.variants.split(","):
                variant_apply(name)
                started = time.perf_counter()
                trained = verifier_training.verifier_train(
                    pairs=labelled,
                    first=row_first,
                    second=row_second,
                    prior=head,
                    active=head,
                    threshold=THRESHOLD,
                    precision_target=TARGET,
                    progress=lambda *_: None,
                    meta={"embedding_model": model_name or "all-MiniLM-L6-v2"},
                )
                model = pair_model_from_dict(trained.payload)
                figures = trained.figures
                result = test_figures(model)
                verdict = figures["judges"].get(str(figures["judge"]), {})
                judged = verdict.get("new", {})
                summary.setdefault((name, n), []).append({**result, "beats": trained.beats_active})
                print(
                    f"  {name:15} {figures['kind_of_head']:6} gate {figures['gate']:.2f} cut {figures['cut']} "
                    f"penalties {figures['penalty']}/{figures['added_penalty']} "
                    f"oof R {figures['train_out_of_fold_recall_at_target']:.3f} "
                    f"bound at cut {figures['cut_precision_lower_bound']} "
                    f"| judge P {judged.get('precision')} (upper {verdict.get('new_precision_upper_bound')}) "
                    f"{'beats' if trained.beats_active else 'does not beat'} | held-out split: P {result['P']:.3f} "
                    f"R {result['R']:.3f} R@.90 {result['R@.90']:.3f} ({time.perf_counter() - started:.0f}s)"
                )
                print(f"    {trained.note}")
    print(f"\nmean over draws x shifts (shipped: R@.90 {base['R@.90']:.3f})")
    for (name, n), rows in summary.items():
        applied = [r["R@.90"] if r["beats"] else base["R@.90"] for r in rows]
        print(
            f"  N={n} {name:15} R@.90 {np.mean([r['R@.90'] for r in rows]):.3f} "
            f"(min {min(r['R@.90'] for r in rows):.3f}); P at cut {np.nanmean([r['P'] for r in rows]):.3f}; "
            f"activated {sum(r['beats'] for r in rows)}/{len(rows)}; R@.90 of the decision applied "
            f"{np.mean(applied):.3f}"
        )


if __name__ == "__main__":
    main()
