"""Non-linear tenant verifiers and the label sample, offline, on the fixed QQP split: recall at precision 0.90 through
the decision rule (gate, conflicts, the follow-up guard of a first turn; recall over every held-out duplicate) on the
whole held-out split (H, 3,641 pairs) and on the 1,000 held-out pairs bench/dedup_learning.py sends (H1000).

Every choice is the product's way: labels picked from the first 3,500 usable train pairs, numbered in pick order as
the database would number them, split 70/30 by `labelled_pairs.label_is_held_out`; penalties and any other setting by
5-fold cross-validation on the 70% at precision 0.90 (`label_inner_fold`); the cut for 0.92 on the out-of-fold
scores. The held-out QQP split is only read for the printed figures ("grid on H" is printed for reference and chooses
nothing).

Candidates:
  - product: `verifier_training.verifier_train` as it ships (pair-v2 towards the shipped weights, the two penalties
    by cross-validation), with the spread of its figure over random 1,000-pair subsets of the held-out split; its
    replica here (`lr_choose`, which the others build on) and the mean of its five fold heads;
  - smoothed criterion: the penalties chosen by mean recall at precision 0.88 / 0.90 / 0.92 instead of at 0.90;
  - lr+nl: the same head with twelve non-linear features of cosine and the lexical ones (hinges, products);
  - mlp: the head's log-odds corrected by a residual stage (`residual_fit`: one hidden layer of 16 tanh units on the
    cosine, the lexical and added features and the log-odds, numpy, deterministic), fitted on the head's out-of-fold
    log-odds, its weight decay or no stage chosen by cross-validation (each decay's held-out figure printed too);
  - gbt: gradient-boosted trees (scikit-learn's HistGradientBoostingClassifier, only here) on the same inputs;
  - sampling: the product head from labels picked by the review queue's rule (`review_queue.review_picks`), 70%
    nearest the gate and 30% uniformly at random (plain, and weighted by inverse pick probability), or all random;
  - clean prior (a diagnostic of the benchmark, not a candidate): the shipped head refitted without the traffic pairs
    (the train split minus the 3,500), alone and as the tenant head's prior.

Usage: nice -n 19 .venv/bin/python bench/dedup_verifier_nonlinear.py [--labels 1000,3000] [--only product,mlp]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

V1 = 2 * 384 + 1 + 13  # pair-v1 columns
COSINE = 768
LOW = list(range(COSINE, V1 + 7))  # cosine, 13 lexical, 7 pair-v2 extras


def sigmoid(z: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -z))


# The residual stage tried as `mlp` (numpy, deterministic): the head's log-odds z corrected by
# z + output . tanh(hidden @ [standardised low-dimensional features, z * OFFSET_SCALE] + hidden_bias) + output_bias,
# output weights from zero (no correction to start), mean log-loss + decay * |weights|^2, full-batch Adam.
UNITS, EPOCHS, RATE, OFFSET_SCALE = 16, 300, 0.01, 0.25


def residual_fit(low: np.ndarray, logit: np.ndarray, labels: np.ndarray, *, decay: float) -> list[np.ndarray]:
    inputs = np.hstack([low, (logit * OFFSET_SCALE)[:, None]])
    rows, width = inputs.shape
    generator = np.random.default_rng(0)
    bound = 1.0 / np.sqrt(width)
    params = [
        generator.uniform(-bound, bound, (UNITS, width)),
        generator.uniform(-bound, bound, UNITS),
        np.zeros(UNITS),
        np.zeros(1),
    ]
    moments = [np.zeros_like(p) for p in params]
    squares = [np.zeros_like(p) for p in params]
    for step in range(1, EPOCHS + 1):
        hidden_weights, hidden_bias, output, output_bias = params
        hidden = np.tanh(inputs @ hidden_weights.T + hidden_bias)
        error = (sigmoid(logit + hidden @ output + output_bias[0]) - labels) / rows
        back = error[:, None] * output[None, :] * (1 - hidden**2)
        gradients = [
            back.T @ inputs + 2 * decay * hidden_weights,
            back.sum(axis=0),
            hidden.T @ error + 2 * decay * output,
            np.array([error.sum()]),
        ]
        for index, gradient in enumerate(gradients):
            moments[index] = 0.9 * moments[index] + 0.1 * gradient
            squares[index] = 0.999 * squares[index] + 0.001 * gradient**2
            params[index] = params[index] - RATE * (moments[index] / (1 - 0.9**step)) / (
                np.sqrt(squares[index] / (1 - 0.999**step)) + 1e-8
            )
    return params


def residual_apply(params: list[np.ndarray], low: np.ndarray, logit: np.ndarray) -> np.ndarray:
    hidden_weights, hidden_bias, output, output_bias = params
    inputs = np.hstack([low, (logit * OFFSET_SCALE)[:, None]])
    return logit + np.tanh(inputs @ hidden_weights.T + hidden_bias) @ output + output_bias[0]


def nonlinear_columns(features: np.ndarray) -> np.ndarray:
    """Non-linear features of the low-dimensional ones: hinges of the cosine, and the cosine times what says a word
    differs."""
    cosine = features[:, COSINE]
    lexical = features[:, COSINE + 1 : V1]
    extra = features[:, V1 : V1 + 7]
    jaccard, one_side, question_word = lexical[:, 0], lexical[:, 6], lexical[:, 4]
    fewer, more, names = extra[:, 3], extra[:, 4], extra[:, 5]
    return np.column_stack(
        [
            np.maximum(cosine - 0.85, 0),
            np.maximum(cosine - 0.90, 0),
            np.maximum(cosine - 0.95, 0),
            cosine * jaccard,
            cosine * one_side,
            cosine * question_word,
            cosine * np.minimum(fewer, 3),
            cosine * np.minimum(more, 3),
            cosine * np.minimum(names, 2),
            (fewer == 0).astype(float),
            ((fewer == 0) & (more == 0)).astype(float),
            jaccard**2,
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gate", type=float, default=0.76)
    parser.add_argument("--labels", default="1000,3000")
    parser.add_argument("--only", default="", help="comma-separated candidate names (default: all)")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))

    def wanted(name: str) -> bool:
        return not only or name in only

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")
    import django

    django.setup()
    from qqp_split import pair_v2_features, qqp_split_load

    from conversations.dedup.duplicate_model import PairModel, pair_model_default, pair_model_from_dict
    from conversations.review import review_queue_rules as review_queue
    from conversations.training.duplicate_head_training import logistic_fit, recall_at_precision, standardise
    from conversations.training.labelled_pairs import (
        INNER_FOLDS,
        LabelledQuestionPair,
        label_inner_fold,
        label_is_held_out,
    )
    from conversations.training.verifier_heads import ADDED_PENALTIES, PENALTIES, fit_towards, prior_extend
    from conversations.training.verifier_training import cut_choose, verifier_train

    target = 0.90
    split = qqp_split_load(gate=args.gate)
    rows, labels = split.pairs.rows, split.labels
    features = pair_v2_features(split)
    shipped = pair_model_default()
    held = split.held
    held_usable = [i for i in np.where(held)[0] if rows[i]["question1"].strip() and rows[i]["question2"].strip()]
    held_1000 = np.zeros(len(rows), dtype=bool)
    held_1000[held_usable[:1000]] = True
    traffic = split.traffic(gate=args.gate)  # nearest the gate first
    shipped_z = ((features[:, :V1] - shipped.mean) / shipped.scale) @ shipped.weights + shipped.bias

    def judged(scores: np.ndarray, cut: float | None = None) -> str:
        """R@P.90 on all held-out and on the bench's 1,000; with a cut, P and R at it on the bench's 1,000."""
        text = f"H {split.recall_at_target(scores):.3f}  H1000 {split.recall_at_target(scores, held_1000):.3f}"
        if cut is not None:
            hit = split.eligible & held_1000 & (scores >= cut)
            tp = int((hit & (labels == 1)).sum())
            precision = tp / max(int(hit.sum()), 1)
            recall = tp / max(int(labels[held_1000].sum()), 1)
            text += f"  at its cut on H1000: P {precision:.3f} R {recall:.3f}"
        return text

    print(f"shipped head: {judged(shipped_z, np.log(shipped.cut / (1 - shipped.cut)))}", flush=True)

    def subsets(scores: np.ndarray, *, draws: int = 300) -> str:
        """R@P.90 of `scores` and of the shipped head on random 1,000-pair subsets of the usable held-out pairs (as
        many as bench/dedup_learning.py sends): how far one such subset's figure is from another's."""
        generator = np.random.default_rng(0)
        pool = np.array(held_usable)
        own, theirs = [], []
        for _ in range(draws):
            part = np.zeros(len(rows), dtype=bool)
            part[generator.choice(pool, 1000, replace=False)] = True
            own.append(split.recall_at_target(scores, part))
            theirs.append(split.recall_at_target(shipped_z, part))
        own, theirs = np.array(own), np.array(theirs)
        difference = own - theirs
        rest = np.zeros(len(rows), dtype=bool)
        rest[held_usable[1000:]] = True
        return (
            f"1,000-pair subsets: model {own.mean():.3f} sd {own.std():.3f}, shipped {theirs.mean():.3f} sd "
            f"{theirs.std():.3f}, model - shipped {difference.mean():+.3f} sd {difference.std():.3f} (below 0 in "
            f"{(difference < 0).mean():.0%}); the other {int(rest.sum())} held-out pairs: model "
            f"{split.recall_at_target(scores, rest):.3f}, shipped {split.recall_at_target(shipped_z, rest):.3f}"
        )

    def label_set(picked: list[int]) -> dict:
        ids = np.arange(1, len(picked) + 1) + 1000  # the database's label ids, in pick order
        index = np.array(picked)
        is_held = np.array([label_is_held_out(int(i)) for i in ids])
        folds = np.array([label_inner_fold(int(i)) for i in ids])
        return {"index": index, "ids": ids, "held": is_held, "folds": folds}

    def oof_recall(scores: np.ndarray, index: np.ndarray) -> float:
        recall, _ = recall_at_precision(
            scores=scores, labels=labels[index], eligible=split.eligible[index], target=target
        )
        return recall

    def cut_for(scores: np.ndarray, index: np.ndarray) -> float:
        # The product's cut, on every training label unweighted (these labels are not the review queue's picks).
        cut, _ = cut_choose(
            scores=scores,
            labels=labels[index],
            eligible=split.eligible[index],
            random_weights=np.zeros(len(index)),
            precision_target=target,
        )
        return cut

    def smooth_recall(scores: np.ndarray, index: np.ndarray) -> float:
        """Mean recall at precision 0.88, 0.90 and 0.92: the target's criterion, less noisy on few labels."""
        return float(
            np.mean(
                [
                    recall_at_precision(scores=scores, labels=labels[index], eligible=split.eligible[index], target=t)[
                        0
                    ]
                    for t in (0.88, 0.90, 0.92)
                ]
            )
        )

    def lr_choose(
        full: np.ndarray,
        ls: dict,
        *,
        prior: PairModel,
        weights: np.ndarray | None = None,
        grid: list | None = None,
        criterion=None,  # noqa: ANN001
    ) -> dict:
        """The product's choice, on any feature matrix whose first V1 columns are pair-v1's: penalties by 5-fold
        cross-validation at precision 0.90 on the training labels, fit on all of them; logits of every pair."""
        train_index = ls["index"][~ls["held"]]
        folds = ls["folds"][~ls["held"]]
        weight = np.ones(len(train_index)) if weights is None else weights[~ls["held"]]
        extended = prior_extend(prior, features=full[train_index])
        standardised = (full - extended.mean) / extended.scale
        choices = []
        for penalty, added in grid or [(p, a) for p in PENALTIES for a in ADDED_PENALTIES]:
            oof = np.zeros(len(train_index))
            fold_logits = np.zeros(len(full))
            for fold in range(INNER_FOLDS):
                fit_on, score_on = folds != fold, folds == fold
                w, b = weighted_fit(
                    standardised[train_index[fit_on]],
                    labels[train_index[fit_on]],
                    prior=extended,
                    penalty=penalty,
                    added=added,
                    sample_weight=weight[fit_on],
                )
                oof[score_on] = standardised[train_index[score_on]] @ w + b
                fold_logits += (standardised @ w + b) / INNER_FOLDS
            choices.append((round((criterion or oof_recall)(oof, train_index), 3), penalty, added, oof, fold_logits))
        recall, penalty, added, oof, fold_logits = max(choices, key=lambda c: (c[0], c[1], c[2]))
        w, b = weighted_fit(
            standardised[train_index],
            labels[train_index],
            prior=extended,
            penalty=penalty,
            added=added,
            sample_weight=weight,
        )
        return {
            "z": standardised @ w + b,
            "cut": cut_for(oof, train_index),
            "penalty": penalty,
            "added": added,
            "oof_recall": recall,
            "oof": oof,
            "standardised": standardised,
            "prior": extended,
            "fold_average": fold_logits,
        }

    def weighted_fit(x, y, *, prior, penalty, added, sample_weight):  # noqa: ANN001, ANN202
        if sample_weight is None or np.allclose(sample_weight, 1.0):
            return fit_towards(x, y.astype(float), prior=prior, penalty=penalty, added_penalty=added, known=V1)
        rows_, columns = x.shape
        design = np.hstack([x, np.ones((rows_, 1))])
        start = np.append(prior.weights, prior.bias)
        theta = start.copy()
        ridge = np.full(columns + 1, penalty)
        ridge[V1:columns] = added
        ridge[-1] = 1e-6
        for _ in range(50):
            p = sigmoid(design @ theta)
            gradient = design.T @ (sample_weight * (p - y)) + ridge * (theta - start)
            hessian = (design * (sample_weight * p * (1 - p))[:, None]).T @ design + np.diag(ridge)
            step = np.linalg.solve(hessian, gradient)
            theta -= step
            if np.abs(step).max() < 1e-8:
                break
        return theta[:-1], float(theta[-1])

    def judge_labels(z: np.ndarray, ls: dict, cut: float) -> str:
        """The activation test: on the held-out 30% of the labels, the model at its cut against the shipped head
        re-cut at its best for the target."""
        index = ls["index"][ls["held"]]
        eligible = split.eligible[index]
        hit = eligible & (z[index] >= cut)
        tp = int((hit & (labels[index] == 1)).sum())
        precision = tp / max(int(hit.sum()), 1)
        shipped_recall = oof_recall(shipped_z[index], index)
        model_recall = oof_recall(z[index], index)
        duplicates = max(int(labels[index].sum()), 1)
        beats = precision >= target and tp > round(shipped_recall * duplicates)
        return (
            f"judge labels ({len(index)}): model R@.90 {model_recall:.3f}, at cut P {precision:.3f} R "
            f"{tp / duplicates:.3f}; shipped R@.90 {shipped_recall:.3f}; {'ACTIVATES' if beats else 'candidate'}"
        )

    def stage_two(base: dict, ls: dict, *, kind: str) -> None:
        """A second stage on the product head's log-odds: fitted on the chosen penalties' out-of-fold log-odds of
        the training labels (from heads that did not see them), its own setting by cross-validation at precision
        0.90; `mlp` may also choose no stage."""
        train_index = ls["index"][~ls["held"]]
        folds = ls["folds"][~ls["held"]]
        low_mean, low_scale = standardise(features[train_index][:, LOW])
        low = (features[:, LOW] - low_mean) / low_scale
        crossfit = base["oof"]
        y = labels[train_index]
        if kind == "mlp":
            grid = [{"decay": d} for d in (1e-3, 1e-2, 1e-1)]
        else:
            grid = [{"max_iter": m, "learning_rate": 0.05, "max_depth": d} for m in (100, 300) for d in (2, 3)]

        def fit_score(fit_rows, score_offset, score_low, setting):  # noqa: ANN001, ANN202
            if kind == "mlp":
                params = residual_fit(low[train_index[fit_rows]], crossfit[fit_rows], y[fit_rows], **setting)
                return residual_apply(params, score_low, score_offset)
            from sklearn.ensemble import HistGradientBoostingClassifier

            model = HistGradientBoostingClassifier(
                min_samples_leaf=20, l2_regularization=1.0, random_state=0, early_stopping=False, **setting
            )
            model.fit(np.column_stack([crossfit[fit_rows], low[train_index[fit_rows]]]), y[fit_rows])
            return model.decision_function(np.column_stack([score_offset, score_low]))

        choices = [(base["oof_recall"], "no stage", crossfit, None)] if kind == "mlp" else []
        for setting in grid:
            oof = np.zeros(len(train_index))
            for fold in range(INNER_FOLDS):
                fit_rows = np.where(folds != fold)[0]
                score_rows = np.where(folds == fold)[0]
                oof[score_rows] = fit_score(fit_rows, crossfit[score_rows], low[train_index[score_rows]], setting)
            choices.append((round(oof_recall(oof, train_index), 3), str(setting), oof, setting))
            started = time.perf_counter()
            z = fit_score(np.arange(len(train_index)), base["z"], low, setting)
            seconds = time.perf_counter() - started
            print(
                f"    {kind} {setting}: out-of-fold R@.90 {choices[-1][0]:.3f}; fit {seconds:.1f}s; "
                f"forced: {judged(z, cut_for(oof, train_index))}",
                flush=True,
            )
        recall, name, oof, setting = max(choices, key=lambda c: (c[0], c[3] is None))
        z = base["z"] if setting is None else fit_score(np.arange(len(train_index)), base["z"], low, setting)
        cut = cut_for(oof, train_index)
        print(f"  {kind:<22} chosen {name} (oof {recall:.3f}): {judged(z, cut)}")
        print(f"  {'':<22} {judge_labels(z, ls, cut)}", flush=True)

    lns = [int(x) for x in args.labels.split(",")]
    for n in lns:
        ls = label_set(traffic[:n])
        print(f"N={n}: {int((~ls['held']).sum())} training labels, {int(ls['held'].sum())} judge labels", flush=True)
        pairs = [
            LabelledQuestionPair(
                question=rows[i]["question1"],
                stored_question=rows[i]["question2"],
                is_duplicate=bool(labels[i]),
                source="support",
                label_id=int(label_id),
            )
            for i, label_id in zip(ls["index"], ls["ids"], strict=True)
        ]
        if wanted("product"):
            started = time.perf_counter()
            trained = verifier_train(
                pairs=pairs,
                first=split.first[ls["index"]],
                second=split.second[ls["index"]],
                prior=shipped,
                active=shipped,
                threshold=args.gate,
                precision_target=target,
                progress=lambda *_: None,
                meta={},
            )
            model = pair_model_from_dict(trained.payload)
            z = ((features - model.mean) / model.scale) @ model.weights + model.bias
            f = trained.figures
            cut = np.log(model.cut / (1 - model.cut)) if model.cut < 1 else np.inf
            print(
                f"  {'product':<22} penalty {f['penalty']:g}/{f['added_penalty']:g} "
                f"(oof {f['train_out_of_fold_recall_at_target']:.3f}, {time.perf_counter() - started:.1f}s): "
                f"{judged(z, cut)}"
            )
            print(f"  {'':<22} {subsets(z)}")
            print(
                f"  {'':<22} its judge: model {f['held_out_recall_at_target']:.3f} vs active "
                f"{f['active_held_out_recall_at_target']:.3f}; beats {trained.beats_active}",
                flush=True,
            )
        base = lr_choose(features, ls, prior=shipped)
        if wanted("product"):
            print(
                f"  {'product (replica)':<22} {base['penalty']:g}/{base['added']:g}: {judged(base['z'], base['cut'])}"
            )
            print(f"  {'':<22} {judge_labels(base['z'], ls, base['cut'])}", flush=True)
            print(f"  {'fold average':<22} the 5 fold heads' mean logit: {judged(base['fold_average'], base['cut'])}")
        if wanted("oracle"):
            cells = []
            train_index = ls["index"][~ls["held"]]
            for penalty in PENALTIES:
                for added in ADDED_PENALTIES:
                    w, b = fit_towards(
                        base["standardised"][train_index],
                        labels[train_index].astype(float),
                        prior=base["prior"],
                        penalty=penalty,
                        added_penalty=added,
                        known=V1,
                    )
                    z = base["standardised"] @ w + b
                    cells.append(f"{penalty:g}/{added:g} {split.recall_at_target(z):.3f}")
            print("  grid on H (for reference, never a choice): " + ", ".join(cells), flush=True)
        if wanted("smooth"):
            one = lr_choose(features, ls, prior=shipped, criterion=smooth_recall)
            print(f"  {'smoothed criterion':<22} {one['penalty']:g}/{one['added']:g}: {judged(one['z'], one['cut'])}")
            print(f"  {'':<22} {judge_labels(one['z'], ls, one['cut'])}", flush=True)
        if wanted("lr+nl"):
            full = np.hstack([features, nonlinear_columns(features)])
            nl = lr_choose(full, ls, prior=shipped)
            print(f"  {'lr+nl':<22} {nl['penalty']:g}/{nl['added']:g}: {judged(nl['z'], nl['cut'])}")
            print(f"  {'':<22} {judge_labels(nl['z'], ls, nl['cut'])}", flush=True)
        if wanted("mlp"):
            stage_two(base, ls, kind="mlp")
        if wanted("gbt"):
            stage_two(base, ls, kind="gbt")
        if wanted("sampling"):
            pool = traffic  # every decision with a stored question in the tenant's traffic
            generator = np.random.default_rng(19)
            shuffled = list(generator.permutation(pool))
            near = traffic[: int(0.7 * n)]
            near_set = set(near)
            rest = [i for i in shuffled if i not in near_set]
            random_share = rest[: n - len(near)]
            mixed = near + random_share
            pick_probability = np.concatenate(
                [np.ones(len(near)), np.full(len(random_share), len(random_share) / max(len(rest), 1))]
            )
            candidates = [
                review_queue.ReviewCandidate(
                    event_id=int(i),
                    similarity=float(split.cosine[i]),
                    gate=args.gate,
                    probability=float(sigmoid(shipped_z[i])),
                    cut=shipped.cut,
                    flagged=False,
                )
                for i in pool
            ]
            queue = [pick.event_id for pick in review_queue.review_picks(candidates=candidates, quota=n)]
            for name, picked, weights in (
                ("queue rule", queue, None),
                ("70% near + 30% random", mixed, None),
                ("  weighted 1/p", mixed, 1.0 / pick_probability),
                ("all random", shuffled[:n], None),
            ):
                if len(picked) < n:
                    name += f" ({len(picked)} picks)"
                ls_s = label_set(picked)
                one = lr_choose(features, ls_s, prior=shipped, weights=weights)
                print(f"  {'sample ' + name:<22} {one['penalty']:g}/{one['added']:g}: {judged(one['z'], one['cut'])}")
                print(f"  {'':<22} {judge_labels(one['z'], ls_s, one['cut'])}", flush=True)
        if wanted("clean"):
            not_traffic = np.array(sorted(set(np.where(split.train)[0]) - set(traffic)))
            mean, scale = standardise(features[not_traffic][:, :V1])
            w, b = logistic_fit((features[not_traffic][:, :V1] - mean) / scale, labels[not_traffic], penalty=1000.0)
            clean = PairModel(weights=w, bias=b, mean=mean, scale=scale, cut=shipped.cut, dimension=384)
            clean_z = ((features[:, :V1] - mean) / scale) @ w + b
            print(f"  {'clean prior alone':<22} ({len(not_traffic)} pairs): {judged(clean_z)}")
            one = lr_choose(features, ls, prior=clean)
            print(f"  {'clean prior + labels':<22} {one['penalty']:g}/{one['added']:g}: {judged(one['z'], one['cut'])}")
            print(f"  {'':<22} {judge_labels(one['z'], ls, one['cut'])}", flush=True)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
